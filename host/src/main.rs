//! `settle`: the runner binary. See `settle --help`.

use anyhow::Context;
use settle::app::Runner;
use settle::cli::{Cli, Command, ReloadArgs, ServeArgs};
use settle::config::RunnerConfig;

/// mimalloc rather than glibc's malloc. Under concurrent calls, a profile
/// of `get_device_state` at concurrency 8 had glibc's allocator at about
/// 12 % of the CPU and threads waiting on its arena locks (futex waits
/// under `__lll_lock_wait_private`) at another 5 %; mimalloc keeps a heap
/// per thread.
/// docs/performance.md, "Fifth round", has the before and after.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// The pid file, removed again when the server exits.
struct PidFile(std::path::PathBuf);

impl PidFile {
    fn write(path: &std::path::Path) -> anyhow::Result<PidFile> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("--pid-file {}: cannot write", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = RunnerConfig::from_args(&args)?;
    if args.http.is_none() && config.tenants.len() != 1 {
        anyhow::bail!(
            "stdio serves one tenant, and the tenants file has {}: choose one with --tenant",
            config.tenants.len()
        );
    }
    let ui = config.ui.is_some();
    let runner = Runner::start(config).await?;
    #[cfg(unix)]
    runner.reload_on_sighup()?;
    let _pid_file = args.pid_file.as_deref().map(PidFile::write).transpose()?;
    match args.http {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--http {addr}: cannot listen"))?;
            let local = listener.local_addr()?;
            match &args.config {
                None => tracing::info!("serving MCP at http://{local}/mcp"),
                Some(_) => tracing::info!("serving MCP at http://{local}/t/{{tenant}}/mcp"),
            }
            // Never the token itself: logs are read by more people.
            match (&args.config, ui) {
                (_, false) => {}
                (None, true) => tracing::info!(
                    "serving the live view at http://{local}/ui (open it once as /ui?token=TOKEN)"
                ),
                (Some(_), true) => tracing::info!(
                    "serving the live view at http://{local}/t/{{tenant}}/ui (open it once as ...?token=TOKEN)"
                ),
            }
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

/// `settle reload`: SIGHUP to the server named by a pid file or pid.
fn reload(args: ReloadArgs) -> anyhow::Result<()> {
    let pid = match (args.pid, &args.pid_file) {
        (Some(pid), _) => pid,
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!(
                    "--pid-file {}: cannot read it (is `settle serve --pid-file` running?)",
                    path.display()
                )
            })?;
            text.trim().parse().with_context(|| {
                format!(
                    "--pid-file {}: {:?} is not a process id",
                    path.display(),
                    text.trim()
                )
            })?
        }
        (None, None) => anyhow::bail!("give --pid-file or --pid"),
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .with_context(|| format!("cannot signal process {pid}"))?;
    eprintln!("settle: asked process {pid} to reload its plugins; its log reports each swap");
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(*args).await,
        Command::Reload(args) => reload(args),
        Command::Tasks(args) => settle::tasks::run(args).await,
    }
}

#[tokio::main]
async fn main() {
    init_logging();
    let cli = Cli::parse_args();
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
