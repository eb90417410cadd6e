//! The `gatehouse` binary: parses the command line and hands over to the library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = gatehouse_node::cli::Cli::parse();
    match gatehouse_node::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
