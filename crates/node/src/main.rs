//! The `gatehouse` binary: parses the command line and hands over to the library. An error is
//! said once on stderr and ends the process with the code `gatehouse_node::exit` documents.

use clap::Parser;
use gatehouse_node::exit;
use std::process::ExitCode;

/// jemalloc: against glibc's malloc, in back-to-back runs of `scripts/bench-mcp --compare`, it
/// took the gateway's CPU per read-only call from 1.24x to 1.12x agentgateway's sequentially and
/// from 1.18x to 1.06x at 16 sessions, for about 6 MB more resident memory. Its options are
/// baked in when it is built, from `JEMALLOC_SYS_WITH_MALLOC_CONF` in `.cargo/config.toml`.
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
