//! One shutdown signal (Ctrl-C or SIGTERM), fanned out with a `CancellationToken`.

use tokio_util::sync::CancellationToken;

/// Cancels `token` on Ctrl-C or SIGTERM.
pub fn on_signal(token: CancellationToken) {
    tokio::spawn(async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
        tracing::info!("shutdown signal received");
        token.cancel();
    });
}
