//! Proxies that do nothing settle does beyond carrying the device exchange,
//! so `bench` can show what any server in settle's place pays on the same
//! two cores: the floor under "settle adds" at c=1, the ceiling over the
//! c=8 ratio, and the ceiling over the creation rate.
//!
//! All serve on axum (settle's server) and speak to the simulator on
//! keep-alive HTTP/1 connections that the request's own task drives, as
//! settle's outbound pool does (`host/src/capabilities/pool.rs`), so none
//! pays a hand-over that settle does not.
//! - `POST /forward/{device}` sends the sensor answer back as it came.
//! - `POST /mcp` takes the JSON-RPC `tools/call` of `get_device_state` a
//!   client sends settle, reads the device it names, and answers with a
//!   JSON-RPC result carrying the reading as structured content and as
//!   text, as settle's does.
//! - `POST /command` takes a `tools/call` of `set_temperature` and does
//!   the least a durable command can: reads the device, puts a record of
//!   the command on disk, sends the command, puts "sent" on disk, answers
//!   with the task's id. Both writes are fsync'd, in commits shared by
//!   every write waiting when one starts, as settle's store commits.
//!
//! None of them checks anything, keeps anything else, runs a plugin or
//! follows a command to its end.

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{Connection, SendRequest};
use redb::{Database, TableDefinition};
use serde_json::{Value, json};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

type Io = hyper_util::rt::TokioIo<TcpStream>;

/// One keep-alive connection to the simulator.
struct Upstream {
    sender: SendRequest<Full<Bytes>>,
    io: Connection<Io, Full<Bytes>>,
}

/// Idle connections to the simulator, and where it is.
struct Pool {
    address: String,
    idle: Mutex<Vec<Upstream>>,
}

impl Pool {
    /// Sends `method` `path` with `body` to the simulator and returns the
    /// whole answer.
    async fn exchange(&self, method: &str, path: &str, body: Bytes) -> anyhow::Result<Bytes> {
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
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.address)
            .header("content-type", "application/json")
            .body(Full::new(body))?;
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

    async fn read(&self, device: &str) -> anyhow::Result<Bytes> {
        let path = format!("/api/v1/devices/{device}/sensors");
        self.exchange("GET", &path, Bytes::new()).await
    }
}

/// Polls the connection's I/O beside `f`, in the caller's task.
async fn drive<F: Future>(io: &mut Connection<Io, Full<Bytes>>, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        // The connection only ends with an error here, which `f` reports.
        let _ = Pin::new(&mut *io).poll(cx);
        f.as_mut().poll(cx)
    })
    .await
}

const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");

/// One write for the journal, and who waits for its commit.
type Job = (String, Vec<u8>, oneshot::Sender<Result<(), String>>);

/// A redb file written by one thread that commits every write waiting when
/// a commit starts together, each commit fsync'd.
struct Journal {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Journal {
    fn open(path: &std::path::Path) -> anyhow::Result<Journal> {
        let db = Database::create(path)?;
        let (jobs, waiting) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            while let Ok(first) = waiting.recv() {
                let mut batch = vec![first];
                batch.extend(waiting.try_iter().take(1023));
                let committed = (|| -> Result<(), redb::Error> {
                    let txn = db.begin_write()?;
                    {
                        let mut table = txn.open_table(RECORDS)?;
                        for (key, value, _) in &batch {
                            table.insert(key.as_str(), value.as_slice())?;
                        }
                    }
                    txn.commit()?;
                    Ok(())
                })()
                .map_err(|e| e.to_string());
                for (_, _, done) in batch {
                    let _ = done.send(committed.clone());
                }
            }
        });
        Ok(Journal {
            jobs: Mutex::new(jobs),
        })
    }

    /// Puts `value` at `key` and returns once it is on disk.
    async fn put(&self, key: String, value: Vec<u8>) -> anyhow::Result<()> {
        let (done, committed) = oneshot::channel();
        self.jobs.lock().unwrap().send((key, value, done))?;
        committed.await?.map_err(anyhow::Error::msg)
    }
}

struct Proxies {
    pool: Pool,
    /// `/command`'s records; only the runs that create have one.
    journal: Option<Journal>,
    next_id: AtomicU64,
}

async fn forward(State(proxies): State<Arc<Proxies>>, Path(device): Path<String>) -> Bytes {
    proxies
        .pool
        .read(&device)
        .await
        .unwrap_or_else(|e| Bytes::from(format!("failed: {e}")))
}

/// A JSON-RPC answer to `request` carrying `result`, or a tool error.
fn answer(request: &Value, result: anyhow::Result<Value>) -> axum::Json<Value> {
    let result = result.unwrap_or_else(
        |e| json!({"content": [{"type": "text", "text": e.to_string()}], "isError": true}),
    );
    axum::Json(json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
}

async fn mcp(State(proxies): State<Arc<Proxies>>, body: Bytes) -> axum::Json<Value> {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let device = request["params"]["arguments"]["device_id"]
        .as_str()
        .unwrap_or_default();
    let result = proxies.pool.read(device).await.map(|answer| {
        let reading: Value = serde_json::from_slice(&answer).unwrap_or_default();
        json!({
            "content": [{"type": "text", "text": reading.to_string()}],
            "structuredContent": reading,
            "isError": false,
        })
    });
    answer(&request, result)
}

async fn command(State(proxies): State<Arc<Proxies>>, body: Bytes) -> axum::Json<Value> {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let result = async {
        let journal = proxies
            .journal
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("this proxy was started without a journal"))?;
        let arguments = &request["params"]["arguments"];
        let device = arguments["device_id"].as_str().unwrap_or_default();
        let target = &arguments["temperature"];
        let baseline: Value = serde_json::from_slice(&proxies.pool.read(device).await?)?;
        // Scattered over the key space as settle's random ids are, so the
        // journal's inserts land all over its tree, not at its end.
        let id = format!(
            "{:032x}",
            proxies.next_id.fetch_add(1, Ordering::Relaxed) as u128 * 0x9e37_79b9_7f4a_7c15
        );
        let mut record = json!({
            "taskId": id, "deviceId": device, "target": target,
            "baseline": baseline, "status": "working", "sent": false,
        });
        journal
            .put(id.clone(), serde_json::to_vec(&record)?)
            .await?;
        let control = format!("/api/v1/devices/{device}/control");
        let command = json!({"target_temperature": target}).to_string();
        let accepted: Value = serde_json::from_slice(
            &proxies
                .pool
                .exchange("POST", &control, Bytes::from(command))
                .await?,
        )?;
        record["sent"] = json!(true);
        record["accepted"] = accepted;
        journal
            .put(id.clone(), serde_json::to_vec(&record)?)
            .await?;
        Ok(json!({"taskId": id, "status": "working", "ttl": 300000}))
    }
    .await;
    answer(&request, result)
}

/// Starts the proxies in front of the simulator at `api` (`http://host:port`)
/// and returns their base URL. `/command` keeps its records in a redb file
/// in `journal_dir`, and answers a tool error without one.
pub async fn start(api: &str, journal_dir: Option<&std::path::Path>) -> anyhow::Result<String> {
    let address = api
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("not http: {api}"))?
        .trim_end_matches('/')
        .to_string();
    let proxies = Arc::new(Proxies {
        pool: Pool {
            address,
            idle: Mutex::new(Vec::new()),
        },
        journal: journal_dir
            .map(|dir| Journal::open(&dir.join("proxy.redb")))
            .transpose()?,
        next_id: AtomicU64::new(1),
    });
    let app = Router::new()
        .route("/forward/{device}", post(forward))
        .route("/mcp", post(mcp))
        .route("/command", post(command))
        .with_state(proxies);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}
