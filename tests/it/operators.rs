//! The operator's view (docs/GUIDE.md § Operating it): JSON logs, the metrics file, `status` and
//! `release --force`.

use std::process::Stdio;
use std::time::Duration;

use crate::support::logs::{event, json_lines, text_lines};
use crate::support::prometheus::{parse_prometheus, sample};
use crate::support::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn json_logs_carry_the_lifecycle_events() {
    let redis = RedisServer::start();
    let ok =
        run(redlock(&redis).args(["-v", "--log-format", "json", "-k", "lock:json", "--", "true"]), LIMIT);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let lines = json_lines(&ok.stderr);
    let acquired = event(&lines, "acquired");
    assert_eq!(acquired["key"], "lock:json");
    assert!(acquired["fence"].as_i64().is_some() && acquired["wait_ms"].as_u64().is_some());
    assert_eq!(acquired["token"].as_str().map(str::len), Some(8), "only a short token prefix");
    assert_eq!(acquired["kind"], "exclusive");
    assert_eq!(acquired["level"], "INFO");
    assert!(acquired["timestamp"].is_string());
    let released = event(&lines, "released");
    assert_eq!(released["outcome"], "released");
    assert!(released["held_ms"].as_u64().is_some());
    assert_eq!(released["command_status"], 0);

    // Quiet on success without -v.
    let quiet = run(redlock(&redis).args(["--log-format", "json", "-k", "lock:json", "--", "true"]), LIMIT);
    assert_eq!(quiet.code, 0);
    assert_eq!(quiet.stderr, "", "nothing on a successful run");

    redis.cmd::<()>(&[b"SET", b"lock:json", b"other", b"PX", b"60000"]);
    let busy = run(redlock(&redis).args(["--log-format", "json", "-k", "lock:json", "--", "true"]), LIMIT);
    assert_eq!(busy.code, 75);
    let lines = json_lines(&busy.stderr);
    assert_eq!(lines.len(), 1, "one line for a non-command status");
    assert_eq!(lines[0]["level"], "ERROR");
    assert!(lines[0]["message"].as_str().unwrap().contains("busy"));
    redis.cmd::<i64>(&[b"DEL", b"lock:json"]);

    let mut lost = redlock(&redis)
        .args([
            "--log-format",
            "json",
            "-k",
            "lock:json",
            "--ttl",
            "3s",
            "--renew-every",
            "200ms",
            "--",
            "sleep",
            "30",
        ])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:json")));
    redis.cmd::<i64>(&[b"DEL", b"lock:json"]);
    let out = wait_output(&mut lost, LIMIT);
    assert_eq!(out.status.code(), Some(125));
    let lines = json_lines(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(event(&lines, "lock lost")["level"], "WARN");
    let stopped = event(&lines, "the command was stopped");
    assert_eq!(stopped["level"], "ERROR", "one error line for exit 125");
    assert_eq!((&stopped["exit_status"], &stopped["key"]), (&Value::from(125), &Value::from("lock:json")));
    let stopping = event(&lines, "stopping the command");
    assert_eq!(stopping["signal"], "SIGTERM");
    assert!(stopping["reason"].is_string());
    assert_eq!(event(&lines, "released")["outcome"], "not-owner");
}

#[test]
fn the_metrics_file_is_prometheus_text_and_keeps_the_last_success() {
    let redis = RedisServer::start();
    let dir = tmp();
    let path = file(&dir, "job.prom");
    let ok = run(
        redlock(&redis)
            .args(["-k", "lock:metrics", "--ttl", "1s", "--metrics-file"])
            .arg(&path)
            .args(["--", "sleep", "0.8"]),
        LIMIT,
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let samples = parse_prometheus(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(sample(&samples, r#"redlock_run_outcome{key="lock:metrics",outcome="success"}"#), Some(1.0));
    assert_eq!(sample(&samples, r#"redlock_run_outcome{key="lock:metrics",outcome="busy"}"#), Some(0.0));
    assert!(sample(&samples, r#"redlock_run_renewals{key="lock:metrics"}"#).unwrap() >= 1.0);
    assert!(sample(&samples, r#"redlock_run_hold_seconds{key="lock:metrics"}"#).unwrap() >= 0.8);
    let success =
        sample(&samples, r#"redlock_run_last_success_timestamp_seconds{key="lock:metrics"}"#).unwrap();
    assert!(success > 1.7e9);

    redis.cmd::<()>(&[b"SET", b"lock:metrics", b"other", b"PX", b"60000"]);
    let busy = run(
        redlock(&redis).args(["-k", "lock:metrics", "--metrics-file"]).arg(&path).args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(busy.code, 75);
    let samples = parse_prometheus(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(sample(&samples, r#"redlock_run_outcome{key="lock:metrics",outcome="busy"}"#), Some(1.0));
    assert_eq!(sample(&samples, r#"redlock_run_exit_status{key="lock:metrics"}"#), Some(75.0));
    assert_eq!(
        sample(&samples, r#"redlock_run_last_success_timestamp_seconds{key="lock:metrics"}"#),
        Some(success),
        "the last success survives a failed run"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("job.prom")], "no temp file left behind");

    // A key needing escapes still gives valid label syntax.
    let odd = run(
        redlock(&redis).args(["-k", "lock:\"odd\\key", "--metrics-file"]).arg(&path).args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(odd.code, 0, "{}", odd.stderr);
    let samples = parse_prometheus(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(
        sample(&samples, r#"redlock_run_outcome{key="lock:\"odd\\key",outcome="success"}"#),
        Some(1.0)
    );
}

#[test]
fn status_shows_the_holder_and_exits_by_state() {
    let redis = RedisServer::start();
    let status = |json: bool| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(["status", "--redis-url", &redis.url(), "--key", "lock:status"]);
        if json {
            cmd.arg("--json");
        }
        run(&mut cmd, LIMIT)
    };
    let free = status(false);
    assert_eq!(free.code, 1, "free: {}", free.stderr);
    assert!(String::from_utf8_lossy(&free.stdout).contains("free"));
    let free: Value = serde_json::from_slice(&status(true).stdout).expect("status --json is JSON");
    assert_eq!(
        (&free["version"], &free["held"], &free["expires"]),
        (&Value::from(1), &Value::from(false), &Value::Null)
    );

    assert_eq!(
        run(
            redlock(&redis).args(["-k", "lock:status", "--idempotency-key", "2026-11-30", "--", "true"]),
            LIMIT
        )
        .code,
        0
    );
    let mut holder = redlock(&redis).args(["-k", "lock:status", "--", "sleep", "5"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:status")));
    let held = status(false);
    assert_eq!(held.code, 0, "{}", held.stderr);
    let text = String::from_utf8_lossy(&held.stdout);
    assert!(text.contains(&format!("pid {}", holder.id())), "{text}");
    assert!(text.contains(&nix::unistd::gethostname().unwrap().into_string().unwrap()), "{text}");
    assert!(text.contains("left"), "TTL: {text}");
    assert!(text.contains("2026-11-30"), "idempotency record: {text}");

    let json = status(true);
    assert_eq!(json.code, 0);
    let v: Value = serde_json::from_slice(&json.stdout).expect("status --json is JSON");
    assert_eq!(v["version"], 1);
    assert_eq!(v["held"], true);
    assert_eq!(v["expires"], true);
    assert_eq!(v["holder"]["pid"], holder.id());
    assert!(v["ttl_ms"].as_u64().unwrap() > 20_000);
    assert!(v["fence"].as_i64().is_some());
    assert_eq!(v["idempotency_records"][0]["id"], "2026-11-30");
    let _ = holder.kill();
    let _ = holder.wait();

    let nowhere = run(
        std::process::Command::new(bin()).args([
            "status",
            "--key",
            "k",
            "--redis-url",
            &format!("redis://127.0.0.1:{}", free_port()),
        ]),
        LIMIT,
    );
    assert_eq!(nowhere.code, 69, "{}", nowhere.stderr);
}

#[test]
fn release_force_frees_a_stuck_lock_and_wakes_waiters() {
    let redis = RedisServer::start();
    let refused = run(
        std::process::Command::new(bin()).args([
            "release",
            "--redis-url",
            &redis.url(),
            "--key",
            "lock:stuck",
        ]),
        LIMIT,
    );
    assert_eq!(refused.code, 64, "needs --force: {}", refused.stderr);
    assert!(refused.stderr.contains("--force"));

    let mut holder = redlock(&redis)
        .args(["-k", "lock:stuck", "--ttl", "10s", "--renew-every", "300ms", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:stuck")));
    let dir = tmp();
    let started = file(&dir, "started");
    let mut waiter = redlock(&redis)
        .args(["-k", "lock:stuck", "--wait", "20s", "--", "touch"])
        .arg(&started)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(b"{lock:stuck}:queue")), "the waiter waits");
    let released = run(
        std::process::Command::new(bin()).args([
            "release",
            "--redis-url",
            &redis.url(),
            "--key",
            "lock:stuck",
            "--force",
        ]),
        LIMIT,
    );
    assert_eq!(released.code, 0, "{}", released.stderr);
    let said = String::from_utf8_lossy(&released.stdout);
    assert!(said.contains(&format!("pid {}", holder.id())), "says whose lock it was: {said}");
    // Long before its 20 s wait ends, with room for a loaded machine.
    assert!(wait_until(Duration::from_secs(5), || started.exists()), "the waiter woke at once");
    let out = wait_output(&mut holder, LIMIT);
    assert_eq!(
        out.status.code(),
        Some(125),
        "the old holder noticed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(wait_output(&mut waiter, LIMIT).status.success());

    let again = run(
        std::process::Command::new(bin()).args([
            "release",
            "--redis-url",
            &redis.url(),
            "--key",
            "lock:stuck",
            "--force",
        ]),
        LIMIT,
    );
    assert_eq!(again.code, 1, "nothing to release: {}", again.stderr);
}

#[test]
fn status_and_release_into_a_closed_pipe_exit_quietly_by_state() {
    let redis = RedisServer::start();
    let op = |args: &[&str]| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(args).args(["--redis-url", &redis.url(), "--key", "lock:pipe"]);
        run_into_closed_pipe(&mut cmd, LIMIT)
    };
    let free = op(&["status"]);
    assert_eq!((free.code, free.stderr.as_str()), (1, ""), "free, said nothing");
    let nothing = op(&["release", "--force"]);
    assert_eq!((nothing.code, nothing.stderr.as_str()), (1, ""), "nothing to release");

    redis.cmd::<()>(&[b"SET", b"lock:pipe", b"someone", b"PX", b"60000"]);
    for json in [false, true] {
        let held = op(if json { &["status", "--json"] } else { &["status"] });
        assert_eq!((held.code, held.stderr.as_str()), (0, ""), "held, said nothing (json: {json})");
    }
    let released = op(&["release", "--force"]);
    assert_eq!(released.code, 0, "released: {}", released.stderr);
    assert!(!released.stderr.contains("internal error"), "{}", released.stderr);
    assert!(!redis.exists(b"lock:pipe"));
}

/// `release --force --json`: one JSON object saying whether a lock was released and whose.
#[test]
fn release_force_json_says_whose_lock_it_was() {
    let redis = RedisServer::start();
    let release = || {
        run(
            std::process::Command::new(bin()).args([
                "release",
                "--redis-url",
                &redis.url(),
                "--key",
                "lock:rel-json",
                "--force",
                "--json",
            ]),
            LIMIT,
        )
    };
    let mut holder = redlock(&redis).args(["-k", "lock:rel-json", "--", "sleep", "5"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:rel-json")));
    let r = release();
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_slice(&r.stdout).expect("release --json is JSON");
    assert_eq!(v["version"], 1);
    assert_eq!(v["released"], true);
    assert_eq!(v["holder"]["pid"], holder.id());
    assert_eq!(v["foreign_value"], false);
    assert!(!redis.exists(b"lock:rel-json"));
    let r = release();
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v: Value = serde_json::from_slice(&r.stdout).expect("release --json is JSON");
    assert_eq!((&v["released"], &v["holder"]), (&Value::from(false), &Value::Null));
}

/// Text logs show the key the same way on every line: its escaped bytes, as a logfmt value
/// (quoted here, for its space and quotes).
#[test]
fn text_logs_show_the_key_alike_on_every_line() {
    let redis = RedisServer::start();
    let r = run(redlock(&redis).args(["-v", "-k", "a\nb \"c\"", "--", "true"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines = text_lines(&r.stderr);
    assert_eq!(lines.len(), 2, "acquired and released: {}", r.stderr);
    for line in lines {
        let key = line.fields.iter().find(|(n, _)| n == "key").map(|(_, v)| v.as_str());
        assert_eq!(key, Some(r#"a\nb \"c\""#), "{}", r.stderr);
    }
    assert!(r.stderr.contains(r#" key="a\\nb \\\"c\\\"" "#), "{}", r.stderr);
}

/// Every JSON line says it is the wrapper's, so that a collector that merges the command's
/// output with the wrapper's can tell them apart.
#[test]
fn every_json_line_names_the_wrapper_as_its_source() {
    let redis = RedisServer::start();
    let r =
        run(redlock(&redis).args(["-vv", "--log-format", "json", "-k", "lock:source", "--", "true"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines = json_lines(&r.stderr);
    assert!(lines.len() >= 2, "acquired and released at least: {lines:#?}");
    for line in &lines {
        assert_eq!(line["source"], "redlock-run", "{line}");
    }
}

/// The error line of a busy lock carries the status, the key, the holder and its time left as
/// fields; with -q there is none.
#[test]
fn a_busy_lock_s_json_error_line_names_the_holder() {
    let redis = RedisServer::start();
    let key = "lock:\"busy\"";
    let value = "0123456789abcdef0123456789abcdef web-1 4711 1764460800000";
    redis.cmd::<()>(&["SET", key, value, "PX", "60000"].map(str::as_bytes));
    let busy = |extra: &[&str]| {
        let r = run(
            redlock(&redis).args(["--log-format", "json", "-k", key]).args(extra).args(["--", "true"]),
            LIMIT,
        );
        let lines = json_lines(&r.stderr);
        (r.code, lines)
    };

    let (code, lines) = busy(&[]);
    assert_eq!(code, 75);
    assert_eq!(lines.len(), 1, "one line: {lines:#?}");
    let error = &lines[0];
    assert_eq!(error["level"], "ERROR");
    assert_eq!(error["source"], "redlock-run");
    assert_eq!(error["exit_status"], 75);
    assert_eq!(error["key"], r#"lock:\"busy\""#, "escaped as on every other line");
    assert_eq!(
        (&error["holder"]["host"], &error["holder"]["pid"], &error["holder"]["since"]),
        (&Value::from("web-1"), &Value::from(4711), &Value::from("2025-11-30T00:00:00Z")),
        "{error}"
    );
    assert_eq!(error["foreign_value"], false);
    let left = error["expires_in_ms"].as_u64().unwrap_or_else(|| panic!("expires_in_ms: {error}"));
    assert!(left > 0 && left <= 60_000, "{left}");

    let (code, lines) = busy(&["--busy-exit-code", "3"]);
    assert_eq!(code, 3);
    assert_eq!(lines[0]["exit_status"], 3, "{lines:#?}");

    let (code, lines) = busy(&["-q"]);
    assert_eq!((code, lines.len()), (75, 0), "-q: a busy lock is an expected outcome");

    // A value of someone else's, with no expiry.
    redis.cmd::<()>(&["SET", key, "other"].map(str::as_bytes));
    let (code, lines) = busy(&[]);
    assert_eq!(code, 75);
    assert_eq!(lines[0]["holder"], Value::Null, "no redlock-run holder: {}", lines[0]);
    assert_eq!(lines[0]["foreign_value"], true);
    assert_eq!(lines[0]["expires_in_ms"], Value::Null, "no expiry, no field: {}", lines[0]);
}

#[test]
fn an_unreachable_redis_s_json_error_line_carries_status_69() {
    let r = run(
        wrapper().args([
            "--log-format",
            "json",
            "-k",
            "lock:nowhere",
            "--redis-url",
            &format!("redis://127.0.0.1:{}", free_port()),
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 69, "{}", r.stderr);
    let lines = json_lines(&r.stderr);
    let error = event(&lines, "cannot reach Redis");
    assert_eq!(error["level"], "ERROR");
    assert_eq!(error["source"], "redlock-run");
    assert_eq!(error["exit_status"], 69);
    assert_eq!(error["key"], "lock:nowhere");
}
