//! The alerts an operator loads (`contrib/prometheus/redlock-run.rules.yml`, docs/GUIDE.md §
//! Alerts), checked by `promtool check rules` and unit-tested by `promtool test rules` on the
//! series that real runs wrote: which alerts fire, and which stay quiet, for a success, a key
//! kept busy, a lost lock and a run without the lock.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::prometheus::parse_prometheus;
use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus/redlock-run.rules.yml")
}

/// `promtool ARGS`: its status and what it said, or `None` when it is not installed.
fn promtool(args: &[&std::ffi::OsStr]) -> Option<(bool, String)> {
    let mut child =
        Command::new("promtool").args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().ok()?;
    let out = wait_output(&mut child, LIMIT);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), said))
}

/// The rules without their annotations, which `promtool test rules` would otherwise compare
/// word for word: the tests are about what fires (`check rules` reads the annotations).
fn without_annotations(rules: &str) -> String {
    let mut out = Vec::new();
    let mut skipping: Option<usize> = None;
    for line in rules.lines() {
        let indent = line.len() - line.trim_start().len();
        match skipping {
            Some(at) if line.trim().is_empty() || indent > at => continue,
            _ => skipping = None,
        }
        if line.trim() == "annotations:" {
            skipping = Some(indent);
            continue;
        }
        out.push(line);
    }
    out.join("\n") + "\n"
}

/// One metrics file, as the textfile collector of `instance` exposes it.
struct Host {
    instance: &'static str,
    samples: Vec<(String, f64)>,
}

/// The runs' metrics, as `promtool test rules` input: every series of every file, each held
/// for 33 hours at its value (the collector exposes the file unchanged until the next run), the
/// timestamps counted from the runs' first second so that the test's clock (0 at its start)
/// is theirs. A last success of 0 (never) stays 0.
fn input_series(hosts: &[Host], extra: &[(&str, f64)]) -> Vec<Value> {
    let stamps = |name: &str| name.ends_with("_timestamp_seconds");
    let base = hosts
        .iter()
        .flat_map(|h| &h.samples)
        .filter(|(s, v)| stamps(s.split('{').next().unwrap()) && *v > 0.0)
        .map(|(_, v)| v.floor())
        .fold(f64::INFINITY, f64::min);
    let held = |series: String, value: f64| json!({ "series": series, "values": format!("{value}+0x200") });
    let mut all: Vec<Value> = hosts
        .iter()
        .flat_map(|h| {
            h.samples.iter().map(move |(series, value)| {
                let (name, labels) = series.split_once('{').expect("labels");
                let value = if stamps(name) && *value > 0.0 { value - base } else { *value };
                held(format!("{name}{{instance=\"{}\",job=\"node\",{labels}", h.instance), value)
            })
        })
        .collect();
    all.extend(extra.iter().map(|(series, value)| held((*series).to_owned(), *value)));
    all
}

/// An alert `promtool test rules` should see firing: its key, and the host for the per-run ones.
fn fired(name: &str, key: &str, instance: Option<&str>) -> Value {
    let severity =
        if ["RedlockRunLockLost", "RedlockRunWithoutLock"].contains(&name) { "critical" } else { "warning" };
    let mut labels = json!({ "key": key, "severity": severity });
    if let Some(instance) = instance {
        labels["instance"] = json!(instance);
        labels["job"] = json!("node");
    }
    if name == "RedlockRunWithoutLock" {
        labels["outcome"] = json!("unlocked");
    }
    json!({ "exp_labels": labels })
}

/// Runs the wrapper with `--metrics-file path`; returns its exit status.
fn run_into(url: &str, path: &Path, args: &[&str]) -> i32 {
    let r = run(redlock_at(url).arg("--metrics-file").arg(path).args(args), LIMIT);
    r.code
}

#[test]
fn the_alerts_fire_on_what_real_runs_wrote_and_only_then() {
    let Some((ok, said)) = promtool(&["check".as_ref(), "rules".as_ref(), rules_file().as_os_str()]) else {
        eprintln!("skipped: promtool is not installed (apt install prometheus)");
        return;
    };
    assert!(ok, "promtool check rules: {said}");

    let redis = RedisServer::start();
    let url = redis.url();
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let dir = tmp();
    let taken = |key: &str| redis.cmd::<()>(&[b"SET", key.as_bytes(), b"someone-else", b"PX", b"60000"]);

    // A daily job that succeeded; and one whose next run (the same file) found it busy.
    let ok = file(&dir, "ok.prom");
    assert_eq!(run_into(&url, &ok, &["-k", "lock:alerts:ok", "--", "true"]), 0);
    let daily = file(&dir, "daily.prom");
    assert_eq!(run_into(&url, &daily, &["-k", "lock:alerts:daily", "--", "true"]), 0);
    taken("lock:alerts:daily");
    assert_eq!(run_into(&url, &daily, &["-k", "lock:alerts:daily", "--", "true"]), 75);
    // A job expected every second, found busy longer than that after its success.
    let late = file(&dir, "late.prom");
    assert_eq!(run_into(&url, &late, &["-k", "lock:alerts:late", "--", "true"]), 0);
    std::thread::sleep(Duration::from_millis(1100));
    taken("lock:alerts:late");
    assert_eq!(run_into(&url, &late, &["-k", "lock:alerts:late", "--", "true"]), 75);
    // A run whose key another holder overwrote while its command ran.
    let lost = file(&dir, "lost.prom");
    let mut losing = redlock(&redis)
        .args(["-k", "lock:alerts:lost", "--ttl", "3s", "--metrics-file"])
        .arg(&lost)
        .args(["--", "sleep", "30"])
        .stderr(Stdio::null())
        .start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(b"lock:alerts:lost")), "the lock was taken");
    taken("lock:alerts:lost");
    assert_eq!(wait_bounded(&mut losing, LIMIT).code(), Some(125));
    // --fail-open with Redis down.
    let unlocked = file(&dir, "unlocked.prom");
    assert_eq!(
        run_into(&nowhere, &unlocked, &["-k", "lock:alerts:unlocked", "--fail-open", "--", "true"]),
        0
    );

    let read = |path: &Path| parse_prometheus(&std::fs::read_to_string(path).unwrap());
    let hosts = [
        Host { instance: "a", samples: read(&ok) },
        Host { instance: "a", samples: read(&daily) },
        Host { instance: "a", samples: read(&late) },
        Host { instance: "b", samples: read(&lost) },
        Host { instance: "c", samples: read(&unlocked) },
    ];
    let series =
        input_series(&hosts, &[("redlock_run_expected_period_seconds{key=\"lock:alerts:late\"}", 1.0)]);

    let alerts = |at: &str, name: &str, expected: Vec<Value>| json!({ "eval_time": at, "alertname": name, "exp_alerts": expected });
    let keys = ["ok", "daily", "late", "lost", "unlocked"].map(|k| format!("lock:alerts:{k}"));
    let (lost_on_b, unlocked_on_c) = (
        fired("RedlockRunLockLost", "lock:alerts:lost", Some("b")),
        fired("RedlockRunWithoutLock", "lock:alerts:unlocked", Some("c")),
    );
    let tests = json!({
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "10m",
            "input_series": series,
            "alert_rule_test": [
                // Ten minutes on: only the job expected every second is late, and busy too long.
                alerts("10m", "RedlockRunNoRecentSuccess", vec![fired("RedlockRunNoRecentSuccess", &keys[2], None)]),
                alerts("10m", "RedlockRunBusyTooLong", vec![fired("RedlockRunBusyTooLong", &keys[2], None)]),
                alerts("10m", "RedlockRunLockLost", vec![lost_on_b.clone()]),
                alerts("10m", "RedlockRunWithoutLock", vec![unlocked_on_c.clone()]),
                // A day and two hours on: every key is late (those that never succeeded count
                // from the clock's start); the daily job's busy run came seconds after its
                // success, not a period.
                alerts("26h", "RedlockRunNoRecentSuccess",
                    keys.iter().map(|k| fired("RedlockRunNoRecentSuccess", k, None)).collect()),
                alerts("26h", "RedlockRunBusyTooLong", vec![fired("RedlockRunBusyTooLong", &keys[2], None)]),
                alerts("26h", "RedlockRunLockLost", vec![lost_on_b]),
                alerts("26h", "RedlockRunWithoutLock", vec![unlocked_on_c]),
            ],
        }],
    });
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    std::fs::write(file(&dir, "rules.yml"), without_annotations(&rules)).unwrap();
    // JSON is YAML.
    let test_file = file(&dir, "tests.yml");
    std::fs::write(&test_file, serde_json::to_string_pretty(&tests).unwrap()).unwrap();
    let (ok, said) =
        promtool(&["test".as_ref(), "rules".as_ref(), test_file.as_os_str()]).expect("promtool ran before");
    assert!(ok, "promtool test rules: {said}\n{}", serde_json::to_string_pretty(&tests).unwrap());
}
