//! Two proxies that do nothing settle does beyond carrying the device read,
//! so `bench` can show what any server in settle's place pays on the same
//! two cores: the floor under "settle adds" at c=1 and the ceiling over the
//! c=8 ratio.
//!
//! Both serve on axum (settle's server) and read the simulator on keep-alive
//! HTTP/1 connections that the request's own task drives, as settle's
//! outbound pool does (`host/src/capabilities/pool.rs`), so neither pays a
//! hand-over that settle does not. `POST /forward/{device}` sends the
//! sensor answer back as it came. `POST /mcp` takes the same JSON-RPC
//! `tools/call` of `get_device_state` a client sends settle, reads the
//! device it names, and answers with a JSON-RPC result that carries the
//! reading as structured content and as text, as settle's does. Neither
//! checks anything, keeps anything or runs a plugin.

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{Connection, SendRequest};
use serde_json::{Value, json};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;

type Io = hyper_util::rt::TokioIo<TcpStream>;

/// One keep-alive connection to the simulator.
struct Upstream {
    sender: SendRequest<Empty<Bytes>>,
    io: Connection<Io, Empty<Bytes>>,
}

/// Idle connections to the simulator, and where it is.
struct Pool {
    address: String,
    idle: Mutex<Vec<Upstream>>,
}

impl Pool {
    /// GETs `path` on the simulator and returns the whole body.
    async fn get(&self, path: &str) -> anyhow::Result<Bytes> {
        let taken = self.idle.lock().unwrap().pop();
        let mut upstream = match taken {
            Some(upstream) => upstream,
            None => {
                let stream = TcpStream::connect(&self.address).await?;
                stream.set_nodelay(true)?;
                let (sender, io) = hyper::client::conn::http1::handshake(Io::new(stream)).await?;
                Upstream { sender, io }
            }
        };
        let request = http::Request::get(path)
            .header("host", &self.address)
            .body(Empty::new())?;
        let Upstream { sender, io } = &mut upstream;
        let answer = drive(io, async {
            let response = sender.send_request(request).await?;
            anyhow::ensure!(response.status().is_success(), "{}", response.status());
            Ok(response.into_body().collect().await?.to_bytes())
        })
        .await?;
        self.idle.lock().unwrap().push(upstream);
        Ok(answer)
    }
}

/// Polls the connection's I/O beside `f`, in the caller's task.
async fn drive<F: Future>(io: &mut Connection<Io, Empty<Bytes>>, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        // The connection only ends with an error here, which `f` reports.
        let _ = Pin::new(&mut *io).poll(cx);
        f.as_mut().poll(cx)
    })
    .await
}

async fn forward(State(pool): State<Arc<Pool>>, Path(device): Path<String>) -> Bytes {
    pool.get(&format!("/api/v1/devices/{device}/sensors"))
        .await
        .unwrap_or_else(|e| Bytes::from(format!("failed: {e}")))
}

async fn mcp(State(pool): State<Arc<Pool>>, body: Bytes) -> axum::Json<Value> {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let device = request["params"]["arguments"]["device_id"]
        .as_str()
        .unwrap_or_default();
    let result = match pool.get(&format!("/api/v1/devices/{device}/sensors")).await {
        Ok(answer) => {
            let reading: Value = serde_json::from_slice(&answer).unwrap_or_default();
            json!({
                "content": [{"type": "text", "text": reading.to_string()}],
                "structuredContent": reading,
                "isError": false,
            })
        }
        Err(e) => json!({"content": [{"type": "text", "text": e.to_string()}], "isError": true}),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
}

/// Starts both proxies in front of the simulator at `api` (`http://host:port`)
/// and returns their base URL.
pub async fn start(api: &str) -> anyhow::Result<String> {
    let address = api
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("not http: {api}"))?
        .trim_end_matches('/')
        .to_string();
    let pool = Arc::new(Pool {
        address,
        idle: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/forward/{device}", post(forward))
        .route("/mcp", post(mcp))
        .with_state(pool);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}
