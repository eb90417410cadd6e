use super::Output;
use crate::exit::Exit;
use gatehouse_registry::canonical::sha256_hex;

/// 256 random bits, shown once; the registry keeps only the digest.
pub fn run(output: Output) -> anyhow::Result<Exit> {
    let key = gatehouse_cluster::node_files::new_key("gate");
    let digest = sha256_hex(key.as_bytes());
    match output {
        Output::Text => {
            println!("api key (shown once):  {key}");
            println!("apiKeySha256:          {digest}");
        }
        json => json.print_one(&serde_json::json!({"api_key": key, "api_key_sha256": digest})),
    }
    Ok(Exit::Done)
}
