//! `settle tasks list|show|watch`: a running server's audit trail, for
//! people (tables) and scripts (`--json`).
//!
//! It reads through the server, as any MCP client would: a 2026-07-28
//! `resources/read` of `settle://audit` (the trail the plugin keeps and
//! serves; its query filters it), so it sees exactly one tenant's trail,
//! with that tenant's token. The runner adds no meaning: the plugin owns
//! the records and the filters, and an unknown filter is its error,
//! passed on. `watch` reads again every second and prints what is new.

use crate::cli::{TasksArgs, TasksCommand, TasksFilter};
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The trail's URI (served by the plugin).
const AUDIT: &str = "settle://audit";

/// Runs a `settle tasks` subcommand.
pub async fn run(args: TasksArgs) -> anyhow::Result<()> {
    let server = Server {
        url: args.url.parse().context("--url")?,
        token: args.token.clone(),
    };
    match &args.command {
        TasksCommand::List(filter) => {
            let records = server.read(&query(filter)?).await?;
            print(&records, args.json);
        }
        TasksCommand::Show { id } => {
            let records = server.read(&format!("?id={}&limit=1", encode(id))).await?;
            let Some(record) = records.first() else {
                bail!("no record of task {id} in the audit trail");
            };
            if args.json {
                println!("{record}");
            } else {
                println!("{}", serde_json::to_string_pretty(record)?);
            }
        }
        TasksCommand::Watch(filter) => {
            let mut seen: HashSet<String> = HashSet::new();
            let mut first = true;
            loop {
                let records = server.read(&query(filter)?).await?;
                let fresh: Vec<Value> = records
                    .into_iter()
                    .rev()
                    .filter(|r| seen.insert(r["id"].as_str().unwrap_or_default().to_string()))
                    .collect();
                if !fresh.is_empty() || first {
                    print_rows(&fresh, args.json, first);
                }
                first = false;
                tokio::time::sleep(WATCH_INTERVAL).await;
            }
        }
    }
    Ok(())
}

/// How often `watch` reads the trail.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// The trail's query for the filters given.
fn query(filter: &TasksFilter) -> anyhow::Result<String> {
    let mut pairs = Vec::new();
    if let Some(device) = &filter.device {
        pairs.push(format!("device={}", encode(device)));
    }
    if let Some(status) = &filter.status {
        pairs.push(format!("status={}", encode(status)));
    }
    if let Some(since) = &filter.since {
        pairs.push(format!("since={}", since_ms(since, now_ms())?));
    }
    pairs.push(format!("limit={}", filter.limit));
    Ok(format!("?{}", pairs.join("&")))
}

/// `--since`: a time ago (`90s`, `30m`, `12h`, `7d`) or ms since the epoch.
fn since_ms(text: &str, now: u64) -> anyhow::Result<u64> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let (number, unit) = text.split_at(text.len().saturating_sub(1));
    let scale = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => bail!("--since {text:?}: give a time ago (90s, 30m, 12h, 7d) or ms since the epoch"),
    };
    let n: u64 = number.parse().with_context(|| {
        format!("--since {text:?}: give a time ago (90s, 30m, 12h, 7d) or ms since the epoch")
    })?;
    Ok(now.saturating_sub(n * scale))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Percent-encodes a query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A running server's MCP endpoint.
struct Server {
    url: http::Uri,
    token: Option<String>,
}

impl Server {
    /// The trail's records for a query, newest first.
    async fn read(&self, query: &str) -> anyhow::Result<Vec<Value>> {
        let uri = format!("{AUDIT}{query}");
        let body = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "resources/read",
            "params": {
                "uri": uri,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {
                        "name": "settle-tasks",
                        "version": env!("CARGO_PKG_VERSION"),
                    },
                },
            },
        });
        let reply = self.post(&uri, body.to_string()).await?;
        if let Some(error) = reply.get("error") {
            bail!(
                "{}: {}",
                self.url,
                error["message"].as_str().unwrap_or("error")
            );
        }
        let text = reply["result"]["contents"][0]["text"]
            .as_str()
            .with_context(|| format!("{}: the answer holds no audit trail: {reply}", self.url))?;
        let trail: Value = serde_json::from_str(text)
            .with_context(|| format!("{}: the audit trail is not JSON", self.url))?;
        Ok(trail["records"].as_array().cloned().unwrap_or_default())
    }

    /// One POST; the JSON-RPC answer (from JSON or an SSE event).
    async fn post(&self, name: &str, body: String) -> anyhow::Result<Value> {
        use http_body_util::BodyExt;
        let host = self.url.host().context("--url has no host")?;
        if self.url.scheme_str() != Some("http") {
            bail!("--url {}: only http:// is supported", self.url);
        }
        let port = self.url.port_u16().unwrap_or(80);
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .with_context(|| {
                format!(
                    "cannot reach {} (is `settle serve --http` running?)",
                    self.url
                )
            })?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let authority = self.url.authority().map(|a| a.as_str()).unwrap_or(host);
        let path = self.url.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut request = http::Request::post(path)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .header("mcp-method", "resources/read")
            .header("mcp-name", name);
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        let message = text
            .lines()
            .find_map(|l| l.strip_prefix("data:").map(str::trim))
            .filter(|d| !d.is_empty())
            .and_then(|d| serde_json::from_str(d).ok())
            .or_else(|| serde_json::from_str(&text).ok());
        match message {
            Some(message) => Ok(message),
            None => bail!("{}: HTTP {status}: {}", self.url, text.trim()),
        }
    }
}

/// The protocol version spoken.
const PROTOCOL: &str = "2026-07-28";

/// Prints records: one JSON array, or a table.
fn print(records: &[Value], json: bool) {
    if json {
        println!("{}", Value::Array(records.to_vec()));
    } else {
        print_rows(records, false, true);
    }
}

/// Prints rows (one JSON object a line with `--json`), with the header
/// first when asked.
fn print_rows(records: &[Value], json: bool, header: bool) {
    if json {
        for record in records {
            println!("{record}");
        }
        return;
    }
    let rows: Vec<[String; 7]> = records.iter().map(row).collect();
    let head = [
        "ENDED (UTC)",
        "OUTCOME",
        "DEVICE",
        "TOOL",
        "SENT",
        "OBSERVED",
        "CLIENT",
    ]
    .map(String::from);
    let mut widths = head.clone().map(|h| h.len());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 7]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    if header {
        line(&head);
    }
    for row in &rows {
        line(row);
    }
}

fn row(record: &Value) -> [String; 7] {
    let values = |v: &Value| match v.as_object() {
        None => "not sent".to_string(),
        Some(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    };
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let client = match (
        record["client"]["name"].as_str(),
        record["client"]["version"].as_str(),
    ) {
        (Some(name), Some(version)) => format!("{name} {version}"),
        (Some(name), None) => name.to_string(),
        _ => "-".to_string(),
    };
    let observed = match record["observed"].as_object() {
        None => "-".to_string(),
        Some(_) => values(&record["observed"]),
    };
    [
        record["endedAtMs"]
            .as_u64()
            .map(utc)
            .unwrap_or_else(|| "-".into()),
        text(&record["outcome"]),
        text(&record["deviceId"]),
        text(&record["tool"]),
        values(&record["sent"]),
        observed,
        client,
    ]
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) for ms since the epoch.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_709_210_096_000), "2024-02-29 12:34:56");
    }

    #[test]
    fn since_takes_a_time_ago_or_epoch_ms() {
        assert_eq!(since_ms("90s", 100_000).unwrap(), 10_000);
        assert_eq!(since_ms("2h", 10_000_000).unwrap(), 2_800_000);
        assert_eq!(since_ms("1234", 0).unwrap(), 1234);
        assert!(since_ms("yesterday", 0).is_err());
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode("ac-living"), "ac-living");
        assert_eq!(encode("a&b c"), "a%26b%20c");
    }
}
