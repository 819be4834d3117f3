use super::*;
use serde_json::json;
use std::collections::BTreeMap;

const TIMING: Timing = Timing {
    ttl_ms: 300_000,
    poll_interval_ms: 1_000,
    settle_window_ms: 10_000,
    stable_reads: 2,
    dense_read_ms: 200,
};

fn field(field: Field, sent: Value, baseline: Value) -> FieldState {
    let comparison = match sent {
        Value::Number(_) => Comparison::Tolerance(0.1),
        Value::Choice(_) => Comparison::CaseInsensitive,
    };
    FieldState {
        field,
        sent,
        baseline: Some(baseline),
        observed: None,
        readable: true,
        comparison,
        verdict: Verdict::Waiting,
    }
}

fn temperature_task(sent: f64, baseline: f64) -> TaskRecord {
    let mut task = TaskRecord::new(
        "t1".into(),
        "set_temperature",
        "ac-living",
        vec![field(
            Field::TargetTemperature,
            Value::Number(sent),
            Value::Number(baseline),
        )],
        TIMING,
        1_000,
    );
    assert!(task.mark_sent(1_000, Some("r1".into()), 1, None));
    task
}

fn reading(values: &[(Field, Value)], online: bool) -> Reading {
    Reading {
        online,
        values: values.iter().cloned().collect::<BTreeMap<_, _>>(),
        ..Reading::default()
    }
}

/// What a device without history shows a task: each field by value alone
/// (as sent: landed; neither sent nor the baseline: foreign; else waiting).
fn standings(task: &TaskRecord, reading: Result<&Reading, &str>) -> BTreeMap<Field, Standing> {
    let Ok(reading) = reading else {
        return BTreeMap::new();
    };
    task.fields
        .iter()
        .map(|f| {
            let standing = match reading.values.get(&f.field) {
                None => Standing::NotReported,
                Some(o) if f.comparison.matches(&f.sent, o) => Standing::Landed,
                Some(o)
                    if f.baseline
                        .as_ref()
                        .is_some_and(|b| !f.comparison.matches(b, o)) =>
                {
                    Standing::Foreign
                }
                Some(_) => Standing::Waiting { earlier: false },
            };
            (f.field, standing)
        })
        .collect()
}

fn no_history(task: &TaskRecord) -> Horizons {
    let sent = task.sent_at_ms().unwrap_or(task.created_at_ms);
    Horizons {
        settled_at: None,
        patience_at: sent + task.timing.settle_window_ms,
        typical_ms: None,
    }
}

/// Observes a reading the way the device tick does for a device with no
/// history: one more read answered, or none when the read failed.
fn see(task: &mut TaskRecord, now_ms: u64, reading: Result<&Reading, &str>) -> bool {
    let standings = standings(task, reading);
    let horizons = no_history(task);
    see_with(task, now_ms, reading, &standings, horizons)
}

fn see_with(
    task: &mut TaskRecord,
    now_ms: u64,
    reading: Result<&Reading, &str>,
    standings: &BTreeMap<Field, Standing>,
    horizons: Horizons,
) -> bool {
    let reads = task.reads + u32::from(reading.is_ok());
    task.observe(
        now_ms,
        &Sight {
            reading,
            reads,
            standings,
            horizons,
        },
    )
}

fn temp(n: f64) -> Reading {
    reading(&[(Field::TargetTemperature, Value::Number(n))], true)
}

#[test]
fn matching_read_back_completes_with_sent_and_observed() {
    let mut task = temperature_task(24.0, 26.0);
    assert!(see(&mut task, 2_000, Ok(&temp(26.0))));
    assert_eq!(task.status, Status::Working);
    assert!(see(&mut task, 3_000, Ok(&temp(24.0))));
    assert_eq!(task.status, Status::Completed);
    let json = task.to_tool_json();
    assert_eq!(json["result"]["sent"]["target_temperature"], json!(24.0));
    assert_eq!(
        json["result"]["observed"]["target_temperature"],
        json!(24.0)
    );
    assert_eq!(json["result"]["reads"], json!(2));
    assert!(task.status_message.contains("after 2 reads"));
}

#[test]
fn terminal_states_never_change() {
    let mut task = temperature_task(24.0, 26.0);
    assert!(see(&mut task, 2_000, Ok(&temp(24.0))));
    assert_eq!(task.status, Status::Completed);
    let before = task.clone();
    assert!(!task.cancel(3_000));
    assert!(!task.supersede(3_000, "t2"));
    assert!(!see(&mut task, 4_000, Ok(&temp(20.0))));
    assert!(!task.expire_if_due(10_000_000));
    assert_eq!(task, before);
}

#[test]
fn offline_device_fails_at_the_first_read() {
    let mut task = temperature_task(24.0, 26.0);
    let offline = reading(&[(Field::TargetTemperature, Value::Number(26.0))], false);
    assert!(see(&mut task, 2_000, Ok(&offline)));
    assert_eq!(task.status, Status::Failed);
    assert_eq!(
        task.failure.as_ref().unwrap().reason,
        FailureReason::NotApplied
    );
    assert!(
        task.status_message.contains("online: false"),
        "{}",
        task.status_message
    );
    assert!(
        task.status_message
            .contains("accepted by the API, not applied")
    );
}

#[test]
fn unchanged_device_fails_when_the_settle_window_closes() {
    let mut task = temperature_task(24.0, 26.0);
    for t in [2_000, 5_000, 10_000] {
        see(&mut task, t, Ok(&temp(26.0)));
        assert_eq!(task.status, Status::Working, "at {t}");
    }
    assert!(see(&mut task, 11_000, Ok(&temp(26.0))));
    assert_eq!(task.status, Status::Failed);
    let msg = &task.status_message;
    assert!(msg.starts_with("accepted by the API, not applied"), "{msg}");
    assert!(msg.contains("target_temperature 26 (sent 24)"), "{msg}");
    assert!(msg.contains("after 4 reads"), "{msg}");
}

#[test]
fn a_different_value_must_hold_before_it_is_a_verdict() {
    let mut task = temperature_task(30.0, 26.0);
    assert!(see(&mut task, 2_000, Ok(&temp(28.0))));
    assert_eq!(task.status, Status::Working);
    assert!(see(&mut task, 3_000, Ok(&temp(28.0))));
    assert_eq!(task.status, Status::Failed);
    assert_eq!(
        task.failure.as_ref().unwrap().reason,
        FailureReason::DifferentValue
    );
    assert!(
        task.status_message
            .contains("target_temperature 28 (sent 30)")
    );
    let json = task.to_tool_json();
    assert_eq!(json["error"]["sent"]["target_temperature"], json!(30.0));
    assert_eq!(json["error"]["observed"]["target_temperature"], json!(28.0));
}

#[test]
fn a_value_in_passing_does_not_fail_the_task() {
    let mut task = temperature_task(30.0, 26.0);
    assert!(see(&mut task, 2_000, Ok(&temp(28.0))));
    assert!(see(&mut task, 3_000, Ok(&temp(30.0))));
    assert_eq!(task.status, Status::Completed);
}

#[test]
fn unreachable_sensors_are_not_a_verdict() {
    let mut task = temperature_task(24.0, 26.0);
    assert!(see(&mut task, 2_000, Err("503")));
    assert_eq!(task.status, Status::Working);
    assert_eq!(task.failed_reads, 1);
    assert_eq!(task.reads, 0);
    assert!(see(&mut task, 3_000, Ok(&temp(24.0))));
    assert_eq!(task.status, Status::Completed);
}

#[test]
fn every_field_must_match_and_partial_application_is_visible() {
    let mut task = TaskRecord::new(
        "t1".into(),
        "set_power_mode",
        "ac-living",
        vec![
            field(Field::Power, Value::choice("on"), Value::choice("off")),
            field(Field::Mode, Value::choice("heat"), Value::choice("cool")),
        ],
        TIMING,
        0,
    );
    task.mark_sent(0, None, 1, None);
    let half = reading(
        &[
            (Field::Power, Value::Choice("On".into())),
            (Field::Mode, Value::Choice("Cool".into())),
        ],
        true,
    );
    assert!(see(&mut task, 1_000, Ok(&half)));
    assert_eq!(task.status, Status::Working);
    assert!(see(&mut task, 10_000, Ok(&half)));
    assert_eq!(task.status, Status::Failed);
    assert!(
        task.status_message.contains("only partly applied"),
        "{}",
        task.status_message
    );
    let json = task.to_tool_json();
    let verdicts: Vec<&str> = json["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["matched", "waiting"]);
}

#[test]
fn unreadable_fields_are_never_completed() {
    let mut vane = field(
        Field::VaneHorizontal,
        Value::choice("left"),
        Value::choice("center"),
    );
    vane.readable = false;
    vane.baseline = None;
    let mut task = TaskRecord::new(
        "t1".into(),
        "set_fan",
        "ac-living",
        vec![
            field(
                Field::FanSpeed,
                Value::choice("high"),
                Value::choice("auto"),
            ),
            vane,
        ],
        TIMING,
        0,
    );
    task.mark_sent(0, None, 1, None);
    let r = reading(&[(Field::FanSpeed, Value::choice("High"))], true);
    assert!(see(&mut task, 1_000, Ok(&r)));
    assert_eq!(task.status, Status::Failed);
    assert_eq!(
        task.failure.as_ref().unwrap().reason,
        FailureReason::Unverifiable
    );
    assert!(task.status_message.starts_with("sent, unverifiable"));
    assert!(task.status_message.contains("vane_horizontal"));
}

#[test]
fn past_the_ttl_an_unfinished_task_fails() {
    let mut task = temperature_task(24.0, 26.0);
    assert!(!task.expire_if_due(300_999));
    assert_eq!(
        task.next_check_ms(300_900, &no_history(&task)),
        301_000,
        "looked at no later than the deadline"
    );
    assert_eq!(
        task.next_wake_ms(300_500),
        None,
        "its device's tick wakes it"
    );
    assert!(see(&mut task, 301_000, Ok(&temp(24.0))));
    assert_eq!(task.status, Status::Failed);
    assert_eq!(
        task.failure.as_ref().unwrap().reason,
        FailureReason::Expired
    );
}

#[test]
fn cancel_and_supersede_end_the_task_at_once() {
    let mut task = temperature_task(24.0, 26.0);
    assert!(task.cancel(1_500));
    assert_eq!(task.status, Status::Cancelled);
    assert!(task.status_message.contains("not recalled"));

    let mut task = temperature_task(24.0, 26.0);
    assert!(task.supersede(1_500, "t2"));
    assert_eq!(task.status, Status::Failed);
    assert_eq!(task.status_message, "superseded by t2");
}

#[test]
fn nothing_is_compared_before_the_command_is_sent() {
    let mut task = TaskRecord::new(
        "t1".into(),
        "set_temperature",
        "ac-living",
        vec![field(
            Field::TargetTemperature,
            Value::Number(24.0),
            Value::Number(26.0),
        )],
        TIMING,
        0,
    );
    assert!(!see(&mut task, 500, Ok(&temp(24.0))));
    assert_eq!(task.status, Status::Working);
    assert!(task.mark_not_sent(600, "connection refused"));
    assert_eq!(
        task.failure.as_ref().unwrap().reason,
        FailureReason::NotSent
    );
}

#[test]
fn ended_tasks_are_kept_a_while_after_they_end() {
    let mut task = temperature_task(24.0, 26.0);
    see(&mut task, 299_000, Ok(&temp(24.0)));
    assert_eq!(task.purge_at_ms(), 299_000 + KEEP_AFTER_END_MS);
    assert_eq!(task.next_wake_ms(299_000), Some(task.purge_at_ms()));
}

#[test]
fn detailed_view_follows_the_extension_shapes() {
    let mut task = temperature_task(24.0, 26.0);
    let working = task.to_detailed_json();
    assert_eq!(working["status"], "working");
    assert!(working.get("result").is_none() && working.get("error").is_none());
    assert_eq!(working["createdAt"], "1970-01-01T00:00:01.000Z");

    see(&mut task, 2_000, Ok(&temp(24.0)));
    let done = task.to_detailed_json();
    assert_eq!(done["result"]["isError"], false);
    assert_eq!(done["result"]["structuredContent"]["status"], "completed");

    let mut failed = temperature_task(24.0, 26.0);
    failed.supersede(2_000, "t9");
    let failed = failed.to_detailed_json();
    assert_eq!(failed["error"]["code"], DEVICE_OUTCOME_ERROR);
    assert_eq!(failed["error"]["data"]["error"]["reason"], "superseded");
}

#[test]
fn a_gated_task_waits_for_confirmation_and_sends_only_on_yes() {
    let mut task = TaskRecord::new(
        "t1".into(),
        "set_temperature",
        "ac-living",
        vec![field(
            Field::TargetTemperature,
            Value::Number(30.0),
            Value::Number(26.0),
        )],
        TIMING,
        0,
    );
    task.await_confirmation(0, "Send 30?".into());
    assert_eq!(task.status, Status::InputRequired);
    assert!(
        !task.mark_sent(1, None, 1, None),
        "nothing is sent before the answer"
    );
    let detailed = task.to_detailed_json();
    assert_eq!(
        detailed["inputRequests"]["confirm_1"]["method"],
        "elicitation/create"
    );
    assert_eq!(
        task.answer(5, "nope", Reply::Yes, None),
        None,
        "unknown keys are ignored"
    );
    assert_eq!(
        task.answer(5, "confirm_1", Reply::Yes, None),
        Some(AfterAnswer::Send)
    );
    assert_eq!(task.status, Status::Working);
    assert_eq!(
        task.answer(6, "confirm_1", Reply::Yes, None),
        None,
        "answered keys are ignored"
    );
    assert!(task.mark_sent(7, None, 1, None));

    let mut declined = TaskRecord::new(
        "t2".into(),
        "set_temperature",
        "ac-living",
        vec![],
        TIMING,
        0,
    );
    declined.await_confirmation(0, "Send?".into());
    assert_eq!(
        declined.answer(1, "confirm_1", Reply::No, None),
        Some(AfterAnswer::Nothing)
    );
    assert_eq!(declined.status, Status::Cancelled);
    assert!(declined.status_message.contains("declined"));
    assert!(declined.questions.is_empty());
}

#[test]
fn an_unanswered_confirmation_expires_without_sending() {
    let mut task = TaskRecord::new("t".into(), "set_fan", "ac-living", vec![], TIMING, 0);
    task.await_confirmation(0, "Send?".into());
    assert!(task.expire_if_due(TIMING.ttl_ms));
    assert_eq!(task.status, Status::Failed);
    assert!(
        task.status_message.starts_with("not sent"),
        "{}",
        task.status_message
    );
}

#[test]
fn a_task_that_can_ask_asks_about_a_different_value() {
    let mut task = temperature_task(30.0, 26.0);
    task.can_ask = true;
    see(&mut task, 2_000, Ok(&temp(28.0)));
    see(&mut task, 3_000, Ok(&temp(28.0)));
    assert_eq!(task.status, Status::InputRequired);
    let key = task.questions[0].key.clone();
    assert_eq!(key, "accept_different_1");
    assert!(
        task.status_message
            .contains("Accept it, or send the command again?")
    );
    assert!(
        !see(&mut task, 4_000, Ok(&temp(28.0))),
        "reads wait for the answer"
    );

    let mut retry = task.clone();
    assert_eq!(
        retry.answer(5_000, &key, Reply::Retry, None),
        Some(AfterAnswer::Send)
    );
    assert_eq!(retry.stage, Stage::Sending);
    assert_eq!(retry.fields[0].baseline, Some(Value::Number(28.0)));
    retry.mark_sent(5_000, None, 2, None);
    see(&mut retry, 6_000, Ok(&temp(30.0)));
    assert_eq!(retry.status, Status::Completed);

    let mut accept = task.clone();
    assert_eq!(
        accept.answer(5_000, &key, Reply::Yes, None),
        Some(AfterAnswer::Nothing)
    );
    assert_eq!(accept.status, Status::Completed);
    assert_eq!(accept.to_tool_json()["result"]["acceptedAsIs"], true);

    let mut refuse = task;
    refuse.answer(5_000, &key, Reply::No, None);
    assert_eq!(refuse.status, Status::Failed);
    assert_eq!(
        refuse.failure.unwrap().reason,
        FailureReason::DifferentValue
    );
}

#[test]
fn an_unanswered_send_is_retried_with_backoff_until_the_ttl() {
    let mut task = TaskRecord::new(
        "t".into(),
        "set_temperature",
        "ac-living",
        vec![field(
            Field::TargetTemperature,
            Value::Number(24.0),
            Value::Number(26.0),
        )],
        TIMING,
        0,
    );
    assert!(task.retry_send_later(0, "503"));
    assert_eq!(task.next_wake_ms(0), Some(1_000));
    assert!(task.retry_send_later(1_000, "503"));
    assert_eq!(task.next_wake_ms(1_000), Some(3_000), "the wait doubles");
    assert_eq!(task.status, Status::Working);
    assert!(
        task.status_message.contains("attempt 3"),
        "{}",
        task.status_message
    );
    assert!(task.expire_if_due(TIMING.ttl_ms));
    assert!(
        task.status_message.starts_with("not sent"),
        "{}",
        task.status_message
    );
}

#[test]
fn failed_reads_are_looked_at_each_time_and_a_good_read_resets_it() {
    let mut task = temperature_task(24.0, 26.0);
    see(&mut task, 2_000, Err("503"));
    see(&mut task, 3_000, Err("503"));
    assert_eq!(task.failed_streak, 2);
    assert_eq!(
        task.next_check_ms(3_000, &no_history(&task)),
        3_000,
        "failing reads are looked at each time"
    );
    see(&mut task, 7_000, Ok(&temp(26.0)));
    assert_eq!(task.failed_streak, 0);
    assert_eq!(
        task.next_check_ms(7_000, &no_history(&task)),
        1_000 + TIMING.settle_window_ms,
        "then when the settle window closes"
    );
}

#[test]
fn an_unchanged_reading_changes_nothing_worth_writing() {
    let mut task = temperature_task(24.0, 26.0);
    assert!(
        see(&mut task, 2_000, Ok(&temp(26.0))),
        "the first read shows what the device reports"
    );
    assert!(
        !see(&mut task, 3_000, Ok(&temp(26.0))),
        "the same again is no change"
    );
    assert_eq!(task.reads, 2, "but the read is counted");
}

#[test]
fn records_round_trip_through_json() {
    let task = temperature_task(24.0, 26.0);
    let text = serde_json::to_string(&task).unwrap();
    let back: TaskRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(back, task);
}

fn with_history(task: &TaskRecord) -> Horizons {
    let sent = task.sent_at_ms().unwrap();
    Horizons {
        settled_at: Some(sent + 4_500),
        patience_at: sent + 9_000,
        typical_ms: Some(4_000),
    }
}

fn one(field: Field, standing: Standing) -> BTreeMap<Field, Standing> {
    [(field, standing)].into_iter().collect()
}

#[test]
fn with_history_a_value_nobody_sent_waits_until_the_command_should_have_landed() {
    let mut task = temperature_task(24.0, 26.0);
    let h = with_history(&task);
    let foreign = one(Field::TargetTemperature, Standing::Foreign);
    for t in [2_000, 2_200, 2_400] {
        see_with(&mut task, t, Ok(&temp(21.0)), &foreign, h);
        assert_eq!(
            task.status,
            Status::Working,
            "at {t}: the command may still land"
        );
    }
    assert!(
        task.status_message
            .contains("ac-living usually acts in about 4.0 s"),
        "{}",
        task.status_message
    );
    see_with(&mut task, 5_600, Ok(&temp(21.0)), &foreign, h);
    assert_eq!(task.status, Status::Failed);
    assert_eq!(
        task.failure.as_ref().unwrap().reason,
        FailureReason::DifferentValue
    );
    assert!(
        task.status_message
            .contains("target_temperature 21 (sent 24)")
    );
}

#[test]
fn with_history_a_device_reporting_offline_is_waited_for_until_its_usual_time() {
    let mut task = temperature_task(24.0, 26.0);
    let h = with_history(&task);
    let offline = reading(&[(Field::TargetTemperature, Value::Number(26.0))], false);
    let waiting = one(
        Field::TargetTemperature,
        Standing::Waiting { earlier: false },
    );
    see_with(&mut task, 2_000, Ok(&offline), &waiting, h);
    assert_eq!(task.status, Status::Working);
    assert!(task.status_message.contains("online: false"));
    see_with(&mut task, 5_600, Ok(&offline), &waiting, h);
    assert_eq!(task.status, Status::Failed);
    assert!(task.status_message.contains("online: false"));
}

#[test]
fn an_earlier_command_s_value_is_not_a_verdict_until_patience_runs_out() {
    let mut task = temperature_task(23.0, 26.0);
    let h = with_history(&task);
    let earlier = one(
        Field::TargetTemperature,
        Standing::Waiting { earlier: true },
    );
    see_with(&mut task, 5_000, Ok(&temp(27.0)), &earlier, h);
    assert_eq!(task.status, Status::Working);
    assert_eq!(
        task.diverged_streak, 0,
        "an earlier command landing is no divergence"
    );
    assert!(
        task.status_message
            .contains("an earlier command to it is still landing"),
        "{}",
        task.status_message
    );
    see_with(&mut task, 10_000, Ok(&temp(27.0)), &earlier, h);
    assert_eq!(task.status, Status::Failed);
    assert_eq!(
        task.failure.as_ref().unwrap().reason,
        FailureReason::NotApplied
    );
    assert!(
        task.status_message
            .contains("the device shows what an earlier command asked for"),
        "{}",
        task.status_message
    );
}

#[test]
fn blocked_is_waiting_and_landed_completes() {
    let mut task = temperature_task(26.0, 26.0);
    let h = with_history(&task);
    see_with(
        &mut task,
        2_000,
        Ok(&temp(26.0)),
        &one(Field::TargetTemperature, Standing::Blocked),
        h,
    );
    assert_eq!(
        task.status,
        Status::Working,
        "an earlier command may still land"
    );
    see_with(
        &mut task,
        6_000,
        Ok(&temp(26.0)),
        &one(Field::TargetTemperature, Standing::Landed),
        h,
    );
    assert_eq!(task.status, Status::Completed);
}

#[test]
fn an_answer_about_a_different_value_reads_the_device_again() {
    let mut task = temperature_task(30.0, 26.0);
    task.can_ask = true;
    see(&mut task, 2_000, Ok(&temp(28.0)));
    see(&mut task, 3_000, Ok(&temp(28.0)));
    let key = task.questions[0].key.clone();
    let mut changed = task.clone();
    assert_eq!(
        changed.answer(9_000, &key, Reply::No, Some(&temp(30.0))),
        Some(AfterAnswer::Nothing)
    );
    assert_eq!(
        changed.status,
        Status::Completed,
        "meanwhile the device shows what was sent: {}",
        changed.status_message
    );
    let mut still = task;
    still.answer(9_000, &key, Reply::No, Some(&temp(27.0)));
    assert_eq!(still.status, Status::Failed);
    assert!(
        still
            .status_message
            .contains("target_temperature 27 (sent 30)"),
        "the latest value: {}",
        still.status_message
    );
}

#[test]
fn typical_times_read_well() {
    assert_eq!(describe_typical(4_040), "about 4.0 s");
    assert_eq!(describe_typical(19_600), "about 20 s");
}
