//! Sentinel (README § Redis deployments): ownership counts only on the master the Sentinels
//! name, through a failover; a Sentinel address that is not a Sentinel is a configuration
//! mistake.

mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::sentinel::{Sentinel, SentinelSet, Watch};
use support::*;

/// Writes a wall-clock timestamp (ns) to $1 every 50 ms, $2 times.
const HEARTBEAT: &str =
    "i=0; while [ $i -lt \"$2\" ]; do date +%s%N >> \"$1\"; sleep 0.05; i=$((i + 1)); done";

/// The first and last heartbeat in `path`, in ns since the epoch.
fn span(path: &Path) -> Option<(u128, u128)> {
    let text = std::fs::read_to_string(path).ok()?;
    let beats: Vec<u128> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    Some((*beats.first()?, *beats.last()?))
}

fn unix_ns() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos()
}

fn ms_after(origin: u128, t: u128) -> i128 {
    (t as i128 - origin as i128) / 1_000_000
}

/// What one failover run saw.
struct Failover {
    /// How long W2's command ran while W1's still did.
    overlap: Option<Duration>,
    w1: Option<i32>,
    w2: Option<i32>,
    w2_ran: bool,
    log: String,
}

/// Issue 14 item 6, as reported: a holder W1 (`--ttl 6s`); its master is frozen for 2.2 s,
/// just as a renewal is due, and the replica is promoted meanwhile; a waiter W2 starts 2.3 s
/// after the old master resumed (by then the key has expired on the replica unless renewed
/// there).
fn freeze_the_master_under_a_holder() -> Failover {
    let set = SentinelSet::start(
        3,
        Watch {
            quorum: 2,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_secs(3),
        },
    );
    let dir = tmp();
    let (beats1, beats2) = (file(&dir, "w1"), file(&dir, "w2"));
    let holder = |beats: &Path, count: &str, wait: &str| -> Child {
        wrapper()
            .args(set.args())
            .args([
                "-v",
                "-k",
                "lock:failover",
                "--ttl",
                "6s",
                "--wait",
                wait,
                "--",
                "sh",
                "-c",
                HEARTBEAT,
                "sh",
            ])
            .arg(beats)
            .arg(count)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    };
    // W1's command runs at least 8 s: well past the point where the key would expire on the
    // promoted replica without renewals there.
    let w1 = holder(&beats1, "160", "0");
    assert!(wait_until(Duration::from_secs(10), || span(&beats1).is_some()), "W1 did not start");
    let started = Instant::now();
    assert!(
        wait_until(Duration::from_secs(2), || set.replica.exists(b"lock:failover")),
        "the lock did not replicate"
    );
    std::thread::sleep((started + Duration::from_millis(1900)).saturating_duration_since(Instant::now()));
    let frozen = unix_ns();
    set.master.freeze();
    std::thread::sleep(Duration::from_millis(2200));
    set.master.thaw();
    std::thread::sleep(Duration::from_millis(2300));
    let w2 = holder(&beats2, "10", "40s");
    let switched = wait_until(Duration::from_secs(10), || set.switched());
    let (out1, out2) = (wait_output(w1, Duration::from_secs(60)), wait_output(w2, Duration::from_secs(60)));
    assert!(switched, "the Sentinels did not fail over to the replica");
    let (first, second) = (span(&beats1).expect("W1 ran"), span(&beats2));
    let overlap = second.and_then(|(start2, end2)| {
        let (start, end) = (first.0.max(start2), first.1.min(end2));
        (start <= end).then(|| Duration::from_nanos((end - start) as u64))
    });
    Failover {
        overlap,
        w1: out1.status.code(),
        w2: out2.status.code(),
        w2_ran: second.is_some(),
        log: format!(
            "heartbeats in ms from the freeze: W1 {:?}, W2 {:?}\n--- W1 ---\n{}--- W2 ---\n{}",
            (ms_after(frozen, first.0), ms_after(frozen, first.1)),
            second.map(|(a, b)| (ms_after(frozen, a), ms_after(frozen, b))),
            String::from_utf8_lossy(&out1.stderr),
            String::from_utf8_lossy(&out2.stderr)
        ),
    }
}

#[test]
fn a_demoted_master_never_confirms_ownership() {
    const RUNS: usize = 5;
    // Each run has its own Sentinel set on its own ports; they run side by side.
    let runs: Vec<Failover> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..RUNS).map(|_| s.spawn(freeze_the_master_under_a_holder)).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let overlapped = runs.iter().filter(|r| r.overlap.is_some()).count();
    for (i, r) in runs.iter().enumerate() {
        eprintln!("run {i}: W1 exit {:?}, W2 exit {:?}, overlap {:?}", r.w1, r.w2, r.overlap);
    }
    for (i, r) in runs.iter().enumerate() {
        assert!(
            r.overlap.is_none(),
            "run {i}: W2's command ran beside W1's for {:?} ({overlapped} of {RUNS} runs overlapped)\n{}",
            r.overlap,
            r.log
        );
        assert!(matches!(r.w1, Some(0 | 125)), "run {i}: W1 exited {:?}\n{}", r.w1, r.log);
        assert!(r.w2 == Some(0) && r.w2_ran, "run {i}: W2 exited {:?} without running\n{}", r.w2, r.log);
    }
}

#[test]
fn a_plain_redis_given_as_a_sentinel_is_a_configuration_mistake() {
    let redis = RedisServer::start();
    let dir = tmp();
    let marker = file(&dir, "ran");
    for fail_open in [false, true] {
        let mut cmd = wrapper();
        cmd.args(["--sentinel", &format!("127.0.0.1:{}", redis.port), "--sentinel-master", "main"]);
        if fail_open {
            cmd.arg("--fail-open");
        }
        let r = run(cmd.args(["-k", "lock:x", "--", "touch"]).arg(&marker), Duration::from_secs(30));
        assert_eq!(r.code, 78, "--fail-open {fail_open}: {}", r.stderr);
        assert!(r.stderr.contains("is not a Sentinel"), "says what is wrong: {}", r.stderr);
        assert!(!r.stderr.contains("cannot reach"), "Redis answered: {}", r.stderr);
        assert!(!marker.exists(), "the command never runs");
    }
}

/// Other Sentinel mistakes that are never an outage: a `--sentinel` that does not speak the
/// Redis protocol at all, and a master name a Sentinel does not know while another Sentinel is
/// down. Both exit 78, even with `--fail-open`.
#[test]
fn a_non_redis_sentinel_or_an_unknown_master_never_fails_open() {
    let redis = RedisServer::start();
    let sentinel = Sentinel::start(redis.port);
    let http = NotRedis::start(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let nothing = format!("127.0.0.1:{}", free_port());
    let dir = tmp();
    let marker = file(&dir, "ran");
    let cases = [
        (vec![format!("127.0.0.1:{}", http.port)], "mymaster", "does not speak the Redis protocol"),
        (vec![sentinel.addr(), nothing.clone()], "nosuch", "does not know a master named"),
        (vec![nothing, sentinel.addr()], "nosuch", "does not know a master named"),
    ];
    for (sentinels, master, says) in cases {
        let mut cmd = wrapper();
        for s in &sentinels {
            cmd.args(["--sentinel", s]);
        }
        cmd.args(["--sentinel-master", master, "--fail-open", "-k", "lock:x", "--", "touch"]).arg(&marker);
        let r = run(&mut cmd, Duration::from_secs(30));
        assert_eq!(r.code, 78, "{sentinels:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{sentinels:?}: {}", r.stderr);
        assert_eq!(r.stderr.trim().lines().count(), 1, "one line: {}", r.stderr);
        assert!(!marker.exists(), "the command never runs");
    }
}
