//! Every line a run writes, in both formats, parses (logfmt after the message in text, an
//! object in JSON) and says whose it is: the key, this run's holder (host, pid, token prefix)
//! and, from the acquisition on, its fence. A busy lock's holder is an object in JSON, as
//! `status --json` shows it. No token above debug level but its prefix.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::logs::{json_lines, text_lines};
use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);
/// Bytes that need escaping: not UTF-8, a space, quotes.
const KEY: &[u8] = b"lock:\xff \"obs\"";

fn key() -> &'static OsStr {
    OsStr::from_bytes(KEY)
}

/// The events that carry the fence (by how their message starts).
const FENCED: &[&str] = &["acquired", "renewed", "lock lost", "stopping the command", "released"];

/// One run's stderr, with what its lines must say.
struct Said {
    what: &'static str,
    pid: u32,
    stderr: String,
    /// The run took the lock: its lines from `acquired` on carry the fence.
    fenced: bool,
}

fn wrapper_on(url: &str, format: &str, args: &[&str]) -> Command {
    let mut cmd = redlock_at(url);
    cmd.args(["--log-format", format, "-k"]).arg(key()).args(args);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

fn finish(what: &'static str, mut child: Process, fenced: bool) -> Said {
    let pid = child.id();
    let out = wait_output(&mut child, LIMIT);
    Said { what, pid, stderr: String::from_utf8_lossy(&out.stderr).into_owned(), fenced }
}

/// Drives runs through every outcome and returns what each wrote, and the token of the run
/// that lost its lock (for the check that no line shows it whole).
fn every_outcome(format: &str) -> (Vec<Said>, String) {
    let redis = RedisServer::start();
    let url = redis.url();
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let on = |args: &[&str]| wrapper_on(&url, format, args);
    let mut said = Vec::new();

    // Acquired, renewed (-vv), ran, released.
    let ok = on(&["-vv", "--ttl", "1s", "--renew-every", "150ms", "--", "sleep", "0.5"]).start();
    said.push(finish("ok", ok, true));

    // Busy, at once and at the end of --wait, while another run holds the lock.
    let dir = tmp();
    let go = file(&dir, "go");
    let mut holder = on(&["-v", "--", "sh", "-c", HOLD_UNTIL_GO]);
    let holder = holder.env("GO", &go).start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(KEY)), "the holder took the lock");
    said.push(finish("busy", on(&["--", "true"]).start(), false));
    said.push(finish("wait timeout", on(&["--wait", "200ms", "--", "true"]).start(), false));
    std::fs::write(&go, "").unwrap();
    said.push(finish("holder", holder, true));

    // A command that says it started, then runs until it is stopped.
    let started = file(&dir, "started");
    let until_stopped = ["--", "sh", "-c", "touch \"$1\"; exec sleep 30", "sh", started.to_str().unwrap()];
    let has_started = || {
        let seen = wait_until(Duration::from_secs(10), || started.exists());
        let _ = std::fs::remove_file(&started);
        seen
    };

    // Lost: the key deleted under a run, which stops its command (-v: no debug lines).
    let lost = on(&[&["-v", "--ttl", "3s", "--renew-every", "100ms"][..], &until_stopped].concat()).start();
    assert!(has_started(), "the command started");
    let value = redis.get(KEY).expect("the lock's value");
    let token = String::from_utf8_lossy(&value).split(' ').next().unwrap().to_owned();
    redis.cmd::<i64>(&[b"DEL", KEY]);
    said.push(finish("lost", lost, true));

    // Stopping on SIGTERM.
    let stopped = on(&[&["-v"][..], &until_stopped].concat()).start();
    assert!(has_started(), "the command started");
    kill(Pid::from_raw(stopped.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    said.push(finish("SIGTERM", stopped, true));

    // Redis unreachable, failing closed and open.
    let unreachable = wrapper_on(&nowhere, format, &["-v", "--", "true"]).start();
    said.push(finish("unreachable", unreachable, false));
    let open = wrapper_on(&nowhere, format, &["-v", "--fail-open", "--", "true"]).start();
    said.push(finish("fail-open", open, false));
    (said, token)
}

/// A line of either format: its level (lower case), message and fields (as text).
struct Seen {
    level: String,
    message: String,
    fields: Vec<(String, String)>,
}

impl Seen {
    fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Checks what every line must say; `read` turns a run's stderr into its lines.
fn check(said: &[Said], token: &str, read: impl Fn(&str) -> Vec<Seen>) {
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let key = KEY.escape_ascii().to_string();
    let mut messages = Vec::new();
    for run in said {
        let lines = read(&run.stderr);
        assert!(!lines.is_empty(), "{}: said nothing", run.what);
        let mut tokens = std::collections::HashSet::new();
        let mut acquired = false;
        for seen in &lines {
            let line = format!("{}: {}: {} {:?}", run.what, seen.level, seen.message, seen.fields);
            assert_eq!(seen.get("key"), Some(key.as_str()), "{line}: key");
            assert_eq!(seen.get("host"), Some(host.as_str()), "{line}: host");
            assert_eq!(seen.get("pid"), Some(run.pid.to_string().as_str()), "{line}: pid");
            let prefix = seen.get("token").unwrap_or_else(|| panic!("{line}: no token"));
            assert!(prefix.len() == 8 && prefix.bytes().all(|b| b.is_ascii_hexdigit()), "{line}: token");
            tokens.insert(prefix.to_owned());
            acquired |= seen.message.starts_with("acquired");
            if FENCED.iter().any(|m| seen.message.starts_with(m)) {
                let fence = seen.get("fence").unwrap_or_else(|| panic!("{line}: no fence"));
                assert!(fence.parse::<i64>().is_ok_and(|f| f > 0), "{line}: fence");
            }
            messages.push(format!("{}: {}", run.what, seen.message));
        }
        assert_eq!(tokens.len(), 1, "{}: one token prefix on every line", run.what);
        assert_eq!(acquired, run.fenced, "{}: acquired", run.what);
        if run.what != "ok" {
            // Above debug level, a token shows only as its prefix.
            assert!(!run.stderr.contains(token), "{}: the whole token: {}", run.what, run.stderr);
        }
    }
    for expected in [
        "ok: acquired",
        "ok: renewed",
        "ok: released",
        "busy: lock",
        "wait timeout: lock",
        "lost: lock lost",
        "lost: stopping the command",
        "lost: released",
        "lost: the command was stopped",
        "SIGTERM: passing the signal to the command",
        "SIGTERM: released",
        "unreachable: cannot reach Redis",
        "fail-open: RUNNING WITHOUT A LOCK",
    ] {
        assert!(messages.iter().any(|m| m.starts_with(expected)), "no {expected:?} in {messages:#?}");
    }
}

#[test]
fn every_text_line_is_logfmt_and_says_whose_it_is() {
    let (said, token) = every_outcome("text");
    check(&said, &token, |stderr| {
        text_lines(stderr)
            .into_iter()
            .map(|l| Seen { level: l.level, message: l.message, fields: l.fields })
            .collect()
    });
}

#[test]
fn every_json_line_is_an_object_and_says_whose_it_is() {
    let (said, token) = every_outcome("json");
    check(&said, &token, |stderr| {
        json_lines(stderr)
            .into_iter()
            .map(|l| {
                let Value::Object(members) = l else { panic!("not an object: {l}") };
                let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                Seen {
                    level: members["level"].as_str().unwrap_or_default().to_lowercase(),
                    message: text(&members["message"]),
                    fields: members.iter().map(|(k, v)| (k.clone(), text(v))).collect(),
                }
            })
            .collect()
    });
}

/// The JSON line of a busy lock has the holder as `status --json` shows it.
#[test]
fn a_busy_lock_s_holder_is_an_object_as_status_shows_it() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let mut holder = hold_until(&redis, [OsStr::new("-k"), key()], &go);
    assert!(wait_until(Duration::from_secs(10), || redis.exists(KEY)), "the holder took the lock");
    let busy =
        run(redlock(&redis).args(["--log-format", "json", "-k"]).arg(key()).args(["--", "true"]), LIMIT);
    let status = run(
        Command::new(bin()).args(["status", "--json", "--redis-url", &redis.url(), "--key"]).arg(key()),
        LIMIT,
    );
    std::fs::write(&go, "").unwrap();
    assert!(wait_output(&mut holder, LIMIT).status.success());
    assert_eq!(busy.code, 75, "{}", busy.stderr);
    let line = &json_lines(&busy.stderr)[0];
    let shown: Value = serde_json::from_slice(&status.stdout).expect("status --json");
    let Value::Object(expected) = &shown["holder"] else { panic!("status shows no holder: {shown}") };
    let Value::Object(logged) = &line["holder"] else { panic!("no holder object: {line}") };
    let expected: serde_json::Map<String, Value> =
        expected.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(logged, &expected, "the holder as status --json shows it (null members left out)");
    assert_eq!(line["foreign_value"], false);
}
