//! How the command line and the environment are read: a bare number is seconds on every
//! duration, as `sleep 5`, `timeout 5` and `flock -w 5` read it.

use std::time::Duration;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(20);

/// Every duration flag and variable takes a bare number of seconds, decimals too; what is not a
/// plain non-negative number is refused (64), naming the flag.
#[test]
fn a_bare_number_is_seconds_on_every_duration() {
    let redis = RedisServer::start();
    for (i, args) in [
        &["--ttl", "30", "--renew-every", "5", "--kill-grace", "2.5"][..],
        &["--wait", "1.5", "--min-hold", "0.25", "--max-runtime", "60"][..],
        &["--idempotency-key", "id", "--idempotency-ttl", "3600"][..],
        &["--connect-timeout", "1", "--command-timeout", ".5"][..],
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("lock:bare:{i}");
        let r = run(redlock(&redis).args(["-k", &key]).args(args).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }

    // The lease Redis keeps is the number of seconds given, from the flag or the variable.
    for (ttl, from_env, most) in [("1.5", false, 1500), ("2", true, 2000)] {
        let mut cmd = redlock(&redis);
        if from_env {
            cmd.env("REDLOCK_TTL", ttl);
        } else {
            cmd.args(["--ttl", ttl]);
        }
        let mut holder = cmd.args(["-k", "lock:ttl", "--", "sleep", "1"]).spawn().expect("spawn");
        assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:ttl")));
        let pttl: i64 = redis.cmd(&[b"PTTL", b"lock:ttl"]);
        assert!(
            pttl > most / 3 && pttl <= most,
            "--ttl {ttl} (from the environment: {from_env}): PTTL {pttl}"
        );
        assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(0));
    }

    // And it is seconds where time is measured locally, too.
    let r =
        run(redlock(&redis).args(["-k", "lock:runtime", "--max-runtime", "1.5", "--", "sleep", "30"]), LIMIT);
    assert_eq!(r.code, 124, "{}", r.stderr);
    assert!(
        r.elapsed >= Duration::from_millis(1400) && r.elapsed < Duration::from_secs(6),
        "{:?}",
        r.elapsed
    );

    for (flag, value) in [
        ("--wait", "nan"),
        ("--wait", "inf"),
        ("--wait", "1e3"),
        ("--wait", "-0"),
        ("--wait", "."),
        ("--wait", ""),
        ("--wait", "1.2.3"),
        ("--wait", "0x10"),
        ("--wait", "+5"),
        ("--wait", "1,5"),
        ("--ttl", "0"),
        ("--ttl", "0.0"),
        ("--ttl", "0.0001"),
        ("--kill-grace", "0.0000000001"),
        ("--max-runtime", "99999999999999999999"),
        ("--max-runtime", "400000000"),
        ("--min-hold", "-1.5"),
    ] {
        let r = run(
            redlock(&redis).args(["-k", "lock:refused", &format!("{flag}={value}"), "--", "true"]),
            LIMIT,
        );
        assert_eq!(r.code, 64, "{flag}={value}: {}", r.stderr);
        assert!(r.stderr.contains(flag), "{flag}={value} names the flag: {}", r.stderr);
    }
    let r =
        run(redlock(&redis).env("REDLOCK_WAIT", "-1.5").args(["-k", "lock:refused", "--", "true"]), LIMIT);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("cannot be negative"), "{}", r.stderr);
    assert_eq!(redis.cmd::<i64>(&[b"EXISTS", b"lock:refused"]), 0);
}
