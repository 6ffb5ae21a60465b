//! The exit-status table (README § Exit status), cause by cause, one table-driven test: every
//! status is produced by what causes it, on a real Redis (through a fault proxy where the
//! network has to fail), and checked for who speaks up about it and what is left held.
//!
//! `cargo test --test it exit_statuses -- --nocapture` prints the table, one line per case.

use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use crate::support::fault::{FaultProxy, Mode};
use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);

/// Where a case's wrapper connects.
#[derive(Clone, Copy)]
enum Via {
    Direct,
    /// Through a fault proxy in pass-through mode.
    Proxied,
    /// Through a fault proxy that swallows everything.
    Swallowed,
    /// Through a fault proxy that resets every connection.
    Resetting,
    /// A port nothing listens on.
    Nowhere,
    /// As an ACL user.
    User(&'static str, &'static str),
    Url(&'static str),
}

/// What else happens around a case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setting {
    Plain,
    /// The key holds a hash.
    WrongType,
    /// Someone else holds the lock for a minute.
    HeldByOther,
    /// The key is deleted once the command runs.
    DeletedMidRun,
    /// The proxy starts swallowing everything once the command runs.
    BlackholedMidRun,
    /// SIGTERM to the wrapper 300 ms after it started.
    Sigterm,
}

/// What the wrapper runs: a shell body (after it has touched `$MARKER`), an argv, or nothing.
#[derive(Clone, Copy)]
enum Cmd {
    Sh(&'static str),
    Argv(&'static str),
    NotExecutable,
    Nothing,
}

/// Whose status it is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    /// The command's own, passed through: the wrapper says nothing.
    Command,
    /// The wrapper's, and the command never ran; stderr has a line of the wrapper's with this.
    Wrapper(&'static str),
    /// The wrapper's, after it stopped the running command; said as above.
    Stopped(&'static str),
}

struct Case {
    what: &'static str,
    via: Via,
    setting: Setting,
    options: &'static [&'static str],
    cmd: Cmd,
    status: i32,
    by: By,
}

const fn case(
    what: &'static str,
    via: Via,
    setting: Setting,
    options: &'static [&'static str],
    cmd: Cmd,
    status: i32,
    by: By,
) -> Case {
    Case { what, via, setting, options, cmd, status, by }
}

use By::{Command as Own, Stopped, Wrapper};
use Cmd::{Argv, NotExecutable, Nothing, Sh};
use Setting::*;
use Via::*;

/// A command that runs and succeeds (when it gets to run).
const RUNS: Cmd = Sh("exit 0");

#[rustfmt::skip]
const MATRIX: &[Case] = &[
    case("exit 0", Direct, Plain, &[], Sh("exit 0"), 0, Own),
    case("exit 1", Direct, Plain, &[], Sh("exit 1"), 1, Own),
    case("exit 42", Direct, Plain, &[], Sh("exit 42"), 42, Own),
    case("exit 255", Direct, Plain, &[], Sh("exit 255"), 255, Own),
    case("the command's own 64", Direct, Plain, &[], Sh("exit 64"), 64, Own),
    case("the command's own 125", Direct, Plain, &[], Sh("exit 125"), 125, Own),
    case("killed by SIGHUP", Direct, Plain, &[], Sh("kill -HUP $$"), 129, Own),
    case("killed by SIGKILL", Direct, Plain, &[], Sh("kill -KILL $$"), 137, Own),
    case("killed by SIGSEGV", Direct, Plain, &[], Sh("kill -SEGV $$"), 139, Own),
    case("killed by SIGTERM", Direct, Plain, &[], Sh("kill -TERM $$"), 143, Own),
    case("not executable", Direct, Plain, &[], NotExecutable, 126, Wrapper("cannot run")),
    case("not found", Direct, Plain, &[], Argv("/nonexistent/command"), 127, Wrapper("cannot run")),
    case("bad duration", Direct, Plain, &["--ttl", "30x"], RUNS, 64, Wrapper("--ttl")),
    case("unknown flag", Direct, Plain, &["--no-such-flag"], RUNS, 64, Wrapper("--no-such-flag")),
    case("missing command", Direct, Plain, &[], Nothing, 64, Wrapper("required arguments")),
    case("no room to stop in time", Direct, Plain, &["--ttl", "1s", "--kill-grace", "1s"], RUNS,
         64, Wrapper("--kill-grace")),
    case("key of another type", Direct, WrongType, &[], RUNS, 65, Wrapper("type hash")),
    case("nothing listens", Nowhere, Plain, &[], RUNS, 69, Wrapper("cannot reach Redis")),
    case("Redis never answers", Swallowed, Plain, &["--ttl", "3s"], RUNS, 69, Wrapper("cannot reach Redis")),
    case("every connection reset", Resetting, Plain, &[], RUNS, 69, Wrapper("cannot reach Redis")),
    case("busy", Direct, HeldByOther, &[], RUNS, 75, Wrapper("is busy")),
    case("busy to the end of --wait", Direct, HeldByOther, &["--wait", "300ms"], RUNS,
         75, Wrapper("end of --wait")),
    case("wrong password", User("u", "wrong"), Plain, &[], RUNS, 77, Wrapper("denied")),
    case("ACL denies the key", User("v", "pw"), Plain, &[], RUNS, 77, Wrapper("denied")),
    case("malformed URL", Url("redis://[::1"), Plain, &[], RUNS, 78, Wrapper("--redis-url")),
    case("unsupported URL scheme", Url("foo://bar"), Plain, &[], RUNS, 78, Wrapper("--redis-url")),
    case("--max-runtime", Direct, Plain, &["--max-runtime", "300ms"], Sh("sleep 30"),
         124, Stopped("reason=--max-runtime")),
    // 3 s: with shorter leases, a load spike of the whole suite on 2 cores (a second without an
    // answer) made these cases about the load, not about what they check.
    // `--wait` rides out a first connection slowed by the suite's load; it changes nothing mid-run.
    case("lease lost: key deleted", Direct, DeletedMidRun, &["--ttl", "3s", "--wait", "10s"], Sh("sleep 30"),
         125, Stopped("lock lost")),
    case("lease unconfirmed: Redis cut off", Proxied, BlackholedMidRun, &["--ttl", "3s", "--wait", "10s"],
         Sh("sleep 30"), 125, Stopped("cannot be confirmed")),
    case("SIGTERM while waiting", Direct, Sigterm, &["--wait", "10s"], RUNS,
         143, Wrapper("SIGTERM before the command started")),
];

/// How many cases run at once. Many of them only wait (for a timeout, a `--wait`, a lease to
/// be found lost); each has its own key, marker and, where it needs one, its own fault proxy.
const CASES_AT_ONCE: usize = 3;

/// Every status of the table from its cause: the command's own statuses pass through
/// (128+N for a death by signal N) with nothing said; each status of the wrapper's own comes
/// with a line on stderr; and no run leaves the lock held.
#[test]
fn exit_status_matrix() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"ACL", b"SETUSER", b"u", b"on", b">pw", b"~*", b"+@all"]);
    redis.cmd::<()>(&[b"ACL", b"SETUSER", b"v", b"on", b">pw", b"~other:*", b"+@all"]);
    let dir = tmp();
    let not_executable = file(&dir, "not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes: Vec<Mutex<Option<Outcome>>> = MATRIX.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..CASES_AT_ONCE {
            s.spawn(|| {
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(c) = MATRIX.get(n) else { break };
                    let outcome = run_case(n, c, &redis, &dir, &not_executable, &nowhere);
                    *lock(&outcomes[n]) = Some(outcome);
                }
            });
        }
    });
    let mut failures = Vec::new();
    for (c, outcome) in MATRIX.iter().zip(outcomes) {
        let Outcome { code, problems, stderr } = outcome.into_inner().unwrap().expect("every case ran");
        eprintln!("{code:>4}  {:<36} {}", c.what, if problems.is_empty() { "ok" } else { "FAILED" });
        if !problems.is_empty() {
            failures.push(format!("{}: {}\n  stderr: {}", c.what, problems.join("; "), stderr.trim()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        MATRIX.len(),
        failures.join("\n")
    );
}

/// What one case came to: its exit status, what was wrong with it, and its stderr.
struct Outcome {
    code: i32,
    problems: Vec<String>,
    stderr: String,
}

/// Runs case `n` of the matrix on its own key, with a fault proxy of its own if it goes
/// through one.
fn run_case(
    n: usize,
    c: &Case,
    redis: &RedisServer,
    dir: &tempfile::TempDir,
    not_executable: &std::path::Path,
    nowhere: &str,
) -> Outcome {
    let key = format!("lock:matrix:{n}");
    let marker = file(dir, &format!("ran-{n}"));
    let proxy = matches!(c.via, Proxied | Swallowed | Resetting).then(|| FaultProxy::start(redis.port));
    let proxy_url = || proxy.as_ref().expect("a proxied case has its proxy").url();
    if let Some(proxy) = &proxy {
        proxy.set(match c.via {
            Swallowed => Mode::Blackhole,
            Resetting => Mode::Reset,
            _ => Mode::Pass,
        });
    }
    let url = match c.via {
        Direct => redis.url(),
        Proxied | Swallowed | Resetting => proxy_url(),
        Nowhere => nowhere.to_owned(),
        User(user, password) => format!("redis://{user}:{password}@127.0.0.1:{}", redis.port),
        Url(url) => url.to_owned(),
    };
    if c.setting == WrongType {
        redis.cmd::<i64>(&[b"HSET", key.as_bytes(), b"field", b"value"]);
    }
    if matches!(c.setting, HeldByOther | Sigterm) {
        redis.cmd::<()>(&[b"SET", key.as_bytes(), b"someone-else", b"PX", b"60000"]);
    }
    let mut cmd = redlock_at(&url);
    cmd.args(["-k", &key]).args(c.options).env("MARKER", &marker);
    match c.cmd {
        Sh(body) => {
            cmd.args(["--", "sh", "-c"]).arg(format!("touch \"$MARKER\"; {body}"));
        }
        Argv(program) => {
            cmd.args(["--", program]);
        }
        NotExecutable => {
            cmd.arg("--").arg(not_executable);
        }
        Nothing => {}
    }
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).start();
    match c.setting {
        DeletedMidRun | BlackholedMidRun => {
            if !wait_until(Duration::from_secs(5), || marker.exists()) {
                let _ = child.kill();
                let out = wait_output(&mut child, Duration::from_secs(5));
                panic!("{}: never ran; stderr: {}", c.what, String::from_utf8_lossy(&out.stderr));
            }
            if c.setting == DeletedMidRun {
                redis.cmd::<i64>(&[b"DEL", key.as_bytes()]);
            } else {
                proxy.as_ref().expect("a proxied case has its proxy").set(Mode::Blackhole);
            }
        }
        Sigterm => {
            // Once it waits in the queue (a fixed delay let a wrapper slow to start under load
            // die of the signal before it handled any).
            let queue = format!("{{{key}}}:queue");
            let queued = wait_until(Duration::from_secs(5), || redis.exists(queue.as_bytes()));
            assert!(queued, "{}: never queued", c.what);
            kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        }
        _ => {}
    }
    let out = wait_output(&mut child, LIMIT);
    if let Some(proxy) = &proxy {
        proxy.set(Mode::Pass);
    }
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let code = out.status.code().unwrap_or(-1);
    let mut problems = Vec::new();
    if code != c.status {
        problems.push(format!("exit status {code}, expected {}", c.status));
    }
    if matches!(c.cmd, Sh(_)) && marker.exists() == matches!(c.by, Wrapper(_)) {
        problems.push(format!("the command {}", if marker.exists() { "ran" } else { "did not run" }));
    }
    match c.by {
        Own if !stderr.is_empty() => problems.push("the wrapper spoke up about the command's status".into()),
        Wrapper(says) | Stopped(says) => {
            // Its own lines, clap's for a command line it could not parse included.
            let said = stderr.lines().any(|l| l.starts_with("redlock-run: ") && l.contains(says));
            if !said {
                problems.push(format!("no line on stderr says {says:?}"));
            }
        }
        Own => {}
    }
    if !out.stdout.is_empty() {
        problems.push("something on stdout".to_owned());
    }
    // Nothing left held: the key is gone (at the latest when its TTL runs out), or still
    // what someone else put there.
    let expected = match c.setting {
        HeldByOther | Sigterm => Some("someone-else"),
        WrongType => Some("<hash>"),
        _ => None,
    };
    if !wait_until(Duration::from_secs(2), || redis_value(redis, &key).as_deref() == expected) {
        problems.push(format!("the key holds {:?} afterwards", redis_value(redis, &key)));
    }
    Outcome { code, problems, stderr }
}
