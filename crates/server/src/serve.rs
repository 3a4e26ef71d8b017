//! Running the node: bind the HTTP and gRPC listeners, run the truncation worker, and shut
//! down gracefully — stop accepting, let in-flight requests (appends) finish, then stop the
//! workers, persist the Disk Views' applied indexes and close the log.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;

use crate::node::Node;

/// The addresses the listeners are bound to (the configured ones, or the ports the system
/// chose for port 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub http: SocketAddr,
    pub grpc: SocketAddr,
}

/// Serve `node` until `shutdown` resolves; `on_bound` hears the bound addresses first.
pub async fn serve(
    node: Arc<Node>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_bound: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    let http = TcpListener::bind(node.config.http_listen)
        .await
        .map_err(|e| anyhow::anyhow!("binding HTTP to {}: {e}", node.config.http_listen))?;
    let grpc = TcpListener::bind(node.config.grpc_listen)
        .await
        .map_err(|e| anyhow::anyhow!("binding gRPC to {}: {e}", node.config.grpc_listen))?;
    on_bound(Bound {
        http: http.local_addr()?,
        grpc: grpc.local_addr()?,
    });
    let (stopping, _) = watch::channel(false);
    let wait = |rx: watch::Receiver<bool>| async move {
        let mut rx = rx;
        let _ = rx.wait_for(|s| *s).await;
    };
    let router = crate::http::router(node.clone());
    let http_stop = wait(stopping.subscribe());
    let http_task = tokio::spawn(async move {
        axum::serve(http, router)
            .with_graceful_shutdown(http_stop)
            .await
    });
    let grpc_task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(crate::grpc::service(node.clone()))
            .serve_with_incoming_shutdown(TcpListenerStream::new(grpc), wait(stopping.subscribe())),
    );
    let truncation = tokio::spawn(node.clone().truncation_worker());
    shutdown.await;
    tracing::info!("shutting down: finishing in-flight requests");
    stopping.send_replace(true);
    // gRPC streams (rides, tails) end when the node stops; HTTP requests finish first.
    let http_result = http_task.await;
    let node_for_stop = node.clone();
    tokio::task::spawn_blocking(move || node_for_stop.shutdown()).await?;
    let grpc_result = grpc_task.await;
    truncation.abort();
    http_result??;
    grpc_result??;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn signals() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
