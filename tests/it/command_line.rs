//! How the command line and the environment are read: a bare number is seconds on every
//! duration, as `sleep 5`, `timeout 5` and `flock -w 5` read it; a refused value is named by
//! where it came from, its flag or its variable; a mistyped subcommand is suggested, and `help`
//! is one.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
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
        let mut holder = cmd.args(["-k", "lock:ttl", "--", "sleep", "1"]).start();
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
    // A negative value as a word of its own is the flag's value, not an unknown option.
    for args in
        [["--wait", "-0"], ["-w", "-1"], ["--ttl", "-5"], ["--limit", "-1"], ["--busy-exit-code", "-1"]]
    {
        let r = run(redlock(&redis).args(["-k", "lock:refused"]).args(args).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        let long = if args[0] == "-w" { "--wait" } else { args[0] };
        assert!(r.stderr.contains(long), "{args:?} names the flag: {}", r.stderr);
    }
    let r =
        run(redlock(&redis).env("REDLOCK_WAIT", "-1.5").args(["-k", "lock:refused", "--", "true"]), LIMIT);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("cannot be negative"), "{}", r.stderr);
    assert_eq!(redis.cmd::<i64>(&[b"EXISTS", b"lock:refused"]), 0);
}

/// A refused value from the environment is named by its variable, one from the command line by
/// its flag: durations, numbers, choices, keys, URLs and paths alike, each with the exit status
/// of its kind of mistake.
#[test]
fn a_refused_value_names_the_variable_it_came_from() {
    let redis = RedisServer::start();
    let cases: &[(&str, &str, &str, i32)] = &[
        ("REDLOCK_TTL", "--ttl", "abc", 64),
        ("REDLOCK_TTL", "--ttl", "0", 64),
        ("REDLOCK_TTL", "--ttl", "0.0001", 64),
        ("REDLOCK_WAIT", "--wait", "soon", 64),
        ("REDLOCK_RENEW_EVERY", "--renew-every", "abc", 64),
        ("REDLOCK_KILL_GRACE", "--kill-grace", "-1", 64),
        ("REDLOCK_KILL_GRACE", "--kill-grace", "1m", 64),
        ("REDLOCK_MAX_RUNTIME", "--max-runtime", "0", 64),
        ("REDLOCK_MIN_HOLD", "--min-hold", "11y", 64),
        ("REDLOCK_IDEMPOTENCY_TTL", "--idempotency-ttl", "0.0001", 64),
        ("REDLOCK_CONNECT_TIMEOUT", "--connect-timeout", "1h", 64),
        ("REDLOCK_COMMAND_TIMEOUT", "--command-timeout", "x", 64),
        ("REDLOCK_LIMIT", "--limit", "0", 64),
        ("REDLOCK_BUSY_EXIT_CODE", "--busy-exit-code", "300", 64),
        ("REDLOCK_ON_LOST", "--on-lost", "panic", 64),
        ("REDLOCK_LOG_FORMAT", "--log-format", "xml", 64),
        ("REDLOCK_KEY", "--key", "", 64),
        ("REDLOCK_IDEMPOTENCY_KEY", "--idempotency-key", "", 64),
        ("REDLOCK_REDIS_URL", "--redis-url", "foo://bar", 78),
        ("REDLOCK_PASSWORD_FILE", "--password-file", "/nonexistent/pw", 78),
        ("REDLOCK_TLS_CA_FILE", "--tls-ca-file", "/nonexistent/ca.pem", 78),
    ];
    for &(var, flag, value, status) in cases {
        for from_env in [true, false] {
            let mut cmd = wrapper();
            if var != "REDLOCK_REDIS_URL" {
                // TLS files are read for a URL that speaks TLS (with none, they are refused).
                let url = if var.starts_with("REDLOCK_TLS") {
                    redis.url().replace("redis:", "rediss:")
                } else {
                    redis.url()
                };
                cmd.args(["--redis-url", &url]);
            }
            if var != "REDLOCK_KEY" {
                cmd.args(["-k", "lock:named"]);
            }
            if from_env {
                cmd.env(var, value);
            } else {
                cmd.arg(format!("{flag}={value}"));
            }
            let r = run(cmd.args(["--", "true"]), LIMIT);
            let what = format!("{var}/{flag} {value:?}, from the environment: {from_env}");
            assert_eq!(r.code, status, "{what}: {}", r.stderr);
            if from_env {
                assert!(r.stderr.contains(var), "{what} names {var}: {}", r.stderr);
            } else {
                assert!(
                    r.stderr.contains(flag) && !r.stderr.contains(var),
                    "{what} names {flag}: {}",
                    r.stderr
                );
            }
        }
    }

    // A Sentinel list, which is read from its variable by hand.
    let r = run(
        wrapper().env("REDLOCK_SENTINEL", "foo://x").env("REDLOCK_SENTINEL_MASTER", "m").args([
            "-k",
            "lock:named",
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 78, "{}", r.stderr);
    assert!(r.stderr.contains("REDLOCK_SENTINEL foo://x"), "{}", r.stderr);
    assert!(!redis.exists(b"lock:named"));
}

/// A first word one edit away from a subcommand (`statsu`) that no program on PATH is called
/// is a usage error that suggests the subcommand, not a missing `--key` nor a command that
/// cannot be found; a program of that name still runs. `help` prints the help, `help status`
/// the subcommand's.
#[test]
fn a_mistyped_subcommand_is_suggested_and_help_prints_the_help() {
    let redis = RedisServer::start();
    for (typo, meant) in [
        ("statsu", "status"),
        ("stats", "status"),
        ("sstatus", "status"),
        ("Status", "status"),
        ("relase", "release"),
        ("releases", "release"),
        ("hepl", "help"),
        ("hlp", "help"),
    ] {
        for key_from_env in [false, true] {
            let mut cmd = wrapper();
            cmd.env("REDLOCK_REDIS_URL", redis.url()).arg(typo);
            if key_from_env {
                cmd.env("REDLOCK_KEY", "lock:typo");
            } else {
                cmd.args(["--key", "lock:typo"]);
            }
            let r = run(&mut cmd, LIMIT);
            assert_eq!(r.code, 64, "{typo}: {}", r.stderr);
            assert!(r.stderr.contains(&format!("did you mean `{meant}`?")), "{typo}: {}", r.stderr);
            assert!(!r.stderr.contains("required"), "{typo}: {}", r.stderr);
        }
    }
    // Two edits away, or a path: the command, as before.
    for command in ["statuses", "./statsu"] {
        let r = run(
            wrapper().env("REDLOCK_REDIS_URL", redis.url()).env("REDLOCK_KEY", "lock:typo").arg(command),
            LIMIT,
        );
        assert_eq!(r.code, 127, "{command}: {}", r.stderr);
    }

    let dir = tmp();
    let program = file(&dir, "statsu");
    std::fs::write(&program, "#!/bin/sh\necho \"ran $0 $*\"\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
    let r = run(
        wrapper()
            .env("PATH", path)
            .env("REDLOCK_REDIS_URL", redis.url())
            .env("REDLOCK_KEY", "lock:typo")
            .args(["statsu", "x"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(String::from_utf8_lossy(&r.stdout).starts_with("ran ") && r.stdout.ends_with(b"statsu x\n"));
    assert!(!redis.exists(b"lock:typo"));

    for (args, shows) in [
        (&["help"][..], "Usage: redlock-run [OPTIONS] --key <KEY> <COMMAND>..."),
        (&["help", "status"][..], "Usage: redlock-run status"),
        (&["help", "release"][..], "Usage: redlock-run release"),
    ] {
        let r = run(wrapper().args(args), LIMIT);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(out.contains(shows) && out.contains("[env: REDLOCK_KEY=]"), "{args:?}: {out}");
    }
    let r = run(wrapper().args(["help", "stauts"]), LIMIT);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("did you mean `status`?"), "{}", r.stderr);
}

/// A `REDLOCK_*` variable a letter or two from a real one is a warning naming the one meant;
/// the user's own variables, and those an outer run gives its command, pass unremarked.
#[test]
fn a_mistyped_variable_is_named_with_the_one_meant() {
    let redis = RedisServer::start();
    let r = run(
        redlock(&redis).env("REDLOCK_TLL", "5s").env("REDLOCK_BUSY_EXIT_COD", "0").args([
            "-k",
            "lock:typo",
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("REDLOCK_TLL is set but configures nothing: did you mean REDLOCK_TTL?"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("did you mean REDLOCK_BUSY_EXIT_CODE?"), "{}", r.stderr);
    let r = run(
        redlock(&redis)
            .env("REDLOCK_DEPLOY_TARGET", "prod")
            .env("REDLOCK_FENCE", "12")
            .env("REDLOCK_TTL_MS", "30000")
            .env("REDLOCK_TOKENS", "mine")
            .args(["-k", "lock:typo", "--", "true"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("configures nothing"), "{}", r.stderr);
    // Said also where the typo is why the command line is wrong.
    let r = run(redlock(&redis).env("REDLOCK_KYE", "lock:typo").args(["--", "true"]), LIMIT);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("REDLOCK_KYE is set but configures nothing: did you mean REDLOCK_KEY?"),
        "{}",
        r.stderr
    );
}

/// Help, the version and a generated document that cannot be written (stdout on a full disk)
/// fail with 70 and say so, as any output the tool could not deliver; a reader that had enough
/// (`| head`) is no failure.
#[test]
fn help_that_cannot_be_written_is_a_failure() {
    for args in [&["--help"][..], &["-h"], &["--version"], &["help", "status"], &["--generate", "man"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
        let mut process =
            wrapper().args(args).stdin(Stdio::null()).stdout(full).stderr(Stdio::piped()).start();
        let out = wait_output(&mut process, LIMIT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot write to stdout"), "{args:?}: {stderr}");

        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut process =
            wrapper().args(args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).start();
        let out = wait_output(&mut process, LIMIT);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A usage error among arguments that are not UTF-8 (odd bytes in a key, say) is still a usage
/// error with its hint, not a panic.
#[test]
fn a_usage_error_beside_bytes_that_are_not_utf8_is_a_usage_error() {
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"lock:\xff");
    for args in [&["--ttl", "-5s"][..], &["--bogus", "status"]] {
        let r = run(wrapper().args(["--key".as_ref(), odd]).args(args).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("redlock-run: error:"), "{args:?}: {}", r.stderr);
    }
}

/// A usage error on a stderr whose reader is gone (a closed pipe) is still a usage error (64),
/// not a panic, and `lock`'s still prints the line that ends the script that evaluates it.
#[test]
fn a_usage_error_on_a_stderr_nobody_reads_is_still_a_usage_error() {
    for args in [&["--bogus"][..], &["--key", "k"], &["statsu", "--key", "k"], &["lock", "--bogus"]] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut process =
            wrapper().args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(writer).start();
        let out = wait_output(&mut process, LIMIT);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {:?}", out.status);
        if args[0] == "lock" {
            assert_eq!(String::from_utf8_lossy(&out.stdout), "(exit 64)\n", "{args:?}");
        }
    }
}
