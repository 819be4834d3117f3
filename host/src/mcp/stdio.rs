//! MCP over stdio: newline-delimited JSON-RPC on stdin and stdout.
//!
//! rmcp runs the protocol on a pair of in-process pipes; this module sits
//! between them and the real stdin/stdout so that
//! - a line that is not JSON-RPC gets a `-32700`/`-32600` answer (rmcp would
//!   drop it silently),
//! - a notification before the first request is dropped (rmcp would end the
//!   session on it),
//! - an over-long line is refused without reading it into memory,
//! - and only one writer ever touches stdout, so lines never interleave.

use super::frame;
use super::handler::Settle;
use futures::StreamExt;
use rmcp::ServiceExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

/// The longest line accepted from the client.
pub const MAX_LINE_BYTES: usize = 4 << 20;

/// Serves one client on `input`/`output` until the client closes its input
/// or `stop` is cancelled. Calls in flight are answered before returning.
pub async fn serve<R, W>(
    settle: Settle,
    input: R,
    output: W,
    stop: CancellationToken,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_rmcp, rmcp_in) = tokio::io::duplex(1 << 20);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 20);
    let (errors, error_lines) = mpsc::channel::<String>(64);

    let writer = tokio::spawn(write_out(output, from_rmcp, error_lines));
    let drain = settle.drain().clone();
    let server = tokio::spawn(async move {
        match settle.serve((rmcp_in, rmcp_out)).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::info!("stdio session ended before it started: {e}"),
        }
    });

    let mut lines = FramedRead::new(input, LinesCodec::new_with_max_length(MAX_LINE_BYTES));
    let mut started = false;
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            _ = stop.cancelled() => break,
        };
        let line = match line {
            None => break,
            Some(Ok(line)) => line,
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                let rejection = frame::Rejection {
                    code: frame::INVALID_REQUEST,
                    message: format!("Invalid request: message longer than {MAX_LINE_BYTES} bytes"),
                    id: serde_json::Value::Null,
                };
                let _ = errors.send(rejection.to_json().to_string()).await;
                continue;
            }
            Some(Err(LinesCodecError::Io(e))) => {
                tracing::warn!("reading stdin: {e}");
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        match frame::check(line.as_bytes()) {
            Err(rejection) => {
                tracing::debug!("rejected stdio message: {}", rejection.message);
                let _ = errors.send(rejection.to_json().to_string()).await;
            }
            Ok(mut message) => {
                let is_request = message.get("id").is_some() && message.get("method").is_some();
                let line = if super::listen::rename_listen(&mut message) {
                    message.to_string()
                } else {
                    line
                };
                if !started && !is_request {
                    tracing::debug!("dropped a message that arrived before the first request");
                    continue;
                }
                started |= is_request;
                if to_rmcp.write_all(line.as_bytes()).await.is_err()
                    || to_rmcp.write_all(b"\n").await.is_err()
                {
                    break;
                }
            }
        }
    }
    // Let calls in flight finish, then close rmcp's input: it writes the
    // answers it holds and stops.
    let left = drain.wait_idle(crate::drain::DRAIN_LIMIT).await;
    if left > 0 {
        tracing::warn!("{left} calls still running; closing stdio anyway");
    }
    drop(to_rmcp);
    drop(errors);
    let _ = server.await;
    let _ = writer.await;
    Ok(())
}

/// The one writer of `output`: rmcp's lines and our error lines, each whole.
async fn write_out<W: AsyncWrite + Unpin>(
    mut output: W,
    from_rmcp: tokio::io::DuplexStream,
    mut error_lines: mpsc::Receiver<String>,
) {
    let mut rmcp_lines = BufReader::new(from_rmcp).lines();
    let (mut rmcp_open, mut errors_open) = (true, true);
    while rmcp_open || errors_open {
        let line = tokio::select! {
            line = rmcp_lines.next_line(), if rmcp_open => match line {
                Ok(Some(line)) => line,
                _ => { rmcp_open = false; continue; }
            },
            line = error_lines.recv(), if errors_open => match line {
                Some(line) => line,
                None => { errors_open = false; continue; }
            },
        };
        if output.write_all(line.as_bytes()).await.is_err()
            || output.write_all(b"\n").await.is_err()
            || output.flush().await.is_err()
        {
            return;
        }
    }
}
