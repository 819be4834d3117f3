//! settle's fuzzer, on stable Rust: a corpus of real inputs, mutated (bytes
//! flipped, cut, repeated and spliced; JSON values swapped for wrong types,
//! NaN-like and huge numbers, deep nesting), fed to each target with a
//! panic counted as a crash. Every crashing input is written to
//! `fuzz/crashes/`, and the run ends with the count of inputs and crashes
//! per target.
//!
//! Targets:
//! - `http`: a JSON-RPC POST body through the HTTP handler's frame check
//!   (what `/mcp` does before rmcp sees a message), and `listen`'s rename;
//! - `stdio`: bytes through the stdio transport's line framing, then each
//!   line through the same check;
//! - `tenants`: a tenants file through the runner's config loader;
//! - `profile`: a device profile through `Profile::parse`;
//! - `answer`: what a device API sends back (status and body) through the
//!   drivers' classification and the profile and Home Assistant readers;
//! - `tools`: tool arguments through the device plugin's tools
//!   (`settle_devices::tools::call`, the code the component runs) over the
//!   in-memory platform.
//!
//! `settle-fuzz [TOTAL] [TARGET...]`: `TOTAL` inputs shared by the targets
//! (default 1,000,000), all targets unless some are named. The exit status
//! is 1 when anything crashed.

mod corpus;
mod mutate;
mod targets;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let total: u64 = args
        .next()
        .map(|n| n.replace('_', "").parse().expect("TOTAL is a number"))
        .unwrap_or(1_000_000);
    let named: Vec<String> = args.collect();
    if fuzz(total, &named) > 0 {
        std::process::exit(1);
    }
}

/// Runs `total` inputs shared by the targets (every one unless some are
/// `named`), prints the count and crashes of each, and returns the
/// crashes.
fn fuzz(total: u64, named: &[String]) -> u64 {
    let targets: Vec<&targets::Target> = targets::ALL
        .iter()
        .filter(|t| named.is_empty() || named.iter().any(|n| n == t.name))
        .collect();
    assert!(
        !targets.is_empty(),
        "no such target; known: http, stdio, tenants, profile, answer, tools"
    );
    // Panics are what is counted; their messages would flood the output.
    let reporting = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let crash_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crashes");
    let weight: u64 = targets.iter().map(|t| t.weight).sum();
    let started = Instant::now();
    let (mut all_inputs, mut all_crashes) = (0u64, 0u64);
    println!(
        "{:<8} {:>12} {:>8} {:>10} {:>12}",
        "target", "inputs", "crashes", "seconds", "inputs/s"
    );
    for target in targets {
        let inputs = total * target.weight / weight;
        let seeds = (target.corpus)();
        let mut rng = mutate::Rng::new(0x5e771e ^ target.name.len() as u64);
        let mut run = (target.setup)();
        let begun = Instant::now();
        let mut crashes = 0u64;
        for i in 0..inputs {
            let input = mutate::mutate(&mut rng, &seeds, target.json);
            if catch_unwind(AssertUnwindSafe(|| run(&input))).is_err() {
                crashes += 1;
                let _ = std::fs::create_dir_all(&crash_dir);
                let path = crash_dir.join(format!("{}-{i}.bin", target.name));
                let _ = std::fs::write(&path, &input);
                eprintln!("CRASH {}: input written to {}", target.name, path.display());
            }
        }
        let seconds = begun.elapsed().as_secs_f64();
        println!(
            "{:<8} {:>12} {:>8} {:>10.1} {:>12.0}",
            target.name,
            inputs,
            crashes,
            seconds,
            inputs as f64 / seconds.max(1e-9)
        );
        all_inputs += inputs;
        all_crashes += crashes;
    }
    println!(
        "total    {all_inputs:>12} {all_crashes:>8} {:>10.1}",
        started.elapsed().as_secs_f64()
    );
    std::panic::set_hook(reporting);
    all_crashes
}

#[cfg(test)]
mod tests {
    /// `make test`'s share of `make fuzz`: the same targets and mutations,
    /// `FUZZ_SHORT` inputs (60,000 by default), inside the test build so it
    /// costs no build of its own.
    #[test]
    fn a_short_budget_of_every_target_finds_no_crash() {
        let total = std::env::var("FUZZ_SHORT")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(60_000);
        assert_eq!(
            super::fuzz(total, &[]),
            0,
            "crashing inputs are in fuzz/crashes/"
        );
    }
}
