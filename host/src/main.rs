//! `settle`: the runner binary. See `settle --help`.

use anyhow::Context;
use clap::Parser;
use settle::app::{Runner, RunnerConfig};
use settle::cli::{Cli, Command};

fn init_logging() {
    // stdout belongs to MCP on stdio; logs always go to stderr.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,wasmtime=warn,cranelift=warn".into()),
        )
        .init();
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(e) => {
                    tracing::warn!("cannot watch SIGTERM: {e}");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            let config = RunnerConfig::from_args(&args)?;
            let runner = Runner::start(config).await?;
            match args.http {
                Some(addr) => {
                    let listener = tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("--http {addr}: cannot listen"))?;
                    let local = listener.local_addr()?;
                    tracing::info!("serving MCP at http://{local}/mcp");
                    runner.serve_http(listener, shutdown_signal()).await
                }
                None => {
                    tracing::info!("serving MCP on stdio");
                    runner
                        .serve_stdio(tokio::io::stdin(), tokio::io::stdout(), shutdown_signal())
                        .await
                }
            }
        }
    }
}

#[tokio::main]
async fn main() {
    init_logging();
    let cli = Cli::parse();
    let code = match run(cli).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("settle: {e:#}");
            1
        }
    };
    // Exit here rather than by dropping the runtime: a read of stdin that
    // is still pending cannot be cancelled and would keep the process alive.
    std::process::exit(code)
}
