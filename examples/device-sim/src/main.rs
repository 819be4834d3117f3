//! Run with `cargo run -p device-sim -- --help`, e.g.
//! `cargo run -p device-sim -- --addr 127.0.0.1:8081 --delay-ms 2000 --fault ac-living=offline`.
//!
//! The binary only parses flags, sets up logging and serves; everything else lives in the
//! library so tests can run the same simulator in-process.

use std::io::Write;

use anyhow::Context;
use clap::Parser;
use device_sim::{Sim, cli::Args, serve};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // stdout carries only the "listening" line that scripts wait for.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();

    let addr = args.addr;
    let sim = Sim::new(args.into_config()).context("invalid simulator configuration")?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "device-sim listening on http://{local}")?;
    stdout.flush()?;
    drop(stdout);
    tracing::info!(
        addr = %local,
        devices = sim.devices().count(),
        token = sim.token().is_some(),
        "serving"
    );

    serve(listener, sim, shutdown_signal())
        .await
        .context("serving")?;
    tracing::info!("stopped");
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
