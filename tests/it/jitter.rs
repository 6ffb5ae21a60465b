//! `--jitter` (docs/GUIDE.md § Waiting, outages and once-per-day): a random sleep below the
//! spread before the first connection, none without it, and a signal during it ends the run
//! with nothing taken.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);

/// The sleep a run's `-v` log says it drew (`jitter_ms`), if it says one.
fn drawn(stderr: &str) -> Option<u64> {
    stderr.lines().find(|l| l.contains("before the first attempt")).map(|l| {
        let field = l.split(' ').find_map(|w| w.strip_prefix("jitter_ms=")).expect("jitter_ms");
        field.parse().unwrap_or_else(|_| panic!("{l}"))
    })
}

#[test]
fn the_sleep_is_below_the_spread_and_none_without_one() {
    let redis = RedisServer::start();
    for _ in 0..3 {
        let r =
            run(redlock(&redis).args(["-k", "lock:jitter", "-v", "--jitter", "300ms", "--", "true"]), LIMIT);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let ms = drawn(&r.stderr).unwrap_or_else(|| panic!("no sleep logged: {}", r.stderr));
        assert!(ms < 300, "drew {ms} ms of --jitter 300ms");
    }
    let from_env = run(
        redlock(&redis).env("REDLOCK_JITTER", "1ms").args(["-k", "lock:jitter", "-v", "--", "true"]),
        LIMIT,
    );
    assert_eq!(drawn(&from_env.stderr), Some(0), "REDLOCK_JITTER: {}", from_env.stderr);
    for none in [&["--jitter", "0"][..], &[]] {
        let r =
            run(redlock(&redis).args(["-k", "lock:jitter", "-vv"]).args(none).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(drawn(&r.stderr), None, "{none:?}: no sleep: {}", r.stderr);
    }
}

/// Sleeping, the run has not connected: a signal ends it at once with the status of a signal
/// before the lock (128+N), the command not run and the key never set.
#[test]
fn a_signal_during_the_sleep_ends_the_run_at_once_with_nothing_taken() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (marker, log) = (file(&dir, "ran"), file(&dir, "log"));
    // Each of the test's requests is a connection of its own, counted by the INFO it sends.
    let connections = || {
        let info: String = redis.cmd(&[b"INFO", b"stats"]);
        let field = info.lines().find_map(|l| l.strip_prefix("total_connections_received:"));
        field.expect("total_connections_received").trim().parse::<u64>().unwrap()
    };
    let before = connections();
    // A draw below the few seconds the test allows is as likely as one in ten million.
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:jitter", "-v", "--jitter", "1000d", "--", "touch"])
        .arg(&marker)
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .start();
    let sleeping = || std::fs::read_to_string(&log).unwrap().contains("before the first attempt");
    assert!(wait_until(Duration::from_secs(10), sleeping), "the sleep began");
    assert_eq!(connections(), before + 1, "sleeping, the run has not connected");
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", wrapper.id())).unwrap();
    assert_eq!(children.trim(), "", "sleeping, the run has started no guardian");
    let sent = Instant::now();
    kill(Pid::from_raw(wrapper.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(143));
    assert!(sent.elapsed() < Duration::from_secs(5), "took {:?}", sent.elapsed());
    assert_eq!(connections(), before + 2, "nor did it once signalled");
    assert!(!marker.exists(), "the command never ran");
    assert!(!redis.exists(b"lock:jitter"), "no lock taken");
}

/// What can be refused without Redis is refused before the sleep, not DUR later: a mistyped
/// URL in a crontab fails at once.
#[test]
fn a_mistyped_url_is_refused_before_the_sleep() {
    let started = Instant::now();
    let r = run(
        wrapper().args([
            "-k",
            "lock:jitter",
            "--jitter",
            "1000d",
            "--redis-url",
            "redis://[bad",
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 78, "{}", r.stderr);
    assert!(started.elapsed() < Duration::from_secs(5), "refused after {:?}", started.elapsed());
}
