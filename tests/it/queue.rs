//! The fair queue (docs/GUIDE.md § Waiting, outages and once-per-day): waiters on one Redis run in
//! the order they joined, a run that does not wait is busy while any is queued, a waiter that
//! dies delays the rest by a bounded time, one that gives up leaves at once, and a handoff
//! costs a constant number of requests whatever the queue's length. A release hands the lock
//! straight to the first waiter that can take it so; one that cannot use it in time (frozen)
//! holds up the queue briefly and never runs beside the next holder.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(60);
/// The guide's bound on the delay a dead waiter causes: its entry's lifetime (1.5 s) plus
/// the next waiter's keep-alive period (0.5 s).
const DEAD_WAITER_BOUND: Duration = Duration::from_secs(2);

/// A holder whose command runs until `go` exists (bounded: 60 s).
fn holder(redis: &RedisServer, key: &str, go: &Path) -> Process {
    let child = hold_until(redis, ["-k", key], go);
    assert!(wait_until(Duration::from_secs(10), || redis.exists(key.as_bytes())), "the holder took the lock");
    child
}

fn queue_len(redis: &RedisServer, key: &str) -> u64 {
    redis.cmd(&[b"ZCARD", format!("{{{key}}}:queue").as_bytes()])
}

/// Waiter `i` appends "i <ns>" to `out` when its command runs.
fn waiter(redis: &RedisServer, key: &str, i: usize, out: &Path, extra: &[&str]) -> Process {
    redlock(redis)
        .args(["-k", key, "--wait", "50s"])
        .args(extra)
        .args(["--", "sh", "-c", "echo \"$I $(date +%s%N)\" >> \"$OUT\""])
        .env("I", i.to_string())
        .env("OUT", out)
        .stderr(Stdio::piped())
        .start()
}

/// Starts `n` waiters one after the other, each in the queue before the next starts.
fn queue_up(redis: &RedisServer, key: &str, n: usize, out: &Path) -> Vec<Process> {
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
fn let_go(go: &Path, holder: &mut Process, waiters: Vec<Process>) {
    std::fs::write(go, "").unwrap();
    assert!(wait_bounded(holder, LIMIT).success());
    for mut w in waiters {
        let o = wait_output(&mut w, LIMIT);
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

/// A client subscribed to every channel by pattern (`PSUBSCRIBE *`, as a monitor does), its
/// subscription confirmed.
fn pattern_subscriber(redis: &RedisServer) -> redis::Connection {
    let mut conn = redis.conn();
    let _: redis::Value = redis::cmd("PSUBSCRIBE").arg("*").query(&mut conn).expect("PSUBSCRIBE confirmed");
    conn
}

/// Also with a monitor subscribed to every channel by pattern: it does not count as the dead
/// waiter listening, so the lock is not handed over to that waiter.
#[test]
fn a_waiter_killed_in_the_middle_delays_the_rest_by_at_most_its_entry() {
    let redis = RedisServer::start();
    let _monitor = pattern_subscriber(&redis);
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let mut holder = holder(&redis, "lock:dead", &go);
    let mut waiters = queue_up(&redis, "lock:dead", 10, &out);
    waiters[4].kill().expect("SIGKILL waiter 5");
    let _ = waiters[4].wait();
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    for (i, mut w) in waiters.into_iter().enumerate().filter(|(i, _)| *i != 4) {
        let o = wait_output(&mut w, LIMIT);
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
    // A waiter that checks a success record first is not handed the lock: it is woken, and the
    // lock is free until it takes it.
    let mut queued = waiter(&redis, "lock:handoff", 1, &out, &["--idempotency-key", "job-1"]);
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, "lock:handoff") == 1), "queued");
    // The waiter cannot take its turn for a moment: the lock is free, the queue is not.
    let mut stopped = Stopped(Vec::new());
    stopped.stop(queued.id());
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    assert!(!redis.exists(b"lock:handoff"));
    let skip = run(redlock(&redis).args(["-k", "lock:handoff", "--", "true"]), LIMIT);
    drop(stopped);
    assert_eq!(skip.code, 75, "{}", skip.stderr);
    assert!(skip.stderr.contains("free, but runs are queued for it"), "{}", skip.stderr);
    let o = wait_output(&mut queued, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(runs(&out).len(), 1);
}

/// Processes stopped with SIGSTOP, continued when this goes out of scope (a failing assertion
/// included): none is left stopped behind.
struct Stopped(Vec<Pid>);

impl Stopped {
    fn stop(&mut self, pid: u32) {
        let pid = Pid::from_raw(pid as i32);
        kill(pid, Signal::SIGSTOP).unwrap();
        self.0.push(pid);
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = kill(*pid, Signal::SIGCONT);
        }
    }
}

/// The fields of the lock's value: token, host, pid, start.
fn holder_pid(redis: &RedisServer, key: &str) -> Option<u32> {
    redis_value(redis, key)?.split(' ').nth(2)?.parse().ok()
}

#[test]
fn a_release_hands_the_lock_to_the_first_waiter_which_confirms_it_for_its_ttl() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let key = "lock:handover";
    let mut holder = holder(&redis, key, &go);
    let mut w = redlock(&redis)
        .args(["-k", key, "--ttl", "20s", "--wait", "50s", "-v", "--", "sh", "-c"])
        .arg("echo \"$REDLOCK_FENCE\" > \"$OUT\"; sleep 0.5")
        .env("OUT", &out)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == 1), "queued");
    // Frozen for a moment: the release hands the lock over all the same, and a run that does
    // not wait finds it held by the waiter.
    let mut stopped = Stopped(Vec::new());
    stopped.stop(w.id());
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    assert_eq!(holder_pid(&redis, key), Some(w.id()), "handed over to the waiter");
    assert_eq!(queue_len(&redis, key), 0, "and out of the queue");
    let pttl: i64 = redis.cmd(&[b"PTTL", key.as_bytes()]);
    assert!(pttl > 0 && pttl <= 6_000, "taken for kill-grace (5s) + 1s, not a whole TTL: {pttl} ms");
    let skip = run(redlock(&redis).args(["-k", key, "--", "true"]), LIMIT);
    assert_eq!(skip.code, 75, "{}", skip.stderr);
    assert!(skip.stderr.contains(&format!("(pid {})", w.id())), "{}", skip.stderr);
    // Continued in time: it runs with the fence it was handed, and confirms its own TTL.
    drop(stopped);
    let fence = read_when_present(&out, LIMIT);
    // The command starts first; the confirmation follows (5 ms later), within its 0.5 s.
    let pttl = || redis.cmd::<i64>(&[b"PTTL", key.as_bytes()]);
    assert!(
        wait_until(Duration::from_millis(400), || pttl() > 15_000),
        "extended to its --ttl 20s: {} ms",
        pttl()
    );
    // And it lets go of its subscription then too, while its command still runs.
    let subscribed =
        || redis.cmd::<Vec<String>>(&[b"PUBSUB", b"CHANNELS", format!("{{{key}}}:wake:*").as_bytes()]);
    assert!(
        wait_until(Duration::from_millis(200), || subscribed().is_empty()),
        "still subscribed while its command runs: {:?}",
        subscribed()
    );
    let o = wait_output(&mut w, LIMIT);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("handed_over=true"), "{stderr}");
    assert_eq!(stderr.matches("acquired").count(), 1, "{stderr}");
    let counter: String = redis.cmd(&[b"GET", format!("{{{key}}}:fence").as_bytes()]);
    assert_eq!(fence.trim(), counter, "the fence handed over is the counter's");
}

/// The requests (`EVALSHA`) that carried `value` since the slow log was last reset (every
/// command is logged: `slowlog-log-slower-than 0`; those a script ran, too).
fn requests_with(redis: &RedisServer, value: &str) -> usize {
    use redis::Value::{Array, BulkString};
    let log: Vec<redis::Value> = redis.cmd(&[b"SLOWLOG", b"GET", b"1000"]);
    let carries = |entry: &redis::Value| match entry {
        Array(fields) => match fields.get(3) {
            Some(Array(args)) => {
                matches!(args.first(), Some(BulkString(c)) if c.eq_ignore_ascii_case(b"evalsha"))
                    && args.iter().any(|a| matches!(a, BulkString(b) if b == value.as_bytes()))
            }
            _ => false,
        },
        _ => false,
    };
    log.iter().filter(|entry| carries(entry)).count()
}

/// A holder of `key` and a waiter queued behind it, the holder stopped (SIGSTOP) until the
/// waiter has joined if `stop`; then the holder lets go. → The holder's requests from the
/// waiter's joining on (`None`: the stop came after the holder's watch had begun).
fn hand_over(redis: &RedisServer, dir: &tempfile::TempDir, key: &str, stop: bool) -> Option<usize> {
    let (go, out) = (file(dir, &format!("{key}.go")), file(dir, &format!("{key}.out")));
    let watching = redis.tracking_items();
    let mut stopped = Stopped(Vec::new());
    let mut holder = hold_until(redis, ["-k", key], &go);
    let mut missed = false;
    if stop {
        let deadline = Instant::now() + LIMIT;
        while !redis.exists(key.as_bytes()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        stopped.stop(holder.id());
        missed = redis.tracking_items() != watching;
    } else {
        assert!(wait_until(LIMIT, || redis.tracking_items() > watching), "the holder's watch began");
    }
    let value = redis_value(redis, key).expect("held");
    let mut w = waiter(redis, key, 1, &out, &[]);
    assert!(wait_until(LIMIT, || queue_len(redis, key) == 1), "queued");
    drop(stopped);
    assert!(wait_until(LIMIT, || redis.tracking_items() > watching), "the holder's watch began");
    let _: String = redis.cmd(&[b"SLOWLOG", b"RESET"]);
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    let o = wait_output(&mut w, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(runs(&out).len(), 1);
    (!missed).then(|| requests_with(redis, &value))
}

/// A holder that knows a waiter is queued hands the lock over in one request: the release
/// tried first, the one for no waiters, would only answer "queued: ask the full one", a round
/// trip more on every handoff. It knows of a waiter that joins while it watches its lock (a
/// notice about the queue), and of one queued before the watch began (the watch's first check
/// reads the queue): the holder stopped as soon as it holds, until the waiter has joined.
#[test]
fn a_holder_that_knows_of_a_waiter_hands_over_in_one_request() {
    let redis = RedisServer::start();
    let _: String = redis.cmd(&[b"CONFIG", b"SET", b"slowlog-log-slower-than", b"0"]);
    let _: String = redis.cmd(&[b"CONFIG", b"SET", b"slowlog-max-len", b"1000"]);
    let dir = tmp();
    // Every script loaded first: a request Redis answers NOSCRIPT is sent again.
    hand_over(&redis, &dir, "lock:scripts", false);
    let watched = hand_over(&redis, &dir, "lock:watched", false);
    assert_eq!(watched, Some(1), "the holder's release, with a waiter that joined while it watched");
    // The stop must come within 25 ms of the lock's being taken; tried again if it did not.
    let before = (0..5).find_map(|i| hand_over(&redis, &dir, &format!("lock:before:{i}"), true));
    assert_eq!(before, Some(1), "the holder's release, with a waiter queued before its watch began");
}

/// A release that hands the lock over does not announce it free on `{KEY}:released`, where
/// runs that do not queue listen (it is held again); the last release, which leaves it free,
/// does.
#[test]
fn a_lock_handed_over_is_not_announced_free() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let key = "lock:announced";
    let mut listener = redis.conn();
    let mut announced = listener.as_pubsub();
    announced.subscribe(format!("{{{key}}}:released")).expect("SUBSCRIBE");
    announced.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    let mut holder = holder(&redis, key, &go);
    let mut w = waiter(&redis, key, 1, &out, &["-v"]);
    assert!(wait_until(LIMIT, || queue_len(&redis, key) == 1), "queued");
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    let o = wait_output(&mut w, LIMIT);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("handed_over=true"), "{stderr}");
    // Every message has come by now; the read timeout ends the count.
    let messages = (0..10).map_while(|_| announced.get_message().ok()).count();
    assert_eq!(messages, 1, "the waiter's release alone");
}

/// A waiter whose --ttl (1 s) is shorter than the hand-over (the holder's kill-grace, 5 s, +
/// 1 s), cut off from Redis 100 ms after its command starts: its first renewal cut the key
/// down to its own TTL, and so its deadline; its command is dead before the key expires and
/// the next run starts (it ran on for 4.5 s beside the next before).
#[test]
fn a_short_ttl_waiter_handed_the_lock_and_cut_off_never_runs_beside_the_next() {
    let redis = RedisServer::start();
    let proxy = crate::support::fault::FaultProxy::start(redis.port);
    let dir = tmp();
    let (go, pid_file) = (file(&dir, "go"), file(&dir, "pid"));
    let key = "lock:short-ttl-handover";
    let mut holder = holder(&redis, key, &go);
    let mut w = redlock_at(&proxy.url())
        .args([
            "-k",
            key,
            "--ttl",
            "1s",
            "--wait",
            "30s",
            "--",
            "sh",
            "-c",
            "echo $$ > \"$PID_FILE\"; exec sleep 8",
        ])
        .env("PID_FILE", &pid_file)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == 1), "queued");
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    let pid = read_when_present(&pid_file, LIMIT).trim().to_owned();
    std::thread::sleep(Duration::from_millis(100));
    proxy.set(crate::support::fault::Mode::Blackhole);
    let cut = Instant::now();
    // The next run looks at the cut-off waiter's command as its own starts.
    let next = run(
        redlock(&redis)
            .args(["-k", key, "--wait", "20s", "--", "sh", "-c"])
            .arg("s=$(sed 's/.*) //' /proc/$PID/stat 2>/dev/null | cut -d' ' -f1); echo \"${s:-gone}\"")
            .env("PID", &pid),
        LIMIT,
    );
    let next_after = cut.elapsed();
    assert_eq!(next.code, 0, "{}", next.stderr);
    let state = String::from_utf8_lossy(&next.stdout).trim().to_owned();
    let o = wait_output(&mut w, LIMIT);
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("the next run ran {next_after:?} after the cut; the waiter's command was {state:?} then");
    assert!(
        state == "gone" || state == "Z",
        "the handed-over waiter's command still ran ({state}) when the next run started, {next_after:?} \
         after the cut: {stderr}"
    );
    assert_eq!(o.status.code(), Some(125), "{stderr}");
}

/// A lock handed over for less than the waiter needs (its kill-grace is longer than the
/// holder's): the waiter confirms it for its own TTL before its command starts.
#[test]
fn a_lock_handed_over_for_less_than_the_waiters_kill_grace_is_confirmed_first() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let key = "lock:short-handover";
    // Handed over for 1 s + 1 s; the waiter's kill-grace is 5 s (--ttl 30s).
    let mut holder = redlock(&redis)
        .args([
            "-k",
            key,
            "--kill-grace",
            "1s",
            "--",
            "sh",
            "-c",
            "while [ ! -e \"$GO\" ]; do sleep 0.01; done",
        ])
        .env("GO", &go)
        .stderr(Stdio::null())
        .start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(key.as_bytes())));
    let mut w = redlock(&redis)
        .args(["-k", key, "--wait", "50s", "-v", "--", "sh", "-c", "echo ran >> \"$OUT\"; sleep 0.5"])
        .env("OUT", &out)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == 1), "queued");
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    let o = wait_output(&mut w, LIMIT);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("handed_over"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ran\n");
}

/// A waiter frozen for longer than the lock was handed over for: the next waiter takes the
/// lapsed lock, and the frozen one, continued, never starts beside it (its next attempt finds
/// the lock taken, and the stale message's fence is not above what that attempt found); one
/// continued after its --wait has run out gives up. Three at once.
#[test]
fn a_waiter_frozen_past_its_handover_never_runs_beside_the_next() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (mut stopped, mut stopped_longer) = (Stopped(Vec::new()), Stopped(Vec::new()));
    let rounds: Vec<_> = (0..3)
        .map(|r| {
            let key = format!("lock:frozen:{r}");
            let (go, out) = (file(&dir, &format!("go{r}")), file(&dir, &format!("out{r}")));
            // The holder hands over for its kill-grace + 1 s = 2 s.
            let mut holder = redlock(&redis)
                .args(["-k", &key, "--kill-grace", "1s", "--", "sh", "-c"])
                .arg("while [ ! -e \"$GO\" ]; do sleep 0.01; done; echo \"0 end $(date +%s%N)\" >> \"$OUT\"")
                .env("GO", &go)
                .env("OUT", &out)
                .stderr(Stdio::null())
                .start();
            assert!(wait_until(Duration::from_secs(10), || redis.exists(key.as_bytes())));
            // The third round's frozen waiter is continued after its --wait has run out.
            let wait = if r == 2 { "1500ms" } else { "50s" };
            let waiter = |i: usize| {
                let w = redlock(&redis)
                    .args(["-k", &key, "--kill-grace", "500ms", "--wait", if i == 1 { wait } else { "50s" }])
                    .args(["--", "sh", "-c"])
                    .arg("echo \"$I start $(date +%s%N)\" >> \"$OUT\"; sleep 1; echo \"$I end $(date +%s%N)\" >> \"$OUT\"")
                    .env("I", i.to_string())
                    .env("OUT", &out)
                    .stderr(Stdio::piped())
                    .start();
                assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, &key) == i as u64));
                w
            };
            let (w1, w2) = (waiter(1), waiter(2));
            if r == 2 { &mut stopped_longer } else { &mut stopped }.stop(w1.id());
            std::fs::write(&go, "").unwrap();
            assert!(wait_bounded(&mut holder, LIMIT).success());
            (key, out, w1, w2)
        })
        .collect();
    for (key, out, _, _) in &rounds {
        let started =
            |i: usize| std::fs::read_to_string(out).unwrap_or_default().contains(&format!("{i} start"));
        assert!(wait_until(LIMIT, || started(2)), "{key}: the next waiter ran");
    }
    // Continued once every next waiter runs; the third once its next waiter is done (the lock
    // is free then).
    drop(stopped);
    let (_, out, _, _) = &rounds[2];
    let ended = || std::fs::read_to_string(out).unwrap_or_default().contains("2 end");
    assert!(wait_until(LIMIT, ended), "the third round's next waiter ended");
    drop(stopped_longer);
    for (r, (key, out, mut w1, mut w2)) in rounds.into_iter().enumerate() {
        let o = wait_output(&mut w2, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{key}: {}", String::from_utf8_lossy(&o.stderr));
        let o = wait_output(&mut w1, LIMIT);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let log = std::fs::read_to_string(&out).unwrap();
        let at = |what: &str| -> i128 {
            let line = log.lines().find(|l| l.starts_with(what)).unwrap_or_else(|| panic!("{what}: {log}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        if r == 2 {
            // Continued after its --wait ran out: it gives up, and never runs.
            assert_eq!(o.status.code(), Some(75), "{key}: {stderr}");
            assert!(!log.contains("1 start"), "{key}: ran after its --wait: {log}");
        } else {
            assert_eq!(o.status.code(), Some(0), "{key}: {stderr}");
            assert!(at("1 start") > at("2 end"), "{key}: the frozen waiter ran beside the next: {log}");
        }
        let held_up = Duration::from_nanos((at("2 start") - at("0 end")) as u64);
        eprintln!("{key}: the next waiter started {held_up:?} after the holder's end");
        // Handed over for 2 s, then the next keep-alive (0.5 s), plus scheduling slack.
        assert!(held_up < Duration::from_millis(2_000 + 500 + 1_500), "{key}: {held_up:?}");
    }
}

/// A waiter frozen just before its --wait runs out, handed the lock while frozen (its entry
/// still alive) after the wait ran out, and continued a few tenths of a second later: it gives
/// up (75) and hands the lock on; its command never runs.
#[test]
fn a_waiter_continued_soon_after_its_wait_ran_out_gives_up_a_lock_handed_to_it() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let key = "lock:late";
    let mut holder = holder(&redis, key, &go);
    let started = Instant::now();
    let mut late = redlock(&redis)
        .args(["-k", key, "--wait", "1500ms", "--", "sh", "-c", "echo late >> \"$OUT\""])
        .env("OUT", &out)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == 1), "queued");
    let mut next = waiter(&redis, key, 2, &out, &[]);
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == 2), "queued");
    let mut stopped = Stopped(Vec::new());
    std::thread::sleep(Duration::from_millis(1300).saturating_sub(started.elapsed()));
    stopped.stop(late.id());
    // Released after the frozen waiter's --wait ran out, while its entry lives on (1.5 s from
    // its last keep-alive): the lock is handed to it.
    std::thread::sleep(Duration::from_millis(1650).saturating_sub(started.elapsed()));
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    std::thread::sleep(Duration::from_millis(1850).saturating_sub(started.elapsed()));
    drop(stopped);
    let o = wait_output(&mut late, LIMIT);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("--wait"), "says the wait ran out: {stderr}");
    let o = wait_output(&mut next, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(!log.contains("late"), "ran after its --wait: {log}");
    assert!(log.starts_with("2 "), "the next waiter ran: {log}");
    assert!(!redis.exists(key.as_bytes()), "released");
    assert_eq!(queue_len(&redis, key), 0, "the queue is empty");
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
        let mut w = queue_up(&redis, "lock:leave", 1, &out).remove(0);
        kill(Pid::from_raw(w.id() as i32), sig).unwrap();
        let o = wait_output(&mut w, LIMIT);
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
    let waiters: Vec<Process> = (0..N)
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
        .arg(HOLD_UNTIL_GO)
        .env("GO", &go)
        .start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(key.as_bytes())));
    let same_id: Vec<Process> = (1..=3)
        .map(|i| {
            let w = waiter(&redis, key, i, &out, &["--idempotency-key", "day-1"]);
            assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == i as u64));
            w
        })
        .collect();
    let mut other = waiter(&redis, key, 4, &out, &["--idempotency-key", "day-2"]);
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, key) == 4));
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut first, LIMIT).success());
    for mut w in same_id {
        let o = wait_output(&mut w, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stderr).contains("already succeeded"));
    }
    // Their entries went with them (an entry left behind would hold the queue for 1.5 s).
    let expiry: u64 = redis.cmd(&[b"ZCARD", format!("{{{key}}}:queue:expiry").as_bytes()]);
    assert!(queue_len(&redis, key) <= 1 && expiry <= 1, "only the day-2 run may still be queued");
    let o = wait_output(&mut other, LIMIT);
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
        .arg(HOLD_UNTIL_GO)
        .env("GO", &go)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(b"lock:lost")));
    // Each waiter holds the lock a while, so that the others are queued when it runs.
    let waiters: Vec<Process> = (1..=4)
        .map(|i| {
            let w = redlock(&redis)
                .args(["-k", "lock:lost", "--wait", "50s", "--", "sh", "-c"])
                .arg("echo \"$I $(date +%s%N)\" >> \"$OUT\"; sleep 1")
                .env("I", i.to_string())
                .env("OUT", &out)
                .stderr(Stdio::piped())
                .start();
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
    for mut w in waiters {
        let o = wait_output(&mut w, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let order: Vec<usize> = runs(&out).into_iter().map(|(i, _)| i).collect();
    let rest: Vec<usize> = order[1..].to_vec();
    let mut sorted = rest.clone();
    sorted.sort();
    assert_eq!(rest, sorted, "after the first to come back, the waiters ran in their order: {order:?}");
}
