//! A reply lost after the SET succeeded: the lock is taken in Redis, but the wrapper never
//! learns it. The command must not start until a retry finds the run's own value and so
//! confirms ownership (docs/GUIDE.md § How the lock works); if none does, the wrapper takes the lock
//! back before it gives up.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::fault::{FaultProxy, Mode};
use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);

fn fence_counter(redis: &RedisServer, key: &str) -> Option<u64> {
    let v: Option<String> = redis.cmd(&[b"GET", format!("{{{key}}}:fence").as_bytes()]);
    v.map(|v| v.parse().expect("a number"))
}

/// Sets the fence counter ahead of the server clock, so that each new fence is exactly the
/// counter plus one (it is at least the clock in µs otherwise) and can be counted.
fn fence_counter_ahead(redis: &RedisServer, key: &str) -> u64 {
    redis.cmd::<()>(&[b"SET", format!("{{{key}}}:fence").as_bytes(), b"9000000000000000"]);
    9_000_000_000_000_000
}

/// Every reply lost: the SET reaches Redis and takes the lock, but the wrapper never learns
/// it. It must not start the command, and it takes the lock back before it gives up.
#[test]
fn a_reply_lost_after_the_set_never_starts_the_command() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port);
    let key = "lock:lost-reply";
    // Loads the scripts.
    assert_eq!(run(redlock_at(&proxy.url()).args(["-k", key, "--", "true"]), LIMIT).code, 0);
    let fence_before = fence_counter_ahead(&redis, key);
    let dir = tmp();
    let marker = file(&dir, "ran");

    proxy.set(Mode::DropReplies);
    let before = proxy.counts();
    // A 3 s TTL gives a 489 ms request timeout: two attempts fit in the 1 s of retries.
    let r = run(redlock_at(&proxy.url()).args(["-k", key, "--ttl", "3s", "--", "touch"]).arg(&marker), LIMIT);
    let exited = Instant::now();
    let during = proxy.counts();
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(!marker.exists(), "the command ran without confirmed ownership");
    assert!(r.stderr.contains("error"), "{}", r.stderr);
    // The SET did take the lock in Redis; the retry found its own value and took no new fence.
    assert_eq!(fence_counter(&redis, key), Some(fence_before + 1), "one fence taken, by the first SET");
    assert!(
        during.requests_forwarded - before.requests_forwarded >= 3,
        "a retry and the take-back reached Redis too: {before:?} → {during:?}"
    );
    assert!(during.replies_dropped > before.replies_dropped, "replies were lost");
    // Taken back by the compare-and-delete, before its 3 s TTL (restarted by the retry) ran out.
    assert!(
        wait_until(Duration::from_secs(1), || !redis.exists(key.as_bytes())),
        "the lock taken by the lost SET was still there {:?} after the wrapper gave up",
        exited.elapsed()
    );
    proxy.set(Mode::Pass);
    assert_eq!(
        run(redlock_at(&proxy.url()).args(["-k", key, "--", "true"]), LIMIT).code,
        0,
        "nothing left held"
    );
}

/// Replies lost for a while, then back: a retry finds the lock holding this run's own value,
/// which confirms ownership; the command runs once, with the fence of the SET whose reply was
/// lost, and not before the confirmation.
#[test]
fn a_retry_after_a_lost_reply_confirms_ownership() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port);
    let key = "lock:confirm";
    // A run that waits loads the script a waiter's attempts use (an uncontended one loads only
    // the lean ones); the first call of a script not loaded yet needs a reply (NOSCRIPT).
    assert_eq!(run(redlock_at(&proxy.url()).args(["-k", key, "--wait", "1s", "--", "true"]), LIMIT).code, 0);
    let fence_before = fence_counter_ahead(&redis, key);
    let dir = tmp();
    let out = file(&dir, "fence");
    // Someone else holds the lock briefly; our waiter subscribes and waits for its expiry.
    redis.cmd::<()>(&[b"SET", key.as_bytes(), b"someone-else", b"PX", b"1500"]);
    let mut waiter = redlock_at(&proxy.url())
        .args([
            "-k",
            key,
            "--ttl",
            "10s",
            "--wait",
            "20s",
            "--",
            "sh",
            "-c",
            "echo \"$REDLOCK_FENCE\" >> \"$OUT\"",
        ])
        .env("OUT", &out)
        .stderr(Stdio::piped())
        .start();
    // A queued waiter listens on a wake-up channel of its own, and on one for a lock handed over.
    let channels = format!("{{{key}}}:wake:*");
    assert!(
        wait_until(Duration::from_secs(5), || {
            let found: Vec<String> = redis.cmd(&[b"PUBSUB", b"CHANNELS", channels.as_bytes()]);
            found.len() == 2
        }),
        "the waiter subscribed"
    );
    // And joined the queue, which it does only once the subscription's confirmation reached it:
    // a confirmation lost to the dropped replies would keep it subscribing, never attempting.
    let queue = format!("{{{key}}}:queue");
    assert!(
        wait_until(Duration::from_secs(5), || redis.cmd::<u64>(&[b"ZCARD", queue.as_bytes()]) == 1),
        "the waiter queued"
    );
    proxy.set(Mode::DropReplies);
    let before = proxy.counts();
    // The other holder's lock expires; the waiter's SET takes it, but the reply is lost.
    let taken =
        wait_until(Duration::from_secs(5), || redis_value(&redis, key).is_some_and(|v| v != "someone-else"));
    assert!(taken, "the waiter's SET reached Redis");
    std::thread::sleep(Duration::from_millis(800));
    let during = proxy.counts();
    assert!(!out.exists(), "the command started before ownership was confirmed");
    assert!(during.replies_dropped > before.replies_dropped);
    proxy.set(Mode::Pass);
    let done = wait_output(&mut waiter, LIMIT);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    let fences = std::fs::read_to_string(&out).expect("the command ran");
    assert_eq!(fences.lines().count(), 1, "ran once: {fences:?}");
    let fence: u64 = fences.trim().parse().unwrap();
    assert_eq!(fence, fence_before + 1, "the fence of the SET whose reply was lost");
    assert_eq!(fence_counter(&redis, key), Some(fence), "the confirmations took no new fence");
    assert!(!redis.exists(key.as_bytes()), "released");
}

/// `--limit`: the same confirmation returns the fence of the lost attempt, not the counter's
/// latest, even when another holder has taken a permit (and a newer fence) meanwhile: every
/// holder keeps its own fence.
#[test]
fn a_semaphore_holder_whose_reply_was_lost_gets_its_own_fence() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.port);
    let key = "lock:confirm-limit";
    assert_eq!(run(redlock_at(&proxy.url()).args(["-k", key, "--limit", "2", "--", "true"]), LIMIT).code, 0);
    let fence_before = fence_counter_ahead(&redis, key);
    let dir = tmp();
    // Each holder writes its fence to OUT, then holds until GO exists.
    let record = "echo \"$REDLOCK_FENCE\" > \"$OUT\"; \
                  i=0; while [ ! -e \"$GO\" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done";
    let holder = |url: &str, name: &str, wait: &str| {
        let child = redlock_at(url)
            .args(["-k", key, "--limit", "2", "--ttl", "10s", "--wait", wait, "--", "sh", "-c", record])
            .env("OUT", file(&dir, name))
            .env("GO", file(&dir, &format!("{name}.go")))
            .stderr(Stdio::piped())
            .start();
        (child, file(&dir, name), file(&dir, &format!("{name}.go")))
    };
    let fence_of = |out: &std::path::Path| -> u64 { read_when_present(out, LIMIT).trim().parse().unwrap() };
    let (mut a, a_out, a_go) = holder(&redis.url(), "a", "0");
    fence_of(&a_out);
    let (mut b, b_out, b_go) = holder(&redis.url(), "b", "0");
    fence_of(&b_out);
    // The run whose reply will be lost queues for a permit, connected through the proxy.
    let (lost, lost_out, lost_go) = holder(&proxy.url(), "lost", "20s");
    let queue = format!("{{{key}}}:queue");
    assert!(wait_until(Duration::from_secs(5), || redis.cmd::<u64>(&[b"ZCARD", queue.as_bytes()]) == 1));
    proxy.set(Mode::DropReplies);
    // A lets go; the queued run takes its permit, but never learns it.
    std::fs::write(&a_go, "").unwrap();
    assert_eq!(wait_output(&mut a, LIMIT).status.code(), Some(0));
    let lost_took = || {
        let members: Vec<String> = redis.cmd(&[b"ZRANGE", key.as_bytes(), b"0", b"-1"]);
        members.len() == 2
    };
    assert!(wait_until(Duration::from_secs(5), lost_took), "the lost attempt took a permit in Redis");
    // B lets go; another holder takes that permit, and the next fence.
    std::fs::write(&b_go, "").unwrap();
    assert_eq!(wait_output(&mut b, LIMIT).status.code(), Some(0));
    let (c, c_out, c_go) = holder(&redis.url(), "c", "5s");
    let c_fence = fence_of(&c_out);
    assert!(!lost_out.exists(), "the command started before ownership was confirmed");
    proxy.set(Mode::Pass);
    let fence = fence_of(&lost_out);
    for (mut child, go) in [(lost, lost_go), (c, c_go)] {
        std::fs::write(&go, "").unwrap();
        let done = wait_output(&mut child, LIMIT);
        assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    }
    assert_eq!(fence, fence_before + 3, "the fence of the attempt whose reply was lost");
    assert_eq!(c_fence, fence_before + 4);
    assert_eq!(fence_counter(&redis, key), Some(c_fence), "the confirmation took no new fence");
}
