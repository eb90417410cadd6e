//! The `gatehouse` binary: parses the command line and hands over to the library. An error is
//! said once on stderr and ends the process with the code `gatehouse_node::exit` documents.

use clap::Parser;
use gatehouse_node::exit;
use std::process::ExitCode;

/// jemalloc: at 16 concurrent MCP sessions it took the gateway's CPU per read-only call from
/// about 102 to 78 us against glibc's malloc (`scripts/bench-mcp`, back to back), for about 6 MB
/// more resident memory.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = gatehouse_node::cli::Cli::parse();
    match gatehouse_node::cli::run(cli) {
        Ok(done) => done.into(),
        Err(e) => {
            eprintln!("error: {}", exit::sentence(&e));
            exit::classify(&e).into()
        }
    }
}
