//! Several keys at once (docs/GUIDE.md § Several keys at once): `--key A --key B` holds every key or
//! none, taken together in one step, so that there is no order to get wrong and nothing to
//! deadlock; waiters queue at every key in one order; the loss of any key stops the command.
//! (Keys in several slots of a Cluster: `tests/topologies.rs`, which has a Cluster.)

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(60);

fn keys_args(keys: &[&str]) -> Vec<String> {
    keys.iter().flat_map(|k| ["--key".to_owned(), (*k).to_owned()]).collect()
}

/// A run of `keys` that holds until `go` exists (bounded), once it holds all of them.
fn holder(redis: &RedisServer, keys: &[&str], go: &Path) -> Process {
    let child = hold_until(redis, keys_args(keys), go);
    assert!(
        wait_until(Duration::from_secs(10), || keys.iter().all(|k| redis.exists(k.as_bytes()))),
        "the holder took {keys:?}"
    );
    child
}

#[test]
fn a_busy_key_leaves_none_of_the_others_held() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let mut a = holder(&redis, &["A"], &go);
    let r = run(redlock(&redis).args(keys_args(&["B", "A"])).args(["--", "true"]), LIMIT);
    assert_eq!(r.code, 75, "{}", r.stderr);
    assert!(r.stderr.contains("lock \"A\" is busy: held by"), "the busy key and its holder: {}", r.stderr);
    assert!(!redis.exists(b"B"), "B was not left held");
    let json =
        run(redlock(&redis).args(keys_args(&["B", "A"])).args(["--log-format", "json", "--", "true"]), LIMIT);
    let line: serde_json::Value = serde_json::from_str(json.stderr.lines().last().unwrap()).expect("JSON");
    assert_eq!(line["key"], "A", "the JSON error line names the busy key: {line}");
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_output(&mut a, LIMIT).status.code(), Some(0));
    // Now both are free: the run takes both, each with its own fence, and lets both go.
    let r = run(
        redlock(&redis).args(keys_args(&["B", "A"])).args([
            "--",
            "sh",
            "-c",
            "echo \"$REDLOCK_LOCK_KEY|$REDLOCK_FENCE|$REDLOCK_KEYS|$REDLOCK_FENCES\"",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = String::from_utf8_lossy(&r.stdout);
    let [key, fence, keys, fences] = out.trim().split('|').collect::<Vec<_>>()[..] else { panic!("{out}") };
    assert_eq!((key, keys), ("B", "B A"));
    let fences: Vec<u64> = fences.split(' ').map(|f| f.parse().unwrap()).collect();
    assert_eq!(fences.len(), 2);
    assert_eq!(fence, fences[0].to_string(), "REDLOCK_FENCE is the first key's");
    let counter = |k: &str| -> u64 {
        let v: String = redis.cmd(&[b"GET", format!("{{{k}}}:fence").as_bytes()]);
        v.parse().unwrap()
    };
    assert_eq!((counter("B"), counter("A")), (fences[0], fences[1]), "each key's own fence counter");
    assert!(!redis.exists(b"A") && !redis.exists(b"B"), "both released");
}

/// 24 runs over random pairs of three keys, each pair in a random order, all waiting: every
/// run finishes (no deadlock) and no two runs that share a key overlap.
#[test]
fn runs_over_pairs_of_keys_in_any_order_never_deadlock_or_overlap() {
    let redis = RedisServer::start();
    let dir = tmp();
    let out = file(&dir, "out");
    let names = ["k1", "k2", "k3"];
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let runs: Vec<(Vec<&str>, Process)> = (0..24)
        .map(|i| {
            let a = (next() % 3) as usize;
            let b = (a + 1 + (next() % 2) as usize) % 3;
            let pair = vec![names[a], names[b]];
            let child = redlock(&redis)
                .args(keys_args(&pair))
                .args(["--wait", "50s", "--", "sh", "-c"])
                .arg("echo \"+ $I $REDLOCK_KEYS\" >> \"$OUT\"; sleep 0.05; echo \"- $I\" >> \"$OUT\"")
                .env("I", i.to_string())
                .env("OUT", &out)
                .stderr(Stdio::piped())
                .start();
            (pair, child)
        })
        .collect();
    for (pair, mut child) in runs {
        let o = wait_output(&mut child, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{pair:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let log = std::fs::read_to_string(&out).unwrap();
    let mut running: Vec<(String, Vec<String>)> = Vec::new();
    let mut started = 0;
    for line in log.lines() {
        let mut words = line.split(' ');
        let (sign, i) = (words.next().unwrap(), words.next().unwrap().to_owned());
        if sign == "+" {
            let keys: Vec<String> = words.map(str::to_owned).collect();
            for (other, theirs) in &running {
                assert!(
                    !keys.iter().any(|k| theirs.contains(k)),
                    "run {i} {keys:?} overlapped run {other} {theirs:?}"
                );
            }
            running.push((i, keys));
            started += 1;
        } else {
            running.retain(|(r, _)| *r != i);
        }
    }
    assert_eq!(started, 24);
    for k in names {
        assert!(!redis.exists(k.as_bytes()), "{k} left held");
    }
}

#[test]
fn losing_any_one_key_stops_the_command() {
    let redis = RedisServer::start();
    let mut run_ = redlock(&redis)
        .args(keys_args(&["L1", "L2"]))
        .args(["--ttl", "2s", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || redis.exists(b"L1") && redis.exists(b"L2")));
    let url = redis.url();
    let r = run(wrapper().args(["release", "--force", "--redis-url", &url, "--key", "L2"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let o = wait_output(&mut run_, LIMIT);
    assert_eq!(o.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("this key no longer holds this run's value key=L2"),
        "the lost key is named: {stderr}"
    );
    assert!(!redis.exists(b"L1"), "the key it still held was released");
}

#[test]
fn a_waiter_wakes_when_the_last_of_its_keys_is_released() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go_a, go_b) = (file(&dir, "go-a"), file(&dir, "go-b"));
    let mut a = holder(&redis, &["W1"], &go_a);
    let mut b = holder(&redis, &["W2"], &go_b);
    let mut waiter = redlock(&redis)
        .args(keys_args(&["W1", "W2"]))
        .args(["--wait", "20s", "--", "true"])
        .stderr(Stdio::piped())
        .start();
    let queued = |k: &str| redis.cmd::<u64>(&[b"ZCARD", format!("{{{k}}}:queue").as_bytes()]) == 1;
    assert!(wait_until(Duration::from_secs(10), || queued("W1") && queued("W2")), "queued at both keys");
    // A run for W1 alone comes after the waiter, which came first: it is busy.
    std::fs::write(&go_a, "").unwrap();
    assert_eq!(wait_output(&mut a, LIMIT).status.code(), Some(0));
    let r = run(redlock(&redis).args(["--key", "W1", "--", "true"]), LIMIT);
    assert_eq!(r.code, 75, "W1 is promised to the waiter: {}", r.stderr);
    assert!(!redis.exists(b"W1"), "the waiter holds nothing while W2 is held");
    std::fs::write(&go_b, "").unwrap();
    assert_eq!(wait_output(&mut b, LIMIT).status.code(), Some(0));
    let o = wait_output(&mut waiter, LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn keys_given_twice_or_with_whitespace_are_usage_errors_and_status_takes_several() {
    let redis = RedisServer::start();
    let many: Vec<String> = (0..101).map(|i| format!("many{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for (keys, says) in [
        (&["D", "D"][..], "is given more than once"),
        (&["D", "with space"][..], "contains whitespace"),
        (&["D", "vertical\x0btab"][..], "contains whitespace"),
        (&["D", "no\u{a0}break"][..], "contains whitespace"),
        (&["a", "{a}"][..], r#"share the names stored next to them ("{a}:fence")"#),
        (&["a", "{a}:fence"][..], r#"--key "{a}:fence" is one of the names stored next to --key "a""#),
        (&["{a}:done:x", "a"][..], r#"--key "{a}:done:x" is one of the names stored next to --key "a""#),
        (&many[..], "a run holds at most 100 keys"),
        // Another lock's names start with these: the two would share a queue and a fence.
        (&["{a}"][..], r#"--key "{a}" would share its queue and its fence with the lock "a""#),
        (&["{21364}a}"][..], r#"with the lock "a}""#),
        // Another lock's stored names: taken as a lock of its own, each reads as held or busy.
        (&["{a}:fence"][..], r#"--key "{a}:fence" is the fence counter of the lock "a""#),
        (&["lock:{a}:queue"][..], r#"is the queue of the lock "lock:{a}""#),
        (&["{a}:queue:expiry"][..], r#"is the queue's expiry times of the lock "a""#),
        (&["{a}:holders"][..], r#"is the holders' fences of the lock "a""#),
        (&["{a}:done:2026-12-04"][..], r#"is the success record of the lock "a""#),
    ] {
        let r = run(redlock(&redis).args(keys_args(keys)).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{keys:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{keys:?}: {}", r.stderr);
    }
    let dir = tmp();
    let go = file(&dir, "go");
    let mut h = holder(&redis, &["S1"], &go);
    let url = redis.url();
    // The operator can still look at such a key (one an older version took).
    let twin = run(wrapper().args(["status", "--redis-url", &url]).args(keys_args(&["{a}"])), LIMIT);
    assert_eq!(twin.code, 1, "free: {}", twin.stderr);
    let status = run(wrapper().args(["status", "--redis-url", &url]).args(keys_args(&["S1", "S2"])), LIMIT);
    assert_eq!(status.code, 1, "one of them is free: {}", status.stderr);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("lock \"S1\": held by") && text.contains("lock \"S2\": free"), "{text}");
    let json =
        run(wrapper().args(["status", "--redis-url", &url, "--json"]).args(keys_args(&["S1", "S2"])), LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(v["keys"][0]["held"], true, "{v}");
    assert_eq!(v["keys"][1]["held"], false, "{v}");
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_output(&mut h, LIMIT).status.code(), Some(0));
}

#[test]
fn the_idempotency_record_belongs_to_the_first_key() {
    let redis = RedisServer::start();
    let args = |keys: &[&str]| {
        let mut c = redlock(&redis);
        c.args(keys_args(keys)).args(["--idempotency-key", "day", "--", "true"]);
        c
    };
    assert_eq!(run(&mut args(&["I1", "I2"]), LIMIT).code, 0);
    assert!(redis.exists(b"{I1}:done:day") && !redis.exists(b"{I2}:done:day"));
    let again = run(&mut args(&["I1", "I3"]), LIMIT);
    assert_eq!(again.code, 0);
    assert!(again.stderr.contains("already succeeded"), "{}", again.stderr);
}

#[test]
fn a_redlock_quorum_takes_every_key_on_a_majority() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = masters.iter().flat_map(|m| ["--redis-url".to_owned(), m.url()]).collect();
    // One node already holds B for someone else: the others grant both keys, a majority.
    masters[0].cmd::<()>(&[b"SET", b"B", b"someone", b"PX", b"60000"]);
    let r = run(
        wrapper().args(&urls).args(keys_args(&["A", "B"])).args(["--", "sh", "-c", "echo $REDLOCK_FENCES"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim().split(' ').count(), 2);
    assert!(!masters[0].exists(b"A"), "the node that could not grant both took neither");
    // Two nodes hold B: no majority for the pair, and nothing is left held.
    masters[1].cmd::<()>(&[b"SET", b"B", b"someone", b"PX", b"60000"]);
    let r = run(wrapper().args(&urls).args(keys_args(&["A", "B"])).args(["--", "true"]), LIMIT);
    assert_eq!(r.code, 75, "{}", r.stderr);
    for m in &masters {
        assert!(!m.exists(b"A"), "A left held");
    }
}

/// A run that fails with 65 at one key's fence counter changes no other key's.
#[test]
fn a_bad_fence_counter_at_one_key_changes_nothing_at_the_others() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"SET", b"{fa}:fence", b"100"]);
    redis.cmd::<()>(&[b"SET", b"{fb}:fence", b"200"]);
    let _: u64 = redis.cmd(&[b"RPUSH", b"{fc}:fence", b"x"]);
    let r = run(redlock(&redis).args(keys_args(&["fa", "fb", "fc"])).args(["--", "true"]), LIMIT);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("{fc}:fence"), "the bad counter is named: {}", r.stderr);
    assert_eq!(redis_value(&redis, "{fa}:fence").as_deref(), Some("100"));
    assert_eq!(redis_value(&redis, "{fb}:fence").as_deref(), Some("200"));
    assert_eq!(redis.cmd::<i64>(&[b"PTTL", b"{fa}:fence"]), -1, "untouched, not even its expiry");
    for k in ["fa", "fb", "fc"] {
        assert!(!redis.exists(k.as_bytes()));
    }
}

/// `release --force` and `status` with several keys try every key and report each; a key that
/// fails sets the exit status but does not hide what was done with the others.
#[test]
fn the_operator_commands_report_every_key_even_when_one_fails() {
    let redis = RedisServer::start();
    let _: u64 = redis.cmd(&[b"RPUSH", b"list", b"x"]);
    let dir = tmp();
    let go = file(&dir, "go");
    let mut h = holder(&redis, &["ra", "rc"], &go);
    let url = redis.url();
    let status = run(
        wrapper().args(["status", "--redis-url", &url, "--json"]).args(keys_args(&["ra", "list", "rc"])),
        LIMIT,
    );
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(v["keys"][0]["held"], true, "{v}");
    assert_eq!(v["keys"][1]["type"], "list", "{v}");
    assert_eq!(v["keys"][2]["held"], true, "{v}");
    let r = run(
        wrapper()
            .args(["release", "--force", "--redis-url", &url, "--json"])
            .args(keys_args(&["ra", "list", "rc"])),
        LIMIT,
    );
    assert_eq!(r.code, 65, "the failure's status: {}", r.stderr);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("JSON");
    assert_eq!(v["keys"][0]["released"], true, "{v}");
    assert!(v["keys"][1]["error"].is_string(), "{v}");
    assert_eq!(v["keys"][2]["released"], true, "{v}");
    assert!(!redis.exists(b"ra") && !redis.exists(b"rc"), "both held keys released");
    std::fs::write(&go, "").unwrap();
    // Its command ends before its next renewal would notice (0), or after (125).
    assert!(matches!(wait_output(&mut h, LIMIT).status.code(), Some(0 | 125)));
}

/// A run nested in another's command, held off by a waiter queued for the outer run's key as
/// well: that waiter cannot go before the outer run ends, so the nested run says why it waits,
/// at once and in its busy line, and names the fix. With `--wait forever` it would wait for as
/// long as that waiter does, which may be for ever: it is busy at once, saying why.
#[test]
fn a_nested_run_behind_a_waiter_for_the_outer_lock_says_why_it_waits() {
    for (wait, said) in [("1s", 2), ("forever", 1)] {
        let redis = RedisServer::start();
        let dir = tmp();
        let go = file(&dir, "go");
        let mut outer = redlock(&redis)
            .args(["-k", "A", "--", "sh", "-c"])
            .arg(
                "i=0; while [ ! -e \"$GO\" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done; \
                 \"$BIN\" -k B --wait \"$WAIT\" -- true; echo \"nested: $?\" >&2",
            )
            .env("GO", &go)
            .env("BIN", bin())
            .env("WAIT", wait)
            .env("REDIS_URL", redis.url())
            .stderr(Stdio::piped())
            .start();
        assert!(wait_until(Duration::from_secs(10), || redis.exists(b"A")));
        let mut both =
            redlock(&redis).args(keys_args(&["A", "B"])).args(["--wait", "30s", "--", "true"]).start();
        let queued = || redis.cmd::<u64>(&[b"ZCARD", b"{B}:queue"]) == 1;
        assert!(wait_until(Duration::from_secs(10), queued), "queued for both");
        std::fs::write(&go, "").unwrap();
        let o = wait_output(&mut outer, LIMIT);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("nested: 75"), "--wait {wait}: {stderr}");
        let why =
            "the run queued first for \"B\" also waits for \"A\", which the run this one is nested in holds";
        assert_eq!(
            stderr.matches(why).count(),
            said,
            "--wait {wait}: warned at once and in the busy line: {stderr}"
        );
        assert!(stderr.contains("take the keys together in the outer run"), "--wait {wait}: {stderr}");
        assert_eq!(wait_output(&mut both, LIMIT).status.code(), Some(0), "the waiter for both ran after");
    }
}
