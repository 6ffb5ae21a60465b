//! Every outcome writes the same series, so that alerts need no `absent()`: a value that does
//! not apply to the outcome is NaN, and the last success is carried over from the file the run
//! replaces (0 when it holds none), so that "no success for a day" fires for a job that never
//! succeeded.

use std::path::Path;
use std::time::Duration;

use crate::support::prometheus::{parse_prometheus, promtool_check, sample};
use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);
const KEY: &str = "lock:series";

/// Every series of a metrics file of `KEY`, whatever the outcome.
fn every_series() -> Vec<String> {
    let one = |name: &str| format!("{name}{{key=\"{KEY}\"}}");
    let mut all: Vec<String> = [
        "success",
        "unrecorded",
        "failed",
        "busy",
        "skipped",
        "lost",
        "timeout",
        "unavailable",
        "unlocked",
        "interrupted",
        "not_run",
        "error",
    ]
    .iter()
    .map(|o| format!("redlock_run_outcome{{key=\"{KEY}\",outcome=\"{o}\"}}"))
    .collect();
    all.extend(
        [
            "redlock_run_last_run_timestamp_seconds",
            "redlock_run_exit_status",
            "redlock_run_command_exit_status",
            "redlock_run_acquire_wait_seconds",
            "redlock_run_queue_position",
            "redlock_run_hold_seconds",
            "redlock_run_renewals",
            "redlock_run_renewal_failures",
            "redlock_run_lock_lost",
            "redlock_run_last_success_timestamp_seconds",
        ]
        .map(one),
    );
    all.sort();
    all
}

/// Runs the wrapper on `key` at `url` with `--metrics-file path` and then `args` (options, `--`
/// and the command), and returns its exit status and samples, checked (by promtool too, when
/// it is installed).
fn metrics(url: &str, key: &str, path: &Path, args: &[&str]) -> (i32, Vec<(String, f64)>) {
    let r = run(redlock_at(url).args(["-k", key, "--metrics-file"]).arg(path).args(args), LIMIT);
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("no metrics file ({e}): {}", r.stderr));
    promtool_check(&text);
    (r.code, parse_prometheus(&text))
}

fn value(samples: &[(String, f64)], name: &str) -> f64 {
    sample(samples, &format!("{name}{{key=\"{KEY}\"}}")).unwrap_or_else(|| panic!("no {name} in {samples:?}"))
}

/// One outcome: how to get it (Redis, the rest of the command line), its exit status, and
/// whether the command ran and the lock was held.
struct Case<'a> {
    outcome: &'a str,
    url: &'a str,
    args: &'a [&'a str],
    code: i32,
    ran: bool,
    held: bool,
}

#[test]
fn every_outcome_writes_every_series_with_nan_where_it_does_not_apply() {
    let redis = RedisServer::start();
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let dir = tmp();
    let done =
        run(redlock(&redis).args(["-k", KEY]).args(["--idempotency-key", "day-1", "--", "true"]), LIMIT);
    assert_eq!(done.code, 0, "{}", done.stderr);

    let url = redis.url();
    let cases = [
        Case { outcome: "success", url: &url, args: &["--", "true"], code: 0, ran: true, held: true },
        Case {
            outcome: "failed",
            url: &url,
            args: &["--", "sh", "-c", "exit 3"],
            code: 3,
            ran: true,
            held: true,
        },
        Case {
            outcome: "timeout",
            url: &url,
            args: &["--max-runtime", "100ms", "--", "sleep", "10"],
            code: 124,
            ran: true,
            held: true,
        },
        Case {
            outcome: "not_run",
            url: &url,
            args: &["--", "/nonexistent/command"],
            code: 127,
            ran: false,
            held: true,
        },
        Case {
            outcome: "skipped",
            url: &url,
            args: &["--idempotency-key", "day-1", "--", "true"],
            code: 0,
            ran: false,
            held: false,
        },
        Case {
            outcome: "unavailable",
            url: &nowhere,
            args: &["--", "true"],
            code: 69,
            ran: false,
            held: false,
        },
        Case {
            outcome: "unlocked",
            url: &nowhere,
            args: &["--fail-open", "--", "true"],
            code: 0,
            ran: true,
            held: false,
        },
        Case { outcome: "busy", url: &url, args: &["--", "true"], code: 75, ran: false, held: false },
    ];
    for Case { outcome, url, args, code, ran, held } in cases {
        if outcome == "busy" {
            redis.cmd::<()>(&[b"SET", KEY.as_bytes(), b"someone-else", b"PX", b"60000"]);
        }
        let path = file(&dir, &format!("{outcome}.prom"));
        let (status, samples) = metrics(url, KEY, &path, args);
        assert_eq!(status, code, "{outcome}");
        let mut series: Vec<String> = samples.iter().map(|(s, _)| s.clone()).collect();
        series.sort();
        assert_eq!(series, every_series(), "{outcome}: the same series as every other outcome");
        let is = |o: &str| sample(&samples, &format!("redlock_run_outcome{{key=\"{KEY}\",outcome=\"{o}\"}}"));
        assert_eq!(is(outcome), Some(1.0), "{outcome}");
        assert_eq!(value(&samples, "redlock_run_exit_status"), code as f64, "{outcome}");
        let command = value(&samples, "redlock_run_command_exit_status");
        assert_eq!(command.is_nan(), !ran, "{outcome}: command_exit_status {command}");
        let hold = value(&samples, "redlock_run_hold_seconds");
        assert_eq!(hold.is_nan(), !held, "{outcome}: hold_seconds {hold}");
        let last_success = value(&samples, "redlock_run_last_success_timestamp_seconds");
        if outcome == "success" {
            assert!(last_success > 1.7e9, "{outcome}: {last_success}");
        } else {
            assert_eq!(last_success, 0.0, "{outcome}: no success recorded in this file yet");
        }
        for counted in ["redlock_run_renewals", "redlock_run_renewal_failures", "redlock_run_lock_lost"] {
            assert!(!value(&samples, counted).is_nan(), "{outcome}: {counted} is a count");
        }
    }
}

#[test]
fn the_last_success_carries_over_per_key_and_is_zero_without_one() {
    let redis = RedisServer::start();
    let dir = tmp();
    let path = file(&dir, "job.prom");
    let last_success =
        |samples: &[(String, f64)]| value(samples, "redlock_run_last_success_timestamp_seconds");
    let busy = || metrics(&redis.url(), KEY, &path, &["--", "true"]);

    redis.cmd::<()>(&[b"SET", KEY.as_bytes(), b"someone-else", b"PX", b"60000"]);
    let (code, samples) = busy();
    assert_eq!((code, last_success(&samples)), (75, 0.0), "never succeeded: 0, not absent");
    redis.cmd::<i64>(&[b"DEL", KEY.as_bytes()]);

    let (code, samples) = metrics(&redis.url(), KEY, &path, &["--", "true"]);
    assert_eq!(code, 0);
    let succeeded = last_success(&samples);
    assert!(succeeded > 1.7e9, "{succeeded}");

    redis.cmd::<()>(&[b"SET", KEY.as_bytes(), b"someone-else", b"PX", b"60000"]);
    let (code, samples) = busy();
    assert_eq!((code, last_success(&samples)), (75, succeeded), "carried over from the file it replaces");

    // Another key's success in the file is not this key's.
    let other = metrics(&redis.url(), "lock:other", &path, &["--", "true"]);
    assert_eq!(other.0, 0);
    let (code, samples) = busy();
    assert_eq!((code, last_success(&samples)), (75, 0.0), "no success of {KEY} in the file");
}

/// A run that queued and gave up (its wait ran out, or a signal ended it) still says where it
/// stood in the queue.
#[test]
fn a_run_that_queued_and_gave_up_keeps_its_place_in_the_queue() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"SET", KEY.as_bytes(), b"someone-else", b"PX", b"60000"]);
    let dir = tmp();
    let path = dir.path().join("job.prom");
    let (code, samples) = metrics(&redis.url(), KEY, &path, &["--wait", "300ms", "--", "true"]);
    assert_eq!(code, 75);
    assert_eq!(value(&samples, "redlock_run_queue_position"), 1.0, "queued first, then gave up");
}
