//! The plugin's verdicts against a reference device that knows the truth,
//! over many random sequences of commands, retargets, cancels,
//! confirmations, faults and changes at the wall (see `support/mod.rs`).
//!
//! `make test` runs a short budget. `make bench-verdicts` runs 100,000
//! sequences in release. To replay one sequence with its log:
//! `VERDICT_SEED=<seed> cargo test -p settle-devices --test verdicts -- --nocapture`.

mod support;

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn every_verdict_matches_what_the_device_did() {
    if let Some(seed) = env("VERDICT_SEED") {
        let report = support::run(seed);
        println!("{}", report.log);
        println!("verdicts: {:?}", report.verdicts);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        return;
    }
    let count = env("VERDICT_SEQUENCES").unwrap_or(300);
    let first = env("VERDICT_FIRST_SEED").unwrap_or(1);
    let started = std::time::Instant::now();
    let summary = support::run_many(first, count);
    println!(
        "{} sequences, {} tasks, {} sensor reads in {:.1} s; verdicts: {:?}",
        summary.sequences,
        summary.tasks,
        summary.reads,
        started.elapsed().as_secs_f64(),
        summary.verdicts
    );
    println!(
        "wrong verdicts: {}",
        summary
            .failing
            .iter()
            .map(|(_, r)| r.violations.len())
            .sum::<usize>()
    );
    for (seed, report) in summary.failing.iter().take(20) {
        for violation in &report.violations {
            println!("seed {seed}: {violation}");
        }
    }
    if let Some((seed, report)) = summary.failing.first() {
        panic!(
            "{} of {} sequences had wrong verdicts; the first is seed {seed} \
             (replay: VERDICT_SEED={seed} cargo test -p settle-devices --test verdicts -- --nocapture):\n{:#?}\n{}",
            summary.failing.len(),
            summary.sequences,
            report.violations,
            report.log
        );
    }
    assert!(summary.tasks > 0);
}
