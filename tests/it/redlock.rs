//! Redlock: the lock on a majority of independent masters (docs/GUIDE.md § Redis deployments).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(60);

fn nodes(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// The wrapper pointed at every node (one --redis-url each).
fn quorum(nodes: &[RedisServer]) -> Command {
    let mut cmd = wrapper();
    for node in nodes {
        cmd.args(["--redis-url", &node.url()]);
    }
    cmd
}

fn held_on(nodes: &[RedisServer], key: &[u8]) -> usize {
    nodes.iter().filter(|n| n.exists(key)).count()
}

#[test]
fn three_nodes_twenty_wrappers_exactly_one_runs() {
    let nodes = nodes(3);
    exactly_one_of(20, "lock:rl", || quorum(&nodes));
    assert_eq!(held_on(&nodes, b"lock:rl"), 0, "released everywhere");
}

#[test]
fn one_node_down_or_frozen_does_not_matter() {
    let mut nodes = nodes(3);
    nodes[0].stop();
    let r = run(quorum(&nodes).args(["-k", "lock:down1", "--", "sh", "-c", "echo $REDLOCK_FENCE"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // No retry for the node that is down (it refuses at once); room for a loaded machine.
    assert!(r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
    // The node that was down never held the lock: nothing to confirm there.
    assert!(!r.stderr.contains("could not confirm"), "{}", r.stderr);

    let nodes = self::nodes(3);
    nodes[1].freeze();
    let r = run(quorum(&nodes).args(["-k", "lock:frozen1", "--", "true"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Bounded by the per-node timeout (50 ms at the default TTL), not a TCP timeout; the bound
    // leaves room for a loaded machine.
    assert!(r.elapsed < Duration::from_secs(5), "took {:?}", r.elapsed);
    nodes[1].thaw();
}

#[test]
fn two_of_three_down_is_unavailable_and_leaves_nothing() {
    let mut nodes = nodes(3);
    nodes[0].stop();
    nodes[1].stop();
    let dir = tmp();
    let marker = file(&dir, "ran");
    let r = run(quorum(&nodes).args(["-k", "lock:down2", "--", "touch"]).arg(&marker), LIMIT);
    assert_eq!(r.code, 69, "{}", r.stderr);
    // The live node answered: the message names the two that failed, and how many answered.
    let (up, down) = (nodes[2].url(), [nodes[0].url(), nodes[1].url()]);
    // (The live node's answer may come after the two refusals, which already decide.)
    assert!(r.stderr.contains(" of 3 nodes answered, 2 needed"), "{}", r.stderr);
    assert!(down.iter().all(|d| r.stderr.contains(&format!("{d}: "))), "{}", r.stderr);
    assert!(!r.stderr.contains(&format!("{up}: ")) && !r.stderr.contains(&format!("{up},")), "{}", r.stderr);
    assert!(!marker.exists(), "nothing ran");
    assert!(!nodes[2].exists(b"lock:down2"), "nothing left behind on the live node");

    let nodes = self::nodes(3);
    for n in &nodes[..2] {
        n.cmd::<()>(&[b"SET", b"lock:busy2", b"someone", b"PX", b"60000"]);
    }
    let r = run(quorum(&nodes).args(["-k", "lock:busy2", "--", "touch"]).arg(&marker), LIMIT);
    assert_eq!(r.code, 75, "a majority holds it: {}", r.stderr);
    assert!(!marker.exists());
    assert!(!nodes[2].exists(b"lock:busy2"), "the one node that granted was given back");
}

#[test]
fn renewal_keeps_a_majority_and_stops_without_one() {
    let mut nodes = nodes(3);
    let mut wrapper = quorum(&nodes)
        .args(["-k", "lock:renewq", "--ttl", "2s", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || held_on(&nodes, b"lock:renewq") == 3));
    nodes[0].stop();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(held_on(&nodes[1..], b"lock:renewq") == 2, "still renewed on the two left after a TTL");
    nodes[1].stop();
    let out = wait_output(&mut wrapper, LIMIT);
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn contended_counter_over_five_nodes_loses_nothing() {
    let nodes = nodes(5);
    let args: Vec<String> = nodes.iter().flat_map(|n| ["--redis-url".to_owned(), n.url()]).collect();
    assert_eq!(contended_counter(&args, "lock:counter5", 20, 3), 60, "lost updates");
}

#[test]
fn five_nodes_with_two_frozen_still_lock() {
    let nodes = nodes(5);
    nodes[0].freeze();
    nodes[3].freeze();
    let r = run(quorum(&nodes).args(["-k", "lock:frozen2", "--", "sh", "-c", "echo $REDLOCK_FENCE"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // As above: the per-node timeout, with room for a loaded machine.
    assert!(r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
    let fence: u64 = String::from_utf8_lossy(&r.stdout).trim().parse().unwrap();
    assert!(fence > 0);
    for n in &nodes {
        n.thaw();
    }
}

/// Above 2^53 a Lua number is no longer exact: the fence is computed, handed out and written
/// back to the nodes exactly, so that it still strictly increases across majorities.
#[test]
fn fences_above_2_pow_53_are_exact_across_majorities() {
    let nodes = nodes(3);
    nodes[2].cmd::<()>(&[b"SET", b"{lock:big}:fence", b"9007199254740994"]);
    // Requests get 250 ms (the default is 50 ms a node): an attempt that timed out on a loaded
    // machine raised the fence on the nodes that answered, and the next one got the one after.
    let fence_of = |nodes: &[RedisServer]| -> u64 {
        let r = run(
            quorum(nodes)
                .args(["--connect-timeout", "250ms", "--command-timeout", "250ms", "-k", "lock:big"])
                .args(["--", "sh", "-c", "echo $REDLOCK_FENCE"]),
            LIMIT,
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        String::from_utf8_lossy(&r.stdout).trim().parse().unwrap()
    };
    let mut fences = vec![fence_of(&nodes)];
    for frozen in [2, 0, 1] {
        nodes[frozen].freeze();
        fences.push(fence_of(&nodes));
        nodes[frozen].thaw();
    }
    assert_eq!(fences, [9007199254740995, 9007199254740996, 9007199254740997, 9007199254740998]);
}

#[test]
fn fence_is_the_highest_granted_and_status_counts_nodes() {
    let nodes = nodes(3);
    // One node's counter is far ahead. A run on a majority that includes it gets that fence;
    // a later run on a majority without it must still get a higher one.
    nodes[2].cmd::<()>(&[b"SET", b"{lock:fq}:fence", b"9000000000000000"]);
    let fence_of = |nodes: &[RedisServer]| -> u64 {
        let r = run(quorum(nodes).args(["-k", "lock:fq", "--", "sh", "-c", "echo $REDLOCK_FENCE"]), LIMIT);
        assert_eq!(r.code, 0, "{}", r.stderr);
        String::from_utf8_lossy(&r.stdout).trim().parse().unwrap()
    };
    nodes[0].freeze();
    let first = fence_of(&nodes);
    nodes[0].thaw();
    assert_eq!(first, 9_000_000_000_000_001, "the highest counter of the majority that granted");
    nodes[2].freeze();
    let second = fence_of(&nodes);
    nodes[2].thaw();
    assert!(second > first, "monotonic across different majorities: {first} then {second}");

    // Held once the command runs (an attempt that saw keys on two nodes may still be given
    // back, when its replies come too late on a busy host); the third node may or may not
    // have it.
    let dir = tmp();
    let started = file(&dir, "started");
    let mut holder = quorum(&nodes)
        .args(["-k", "lock:fq", "--", "sh", "-c", "touch \"$1\"; sleep 5", "sh"])
        .arg(&started)
        .start();
    assert!(wait_until(Duration::from_secs(10), || started.exists()));
    assert!(held_on(&nodes, b"lock:fq") >= 2);
    let mut status = Command::new(bin());
    status.args(["status", "--key", "lock:fq", "--json"]);
    for n in &nodes {
        status.args(["--redis-url", &n.url()]);
    }
    let s = run(&mut status, LIMIT);
    assert_eq!(s.code, 0, "held on a majority: {}", s.stderr);
    let v: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    assert!(v["held_on"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(v["nodes"].as_array().unwrap().len(), 3);
    // One node unreachable: status still answers, showing it.
    nodes[0].freeze();
    let s = run(&mut status, LIMIT);
    nodes[0].thaw();
    let v: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap_or_default();
    assert!(v["nodes"][0]["error"].is_string(), "{}: {v}", s.stderr);
    let mut release = Command::new(bin());
    release.args(["release", "--key", "lock:fq", "--force"]);
    for n in &nodes {
        release.args(["--redis-url", &n.url()]);
    }
    assert_eq!(run(&mut release, LIMIT).code, 0);
    assert_eq!(held_on(&nodes, b"lock:fq"), 0, "released on every node");
    assert_eq!(
        wait_output(&mut holder, LIMIT).status.code(),
        Some(125),
        "heard at once that it was released"
    );

    let even = run(quorum(&nodes[..2]).args(["-k", "lock:even", "--", "true"]), LIMIT);
    assert_eq!(even.code, 0, "{}", even.stderr);
    assert!(even.stderr.contains("odd number"), "warns on an even count: {}", even.stderr);
}

#[test]
fn a_release_that_misses_nodes_is_not_reported_as_done() {
    let nodes = nodes(3);
    let dir = tmp();
    let started = file(&dir, "started");
    let mut wrapper = quorum(&nodes)
        .args(["-k", "lock:partial", "--ttl", "20s", "--", "sh", "-c", "touch \"$1\"; sleep 1", "sh"])
        .arg(&started)
        .stderr(Stdio::piped())
        .start();
    // Wait for the command, not for the keys: with the keys on every node the wrapper may still
    // be raising the fence counters, and freezing two nodes then fails the acquisition (69).
    assert!(wait_until(Duration::from_secs(5), || started.exists()), "the command started");
    assert!(held_on(&nodes, b"lock:partial") >= 2, "held on a majority");
    nodes[1].freeze();
    nodes[2].freeze();
    let out = wait_output(&mut wrapper, LIMIT);
    nodes[1].thaw();
    nodes[2].thaw();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the command's status: {stderr}");
    assert!(stderr.contains(" outcome=unknown "), "the release is not claimed: {stderr}");
}

#[test]
fn status_needs_one_holder_on_a_majority_and_says_when_it_cannot_tell() {
    let mut nodes = nodes(3);
    let status = |nodes: &[RedisServer]| {
        let mut cmd = Command::new(bin());
        cmd.args(["status", "--key", "lock:st"]);
        for n in nodes {
            cmd.args(["--redis-url", &n.url()]);
        }
        run(&mut cmd, LIMIT)
    };
    nodes[0].cmd::<()>(&[b"SET", b"lock:st", b"holder-x", b"PX", b"60000"]);
    nodes[1].cmd::<()>(&[b"SET", b"lock:st", b"holder-y", b"PX", b"60000"]);
    let split = status(&nodes);
    assert_eq!(
        split.code,
        1,
        "two different holders are no majority: {}",
        String::from_utf8_lossy(&split.stdout)
    );

    let mut release = Command::new(bin());
    release.args(["release", "--key", "lock:st", "--force"]);
    release.args(["--redis-url", &format!("redis://127.0.0.1:{}", free_port())]);
    for n in &nodes {
        release.args(["--redis-url", &n.url()]);
    }
    let r = run(&mut release, LIMIT);
    assert_eq!(r.code, 0, "an unreachable node does not stop the others' release: {}", r.stderr);
    assert_eq!(held_on(&nodes, b"lock:st"), 0);

    nodes[0].cmd::<()>(&[b"SET", b"lock:st", b"holder-x", b"PX", b"60000"]);
    nodes[1].stop();
    nodes[2].stop();
    let unknown = status(&nodes);
    assert_eq!(unknown.code, 69, "one holder and two unreachable: unknown, not free: {}", unknown.stderr);
    assert!(String::from_utf8_lossy(&unknown.stdout).contains("UNKNOWN"));
}

/// A healthy quorum grants on a host whose every core is busy: the per-node timeout (50 ms at
/// the default TTL, connection set-up included) must not run out because the wrapper waits for
/// a CPU. It takes the machine's CPU while it runs, so it runs only when SOAK_SECS is set.
#[test]
fn a_healthy_quorum_grants_while_every_core_is_busy() {
    if std::env::var_os("SOAK_SECS").is_none() {
        return;
    }
    let nodes = nodes(3);
    let hog = CpuHog::start();
    let started = std::time::Instant::now();
    let failures: Vec<String> = (0..200)
        .filter_map(|_| {
            let r = run(quorum(&nodes).args(["-k", "lock:hog", "--", "true"]), LIMIT);
            (r.code != 0).then(|| format!("exit {}: {}", r.code, r.stderr))
        })
        .collect();
    drop(hog);
    eprintln!("200 acquisitions with every core busy in {:?}", started.elapsed());
    assert!(failures.is_empty(), "{} of 200 failed: {failures:#?}", failures.len());
}

/// The quorum's error counts the nodes that answered, not those it stopped waiting for; a
/// frozen minority does not make the release unconfirmed (no run can count on that copy, which
/// expires); and a success record on a minority is no record.
#[test]
fn a_quorum_counts_what_answered_and_a_minority_is_not_a_majority() {
    let mut down = nodes(3);
    let urls: Vec<String> = down.iter().map(RedisServer::url).collect();
    for node in &mut down {
        node.stop();
    }
    let r = run(quorum(&down).args(["-k", "lock:none", "--", "true"]), LIMIT);
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(r.stderr.contains("0 of 3 nodes answered, 2 needed"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("{}: ", urls[0])), "{}", r.stderr);

    let nodes = nodes(3);
    nodes[2].freeze();
    let r = run(quorum(&nodes).args(["-k", "lock:frozen", "--", "true"]), LIMIT);
    nodes[2].thaw();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("could not confirm"), "{}", r.stderr);

    let dir = tmp();
    let metrics = file(&dir, "metrics");
    let oom = "redis-cli -p \"$A\" config set maxmemory 1 >/dev/null; redis-cli -p \"$B\" config set maxmemory 1 >/dev/null";
    let r = run(
        quorum(&nodes)
            .args(["-k", "lock:minority", "--idempotency-key", "d", "--metrics-file"])
            .arg(&metrics)
            .args(["--", "sh", "-c", oom])
            .env("A", nodes[0].port.to_string())
            .env("B", nodes[1].port.to_string()),
        LIMIT,
    );
    for node in &nodes[..2] {
        node.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    }
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("written on 1 of 3 nodes, 2 needed"), "{}", r.stderr);
    assert!(std::fs::read_to_string(&metrics).unwrap().contains("outcome=\"unrecorded\"} 1"));
}

/// A waiter on a quorum waits for an announced release, or else tries again within 2 s: its own
/// failed attempt, which took nothing, announces nothing. (It did, on every node, and the
/// waiter, listening, woke to its own announcement: thousands of requests a second.)
#[test]
fn a_waiter_does_not_wake_itself() {
    let nodes = nodes(3);
    let dir = tmp();
    let go = file(&dir, "go");
    let mut holder =
        quorum(&nodes).args(["-k", "lock:wait", "--", "sh", "-c", HOLD_UNTIL_GO]).env("GO", &go).start();
    assert!(wait_until(LIMIT, || held_on(&nodes, b"lock:wait") == 3), "held");
    let mut waiter = quorum(&nodes).args(["-k", "lock:wait", "--wait", "30s", "--", "true"]).start();
    let evals = || nodes.iter().map(|n| n.calls("evalsha")).sum::<u64>();
    assert!(wait_until(LIMIT, || evals() > 3), "the waiter's first attempt");
    let before = evals();
    std::thread::sleep(Duration::from_millis(500));
    let attempts = evals() - before;
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    assert!(wait_bounded(&mut waiter, LIMIT).success());
    // Retries with a jittered backoff (up to 2 s apart), each an attempt and its release on 3
    // nodes: a few, where it was thousands.
    assert!(attempts <= 60, "{attempts} script calls in 0.5 s while the lock was held");
}
