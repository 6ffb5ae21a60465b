//! Acquisition policies (docs/GUIDE.md § Waiting, outages and once-per-day): waiting with instant
//! handoff, outages, fail-open, --min-hold and --idempotency-key.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::fault::{FaultProxy, Mode};
use crate::support::sentinel::Sentinel;
use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(60);

fn read_ns(path: &std::path::Path) -> i128 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

#[test]
fn a_waiter_starts_right_after_the_holder_releases() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (holder_end, waiter_start) = (file(&dir, "holder-end"), file(&dir, "waiter-start"));
    let go = file(&dir, "go");
    // The holder ends once the waiter waits, queued and listening (a holder's fixed second ran
    // out on a loaded machine before the waiter had queued: it then found the lock free).
    let mut holder = redlock(&redis)
        .args(["-k", "lock:handoff", "--", "sh", "-c"])
        .arg(format!("{HOLD_UNTIL_GO}; date +%s%N > \"$OUT\""))
        .env("GO", &go)
        .env("OUT", &holder_end)
        .start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:handoff")));
    let mut waiter = redlock(&redis)
        .args(["-v", "-k", "lock:handoff", "--wait", "10s", "--", "sh", "-c", "date +%s%N > \"$OUT\""])
        .env("OUT", &waiter_start)
        .stderr(Stdio::piped())
        .start();
    let listening = || {
        let grants: Vec<Vec<u8>> = redis.cmd(&[b"PUBSUB", b"CHANNELS", b"{lock:handoff}:wake:*:grant"]);
        redis.exists(b"{lock:handoff}:queue") && grants.len() == 1
    };
    assert!(wait_until(Duration::from_secs(10), listening), "the waiter waits, listening");
    std::fs::write(&go, "").unwrap();
    assert!(wait_output(&mut holder, LIMIT).status.success());
    let out = wait_output(&mut waiter, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let gap_ms = (read_ns(&waiter_start) - read_ns(&holder_end)) as f64 / 1e6;
    eprintln!("handoff: waiter's command started {gap_ms:.1} ms after the holder's ended");
    assert!(gap_ms > 0.0, "the critical sections overlapped by {} ms", -gap_ms);
    // Right after: the release handed the lock over (no polling, no retry after a delay). The
    // time is the benchmark's to measure; this bound leaves room for a loaded machine.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("handed_over=true"), "the release handed it over: {stderr}");
    assert!(gap_ms < 2000.0, "handoff took {gap_ms} ms");
}

#[test]
fn the_wait_is_bounded_and_ends_busy() {
    let redis = RedisServer::start();
    let mut holder = redlock(&redis).args(["-k", "lock:bounded", "--", "sleep", "5"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:bounded")));
    let dir = tmp();
    let marker = file(&dir, "ran");
    let r =
        run(redlock(&redis).args(["-k", "lock:bounded", "--wait", "1s", "--", "touch"]).arg(&marker), LIMIT);
    assert_eq!(r.code, 75, "{}", r.stderr);
    // Busy (75) proves it gave up before the holder's 5 s; room for a loaded machine's start.
    assert!(r.elapsed >= Duration::from_millis(900) && r.elapsed < Duration::from_secs(4), "{:?}", r.elapsed);
    assert!(r.stderr.contains("--wait"), "says the wait ran out: {}", r.stderr);
    let zero = run(
        redlock(&redis).args(["-k", "lock:bounded", "--busy-exit-code", "0", "--", "touch"]).arg(&marker),
        LIMIT,
    );
    assert_eq!(zero.code, 0, "{}", zero.stderr);
    assert!(!marker.exists(), "neither ran the command");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn waiters_do_not_spin() {
    let redis = RedisServer::start();
    let mut holder = redlock(&redis).args(["-k", "lock:spin", "--", "sleep", "3"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:spin")));
    let before = redis.client_requests();
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            redlock(&redis)
                .args(["-k", "lock:spin", "--wait", "30s", "--", "true"])
                .stderr(Stdio::piped())
                .start()
        })
        .collect();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    for mut w in waiters {
        let out = wait_output(&mut w, LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let used = redis.client_requests() - before;
    eprintln!("10 waiters over a 3 s hold and 10 handoffs: {used} Redis requests");
    // A 100 ms poll would cost 30 per waiter for the hold alone.
    assert!(used <= 10 * 15, "{used} commands for 10 waiters");
}

fn counter(wrappers: usize, rounds: usize) {
    let redis = RedisServer::start();
    let args = ["--redis-url".to_owned(), redis.url()];
    assert_eq!(contended_counter(&args, "lock:counter", wrappers, rounds), wrappers * rounds, "lost updates");
}

#[test]
fn contended_counter_loses_no_update() {
    counter(30, 1);
}

#[test]
fn contended_counter_loses_no_update_over_rounds() {
    counter(30, 3);
}

#[test]
fn redis_down_at_start_fails_closed_or_open() {
    let dir = tmp();
    let marker = file(&dir, "ran");
    let url = format!("redis://127.0.0.1:{}", free_port());
    let closed = run(
        std::process::Command::new(bin())
            .args(["-k", "lock:down", "--redis-url", &url, "--", "touch"])
            .arg(&marker),
        LIMIT,
    );
    assert_eq!(closed.code, 69, "{}", closed.stderr);
    assert!(
        closed.elapsed >= Duration::from_millis(900) && closed.elapsed < Duration::from_secs(3),
        "backed off for {:?}",
        closed.elapsed
    );
    assert!(!marker.exists());

    let open = run(
        std::process::Command::new(bin())
            .args(["-k", "lock:down", "--redis-url", &url, "--fail-open", "--", "sh", "-c"])
            .arg("touch \"$1\"; echo \"fence=${REDLOCK_FENCE-absent} key=$REDLOCK_LOCK_KEY\"; exit 3")
            .arg("sh")
            .arg(&marker),
        LIMIT,
    );
    assert_eq!(open.code, 3, "the command's status: {}", open.stderr);
    assert!(marker.exists(), "the command ran");
    assert_eq!(String::from_utf8_lossy(&open.stdout).trim(), "fence=absent key=lock:down");
    assert!(open.stderr.contains("WITHOUT A LOCK"), "{}", open.stderr);
}

#[test]
fn a_redis_that_comes_up_within_the_wait_is_used() {
    let port = free_port();
    let mut wrapper = default_signals(&mut std::process::Command::new(bin()))
        .args([
            "-k",
            "lock:late",
            "--wait",
            "5s",
            "--redis-url",
            &format!("redis://127.0.0.1:{port}"),
            "--",
            "echo",
            "ran",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    std::thread::sleep(Duration::from_millis(500));
    let redis = RedisServer::start_on(port);
    let out = wait_output(&mut wrapper, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"ran\n");
    assert!(!redis.exists(b"lock:late"));
}

#[test]
fn min_hold_keeps_the_lock_after_a_short_command() {
    let redis = RedisServer::start();
    let started = Instant::now();
    let r = run(redlock(&redis).args(["-k", "lock:hold", "--min-hold", "3s", "--", "true"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let pttl: i64 = redis.cmd(&[b"PTTL", b"lock:hold"]);
    // Taken after `started` and kept 3 s from then: the rest of it, less what has passed (the
    // wrapper did not wait for it, or the key would be gone by now).
    let passed = started.elapsed().as_millis() as i64;
    assert!(
        pttl > 0 && pttl <= 3000 && pttl >= 3000 - passed - 100,
        "the key lives on for the rest of --min-hold: {pttl} ms, {passed} ms after the run began"
    );
    let busy = run(redlock(&redis).args(["-k", "lock:hold", "--", "true"]), LIMIT);
    assert_eq!(busy.code, 75, "{}", busy.stderr);
    assert!(wait_until(Duration::from_secs(4), || !redis.exists(b"lock:hold")));
    assert_eq!(run(redlock(&redis).args(["-k", "lock:hold", "--", "true"]), LIMIT).code, 0);
}

#[test]
fn min_hold_shorter_than_the_run_releases_normally() {
    let redis = RedisServer::start();
    let r =
        run(redlock(&redis).args(["-k", "lock:hold2", "--min-hold", "100ms", "--", "sleep", "0.3"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!redis.exists(b"lock:hold2"));
}

#[test]
fn idempotency_key_runs_once_per_id() {
    let redis = RedisServer::start();
    let dir = tmp();
    let count = file(&dir, "count");
    let job = |id: &str, status: i32| {
        run(
            redlock(&redis)
                .args(["-k", "lock:daily", "--idempotency-key", id, "--", "sh", "-c"])
                .arg(format!("echo x >> \"$COUNT\"; exit {status}"))
                .env("COUNT", &count),
            LIMIT,
        )
    };
    let runs = || std::fs::read_to_string(&count).unwrap_or_default().lines().count();

    assert_eq!(job("2026-11-30", 0).code, 0);
    assert_eq!(runs(), 1);
    let ttl: i64 = redis.cmd(&[b"PTTL", b"{lock:daily}:done:2026-11-30"]);
    assert!(ttl > 6 * 24 * 3600 * 1000, "recorded for 7 days: {ttl}");
    let again = job("2026-11-30", 0);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(runs(), 1, "skipped the second time");
    assert!(again.stderr.contains("already succeeded"), "{}", again.stderr);

    assert_eq!(job("2026-12-01", 1).code, 1);
    assert_eq!(runs(), 2);
    assert!(!redis.exists(b"{lock:daily}:done:2026-12-01"), "a failure records nothing");
    assert_eq!(job("2026-12-01", 0).code, 0);
    assert_eq!(runs(), 3, "the next run ran");
}

/// A success whose record no node confirmed says so by name, with its own outcome, and keeps
/// the command's status: a later run with the ID runs the command again.
#[test]
fn a_success_whose_record_cannot_be_confirmed_is_reported_unrecorded() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port);
    let dir = tmp();
    let (count, go, metrics) = (file(&dir, "count"), file(&dir, "go"), file(&dir, "metrics"));
    let job = |url: &str| {
        let mut cmd = redlock_at(url);
        // A short lease, so that the lock the first run could not release is soon gone.
        cmd.args([
            "-k",
            "lock:unrecorded",
            "--ttl",
            "2s",
            "--wait",
            "20s",
            "--idempotency-key",
            "2026-12-04",
        ])
        .arg("--metrics-file")
        .arg(&metrics)
        .args(["--", "sh", "-c", "echo x >> \"$COUNT\"; until [ -e \"$GO\" ]; do sleep 0.02; done"])
        .env("COUNT", &count)
        .env("GO", &go);
        cmd
    };
    let runs = || std::fs::read_to_string(&count).unwrap_or_default().lines().count();
    let mut child =
        job(&proxy.url()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).start();
    assert!(wait_until(LIMIT, || runs() == 1), "the command started");
    // Redis stays, the way to it goes: the release and the record cannot be confirmed.
    proxy.set(Mode::Reset);
    std::fs::write(&go, "").unwrap();
    let out = wait_output(&mut child, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the command's status: {stderr}");
    assert!(
        stderr.contains("--idempotency-key \"2026-12-04\" could not be confirmed")
            && stderr.contains("may run the command again"),
        "{stderr}"
    );
    let series = std::fs::read_to_string(&metrics).unwrap();
    assert!(series.contains("outcome=\"unrecorded\"} 1"), "{series}");
    assert!(series.contains("outcome=\"success\"} 0"), "{series}");
    assert!(!redis.exists(b"{lock:unrecorded}:done:2026-12-04"));
    let again = run(&mut job(&redis.url()), LIMIT);
    assert_eq!((again.code, runs()), (0, 2), "ran again: {}", again.stderr);
    assert!(redis.exists(b"{lock:unrecorded}:done:2026-12-04"), "recorded this time");
}

/// A record Redis refused to write (out of memory, where the release's deletes still go
/// through) is reported as not written.
#[test]
fn a_success_whose_record_redis_refused_is_reported_unrecorded() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (started, go) = (file(&dir, "started"), file(&dir, "go"));
    let mut child = redlock(&redis)
        .args(["-k", "lock:norecord", "--idempotency-key", "d1", "--", "sh", "-c"])
        .arg("touch \"$STARTED\"; until [ -e \"$GO\" ]; do sleep 0.02; done")
        .env("STARTED", &started)
        .env("GO", &go)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(LIMIT, || started.exists()), "the command started");
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"1"]);
    std::fs::write(&go, "").unwrap();
    let out = wait_output(&mut child, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("--idempotency-key \"d1\" could not be recorded") && stderr.contains("OOM"),
        "{stderr}"
    );
    assert!(stderr.contains("will run the command again"), "{stderr}");
    assert!(!redis.exists(b"{lock:norecord}:done:d1"));
    assert!(!redis.exists(b"lock:norecord"), "released all the same");
}

#[test]
fn concurrent_runs_with_one_idempotency_key_run_once() {
    let redis = RedisServer::start();
    let dir = tmp();
    let count = file(&dir, "count");
    let children: Vec<_> = (0..5)
        .map(|_| {
            redlock(&redis)
                .args(["-k", "lock:once", "--wait", "20s", "--idempotency-key", "batch-17", "--", "sh", "-c"])
                .arg("echo x >> \"$COUNT\"; sleep 0.2")
                .env("COUNT", &count)
                .stderr(Stdio::piped())
                .start()
        })
        .collect();
    for mut c in children {
        let out = wait_output(&mut c, LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1, "exactly one ran");
}

#[test]
fn sigterm_while_waiting_for_a_busy_lock() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"SET", b"lock:waiting", b"other-holder", b"PX", b"60000"]);
    let dir = tmp();
    let marker = file(&dir, "ran");
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:waiting", "--wait", "30s", "--", "touch"])
        .arg(&marker)
        .stderr(Stdio::null())
        .start();
    // Once it waits in the queue (a fixed delay let a wrapper slow to start die of the signal).
    assert!(wait_until(Duration::from_secs(10), || redis.exists(b"{lock:waiting}:queue")), "queued");
    let sent = Instant::now();
    kill(Pid::from_raw(wrapper.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(143));
    // At once, not at the end of the 30 s wait.
    assert!(sent.elapsed() < Duration::from_secs(5), "took {:?}", sent.elapsed());
    assert!(!marker.exists());
    assert_eq!(redis.get(b"lock:waiting").as_deref(), Some(&b"other-holder"[..]));
}

/// `--wait forever` (or `REDLOCK_WAIT=forever`) waits without a limit, like flock without -w:
/// for the holder's release, and for a Redis that is down at the start; a signal still ends
/// the wait (128+N) with nothing held. `--fail-open`, which would never come to pass, is
/// refused with it.
#[test]
fn wait_forever_waits_for_the_release_and_a_signal_ends_it() {
    let redis = RedisServer::start();
    let mut holder = redlock(&redis).args(["-k", "lock:forever", "--", "sleep", "1.5"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:forever")));
    let waiters: Vec<_> = [("--wait", "forever"), ("REDLOCK_WAIT", "forever")]
        .into_iter()
        .map(|(source, value)| {
            let mut cmd = redlock(&redis);
            if source == "--wait" {
                cmd.args([source, value]);
            } else {
                cmd.env(source, value);
            }
            cmd.args(["-vv", "-k", "lock:forever", "--", "true"]).stderr(Stdio::piped()).start()
        })
        .collect();
    assert!(wait_output(&mut holder, LIMIT).status.success());
    for mut waiter in waiters {
        let out = wait_output(&mut waiter, LIMIT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(!stderr.contains("year"), "no limit is shown as one: {stderr}");
    }
    assert!(!redis.exists(b"lock:forever"));

    let port = free_port();
    let mut late = default_signals(&mut std::process::Command::new(bin()))
        .args(["-k", "lock:late", "--wait", "forever", "--redis-url", &format!("redis://127.0.0.1:{port}")])
        .args(["--", "echo", "ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    // Longer than the outage budget of a run that does not wait.
    std::thread::sleep(Duration::from_millis(1500));
    let _late_redis = RedisServer::start_on(port);
    let out = wait_output(&mut late, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"ran\n");

    redis.cmd::<()>(&[b"SET", b"lock:forever", b"other-holder", b"PX", b"60000"]);
    let mut waiter = redlock(&redis)
        .args(["-k", "lock:forever", "--wait", "forever", "--", "true"])
        .stderr(Stdio::null())
        .start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(b"{lock:forever}:queue")), "queued");
    kill(Pid::from_raw(waiter.id() as i32), Signal::SIGINT).unwrap();
    assert_eq!(wait_bounded(&mut waiter, LIMIT).code(), Some(130));
    assert_eq!(redis.get(b"lock:forever").as_deref(), Some(&b"other-holder"[..]));
    assert_eq!(redis.cmd::<i64>(&[b"EXISTS", b"{lock:forever}:queue"]), 0, "left the queue");

    let r = run(
        redlock(&redis).args(["-k", "lock:open", "--wait", "forever", "--fail-open", "--", "true"]),
        LIMIT,
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("--fail-open") && r.stderr.contains("--wait=forever"), "{}", r.stderr);
    let r = run(
        redlock(&redis).env("REDLOCK_WAIT", "forever").env("REDLOCK_FAIL_OPEN", "1").args([
            "-k",
            "lock:open",
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("REDLOCK_FAIL_OPEN") && r.stderr.contains("REDLOCK_WAIT=forever"),
        "{}",
        r.stderr
    );
}

#[test]
fn bad_policy_input_is_a_usage_error() {
    let redis = RedisServer::start();
    for (args, mention) in [
        (&["--wait=-1s"][..], "--wait"),
        (&["--wait", "soon"][..], "--wait"),
        (&["--min-hold", "3 parsecs"][..], "--min-hold"),
        (&["--idempotency-key", ""][..], "--idempotency-key"),
        (&["--idempotency-key", "x", "--idempotency-ttl", "0"][..], "--idempotency-ttl"),
        (&["--idempotency-ttl", "7x"][..], "--idempotency-ttl"),
        (&["--connect-timeout", "0"][..], "--connect-timeout"),
        (&["--command-timeout", "1h"][..], "--command-timeout"),
        (&["--fail-open=maybe"][..], "--fail-open"),
    ] {
        let r = run(redlock(&redis).args(["-k", "k"]).args(args).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(mention), "{args:?} names {mention}: {}", r.stderr);
    }
}

/// Runs the wrapper with `--fail-open` on `key` and a command that marks a file; returns the
/// run and whether the command ran.
fn fail_open_run(url: &str, key: &str, extra: &[&str]) -> (Run, bool) {
    let dir = tmp();
    let marker = file(&dir, "ran");
    let r = run(
        wrapper()
            .args(["--redis-url", url, "-k", key, "--fail-open"])
            .args(extra)
            .args(["--", "touch"])
            .arg(&marker),
        LIMIT,
    );
    (r, marker.exists())
}

/// A holder X runs and renews; then Redis runs out of memory. A second wrapper still sees the
/// lock busy (it reads before it writes): `--fail-open` does not run beside X, `-q
/// --busy-exit-code 0` exits 0, and X keeps renewing to the end of its command.
#[test]
fn a_held_lock_is_busy_when_redis_is_out_of_memory() {
    let redis = RedisServer::start();
    let mut holder = redlock(&redis)
        .args(["-k", "lock:oom", "--ttl", "2s", "--", "sleep", "3"])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:oom")));
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"1"]);

    let (busy, ran) = fail_open_run(&redis.url(), "lock:oom", &[]);
    assert_eq!(busy.code, 75, "busy, not an outage: {}", busy.stderr);
    assert!(!ran, "--fail-open ran the command beside the holder");
    let quiet =
        run(redlock(&redis).args(["-q", "--busy-exit-code", "0", "-k", "lock:oom", "--", "false"]), LIMIT);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);

    let out = wait_output(&mut holder, LIMIT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the holder kept renewing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A free lock while Redis is out of memory: Redis answered, so `--fail-open` does not apply;
/// the wrapper retries within the wait budget, then exits 69 quoting what Redis said.
#[test]
fn out_of_memory_never_fails_open() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"1"]);
    let (r, ran) = fail_open_run(&redis.url(), "lock:oom-free", &[]);
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(!ran, "the command ran without the lock");
    assert!(r.stderr.contains("OOM"), "quotes Redis: {}", r.stderr);
    assert!(!r.stderr.contains("cannot reach"), "Redis answered: {}", r.stderr);
    assert!(!r.stderr.contains("WITHOUT A LOCK"), "{}", r.stderr);
    let attempts = redis.calls("evalsha") + redis.calls("eval");
    assert!(attempts >= 3, "retried like an outage: {attempts} attempts");
    assert!(!redis.exists(b"lock:oom-free") && !redis.exists(b"{lock:oom-free}:fence"), "nothing written");
}

/// A read-only replica answers READONLY to the first write: a lock held on its master is busy,
/// a free one fails closed whatever `--fail-open` says.
#[test]
fn a_replica_never_fails_open() {
    let master = RedisServer::start_with(SYNC_AT_ONCE);
    let port = master.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let synced = wait_until(Duration::from_secs(10), || {
        replica.cmd::<String>(&[b"INFO", b"replication"]).contains("master_link_status:up")
    });
    assert!(synced, "the replica did not sync");
    let mut holder = redlock(&master).args(["-k", "lock:replica", "--", "sleep", "2"]).start();
    assert!(wait_until(Duration::from_secs(5), || replica.exists(b"lock:replica")), "replicated");

    let (held, ran) = fail_open_run(&replica.url(), "lock:replica", &[]);
    assert_eq!(held.code, 75, "{}", held.stderr);
    assert!(!ran);
    let (free, ran) = fail_open_run(&replica.url(), "lock:replica-free", &[]);
    assert_eq!(free.code, 69, "{}", free.stderr);
    assert!(!ran, "the command ran without the lock");
    assert!(free.stderr.contains("READONLY"), "quotes Redis: {}", free.stderr);
    assert!(!free.stderr.contains("cannot reach"), "{}", free.stderr);
    assert!(wait_output(&mut holder, LIMIT).status.success());
}

/// A Redis still loading its dataset answers LOADING to everything: never a reason to fail open.
/// (`key-load-delay` slows the load down; `loading-process-events-interval-bytes` makes it
/// answer while loading.)
#[test]
fn a_loading_redis_never_fails_open() {
    if server_version().0 < 7 {
        // Without `loading-process-events-interval-bytes` (7.0) a loading server answers nothing.
        eprintln!("skipped: the server cannot be made to answer LOADING");
        return;
    }
    let mut redis = RedisServer::start();
    redis.cmd::<()>(&[b"EVAL", b"for i = 1, 3000 do redis.call('SET', 'filler:' .. i, i) end", b"0"]);
    redis.cmd::<()>(&[b"SAVE"]);
    redis.restart_from_snapshot(
        &["--key-load-delay", "2000", "--loading-process-events-interval-bytes", "1024"],
        false,
    );
    let (r, ran) = fail_open_run(&redis.url(), "lock:loading", &[]);
    let info: String = redis.cmd(&[b"INFO", b"persistence"]);
    assert!(info.contains("loading:1"), "still loading afterwards, so the run saw only LOADING: {info}");
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(!ran, "the command ran without the lock");
    assert!(r.stderr.contains("LOADING") || r.stderr.contains("loading"), "quotes Redis: {}", r.stderr);
    assert!(!r.stderr.contains("cannot reach"), "{}", r.stderr);
}

/// Configuration mistakes exit 78 with a line naming the mistake, and never fail open: a
/// service at the address that is not Redis, `--cluster` against a standalone Redis, a
/// database number the server does not have.
#[test]
fn configuration_mistakes_exit_78_and_never_fail_open() {
    let redis = RedisServer::start();
    let http = NotRedis::start(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let cases: &[(String, &[&str], &str)] = &[
        (http.url(), &[], "does not speak the Redis protocol"),
        (http.url().replace("redis://", "redis://:s3cret@"), &[], "does not speak the Redis protocol"),
        (redis.url(), &["--cluster"], "cluster support disabled"),
        (format!("{}/99", redis.url()), &[], "DB index is out of range"),
        (format!("{}/2147483648", redis.url()), &[], "refused database 2147483648"),
    ];
    for (url, extra, says) in cases {
        let (r, ran) = fail_open_run(url, "lock:mistake", extra);
        assert_eq!(r.code, 78, "{url} {extra:?}: {}", r.stderr);
        assert!(!ran, "{url} {extra:?}: the command ran");
        assert!(r.stderr.contains(says), "{url} {extra:?} says {says:?}: {}", r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "one line: {}", r.stderr);
        assert!(!r.stderr.contains("s3cret"), "{}", r.stderr);
    }
}

/// A Sentinel given as the Redis URL does not run scripts: a configuration mistake, said in
/// one line that never quotes the request (the lock's value is among its arguments).
#[test]
fn a_sentinel_given_as_the_redis_url_is_a_configuration_mistake() {
    let redis = RedisServer::start();
    let sentinel = Sentinel::start(redis.port);
    let url = format!("redis://{}", sentinel.addr());
    let (r, ran) = fail_open_run(&url, "lock:at-sentinel", &[]);
    assert_eq!(r.code, 78, "{}", r.stderr);
    assert!(!ran, "the command ran");
    assert!(r.stderr.contains("does not know the command EVALSHA"), "{}", r.stderr);
    assert!(!r.stderr.contains("args beginning"), "the request is not quoted: {}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1, "one line: {}", r.stderr);
}

/// Redis keeps key lifetimes in whole milliseconds: a shorter success record could never be
/// kept, so it is refused up front.
#[test]
fn an_idempotency_ttl_under_a_millisecond_is_a_usage_error() {
    for ttl in ["1ns", "999us"] {
        let r = run(
            wrapper().args([
                "-k",
                "lock:ittl",
                "--idempotency-key",
                "d",
                "--idempotency-ttl",
                ttl,
                "--",
                "true",
            ]),
            LIMIT,
        );
        assert_eq!(r.code, 64, "{ttl}: {}", r.stderr);
        assert!(r.stderr.contains("--idempotency-ttl must be at least 1ms"), "{}", r.stderr);
    }
}

/// An unreachable Redis is retried for the whole outage budget (about a second with --wait 0):
/// a long backoff drawn early never cuts the wait short.
#[test]
fn an_outage_is_retried_for_the_whole_budget() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let runs: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                run(wrapper().args(["-k", "lock:budget", "--redis-url", &url, "--", "true"]), LIMIT)
            })
        })
        .collect();
    for r in runs.into_iter().map(|t| t.join().unwrap()) {
        assert_eq!(r.code, 69, "{}", r.stderr);
        assert!(
            r.elapsed >= Duration::from_millis(900) && r.elapsed < Duration::from_secs(3),
            "gave up after {:?}",
            r.elapsed
        );
    }
}

/// Out of descriptors, a connection fails as if Redis were unreachable, and `--fail-open` ran the
/// command without the lock while Redis was fine. An open-file limit too low to work with is a
/// configuration error, before anything runs.
#[test]
fn a_tiny_open_file_limit_is_refused_before_anything_runs() {
    let redis = RedisServer::start();
    for (limit, expected) in [(9u64, 78), (64, 0)] {
        let dir = tmp();
        let marker = dir.path().join("ran");
        let mut cmd = redlock(&redis);
        cmd.args(["-k", "lock:nofile", "--fail-open", "--", "touch"]).arg(&marker);
        with_descriptors(&mut cmd, limit, 0);
        let r = run(&mut cmd, Duration::from_secs(30));
        assert_eq!(r.code, expected, "ulimit -n {limit}: {}", r.stderr);
        assert_eq!(marker.exists(), expected == 0, "ulimit -n {limit}: the command ran? {}", r.stderr);
        if expected != 0 {
            assert!(r.stderr.contains("open-file limit is 9 (ulimit -n)"), "{}", r.stderr);
        }
    }
}

/// `CLIENT PAUSE … WRITE` (what a manual failover does while the replica catches up): Redis
/// answers reads but runs no script that may write, so a run cannot take the lock. A held lock
/// is still busy (75: the acquire reads before it writes, and runs read-only), a free one is
/// retried like an outage Redis reports (69, saying so), `--fail-open` never runs the command
/// since Redis answers, and `status` answers at once.
#[test]
fn paused_writes_never_fail_open() {
    let redis = RedisServer::start();
    let mut holder = redlock(&redis).args(["-k", "lock:paused", "--ttl", "30s", "--", "sleep", "30"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:paused")));
    // Each key: the run's status, what it says, and status's (0 held, 1 free).
    let cases = [("lock:paused", 75, "held by", 0), ("lock:free-while-paused", 69, "writes paused", 1)];
    for (key, code, says, status_code) in cases {
        redis.cmd::<()>(&[b"CLIENT", b"PAUSE", b"6000", b"WRITE"]);
        let (r, ran) = fail_open_run(&redis.url(), key, &["--command-timeout", "1s"]);
        let status = run(
            wrapper().args(["status", "--redis-url", &redis.url(), "-k", key, "--command-timeout", "1s"]),
            LIMIT,
        );
        redis.cmd::<()>(&[b"CLIENT", b"UNPAUSE"]);
        assert_eq!(r.code, code, "{key}: {}", r.stderr);
        assert!(!ran, "{key}: --fail-open ran the command while Redis answered");
        assert!(!r.stderr.contains("WITHOUT A LOCK"), "{key}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{key}: says why: {}", r.stderr);
        // Redis 6.2 has no EVALSHA_RO: status's script waits for the writes, past its timeout.
        let status_code = if server_version().0 < 7 { 69 } else { status_code };
        assert_eq!(status.code, status_code, "{key}: status while writes are paused: {}", status.stderr);
    }
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).expect("kill");
    wait_bounded(&mut holder, LIMIT);
}

/// A Redis at `maxclients` accepts a connection only to refuse it, before any command; with a
/// password that refusal is the answer to AUTH. Either way Redis is there and full: retried
/// within `--wait` (69 in the end, never 77 for a good password, never `--fail-open`), and the
/// run goes ahead once a connection is free.
#[test]
fn a_redis_at_maxclients_is_retried_not_taken_for_a_wrong_password() {
    let redis = RedisServer::start();
    // The test's own connection stays open and authenticated: with it, no room for another.
    let mut admin = redis.conn();
    let config = |admin: &mut redis::Connection, name: &str, value: &str| {
        redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query::<()>(admin).expect("CONFIG SET")
    };
    config(&mut admin, "maxclients", "1");
    let (r, ran) = fail_open_run(&redis.url(), "lock:full", &["--wait", "1s"]);
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(!ran, "--fail-open ran the command while Redis answered");
    assert!(r.stderr.contains("max number of clients"), "{}", r.stderr);

    config(&mut admin, "requirepass", "Pw0rd");
    let url = format!("redis://:Pw0rd@127.0.0.1:{}", redis.port);
    let (r, ran) = fail_open_run(&url, "lock:full", &["--wait", "1s"]);
    assert_eq!(r.code, 69, "a full Redis, not a wrong password: {}", r.stderr);
    assert!(!ran, "--fail-open ran the command while Redis answered");
    assert!(r.stderr.contains("max number of clients"), "{}", r.stderr);
    assert!(!r.stderr.contains("authentication"), "{}", r.stderr);

    let dir = tmp();
    let marker = file(&dir, "ran");
    let mut waiting = wrapper()
        .args(["--redis-url", &url, "-k", "lock:full", "--wait", "20s", "--", "touch"])
        .arg(&marker)
        .stderr(Stdio::piped())
        .start();
    std::thread::sleep(Duration::from_millis(700));
    config(&mut admin, "maxclients", "100");
    let code = wait_bounded(&mut waiting, LIMIT).code();
    assert_eq!(code, Some(0), "retried until a connection was free");
    assert!(marker.exists());
}
