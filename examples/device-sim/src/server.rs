//! Serving the simulator: the router, a serve loop with graceful shutdown, and an in-process
//! [`spawn`] for tests.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::sim::{Sim, SimConfig};
use crate::{api, side_door};

/// How long [`RunningSim::shutdown`] lets in-flight requests (e.g. a hanging `flaky` read)
/// finish before it stops the server anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The whole HTTP surface: `/api/v1` (the device API) and `/_sim` (the test side door).
pub fn app(sim: Sim) -> Router {
    Router::new()
        .nest("/api/v1", api::routes(sim.clone()))
        .nest("/_sim", side_door::routes(sim))
}

/// Serves `sim` on `listener` until `shutdown` completes, then lets in-flight requests
/// finish.
pub async fn serve(
    listener: TcpListener,
    sim: Sim,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(sim))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Starts a simulator on `127.0.0.1:0` in a background task. It accepts connections as soon
/// as this returns.
pub async fn spawn(config: SimConfig) -> anyhow::Result<RunningSim> {
    let sim = Sim::new(config).context("invalid simulator configuration")?;
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .context("binding 127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, sim.clone(), async {
        let _ = rx.await;
    }));
    tracing::debug!(%addr, "device-sim spawned");
    Ok(RunningSim {
        addr,
        sim,
        stop: Some(tx),
        task: Some(task),
    })
}

/// A simulator serving in the background. Dropping it stops accepting connections;
/// [`RunningSim::shutdown`] also waits for the server to finish.
#[derive(Debug)]
pub struct RunningSim {
    addr: SocketAddr,
    sim: Sim,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl RunningSim {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The simulator behind the server, for direct inspection and fault injection.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// Stops the server and waits (up to [`SHUTDOWN_GRACE`]) for in-flight requests.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(joined) => joined
                .context("server task panicked")?
                .context("server failed"),
            Err(_) => {
                task.abort();
                tracing::warn!("device-sim did not drain within {SHUTDOWN_GRACE:?}; aborted");
                Ok(())
            }
        }
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
