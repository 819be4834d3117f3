//! A model-based randomized test of the plugin's verdicts.
//!
//! One sequence: a few reference devices ([`device::RefDevice`]), each with
//! its own delay and jitter, first warmed up with a few commands, then
//! driven by a random script: commands (many of them retargets, or back to
//! the value before), cancels, confirmations and answers, faults switched
//! on and off, and changes at the wall. The plugin's real logic runs over an
//! in-memory platform whose clock jumps from one event to the next, with a
//! scheduler that delivers its wakes as the runner would.
//!
//! Every verdict is then checked against what the reference device knows
//! happened ([`Oracle`]). A sequence is fully determined by its seed.

pub mod device;

use device::{Outcome, RefDevice};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde_json::{Value as Json, json};
use settle_devices::app::{self, Caller, Client, Context, Output};
use settle_devices::driver::{Accepted, DeviceInfo, Driver, DriverError, Reading};
use settle_devices::model::{Allowed, Comparison, Field, FieldSpec, Value};
use settle_devices::platform::Platform;
use settle_devices::platform::memory::MemoryPlatform;
use settle_devices::question::QuestionKind;
use settle_devices::settings::Settings;
use settle_devices::task::{FailureReason, Stage, Status, TaskRecord};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// When the virtual clock starts (2026-12-01).
const START_MS: u64 = 1_764_547_200_000;
const TTL_MS: u64 = 300_000;
const HTTP_TIMEOUT_MS: u64 = 5_000;
/// The plugin's gap between reads while a change is expected (its default).
const DENSE_READ_MS: u64 = 200;

/// The world one sequence runs in.
pub struct World {
    pub platform: MemoryPlatform,
    pub devices: RefCell<BTreeMap<String, RefDevice>>,
    rng: RefCell<Xoshiro256PlusPlus>,
    /// Sensor reads the devices answered or failed, in all.
    pub reads: RefCell<u64>,
}

impl World {
    fn new(seed: u64) -> World {
        let platform = MemoryPlatform::new(
            START_MS,
            &[
                ("device_api", "http://reference.invalid"),
                ("ttl_ms", &TTL_MS.to_string()),
                ("http_timeout_ms", &HTTP_TIMEOUT_MS.to_string()),
            ],
        );
        World {
            platform,
            devices: RefCell::new(BTreeMap::new()),
            rng: RefCell::new(Xoshiro256PlusPlus::seed_from_u64(seed)),
            reads: RefCell::new(0),
        }
    }

    fn chance(&self, p: f64) -> bool {
        self.rng.borrow_mut().random_bool(p.clamp(0.0, 1.0))
    }

    fn range(&self, lo: u64, hi: u64) -> u64 {
        self.rng.borrow_mut().random_range(lo..=hi)
    }

    fn pick<'a, T>(&self, items: &'a [T]) -> &'a T {
        &items[self.range(0, items.len() as u64 - 1) as usize]
    }

    fn now(&self) -> u64 {
        self.platform.now_ms()
    }
}

/// The reference devices, as a device API.
struct RefDriver<'w>(&'w World);

impl Driver for RefDriver<'_> {
    fn list_devices(&self) -> Result<Vec<DeviceInfo>, DriverError> {
        Ok(self
            .0
            .devices
            .borrow()
            .keys()
            .map(|id| DeviceInfo {
                id: id.clone(),
                name: id.clone(),
                kind: "air_conditioner".into(),
            })
            .collect())
    }

    fn read(&self, device_id: &str) -> Result<Reading, DriverError> {
        let world = self.0;
        *world.reads.borrow_mut() += 1;
        let (flaky, latency) = {
            let devices = world.devices.borrow();
            let d = devices
                .get(device_id)
                .ok_or_else(|| DriverError::UnknownDevice(device_id.into()))?;
            (d.faults.flaky, d.faults.latency_ms)
        };
        if world.chance(flaky) {
            if std::env::var("VERDICT_DEBUG").is_ok() {
                eprintln!(
                    "{} read {device_id} fails (flaky {flaky})",
                    world.now() - START_MS
                );
            }
            if world.chance(0.5) {
                world.platform.advance(HTTP_TIMEOUT_MS);
                return Err(DriverError::Unreachable("did not answer in time".into()));
            }
            world.platform.advance(latency);
            return Err(DriverError::Unreachable("answered 503".into()));
        }
        // The device answers with its state when the request arrives; the
        // answer takes as long again to come back.
        world.platform.advance(latency / 2);
        let now = world.now();
        let mut devices = world.devices.borrow_mut();
        let (online, values) = devices.get_mut(device_id).unwrap().report(now);
        world.platform.advance(latency - latency / 2);
        if std::env::var("VERDICT_DEBUG").is_ok() {
            eprintln!("{} read {device_id}: {online} {values:?}", now - START_MS);
        }
        Ok(Reading {
            online,
            values,
            ..Reading::default()
        })
    }

    fn send(&self, device_id: &str, command: &[(Field, Value)]) -> Result<Accepted, DriverError> {
        let world = self.0;
        let (latency, jitter_max) = {
            let devices = world.devices.borrow();
            let d = devices
                .get(device_id)
                .ok_or_else(|| DriverError::UnknownDevice(device_id.into()))?;
            (d.faults.latency_ms, d.jitter_ms)
        };
        world.platform.advance(latency / 2);
        let jitter = world.range(0, jitter_max);
        let now = world.now();
        let request_id = world.devices.borrow_mut().get_mut(device_id).unwrap().take(
            now,
            command.iter().cloned().collect(),
            jitter,
        );
        world.platform.advance(latency - latency / 2);
        Ok(Accepted {
            request_id: Some(request_id),
        })
    }

    fn specs(&self, device_id: &str) -> Result<Vec<FieldSpec>, DriverError> {
        if !self.0.devices.borrow().contains_key(device_id) {
            return Err(DriverError::UnknownDevice(device_id.into()));
        }
        self.advertised()
    }

    fn advertised(&self) -> Result<Vec<FieldSpec>, DriverError> {
        let choice = |field, items: &[&str]| FieldSpec {
            field,
            allowed: Allowed::choices(items),
            comparison: Comparison::CaseInsensitive,
        };
        Ok(vec![
            choice(Field::Power, &["on", "off"]),
            choice(Field::Mode, &["cool", "heat", "dry", "fan", "auto"]),
            FieldSpec {
                field: Field::TargetTemperature,
                allowed: Allowed::Range {
                    min: 16.0,
                    max: 30.0,
                    step: 0.5,
                },
                comparison: Comparison::Tolerance(0.1),
            },
            choice(Field::FanSpeed, &["auto", "low", "medium", "high"]),
            choice(
                Field::VaneVertical,
                &["auto", "up", "middle", "down", "swing"],
            ),
            choice(
                Field::VaneHorizontal,
                &["auto", "left", "center", "right", "swing"],
            ),
        ])
    }
}

/// What the test knows about one task.
#[derive(Debug)]
struct Tracked {
    device: String,
    values: BTreeMap<Field, Value>,
    created_at: u64,
    requests: Vec<String>,
    /// When a person said yes to sending it, for a task held at the gate.
    confirmed_at: Option<u64>,
    held: bool,
    /// Cancelled by the script, or its confirmation declined.
    cancel_asked: bool,
    ended: Option<TaskRecord>,
}

/// A question the script will answer.
struct Due {
    at: u64,
    task: String,
    key: String,
    kind: QuestionKind,
}

/// What one sequence came to.
#[derive(Default, Debug)]
pub struct Report {
    pub tasks: usize,
    pub verdicts: BTreeMap<String, usize>,
    pub violations: Vec<String>,
    pub reads: u64,
    pub log: String,
}

/// Runs the sequence of `seed`.
pub fn run(seed: u64) -> Report {
    let world = World::new(seed);
    let settings = Settings::from_lookup(|k| world.platform.config(k)).expect("settings");
    let ctx = Context::with_driver(&world.platform, settings, Box::new(RefDriver(&world)));
    let mut run = Run {
        world: &world,
        ctx: &ctx,
        tasks: BTreeMap::new(),
        answers: Vec::new(),
        report: Report::default(),
    };
    let device_count = world.range(1, 3);
    for n in 0..device_count {
        // Delays from half a second to 27 s, spread evenly on a log scale;
        // jitter up to a tenth. Devices act within the operator's settle
        // window (30 s): one slower than that is called "not applied" once,
        // before its history is known, and learned from then on.
        let delay = (500.0 * 54f64.powf(world.range(0, 1000) as f64 / 1000.0)) as u64;
        let jitter = delay * world.range(0, 10) / 100;
        let id = format!("ac-{n}");
        let _ = writeln!(
            run.report.log,
            "device {id}: delay {delay} ms, jitter {jitter} ms"
        );
        world
            .devices
            .borrow_mut()
            .insert(id, RefDevice::new(delay, jitter, START_MS));
    }
    let ids: Vec<String> = world.devices.borrow().keys().cloned().collect();
    if world.chance(0.2) {
        let device = world.pick(&ids).clone();
        let _ = writeln!(run.report.log, "{device}: vane_horizontal hidden");
        world
            .devices
            .borrow_mut()
            .get_mut(&device)
            .unwrap()
            .hidden
            .insert(Field::VaneHorizontal);
    }
    // Warm-up: a few plain commands per device, one at a time, so each
    // device has a history, as it would after a day of use.
    for id in &ids {
        for _ in 0..3 {
            let t = 18.0 + world.range(0, 20) as f64 / 2.0;
            let task = run.command(
                id,
                "set_temperature",
                json!({"device_id": id, "temperature": t}),
                Client::default(),
            );
            if let Some(task) = task {
                run.until(|r| r.tasks[&task].ended.is_some(), START_MS + 3_600_000);
            }
        }
    }
    let script_end = world.now() + world.range(20_000, 120_000);
    let mut next_op = world.now() + world.range(100, 10_000);
    loop {
        let next_wake = world.platform.wakes().first().map(|w| w.at_ms);
        let next_answer = run.answers.iter().map(|a| a.at).min();
        let op = (next_op <= script_end).then_some(next_op);
        let Some(at) = [op, next_wake, next_answer].into_iter().flatten().min() else {
            break;
        };
        if at > script_end + TTL_MS + 120_000 {
            break;
        }
        // A read that took time may have moved the clock past `at`; what
        // the script does then happens just after it, never at the same
        // instant, so the truth has an order.
        let later = if next_wake == Some(at) { 0 } else { 1 };
        world.platform.set_now(at.max(world.now() + later));
        if next_answer == Some(at) {
            run.answer_due();
        } else if op == Some(at) {
            run.random_op(&ids);
            next_op = world.now() + world.range(100, 15_000);
        } else {
            run.deliver_wakes();
        }
    }
    // Let every command that is still queued land, for the record.
    for device in world.devices.borrow_mut().values_mut() {
        device.advance(u64::MAX / 2);
    }
    run.report.reads = *world.reads.borrow();
    run.check();
    run.report
}

struct Run<'w> {
    world: &'w World,
    ctx: &'w Context<'w>,
    tasks: BTreeMap<String, Tracked>,
    answers: Vec<Due>,
    report: Report,
}

impl Run<'_> {
    fn log(&mut self, line: String) {
        let now = self.world.now() - START_MS;
        let _ = writeln!(self.report.log, "{:>9.3} s  {line}", now as f64 / 1000.0);
    }

    /// Runs the scheduler until `done`, or the clock passes `limit`.
    fn until(&mut self, done: impl Fn(&Run) -> bool, limit: u64) {
        while !done(self) {
            let Some(next) = self.world.platform.wakes().first().map(|w| w.at_ms) else {
                return;
            };
            if next > limit {
                return;
            }
            self.world.platform.set_now(next.max(self.world.now()));
            self.deliver_wakes();
        }
    }

    /// Delivers the wakes due now, one `advance` per group, as the runner's
    /// scheduler does.
    fn deliver_wakes(&mut self) {
        let due = self.world.platform.take_due(self.world.now());
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for wake in due {
            groups.entry(wake.group).or_default().push(wake.task_id);
        }
        for (group, ids) in groups {
            if std::env::var("VERDICT_DEBUG").is_ok() {
                let m = self.ctx.store.device(&group).unwrap();
                eprintln!(
                    "{} before advance {group}: {}",
                    self.world.now() - START_MS,
                    serde_json::to_string(&m).unwrap()
                );
            }
            if let Err(e) = app::advance::run(self.ctx, &group, &ids) {
                self.report
                    .violations
                    .push(format!("advance {group} failed: {e}"));
            }
            self.collect();
        }
    }

    /// Takes in every task change the plugin published.
    fn collect(&mut self) {
        for record in self.world.platform.take_changes() {
            let Some(tracked) = self.tasks.get_mut(&record.id) else {
                continue;
            };
            if let Stage::Sent {
                request_id: Some(r),
                ..
            } = &record.stage
                && !tracked.requests.contains(r)
            {
                tracked.requests.push(r.clone());
            }
            if let Some(ended) = &tracked.ended {
                if ended.status != record.status || ended.failure != record.failure {
                    self.report.violations.push(format!(
                        "task {} changed after it ended: {:?} then {:?}",
                        record.id, ended.status, record.status
                    ));
                }
                continue;
            }
            for q in &record.questions {
                if self
                    .answers
                    .iter()
                    .any(|a| a.key == q.key && a.task == record.id)
                {
                    continue;
                }
                // Some questions are never answered: the TTL ends them.
                if self.world.chance(0.85) {
                    let at = self.world.now() + self.world.range(200, 20_000);
                    self.answers.push(Due {
                        at,
                        task: record.id.clone(),
                        key: q.key.clone(),
                        kind: q.kind,
                    });
                }
            }
            if record.is_terminal() {
                let line = format!(
                    "{} {} {:?}: {}",
                    tracked.device, record.id, record.status, record.status_message
                );
                tracked.ended = Some(record);
                self.log(line);
            }
        }
    }

    /// Calls a tool as a client with `client`'s capabilities; answers MRTR
    /// questions as a person would. Returns the task, if one was made.
    fn command(&mut self, device: &str, tool: &str, args: Json, client: Client) -> Option<String> {
        let before = self.world.devices.borrow()[device].log.len();
        let mut outcome = settle_devices::tools::call(
            self.ctx,
            tool,
            &args,
            &Caller {
                client,
                input_responses: None,
                request_state: None,
                info: Default::default(),
                arguments: &args,
            },
        );
        if let Ok(Output::Questions(questions)) = &outcome {
            let yes = self.world.chance(0.7);
            let state = questions["requestState"].as_str().map(str::to_string);
            let answers = json!({"confirm": {"action": "accept", "content": {"confirm": yes}}});
            self.log(format!("{device}: MRTR confirmation {yes}"));
            outcome = settle_devices::tools::call(
                self.ctx,
                tool,
                &args,
                &Caller {
                    client,
                    input_responses: Some(&answers),
                    request_state: state.as_deref(),
                    info: Default::default(),
                    arguments: &args,
                },
            );
        }
        self.collect();
        match outcome {
            Ok(Output::Task(record)) => {
                self.log(format!("{device} {tool} {args} -> task {}", record.id));
                let requests = match &record.stage {
                    Stage::Sent {
                        request_id: Some(r),
                        ..
                    } => vec![r.clone()],
                    _ => Vec::new(),
                };
                let held = record.stage == Stage::AwaitingConfirmation;
                let values = record
                    .fields
                    .iter()
                    .map(|f| (f.field, f.sent.clone()))
                    .collect();
                let id = record.id.clone();
                self.tasks.insert(
                    id.clone(),
                    Tracked {
                        device: device.to_string(),
                        values,
                        created_at: record.created_at_ms,
                        requests,
                        confirmed_at: None,
                        held,
                        cancel_asked: false,
                        ended: record.is_terminal().then(|| *record.clone()),
                    },
                );
                if held {
                    for q in &record.questions {
                        if self.world.chance(0.85) {
                            let at = self.world.now() + self.world.range(200, 20_000);
                            self.answers.push(Due {
                                at,
                                task: id.clone(),
                                key: q.key.clone(),
                                kind: q.kind,
                            });
                        }
                    }
                }
                Some(id)
            }
            other => {
                let after = self.world.devices.borrow()[device].log.len();
                if after != before {
                    self.report.violations.push(format!(
                        "{tool} {args} sent {} request(s) but made no task",
                        after - before
                    ));
                }
                let shown = match other {
                    Ok(Output::Result(r)) => r["content"][0]["text"].to_string(),
                    Ok(Output::Questions(_)) => "questions".into(),
                    Ok(Output::Task(_)) => unreachable!(),
                    Err(e) => format!("{e:?}"),
                };
                self.log(format!("{device} {tool} {args} -> {shown}"));
                None
            }
        }
    }

    fn answer_due(&mut self) {
        let now = self.world.now();
        let Some(i) = self.answers.iter().position(|a| a.at <= now) else {
            return;
        };
        let due = self.answers.remove(i);
        let (content, word) = match due.kind {
            QuestionKind::Confirm => {
                let yes = self.world.chance(0.7);
                (json!({"confirm": yes}), if yes { "yes" } else { "no" })
            }
            QuestionKind::AcceptDifferent => {
                let choice = *self.world.pick(&["accept", "retry", "no"]);
                (json!({"choice": choice}), choice)
            }
        };
        let responses = json!({ due.key.clone(): {"action": "accept", "content": content} });
        if let Some(t) = self.tasks.get_mut(&due.task)
            && due.kind == QuestionKind::Confirm
        {
            if word == "yes" {
                t.confirmed_at = Some(now);
            } else {
                t.cancel_asked = true;
            }
        }
        self.log(format!("answer {} {}: {word}", due.task, due.key));
        if let Err(e) = app::answers::deliver(self.ctx, &due.task, &responses) {
            self.report
                .violations
                .push(format!("answering {}: {e:?}", due.task));
        }
        self.collect();
    }

    fn random_op(&mut self, ids: &[String]) {
        let w = self.world;
        let device = w.pick(ids).clone();
        let roll = w.range(0, 99);
        match roll {
            0..=59 => self.random_command(&device),
            60..=67 => {
                let live: Vec<String> = self
                    .tasks
                    .iter()
                    .filter(|(_, t)| t.ended.is_none())
                    .map(|(id, _)| id.clone())
                    .collect();
                if live.is_empty() {
                    return;
                }
                let id = w.pick(&live).clone();
                self.tasks.get_mut(&id).unwrap().cancel_asked = true;
                self.log(format!("cancel {id}"));
                let _ = app::tasks::cancel(&self.ctx.store, w.now(), &id);
                self.collect();
            }
            68..=89 => self.random_fault(&device),
            _ => {
                let value = Value::Number(16.0 + w.range(0, 28) as f64 / 2.0);
                self.log(format!("{device}: set at the wall to {value}"));
                w.devices.borrow_mut().get_mut(&device).unwrap().wall(
                    w.now(),
                    Field::TargetTemperature,
                    value,
                );
            }
        }
    }

    fn random_command(&mut self, device: &str) {
        let w = self.world;
        let client = Client {
            tasks: w.chance(0.5),
            elicitation: w.chance(0.5),
        };
        let roll = w.range(0, 99);
        let (tool, args) = if roll < 70 {
            let held = self.last_value(device);
            let t = match w.range(0, 9) {
                // Back to the value before the last command.
                0..=2 if held.is_some() => held.unwrap(),
                _ => 16.0 + w.range(0, 28) as f64 / 2.0,
            };
            let mut args = json!({"device_id": device, "temperature": t});
            if !(18.0..=28.0).contains(&t) && w.chance(0.5) {
                args["confirm"] = json!(true);
            }
            ("set_temperature", args)
        } else if roll < 85 {
            let mut args = json!({"device_id": device});
            if w.chance(0.7) {
                args["power"] = json!(w.pick(&["on", "off"]));
            }
            if w.chance(0.7) {
                args["mode"] = json!(w.pick(&["cool", "heat", "dry", "fan", "auto"]));
            }
            ("set_power_mode", args)
        } else {
            let mut args = json!({"device_id": device});
            args["speed"] = json!(w.pick(&["auto", "low", "medium", "high"]));
            if w.chance(0.4) {
                args["vane_horizontal"] = json!(w.pick(&["auto", "left", "center", "right"]));
                args["confirm"] = json!(true);
            }
            ("set_fan", args)
        };
        self.command(device, tool, args, client);
    }

    /// The temperature the device showed before its latest command.
    fn last_value(&self, device: &str) -> Option<f64> {
        let devices = self.world.devices.borrow();
        let d = &devices[device];
        let last = d.log.last()?;
        match d.held(Field::TargetTemperature, last.accepted_at) {
            Some(Value::Number(t)) => Some(*t),
            _ => None,
        }
    }

    fn random_fault(&mut self, device: &str) {
        let w = self.world;
        let now = w.now();
        let kind = *w.pick(&["offline", "ignore", "clamp", "flaky", "latency"]);
        let mut devices = w.devices.borrow_mut();
        let d = devices.get_mut(device).unwrap();
        let line = match kind {
            "offline" => {
                let on = !d.faults.offline;
                d.set_offline(now, on);
                format!("offline {on}")
            }
            "ignore" => {
                d.advance(now);
                d.faults.ignore = !d.faults.ignore;
                format!("ignore {}", d.faults.ignore)
            }
            "clamp" => {
                d.advance(now);
                d.faults.clamp = match d.faults.clamp {
                    Some(_) => None,
                    None => Some((18.0, 28.0)),
                };
                format!("clamp {:?}", d.faults.clamp)
            }
            "flaky" => {
                d.faults.flaky = if d.faults.flaky > 0.0 {
                    0.0
                } else {
                    w.range(10, 60) as f64 / 100.0
                };
                d.note_reads(now);
                format!("flaky {}", d.faults.flaky)
            }
            _ => {
                d.faults.latency_ms = if d.faults.latency_ms > 0 {
                    0
                } else {
                    w.range(10, 1_500)
                };
                d.note_reads(now);
                format!("latency {} ms", d.faults.latency_ms)
            }
        };
        drop(devices);
        self.log(format!("{device}: {line}"));
    }

    /// Checks every task's verdict against the truth.
    fn check(&mut self) {
        let devices = self.world.devices.borrow();
        let mut violations = Vec::new();
        for (id, t) in &self.tasks {
            self.report.tasks += 1;
            let Some(ended) = &t.ended else {
                violations.push(format!("task {id} never ended"));
                continue;
            };
            let at = ended.ended_at_ms.unwrap_or(ended.updated_at_ms);
            let reason = ended.failure.as_ref().map(|f| f.reason);
            let name = match reason {
                Some(r) => format!("failed/{}", r.as_str()),
                None => format!("{:?}", ended.status).to_lowercase(),
            };
            *self.report.verdicts.entry(name.clone()).or_default() += 1;
            let d = &devices[&t.device];
            let limit = t.created_at + TTL_MS + HTTP_TIMEOUT_MS + 2_000;
            if at > limit {
                violations.push(format!(
                    "task {id} ended {} ms past its TTL",
                    at - t.created_at - TTL_MS
                ));
            }
            if let Some(confirmed) = t.confirmed_at.or(t.held.then_some(u64::MAX)) {
                for r in &t.requests {
                    if d.request(r)
                        .is_some_and(|taken| taken.accepted_at < confirmed)
                    {
                        violations.push(format!("task {id} sent {r} before its confirmation"));
                    }
                }
            }
            let last = t.requests.last().and_then(|r| d.request(r));
            let problem = match (ended.status, reason) {
                (Status::Completed, _) if ended.accepted_as_is => None,
                (Status::Completed, _) => completed_wrongly(d, t, at),
                (Status::Cancelled, _) => (!t.cancel_asked).then(|| "cancelled unasked".into()),
                (Status::Failed, Some(FailureReason::Superseded)) => {
                    let newer = d
                        .log
                        .iter()
                        .skip_while(|x| last.is_some_and(|l| x.request_id != l.request_id))
                        .skip(usize::from(last.is_some()))
                        .any(|x| {
                            x.accepted_at <= at
                                && t.values.iter().any(|(f, v)| {
                                    x.values.get(f).is_some_and(|xv| !same(*f, xv, v))
                                })
                        });
                    (!newer).then(|| "superseded, but no newer command asked otherwise".into())
                }
                (Status::Failed, Some(FailureReason::DifferentValue)) => match last {
                    None => Some("a different value, but nothing was sent".into()),
                    Some(r) if RefDevice::pending_at(r, at) => Some(format!(
                        "a different value while its command was still to land at {:?}",
                        r.outcome
                    )),
                    Some(_) => t
                        .values
                        .iter()
                        .all(|(f, v)| d.held(*f, at).is_some_and(|h| same(*f, h, v)))
                        .then(|| "a different value, but the device held what was sent".into()),
                },
                // Applied without a visible change (a value clamped to what
                // the device already held), changed again before any read
                // could see it (within one dense read), or shown while reads
                // were failing or slow: nobody reading the sensors can tell
                // that from not applied.
                (Status::Failed, Some(FailureReason::NotApplied)) => match last {
                    None => Some("not applied, but nothing was sent".into()),
                    Some(r) => {
                        let shown_for = d.visible_for(r);
                        let readable = match r.outcome {
                            Outcome::Applied(at) => !d.reads_degraded(
                                at.saturating_sub(10_000),
                                at.saturating_add(shown_for),
                            ),
                            _ => true,
                        };
                        let seen = r.changed && shown_for >= DENSE_READ_MS && readable;
                        (!matches!(r.outcome, Outcome::Dropped(_)) && seen).then(|| {
                            format!(
                                "not applied, but the device applied it: {:?}, visible for {} ms",
                                r.outcome,
                                d.visible_for(r)
                            )
                        })
                    }
                },
                (Status::Failed, Some(FailureReason::Unverifiable)) => t
                    .values
                    .keys()
                    .all(|f| !d.hidden.contains(f))
                    .then(|| "unverifiable, but every field is reported".into()),
                (Status::Failed, Some(FailureReason::NotSent)) => {
                    (!t.requests.is_empty()).then(|| "not sent, but the API took it".into())
                }
                (Status::Failed, Some(FailureReason::Expired)) => None,
                (status, reason) => Some(format!("ended {status:?} {reason:?}")),
            };
            if let Some(problem) = problem {
                violations.push(format!(
                    "task {id} on {} ({:?}) ended {name} at {:.3} s: {problem}; message: {}",
                    t.device,
                    t.values,
                    (at - START_MS) as f64 / 1000.0,
                    ended.status_message
                ));
            }
        }
        drop(devices);
        self.report.violations.extend(violations);
    }
}

/// Whether a completion at `at` was wrong: the device did not hold the
/// value sent, or an earlier command with another value was still to land.
fn completed_wrongly(d: &RefDevice, t: &Tracked, at: u64) -> Option<String> {
    let Some(last) = t.requests.last() else {
        return Some("completed, but nothing was sent".into());
    };
    for (field, value) in &t.values {
        if d.hidden.contains(field) {
            return Some(format!("completed, but {field} cannot be read back"));
        }
        match d.held(*field, at) {
            Some(held) if same(*field, held, value) => {}
            held => return Some(format!("completed, but the device held {field} {held:?}")),
        }
        let earlier = d.before(last).find(|x| {
            x.values.get(field).is_some_and(|v| !same(*field, v, value))
                && RefDevice::pending_at(x, at)
        });
        if let Some(x) = earlier {
            return Some(format!(
                "completed, but an earlier command ({} {:?}) was still to land",
                x.request_id, x.values
            ));
        }
    }
    None
}

fn same(field: Field, a: &Value, b: &Value) -> bool {
    let comparison = match field {
        Field::TargetTemperature => Comparison::Tolerance(0.1),
        _ => Comparison::CaseInsensitive,
    };
    comparison.matches(a, b)
}

/// Runs `count` sequences from `first_seed`, and sums them up.
pub fn run_many(first_seed: u64, count: u64) -> Summary {
    let mut summary = Summary::default();
    for seed in first_seed..first_seed + count {
        let report = run(seed);
        summary.sequences += 1;
        summary.tasks += report.tasks;
        summary.reads += report.reads;
        for (k, v) in &report.verdicts {
            *summary.verdicts.entry(k.clone()).or_default() += v;
        }
        if !report.violations.is_empty() {
            summary.failing.push((seed, report));
        }
    }
    summary
}

#[derive(Default)]
pub struct Summary {
    pub sequences: u64,
    pub tasks: usize,
    pub reads: u64,
    pub verdicts: BTreeMap<String, usize>,
    pub failing: Vec<(u64, Report)>,
}
