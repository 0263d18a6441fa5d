use clap::Parser;

/// mimalloc instead of the system allocator: the request path allocates and
/// frees many small buffers across threads, which glibc's malloc does with
/// more contention and bookkeeping. Its 2.x series (the crate's `v2`
/// feature), because the 3.x default was slower per event on both the
/// unique and the duplicate path (docs/performance.md, the allocator lever).
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
