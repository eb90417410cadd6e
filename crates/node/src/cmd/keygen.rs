use gatehouse_registry::canonical::sha256_hex;
use std::process::ExitCode;

/// 256 random bits, shown once; the registry keeps only the digest.
pub fn run() -> anyhow::Result<ExitCode> {
    let key = gatehouse_cluster::node_files::new_key("gate");
    println!("api key (shown once):  {key}");
    println!("apiKeySha256:          {}", sha256_hex(key.as_bytes()));
    Ok(ExitCode::SUCCESS)
}
