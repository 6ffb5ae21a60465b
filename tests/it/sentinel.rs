//! Sentinel (docs/GUIDE.md § Redis deployments): ownership counts only on the master the Sentinels
//! name, through a failover; a Sentinel address that is not a Sentinel is a configuration
//! mistake.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::sentinel::{Sentinel, SentinelSet, Setup, Watch};
use crate::support::*;

const SENTINEL_PASSWORD: &str = "sentinel-S3cret";
const MASTER_PASSWORD: &str = "master-S3cret";
const LIMIT_SHORT: Duration = Duration::from_secs(30);

/// Gives every data node of `set` the user `locker` with [`MASTER_PASSWORD`] (ACLs are not
/// replicated), for the wrapper; the Sentinels and the fixtures keep the default user.
fn add_locker(set: &SentinelSet) {
    set.nodes().for_each(add_locker_to);
}

fn add_locker_to(node: &RedisServer) {
    let ok: String = node.cmd(&[
        b"ACL",
        b"SETUSER",
        b"locker",
        b"on",
        format!(">{MASTER_PASSWORD}").as_bytes(),
        b"~*",
        b"&*",
        b"+@all",
    ]);
    assert_eq!(ok, "OK");
}

/// The wrapper's options to reach the master of a set whose Sentinels want
/// [`SENTINEL_PASSWORD`] and whose nodes have `locker`: the Sentinels' password in their URLs
/// (`in_urls`) or in a file, the master's in a file; never the one for the other.
fn secured_args(set: &SentinelSet, dir: &Path, in_urls: bool) -> Vec<String> {
    let (sentinel_file, master_file) = (dir.join("sentinel-password"), dir.join("master-password"));
    std::fs::write(&sentinel_file, format!("{SENTINEL_PASSWORD}\n")).unwrap();
    std::fs::write(&master_file, format!("{MASTER_PASSWORD}\n")).unwrap();
    let mut args = Vec::new();
    for s in &set.sentinels {
        let at = if in_urls { format!("redis://:{SENTINEL_PASSWORD}@{}", s.addr()) } else { s.addr() };
        args.extend(["--sentinel".to_owned(), at]);
    }
    if !in_urls {
        args.extend(["--sentinel-password-file".to_owned(), sentinel_file.display().to_string()]);
    }
    args.extend([
        "--sentinel-master".to_owned(),
        crate::support::sentinel::MASTER_NAME.to_owned(),
        "--redis-url".to_owned(),
        "redis://locker@ignored.invalid:1".to_owned(),
        "--password-file".to_owned(),
        master_file.display().to_string(),
    ]);
    args
}

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

/// Issue 14 item 6, as reported: a holder W1 (`--ttl 6s`); its master is frozen for 2.2 s
/// (longer if the replica is not promoted by then), just as a renewal is due, and the replica
/// is promoted meanwhile; a waiter W2 starts 2.3 s
/// after the old master resumed (by then the key has expired on the replica unless renewed
/// there). `secured`: the Sentinels want a password and the wrappers reach the master as an
/// ACL user with another (W1 with the Sentinels' password in their URLs, W2 from a file).
fn freeze_the_master_under_a_holder(secured: bool) -> Failover {
    let watch = Watch {
        quorum: 2,
        down_after: Duration::from_millis(1000),
        failover_timeout: Duration::from_secs(3),
    };
    let set = if secured {
        let setup = Setup { password: Some(SENTINEL_PASSWORD.to_owned()), ..Setup::default() };
        let set = SentinelSet::start_setup(3, 1, watch, &setup);
        add_locker(&set);
        set
    } else {
        SentinelSet::start(3, watch)
    };
    let dir = tmp();
    let (beats1, beats2) = (file(&dir, "w1"), file(&dir, "w2"));
    let holder = |beats: &Path, count: &str, wait: &str| -> Process {
        let first = beats == beats1.as_path();
        let how = if secured { secured_args(&set, dir.path(), first) } else { set.args() };
        wrapper()
            .args(how)
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
            .start()
    };
    // W1's command runs at least 8 s: well past the point where the key would expire on the
    // promoted replica without renewals there.
    let mut w1 = holder(&beats1, "160", "0");
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
    // On a loaded machine the Sentinels may need longer to promote the replica: the master
    // stays frozen until they have, or the test fails below.
    // The Sentinels end every client's connection as they promote it (CLIENT KILL TYPE
    // normal): a question asked at that instant is not answered, and asked again.
    let promoted = || {
        let info: Result<String, _> = redis::cmd("INFO").arg("replication").query(&mut set.replica.conn());
        info.is_ok_and(|info| info.contains("role:master"))
    };
    wait_until(Duration::from_secs(10), promoted);
    set.master.thaw();
    std::thread::sleep(Duration::from_millis(2300));
    let mut w2 = holder(&beats2, "10", "40s");
    let switched = wait_until(Duration::from_secs(10), || set.switched());
    let (out1, out2) =
        (wait_output(&mut w1, Duration::from_secs(60)), wait_output(&mut w2, Duration::from_secs(60)));
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
    // Each run has its own Sentinel set on its own ports; they run side by side. Two of them
    // with passwords on the Sentinels and an ACL user on the master (issue 21).
    let runs: Vec<Failover> = std::thread::scope(|s| {
        let handles: Vec<_> =
            (0..RUNS).map(|i| s.spawn(move || freeze_the_master_under_a_holder(i >= 3))).collect();
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
        assert!(!r.log.contains("S3cret"), "run {i}: a password was shown\n{}", r.log);
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

/// A lone Sentinel with `requirepass` watching a master that has the user `locker`.
fn secured_sentinel() -> (RedisServer, Sentinel) {
    let redis = RedisServer::start();
    add_locker_to(&redis);
    let setup = Setup { password: Some(SENTINEL_PASSWORD.to_owned()), ..Setup::default() };
    let watch =
        Watch { quorum: 1, down_after: Duration::from_secs(5), failover_timeout: Duration::from_secs(10) };
    let sentinel = Sentinel::start_setup(redis.port, watch, &setup);
    (redis, sentinel)
}

/// Each Sentinel's credentials come from its URL, else from --sentinel-password-file or
/// REDLOCK_SENTINEL_PASSWORD; the master's from --redis-url, --password-file or
/// REDLOCK_PASSWORD — never one for the other. Refused credentials exit 77 with a line saying
/// whose, even with --fail-open; no password is ever shown, nor passed to the command.
#[test]
fn sentinel_credentials_are_their_own_and_refusals_exit_77() {
    let (_redis, sentinel) = secured_sentinel();
    let dir = tmp();
    let write = |name: &str, text: &str| {
        let path = file(&dir, name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        path.display().to_string()
    };
    let (right, wrong, master) = (
        write("right", SENTINEL_PASSWORD),
        write("wrong", "not-the-S3cret"),
        write("master", MASTER_PASSWORD),
    );
    let addr = sentinel.addr();
    let in_url = |password: &str| format!("redis://:{password}@{addr}");
    let marker = file(&dir, "ran");
    // The command reports what it inherited of the passwords.
    let report =
        "printf '%s|%s' \"${REDLOCK_SENTINEL_PASSWORD-unset}\" \"${REDLOCK_PASSWORD-unset}\" > \"$0\"";
    struct Case {
        sentinel: String,
        flags: Vec<String>,
        env: Vec<(&'static str, &'static str)>,
        code: i32,
        says: &'static str,
    }
    let case = |sentinel: String, flags: &[&str], env: &[(&'static str, &'static str)], code, says| Case {
        sentinel,
        flags: flags.iter().map(|f| f.to_string()).collect(),
        env: env.to_vec(),
        code,
        says,
    };
    let master_flags = ["--redis-url", "redis://locker@placeholder.invalid", "--password-file", &master];
    let cases = [
        // The Sentinel's password: in its URL, from the file, from the variable.
        case(in_url(SENTINEL_PASSWORD), &master_flags, &[], 0, ""),
        case(addr.clone(), &[&master_flags[..], &["--sentinel-password-file", &right]].concat(), &[], 0, ""),
        case(addr.clone(), &master_flags, &[("REDLOCK_SENTINEL_PASSWORD", SENTINEL_PASSWORD)], 0, ""),
        // A URL's own password wins over the file's.
        case(
            in_url(SENTINEL_PASSWORD),
            &[&master_flags[..], &["--sentinel-password-file", &wrong]].concat(),
            &[],
            0,
            "",
        ),
        // None: the Sentinel wants one. The master's password is not the Sentinel's.
        case(addr.clone(), &master_flags, &[], 77, "requires a password"),
        case(
            addr.clone(),
            &master_flags,
            &[("REDLOCK_PASSWORD", MASTER_PASSWORD)],
            77,
            "requires a password",
        ),
        // A wrong one, in the URL or in the file.
        case(in_url("not-the-S3cret"), &master_flags, &[], 77, "refused the credentials"),
        case(
            addr.clone(),
            &[&master_flags[..], &["--sentinel-password-file", &wrong]].concat(),
            &[],
            77,
            "refused",
        ),
        // The Sentinels' password is not the master's either: sent as `locker`'s, it would be
        // refused; without one, the master takes the connection as its (open) default user.
        case(
            in_url(SENTINEL_PASSWORD),
            &["--redis-url", "redis://locker@placeholder.invalid"],
            &[("REDLOCK_SENTINEL_PASSWORD", SENTINEL_PASSWORD)],
            0,
            "",
        ),
    ];
    for c in cases {
        let _ = std::fs::remove_file(&marker);
        let mut cmd = wrapper();
        cmd.args(["-vv", "--fail-open", "--sentinel", &c.sentinel, "--sentinel-master", "main"])
            .args(&c.flags)
            .args(["-k", "lock:credentials", "--", "sh", "-c", report])
            .arg(&marker);
        for (k, v) in &c.env {
            cmd.env(k, v);
        }
        let r = run(&mut cmd, Duration::from_secs(30));
        let what = format!("--sentinel {} {:?} {:?}", c.sentinel, c.flags, c.env);
        assert_eq!(r.code, c.code, "{what}: {}", r.stderr);
        assert!(!r.stderr.contains("S3cret"), "{what}: a password was shown: {}", r.stderr);
        if c.code == 0 {
            assert_eq!(std::fs::read_to_string(&marker).unwrap(), "unset|unset", "{what}: inherited");
        } else {
            assert!(r.stderr.contains(c.says), "{what}: says why: {}", r.stderr);
            assert!(!marker.exists(), "{what}: the command ran");
        }
    }
    // Without a Sentinel, the Sentinels' password file is a usage mistake.
    let r = run(wrapper().args(["--sentinel-password-file", &right, "-k", "k", "--", "true"]), LIMIT_SHORT);
    assert_eq!(r.code, 64, "{}", r.stderr);
}

/// A Sentinel reached over TLS with the test CA (`rediss://`), the master over TLS too; TLS
/// that cannot work is a configuration mistake (78), never an outage, even with --fail-open:
/// no CA to verify the Sentinel with, plaintext to its TLS port, TLS to its plaintext port.
#[test]
fn a_tls_sentinel_is_verified_with_the_ca() {
    if !crate::support::tls::server_has_tls() {
        eprintln!("skipped: the server under test has no TLS");
        return;
    }
    let certs = tmp();
    crate::support::tls::make_certs(certs.path());
    let path = |f: &str| certs.path().join(f).display().to_string();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    let master_tls = free_port();
    let args = crate::support::tls::server_args(certs.path(), master_tls, false);
    let redis = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let sentinel_tls = free_port();
    let setup = Setup {
        password: Some(SENTINEL_PASSWORD.to_owned()),
        extra: format!(
            "tls-port {sentinel_tls}\ntls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
             tls-auth-clients no\ntls-replication yes\n"
        ),
    };
    let watch =
        Watch { quorum: 1, down_after: Duration::from_secs(5), failover_timeout: Duration::from_secs(10) };
    // The Sentinel watches the master's TLS port, so that is the address it names.
    let sentinel = Sentinel::start_setup(master_tls, watch, &setup);
    let known = wait_until(Duration::from_secs(10), || {
        let flags: Option<Vec<String>> =
            sentinel.query(redis::cmd("SENTINEL").arg("master").arg(crate::support::sentinel::MASTER_NAME));
        flags.is_some_and(|f| f.windows(2).any(|kv| kv[0] == "flags" && kv[1] == "master"))
    });
    assert!(known, "the Sentinel did not reach the master over TLS:\n{}", sentinel.log());
    let _ = redis;
    let dir = tmp();
    let marker = file(&dir, "ran");
    let tls_url = format!("rediss://:{SENTINEL_PASSWORD}@localhost:{sentinel_tls}");
    let plain_url = format!("redis://:{SENTINEL_PASSWORD}@127.0.0.1:{}", sentinel.port);
    // --fail-open: none of these may run the command. A Sentinel that answers gets 10 s to do
    // so: a TLS handshake that outlived a 1 s timeout on a loaded machine counted as an outage
    // and ran the command. A TLS handshake with a plaintext port stalls until the timeout,
    // which is how that mistake is told (then by a plaintext probe within the same bound).
    let (answers, stalls) = ("10s", "2s");
    let cases: [(&str, String, &[&str], i32, &str); 5] = [
        (
            "verified with the CA",
            tls_url.clone(),
            &["--tls-ca-file", &ca, "--connect-timeout", answers],
            0,
            "",
        ),
        // Each speaks TLS or not on its own: the same Sentinel at its plaintext port.
        (
            "a plaintext Sentinel, a TLS master",
            plain_url.clone(),
            &["--tls-ca-file", &ca, "--connect-timeout", answers],
            0,
            "",
        ),
        ("no CA", tls_url.clone(), &["--connect-timeout", answers], 78, "TLS failed"),
        (
            "plaintext to the TLS port",
            format!("redis://:{SENTINEL_PASSWORD}@127.0.0.1:{sentinel_tls}"),
            &["--tls-ca-file", &ca, "--connect-timeout", answers],
            78,
            "speaks TLS",
        ),
        (
            "TLS to the plaintext port",
            plain_url.replacen("redis://", "rediss://", 1),
            &["--tls-ca-file", &ca, "--connect-timeout", stalls],
            78,
            "does not speak TLS",
        ),
    ];
    for (what, at, flags, code, says) in cases {
        let _ = std::fs::remove_file(&marker);
        let r = run(
            wrapper()
                .args(["--fail-open", "--sentinel", &at, "--sentinel-master", "main"])
                .args(["--redis-url", "rediss://ignored.invalid"])
                .args(flags)
                .args(["-k", "lock:tls", "--", "touch"])
                .arg(&marker),
            LIMIT_SHORT,
        );
        assert_eq!(r.code, code, "{what}: {}", r.stderr);
        assert!(!r.stderr.contains("S3cret"), "{what}: a password was shown: {}", r.stderr);
        assert_eq!(marker.exists(), code == 0, "{what}: ran or not: {}", r.stderr);
        if code != 0 {
            assert!(r.stderr.contains(says), "{what}: says why: {}", r.stderr);
        }
    }
}

/// docs/GUIDE.md § Redis deployments' ACL line for a Sentinel user, as written: with it a run finds the
/// master and follows its switches without a warning; without the channel, the run still works
/// and a warning says that the Sentinel's news of a failover is not heard.
#[test]
fn the_guides_sentinel_acl_user_is_enough() {
    let guide = include_str!("../../docs/GUIDE.md");
    let line = guide
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ACL SETUSER") && l.contains("get-master-addr-by-name"))
        .expect("docs/GUIDE.md § Redis deployments has the Sentinel user's ACL line")
        .replace("PASSWORD", "Pa55-word");
    let (_redis, sentinel) = secured_sentinel();
    let apply = |line: &str| {
        let mut cmd = redis::cmd("ACL");
        for word in line.split_whitespace().skip(1) {
            cmd.arg(word);
        }
        let ok: Option<String> = sentinel.query(&cmd);
        assert_eq!(ok.as_deref(), Some("OK"), "{line}");
    };
    apply(&line);
    apply(&line.replace("locker", "nochannel").replace(" &+switch-master", ""));
    for (user, warned) in [("locker", false), ("nochannel", true)] {
        let r =
            run(
                wrapper()
                    .args(["--sentinel", &format!("redis://{user}:Pa55-word@{}", sentinel.addr())])
                    .args(["--sentinel-master", "main", "-k", "lock:acl", "--", "true"]),
                LIMIT_SHORT,
            );
        assert_eq!(r.code, 0, "{user}: {}", r.stderr);
        assert_eq!(r.stderr.contains("cannot subscribe to +switch-master"), warned, "{user}: {}", r.stderr);
        assert!(!r.stderr.contains("Pa55"), "{}", r.stderr);
    }
}

/// A stale Sentinel, or one of another deployment, listed first does not decide the master:
/// every Sentinel is asked, and the master a majority of them names is the one (issue 21,
/// found by an attacker: the first `--sentinel` always decided, 20 runs of 20). Sentinels that
/// answered and disagree, with no majority, are a failover in progress: retried, never run
/// without the lock.
#[test]
fn the_master_is_the_one_most_sentinels_name() {
    let (ours, other) = (RedisServer::start(), RedisServer::start());
    let (s1, s2, stale) =
        (Sentinel::start(ours.port), Sentinel::start(ours.port), Sentinel::start(other.port));
    let dir = tmp();
    let started = file(&dir, "started");
    let args = |sentinels: &[&Sentinel]| -> Vec<String> {
        let mut args: Vec<String> =
            sentinels.iter().flat_map(|s| ["--sentinel".to_owned(), s.addr()]).collect();
        args.extend(["--sentinel-master".to_owned(), "main".to_owned()]);
        args
    };
    let mut holder = wrapper()
        .args(args(&[&s1]))
        .args(["-k", "lock:majority", "--", "sh", "-c", "touch \"$0\"; sleep 30"])
        .arg(&started)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .start();
    assert!(wait_until(Duration::from_secs(10), || started.exists()), "the holder did not start");
    for order in [[&stale, &s1, &s2], [&s1, &stale, &s2], [&s2, &s1, &stale]] {
        for _ in 0..3 {
            let r = run(
                wrapper().args(args(&order)).args(["--fail-open", "-k", "lock:majority", "--", "true"]),
                LIMIT_SHORT,
            );
            assert_eq!(
                r.code, 75,
                "the lock is held on the master two Sentinels of three name: {}",
                r.stderr
            );
        }
    }
    assert!(!other.exists(b"lock:majority"), "nothing was taken on the other deployment's master");
    // Two Sentinels that disagree: no majority, no guess.
    let marker = file(&dir, "ran");
    let r = run(
        wrapper()
            .args(args(&[&stale, &s1]))
            .args(["--fail-open", "--wait", "1s", "-k", "lock:other", "--", "touch"])
            .arg(&marker),
        LIMIT_SHORT,
    );
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(r.stderr.contains("disagree"), "says why: {}", r.stderr);
    assert!(!marker.exists(), "never without the lock: Redis answered");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// A Sentinel that answers, but not with a master the wrapper can use — it names a replica, or
/// answers with an error — is not an outage: `--fail-open` never runs the command without the
/// lock (found by an attacker: it did, "the node Sentinel names is not a master (yet)").
#[test]
fn a_sentinel_that_answers_is_never_an_outage() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let names_replica: &'static [u8] =
        format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{}\r\n", replica.port.to_string().len(), replica.port)
            .leak()
            .as_bytes();
    let fakes = [
        (NotRedis::start(names_replica), "not a master"),
        (NotRedis::start(b"-ERR something odd\r\n"), "something odd"),
    ];
    let dir = tmp();
    let marker = file(&dir, "ran");
    for (fake, says) in &fakes {
        let r = run(
            wrapper()
                .args(["--sentinel", &format!("127.0.0.1:{}", fake.port), "--sentinel-master", "main"])
                .args(["--fail-open", "--wait", "1s", "-k", "lock:answered", "--", "touch"])
                .arg(&marker),
            LIMIT_SHORT,
        );
        assert_eq!(r.code, 69, "{says}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{says}: {}", r.stderr);
        assert!(!marker.exists(), "{says}: the command ran without the lock");
    }
}

/// Running out of descriptors while asking many Sentinels is a local failure (70), never an
/// outage that `--fail-open` would run the command unlocked for (found by an attacker:
/// `ulimit -n 64` and 55 Sentinels did).
#[test]
fn out_of_descriptors_among_sentinels_never_fails_open() {
    let silent = Silent::start(60);
    let dir = tmp();
    let marker = file(&dir, "ran");
    let mut script = String::from("ulimit -n 64; exec \"$0\" --fail-open --sentinel-master main");
    for port in &silent.ports {
        script.push_str(&format!(" --sentinel 127.0.0.1:{port}"));
    }
    script.push_str(" --connect-timeout 2s --command-timeout 2s -k lock:fds -- touch \"$1\"");
    let r = run(Command::new("sh").args(["-c", &script]).arg(bin()).arg(&marker), LIMIT_SHORT);
    assert!(!marker.exists(), "the command ran without the lock: {}", r.stderr);
    assert_eq!(r.code, 70, "{}", r.stderr);
}

/// Sentinel addresses are taken as given (found by an attacker): a comma inside a
/// `--sentinel` value is part of it (only REDLOCK_SENTINEL is split at commas, and around
/// blanks); a URL with a raw `@` after its host (a password with `#`, `/` or `?` not
/// percent-encoded) is refused, naming no part of the password, instead of connecting to a
/// host made of the password's first half; the same Sentinel twice is a usage mistake.
#[test]
fn sentinel_addresses_are_taken_as_given() {
    let redis = RedisServer::start();
    let setup = Setup { password: Some("pass,word".to_owned()), ..Setup::default() };
    let watch =
        Watch { quorum: 1, down_after: Duration::from_secs(5), failover_timeout: Duration::from_secs(10) };
    let (s1, s2) =
        (Sentinel::start_setup(redis.port, watch, &setup), Sentinel::start_setup(redis.port, watch, &setup));
    let dir = tmp();
    let marker = file(&dir, "ran");
    let attempt = |args: &[String], env: &[(&str, String)]| {
        let _ = std::fs::remove_file(&marker);
        let mut cmd = wrapper();
        cmd.args(args).args(["--sentinel-master", "main", "--fail-open", "-k", "lock:given", "--", "touch"]);
        cmd.arg(&marker);
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(&mut cmd, LIMIT_SHORT)
    };
    let with_password = |s: &Sentinel| format!("redis://:pass,word@{}", s.addr());
    let r = attempt(&["--sentinel".into(), with_password(&s1)], &[]);
    assert_eq!(r.code, 0, "a comma in a --sentinel value: {}", r.stderr);
    let both = format!("{} , {}", s1.addr(), s2.addr());
    let r = attempt(&[], &[("REDLOCK_SENTINEL", both), ("REDLOCK_SENTINEL_PASSWORD", "pass,word".into())]);
    assert_eq!(r.code, 0, "REDLOCK_SENTINEL split at commas, blanks trimmed: {}", r.stderr);
    assert!(marker.exists());
    for flag in ["--sentinel", "--redis-url"] {
        let raw = format!("redis://:S3c@ret#x@127.0.0.1:{}", s1.port);
        let mut args = vec![flag.to_owned(), raw];
        if flag == "--redis-url" {
            args.extend(["--sentinel".to_owned(), with_password(&s1)]);
        }
        let r = attempt(&args, &[]);
        assert_eq!(r.code, 78, "{flag} with a raw `#` in the password: {}", r.stderr);
        assert!(r.stderr.contains("percent-encode"), "says how: {}", r.stderr);
        assert!(!r.stderr.contains("S3c") && !r.stderr.contains("ret"), "{}", r.stderr);
        assert!(!marker.exists(), "the command ran without the lock");
    }
    let r = attempt(&["--sentinel".into(), s1.addr(), "--sentinel".into(), s1.addr()], &[]);
    assert_eq!(r.code, 64, "the same Sentinel twice: {}", r.stderr);
}

/// docs/GUIDE.md § Redis deployments: when another Sentinel names the master, a mistaken one
/// does not fail the run: it goes on, with a warning naming the Sentinel that got it wrong.
#[test]
fn a_mistaken_sentinel_beside_a_good_one_is_warned_about() {
    let redis = RedisServer::start();
    let (good, plain) = (Sentinel::start(redis.port), RedisServer::start());
    for order in [[plain.url(), good.addr()], [good.addr(), plain.url()]] {
        let r = run(
            wrapper()
                .args(["--sentinel", &order[0], "--sentinel", &order[1], "--sentinel-master", "main"])
                .args(["-k", "lock:mixed", "--", "true"]),
            LIMIT_SHORT,
        );
        assert_eq!(r.code, 0, "{order:?}: {}", r.stderr);
        assert!(r.stderr.contains("is not a Sentinel"), "{order:?}: warned: {}", r.stderr);
    }
}

/// On `+switch-master` the renewal in flight on the old master (frozen here, so it would wait
/// out the command timeout, 24 s) is dropped, and the lock is confirmed on the new master at
/// once; a new master that never got the key (asynchronous replication lost it) is a loss
/// noticed then, not at the next renewal nor at the deadline.
#[test]
fn a_new_master_without_the_key_is_a_loss_noticed_at_the_switch() {
    let watch = Watch {
        quorum: 2,
        down_after: Duration::from_millis(1000),
        failover_timeout: Duration::from_secs(3),
    };
    let set = SentinelSet::start(3, watch);
    let dir = tmp();
    let held = file(&dir, "held");
    let mut holder = wrapper()
        .args(set.args())
        .args(["-vv", "-k", "lock:switch", "--renew-every", "300ms", "--", "sh", "-c"])
        .arg("touch \"$HELD\"; exec sleep 60")
        .env("HELD", &held)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .start();
    // Held: its command runs (the key replicated is not enough; the wrapper may still wait for
    // the reply on a loaded machine, and then find the master frozen).
    assert!(wait_until(Duration::from_secs(10), || held.exists()), "the command runs");
    assert!(wait_until(Duration::from_secs(10), || set.replica.exists(b"lock:switch")), "replicated");
    set.replica.cmd::<()>(&[b"CONFIG", b"SET", b"replica-read-only", b"no"]);
    set.replica.cmd::<()>(&[b"DEL", b"lock:switch"]);
    set.master.freeze();
    let switched = wait_until(Duration::from_secs(15), || set.switched());
    let at = Instant::now();
    let out = wait_output(&mut holder, LIMIT_SHORT);
    let took = at.elapsed();
    set.master.thaw();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(switched, "the Sentinels did not fail over: {stderr}");
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    // At the switch: not after the renewal in flight (24 s) nor at the deadline (30 s); room
    // for a loaded machine.
    assert!(took < Duration::from_secs(5), "lost {took:?} after the switch: {stderr}");
    assert!(stderr.contains("revealed_by=renewal"), "{stderr}");
}
