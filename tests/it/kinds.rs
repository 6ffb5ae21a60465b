//! The kinds of lock (docs/GUIDE.md § Lock kinds): a semaphore (`--limit N`) admits N holders, shared
//! runs (`--shared`) hold together and never beside an exclusive run, a queued exclusive run is
//! not passed by shared runs that come after it, every holder gets its own fence, and runs of
//! kinds that do not go together are told so (65) instead of changing the limit.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A run of `kind` whose command appends "+ NAME FENCE" when it starts and "- NAME" when it
/// ends, `secs` later (appends of one short line are atomic, so the file is the real order).
fn recorder(redis: &RedisServer, key: &str, kind: &[&str], name: &str, secs: &str, out: &Path) -> Process {
    redlock(redis)
        .args(["-k", key, "--wait", "50s"])
        .args(kind)
        .args(["--", "sh", "-c"])
        .arg("echo \"+ $NAME $REDLOCK_FENCE\" >> \"$OUT\"; sleep \"$SECS\"; echo \"- $NAME\" >> \"$OUT\"")
        .env("NAME", name)
        .env("SECS", secs)
        .env("OUT", out)
        .stderr(Stdio::piped())
        .start()
}

/// A run of `kind` that holds until `go` exists (bounded), once it holds.
fn holder(redis: &RedisServer, key: &str, kind: &[&str], go: &Path) -> Process {
    let before = holders(redis, key);
    let child = hold_until(redis, ["-k", key].iter().chain(kind), go);
    assert!(
        wait_until(Duration::from_secs(10), || holders(redis, key) == before + 1),
        "the holder took the lock"
    );
    child
}

/// How many hold the key: 1 for an exclusive lock, the members of a set of holders.
fn holders(redis: &RedisServer, key: &str) -> u64 {
    let kind: String = redis.cmd(&[b"TYPE", key.as_bytes()]);
    match kind.as_str() {
        "string" => 1,
        "zset" => redis.cmd(&[b"ZCARD", key.as_bytes()]),
        _ => 0,
    }
}

fn queue_len(redis: &RedisServer, key: &str) -> u64 {
    redis.cmd(&[b"ZCARD", format!("{{{key}}}:queue").as_bytes()])
}

/// The lines of the record, as (start?, name, fence).
fn events(out: &Path) -> Vec<(bool, String, Option<i64>)> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut words = l.split(' ');
            let start = words.next() == Some("+");
            let name = words.next().expect("name").to_owned();
            (start, name, words.next().and_then(|f| f.parse().ok()))
        })
        .collect()
}

/// The most runs whose commands ran at once, by the record.
fn peak(events: &[(bool, String, Option<i64>)]) -> usize {
    let (mut now, mut peak) = (0usize, 0usize);
    for (start, ..) in events {
        if *start {
            now += 1;
            peak = peak.max(now);
        } else {
            now -= 1;
        }
    }
    peak
}

/// A Redlock quorum: this server and two more URLs (the kinds are refused before connecting).
fn quorum(url: &str) -> [String; 6] {
    let other = |host| format!("redis://{host}:{}", free_port());
    [
        "--redis-url".into(),
        url.into(),
        "--redis-url".into(),
        other("127.0.0.2"),
        "--redis-url".into(),
        other("127.0.0.3"),
    ]
}

fn finish(children: Vec<Process>) {
    for mut c in children {
        let o = wait_output(&mut c, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn ten_runs_with_limit_3_hold_three_at_a_time_each_with_its_own_fence() {
    let redis = RedisServer::start();
    let dir = tmp();
    let out = file(&dir, "out");
    let runs: Vec<Process> = (0..10)
        .map(|i| recorder(&redis, "lock:cap", &["--limit", "3"], &format!("r{i}"), "0.4", &out))
        .collect();
    finish(runs);
    let events = events(&out);
    assert_eq!(events.len(), 20, "{events:?}");
    assert_eq!(peak(&events), 3, "at the peak exactly 3 run together: {events:?}");
    let mut fences: Vec<i64> = events.iter().filter_map(|(.., f)| *f).collect();
    fences.sort();
    fences.dedup();
    assert_eq!(fences.len(), 10, "every run gets its own fence: {events:?}");
    assert_eq!(holders(&redis, "lock:cap"), 0, "every permit was given back");
    assert!(!redis.exists(b"{lock:cap}:holders"), "the fences of the holders went with them");
}

#[test]
fn with_two_holders_of_limit_2_a_third_is_busy_and_status_lists_both() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let a = holder(&redis, "lock:two", &["--limit", "2"], &go);
    let b = holder(&redis, "lock:two", &["--limit", "2"], &go);
    let third = run(redlock(&redis).args(["-k", "lock:two", "--limit", "2", "--", "true"]), LIMIT);
    assert_eq!(third.code, 75, "{}", third.stderr);
    assert!(third.stderr.contains("all 2 permits are held (--limit 2)"), "{}", third.stderr);

    let url = redis.url();
    let status = run(wrapper().args(["status", "--redis-url", &url, "-k", "lock:two", "--json"]), LIMIT);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(json["kind"], "limit");
    assert_eq!(json["limit"], 2);
    assert_eq!(json["holding"], 2);
    let listed: Vec<u64> =
        json["holders"].as_array().unwrap().iter().map(|h| h["pid"].as_u64().unwrap()).collect();
    let mut pids = listed.clone();
    pids.sort();
    let mut expected = vec![u64::from(a.id()), u64::from(b.id())];
    expected.sort();
    assert_eq!(pids, expected, "{json}");
    for h in json["holders"].as_array().unwrap() {
        assert!(h["ttl_ms"].as_u64().unwrap() > 0, "{h}");
        assert!(h["fence"].as_i64().is_some(), "{h}");
        assert_eq!(h["kind"], "limit");
    }
    assert_ne!(json["holders"][0]["fence"], json["holders"][1]["fence"]);

    let text = run(wrapper().args(["status", "--redis-url", &url, "-k", "lock:two"]), LIMIT);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("2 of 2 permits held (--limit 2)"), "{text}");
    assert!(
        text.contains(&format!("(pid {})", a.id())) && text.contains(&format!("(pid {})", b.id())),
        "{text}"
    );

    std::fs::write(&go, "").unwrap();
    finish(vec![a, b]);
}

#[test]
fn shared_runs_overlap_and_an_exclusive_run_overlaps_none() {
    let redis = RedisServer::start();
    let dir = tmp();
    let out = file(&dir, "out");
    let mut runs = Vec::new();
    for i in 0..5 {
        runs.push(recorder(&redis, "lock:rw", &["--shared"], &format!("s{i}"), "1", &out));
    }
    // All five hold together before the exclusive runs arrive.
    assert!(wait_until(Duration::from_secs(10), || holders(&redis, "lock:rw") == 5), "5 shared holders");
    for i in 0..2 {
        runs.push(recorder(&redis, "lock:rw", &[], &format!("x{i}"), "0.3", &out));
        runs.push(recorder(&redis, "lock:rw", &["--shared"], &format!("t{i}"), "0.3", &out));
    }
    finish(runs);
    let events = events(&out);
    assert_eq!(events.len(), 18, "{events:?}");
    // The five shared runs overlapped (a shared run that came before the exclusive ones
    // queued may have joined them).
    let first_end = events.iter().position(|(start, name, _)| !start && name.starts_with('s')).unwrap();
    let started =
        events[..first_end].iter().filter(|(start, name, _)| *start && name.starts_with('s')).count();
    assert_eq!(started, 5, "the five shared runs overlapped: {events:?}");
    // While an exclusive run's command runs, nothing else does.
    let mut running: Vec<&str> = Vec::new();
    for (start, name, _) in &events {
        if *start {
            running.push(name);
        } else {
            running.retain(|r| r != name);
        }
        if running.iter().any(|r| r.starts_with('x')) {
            assert_eq!(running.len(), 1, "an exclusive run overlapped: {running:?} in {events:?}");
        }
    }
}

#[test]
fn shared_runs_that_arrive_after_a_waiting_exclusive_run_start_after_it() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let first = holder(&redis, "lock:fair", &["--shared"], &go);
    let exclusive = recorder(&redis, "lock:fair", &[], "x", "0.5", &out);
    assert!(wait_until(Duration::from_secs(10), || queue_len(&redis, "lock:fair") == 1), "x queued");
    let mut shared = Vec::new();
    for i in 0..3 {
        shared.push(recorder(&redis, "lock:fair", &["--shared"], &format!("s{i}"), "0.2", &out));
        assert!(
            wait_until(Duration::from_secs(10), || queue_len(&redis, "lock:fair") == 2 + i as u64),
            "s{i} queued behind x"
        );
    }
    // A shared run that does not wait is busy too: it would pass the exclusive one.
    let passer = run(redlock(&redis).args(["-k", "lock:fair", "--shared", "--", "true"]), LIMIT);
    assert_eq!(passer.code, 75, "{}", passer.stderr);
    assert!(passer.stderr.contains("an exclusive run is queued for it"), "{}", passer.stderr);
    std::thread::sleep(Duration::from_millis(600));
    assert!(events(&out).is_empty(), "nothing ran beside the first shared holder: {:?}", events(&out));
    let url = redis.url();
    let status = run(wrapper().args(["status", "--redis-url", &url, "-k", "lock:fair"]), LIMIT);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(&format!("    1. vm (pid {}), run started", exclusive.id()))
            || text.contains(", exclusive\n"),
        "{text}"
    );
    assert!(text.lines().filter(|l| l.ends_with(", shared")).count() == 3, "each waiter's kind: {text}");
    assert!(text.lines().any(|l| l.starts_with("    1. ") && l.ends_with(", exclusive")), "{text}");

    std::fs::write(&go, "").unwrap();
    let mut all = vec![first, exclusive];
    all.extend(shared);
    finish(all);
    let events = events(&out);
    let names: Vec<(bool, &str)> = events.iter().map(|(s, n, _)| (*s, n.as_str())).collect();
    assert_eq!(&names[..2], &[(true, "x"), (false, "x")], "x first, alone: {events:?}");
    assert_eq!(peak(&events[2..]), 3, "then the three shared runs together: {events:?}");
}

/// Every pair of kinds on one key: those that go together wait for each other; the others are
/// told both kinds (65), and nothing is taken.
#[test]
fn kinds_that_do_not_go_together_are_refused_with_both_named() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let cases: [(&[&str], &[&str], i32, &str); 8] = [
        (&[], &["--limit", "3"], 65, "in use with an exclusive lock (no --shared, no --limit or --limit 1)"),
        (&[], &["--shared"], 75, "held by"),
        (&[], &["--limit", "1"], 75, "held by"),
        (&["--limit", "3"], &[], 65, "in use with --limit 3"),
        (&["--limit", "3"], &["--limit", "5"], 65, "in use with --limit 3"),
        (&["--limit", "3"], &["--shared"], 65, "in use with --limit 3"),
        (&["--shared"], &["--limit", "2"], 65, "but this run asks for --limit 2"),
        (&["--shared"], &[], 75, "held shared by 1 run"),
    ];
    for (i, (held, asks, code, says)) in cases.iter().enumerate() {
        let key = format!("lock:mix{i}");
        let h = holder(&redis, &key, held, &go);
        let r = run(redlock(&redis).args(["-k", &key]).args(*asks).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, *code, "{held:?} then {asks:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{held:?} then {asks:?}: {}", r.stderr);
        assert_eq!(holders(&redis, &key), 1, "{held:?} then {asks:?}: nothing taken");
        assert_eq!(queue_len(&redis, &key), 0, "{held:?} then {asks:?}: nothing queued");
        if *code == 65 {
            assert!(r.stderr.contains("every run on a key must use the same kind of lock"), "{}", r.stderr);
        }
        std::fs::write(&go, "").unwrap();
        finish(vec![h]);
        std::fs::remove_file(&go).unwrap();
    }
}

#[test]
fn combinations_that_cannot_be_defined_are_usage_errors() {
    let redis = RedisServer::start();
    for (args, says) in [
        (&["--shared", "--limit", "2"][..], "--shared and --limit cannot be combined"),
        (&["--limit", "0"][..], "--limit"),
        (&["--limit", "x"][..], "--limit"),
    ] {
        let r = run(redlock(&redis).args(["-k", "k"]).args(args).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }
    let url = redis.url();
    for kind in [&["--shared"][..], &["--limit", "2"][..]] {
        let r = run(wrapper().args(["-k", "k"]).args(quorum(&url)).args(kind).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{kind:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("a Redlock quorum (several --redis-url) holds exclusive locks only"),
            "{kind:?}: {}",
            r.stderr
        );
    }
    let r = run(
        redlock(&redis).args(["-k", "k", "--", "true"]).env("REDLOCK_SHARED", "1").env("REDLOCK_LIMIT", "3"),
        LIMIT,
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(!redis.exists(b"k"));
}

#[test]
fn holders_renew_their_own_leases_and_a_lapsed_one_is_ignored_at_once() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    // --ttl 1s: without renewals both leases would end within a second.
    let args = ["--limit", "2", "--ttl", "1s"];
    let a = holder(&redis, "lock:renew", &args, &go);
    let b = holder(&redis, "lock:renew", &args, &go);
    std::thread::sleep(Duration::from_millis(2500));
    let third = run(redlock(&redis).args(["-k", "lock:renew", "--limit", "2", "--", "true"]), LIMIT);
    assert_eq!(third.code, 75, "renewed leases still hold both permits: {}", third.stderr);
    std::fs::write(&go, "").unwrap();
    finish(vec![a, b]);

    // A holder that died without releasing (its member stays in the set until its lease ends,
    // and longer if nothing writes): its permit is free as soon as its lease has ended.
    let now_ms: Vec<String> = redis.cmd(&[b"TIME"]);
    let lapsed = now_ms[0].parse::<u64>().unwrap() * 1000 - 1;
    for i in 0..2 {
        let member = format!("0123456789abcdef0123456789abcde{i} deadhost 1 1764460800000 limit=2");
        let _: u64 = redis.cmd(&[b"ZADD", b"lock:lapsed", lapsed.to_string().as_bytes(), member.as_bytes()]);
    }
    let next = run(redlock(&redis).args(["-k", "lock:lapsed", "--limit", "2", "--", "true"]), LIMIT);
    assert_eq!(next.code, 0, "two lapsed holders hold nothing: {}", next.stderr);
}

#[test]
fn a_holder_renews_under_oom_like_an_exclusive_one() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    // The renewal's write under OOM is the subject, seen in the holder's expiry (its score in
    // the set), not its timing: a lease of 6 s, whose renewals have a second each to get an
    // answer (a 3 s one was lost to late renewals on a loaded machine, at three tests at once).
    let mut a = holder(&redis, "lock:oom", &["--limit", "2", "--ttl", "6s"], &go);
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"1"]);
    let expiry =
        || -> Vec<(String, i64)> { redis.cmd(&[b"ZRANGE", b"lock:oom", b"0", b"-1", b"WITHSCORES"]) };
    let before = expiry();
    let mut after = before.clone();
    let renewed = wait_until(Duration::from_secs(15), || {
        after = expiry();
        after.len() == 1 && before.len() == 1 && after[0].1 > before[0].1
    });
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    std::fs::write(&go, "").unwrap();
    let out = wait_output(&mut a, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        renewed,
        "the lease was renewed while Redis was out of memory: {before:?}, then {after:?}: {stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "the holder kept its lease and its command finished: {stderr}");
}

#[test]
fn release_force_drops_one_holder_by_token_prefix_or_all_and_their_commands_stop() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let args = ["--limit", "3", "--ttl", "2s"];
    let mut a = holder(&redis, "lock:drop", &args, &go);
    let b = holder(&redis, "lock:drop", &args, &go);
    let c = holder(&redis, "lock:drop", &args, &go);
    let url = redis.url();
    let status = run(wrapper().args(["status", "--redis-url", &url, "-k", "lock:drop", "--json"]), LIMIT);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    let holder_of = |pid: u32| {
        json["holders"].as_array().unwrap().iter().find(|h| h["pid"] == pid).unwrap()["token_prefix"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let prefix = holder_of(a.id());

    let none = run(
        wrapper().args([
            "release",
            "--force",
            "--redis-url",
            &url,
            "-k",
            "lock:drop",
            "--holder",
            "ffffffffffffffff",
        ]),
        LIMIT,
    );
    assert_eq!(none.code, 1, "{}", none.stderr);
    assert!(String::from_utf8_lossy(&none.stdout).contains("no holder whose token starts with"));
    let bad = run(
        wrapper().args(["release", "--force", "--redis-url", &url, "-k", "lock:drop", "--holder", "xyz"]),
        LIMIT,
    );
    assert_eq!(bad.code, 64, "{}", bad.stderr);

    let one = run(
        wrapper().args(["release", "--force", "--redis-url", &url, "-k", "lock:drop", "--holder", &prefix]),
        LIMIT,
    );
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert!(String::from_utf8_lossy(&one.stdout).contains(&format!("(pid {})", a.id())), "{:?}", one.stdout);
    let a = wait_output(&mut a, LIMIT);
    assert_eq!(
        a.status.code(),
        Some(125),
        "the dropped holder's command is stopped: {}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert_eq!(holders(&redis, "lock:drop"), 2, "the others still hold");

    let all =
        run(wrapper().args(["release", "--force", "--redis-url", &url, "-k", "lock:drop", "--json"]), LIMIT);
    assert_eq!(all.code, 0, "{}", all.stderr);
    let json: serde_json::Value = serde_json::from_slice(&all.stdout).expect("JSON");
    assert_eq!(json["holders"].as_array().unwrap().len(), 2, "{json}");
    for mut c in [b, c] {
        assert_eq!(wait_output(&mut c, LIMIT).status.code(), Some(125));
    }
    assert!(!redis.exists(b"lock:drop") && !redis.exists(b"{lock:drop}:holders"));
}

#[test]
fn a_run_with_the_same_idempotency_key_waits_for_the_holder_running_it() {
    let redis = RedisServer::start();
    let dir = tmp();
    let out = file(&dir, "out");
    let once = ["--limit", "3", "--idempotency-key", "daily"];
    let first = recorder(&redis, "lock:once", &once, "a", "1", &out);
    assert!(wait_until(Duration::from_secs(10), || holders(&redis, "lock:once") == 1));
    let busy = run(redlock(&redis).args(["-k", "lock:once"]).args(once).args(["--", "true"]), LIMIT);
    assert_eq!(busy.code, 75, "{}", busy.stderr);
    assert!(busy.stderr.contains("a run with the same --idempotency-key holds it"), "{}", busy.stderr);
    let mut second = recorder(&redis, "lock:once", &once, "b", "0", &out);
    // A run with another ID takes a free permit beside it.
    let other = run(redlock(&redis).args(["-k", "lock:once", "--limit", "3", "--", "true"]), LIMIT);
    assert_eq!(other.code, 0, "{}", other.stderr);
    let second = wait_output(&mut second, LIMIT);
    finish(vec![first]);
    assert_eq!(second.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already succeeded"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(events(&out).len(), 2, "the command ran once: {:?}", events(&out));
}

#[test]
fn min_hold_keeps_the_permit() {
    let redis = RedisServer::start();
    let a = run(
        redlock(&redis).args(["-k", "lock:hold", "--limit", "2", "--min-hold", "5s", "--", "true"]),
        LIMIT,
    );
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(holders(&redis, "lock:hold"), 1, "the permit is kept after the command ended");
    let b = run(
        redlock(&redis).args(["-k", "lock:hold", "--limit", "2", "--min-hold", "5s", "--", "true"]),
        LIMIT,
    );
    assert_eq!(b.code, 0, "{}", b.stderr);
    let c = run(redlock(&redis).args(["-k", "lock:hold", "--limit", "2", "--", "true"]), LIMIT);
    assert_eq!(c.code, 75, "both permits are kept: {}", c.stderr);
}

#[test]
fn a_sorted_set_not_written_by_redlock_run_is_left_alone() {
    let redis = RedisServer::start();
    let _: u64 = redis.cmd(&[b"ZADD", b"scores", b"1", b"alice"]);
    for kind in [&[][..], &["--shared"][..], &["--limit", "2"][..]] {
        let r = run(redlock(&redis).args(["-k", "scores"]).args(kind).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 65, "{kind:?}: {}", r.stderr);
        assert!(r.stderr.contains("a sorted set not written by redlock-run"), "{}", r.stderr);
    }
    let url = redis.url();
    let r = run(wrapper().args(["release", "--force", "--redis-url", &url, "-k", "scores"]), LIMIT);
    assert_eq!(r.code, 65, "{}", r.stderr);
    let left: Vec<String> = redis.cmd(&[b"ZRANGE", b"scores", b"0", b"-1"]);
    assert_eq!(left, ["alice"]);
}

#[test]
fn a_signalled_or_timed_out_holder_gives_back_only_its_own_permit() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let stay = holder(&redis, "lock:stop", &["--shared"], &go);
    let mut signalled = holder(&redis, "lock:stop", &["--shared"], &go);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(signalled.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_bounded(&mut signalled, LIMIT).code(), Some(143));
    assert_eq!(holders(&redis, "lock:stop"), 1, "its permit went back at once, the other stayed");
    let timed_out = run(
        redlock(&redis).args(["-k", "lock:stop", "--shared", "--max-runtime", "300ms", "--", "sleep", "10"]),
        LIMIT,
    );
    assert_eq!(timed_out.code, 124, "{}", timed_out.stderr);
    assert_eq!(holders(&redis, "lock:stop"), 1);
    std::fs::write(&go, "").unwrap();
    finish(vec![stay]);
    assert_eq!(holders(&redis, "lock:stop"), 0);
}

/// `status` counts the leases, not the sorted set's own TTL (which may outlive them).
#[test]
fn status_reports_the_last_lease_and_a_free_lock_once_every_lease_ended() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let url = redis.url();
    let status = || {
        let s = run(wrapper().args(["status", "--redis-url", &url, "-k", "lock:ttl", "--json"]), LIMIT);
        (s.code, serde_json::from_slice::<serde_json::Value>(&s.stdout).expect("JSON"))
    };
    // A short lease that is held, beside a long one that ended at once (released). Short, but
    // renewed on time on a loaded machine (1 s was not).
    let mut short = holder(&redis, "lock:ttl", &["--limit", "4", "--ttl", "2s"], &go);
    let long =
        run(redlock(&redis).args(["-k", "lock:ttl", "--limit", "4", "--ttl", "30s", "--", "true"]), LIMIT);
    assert_eq!(long.code, 0, "{}", long.stderr);
    let (code, json) = status();
    assert_eq!(code, 0);
    assert!(json["ttl_ms"].as_u64().is_some_and(|ms| ms <= 2000), "the short lease's: {json}");
    // Its holder dies: once its lease has ended (or its guardian released it) the lock is free.
    short.kill().unwrap();
    short.wait().unwrap();
    let (mut code, mut json) = status();
    let freed = wait_until(Duration::from_secs(10), || {
        (code, json) = status();
        code == 1
    });
    assert!(freed, "{json}");
    assert_eq!(json["held"], false);
    assert!(json["ttl_ms"].is_null() && json["expires"].is_null() && json["holder"].is_null(), "{json}");
}

/// A sorted set at the key that redlock-run did not write is "not a lock" for `status`, for
/// every kind of run, and for `release --force`; nothing touches it.
#[test]
fn every_part_agrees_on_a_foreign_sorted_set() {
    let redis = RedisServer::start();
    let url = redis.url();
    let far = "99999999999999";
    let sets: [(&str, &[&str]); 4] = [
        ("past", &["1", "a", "2", "b"]),
        ("exclusive-member", &[far, "0123456789abcdef0123456789abcdef vm 5 123"]),
        ("not-a-number", &[far, "0123456789abcdef0123456789abcdef vm 5 notnum shared"]),
        ("bad-limit", &[far, "0123456789abcdef0123456789abcdef vm 5 123 limit=x"]),
    ];
    for (key, members) in sets {
        let mut zadd: Vec<&[u8]> = vec![b"ZADD", key.as_bytes()];
        zadd.extend(members.iter().map(|m| m.as_bytes()));
        let _: u64 = redis.cmd(&zadd);
        let before: Vec<String> = redis.cmd(&[b"ZRANGE", key.as_bytes(), b"0", b"-1", b"WITHSCORES"]);
        let s = run(wrapper().args(["status", "--redis-url", &url, "-k", key]), LIMIT);
        assert!(
            String::from_utf8_lossy(&s.stdout).contains("holds a zset, not a lock"),
            "{key}: {:?}",
            s.stdout
        );
        assert_eq!(s.code, 0, "{key}: something occupies the key");
        for kind in [&[][..], &["--shared"][..], &["--limit", "2"][..]] {
            let r = run(redlock(&redis).args(["-k", key]).args(kind).args(["--", "true"]), LIMIT);
            assert_eq!(r.code, 65, "{key} {kind:?}: {}", r.stderr);
            assert!(
                r.stderr.contains("a sorted set not written by redlock-run"),
                "{key} {kind:?}: {}",
                r.stderr
            );
        }
        let r = run(wrapper().args(["release", "--force", "--redis-url", &url, "-k", key]), LIMIT);
        assert_eq!(r.code, 65, "{key}: {}", r.stderr);
        let after: Vec<String> = redis.cmd(&[b"ZRANGE", key.as_bytes(), b"0", b"-1", b"WITHSCORES"]);
        assert_eq!(before, after, "{key}: untouched");
    }
}

/// Other data under the names the lock keeps next to the key: named, left alone, and a release
/// still completes.
#[test]
fn foreign_data_next_to_the_key_is_named_and_left_alone() {
    let redis = RedisServer::start();
    for (key, name, kind) in [
        ("q", "{q}:queue", &[][..]),
        ("e", "{e}:queue:expiry", &["--limit", "2"][..]),
        ("h", "{h}:holders", &["--shared"][..]),
    ] {
        redis.cmd::<()>(&[b"SET", name.as_bytes(), b"junk"]);
        let r = run(redlock(&redis).args(["-k", key]).args(kind).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 65, "{name}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("\"{name}\" next to lock \"{key}\" holds a value of type string")),
            "{}",
            r.stderr
        );
        assert_eq!(redis.get(name.as_bytes()).as_deref(), Some(&b"junk"[..]), "{name}: untouched");
        assert!(!redis.exists(key.as_bytes()), "{name}: nothing taken");
    }
    // A holder whose queue's expiry becomes a hash while it holds: its release still deletes
    // the lock and says so.
    let dir = tmp();
    let go = file(&dir, "go");
    let mut h = holder(&redis, "r", &[], &go);
    let _: u64 = redis.cmd(&[b"HSET", b"{r}:queue:expiry", b"a", b"b"]);
    std::fs::write(&go, "").unwrap();
    let o = wait_output(&mut h, LIMIT);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("could not confirm the release"), "{stderr}");
    assert!(!redis.exists(b"r"));
}

#[test]
fn a_waiter_of_another_kind_is_named_as_a_waiter() {
    let redis = RedisServer::start();
    let time: Vec<String> = redis.cmd(&[b"TIME"]);
    let alive = (time[0].parse::<u64>().unwrap() * 1000 + 60_000).to_string();
    let waiter = "0123456789abcdef0123456789abcdef web-9 4242 1764460800000";
    let _: u64 = redis.cmd(&[b"ZADD", b"{w}:queue", b"1", waiter.as_bytes()]);
    let _: u64 = redis.cmd(&[b"ZADD", b"{w}:queue:expiry", alive.as_bytes(), waiter.as_bytes()]);
    let r = run(redlock(&redis).args(["-k", "w", "--limit", "2", "--", "true"]), LIMIT);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("is waited for with an exclusive lock"), "{}", r.stderr);
    assert!(r.stderr.contains("web-9 (pid 4242"), "{}", r.stderr);
}

/// `--limit` and `--shared` from the environment give way to the other flag on the command
/// line; both from the environment are an error that names the variables.
#[test]
fn the_command_line_wins_over_a_kind_from_the_environment() {
    let redis = RedisServer::start();
    let token = |env: (&str, &str), args: &[&str]| {
        run(
            redlock(&redis)
                .args(["-k", "env"])
                .args(args)
                .args(["--", "sh", "-c", "echo $REDLOCK_TOKEN"])
                .env(env.0, env.1),
            LIMIT,
        )
    };
    let r = token(("REDLOCK_LIMIT", "3"), &["--shared"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(String::from_utf8_lossy(&r.stdout).trim_end().ends_with(" shared"), "{:?}", r.stdout);
    let r = token(("REDLOCK_SHARED", "1"), &["--limit", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(String::from_utf8_lossy(&r.stdout).trim_end().ends_with(" limit=2"), "{:?}", r.stdout);
    let r = token(("REDLOCK_SHARED", "1"), &["--limit", "1"]);
    assert_eq!(r.code, 0, "--limit 1 is the exclusive lock: {}", r.stderr);
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim_end().split(' ').count(), 4);
    let r = run(
        redlock(&redis)
            .args(["-k", "env", "--", "true"])
            .env("REDLOCK_SHARED", "1")
            .env("REDLOCK_LIMIT", "3"),
        LIMIT,
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("REDLOCK_SHARED and REDLOCK_LIMIT"), "{}", r.stderr);
    let url = redis.url();
    let r = run(
        wrapper().args(["-k", "env"]).args(quorum(&url)).args(["--", "true"]).env("REDLOCK_SHARED", "1"),
        LIMIT,
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("--shared (from REDLOCK_SHARED) needs one Redis"), "{}", r.stderr);
}
