//! Collects `settle::timeline` marks ([`settle::timeline`]) and breaks a
//! run of sequential requests down by stage: the time from each mark to
//! the next, as medians over every request that passed the usual marks in
//! the usual order.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tracing::field::{Field, Visit};

/// The mark a request starts with: [`client_sends`]'s.
const FIRST: &str = "client sends";

/// Marks the client's send of a request (the literal is [`FIRST`]).
pub fn client_sends() {
    settle::timeline!("client sends");
}

/// Marks the client's having the answer, parsed.
pub fn client_has_the_answer() {
    settle::timeline!("client has the answer");
}

static RECORDING: AtomicBool = AtomicBool::new(false);
/// Each mark as its callsite and when: the stage's name is read from the
/// event once per callsite, so a mark costs a clock read and a push.
static MARKS: Mutex<Vec<(Callsite, Instant)>> = Mutex::new(Vec::new());
static NAMES: Mutex<BTreeMap<Callsite, String>> = Mutex::new(BTreeMap::new());

/// A mark's place in the code (its metadata's address).
type Callsite = usize;

/// A subscriber that takes only the marks: no spans, no other events.
struct Marks;

struct Message(Option<String>);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl tracing::Subscriber for Marks {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == settle::timeline::TARGET
    }

    fn event(&self, event: &tracing::Event<'_>) {
        if !RECORDING.load(Ordering::Relaxed) {
            return;
        }
        let at = Instant::now();
        let site = std::ptr::from_ref(event.metadata()) as Callsite;
        MARKS.lock().unwrap().push((site, at));
        NAMES.lock().unwrap().entry(site).or_insert_with(|| {
            let mut message = Message(None);
            event.record(&mut message);
            message.0.unwrap_or_default()
        });
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Starts listening to the marks (once per process) and recording them.
pub fn record() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(Marks)
            .expect("no other subscriber in the benchmark");
    });
    MARKS.lock().unwrap().clear();
    RECORDING.store(true, Ordering::Relaxed);
}

/// A request's marks, in order.
fn shape(request: &[(String, Instant)]) -> Vec<&str> {
    request.iter().map(|m| m.0.as_str()).collect()
}

/// One stage: from one mark to the next.
pub struct Stage {
    pub from: String,
    pub to: String,
    pub p10_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
}

/// Stops recording. Splits the marks into requests at [`FIRST`] (they
/// must have been sequential) and returns the stages of the commonest
/// sequence of marks, with how many requests took it and how many there
/// were.
pub fn stages() -> (Vec<Stage>, usize, usize) {
    RECORDING.store(false, Ordering::Relaxed);
    let names = NAMES.lock().unwrap().clone();
    let marks = std::mem::take(&mut *MARKS.lock().unwrap())
        .into_iter()
        .map(|(site, at)| (names.get(&site).cloned().unwrap_or_default(), at));
    let mut requests: Vec<Vec<(String, Instant)>> = Vec::new();
    for mark in marks {
        match requests.last_mut() {
            Some(request) if mark.0 != FIRST => request.push(mark),
            _ if mark.0 == FIRST => requests.push(vec![mark]),
            _ => {}
        }
    }
    let mut shapes: HashMap<Vec<&str>, usize> = HashMap::new();
    for r in &requests {
        *shapes.entry(shape(r)).or_default() += 1;
    }
    let Some((common, taken)) = shapes.into_iter().max_by_key(|(_, n)| *n) else {
        return (Vec::new(), 0, 0);
    };
    let mut spans: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for r in requests.iter().filter(|r| shape(r) == common) {
        for (i, pair) in r.windows(2).enumerate() {
            spans
                .entry(i)
                .or_default()
                .push((pair[1].1 - pair[0].1).as_secs_f64() * 1e6);
        }
    }
    let stages = spans
        .into_iter()
        .map(|(i, mut us)| {
            us.sort_by(f64::total_cmp);
            let at = |q: f64| us[((us.len() - 1) as f64 * q) as usize];
            Stage {
                from: common[i].to_string(),
                to: common[i + 1].to_string(),
                p10_us: at(0.1),
                p50_us: at(0.5),
                p90_us: at(0.9),
            }
        })
        .collect();
    (stages, taken, requests.len())
}
