//! Beyond one plaintext Redis (docs/GUIDE.md § Redis deployments): TLS, credentials, Unix sockets,
//! Sentinel and Cluster — all on loopback, every server started by the test.

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::sentinel::Sentinel;
use crate::support::tls::make_certs;
use crate::support::*;

const LIMIT: Duration = Duration::from_secs(60);

struct TlsRedis {
    server: RedisServer,
    tls_port: u16,
    certs: tempfile::TempDir,
}

fn tls_redis(client_auth: bool) -> TlsRedis {
    let certs = tmp();
    make_certs(certs.path());
    let tls_port = free_port();
    // The plaintext port stays open for the fixture's readiness check.
    let mut args = crate::support::tls::server_args(certs.path(), tls_port, client_auth);
    args.extend(["--bind", "127.0.0.1", "127.0.0.2"].map(String::from));
    let server = RedisServer::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>());
    TlsRedis { server, tls_port, certs }
}

/// Without --tls-ca-file the system's CA certificates are loaded; when they cannot be (an
/// SSL_CERT_FILE that is missing or empty), that is a configuration error on this host (78),
/// never an unreachable Redis that `--fail-open` would run the command unlocked for (found by
/// an attacker: it did). With the bundle named, the same run verifies and takes the lock.
#[test]
fn system_ca_certificates_that_cannot_be_loaded_are_a_configuration_error() {
    if !crate::support::tls::server_has_tls() {
        eprintln!("skipped: the server under test has no TLS");
        return;
    }
    let t = tls_redis(false);
    let dir = tmp();
    let marker = file(&dir, "ran");
    let url = format!("rediss://127.0.0.1:{}", t.tls_port);
    for bundle in ["/nonexistent/ca-bundle.crt", ""] {
        let r = run(
            wrapper()
                .env("SSL_CERT_FILE", bundle)
                .args(["--fail-open", "-k", "lock:tls", "--redis-url", &url, "--", "touch"])
                .arg(&marker),
            LIMIT,
        );
        assert_eq!(r.code, 78, "SSL_CERT_FILE={bundle:?}: {}", r.stderr);
        assert!(r.stderr.contains("CA certificates"), "says why: {}", r.stderr);
        assert!(!marker.exists(), "the command ran without the lock");
    }
    let r = run(
        wrapper().env("SSL_CERT_FILE", t.certs.path().join("ca.crt")).args([
            "-k",
            "lock:tls",
            "--redis-url",
            &url,
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "the system's bundle, named by SSL_CERT_FILE: {}", r.stderr);
}

#[test]
fn tls_works_with_the_ca_and_fails_fast_otherwise() {
    if !crate::support::tls::server_has_tls() {
        eprintln!("skipped: the server under test has no TLS");
        return;
    }
    let t = tls_redis(false);
    let ca = t.certs.path().join("ca.crt");
    let url = |host: &str| format!("rediss://{host}:{}", t.tls_port);
    let ok = run(
        wrapper()
            .args(["-k", "lock:tls", "--redis-url", &url("127.0.0.1"), "--tls-ca-file"])
            .arg(&ca)
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let by_name = run(
        wrapper()
            .args(["-k", "lock:tls", "--redis-url", &url("localhost"), "--tls-ca-file"])
            .arg(&ca)
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(by_name.code, 0, "{}", by_name.stderr);

    let wrong_ca = run(
        wrapper()
            .args(["-k", "lock:tls", "--redis-url", &url("127.0.0.1"), "--tls-ca-file"])
            .arg(t.certs.path().join("other-ca.crt"))
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(wrong_ca.code, 78, "{}", wrong_ca.stderr);
    assert!(wrong_ca.stderr.contains("TLS"), "{}", wrong_ca.stderr);
    assert!(wrong_ca.elapsed < Duration::from_secs(3), "fails fast: {:?}", wrong_ca.elapsed);

    // 127.0.0.2 is not in the certificate.
    let wrong_host = run(
        wrapper()
            .args(["-k", "lock:tls", "--redis-url", &url("127.0.0.2"), "--tls-ca-file"])
            .arg(&ca)
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(wrong_host.code, 78, "{}", wrong_host.stderr);
    let insecure = run(
        wrapper().args(["-k", "lock:tls", "--redis-url", &url("127.0.0.2"), "--tls-insecure", "--", "true"]),
        LIMIT,
    );
    assert_eq!(insecure.code, 0, "{}", insecure.stderr);
    assert!(insecure.stderr.contains("NOT verified"), "--tls-insecure warns: {}", insecure.stderr);

    let with_password = run(
        wrapper().args([
            "-k",
            "lock:tls",
            "--redis-url",
            &format!("redis://:pw@127.0.0.1:{}", t.tls_port),
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(with_password.code, 78, "detected even when AUTH comes first: {}", with_password.stderr);
    let plain_to_tls = run(
        wrapper().args([
            "-k",
            "lock:tls",
            "--redis-url",
            &format!("redis://127.0.0.1:{}", t.tls_port),
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(plain_to_tls.code, 78, "{}", plain_to_tls.stderr);
    assert!(plain_to_tls.stderr.contains("rediss://"), "{}", plain_to_tls.stderr);
    assert!(plain_to_tls.elapsed < Duration::from_secs(3), "{:?}", plain_to_tls.elapsed);

    let tls_to_plain = run(
        wrapper()
            .args([
                "-k",
                "lock:tls",
                "--ttl",
                "3s",
                "--redis-url",
                &format!("rediss://127.0.0.1:{}", t.server.port),
                "--tls-ca-file",
            ])
            .arg(&ca)
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(tls_to_plain.code, 78, "{}", tls_to_plain.stderr);
    assert!(tls_to_plain.stderr.contains("redis://"), "{}", tls_to_plain.stderr);
    assert!(
        tls_to_plain.elapsed < Duration::from_secs(5),
        "bounded by the connect timeout: {:?}",
        tls_to_plain.elapsed
    );

    let no_tls_url = run(
        wrapper()
            .args(["-k", "lock:tls", "--redis-url", &t.server.url(), "--tls-ca-file"])
            .arg(&ca)
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(no_tls_url.code, 64, "TLS files need rediss://: {}", no_tls_url.stderr);
    assert!(
        no_tls_url.stderr.contains("--tls-ca-file is for TLS, but the Redis URL (--redis-url) is redis://")
    );
    // --tls-insecure too, which has no file to tell it by, and from the environment.
    let insecure = run(
        wrapper().env("REDLOCK_TLS_INSECURE", "1").args([
            "-k",
            "lock:tls",
            "--redis-url",
            &t.server.url(),
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(insecure.code, 64, "{}", insecure.stderr);
    assert!(insecure.stderr.contains("REDLOCK_TLS_INSECURE is for TLS"), "{}", insecure.stderr);
    let missing = run(
        wrapper().args([
            "-k",
            "lock:tls",
            "--redis-url",
            &url("127.0.0.1"),
            "--tls-ca-file",
            "/nonexistent/ca.crt",
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(missing.code, 78, "{}", missing.stderr);
    assert!(missing.stderr.contains("--tls-ca-file"), "{}", missing.stderr);
}

#[test]
fn mutual_tls_with_a_client_certificate() {
    if !crate::support::tls::server_has_tls() {
        eprintln!("skipped: the server under test has no TLS");
        return;
    }
    let t = tls_redis(true);
    let p = |f: &str| t.certs.path().join(f);
    let url = format!("rediss://localhost:{}", t.tls_port);
    let with_cert = run(
        wrapper()
            .args(["-k", "lock:mtls", "--redis-url", &url, "--tls-ca-file"])
            .arg(p("ca.crt"))
            .arg("--tls-cert-file")
            .arg(p("client.crt"))
            .arg("--tls-key-file")
            .arg(p("client.key"))
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(with_cert.code, 0, "{}", with_cert.stderr);
    let without = run(
        wrapper()
            .args(["-k", "lock:mtls", "--redis-url", &url, "--tls-ca-file"])
            .arg(p("ca.crt"))
            .args(["--", "true"]),
        LIMIT,
    );
    assert_ne!(without.code, 0, "the server requires a client certificate");
    assert!([69, 78].contains(&without.code), "{}", without.stderr);
}

#[test]
fn the_password_comes_from_the_url_the_environment_or_a_file() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"ACL", b"SETUSER", b"app", b"on", b">S3cr3t-pw", b"~*", b"&*", b"+@all"]);
    let dir = tmp();
    let pwfile = file(&dir, "pw");
    std::fs::write(&pwfile, "S3cr3t-pw\n").unwrap();
    let user_url = format!("redis://app@127.0.0.1:{}", redis.port);
    for (how, mut cmd) in [
        ("url", {
            let mut c = wrapper();
            c.args(["--redis-url", &format!("redis://app:S3cr3t-pw@127.0.0.1:{}", redis.port)]);
            c
        }),
        ("env", {
            let mut c = wrapper();
            c.args(["--redis-url", &user_url]).env("REDLOCK_PASSWORD", "S3cr3t-pw");
            c
        }),
        ("file", {
            let mut c = wrapper();
            c.args(["--redis-url", &user_url, "--password-file"]).arg(&pwfile);
            c
        }),
    ] {
        let r = run(cmd.args(["-k", "lock:pw", "--", "env"]), LIMIT);
        assert_eq!(r.code, 0, "{how}: {}", r.stderr);
        assert!(
            !String::from_utf8_lossy(&r.stdout).contains("S3cr3t-pw"),
            "{how}: the command's environment is clean"
        );
    }
    let tries = || redis.calls("auth") + redis.calls("hello");
    let before = tries();
    let wrong = run(
        wrapper()
            .args(["--redis-url", &user_url, "-k", "lock:pw", "--", "true"])
            .env("REDLOCK_PASSWORD", "nope"),
        LIMIT,
    );
    assert_eq!(wrong.code, 77, "{}", wrong.stderr);
    // At once: a denial is not retried like an outage (counted, not timed).
    assert_eq!(tries() - before, 1, "the password was tried once: {}", wrong.stderr);
    let empty = tmp();
    let empty_file = file(&empty, "pw");
    std::fs::write(&empty_file, "").unwrap();
    let r = run(
        wrapper()
            .args(["--redis-url", &user_url, "-k", "lock:pw", "--password-file"])
            .arg(&empty_file)
            .args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(r.code, 78, "{}", r.stderr);
}

#[test]
fn a_unix_socket_works() {
    let dir = tmp();
    let socket = dir.path().join("redis.sock");
    let socket_arg = socket.display().to_string();
    let redis = RedisServer::start_with(&["--unixsocket", &socket_arg, "--unixsocketperm", "700"]);
    let url = format!("unix://{socket_arg}");
    let r = run(
        wrapper().args(["-k", "lock:unix", "--redis-url", &url, "--", "sh", "-c", "echo $REDLOCK_FENCE"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(String::from_utf8_lossy(&r.stdout).trim().parse::<u64>().is_ok());
    let waiter =
        run(wrapper().args(["-k", "lock:unix", "--wait", "2s", "--redis-url", &url, "--", "true"]), LIMIT);
    assert_eq!(waiter.code, 0, "{}", waiter.stderr);
    assert!(!redis.exists(b"lock:unix"));
}

#[test]
fn sentinel_finds_the_master_and_follows_a_failover() {
    let mut master = RedisServer::start_with(SYNC_AT_ONCE);
    let replica_of = master.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &replica_of]);
    let sentinel = Sentinel::start(master.port);
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .cmd::<String>(&[b"INFO", b"replication"])
            .contains("master_link_status:up")),
        "replica in sync"
    );
    let via_sentinel = |cmd: &mut Command| {
        cmd.args(["--sentinel", &format!("127.0.0.1:{}", sentinel.port), "--sentinel-master", "main"]);
    };
    let mut first = wrapper();
    via_sentinel(&mut first);
    let r = run(first.args(["-k", "lock:sentinel", "--", "true"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);

    // Kill the master mid-run: the wrapper either renews on the promoted replica or stops the
    // command (125) — never runs on past its deadline.
    let dir = tmp();
    let done = file(&dir, "done");
    let mut during = wrapper();
    via_sentinel(&mut during);
    let mut running = during
        .args([
            "-k",
            "lock:sentinel",
            "--ttl",
            "10s",
            "--renew-every",
            "1s",
            "--kill-grace",
            "1s",
            "--",
            "sh",
            "-c",
        ])
        .arg("sleep 6; touch \"$1\"")
        .arg("sh")
        .arg(&done)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || replica.exists(b"lock:sentinel")), "the lock replicated");
    master.stop();
    let out = wait_output(&mut running, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => assert!(done.exists(), "renewed on the new master and ran to the end: {stderr}"),
        Some(125) => assert!(!done.exists(), "stopped before the end: {stderr}"),
        other => panic!("unexpected status {other:?}: {stderr}"),
    }
    assert_eq!(sentinel.master_port(), Some(replica.port), "the replica was promoted");

    let mut after = wrapper();
    via_sentinel(&mut after);
    let r = run(after.args(["-k", "lock:sentinel-after", "--", "true"]), LIMIT);
    assert_eq!(r.code, 0, "a new run works against the new master: {}", r.stderr);

    let mut unknown = wrapper();
    unknown.args(["--sentinel", &format!("127.0.0.1:{}", sentinel.port), "--sentinel-master", "nosuch"]);
    let r = run(unknown.args(["-k", "lock:x", "--", "true"]), LIMIT);
    assert_eq!(r.code, 78, "no Sentinel knows that master: {}", r.stderr);
}

struct Cluster {
    nodes: Vec<RedisServer>,
}

/// The tests that each take a [`Cluster`] of their own.
const CLUSTER_TESTS: usize = 9;

/// Clusters made ahead, all at once, by the first test that wants one: a node accepts writes
/// only 2 s after it started (Redis waits that long before a master's cluster state can turn
/// ok), and one cluster made per test spent those 2 s five times over, one after the other.
/// Each test still takes a cluster of its own, which it stops when it drops it; what no test
/// took (a filtered run) is stopped when the test process exits.
static MADE_AHEAD: Mutex<Option<Vec<Cluster>>> = Mutex::new(None);

/// Stops the clusters no test took; runs at the test process's exit.
extern "C" fn stop_clusters_made_ahead() {
    if let Ok(mut made) = MADE_AHEAD.try_lock() {
        made.take();
    }
}

impl Cluster {
    /// A cluster of its own for the calling test.
    fn start() -> Self {
        let mut made = lock(&MADE_AHEAD);
        let ahead = made.get_or_insert_with(|| {
            // SAFETY: registers a function that takes no arguments, to run at exit.
            assert_eq!(unsafe { libc::atexit(stop_clusters_made_ahead) }, 0, "atexit");
            std::thread::scope(|s| {
                let making: Vec<_> = (0..CLUSTER_TESTS).map(|_| s.spawn(Cluster::make)).collect();
                making
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                    .collect()
            })
        });
        ahead.pop().unwrap_or_else(Cluster::make)
    }

    /// Three masters on their own ports, the slots split between them, ready for writes.
    fn make() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "{dir}/nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new(cli_binary())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli (apt install redis-tools)");
        assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
        let ok = wait_until(Duration::from_secs(15), || {
            nodes.iter().all(|n| n.cmd::<String>(&[b"CLUSTER", b"INFO"]).contains("cluster_state:ok"))
        });
        assert!(ok, "cluster did not become ok");
        Cluster { nodes }
    }

    fn seed(&self) -> String {
        self.nodes[0].url()
    }

    /// The node that serves `key`'s slot, from CLUSTER NODES.
    fn node_for(&self, key: &[u8]) -> &RedisServer {
        let slot: i64 = self.nodes[0].cmd(&[b"CLUSTER", b"KEYSLOT", key]);
        let nodes: String = self.nodes[0].cmd(&[b"CLUSTER", b"NODES"]);
        let line = nodes
            .lines()
            .find(|l| {
                l.split_whitespace().skip(8).any(|range| match range.split_once('-') {
                    Some((a, b)) => (a.parse::<i64>().unwrap()..=b.parse::<i64>().unwrap()).contains(&slot),
                    None => range.parse::<i64>() == Ok(slot),
                })
            })
            .expect("a node owns the slot");
        let addr = line.split_whitespace().nth(1).unwrap();
        let port: u16 = addr.split(['@', ':']).nth(1).unwrap().parse().unwrap();
        self.nodes.iter().find(|n| n.port == port).expect("one of ours")
    }
}

#[test]
fn cluster_follows_slots_and_keeps_derived_keys_together_and_takes_several_slots_in_order() {
    let cluster = Cluster::start();
    let in_cluster = |cmd: &mut Command| {
        cmd.args(["--cluster", "--redis-url", &cluster.seed()]);
    };
    for key in ["lock:plain", "lock:{job}:daily", "odd}key{", "x"] {
        let mut fences = Vec::new();
        for _ in 0..2 {
            let mut c = wrapper();
            in_cluster(&mut c);
            let r = run(
                c.args(["-k", key, "--idempotency-key", "once", "--", "sh", "-c", "echo $REDLOCK_FENCE"]),
                LIMIT,
            );
            assert_eq!(r.code, 0, "{key}: {}", r.stderr);
            fences.extend(String::from_utf8_lossy(&r.stdout).trim().parse::<u64>().ok());
        }
        assert_eq!(fences.len(), 1, "{key}: the second run was skipped by its idempotency record");
        let mut c = wrapper();
        in_cluster(&mut c);
        let r = run(c.args(["-k", key, "--", "sh", "-c", "echo $REDLOCK_FENCE"]), LIMIT);
        assert_eq!(r.code, 0, "{key}: {}", r.stderr);
        let next: u64 = String::from_utf8_lossy(&r.stdout).trim().parse().unwrap();
        assert!(next > fences[0], "{key}: fence increases");
        let mut status = Command::new(bin());
        status.args(["status", "--key", key, "--json"]);
        in_cluster(&mut status);
        let s = run(&mut status, LIMIT);
        assert_eq!(s.code, 1, "{key}: free: {}", s.stderr);
        let v: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
        assert_eq!(v["fence"].as_u64(), Some(next));
        assert_eq!(v["idempotency_records"][0]["id"], "once", "{key}: {v}");
    }

    // A waiter on another node is woken by the release announced on the key's node. The holder
    // holds until the waiter waits (a fixed hold and delay raced a loaded machine's start).
    let dir = tmp();
    let go = file(&dir, "go");
    let mut holder = {
        let mut c = wrapper();
        in_cluster(&mut c);
        c.args(["-k", "lock:handoff", "--", "sh", "-c", HOLD_UNTIL_GO]).env("GO", &go).start()
    };
    let node = cluster.node_for(b"lock:handoff");
    assert!(wait_until(Duration::from_secs(10), || node.exists(b"lock:handoff")), "the holder took it");
    // The waiter's first seed is down: it subscribes through the next one.
    let mut waiter = wrapper();
    waiter.args(["--cluster", "--redis-url", &format!("redis://127.0.0.1:{}", free_port())]);
    waiter.args(["--redis-url", &cluster.nodes[2].url()]);
    let mut waiter =
        waiter.args(["-k", "lock:handoff", "--wait", "10s", "--", "true"]).stderr(Stdio::piped()).start();
    let queued = || node.cmd::<u64>(&[b"ZCARD", b"{lock:handoff}:queue"]) == 1;
    assert!(wait_until(Duration::from_secs(10), queued), "the waiter queued");
    let released = Instant::now();
    std::fs::write(&go, "").unwrap();
    assert!(wait_output(&mut holder, LIMIT).status.success());
    let out = wait_output(&mut waiter, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Soon after the release, not at the end of its 10 s wait; room for a loaded machine.
    assert!(released.elapsed() < Duration::from_secs(5), "woken by the release: {:?}", released.elapsed());

    // Several keys in different slots are taken slot after slot in one fixed order; a busy key
    // in the middle gives back what was taken before it. "a", "b" and "c" hash to three
    // different slots; sorted, "b" is in the middle.
    let exists = |key: &str| cluster.node_for(key.as_bytes()).exists(key.as_bytes());
    let several = |keys: &[&str]| {
        let mut c = wrapper();
        in_cluster(&mut c);
        for k in keys {
            c.args(["--key", k]);
        }
        c
    };
    let mut holder = several(&["b"]).args(["--", "sleep", "3"]).stderr(Stdio::piped()).start();
    assert!(wait_until(Duration::from_secs(10), || exists("b")));
    let r = run(several(&["c", "b", "a"]).args(["--", "true"]), LIMIT);
    assert_eq!(r.code, 75, "{}", r.stderr);
    assert!(r.stderr.contains("lock \"b\" is busy"), "{}", r.stderr);
    assert!(!exists("a") && !exists("c"), "nothing left held");
    // Waiting: the run retries the whole set and gets it once b is free.
    let r = run(
        several(&["c", "b", "a"]).args(["--wait", "20s", "-v", "--", "sh", "-c", "echo $REDLOCK_FENCES"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Without a queue, runs queued for one of the keys go first: -v says so.
    assert!(
        r.stderr.contains("waiting without a place in a queue (keys in several Cluster slots"),
        "{}",
        r.stderr
    );
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim().split(' ').count(), 3);
    assert!(wait_bounded(&mut holder, LIMIT).success());
    assert!(!exists("a") && !exists("b") && !exists("c"), "all released");
}

/// A release hands the lock over only to a waiter listening on the node that holds the key's
/// slot (a message published there reaches every node, but only that node can tell whether
/// someone received it): waiters that subscribed through a seed holding another slot are
/// woken instead and take the lock themselves. Either way they run in order, each with the
/// lock.
#[test]
fn cluster_hands_the_lock_over_only_to_a_waiter_listening_on_the_key_s_node() {
    let cluster = Cluster::start();
    let seed = cluster.nodes[0].port;
    let key_on_seed = |on_seed: bool| {
        (0..)
            .map(|i| format!("lock:hand:{i}"))
            .find(|k| (cluster.node_for(k.as_bytes()).port == seed) == on_seed)
            .expect("a key")
    };
    let dir = tmp();
    for (key, handed) in [(key_on_seed(true), true), (key_on_seed(false), false)] {
        let node = cluster.node_for(key.as_bytes());
        let out = file(&dir, &key);
        let in_cluster = |cmd: &mut Command| {
            cmd.args(["--cluster", "--redis-url", &cluster.seed(), "-k", &key]);
        };
        // Held until all three wait (a fixed hold ran out while a loaded machine started them).
        let go = file(&dir, &format!("{key}.go"));
        let mut holder = wrapper();
        in_cluster(&mut holder);
        let mut holder =
            holder.args(["--", "sh", "-c", HOLD_UNTIL_GO]).env("GO", &go).stderr(Stdio::null()).start();
        assert!(wait_until(Duration::from_secs(10), || node.exists(key.as_bytes())), "{key}: held");
        let queue = format!("{{{key}}}:queue");
        let waiters: Vec<_> = (1..=3)
            .map(|i| {
                let mut w = wrapper();
                in_cluster(&mut w);
                let w = w
                    .args(["--wait", "20s", "-v", "--", "sh", "-c", "echo $I >> \"$OUT\"; sleep 0.2"])
                    .env("I", i.to_string())
                    .env("OUT", &out)
                    .stderr(Stdio::piped())
                    .start();
                let queued = || node.cmd::<u64>(&[b"ZCARD", queue.as_bytes()]) == i;
                assert!(wait_until(Duration::from_secs(10), queued), "{key}: waiter {i} queued");
                // And listening, through the seed: queued first, a waiter subscribes just after,
                // and a release before that cannot hand it the lock.
                let grants = format!("{{{key}}}:wake:*:grant");
                let listening = || {
                    let channels: Vec<Vec<u8>> =
                        cluster.nodes[0].cmd(&[b"PUBSUB", b"CHANNELS", grants.as_bytes()]);
                    channels.len() == i as usize
                };
                assert!(wait_until(Duration::from_secs(10), listening), "{key}: waiter {i} listening");
                w
            })
            .collect();
        std::fs::write(&go, "").unwrap();
        assert!(wait_bounded(&mut holder, LIMIT).success());
        for mut w in waiters {
            let o = wait_output(&mut w, LIMIT);
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{key}: {stderr}");
            assert_eq!(stderr.contains("handed_over=true"), handed, "{key}: {stderr}");
        }
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "1\n2\n3\n", "{key}: in order");
    }
}

#[test]
fn cluster_renewal_survives_a_slot_migration() {
    let cluster = Cluster::start();
    let key = b"lock:migrating";
    let from = cluster.node_for(key);
    let mut c = wrapper();
    let mut wrapper = c
        .args([
            "--cluster",
            "--redis-url",
            &cluster.seed(),
            "-k",
            "lock:migrating",
            "--ttl",
            "3s",
            "--",
            "sleep",
            "4",
        ])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || from.exists(key)));
    std::thread::sleep(Duration::from_millis(300));

    // Move the key's slot (with the lock and its fence counter) to another node.
    let moving = Migration::of(&cluster, key);
    moving.complete(&cluster);
    let to = moving.to;
    assert!(to.exists(key), "the lock moved with its slot");

    let out = wait_output(&mut wrapper, LIMIT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "renewal followed MOVED: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!to.exists(key), "released on the new node");
}

/// A Cluster holder tracks its key on the master of its slot: a slot moving there is checked and
/// no loss, and once it has moved the key deleted on the new master is heard at once (not at the
/// next renewal, 10 s away).
#[test]
fn cluster_holder_hears_a_loss_at_once_and_follows_its_slot() {
    let cluster = Cluster::start();
    let key = b"lock:watched";
    let from = cluster.node_for(key);
    let mut wrapper = wrapper()
        .args(["--cluster", "--redis-url", &cluster.seed(), "-vv", "-k", "lock:watched", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .start();
    // Watched once its first check has read the key on its tracking link, on one node and then
    // the other (a fixed 300 ms was not always enough on a loaded machine).
    let watched = |node: &RedisServer| wait_until(Duration::from_secs(10), || node.tracking_items() > 0);
    assert!(wait_until(Duration::from_secs(5), || from.exists(key)));
    assert!(watched(from), "watched on the first master");
    let moving = Migration::of(&cluster, key);
    moving.complete(&cluster);
    let to = moving.to;
    assert!(to.exists(key), "the lock moved with its slot");
    assert!(watched(to), "watched on the new master");
    let deleted = Instant::now();
    to.cmd::<()>(&[b"DEL", key]);
    let out = wait_output(&mut wrapper, LIMIT);
    let took = deleted.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("checked: the lock is still this run's notice=invalidation"),
        "the move was checked, and no loss: {stderr}"
    );
    assert!(stderr.contains("revealed_by=invalidation"), "{stderr}");
    // The log says the watch heard it; the bound, that it was long before the next renewal
    // (10 s), with room for a loaded machine.
    assert!(took < Duration::from_secs(3), "heard at once on the new master: {took:?}");
}

/// Half-way through a slot migration the lock key has moved to the importing node and its
/// fence counter has not: every node answers TRYAGAIN. The wrapper retries within its wait and
/// acquires once the migration completes; without that it fails closed saying TRYAGAIN, and so
/// does `status`, without waiting for a request timeout.
#[test]
fn cluster_tryagain_during_a_slot_migration_is_retried_then_reported() {
    let cluster = Cluster::start();
    let key = b"lock:tryagain";
    let in_cluster = |cmd: &mut Command| {
        cmd.args(["--cluster", "--redis-url", &cluster.seed(), "-k", "lock:tryagain"]);
    };
    let mut first = wrapper();
    in_cluster(&mut first);
    assert_eq!(run(first.args(["--", "true"]), LIMIT).code, 0, "the fence counter exists");
    // Half-way: a stale lock (someone else's, expiring) moves; its fence counter stays behind.
    cluster.node_for(key).cmd::<()>(&[b"SET", key, b"someone-else", b"PX", b"1500"]);
    let moving = Migration::of(&cluster, key);
    moving.move_only(key);

    let mut stuck = wrapper();
    in_cluster(&mut stuck);
    let r = run(stuck.args(["--wait", "0", "--", "true"]), LIMIT);
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(r.stderr.contains("TRYAGAIN"), "says what the server said: {}", r.stderr);
    assert!(!r.stderr.contains("timed out"), "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(4), "no request timed out: {:?}", r.elapsed);
    let mut status = Command::new(bin());
    status.arg("status");
    in_cluster(&mut status);
    let s = run(&mut status, LIMIT);
    assert_eq!(s.code, 69, "{}", s.stderr);
    assert!(s.stderr.contains("TRYAGAIN"), "says what the server said: {}", s.stderr);
    assert!(!s.stderr.contains("timed out"), "{}", s.stderr);

    // The migration completes while a wrapper waits: it acquires.
    let mut waiter = wrapper();
    in_cluster(&mut waiter);
    let mut waiter = waiter.args(["--wait", "10s", "--", "true"]).stderr(Stdio::piped()).start();
    std::thread::sleep(Duration::from_secs(1));
    moving.complete(&cluster);
    let out = wait_output(&mut waiter, LIMIT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "acquired after the migration: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A slot moving from one node to another, key by key.
struct Migration<'a> {
    from: &'a RedisServer,
    to: &'a RedisServer,
    slot: String,
    to_id: String,
}

impl<'a> Migration<'a> {
    /// The move of `key`'s slot to another node, begun: the nodes marked migrating and
    /// importing, no key moved yet.
    fn of(cluster: &'a Cluster, key: &[u8]) -> Self {
        let from = cluster.node_for(key);
        let to = cluster.nodes.iter().find(|n| n.port != from.port).unwrap();
        let slot: i64 = from.cmd(&[b"CLUSTER", b"KEYSLOT", key]);
        let slot = slot.to_string();
        let from_id: String = from.cmd(&[b"CLUSTER", b"MYID"]);
        let to_id: String = to.cmd(&[b"CLUSTER", b"MYID"]);
        to.cmd::<()>(&[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"IMPORTING", from_id.as_bytes()]);
        from.cmd::<()>(&[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"MIGRATING", to_id.as_bytes()]);
        Migration { from, to, slot, to_id }
    }

    /// Moves `key` alone, leaving the slot's other keys (its fence counter) behind: until the
    /// rest follows, a request on both answers TRYAGAIN.
    fn move_only(&self, key: &[u8]) {
        let port = self.to.port.to_string();
        self.from.cmd::<()>(&[b"MIGRATE", b"127.0.0.1", port.as_bytes(), key, b"0", b"5000"]);
        let count = |n: &RedisServer| n.cmd::<i64>(&[b"CLUSTER", b"COUNTKEYSINSLOT", self.slot.as_bytes()]);
        assert_eq!((count(self.from), count(self.to)), (1, 1), "the fence counter stayed, the lock moved");
    }

    /// Moves the rest of the slot's keys and gives the slot to the new node on every node.
    fn complete(&self, cluster: &Cluster) {
        let slot = self.slot.as_bytes();
        let rest: Vec<Vec<u8>> = self.from.cmd(&[b"CLUSTER", b"GETKEYSINSLOT", slot, b"100"]);
        let port = self.to.port.to_string();
        let mut migrate: Vec<&[u8]> =
            vec![b"MIGRATE", b"127.0.0.1", port.as_bytes(), b"", b"0", b"5000", b"KEYS"];
        migrate.extend(rest.iter().map(|k| k.as_slice()));
        self.from.cmd::<()>(&migrate);
        for node in &cluster.nodes {
            node.cmd::<()>(&[b"CLUSTER", b"SETSLOT", slot, b"NODE", self.to_id.as_bytes()]);
        }
    }
}

/// The release meets a slot half-way through a move (TRYAGAIN): it is retried for its 3 s,
/// so a move that ends within them frees the lock at once instead of leaving it for the TTL.
#[test]
fn cluster_release_is_retried_through_a_slot_move() {
    let cluster = Cluster::start();
    let key = b"lock:release-moving";
    let dir = tmp();
    let go = file(&dir, "go");
    let mut holder = wrapper()
        .args(["--cluster", "--redis-url", &cluster.seed(), "-k", "lock:release-moving", "--ttl", "30s"])
        .args(["--", "sh", "-c", HOLD_UNTIL_GO])
        .env("GO", &go)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || cluster.node_for(key).exists(key)), "the lock is held");
    let moving = Migration::of(&cluster, key);
    moving.move_only(key);
    std::fs::write(&go, "").unwrap();
    std::thread::sleep(Duration::from_millis(800));
    moving.complete(&cluster);
    let out = wait_output(&mut holder, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("could not confirm"), "released once the slot had moved: {stderr}");
    assert!(!moving.to.exists(key), "the lock is free, not left for its TTL");
}

/// `CLIENT PAUSE … WRITE` on the master of the lock's slot (what `CLUSTER FAILOVER` does to
/// it): the node answers a PING, so a run does not fail open beside the holder; it finds the
/// lock busy (the acquire run read-only) and a free key's run says why it waits.
#[test]
fn cluster_paused_writes_never_fail_open() {
    let cluster = Cluster::start();
    let key = b"lock:cluster-paused";
    let dir = tmp();
    let go = file(&dir, "go");
    let in_cluster = ["--cluster", "--redis-url", &cluster.seed(), "-k", "lock:cluster-paused"];
    let mut holder = wrapper()
        .args(in_cluster)
        .args(["--ttl", "30s", "--", "sh", "-c", HOLD_UNTIL_GO])
        .env("GO", &go)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || cluster.node_for(key).exists(key)), "the lock is held");
    let master = cluster.node_for(key);
    master.cmd::<()>(&[b"CLIENT", b"PAUSE", b"6000", b"WRITE"]);
    let marker = file(&dir, "ran");
    let r = run(
        wrapper()
            .args(in_cluster)
            .args(["--fail-open", "--command-timeout", "1s", "--", "touch"])
            .arg(&marker),
        LIMIT,
    );
    let free = run(
        wrapper()
            .args(["--cluster", "--redis-url", &cluster.seed(), "-k", "{lock:cluster-paused}:other"])
            .args(["--fail-open", "--command-timeout", "1s", "--", "touch"])
            .arg(&marker),
        LIMIT,
    );
    master.cmd::<()>(&[b"CLIENT", b"UNPAUSE"]);
    assert_eq!(r.code, 75, "{}", r.stderr);
    assert!(r.stderr.contains("held by"), "{}", r.stderr);
    assert_eq!(free.code, 69, "{}", free.stderr);
    assert!(free.stderr.contains("writes paused"), "says why: {}", free.stderr);
    assert!(!marker.exists(), "--fail-open ran the command while the node answered");
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_output(&mut holder, LIMIT).status.code(), Some(0));
}

/// While the nodes disagree about who owns a slot (a resharding in progress), every node
/// redirects to another: the redirect that the Cluster client gives up on is transient and
/// retried within --wait, never a failure. A Cluster node used without --cluster is a
/// configuration mistake.
#[test]
fn cluster_redirects_while_slots_move_are_retried_and_a_node_without_cluster_is_a_mistake() {
    let cluster = Cluster::start();
    let key = b"lock:moving";
    let owner = cluster.node_for(key);
    let other = cluster.nodes.iter().find(|n| n.port != owner.port).unwrap();
    let slot: i64 = owner.cmd(&[b"CLUSTER", b"KEYSLOT", key]);
    let slot = slot.to_string();
    let other_id: String = other.cmd(&[b"CLUSTER", b"MYID"]);

    // Not a Cluster connection: the node that does not own the key's slot answers MOVED.
    let r = run(wrapper().args(["--redis-url", &other.url(), "-k", "lock:moving", "--", "true"]), LIMIT);
    assert_eq!(r.code, 78, "{}", r.stderr);
    assert!(r.stderr.contains("add --cluster"), "{}", r.stderr);

    // The owner hands the slot over, but the new owner does not know yet: they redirect to
    // each other.
    owner.cmd::<()>(&[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"NODE", other_id.as_bytes()]);
    let mut waiter = wrapper();
    waiter.args([
        "--cluster",
        "--redis-url",
        &owner.url(),
        "-k",
        "lock:moving",
        "--wait",
        "10s",
        "--",
        "true",
    ]);
    let mut waiter = waiter.stderr(Stdio::piped()).start();
    std::thread::sleep(Duration::from_millis(1500));
    for node in &cluster.nodes {
        node.cmd::<()>(&[b"CLUSTER", b"SETSLOT", slot.as_bytes(), b"NODE", other_id.as_bytes()]);
    }
    let out = wait_output(&mut waiter, LIMIT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "acquired once the slot settled: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// In a Cluster the queue lives in the lock key's slot: waiters connected through different
/// seed nodes still run in the order they joined, each woken on the key's node. So do the
/// holders of a semaphore and their fences.
#[test]
fn cluster_waiters_run_in_the_order_they_joined_and_semaphores_keep_their_keys_together() {
    let cluster = Cluster::start();
    let dir = tmp();
    let (go, out) = (file(&dir, "go"), file(&dir, "out"));
    let key = "lock:cluster-queue";
    let node = cluster.node_for(key.as_bytes());
    let mut holder = wrapper()
        .args(["--cluster", "--redis-url", &cluster.seed(), "-k", key, "--", "sh", "-c"])
        .arg(HOLD_UNTIL_GO)
        .env("GO", &go)
        .start();
    assert!(wait_until(Duration::from_secs(10), || node.exists(key.as_bytes())));
    let queue = format!("{{{key}}}:queue");
    let waiters: Vec<_> = (1..=6)
        .map(|i| {
            let seed = cluster.nodes[i % 3].url();
            let w = wrapper()
                .args(["--cluster", "--redis-url", &seed, "-k", key, "--wait", "30s", "--", "sh", "-c"])
                .arg("echo \"$I\" >> \"$OUT\"")
                .env("I", i.to_string())
                .env("OUT", &out)
                .stderr(Stdio::piped())
                .start();
            let queued = wait_until(Duration::from_secs(10), || {
                node.cmd::<u64>(&[b"ZCARD", queue.as_bytes()]) == i as u64
            });
            assert!(queued, "waiter {i} queued");
            w
        })
        .collect();
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
    for mut w in waiters {
        let o = wait_output(&mut w, LIMIT);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let order = std::fs::read_to_string(&out).unwrap();
    assert_eq!(order.lines().collect::<Vec<_>>(), ["1", "2", "3", "4", "5", "6"]);

    // `--limit 2`, holders connected through different seeds, for a plain key and one with a
    // hash tag of its own: both permits on the key's node, a third run busy, all released.
    for key in ["lock:cluster-cap", "lock:{cap}:nightly"] {
        let node = cluster.node_for(key.as_bytes());
        let go = file(&dir, "cap-go");
        let holders: Vec<_> = (0..2)
            .map(|i| {
                let h = wrapper()
                    .args([
                        "--cluster",
                        "--redis-url",
                        &cluster.nodes[i + 1].url(),
                        "-k",
                        key,
                        "--limit",
                        "2",
                    ])
                    .args(["--", "sh", "-c"])
                    .arg(HOLD_UNTIL_GO)
                    .env("GO", &go)
                    .stderr(Stdio::piped())
                    .start();
                let held = wait_until(Duration::from_secs(10), || {
                    node.exists(key.as_bytes())
                        && node.cmd::<u64>(&[b"ZCARD", key.as_bytes()]) == i as u64 + 1
                });
                assert!(held, "{key}: holder {i} took a permit");
                h
            })
            .collect();
        let holders_key =
            if key.contains('{') { format!("{key}:holders") } else { format!("{{{key}}}:holders") };
        assert_eq!(node.cmd::<u64>(&[b"HLEN", holders_key.as_bytes()]), 2, "{key}: fences beside the key");
        let busy = run(
            wrapper().args([
                "--cluster",
                "--redis-url",
                &cluster.seed(),
                "-k",
                key,
                "--limit",
                "2",
                "--",
                "true",
            ]),
            LIMIT,
        );
        assert_eq!(busy.code, 75, "{key}: {}", busy.stderr);
        let status = run(
            wrapper().args(["status", "--cluster", "--redis-url", &cluster.seed(), "-k", key, "--json"]),
            LIMIT,
        );
        let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(v["holders"].as_array().map(Vec::len), Some(2), "{key}: {v}");
        std::fs::write(&go, "").unwrap();
        for mut h in holders {
            let o = wait_output(&mut h, LIMIT);
            assert_eq!(o.status.code(), Some(0), "{key}: {}", String::from_utf8_lossy(&o.stderr));
        }
        assert!(!node.exists(key.as_bytes()) && !node.exists(holders_key.as_bytes()), "{key}: released");
        std::fs::remove_file(&go).unwrap();
    }
}

/// A killed wrapper's guardian gives its lock back through Sentinel and in a Cluster as on one
/// Redis: it reaches the same master the run did.
#[test]
fn a_killed_wrappers_lock_is_released_via_sentinel_and_in_a_cluster() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start(master.port);
    let cluster = Cluster::start();
    let key = "lock:crash-topology";
    let via_sentinel = vec![
        "--sentinel".to_owned(),
        format!("127.0.0.1:{}", sentinel.port),
        "--sentinel-master".into(),
        "main".into(),
    ];
    let in_cluster = vec!["--cluster".to_owned(), "--redis-url".into(), cluster.seed()];
    for (args, holder) in [(via_sentinel, &master), (in_cluster, cluster.node_for(key.as_bytes()))] {
        let dir = tmp();
        let pidfile = file(&dir, "pid");
        let mut wrapper = wrapper()
            .args(&args)
            .args(["-k", key, "--", "sh", "-c", "echo $$ > \"$PIDFILE\"; exec sleep 100"])
            .env("PIDFILE", &pidfile)
            .stderr(std::process::Stdio::null())
            .start();
        let pid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
        assert!(holder.exists(key.as_bytes()), "{args:?}: held");
        wrapper.kill().unwrap();
        wrapper.wait().unwrap();
        assert!(
            wait_until(Duration::from_secs(2), || !process_alive(pid) && !holder.exists(key.as_bytes())),
            "{args:?}: released at once (TTL 30 s)"
        );
    }
}
