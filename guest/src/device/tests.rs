use super::*;
use crate::model::Comparison;

const TIMING: Timing = Timing {
    ttl_ms: 300_000,
    poll_interval_ms: 1_000,
    settle_window_ms: 30_000,
    stable_reads: 2,
    dense_read_ms: 200,
};

const T: Field = Field::TargetTemperature;

fn temp(value: f64, baseline: f64) -> Vec<Commanded> {
    vec![Commanded {
        field: T,
        value: Value::Number(value),
        comparison: Comparison::Tolerance(0.1),
        baseline: Some(Value::Number(baseline)),
    }]
}

fn reading(value: f64) -> Reading {
    Reading {
        online: true,
        values: [(T, Value::Number(value))].into_iter().collect(),
        ..Reading::default()
    }
}

fn standing(model: &DeviceModel, value: f64, seq: u64, sent: u64, now: u64) -> Standing {
    model.standing(T, &Value::Number(value), seq, sent, now, &TIMING)
}

#[test]
fn a_retarget_is_the_first_command_landing_then_the_second() {
    let mut m = DeviceModel::default();
    let a = m.record_send("a", &temp(27.0, 26.0), 0, &TIMING);
    let b = m.record_send("b", &temp(23.0, 26.0), 1_000, &TIMING);
    assert_eq!(
        b.superseded,
        vec!["a".to_string()],
        "a newer value supersedes"
    );
    m.take_read(Ok(&reading(26.0)), 2_000, &TIMING);
    assert_eq!(
        standing(&m, 23.0, b.seq, 1_000, 2_000),
        Standing::Waiting { earlier: false }
    );
    m.take_read(Ok(&reading(27.0)), 4_100, &TIMING);
    assert_eq!(
        m.fields[&T].shown_seq, a.seq,
        "27 is the first command landing"
    );
    assert!(!m.fields[&T].foreign);
    assert_eq!(
        standing(&m, 23.0, b.seq, 1_000, 4_100),
        Standing::Waiting { earlier: true },
        "not a verdict: an earlier command's value"
    );
    m.take_read(Ok(&reading(23.0)), 5_100, &TIMING);
    assert_eq!(standing(&m, 23.0, b.seq, 1_000, 5_100), Standing::Landed);
}

#[test]
fn back_to_the_original_waits_for_the_earlier_command_first() {
    let mut m = DeviceModel::default();
    m.record_send("a", &temp(27.0, 26.0), 0, &TIMING);
    let b = m.record_send("b", &temp(26.0, 26.0), 1_000, &TIMING);
    m.take_read(Ok(&reading(26.0)), 2_000, &TIMING);
    assert_eq!(
        standing(&m, 26.0, b.seq, 1_000, 2_000),
        Standing::Blocked,
        "26 is also what the device showed before: 27 may still land"
    );
    m.take_read(Ok(&reading(27.0)), 4_000, &TIMING);
    assert_eq!(
        standing(&m, 26.0, b.seq, 1_000, 4_000),
        Standing::Waiting { earlier: true }
    );
    m.take_read(Ok(&reading(26.0)), 5_000, &TIMING);
    assert_eq!(standing(&m, 26.0, b.seq, 1_000, 5_000), Standing::Landed);
}

#[test]
fn an_earlier_command_that_never_shows_stops_counting_once_its_time_is_over() {
    let mut m = DeviceModel::default();
    m.record_send("a", &temp(27.0, 26.0), 0, &TIMING);
    let b = m.record_send("b", &temp(26.0, 26.0), 1_000, &TIMING);
    m.take_read(Ok(&reading(26.0)), 2_000, &TIMING);
    assert_eq!(standing(&m, 26.0, b.seq, 1_000, 29_999), Standing::Blocked);
    assert_eq!(
        standing(&m, 26.0, b.seq, 1_000, 30_000),
        Standing::Landed,
        "without history the settle window is the earlier command's time"
    );
}

#[test]
fn a_value_nobody_sent_is_foreign_but_only_for_commands_sent_before_it() {
    let mut m = DeviceModel::default();
    let a = m.record_send("a", &temp(30.0, 26.0), 0, &TIMING);
    m.take_read(Ok(&reading(26.0)), 1_000, &TIMING);
    m.take_read(Ok(&reading(28.0)), 4_000, &TIMING);
    assert!(m.fields[&T].foreign);
    assert_eq!(standing(&m, 30.0, a.seq, 0, 4_000), Standing::Foreign);
    let b = m.record_send("b", &temp(24.0, 28.0), 5_000, &TIMING);
    m.take_read(Ok(&reading(28.0)), 6_000, &TIMING);
    assert_eq!(
        standing(&m, 24.0, b.seq, 5_000, 6_000),
        Standing::Waiting { earlier: false },
        "28 was there before b: its starting point"
    );
}

#[test]
fn identical_commands_share_an_entry_and_land_together() {
    let mut m = DeviceModel::default();
    let a = m.record_send("a", &temp(24.0, 26.0), 0, &TIMING);
    let b = m.record_send("b", &temp(24.0, 26.0), 500, &TIMING);
    assert_eq!(a.seq, b.seq);
    assert!(b.superseded.is_empty());
    assert_eq!(m.timeline.len(), 1);
    assert_eq!(m.timeline[0].count, 2);
    m.take_read(Ok(&reading(26.0)), 1_000, &TIMING);
    m.take_read(Ok(&reading(24.0)), 4_000, &TIMING);
    assert_eq!(standing(&m, 24.0, a.seq, 0, 4_000), Standing::Landed);
    assert_eq!(standing(&m, 24.0, b.seq, 500, 4_000), Standing::Landed);
    let c = m.record_send("c", &temp(24.0, 24.0), 6_000, &TIMING);
    assert_ne!(c.seq, a.seq, "a command after the landing is a new entry");
}

#[test]
fn a_change_is_learned_between_the_last_read_before_it_and_the_first_after() {
    let mut m = DeviceModel::default();
    m.record_send("a", &temp(24.0, 26.0), 10_000, &TIMING);
    m.take_read(Ok(&reading(24.0)), 10_500, &TIMING);
    assert!(
        m.fields[&T].samples.is_empty(),
        "no read between the send and the change: no sample"
    );
    m.record_send("b", &temp(22.0, 24.0), 20_000, &TIMING);
    m.take_read(Ok(&reading(24.0)), 23_800, &TIMING);
    m.take_read(Ok(&reading(22.0)), 24_000, &TIMING);
    assert_eq!(
        m.fields[&T].samples,
        vec![Sample {
            lo_ms: 3_800,
            hi_ms: 4_000
        }]
    );
    let e = m.estimate([T].into_iter(), &TIMING).unwrap();
    assert!(e.lo_ms <= 3_800 && e.hi_ms >= 4_000, "{e:?}");
    let h = m.horizons([T].into_iter(), 30_000, &TIMING);
    assert!(
        h.settled_at.unwrap() > 34_000 && h.patience_at < 45_000,
        "{h:?}"
    );
    assert!(h.typical_ms.is_some());
}

#[test]
fn fields_without_history_borrow_the_device_s() {
    let mut m = DeviceModel::default();
    m.fields.insert(
        T,
        Track {
            shown: Some(Value::Number(24.0)),
            shown_seq: 0,
            foreign: false,
            since_ms: 0,
            seen_ms: 0,
            comparison: Comparison::Tolerance(0.1),
            samples: vec![Sample {
                lo_ms: 3_900,
                hi_ms: 4_100,
            }],
        },
    );
    assert!(m.estimate([Field::Power].into_iter(), &TIMING).is_some());
    assert_eq!(
        DeviceModel::default().estimate([T].into_iter(), &TIMING),
        None
    );
}

#[test]
fn reads_follow_the_pending_commands_or_the_grid() {
    let mut m = DeviceModel::default();
    m.record_send("a", &temp(24.0, 26.0), 0, &TIMING);
    assert_eq!(
        m.next_read_ms(100, &TIMING, 1_000),
        1_000,
        "no history: the grid"
    );
    m.fields.get_mut(&T).unwrap().samples = vec![
        Sample {
            lo_ms: 3_800,
            hi_ms: 4_000,
        };
        3
    ];
    let next = m.next_read_ms(100, &TIMING, 1_000);
    assert!(
        (3_500..4_000).contains(&next),
        "the first read is near the landing: {next}"
    );
    m.take_read(Ok(&reading(24.0)), 4_000, &TIMING);
    assert_eq!(
        m.next_read_ms(4_000, &TIMING, 5_000),
        5_000,
        "nothing pending: the grid"
    );
}

#[test]
fn prune_keeps_what_may_still_land_and_what_tasks_wait_for() {
    let mut m = DeviceModel::default();
    m.record_send("a", &temp(24.0, 26.0), 0, &TIMING);
    m.record_send("b", &temp(22.0, 26.0), 100, &TIMING);
    m.waiting.insert("b".into(), Waiter::default());
    m.take_read(Ok(&reading(24.0)), 4_000, &TIMING);
    m.prune(4_000, &TIMING);
    assert_eq!(m.timeline.len(), 1, "a landed and nobody waits for it");
    assert_eq!(m.timeline[0].tasks, vec!["b".to_string()]);
    m.waiting.clear();
    m.prune(4_000, &TIMING);
    assert_eq!(m.timeline.len(), 1, "b may still land");
    m.prune(100 + TIMING.ttl_ms, &TIMING);
    assert!(m.timeline.is_empty(), "its time is over");
    for i in 0..(MAX_TIMELINE as u64 + 10) {
        m.record_send(
            &format!("t{i}"),
            &temp(16.0 + (i % 20) as f64, 26.0),
            5_000 + i,
            &TIMING,
        );
    }
    m.waiting.clear();
    m.prune(6_000, &TIMING);
    assert_eq!(m.timeline.len(), MAX_TIMELINE);
}

#[test]
fn failed_reads_count_and_an_answer_resets_them() {
    let mut m = DeviceModel::default();
    m.take_read(Err("503"), 1_000, &TIMING);
    m.take_read(Err("503"), 2_000, &TIMING);
    assert_eq!((m.failed_streak, m.reads), (2, 0));
    m.take_read(Ok(&reading(24.0)), 3_000, &TIMING);
    assert_eq!((m.failed_streak, m.reads), (0, 1));
    assert_eq!(m.last_read_ms, Some(3_000));
}

#[test]
fn a_change_far_sooner_than_the_device_can_act_is_not_the_command() {
    let mut m = DeviceModel::default();
    m.record_send("a", &temp(20.0, 26.0), 0, &TIMING);
    m.take_read(Ok(&reading(26.0)), 19_800, &TIMING);
    m.take_read(Ok(&reading(20.0)), 20_000, &TIMING);
    assert!(!m.fields[&T].samples.is_empty());
    let b = m.record_send("b", &temp(23.0, 20.0), 30_000, &TIMING);
    m.take_read(Ok(&reading(23.0)), 33_000, &TIMING);
    assert!(
        m.fields[&T].foreign,
        "3 s after the send of a device that takes 20 s: set at the wall"
    );
    assert_eq!(standing(&m, 23.0, b.seq, 30_000, 33_000), Standing::Landed);
}

#[test]
fn a_change_seen_after_a_long_gap_before_the_send_is_not_the_command() {
    let mut m = DeviceModel::default();
    m.record_send("a", &temp(21.0, 26.0), 0, &TIMING);
    m.take_read(Ok(&reading(21.0)), 4_000, &TIMING);
    // Nobody reads for a minute; the device is set to 26 at the wall; a
    // command to 30 goes out without a baseline (its read failed), then
    // one back to 26.
    let no_baseline = vec![Commanded {
        baseline: None,
        ..temp(30.0, 0.0)[0].clone()
    }];
    m.record_send("b", &no_baseline, 60_000, &TIMING);
    let c = m.record_send("c", &no_baseline_26(), 60_300, &TIMING);
    m.take_read(Ok(&reading(26.0)), 62_000, &TIMING);
    assert!(
        m.fields[&T].foreign,
        "26 may have been there before either command: nobody read it since"
    );
    assert_eq!(
        standing(&m, 26.0, c.seq, 60_300, 62_000),
        Standing::Blocked,
        "30 is still to land"
    );
}

fn no_baseline_26() -> Vec<Commanded> {
    vec![Commanded {
        baseline: None,
        ..temp(26.0, 0.0)[0].clone()
    }]
}

#[test]
fn a_device_takes_so_many_commands_a_minute_and_says_when_the_next_may_go() {
    let mut m = DeviceModel::default();
    let to = |t: f64| -> BTreeMap<Field, Value> { [(T, Value::Number(t))].into_iter().collect() };
    for i in 0..3 {
        assert_eq!(
            m.admit_command(1_000 + i * 1_000, 3, &to(20.0 + i as f64)),
            Ok(())
        );
        m.record_send(
            &format!("t{i}"),
            &temp(20.0 + i as f64, 26.0),
            1_000 + i * 1_000,
            &TIMING,
        );
    }
    assert_eq!(
        m.admit_command(10_000, 3, &to(25.0)),
        Err(51_000),
        "the first of the three leaves the window at 61 s"
    );
    assert_eq!(
        m.admit_command(10_000, 3, &to(22.0)),
        Ok(()),
        "repeating the latest command changes nothing and is not counted"
    );
    assert_eq!(m.admit_command(61_000, 3, &to(25.0)), Ok(()));
    assert_eq!(m.recent_commands.len(), 3, "older ones are forgotten");
    let mut unlimited = DeviceModel::default();
    for i in 0..100 {
        assert_eq!(unlimited.admit_command(i, 0, &to(i as f64)), Ok(()));
    }
}

/// Digests stored by earlier versions (the Debug text gathered in a
/// `String`, then hashed) still match the same state: an upgrade tells no
/// subscriber of a change that did not happen.
#[test]
fn a_state_digest_is_the_one_earlier_versions_stored() {
    let mut r = reading(24.5);
    r.values.insert(Field::Mode, Value::choice("cool"));
    for online in [true, false] {
        r.online = online;
        let earlier = crate::question::digest(&format!("{:?}|{:?}", r.online, r.values));
        assert_eq!(state_digest(&r), earlier);
    }
    assert_ne!(state_digest(&reading(24.5)), state_digest(&reading(25.0)));
}
