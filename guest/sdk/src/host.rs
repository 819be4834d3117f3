//! The only module that calls the runner's imports.
//!
//! Everything else in the plugin is plain Rust over plain data, so it can be
//! unit tested natively; this module turns WIT calls into those plain types.

use crate::bindings::settle::plugin::outbound::{self, FetchError};
use crate::bindings::settle::plugin::runner;
use crate::bindings::wasi::clocks::{monotonic_clock, wall_clock};
use crate::bindings::wasi::config::store as config;
use crate::bindings::wasi::keyvalue::{atomics, batch, store};
use crate::bindings::wasi::random::random;

pub use runner::{Level, Swap};

/// Milliseconds since the Unix epoch, from the runner's wall clock.
pub fn now_ms() -> u64 {
    let t = wall_clock::now();
    t.seconds * 1000 + u64::from(t.nanoseconds / 1_000_000)
}

/// Blocks the call for `ms` milliseconds on the monotonic clock.
///
/// For the rare tool that must pace what it sends while the request is
/// open (progress, log messages); anything longer belongs in a task woken
/// by [`schedule`], since the runner bounds each call with a deadline.
pub fn sleep_ms(ms: u64) {
    monotonic_clock::subscribe_duration(ms.saturating_mul(1_000_000)).block();
}

/// `len` random bytes from the runner (`wasi:random`), e.g. for a key.
pub fn random_bytes(len: u64) -> Vec<u8> {
    random::get_random_bytes(len)
}

/// 128 random bits as 32 lower-case hex digits: an opaque task id that is
/// safe to treat as a bearer handle.
pub fn random_id() -> String {
    random::get_random_bytes(16)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A configuration value handed over by the runner, if set.
pub fn config(key: &str) -> Result<Option<String>, String> {
    config::get(key).map_err(|e| match e {
        config::Error::Upstream(m) | config::Error::Io(m) => format!("config {key}: {m}"),
    })
}

/// Every configuration value handed over by the runner, in one host call:
/// a plugin that reads many keys on every call pays one crossing instead of
/// one per key.
pub fn config_all() -> Result<Vec<(String, String)>, String> {
    config::get_all().map_err(|e| match e {
        config::Error::Upstream(m) | config::Error::Io(m) => format!("config: {m}"),
    })
}

/// Writes a line to the runner's log, which adds the tenant.
pub fn log(level: Level, message: &str) {
    runner::log(level, message);
}

/// Asks the runner to advance `task_id` at `at_ms`, together with others of
/// the same group.
pub fn schedule(task_id: &str, group: &str, at_ms: u64) -> Result<(), String> {
    runner::schedule(&[runner::Wake {
        task_id: task_id.to_string(),
        group: group.to_string(),
        at_ms,
    }])
    .map_err(|e| schedule_error(e, "wakes", 1))
}

/// Asks the runner for several wakes in one call, so they are made durable
/// together: `(task id, group, at ms)` each.
pub fn schedule_many(wakes: &[(&str, &str, u64)]) -> Result<(), String> {
    let wakes: Vec<runner::Wake> = wakes
        .iter()
        .map(|(task_id, group, at_ms)| runner::Wake {
            task_id: task_id.to_string(),
            group: group.to_string(),
            at_ms: *at_ms,
        })
        .collect();
    runner::schedule(&wakes).map_err(|e| schedule_error(e, "wakes", wakes.len()))
}

/// Stops waking these tasks.
pub fn unschedule(task_ids: &[String]) -> Result<(), String> {
    runner::unschedule(task_ids).map_err(|e| schedule_error(e, "tasks", task_ids.len()))
}

/// Tells the runner these ended tasks are being removed, before their
/// records go: it stops answering `tasks/get` for them from the views it
/// kept. If this fails, keep the records and try again later.
pub fn forget_tasks(task_ids: &[String]) -> Result<(), String> {
    runner::forget_tasks(task_ids).map_err(|e| schedule_error(e, "tasks", task_ids.len()))
}

/// The runner's refusal as a message, the way a plugin passes it on.
fn schedule_error(error: runner::ScheduleError, what: &str, given: usize) -> String {
    match error {
        runner::ScheduleError::TooMany(limit) => {
            format!("at most {limit} {what} per call, not {given}")
        }
        runner::ScheduleError::Store(message) => message,
    }
}

pub use runner::{ListKind, LogLevel};

/// Tells the runner a list the plugin serves changed.
pub fn list_changed(kind: ListKind) {
    runner::list_changed(kind);
}

/// Reports progress of the request being served (ignored without a
/// progress token).
pub fn progress(progress: f64, total: Option<f64>, message: Option<&str>) {
    runner::progress(progress, total, message);
}

/// Sends an MCP log message to the client of the request being served, if
/// it asked for this level.
pub fn notify_log(level: LogLevel, logger: Option<&str>, data: &str) {
    runner::notify_log(level, logger, data);
}

/// Tells the runner a resource changed, so its subscribers hear of it.
pub fn resource_updated(uri: &str) {
    runner::resource_updated(uri);
}

/// Tells the runner a task changed, so listeners and waiting callers see it.
pub fn task_changed(view: &crate::bindings::settle::plugin::types::TaskView) {
    runner::task_changed(view);
}

/// The tenant's key-value bucket.
pub struct Kv {
    bucket: store::Bucket,
}

/// Attempts at a compare-and-swap before giving up: a write loses the race
/// only to another write of the same key, so this bounds a pathological loop,
/// not a normal one. Public so that a plugin's own read-decide-swap loops
/// (over [`Kv::swap_many`]) give up where a single compare-and-swap does.
pub const MAX_CAS_ATTEMPTS: usize = 16;

/// The error of a compare-and-swap loop on `key` that ran out of attempts.
pub fn cas_gave_up(key: &str) -> String {
    format!("store: {key} kept changing; gave up after {MAX_CAS_ATTEMPTS} attempts")
}

/// What a compare-and-swap update wants to do with the current value.
pub enum CasUpdate<T> {
    /// Write this value and return `T`.
    Write(Vec<u8>, T),
    /// Leave the key as it is and return `T`.
    Keep(T),
}

impl Kv {
    /// Opens the bucket the runner gives this tenant.
    pub fn open() -> Result<Kv, String> {
        let bucket = store::open("default").map_err(kv_error)?;
        Ok(Kv { bucket })
    }

    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.bucket.get(key).map_err(kv_error)
    }

    /// Reads many keys in one round trip; missing keys are `None`.
    pub fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, String> {
        let found = batch::get_many(&self.bucket, keys).map_err(kv_error)?;
        Ok(found.into_iter().map(|e| e.map(|(_, v)| v)).collect())
    }

    pub fn delete(&self, key: &str) -> Result<(), String> {
        self.bucket.delete(key).map_err(kv_error)
    }

    /// Writes many keys in one call; the runner makes them durable together.
    pub fn set_many(&self, pairs: &[(String, Vec<u8>)]) -> Result<(), String> {
        batch::set_many(&self.bucket, pairs).map_err(kv_error)
    }

    /// Removes many keys in one call; a missing key is not an error.
    pub fn delete_many(&self, keys: &[String]) -> Result<(), String> {
        batch::delete_many(&self.bucket, keys).map_err(kv_error)
    }

    /// Writes every swap's value if every key still holds what its swap
    /// saw, in one store commit; otherwise writes nothing and returns the
    /// positions of the swaps whose key changed (read those again). Empty:
    /// all were written. At most 10,000 keys a call.
    pub fn swap_many(&self, swaps: &[Swap]) -> Result<Vec<u32>, String> {
        runner::swap_many(swaps).map_err(|e| schedule_error(e, "keys", swaps.len()))
    }

    /// Reads `key`, lets `update` decide, and writes only if nobody wrote the
    /// key in between; retries with the fresh value when somebody did. This is
    /// what keeps a terminal task terminal when a cancel races a completion.
    pub fn cas_update<T>(
        &self,
        key: &str,
        mut update: impl FnMut(Option<&[u8]>) -> Result<CasUpdate<T>, String>,
    ) -> Result<T, String> {
        let mut cas = atomics::Cas::new(&self.bucket, key).map_err(kv_error)?;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let current = cas.current().map_err(kv_error)?;
            match update(current.as_deref())? {
                CasUpdate::Keep(out) => return Ok(out),
                CasUpdate::Write(value, out) => match atomics::swap(cas, &value) {
                    Ok(()) => return Ok(out),
                    Err(atomics::CasError::CasFailed(fresh)) => cas = fresh,
                    Err(atomics::CasError::StoreError(e)) => return Err(kv_error(e)),
                },
            }
        }
        Err(cas_gave_up(key))
    }
}

fn kv_error(e: store::Error) -> String {
    match e {
        store::Error::NoSuchStore => "store: no such bucket".to_string(),
        store::Error::AccessDenied => "store: access denied".to_string(),
        store::Error::Other(m) => format!("store: {m}"),
    }
}

/// An HTTP request for [`send`].
pub struct HttpRequest<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub bearer: Option<&'a str>,
    pub json_body: Option<Vec<u8>>,
    /// The whole exchange's deadline, from connecting to the answer's last
    /// byte: a device that answers one byte a second still ends in time.
    pub timeout_ms: u64,
    /// The largest answer body taken; a larger one is an error, read no
    /// further than one chunk past the limit.
    pub max_body_bytes: usize,
}

pub struct HttpResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request produced no response.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpError {
    /// The runner's outbound policy refused the destination.
    Denied(String),
    /// The destination did not answer in time.
    Timeout(String),
    /// Anything else on the way (refused connection, DNS, protocol).
    Failed(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Denied(m) | HttpError::Timeout(m) | HttpError::Failed(m) => f.write_str(m),
        }
    }
}

/// A sensible [`HttpRequest::max_body_bytes`]: a device API answers in a
/// few hundred bytes, and the plugin's memory is bounded by the runner.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// Sends one request through the runner's `outbound.fetch` and reads the
/// whole response: one host call, where `wasi:http` took some twenty and
/// two hand-overs between the runner's threads.
pub fn send(request: &HttpRequest<'_>) -> Result<HttpResponse, HttpError> {
    // Messages show the URL without its query: a query may carry a key
    // (`?apiKey=...`), and these messages reach callers and logs.
    let shown = request.url.split('?').next().unwrap_or_default();
    crate::url::Url::parse(request.url)
        .map_err(|e| HttpError::Failed(e.replace(request.url, shown)))?;
    let mut headers: Vec<(String, Vec<u8>)> =
        vec![("accept".to_string(), b"application/json".to_vec())];
    if let Some(token) = request.bearer {
        headers.push((
            "authorization".to_string(),
            format!("Bearer {token}").into_bytes(),
        ));
    }
    if request.json_body.is_some() {
        headers.push(("content-type".to_string(), b"application/json".to_vec()));
    }
    let answer = outbound::fetch(&outbound::HttpRequest {
        method: request.method.to_string(),
        url: request.url.to_string(),
        headers,
        body: request.json_body.clone(),
        timeout_ms: request.timeout_ms,
        max_body_bytes: request.max_body_bytes as u64,
    });
    match answer {
        Ok(response) => Ok(HttpResponse {
            status: response.status,
            body: response.body,
        }),
        Err(FetchError::Denied) => Err(HttpError::Denied(format!(
            "outbound request to {shown} denied: its origin is not on this tenant's allow-list"
        ))),
        Err(FetchError::Late(ms)) => Err(HttpError::Timeout(format!(
            "{shown} did not finish answering within {ms} ms"
        ))),
        Err(FetchError::TooLarge(limit)) => Err(HttpError::Failed(format!(
            "response from {shown} is larger than {limit} bytes"
        ))),
        Err(FetchError::Refused) => Err(HttpError::Failed(format!("{shown}: connection refused"))),
        Err(FetchError::Failed(why)) => Err(HttpError::Failed(format!("{shown}: {why}"))),
    }
}
