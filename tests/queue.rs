//! The fair queue (README § Waiting, outages and once-per-day): waiters on one Redis run in
//! the order they joined, a run that does not wait is busy while any is queued, a waiter that
//! dies delays the rest by a bounded time, one that gives up leaves at once, and a handoff
//! costs a constant number of requests whatever the queue's length.

mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::*;

const LIMIT: Duration = Duration::from_secs(60);
/// The README's bound on the delay a dead waiter causes: its entry's lifetime (1.5 s) plus
/// the next waiter's keep-alive period (0.5 s).
const DEAD_WAITER_BOUND: Duration = Duration::from_secs(2);

/// A holder whose command runs until `go` exists (bounded: 60 s).
fn holder(redis: &RedisServer, key: &str, go: &Path) -> Child {
    let child = redlock(redis)
        .args([
            "-k",
            key,
            "--",
            "sh",
            "-c",
            "i=0; while [ ! -e \"$GO\" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done",
        ])
        .env("GO", go)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || redis.exists(key.as_bytes())), "the holder took the lock");
    child
}

fn queue_len(redis: &RedisServer, key: &str) -> u64 {
    redis.cmd(&[b"ZCARD", format!("{{{key}}}:queue").as_bytes()])
}

/// Waiter `i` appends "i <ns>" to `out` when its command runs.
fn waiter(redis: &RedisServer, key: &str, i: usize, out: &Path, extra: &[&str]) -> Child {
    redlock(redis)
        .args(["-k", key, "--wait", "50s"])
        .args(extra)
        .args(["--", "sh", "-c", "echo \"$I $(date +%s%N)\" >> \"$OUT\""])
        .env("I", i.to_string())
        .env("OUT", out)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Starts `n` waiters one after the other, each in the queue before the next starts.
fn queue_up(redis: &RedisServer, key: &str, n: usize, out: &Path) -> Vec<Child> {
    (1..=n)
        .map(|i| {
            let w = waiter(redis, key, i, out, &[]);
            assert!(
                wait_until(Duration::from_secs(10), || queue_len(redis, key) == i as u64),
                "waiter {i} queued"
            );
            w
        })
        .collect()
}

/// The holder lets go; it and every waiter must then succeed.
fn let_go(go: &Path, holder: &mut Child, waiters: Vec<Child>) {
    std::fs::write(go, "").unwrap();
    assert!(wait_bounded(holder, LIMIT).success());
    for w in waiters {
        let o = wait_output(w, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// (waiter, start ns) in the order the commands ran.
fn runs(out: &Path) -> Vec<(usize, i128)> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (i, t) = l.split_once(' ').expect("i ns");
            (i.parse().unwrap(), t.parse().unwrap())
        })
        .collect()
}

#[test]
fn fifty_waiters_run_in_the_order_they_joined_and_status_shows_the_queue() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = holder(&redis, "lock:order", &go);
    let waiters = queue_up(&redis, "lock:order", 50, &out);

    let url = redis.url();
    let status = run(wrapper().args(["status", "--redis-url", &url, "-k", "lock:order"]), LIMIT);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("queue:  50 waiting"), "{text}{}", status.stderr);
    assert!(
        text.contains(&format!("    1. {}", "")) && text.contains(&format!("(pid {})", waiters[0].id())),
        "{text}"
    );
    let json = run(wrapper().args(["status", "--redis-url", &url, "-k", "lock:order", "--json"]), LIMIT);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(json["queue"]["waiters"], 50);
    assert_eq!(json["queue"]["first"][0]["pid"], waiters[0].id());
    assert_eq!(json["queue"]["first"][1]["pid"], waiters[1].id());

    let_go(&go, &mut holder, waiters);
    let order: Vec<usize> = runs(&out).into_iter().map(|(i, _)| i).collect();
    assert_eq!(order, (1..=50).collect::<Vec<_>>(), "served out of order");
    assert_eq!(queue_len(&redis, "lock:order"), 0);
}

#[test]
fn a_waiter_killed_in_the_middle_delays_the_rest_by_at_most_its_entry() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = holder(&redis, "lock:dead", &go);
    let mut waiters = queue_up(&redis, "lock:dead", 10, &out);
    waiters[4].kill().expect("SIGKILL waiter 5");
    let _ = waiters[4].wait();
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    for (i, w) in waiters.into_iter().enumerate().filter(|(i, _)| *i != 4) {
        let o = wait_output(w, LIMIT);
        assert_eq!(o.status.code(), Some(0), "waiter {}: {}", i + 1, String::from_utf8_lossy(&o.stderr));
    }
    let runs = runs(&out);
    let order: Vec<usize> = runs.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [1, 2, 3, 4, 6, 7, 8, 9, 10]);
    let gap = Duration::from_nanos((runs[4].1 - runs[3].1) as u64);
    eprintln!("waiter 4 → waiter 6 across the dead waiter 5: {gap:?} (bound {DEAD_WAITER_BOUND:?})");
    // The bound plus scheduling slack for a loaded 2-core machine.
    assert!(gap < DEAD_WAITER_BOUND + Duration::from_millis(1500), "{gap:?}");
}

#[test]
fn a_run_that_does_not_wait_is_busy_while_waiters_are_queued_even_if_the_lock_is_free() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = holder(&redis, "lock:handoff", &go);
    let mut queued = queue_up(&redis, "lock:handoff", 1, &out);
    // The waiter cannot take its turn for a moment: the lock is free, the queue is not.
    let pid = Pid::from_raw(queued[0].id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    assert!(!redis.exists(b"lock:handoff"));
    let skip = run(redlock(&redis).args(["-k", "lock:handoff", "--", "true"]), LIMIT);
    kill(pid, Signal::SIGCONT).unwrap();
    assert_eq!(skip.code, 75, "{}", skip.stderr);
    assert!(skip.stderr.contains("free, but runs are queued for it"), "{}", skip.stderr);
    let o = wait_output(queued.remove(0), LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(runs(&out).len(), 1);
}

#[test]
fn a_waiter_that_gives_up_or_is_signalled_leaves_the_queue_at_once() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = holder(&redis, "lock:leave", &go);

    let timed_out = run(redlock(&redis).args(["-k", "lock:leave", "--wait", "700ms", "--", "true"]), LIMIT);
    assert_eq!(timed_out.code, 75, "{}", timed_out.stderr);
    assert_eq!(queue_len(&redis, "lock:leave"), 0, "--wait ran out: the entry is gone");

    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGALRM] {
        let w = queue_up(&redis, "lock:leave", 1, &out).remove(0);
        kill(Pid::from_raw(w.id() as i32), sig).unwrap();
        let o = wait_output(w, LIMIT);
        let stderr = String::from_utf8_lossy(&o.stderr);
        // 128 + N, with a line saying why (not killed by the signal, silently).
        assert_eq!(o.status.code(), Some(128 + sig as i32), "{sig}: {stderr}");
        assert!(stderr.contains(sig.as_str()), "{sig}: {stderr}");
        assert_eq!(queue_len(&redis, "lock:leave"), 0, "{sig}: the entry is gone");
    }
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    assert!(runs(&out).is_empty());
}

/// A handoff costs a constant number of requests: per run, subscribing, joining, taking the
/// lock when woken and releasing it (4), plus one keep-alive per waiter per 0.5 s waited.
#[test]
fn a_hundred_waiters_cost_four_requests_a_run_plus_keep_alives() {
    const N: usize = 100;
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = holder(&redis, "lock:cost", &go);
    let before = redis.client_requests();
    let started = Instant::now();
    let metrics: Vec<_> = (0..N).map(|i| file(&dir, &format!("m{i}.prom"))).collect();
    let waiters: Vec<Child> = (0..N)
        .map(|i| waiter(&redis, "lock:cost", i, &out, &["--metrics-file", metrics[i].to_str().unwrap()]))
        .collect();
    assert!(wait_until(Duration::from_secs(30), || queue_len(&redis, "lock:cost") == N as u64), "all queued");
    let_go(&go, &mut holder, waiters);
    let used = redis.client_requests() - before - 1; // the holder's release
    let waited: f64 = metrics
        .iter()
        .map(|m| {
            let text = std::fs::read_to_string(m).expect("metrics file");
            let line =
                text.lines().find(|l| l.starts_with("redlock_run_acquire_wait_seconds")).expect("wait");
            line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
        })
        .sum();
    let keep_alives = (waited / 0.5).ceil() as u64 + N as u64;
    eprintln!(
        "{N} waiters in {:?}: {used} requests ({:.1} a run); {waited:.1} s waited in all, allowing {keep_alives} keep-alives",
        started.elapsed(),
        used as f64 / N as f64
    );
    assert!(used <= 4 * N as u64 + keep_alives, "{used} requests");
    assert_eq!(runs(&out).len(), N);
}

/// Waiters for a job that runs once per ID: when the first succeeds, those behind it with the
/// same ID skip (exit 0) and leave the queue at once, so a run for another ID behind them is
/// not held up by their entries.
#[test]
fn waiters_skipped_by_an_idempotency_record_leave_the_queue() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let key = "lock:once";
    let mut first = redlock(&redis)
        .args(["-k", key, "--idempotency-key", "day-1", "--", "sh", "-c"])
        .arg("i=0; while [ ! -e \"$GO\" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done")
        .env("GO", &go)
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || redis.exists(key.as_bytes())));
    let same_id: Vec<Child> = (1..=3)
        .map(|i| {
            let w = waiter(&redis, key, i, &out, &["--idempotency-key", "day-1"]);
            assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == i as u64));
            w
        })
        .collect();
    let other = waiter(&redis, key, 4, &out, &["--idempotency-key", "day-2"]);
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == 4));
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut first, LIMIT).success());
    for w in same_id {
        let o = wait_output(w, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stderr).contains("already succeeded"));
    }
    // Their entries went with them (an entry left behind would hold the queue for 1.5 s).
    let expiry: u64 = redis.cmd(&[b"ZCARD", format!("{{{key}}}:queue:expiry").as_bytes()]);
    assert!(queue_len(&redis, key) <= 1 && expiry <= 1, "only the day-2 run may still be queued");
    let o = wait_output(other, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(runs(&out).iter().map(|(i, _)| *i).collect::<Vec<_>>(), [4]);
}

/// Entries that lapse while Redis is out of memory (a keep-alive is a write) come back in their
/// places: each waiter joins again with the arrival number it had.
#[test]
fn waiters_keep_their_order_across_a_spell_of_out_of_memory() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = holder(&redis, "lock:oom", &go);
    let waiters = queue_up(&redis, "lock:oom", 5, &out);
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"1"]);
    // Longer than an entry lives without a keep-alive (1.5 s): every entry lapses.
    std::thread::sleep(Duration::from_millis(2500));
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    // A lapsed entry is passed over until its waiter joins again; then it has its place back.
    let live = || {
        let (secs, micros): (String, String) = redis.cmd(&[b"TIME"]);
        let now_ms = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
        let from = format!("({now_ms}");
        redis.cmd::<u64>(&[b"ZCOUNT", b"{lock:oom}:queue:expiry", from.as_bytes(), b"+inf"])
    };
    assert!(wait_until(Duration::from_secs(10), || live() == 5), "all joined again");
    let_go(&go, &mut holder, waiters);
    let order: Vec<usize> = runs(&out).into_iter().map(|(i, _)| i).collect();
    assert_eq!(order, [1, 2, 3, 4, 5], "served out of order after the entries lapsed");
}

/// Redis restarted empty (no persistence): the queue is gone with the lock, and the waiters
/// join again with the arrival numbers they had, so they keep their order among themselves.
#[test]
fn waiters_join_again_in_their_order_after_redis_lost_its_data() {
    let mut redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = redlock(&redis)
        .args(["-k", "lock:lost", "--ttl", "3s", "--", "sh", "-c"])
        .arg("i=0; while [ ! -e \"$GO\" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done")
        .env("GO", &go)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(wait_until(Duration::from_secs(10), || redis.exists(b"lock:lost")));
    // Each waiter holds the lock a while, so that the others are queued when it runs.
    let waiters: Vec<Child> = (1..=4)
        .map(|i| {
            let w = redlock(&redis)
                .args(["-k", "lock:lost", "--wait", "50s", "--", "sh", "-c"])
                .arg("echo \"$I $(date +%s%N)\" >> \"$OUT\"; sleep 1")
                .env("I", i.to_string())
                .env("OUT", &out)
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, "lock:lost") == i as u64));
            w
        })
        .collect();
    redis.restart_empty();
    // One waiter takes the free lock, and the other three are queued again, in their order;
    // the holder loses its lock (125).
    assert!(
        wait_until(Duration::from_secs(5), || queue_len(&redis, "lock:lost") == 3),
        "the waiters joined the queue again: {} queued",
        queue_len(&redis, "lock:lost")
    );
    assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(125));
    std::fs::write(&go, "").unwrap();
    for w in waiters {
        let o = wait_output(w, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let order: Vec<usize> = runs(&out).into_iter().map(|(i, _)| i).collect();
    let rest: Vec<usize> = order[1..].to_vec();
    let mut sorted = rest.clone();
    sorted.sort();
    assert_eq!(rest, sorted, "after the first to come back, the waiters ran in their order: {order:?}");
}
