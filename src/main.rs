use clap::Parser;

/// mimalloc instead of the system allocator: the request path allocates and
/// frees many small buffers across threads, where glibc's malloc measured
/// 12-16 % of the gateway's CPU (docs/design.md, "Fifth pass"). Its 2.x
/// series (the crate's `v2` feature): the 3.x default cost the gateway
/// ~1.5 µs more per event, on the unique and the duplicate path alike
/// (docs/design.md, "Ninth pass").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = hookgate::cli::Cli::parse();
    match hookgate::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookgate: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
