use super::*;

fn sample() -> (Header, Vec<u8>) {
    let body = br#"[42,{"resources":[]}]"#.to_vec();
    (Header::for_body(&body, 42, 3, 1, 1_700_000_000_000), body)
}

#[test]
fn a_file_decodes_to_its_header_and_body() {
    let (header, body) = sample();
    let file = encode(&header, &body);
    assert!(file.starts_with(b"gatehouse-snapshot\n{\"format\":1,"));
    let (read, read_body) = decode(&file).unwrap();
    assert_eq!(read, header);
    assert_eq!(read_body, body.as_slice());
    assert_eq!(read.body_sha256, sha256_hex(&body));
}

#[test]
fn a_flipped_byte_in_the_body_fails_the_checksum() {
    let (header, body) = sample();
    let mut file = encode(&header, &body);
    let last = file.len() - 3;
    file[last] ^= 0x20;
    assert!(matches!(decode(&file), Err(BackupError::Checksum { .. })));
}

#[test]
fn a_truncated_file_is_refused_with_both_lengths() {
    let (header, body) = sample();
    let file = encode(&header, &body);
    let err = decode(&file[..file.len() - 5]).unwrap_err();
    assert!(
        matches!(err, BackupError::Length { expected, found } if expected == body.len() as u64 && found + 5 == expected),
        "{err}"
    );
    // Cut inside the header line.
    assert!(matches!(decode(&file[..25]), Err(BackupError::HeaderCut)));
}

#[test]
fn another_format_is_named_as_such() {
    let (mut header, body) = sample();
    header.format = 2;
    let err = decode(&encode(&header, &body)).unwrap_err();
    assert!(matches!(err, BackupError::UnknownFormat(2)), "{err}");
    assert!(err.to_string().contains("format 2"));
    // A future header with fields this build does not know is still named by its format.
    let future = b"gatehouse-snapshot\n{\"format\":9,\"chunks\":[1]}\nxx";
    assert!(matches!(decode(future), Err(BackupError::UnknownFormat(9))));
}

#[test]
fn a_file_that_is_no_backup_is_refused() {
    assert!(matches!(
        decode(b"{\"resources\":[]}"),
        Err(BackupError::NotABackup)
    ));
    assert!(matches!(
        decode(b"gatehouse-snapshot\nnot json\n"),
        Err(BackupError::Header(_))
    ));
}
