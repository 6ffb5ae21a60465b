//! Acquire, run, release against one real Redis: what the command gets (its stdio,
//! environment and exit status), fences, keys the tool did not write, usage errors and an
//! unreachable Redis.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn twenty_wrappers_at_once_exactly_one_runs() {
    let redis = RedisServer::start();
    exactly_one_of(20, "lock:twenty", || redlock(&redis));
    assert!(!redis.exists(b"lock:twenty"), "released afterwards");
}

#[test]
fn busy_exit_code_is_configurable() {
    let redis = RedisServer::start();
    let mut holder = redlock(&redis).args(["-k", "lock:busy", "--", "sleep", "2"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:busy")));
    let busy = run(redlock(&redis).args(["-k", "lock:busy", "--busy-exit-code", "3", "--", "true"]), LIMIT);
    assert_eq!(busy.code, 3, "{}", busy.stderr);
    assert!(busy.stderr.contains("busy"), "says why: {}", busy.stderr);
    let env_busy = run(
        redlock(&redis).env("REDLOCK_BUSY_EXIT_CODE", "9").args(["-k", "lock:busy", "--", "true"]),
        LIMIT,
    );
    assert_eq!(env_busy.code, 9, "the environment variable works too: {}", env_busy.stderr);
    assert!(wait_bounded(&mut holder, LIMIT).success());
}

#[test]
fn exit_statuses_pass_through_and_the_lock_is_released() {
    let redis = RedisServer::start();
    for (script, expected) in [
        ("exit 0", 0),
        ("exit 1", 1),
        ("exit 7", 7),
        ("exit 255", 255),
        ("kill -TERM $$", 143),
        ("kill -KILL $$", 137),
        ("kill -USR1 $$", 138),
    ] {
        let r = run(redlock(&redis).args(["-k", "lock:status", "--", "sh", "-c", script]), LIMIT);
        assert_eq!(r.code, expected, "`{script}`: {}", r.stderr);
        assert!(!redis.exists(b"lock:status"), "released after `{script}`");
    }

    let missing = run(redlock(&redis).args(["-k", "lock:status", "--", "/nonexistent/command"]), LIMIT);
    assert_eq!(missing.code, 127, "{}", missing.stderr);
    assert!(missing.stderr.contains("/nonexistent/command"), "{}", missing.stderr);
    assert!(!redis.exists(b"lock:status"));

    let dir = tmp();
    let plain = file(&dir, "not-executable");
    std::fs::write(&plain, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let not_exec = run(redlock(&redis).args(["-k", "lock:status", "--"]).arg(&plain), LIMIT);
    assert_eq!(not_exec.code, 126, "{}", not_exec.stderr);
    assert!(!redis.exists(b"lock:status"));
}

/// The command is found as execvp(3) finds it, whichever C library the binary was built with:
/// the first executable file of that name in PATH, a script without `#!` run by `/bin/sh`, one
/// found but not executable reported as such (126) when nothing else is, and none at all 127.
#[test]
fn the_command_is_found_in_path_as_execvp_finds_it() {
    use std::os::unix::fs::PermissionsExt;
    let redis = RedisServer::start();
    let dir = tmp();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let write = |path: &std::path::Path, text: &str, mode: u32| {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    // `job` is not executable in the first directory, executable in the second; `plain` has no
    // `#!`; `locked` exists only without the execute bit.
    write(&first.join("job"), "#!/bin/sh\necho first\n", 0o644);
    write(&second.join("job"), "#!/bin/sh\necho second \"$@\"\n", 0o755);
    write(&second.join("plain"), "echo plain \"$0\" \"$@\"\n", 0o755);
    write(&first.join("locked"), "#!/bin/sh\necho locked\n", 0o644);
    // An entry too long to be a path is stepped over, as execvp does.
    let long = format!("/{}", "x".repeat(5000));
    let path = format!("{long}:{}:{}:/usr/bin:/bin", first.display(), second.display());
    let go = |command: &[&str]| {
        run(redlock(&redis).env("PATH", &path).args(["-k", "lock:path", "--"]).args(command), LIMIT)
    };
    let r = go(&["job", "a b"]);
    assert_eq!(
        (r.code, String::from_utf8_lossy(&r.stdout).into_owned()),
        (0, "second a b\n".into()),
        "{}",
        r.stderr
    );
    let r = go(&["plain", "x"]);
    let expected = format!("plain {} x\n", second.join("plain").display());
    assert_eq!((r.code, String::from_utf8_lossy(&r.stdout).into_owned()), (0, expected), "{}", r.stderr);
    let r = go(&["locked"]);
    assert_eq!(r.code, 126, "{}", r.stderr);
    assert!(r.stderr.contains("Permission denied"), "{}", r.stderr);
    let r = go(&["no-such-command-anywhere"]);
    assert_eq!(r.code, 127, "{}", r.stderr);
    // A name with a newline cannot make a line of its own that looks like the wrapper's.
    let r = go(&["nothing\nredlock-run: info: released key=lock:path outcome=\"released\""]);
    assert_eq!(r.code, 127, "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "one line: {}", r.stderr);
    assert!(r.stderr.contains(r#"cannot run nothing\nredlock-run: info: released"#), "{}", r.stderr);
    assert!(!redis.exists(b"lock:path"));
}

/// The holder hears of the overwrite at once (lost, 125) and does not release the other value.
#[test]
fn a_value_changed_by_someone_else_is_left_intact() {
    let redis = RedisServer::start();
    let mut wrapper =
        redlock(&redis).args(["-k", "lock:changed", "--", "sleep", "10"]).stderr(Stdio::null()).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:changed")));
    redis.cmd::<()>(&[b"SET", b"lock:changed", b"someone-else"]);
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(125), "lost");
    assert_eq!(redis.get(b"lock:changed").as_deref(), Some(&b"someone-else"[..]));
}

fn fence_of_one_run(redis: &RedisServer) -> u64 {
    let r = run(redlock(redis).args(["-k", "lock:fence", "--", "sh", "-c", "echo $REDLOCK_FENCE"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    String::from_utf8(r.stdout).unwrap().trim().parse().expect("REDLOCK_FENCE is a number")
}

#[test]
fn fence_strictly_increases_even_across_data_loss() {
    let mut redis = RedisServer::start();
    let mut fences = vec![fence_of_one_run(&redis), fence_of_one_run(&redis), fence_of_one_run(&redis)];
    redis.cmd::<i64>(&[b"DEL", b"{lock:fence}:fence"]);
    fences.push(fence_of_one_run(&redis));
    redis.restart_empty();
    fences.push(fence_of_one_run(&redis));
    fences.push(fence_of_one_run(&redis));
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {fences:?}");
    let ttl: i64 = redis.cmd(&[b"PTTL", b"{lock:fence}:fence"]);
    assert!(ttl > 0, "the fence counter expires instead of living forever (PTTL {ttl})");
}

/// Redis restarted from a snapshot older than the last acquisition (A's): the counter went back,
/// and the next holder B must still get a higher fence than A.
#[test]
fn fence_increases_after_a_restart_from_an_older_snapshot() {
    let mut redis = RedisServer::start();
    fence_of_one_run(&redis);
    redis.cmd::<()>(&[b"SAVE"]);
    let dir = tmp();
    let a_fence = file(&dir, "a");
    let mut a = redlock(&redis)
        .args([
            "-k",
            "lock:fence",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo $REDLOCK_FENCE > \"$1\"; sleep 30",
            "sh",
        ])
        .arg(&a_fence)
        .stderr(std::process::Stdio::null())
        .start();
    let a_fence: u64 = read_when_present(&a_fence, LIMIT).trim().parse().unwrap();
    redis.restart_from_snapshot(&[], true);
    let b_fence = fence_of_one_run(&redis);
    assert!(b_fence > a_fence, "B's fence {b_fence} is not above A's {a_fence}");
    // A's key is gone with the restart: it finds out at its next renewal and stops.
    assert_eq!(wait_output(&mut a, LIMIT).status.code(), Some(125));
}

/// A counter far behind (e.g. restored from a months-old backup) still yields a fence of at
/// least the server clock in microseconds.
#[test]
fn a_counter_far_in_the_past_yields_a_fence_of_at_least_now() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"SET", b"{lock:fence}:fence", b"5"]);
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros();
    let fence = fence_of_one_run(&redis);
    assert!(u128::from(fence) >= before, "fence {fence} is below the clock ({before} µs)");
}

/// Fences above 2^53 (where Lua's doubles stop being exact) are exact, and a counter at the
/// largest value Redis can hold is reported as such: nothing is taken, exit 65.
#[test]
fn fences_are_exact_up_to_the_largest_counter() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"SET", b"{lock:fence}:fence", b"9007199254740994"]);
    assert_eq!(fence_of_one_run(&redis), 9007199254740995);
    assert_eq!(fence_of_one_run(&redis), 9007199254740996);
    assert_eq!(redis.get(b"{lock:fence}:fence").as_deref(), Some(&b"9007199254740996"[..]));

    let max = i64::MAX.to_string();
    redis.cmd::<()>(&[b"SET", b"{lock:fence}:fence", max.as_bytes()]);
    let dir = tmp();
    let marker = file(&dir, "ran");
    let r = run(redlock(&redis).args(["-k", "lock:fence", "--", "touch"]).arg(&marker), LIMIT);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("cannot be increased"), "says what it is: {}", r.stderr);
    assert!(r.stderr.contains("delete"), "says what to do: {}", r.stderr);
    assert!(!r.stderr.contains("not an integer"), "{}", r.stderr);
    assert!(!marker.exists(), "the command ran");
    assert!(!redis.exists(b"lock:fence"), "the lock was not taken");
    assert_eq!(redis.get(b"{lock:fence}:fence"), Some(max.into_bytes()), "the counter was left alone");
}

#[test]
fn bad_input_is_a_usage_error_naming_the_problem() {
    let redis = RedisServer::start();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["-k", "k", "--ttl", "30x", "--", "true"], 64, "--ttl"),
        (&["-k", "k", "--ttl", "0", "--", "true"], 64, "--ttl"),
        (&["-k", "k", "--ttl=-5s", "--", "true"], 64, "--ttl"),
        (&["-k", "k", "--ttl", "-5s", "--", "true"], 64, "-5"),
        (&["-k", "k", "--max-runtime", "500000000000y", "--", "true"], 64, "--max-runtime"),
        (&["-k", "", "--", "true"], 64, "--key"),
        (&["-k", "k"], 64, "COMMAND"),
        (&["-k", "k", "--no-such-flag", "--", "true"], 64, "--no-such-flag"),
        (&["--", "true"], 64, "--key"),
        (&["-k", "k", "--busy-exit-code", "300", "--", "true"], 64, "--busy-exit-code"),
        (&["-k", "k", "--redis-url", "foo://bar", "--", "true"], 78, "--redis-url"),
        (&["-k", "k", "--redis-url", "redis://[::1", "--", "true"], 78, "--redis-url"),
    ];
    let dir = tmp();
    let marker = file(&dir, "ran");
    for (args, code, mention) in cases {
        let mut cmd =
            if args.contains(&"--redis-url") { std::process::Command::new(bin()) } else { redlock(&redis) };
        cmd.args(*args);
        // Make sure a wrongly accepted invocation would be noticed.
        cmd.env("MARKER", &marker);
        let r = run(&mut cmd, LIMIT);
        assert_eq!(r.code, *code, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(mention), "{args:?} should mention {mention}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "nothing on stdout");
    }
    assert!(!marker.exists());
    assert_eq!(redis.cmd::<i64>(&[b"DBSIZE"]), 0, "nothing written to Redis");
}

#[test]
fn nothing_listening_fails_closed_quickly() {
    let dir = tmp();
    let marker = file(&dir, "ran");
    let port = free_port();
    let mut cmd = std::process::Command::new(bin());
    cmd.args(["-k", "k", "--redis-url", &format!("redis://127.0.0.1:{port}"), "--", "touch"]).arg(&marker);
    let r = run(&mut cmd, LIMIT);
    assert_eq!(r.code, 69, "{}", r.stderr);
    // About a second of retries (--wait 0), with room for a loaded machine.
    assert!(r.elapsed < Duration::from_secs(5), "took {:?}", r.elapsed);
    assert!(r.stderr.contains(&port.to_string()), "names the target: {}", r.stderr);
    assert!(!marker.exists(), "the command did not run");
}

#[test]
fn a_key_of_another_type_is_reported_and_untouched() {
    let redis = RedisServer::start();
    redis.cmd::<i64>(&[b"HSET", b"lock:hash", b"field", b"value"]);
    let r = run(redlock(&redis).args(["-k", "lock:hash", "--", "true"]), LIMIT);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("hash"), "{}", r.stderr);
    let v: Option<String> = redis.cmd(&[b"HGET", b"lock:hash", b"field"]);
    assert_eq!(v.as_deref(), Some("value"));
}

#[test]
fn a_key_without_expiry_is_reported_and_untouched() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"SET", b"lock:forever", b"foreign"]);
    let r = run(redlock(&redis).args(["-k", "lock:forever", "--", "true"]), LIMIT);
    assert_eq!(r.code, 75, "{}", r.stderr);
    assert!(r.stderr.contains("NO expiry"), "{}", r.stderr);
    assert_eq!(redis.get(b"lock:forever").as_deref(), Some(&b"foreign"[..]));
}

#[test]
fn stdout_is_the_commands_byte_for_byte() {
    let redis = RedisServer::start();
    let dir = tmp();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let input = file(&dir, "data");
    std::fs::write(&input, &data).unwrap();
    let r = run(redlock(&redis).args(["-v", "-k", "lock:stdout", "--", "cat"]).arg(&input), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout == data, "stdout differs ({} bytes vs {})", r.stdout.len(), data.len());
    assert!(r.stderr.contains("acquired"), "diagnostics go to stderr: {}", r.stderr);
}

#[test]
fn the_command_sees_the_lock_and_not_the_wrappers_configuration() {
    let redis = RedisServer::start();
    let r = run(
        std::process::Command::new(bin())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("REDLOCK_REDIS_URL", redis.url())
            .env("REDLOCK_KEY", "lock:env")
            .env("REDLOCK_TTL", "10s")
            .env("KEEP_ME", "yes")
            .env("REDLOCK_RETRY_COUNT", "3")
            .args(["--", "env"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let env = String::from_utf8(r.stdout).unwrap();
    let vars: Vec<&str> = env.lines().filter(|l| l.starts_with("REDLOCK_")).collect();
    let names: Vec<&str> = vars.iter().map(|l| l.split('=').next().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "REDLOCK_FENCE",
            "REDLOCK_FENCES",
            "REDLOCK_KEYS",
            "REDLOCK_LOCK_KEY",
            "REDLOCK_RETRY_COUNT",
            "REDLOCK_TOKEN",
            "REDLOCK_TTL_MS"
        ],
        "the user's own REDLOCK_RETRY_COUNT is passed on, the wrapper's configuration is not: {env}"
    );
    assert!(vars.contains(&"REDLOCK_LOCK_KEY=lock:env"));
    assert!(vars.contains(&"REDLOCK_TTL_MS=10000"), "the wrapper's REDLOCK_TTL was used: {env}");
    assert!(!env.contains(&redis.url()), "the Redis URL is not passed on: {env}");
    assert!(env.lines().any(|l| l == "KEEP_ME=yes"));
    let token = vars.iter().find_map(|l| l.strip_prefix("REDLOCK_TOKEN=")).unwrap();
    assert_eq!(token.split(' ').next().unwrap().len(), 32, "128-bit token first: {token}");
}

#[test]
fn the_key_is_used_verbatim_as_bytes() {
    let redis = RedisServer::start();
    let key = std::ffi::OsStr::from_bytes(b"lock:\xff\x01 {weird}} key");
    let r = run(
        redlock(&redis)
            .arg("--key")
            .arg(key)
            .args(["--", "sh", "-c", "\"$CLI\" -p \"$PORT\" --no-raw exists \"$REDLOCK_LOCK_KEY\""])
            .env("PORT", redis.port.to_string())
            .env("CLI", cli_binary()),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        "(integer) 1",
        "the lock was taken at exactly those bytes"
    );
    assert!(!redis.exists(key.as_bytes()));
}

#[test]
fn scripts_are_reloaded_after_script_flush() {
    let redis = RedisServer::start();
    assert_eq!(run(redlock(&redis).args(["-k", "lock:flush", "--", "true"]), LIMIT).code, 0);
    redis.cmd::<()>(&[b"SCRIPT", b"FLUSH"]);
    let r = run(redlock(&redis).args(["-k", "lock:flush", "--", "true"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!redis.exists(b"lock:flush"));
}

/// Someone flushing the scripts over and over: a flush between the load and the call is
/// loaded again (and retried as a passing fault), never an error or a release left unconfirmed.
#[test]
fn scripts_are_reloaded_while_something_keeps_flushing_them() {
    let redis = RedisServer::start();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut conn = redis.conn();
            // Bounded: 60 s at most, whatever the runs do.
            let until = std::time::Instant::now() + LIMIT;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && std::time::Instant::now() < until {
                let _: redis::RedisResult<()> = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let loops: Vec<_> = (0..4)
            .map(|i| {
                let redis = &redis;
                s.spawn(move || {
                    for _ in 0..30 {
                        let r = run(
                            redlock(redis)
                                .args(["-k", &format!("lock:flushing{}", i % 2), "--wait", "20s"])
                                .args(["--", "true"]),
                            LIMIT,
                        );
                        assert_eq!(r.code, 0, "{}", r.stderr);
                        assert!(!r.stderr.contains("could not confirm"), "{}", r.stderr);
                    }
                })
            })
            .collect();
        let results: Vec<_> = loops.into_iter().map(|l| l.join()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in results {
            r.unwrap_or_else(|e| std::panic::resume_unwind(e));
        }
    });
    assert!(!redis.exists(b"lock:flushing0") && !redis.exists(b"lock:flushing1"));
}

#[test]
fn keys_longer_than_64_kib_are_refused_before_touching_redis() {
    let redis = RedisServer::start();
    let dir = tmp();
    let marker = file(&dir, "ran");
    let long = "k".repeat(64 * 1024 + 1);
    let requests = redis.client_requests();
    for args in [&["--", "touch"][..], &["status"][..], &["release", "--force"][..]] {
        let mut cmd = redlock(&redis);
        if args[0] != "--" {
            cmd = wrapper();
            cmd.args(args).args(["--redis-url", &redis.url()]);
        }
        cmd.args(["--key", &long]);
        if args[0] == "--" {
            cmd.args(args).arg(&marker);
        }
        let r = run(&mut cmd, LIMIT);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("65537 bytes") && r.stderr.contains("65536"),
            "names the limit: {}",
            r.stderr
        );
    }
    assert!(!marker.exists(), "nothing ran");
    assert_eq!(redis.client_requests(), requests, "Redis was not even asked");
    assert_eq!(redis.cmd::<i64>(&[b"DBSIZE"]), 0, "nothing written to Redis");

    // At the limit the command runs, with the whole key in its environment.
    let key = "k".repeat(64 * 1024);
    let r = run(redlock(&redis).args(["--key", &key, "--", "sh", "-c", "echo ${#REDLOCK_LOCK_KEY}"]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), "65536");
    assert!(!redis.exists(key.as_bytes()), "released");
}

/// What the command sees on fds 0–2 and its status, with the wrapper started by `sh` after
/// closing the descriptors in `closing` (e.g. `>&-`).
fn fds_seen_with(redis: &RedisServer, closing: &str) -> (i32, String) {
    let dir = tmp();
    let seen = file(&dir, "fds");
    let script = "a=$(readlink /proc/$$/fd/0); b=$(readlink /proc/$$/fd/1); c=$(readlink /proc/$$/fd/2); \
                  echo \"$a $b $c\" > \"$SEEN\"; exit 3";
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &format!("exec \"$0\" \"$@\" {closing}"), bin(), "--redis-url", &redis.url()])
        .args(["-k", "lock:closed", "--", "sh", "-c", script])
        .env("SEEN", &seen);
    let r = run(&mut cmd, LIMIT);
    (r.code, std::fs::read_to_string(&seen).unwrap_or_default().trim().to_owned())
}

#[test]
fn closed_stdio_is_dev_null_for_the_command_and_the_run_still_works() {
    let redis = RedisServer::start();
    let (code, seen) = fds_seen_with(&redis, "<&- >&- 2>&-");
    assert_eq!(code, 3, "the command's own status");
    assert_eq!(seen, "/dev/null /dev/null /dev/null");
    // Only stdout closed: the others are passed on as they are.
    let (code, seen) = fds_seen_with(&redis, ">&-");
    assert_eq!(code, 3);
    let fds: Vec<&str> = seen.split(' ').collect();
    assert_eq!(fds.len(), 3, "{seen}");
    assert_eq!(fds[0], "/dev/null", "run() gives stdin /dev/null: {seen}");
    assert_eq!(fds[1], "/dev/null", "{seen}");
    assert!(fds[2].starts_with("pipe:"), "stderr is the test's pipe: {seen}");
    assert!(!redis.exists(b"lock:closed"), "released");
}

/// An O_PATH descriptor as stdout (open, though nothing can be written through it) is left as
/// it is: no /dev/null is opened in its place, to be passed on to the command above descriptor 2.
#[test]
fn an_o_path_stdout_is_left_as_it_is() {
    use std::os::unix::fs::OpenOptionsExt;
    let redis = RedisServer::start();
    let dir = tmp();
    let seen = file(&dir, "fds");
    let path = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_PATH)
        .open(dir.path())
        .expect("an O_PATH descriptor");
    let script = "ls -l /proc/$$/fd > \"$SEEN\"";
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:o-path", "--", "sh", "-c", script]).env("SEEN", &seen);
    let mut process = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(path)))
        .stderr(std::process::Stdio::piped())
        .start();
    let out = wait_output(&mut process, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let fds = std::fs::read_to_string(&seen).expect("the command's descriptors");
    let leaked: Vec<&str> = fds
        .lines()
        .filter_map(|l| l.split_once(" -> "))
        // Opened for reading and writing, as the wrapper's start opens it (the shell's own
        // copies are read-only).
        .filter(|(fd, to)| {
            *to == "/dev/null"
                && fd.starts_with("lrwx")
                && fd.rsplit(' ').next().and_then(|n| n.parse::<u32>().ok()) > Some(2)
        })
        .map(|(fd, _)| fd)
        .collect();
    assert!(leaked.is_empty(), "/dev/null passed on above descriptor 2: {fds}");
}

/// Switches set through the environment take only the words docs/GUIDE.md lists (any case;
/// empty is off): anything else is a usage error naming the variable, never a silent on.
#[test]
fn switches_take_only_the_words_the_readme_lists() {
    let vars = [
        "REDLOCK_FAIL_OPEN",
        "REDLOCK_TLS_INSECURE",
        "REDLOCK_CLUSTER",
        "REDLOCK_QUIET",
        "REDLOCK_NO_NEW_PRIVS",
    ];
    for var in vars {
        for value in ["maybe", "disabled", "none", "2", "enabled"] {
            let r = run(wrapper().env(var, value).args(["-k", "lock:switch", "--", "true"]), LIMIT);
            assert_eq!(r.code, 64, "{var}={value}: {}", r.stderr);
            assert!(r.stderr.contains(var), "{var}={value} names the variable: {}", r.stderr);
        }
    }
    // Nothing listens on this port: the switch decides whether the command runs anyway.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let cases = [("YES", true), ("On", true), ("1", true), ("off", false), ("0", false), ("", false)];
    let runs = run_all(cases.iter().map(|&(value, _)| {
        let mut cmd = wrapper();
        cmd.env("REDLOCK_FAIL_OPEN", value).args(["--redis-url", &url, "-k", "lock:switch", "--", "true"]);
        cmd
    }));
    for ((value, fails_open), r) in cases.into_iter().zip(runs) {
        assert_eq!(r.code, if fails_open { 0 } else { 69 }, "REDLOCK_FAIL_OPEN={value:?}: {}", r.stderr);
    }
}

/// Runs the wrappers side by side (each bounded by `LIMIT`) and returns their results in order.
/// For runs that each wait out their connection retries against a Redis that is not there, one
/// after the other would only add up the waits.
fn run_all(cmds: impl IntoIterator<Item = Command>) -> Vec<Run> {
    std::thread::scope(|s| {
        let runs: Vec<_> = cmds.into_iter().map(|mut cmd| s.spawn(move || run(&mut cmd, LIMIT))).collect();
        runs.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

/// A `redlock-run` inside the command never inherits the outer lock: without `--key` it is a
/// usage error, with `--key` it takes its own lock where it is told to.
#[test]
fn a_nested_wrapper_never_inherits_the_outer_lock() {
    let redis = RedisServer::start();
    let inner = format!("\"$BIN\" --redis-url {} -- true; echo \"no-key=$?\"", redis.url());
    let r =
        run(redlock(&redis).env("BIN", bin()).args(["-k", "lock:outer", "--", "sh", "-c", &inner]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(String::from_utf8_lossy(&r.stdout).contains("no-key=64"), "{}", r.stderr);
    assert!(r.stderr.contains("--key"), "says what is missing: {}", r.stderr);
    let inner = format!(
        "\"$BIN\" --redis-url {} -k lock:inner -- sh -c 'echo \"$REDLOCK_LOCK_KEY $REDLOCK_FENCE\"'; echo \"$REDLOCK_FENCE\"",
        redis.url()
    );
    let r =
        run(redlock(&redis).env("BIN", bin()).args(["-k", "lock:outer", "--", "sh", "-c", &inner]), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    let (inner_line, outer_fence) = (lines[0], lines[1]);
    assert!(inner_line.starts_with("lock:inner "), "the inner command sees its own key: {out}");
    assert_ne!(inner_line.split(' ').nth(1), Some(outer_fence), "and its own fence: {out}");
}

/// The same server twice is no Redlock quorum (it would be a quorum of one): a usage error.
#[test]
fn the_same_redis_url_twice_is_a_usage_error() {
    let redis = RedisServer::start();
    let url = redis.url();
    for urls in [vec![url.clone(), url.clone()], vec![url.clone(), format!("{url}/"), url.clone()]] {
        let mut cmd = wrapper();
        for u in &urls {
            cmd.args(["--redis-url", u]);
        }
        let r = run(cmd.args(["-k", "lock:twice", "--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{urls:?}: {}", r.stderr);
        assert!(r.stderr.contains("is given more than once"), "{}", r.stderr);
        assert!(!redis.exists(b"lock:twice"));
    }
}

/// When nothing names a Redis, the error says which URL was used and that it is the default.
#[test]
fn an_unreachable_default_redis_says_it_is_the_default() {
    // The default, 127.0.0.1:6379, may have a Redis of its own on this machine; this test
    // never touches one: it only runs when nothing listens there.
    if std::net::TcpStream::connect(("127.0.0.1", 6379)).is_ok() {
        eprintln!("skipped: something listens on 127.0.0.1:6379");
        return;
    }
    let r = run(wrapper().args(["-k", "lock:default", "--", "true"]), LIMIT);
    assert_eq!(r.code, 69, "{}", r.stderr);
    assert!(
        r.stderr.contains("redis://127.0.0.1:6379 (the default; set --redis-url or REDLOCK_REDIS_URL)"),
        "{}",
        r.stderr
    );
}

/// A URL from the environment is named with its variable when it cannot be reached, in the
/// run's error and in `status` and `release --force`.
#[test]
fn an_unreachable_redis_names_the_variable_its_url_came_from() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let cases: Vec<(&str, &[&str])> = ["REDLOCK_REDIS_URL", "REDIS_URL"]
        .into_iter()
        .flat_map(|var| {
            [
                &["-k", "lock:env", "--", "true"][..],
                &["status", "-k", "lock:env"][..],
                &["release", "-k", "lock:env", "--force"][..],
            ]
            .map(|args| (var, args))
        })
        .collect();
    let runs = run_all(cases.iter().map(|&(var, args)| {
        let mut cmd = wrapper();
        cmd.env(var, &url).args(args);
        cmd
    }));
    for (&(var, args), r) in cases.iter().zip(runs) {
        assert_eq!(r.code, 69, "{var} {args:?}: {}", r.stderr);
        assert!(r.stderr.contains(&format!("{url} (from {var})")), "{var} {args:?}: {}", r.stderr);
    }
    let r = run(wrapper().args(["--redis-url", &url, "-k", "lock:env", "--", "true"]), LIMIT);
    assert!(r.stderr.contains(&format!("cannot reach Redis at {url}: ")), "{}", r.stderr);
}

/// clap's errors speak in the tool's style, and never suggest `-- -x` (after `--` comes the
/// command, so that would run a command named `-x`).
#[test]
fn usage_errors_have_the_tools_style_and_useful_tips() {
    for (args, tip) in [
        (&["--ttl", "-5s"][..], "--ttl -5s: durations and numbers cannot be negative"),
        (&["--kill-grace", "-2s"][..], "--kill-grace -2s: durations and numbers cannot be negative"),
        (&["--wait", "-1"][..], "to wait without a limit, give forever"),
        (&["--wait", "infinity"][..], "to wait without a limit, give forever"),
        (&["-n"][..], "-n and -E are flock(1) flags"),
        (&["-E", "3"][..], "-n and -E are flock(1) flags"),
        (&["--bogus"][..], "write --option=VALUE"),
    ] {
        let r = run(wrapper().args(args).args(["-k", "k", "--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with("redlock-run: error: "), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(tip), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("use '--"), "{args:?}: no `-- -x` tip: {}", r.stderr);
    }
}

/// `--version` names the commit it was built from (in a git checkout), the target and the TLS
/// backend.
#[test]
fn version_names_the_commit_the_target_and_the_tls_backend() {
    let r = run(wrapper().arg("--version"), LIMIT);
    assert_eq!(r.code, 0);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.starts_with(&format!("redlock-run {}", env!("CARGO_PKG_VERSION"))), "{out}");
    assert!(out.contains("TLS: rustls"), "{out}");
    assert!(out.contains("x86_64-unknown-linux-") || out.contains("aarch64-unknown-linux-"), "{out}");
    if std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.git")).exists() {
        assert!(out.contains("(commit "), "{out}");
    }
}

/// `-h` is the summary: one line per option on an 80-column terminal, no environment variables,
/// defaults or values; `--help` has them all, with the exit statuses and examples.
#[test]
fn dash_h_is_a_one_line_per_option_summary_and_help_the_details() {
    for level in [&[][..], &["status"][..], &["release"][..]] {
        for flag in ["-h", "-vh"] {
            let r = run(wrapper().env("COLUMNS", "80").args(level).arg(flag), LIMIT);
            let out = String::from_utf8_lossy(&r.stdout);
            assert_eq!(r.code, 0, "{level:?} {flag}: {}", r.stderr);
            assert!(out.contains("--key <KEY>"), "{level:?} {flag}: {out}");
            for line in out.lines() {
                assert!(line.len() <= 80, "{level:?} {flag}: wider than 80 columns: {line:?}");
                // A continuation line is indented past the option column (the usage's second
                // line excepted).
                let continued = line.starts_with("       ") && !line.trim_start().starts_with("redlock-run");
                assert!(!continued, "{level:?} {flag}: an option on two lines: {out}");
            }
            assert!(!out.contains("[env:") && !out.contains("[possible values:"), "{level:?} {flag}: {out}");
            assert!(
                !out.contains("[default: 30s]") && !out.contains("[default: text]"),
                "{level:?} {flag}: {out}"
            );
        }
        let r = run(wrapper().env("COLUMNS", "80").args(level).arg("--help"), LIMIT);
        let out = String::from_utf8_lossy(&r.stdout);
        assert_eq!(r.code, 0);
        assert!(out.contains("[env: REDLOCK_KEY=]"), "{level:?} --help: {out}");
        assert!(out.contains("[env: REDLOCK_LOG_FORMAT=]"), "{level:?} --help: {out}");
    }
    let r = run(wrapper().arg("--help"), LIMIT);
    let out = String::from_utf8_lossy(&r.stdout);
    for detail in ["[default: 30s]", "terminate:", "Exit status:", "Examples:"] {
        assert!(out.contains(detail), "--help lacks {detail:?}: {out}");
    }
    // `-h` after `--` belongs to the command.
    let r = run(wrapper().args(["-k", "k", "--redis-url", "redis://127.0.0.1:1", "--", "-h"]), LIMIT);
    assert_eq!(r.code, 69, "{}", r.stderr);
}

/// A bad value from the environment names its variable, also when it is not UTF-8; the tip
/// about values starting with '-' is given only for an unknown option.
#[test]
fn a_bad_value_from_the_environment_names_its_variable() {
    use std::ffi::OsStr;
    let r =
        run(wrapper().env("REDLOCK_TTL", OsStr::from_bytes(b"\xff")).args(["-k", "k", "--", "true"]), LIMIT);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("REDLOCK_TTL is not valid UTF-8"), "{}", r.stderr);
    for (var, value) in
        [("REDLOCK_LOG_FORMAT", "xml"), ("REDLOCK_FAIL_OPEN", "2"), ("REDLOCK_BUSY_EXIT_CODE", "300")]
    {
        let r = run(wrapper().env(var, value).args(["-k", "k", "--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{var}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("the value comes from the environment: {var}")),
            "{var}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("--option=VALUE"), "{var}: {}", r.stderr);
    }
    let r = run(wrapper().args(["--log-format", "xml", "-k", "k", "--", "true"]), LIMIT);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(!r.stderr.contains("environment"), "given on the command line: {}", r.stderr);
}

/// An option before `status` or `release` makes it the command to run; the error says so.
#[test]
fn a_subcommand_after_an_option_gets_a_tip() {
    let r = run(
        wrapper().args(["--redis-url", "redis://127.0.0.1:1", "status", "--key", "k"]),
        Duration::from_secs(10),
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(
        r.stderr.contains("tip: subcommands come first, then their options: redlock-run status --key KEY"),
        "{}",
        r.stderr
    );
}
