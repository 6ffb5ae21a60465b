//! Credentials and least privilege: the ACL line of docs/GUIDE.md § Least-privilege ACL works as
//! written, denials are 77, and passwords appear in no output.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// The guide's least-privilege user, for lock keys matching `lock:*`: the `ACL SETUSER` line
/// is taken from docs/GUIDE.md as written, with PASSWORD replaced.
fn least_privilege_user(redis: &RedisServer, password: &str) {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/GUIDE.md")).unwrap();
    let section =
        &guide[guide.find("### Least-privilege ACL").expect("docs/GUIDE.md § Least-privilege ACL")..];
    let line = section
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ACL SETUSER"))
        .expect("the guide has the ACL line");
    let line = line.replace("PASSWORD", password);
    let args: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
    redis.cmd::<()>(&args);
    redis.cmd::<()>(&[b"SCRIPT", b"FLUSH"]);
}

fn as_user(url: &str) -> Command {
    let mut cmd = wrapper();
    cmd.env("REDLOCK_REDIS_URL", url);
    cmd
}

#[test]
fn a_least_privilege_user_runs_every_feature() {
    let redis = RedisServer::start();
    least_privilege_user(&redis, "Pa55-word");
    let url = format!("redis://locker:Pa55-word@127.0.0.1:{}", redis.port);
    for args in [
        &["-k", "lock:acl", "--", "true"][..],
        &["-k", "lock:acl", "--idempotency-key", "day-1", "--", "true"],
        &["-k", "lock:acl", "--idempotency-key", "day-1", "--", "false"],
        &["-k", "lock:acl", "--min-hold", "200ms", "--", "true"],
        &["-k", "lock:acl", "--wait", "5s", "--", "true"],
    ] {
        let r = run(as_user(&url).args(args), LIMIT);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("Pa55-word"));
    }
    assert!(redis.exists(b"{lock:acl}:done:day-1"));
    // Queued waiting, also for a key with a hash tag of its own (its channels are `lock:{…`),
    // the lock handed over by the holder's release.
    for key in ["lock:acl", "lock:{job}"] {
        let mut holder = as_user(&url).args(["-k", key, "--", "sleep", "0.7"]).start();
        assert!(wait_until(Duration::from_secs(5), || redis.exists(key.as_bytes())));
        let r = run(as_user(&url).args(["-k", key, "--wait", "10s", "-v", "--", "true"]), LIMIT);
        assert_eq!(r.code, 0, "{key} --wait: {}", r.stderr);
        assert!(r.stderr.contains("handed_over=true"), "{key} --wait: {}", r.stderr);
        assert!(wait_bounded(&mut holder, LIMIT).success());
    }
    // The kinds: a waiting semaphore run, a shared run beside another, and the operator's view
    // and release of their holders.
    for kind in [&["--limit", "2"][..], &["--shared"]] {
        let key = format!("lock:acl:{}", kind[0].trim_start_matches('-'));
        let mut holder =
            as_user(&url).args(["-k", &key, "--ttl", "3s"]).args(kind).args(["--", "sleep", "5"]).start();
        assert!(wait_until(Duration::from_secs(5), || redis.exists(key.as_bytes())));
        let r = run(
            as_user(&url)
                .args(["-k", &key, "--wait", "10s", "--idempotency-key", "k"])
                .args(kind)
                .args(["--", "true"]),
            LIMIT,
        );
        assert_eq!(r.code, 0, "{kind:?}: {}", r.stderr);
        let status = run(as_user(&url).args(["status", "--key", &key, "--json"]), LIMIT);
        assert_eq!(status.code, 0, "{kind:?}: {}", status.stderr);
        let release = run(as_user(&url).args(["release", "--key", &key, "--force"]), LIMIT);
        assert_eq!(release.code, 0, "{kind:?}: {}", release.stderr);
        assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(125), "{kind:?}");
    }
    for (args, code) in [
        (&["status", "--key", "lock:acl"][..], 1),
        (&["status", "--key", "lock:acl", "--json"][..], 1),
        (&["release", "--key", "lock:acl", "--force"][..], 1),
    ] {
        let r = run(as_user(&url).args(args), LIMIT);
        assert_eq!(r.code, code, "{args:?}: {}", r.stderr);
    }
}

#[test]
fn denials_are_77_and_never_show_the_password() {
    let redis = RedisServer::start();
    least_privilege_user(&redis, "Pa55-word");
    let good = format!("redis://locker:Pa55-word@127.0.0.1:{}", redis.port);
    let outside = run(as_user(&good).args(["-k", "other:key", "--", "true"]), LIMIT);
    assert_eq!(outside.code, 77, "{}", outside.stderr);

    let wrong = format!("redis://locker:Wr0ng-pass@127.0.0.1:{}", redis.port);
    let tries = || redis.calls("auth") + redis.calls("hello");
    let before = tries();
    let r = run(as_user(&wrong).args(["-k", "lock:x", "--", "true"]), LIMIT);
    assert_eq!(r.code, 77, "{}", r.stderr);
    // Fails fast: a denial is not retried like an outage (counted, not timed).
    assert_eq!(tries() - before, 1, "the credentials were tried once: {}", r.stderr);
    assert!(!r.stderr.contains("Wr0ng-pass"), "{}", r.stderr);

    let nowhere = format!("redis://locker:Pa55-word@127.0.0.1:{}", free_port());
    let r = run(as_user(&nowhere).args(["-v", "-k", "lock:x", "--", "true"]), LIMIT);
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(!r.stderr.contains("Pa55-word"), "{}", r.stderr);
    assert!(r.stderr.contains("locker:***@"), "the target is named, redacted: {}", r.stderr);

    // Nor does the command see it: the wrapper's REDLOCK_* configuration is not passed on.
    let r = run(as_user(&good).args(["-k", "lock:x", "--", "env"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!String::from_utf8_lossy(&r.stdout).contains("Pa55-word"));
}

/// A Redis with a password, reached with none, refuses the acquire before authentication
/// ("unauthenticated multibulk length": the script call has more arguments than an
/// unauthenticated client may send) and closes the connection: 77, never an outage that
/// `--fail-open` would run the command unlocked for (found by an attacker: it was 69).
#[test]
fn a_password_protected_redis_reached_without_one_is_77() {
    let redis = RedisServer::start();
    let dir = tmp();
    let marker = file(&dir, "ran");
    // Last: the fixture's own connections have no password.
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"requirepass", b"Pa55-word"]);
    for fail_open in [false, true] {
        let mut cmd = as_user(&format!("redis://127.0.0.1:{}", redis.port));
        if fail_open {
            cmd.arg("--fail-open");
        }
        let r = run(cmd.args(["-k", "lock:nopass", "--", "touch"]).arg(&marker), LIMIT);
        assert_eq!(r.code, 77, "--fail-open {fail_open}: {}", r.stderr);
        assert!(r.stderr.contains("password"), "says why: {}", r.stderr);
        assert!(!marker.exists(), "the command ran without the lock");
    }
}

#[test]
fn a_missing_command_permission_is_77() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"ACL", b"SETUSER", b"noincr", b"on", b">pw", b"~*", b"&*", b"+@all", b"-incr"]);
    let url = format!("redis://noincr:pw@127.0.0.1:{}", redis.port);
    let r = run(as_user(&url).args(["-k", "lock:noincr", "--", "true"]), LIMIT);
    assert_eq!(r.code, 77, "{}", r.stderr);
    assert!(!redis.exists(b"lock:noincr"), "the lock was not left behind");
}

#[test]
fn malformed_urls_never_show_the_password_and_name_their_source() {
    let forms = [
        "redis:/u:S3cret@h:6379",
        "u:S3cret@h:6379",
        "redis//u:S3cret@h:1",
        "redis:u:S3cret@h",
        "redis://u:S3cret",
    ];
    let subcommands: [&[&str]; 3] =
        [&["-vv", "-k", "k", "--", "true"], &["status", "-k", "k"], &["release", "-k", "k", "--force"]];
    for url in forms {
        for args in subcommands {
            for source in ["--redis-url", "REDLOCK_REDIS_URL", "REDIS_URL"] {
                let mut cmd = wrapper();
                match source {
                    "--redis-url" => cmd.args([args[0], "--redis-url", url]).args(&args[1..]),
                    env => cmd.env(env, url).args(args),
                };
                let r = run(&mut cmd, LIMIT);
                let what = format!("{url} via {source}, {args:?}");
                assert_eq!(r.code, 78, "{what}: {}", r.stderr);
                assert!(!r.stderr.contains("S3cret"), "{what}: {}", r.stderr);
                assert!(r.stderr.contains(&format!("{source} ")), "names {source}: {}", r.stderr);
            }
        }
    }
}

/// A value without a scheme may be a password pasted in the wrong place: it is never shown,
/// whether from `--redis-url` or either variable, by a run at any level of `-v`, by `status`
/// or by `release`; nor is a Sentinel given as a bare address that no host could have.
#[test]
fn a_url_without_a_scheme_is_never_shown() {
    let forms =
        ["S3cretPw", "S3cret:pw", "S3cret:6379", "pa@S3cret", "pa:S3c@ret@h:1", "redi:S3cret", " S3cret"];
    let subcommands: [&[&str]; 4] = [
        &["-k", "k", "--", "true"],
        &["-vv", "-k", "k", "--", "true"],
        &["status", "-vv", "-k", "k"],
        &["release", "-k", "k", "--force"],
    ];
    for url in forms {
        for args in subcommands {
            for source in ["--redis-url", "REDLOCK_REDIS_URL", "REDIS_URL"] {
                let mut cmd = wrapper();
                match source {
                    "--redis-url" if args[0] == "status" || args[0] == "release" => {
                        cmd.args([args[0], "--redis-url", url]).args(&args[1..])
                    }
                    "--redis-url" => cmd.args(["--redis-url", url]).args(args),
                    env => cmd.env(env, url).args(args),
                };
                let r = run(&mut cmd, LIMIT);
                let what = format!("{url:?} via {source}, {args:?}");
                assert_eq!(r.code, 78, "{what}: {}", r.stderr);
                assert!(!r.stderr.to_lowercase().contains("s3c"), "{what}: {}", r.stderr);
                assert!(r.stderr.contains(&format!("{source} ")), "names {source}: {}", r.stderr);
            }
        }
    }
    for sentinel in ["S3c!ret", "S3c%ret:26379", "S3c&ret,h"] {
        for source in ["--sentinel", "REDLOCK_SENTINEL"] {
            let mut cmd = wrapper();
            match source {
                "--sentinel" => cmd.args(["--sentinel", sentinel]),
                env => cmd.env(env, sentinel),
            };
            let r = run(cmd.args(["-vv", "--sentinel-master", "m", "-k", "k", "--", "true"]), LIMIT);
            let what = format!("{sentinel:?} via {source}");
            assert_eq!(r.code, 78, "{what}: {}", r.stderr);
            assert!(!r.stderr.to_lowercase().contains("s3c"), "{what}: {}", r.stderr);
            assert!(r.stderr.contains(source), "names {source}: {}", r.stderr);
        }
    }
}

#[test]
fn sentinel_and_cluster_targets_never_show_the_password() {
    let port = free_port().to_string();
    let r = run(
        wrapper()
            .args(["-vv", "--sentinel-master", "m", "--sentinel"])
            .arg(format!("u:S3cret@127.0.0.1:{port}"))
            .args(["-k", "k", "--", "true"]),
        LIMIT,
    );
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(!r.stderr.contains("S3cret"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("u:***@127.0.0.1:{port}")), "the Sentinel is named: {}", r.stderr);

    let good = format!("redis://u:S3cret@127.0.0.1:{port}");
    let r = run(
        wrapper().args([
            "--cluster",
            "--redis-url",
            &good,
            "--redis-url",
            "redis:/u:S3cret@h",
            "-k",
            "k",
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 78, "the second seed is malformed: {}", r.stderr);
    assert!(!r.stderr.contains("S3cret"), "{}", r.stderr);
    assert!(r.stderr.contains("redis:/u:***@h"), "{}", r.stderr);
}

/// A URL in the environment that is not UTF-8 is an error naming the variable — never a silent
/// fall back to the next source (another Redis, or the default one).
#[test]
fn a_url_that_is_not_utf8_is_an_error_not_a_fall_back() {
    use std::os::unix::ffi::OsStrExt;
    let redis = RedisServer::start();
    let bad = std::ffi::OsStr::from_bytes(b"redis://u:S3c\xffret@127.0.0.1:1");
    for name in ["REDLOCK_REDIS_URL", "REDIS_URL", "REDLOCK_PASSWORD"] {
        let before = redis.client_requests();
        let mut cmd = wrapper();
        cmd.env(name, bad);
        if name != "REDIS_URL" {
            // A good URL behind it, which must not be used instead.
            cmd.env("REDIS_URL", redis.url());
        }
        let r = run(cmd.args(["-k", "lock:utf8", "--", "true"]), LIMIT);
        assert_eq!(r.code, 78, "{name}: {}", r.stderr);
        assert!(r.stderr.contains(&format!("{name} is not valid UTF-8")), "{name}: {}", r.stderr);
        assert!(!redis.exists(b"lock:utf8") && redis.client_requests() == before, "{name}: Redis was used");
    }
}

/// A TLS file that does not hold what its flag needs is named with its flag at once (78),
/// instead of failing the handshake later as "unknown issuer" or blamed on the URL.
#[test]
fn tls_files_that_hold_the_wrong_thing_are_named_with_their_flag() {
    let dir = tmp();
    let (empty, cert, text) = (file(&dir, "empty.pem"), file(&dir, "cert.pem"), file(&dir, "notes.txt"));
    std::fs::write(&empty, "").unwrap();
    std::fs::write(&text, "this is not a certificate\n").unwrap();
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
    let url = format!("rediss://127.0.0.1:{}", free_port());
    let cases: [(&[&str], &std::path::Path, &str); 4] = [
        (&["--tls-ca-file"], &empty, "holds no PEM certificate"),
        (&["--tls-ca-file"], &text, "holds no PEM certificate"),
        (
            &["--tls-cert-file", cert.to_str().unwrap(), "--tls-key-file"],
            &cert,
            "holds no usable PEM private key",
        ),
        (&["--tls-key-file", cert.to_str().unwrap(), "--tls-cert-file"], &text, "holds no PEM certificate"),
    ];
    for (flags, bad, says) in cases {
        let r = run(
            wrapper().args(["--redis-url", &url]).args(flags).arg(bad).args(["-k", "k", "--", "true"]),
            LIMIT,
        );
        let flag = flags.last().unwrap();
        assert_eq!(r.code, 78, "{flags:?}: {}", r.stderr);
        assert!(r.stderr.contains(&format!("{flag} {} {says}", bad.display())), "{flags:?}: {}", r.stderr);
    }
}
