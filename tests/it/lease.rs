//! The lease watchdog and the stop path (docs/ARCHITECTURE.md § The lease, the deadline and
//! the stop path):
//! the command never outlives its lock.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);

/// A command that writes its pid (= its process group) to `$PIDFILE` and then runs `body`.
fn recorded(body: &str) -> [String; 3] {
    ["sh".into(), "-c".into(), format!("echo $$ > \"$PIDFILE\"; {body}")]
}

/// Starts a wrapper with `flags` (then `--`) around a `recorded` command, stderr discarded;
/// returns it and the pid the command wrote.
fn spawn_recorded(
    redis: &RedisServer,
    flags: &[&str],
    body: &str,
    pidfile: &std::path::Path,
) -> (Process, i32) {
    let wrapper = redlock(redis)
        .args(flags)
        .arg("--")
        .args(recorded(body))
        .env("PIDFILE", pidfile)
        .stderr(Stdio::null())
        .start();
    (wrapper, recorded_pid(pidfile))
}

/// The pid a `recorded` command wrote (waited for up to 5 s).
fn recorded_pid(pidfile: &std::path::Path) -> i32 {
    read_when_present(pidfile, Duration::from_secs(5)).trim().parse().unwrap()
}

fn unix_ms(t: SystemTime) -> i128 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i128
}

#[test]
fn the_lock_is_renewed_for_as_long_as_the_command_runs() {
    let redis = RedisServer::start();
    let mut wrapper = redlock(&redis).args(["-k", "lock:renew", "--ttl", "1s", "--", "sleep", "4"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:renew")));
    let mut samples = Vec::new();
    let conn = &mut redis.conn();
    while wrapper.try_wait().unwrap().is_none() && samples.len() < 2000 {
        let pttl: i64 = redis::cmd("PTTL").arg("lock:renew").query(conn).unwrap();
        samples.push(pttl);
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = wait_bounded(&mut wrapper, LIMIT);
    assert_eq!(status.code(), Some(0));
    // The last samples may see the release; every earlier one must see a live key.
    let live: Vec<i64> = samples.iter().copied().take_while(|&p| p > 0).collect();
    assert!(
        live.len() >= samples.len().saturating_sub(3),
        "the key lapsed while the command ran: {samples:?}"
    );
    assert!(live.len() > 200, "sampled for the whole 4 s run ({} samples)", live.len());
    assert!(!redis.exists(b"lock:renew"), "released afterwards");
}

fn lost_mid_run(interfere: impl FnOnce(&RedisServer)) -> (Run, RedisServer, Duration) {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:lost", "--ttl", "3s", "--renew-every", "200ms", "--kill-grace", "500ms", "--"])
        .args(recorded("sleep 100 & sleep 100"))
        .env("PIDFILE", &pidfile)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.start();
    let pgid: i32 = recorded_pid(&pidfile);
    assert!(
        wait_until(Duration::from_secs(2), || group_members(pgid).len() >= 2),
        "the command and its background job run"
    );
    let interfered = Instant::now();
    interfere(&redis);
    let out = wait_output(&mut child, LIMIT);
    let stopped_after = interfered.elapsed();
    assert!(
        wait_until(Duration::from_secs(1), || group_members(pgid).is_empty()),
        "no process of the group survives: {:?}",
        group_members(pgid)
    );
    let run = Run {
        code: out.status.code().unwrap(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: stopped_after,
        process: child,
    };
    (run, redis, stopped_after)
}

#[test]
fn a_deleted_key_stops_the_whole_group() {
    let (run, _redis, after) = lost_mid_run(|r| {
        r.cmd::<i64>(&[b"DEL", b"lock:lost"]);
    });
    assert_eq!(run.code, 125, "{}", run.stderr);
    // Detected at the next renewal (200 ms), then SIGTERM; generous margin for a loaded machine
    // (the log says it was a loss, not the deadline's stop).
    assert!(after < Duration::from_millis(200 + 500 + 1800), "stopped {after:?} after the deletion");
    assert!(run.stderr.contains("lock lost"), "{}", run.stderr);
}

#[test]
fn an_overwritten_key_stops_the_command_and_stays_overwritten() {
    let (run, redis, after) = lost_mid_run(|r| {
        r.cmd::<()>(&[b"SET", b"lock:lost", b"the-next-holder", b"PX", b"60000"]);
    });
    assert_eq!(run.code, 125, "{}", run.stderr);
    assert!(after < Duration::from_millis(2500), "stopped {after:?} after the overwrite");
    assert_eq!(redis.get(b"lock:lost").as_deref(), Some(&b"the-next-holder"[..]));
}

/// Freezes Redis just after a renewal of `key` and returns the earliest moment (unix ms) the
/// key could expire: the server's expiry is at least (time before the PTTL query) + (PTTL).
fn freeze_after_renewal(redis: &RedisServer, key: &str) -> i128 {
    let conn = &mut redis.conn();
    let mut last: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
    for _ in 0..10_000 {
        let before = SystemTime::now();
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        if pttl > last + 100 {
            redis.freeze();
            return unix_ms(before) + pttl as i128;
        }
        last = pttl;
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("saw no renewal of {key} within 10000 samples");
}

/// Waits (bounded) until `pid`, a child or not, has ended, woken by the kernel as it ends (a
/// pidfd: a loaded machine delays a poll loop's next look more than a wake-up); returns when
/// (unix ms): when it died, or a moment after.
fn death_time(pid: i32, limit: Duration) -> i128 {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open(2) takes a pid and flags, and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    assert!(fd >= 0, "pidfd_open({pid}): {}", std::io::Error::last_os_error());
    // SAFETY: a descriptor just returned to this process, owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut ended = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // SAFETY: one pollfd, alive across the call.
        let polled = unsafe { libc::poll(&mut ended, 1, left.as_millis() as i32) };
        if polled > 0 {
            return unix_ms(SystemTime::now());
        }
        let interrupted = std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        assert!(polled < 0 && interrupted, "process {pid} still alive after {limit:?}");
    }
}

#[test]
fn a_frozen_redis_gets_the_command_killed_before_the_lock_can_expire() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let terms = file(&dir, "terms");
    // The command records when SIGTERM arrives and keeps running: only SIGKILL stops it.
    let body = "trap 'date +%s%N >> \"$TERMS\"' TERM; while :; do sleep 0.01; done";
    let ttl_ms = 5000;
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:frozen", "--ttl", "5s", "--"])
        .args(recorded(body))
        .env("PIDFILE", &pidfile)
        .env("TERMS", &terms)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.start();
    let pid: i32 = recorded_pid(&pidfile);

    let expiry_lb = freeze_after_renewal(&redis, "lock:frozen");
    let died = death_time(pid, Duration::from_secs(10));
    let out = wait_output(&mut child, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");

    let term_ms: Vec<i128> = std::fs::read_to_string(&terms)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse::<i128>().unwrap() / 1_000_000)
        .collect();
    assert_eq!(term_ms.len(), 1, "SIGTERM arrived exactly once: {term_ms:?}");
    let grace = ttl_ms / 6;
    let term_margin = expiry_lb - grace - term_ms[0];
    let death_margin = expiry_lb - died;
    eprintln!(
        "frozen redis: SIGTERM {term_margin} ms before (expiry − kill-grace); \
         command dead {death_margin} ms before the earliest expiry"
    );
    // SIGTERM no later than deadline − kill-grace (the deadline is before the earliest expiry).
    assert!(term_margin >= 0, "SIGTERM {} ms late", -term_margin);
    // ... and not absurdly early: the lease had at least ttl − renew-every left at the freeze.
    assert!(term_margin < ttl_ms, "SIGTERM {term_margin} ms early");
    // Dead before the lock could expire.
    assert!(death_margin >= 0, "the command outlived the lock by {} ms", -death_margin);
    assert!(group_members(pid).is_empty());

    redis.thaw();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!redis.exists(b"lock:frozen"), "no renewal succeeded after the thaw");
}

/// What the command leaves behind in its group is held to the same deadline as the command.
#[test]
fn leftovers_never_outlive_the_lease() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (pidfile, bgpid) = (file(&dir, "pid"), file(&dir, "bgpid"));
    // The command takes 0.5 s to exit after SIGTERM; its background job ignores SIGTERM.
    let body = "sh -c 'trap \"\" TERM; echo $$ > \"$BGPID\"; while :; do sleep 0.01; done' & \
                trap 'sleep 0.5; exit 0' TERM; while :; do sleep 0.01; done";
    let mut child = redlock(&redis)
        .args(["-k", "lock:leftover", "--ttl", "3s", "--renew-every", "500ms", "--kill-grace", "1s", "--"])
        .args(recorded(body))
        .env("PIDFILE", &pidfile)
        .env("BGPID", &bgpid)
        .stderr(Stdio::piped())
        .start();
    read_when_present(&pidfile, Duration::from_secs(5));
    let bg: i32 = read_when_present(&bgpid, Duration::from_secs(5)).trim().parse().unwrap();
    let expiry_lb = freeze_after_renewal(&redis, "lock:leftover");
    let died = death_time(bg, Duration::from_secs(10));
    eprintln!("leftover dead {} ms before the earliest expiry", expiry_lb - died);
    assert!(died <= expiry_lb, "the background job outlived the lock by {} ms", died - expiry_lb);
    let out = wait_output(&mut child, LIMIT);
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
    redis.thaw();
}

#[test]
fn a_short_freeze_and_a_killed_connection_do_not_disturb_the_command() {
    let redis = RedisServer::start();
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:blip", "--ttl", "3s", "--", "sleep", "4"])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:blip")));
    std::thread::sleep(Duration::from_millis(800));
    redis.freeze();
    std::thread::sleep(Duration::from_millis(300));
    redis.thaw();
    std::thread::sleep(Duration::from_millis(900));
    let killed: i64 = redis.cmd(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
    assert!(killed >= 1, "the wrapper's connection was killed");
    std::thread::sleep(Duration::from_millis(1200));
    assert!(redis.exists(b"lock:blip"), "still held after reconnecting");
    let status = wait_bounded(&mut wrapper, LIMIT);
    assert_eq!(status.code(), Some(0));
    assert!(!redis.exists(b"lock:blip"));
}

#[test]
fn a_redis_restarted_empty_is_a_lost_lock() {
    let mut redis = RedisServer::start();
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:restart", "--ttl", "2s", "--", "sleep", "30"])
        .stderr(Stdio::null())
        .start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:restart")));
    redis.restart_empty();
    let restarted = Instant::now();
    let status = wait_bounded(&mut wrapper, LIMIT);
    assert_eq!(status.code(), Some(125));
    assert!(
        restarted.elapsed() < Duration::from_secs(3),
        "detected at the next renewal, took {:?}",
        restarted.elapsed()
    );
    assert!(!redis.exists(b"lock:restart"), "nothing re-created the key");
}

#[test]
fn the_command_dies_with_the_wrapper_and_the_key_is_released() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    // A background job too: the parent-death signal reaches only the command itself; the
    // guardian takes care of the rest of its group.
    // A 30 s lease: gone long before it ends, the key was released, not left to expire.
    let (mut wrapper, pid) = spawn_recorded(
        &redis,
        &["-k", "lock:orphan", "--ttl", "30s"],
        "sleep 100 & exec sleep 100",
        &pidfile,
    );
    assert!(wait_until(Duration::from_secs(5), || group_members(pid).len() == 2));
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    assert!(wait_until(Duration::from_secs(5), || !process_alive(pid)), "the command outlived its wrapper");
    assert!(
        wait_until(Duration::from_secs(5), || group_members(pid).is_empty()),
        "its background job outlived the wrapper: {:?}",
        group_members(pid)
    );
    // The guardian gave it back once the group was dead.
    assert!(
        wait_until(Duration::from_secs(10), || !redis.exists(b"lock:orphan")),
        "the guardian released the key"
    );
}

#[test]
fn a_paused_wrappers_command_is_killed_by_its_lease_deadline() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    // A 5 s lease: the command must die 57 ms (the drift and the guardian's 5 ms) before the
    // key can expire, a margin wider than a loaded machine's wake-up of this test.
    let (mut wrapper, pid) =
        spawn_recorded(&redis, &["-k", "lock:paused", "--ttl", "5s"], "exec sleep 100", &pidfile);
    let wrapper_pid = Pid::from_raw(wrapper.id() as i32);
    kill(wrapper_pid, Signal::SIGSTOP).unwrap();
    // The key's expiry once renewals have stopped (a renewal that lands later only extends it).
    let expires = |last: i128| -> i128 {
        let at = if server_version().0 < 7 {
            // No PEXPIRETIME before Redis 7.0: the server's clock and the time left.
            let now: Vec<String> = redis.cmd(&[b"TIME"]);
            let now_ms = now[0].parse::<i64>().unwrap() * 1000 + now[1].parse::<i64>().unwrap() / 1000;
            now_ms + redis.cmd::<i64>(&[b"PTTL", b"lock:paused"])
        } else {
            redis.cmd::<i64>(&[b"PEXPIRETIME", b"lock:paused"])
        };
        i128::from(at).max(last)
    };
    let expiry = expires(0);
    // The guardian stops the command by the lease deadline, the wrapper stopped.
    let died = death_time(pid, Duration::from_secs(15));
    let expiry = expires(expiry);
    assert!(expiry > 0, "the key had an expiry");
    assert!(died <= expiry, "the command died {} ms after the key could expire", died - expiry);
    kill(wrapper_pid, Signal::SIGCONT).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(125));
}

#[test]
fn max_runtime_stops_the_command_with_124() {
    let redis = RedisServer::start();
    let r = run(
        redlock(&redis).args(["-q", "-k", "lock:max", "--max-runtime", "1s", "--", "sleep", "30"]),
        LIMIT,
    );
    assert_eq!(r.code, 124, "{}", r.stderr);
    // After 1 s, and then at once (with room for a loaded machine).
    assert!(r.elapsed >= Duration::from_millis(900) && r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
    assert!(!redis.exists(b"lock:max"));
    // One line says why, even with -q.
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("--max-runtime"), "{lines:?}");
}

#[test]
fn on_lost_ignore_keeps_the_command_running_and_says_so() {
    let redis = RedisServer::start();
    let dir = tmp();
    let done = file(&dir, "done");
    let mut wrapper = redlock(&redis)
        .args([
            "-k",
            "lock:ignore",
            "--ttl",
            "1s",
            "--on-lost",
            "ignore",
            "--",
            "sh",
            "-c",
            "sleep 2; touch \"$DONE\"; exit 3",
        ])
        .env("DONE", &done)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:ignore")));
    redis.cmd::<i64>(&[b"DEL", b"lock:ignore"]);
    let out = wait_output(&mut wrapper, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "the command's own status: {stderr}");
    assert!(done.exists(), "the command ran to the end");
    assert!(stderr.contains("WITHOUT the lock"), "{stderr}");
}

#[test]
fn timing_flags_that_leave_no_room_are_usage_errors() {
    let redis = RedisServer::start();
    for (args, mention) in [
        (&["--ttl", "1s", "--renew-every", "900ms"][..], "--renew-every"),
        (&["--ttl", "1s", "--kill-grace", "1s"][..], "--kill-grace"),
        (&["--ttl", "2ms"][..], "--ttl"),
        (&["--renew-every", "0"][..], "--renew-every"),
        (&["--kill-grace", "5x"][..], "--kill-grace"),
        (&["--max-runtime", "0s"][..], "--max-runtime"),
        (&["--on-lost", "bogus"][..], "--on-lost"),
    ] {
        let r = run(redlock(&redis).args(["-k", "k"]).args(args).args(["--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(mention), "{args:?} names {mention}: {}", r.stderr);
    }
}

#[test]
fn a_ttl_too_short_to_renew_is_a_usage_error_naming_the_shortest_that_works() {
    let redis = RedisServer::start();
    // With the default --renew-every (ttl/3) and --kill-grace (ttl/6), 49ms is the shortest.
    for ttl in ["5ms", "20ms", "34ms", "48ms"] {
        let r = run(redlock(&redis).args(["-k", "lock:short", "--ttl", ttl, "--", "true"]), LIMIT);
        assert_eq!(r.code, 64, "--ttl {ttl}: {}", r.stderr);
        assert!(
            r.stderr.contains("the shortest --ttl that works with the other flags as given is 49ms"),
            "{}",
            r.stderr
        );
    }
    // Given flags stay as given, the defaults follow the TTL: at 1.12s, 900ms + 186.67ms + 20ms
    // is just under 1.12s − 13.2ms.
    let r = run(
        redlock(&redis).args(["-k", "lock:short", "--ttl", "1s", "--renew-every", "900ms", "--", "true"]),
        LIMIT,
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("is 1s 120ms"), "{}", r.stderr);
    assert_eq!(redis.cmd::<i64>(&[b"DBSIZE"]), 0, "nothing was taken by a rejected run");
    let r = run(
        redlock(&redis).args([
            "-k",
            "lock:short",
            "--ttl",
            "1s 120ms",
            "--renew-every",
            "900ms",
            "--",
            "true",
        ]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "the TTL named works: {}", r.stderr);

    // The shortest outlives several renewals (one every 16.3 ms) with its command. A 49 ms lease
    // cannot outlast the load spikes of the whole suite on 2 cores (it is then rightly stopped,
    // 125): it gets three tries.
    let mut tries = Vec::new();
    for _ in 0..3 {
        let r = run(
            redlock(&redis).args(["-v", "-k", "lock:short", "--ttl", "49ms", "--", "sleep", "0.15"]),
            LIMIT,
        );
        tries.push((r.code, r.stderr));
        if tries.last().is_some_and(|(code, _)| *code == 0) {
            break;
        }
        assert_eq!(tries.last().map(|t| t.0), Some(125), "{tries:?}");
    }
    assert_eq!(tries.last().map(|t| t.0), Some(0), "{tries:?}");
    assert!(!redis.exists(b"lock:short"), "released");
}

/// Polls PTTL of `key` until it jumps up (a renewal just happened); bounded.
fn wait_for_renewal(redis: &RedisServer, key: &str) {
    let conn = &mut redis.conn();
    let mut last: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
    for _ in 0..10_000 {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        if pttl > last + 100 {
            return;
        }
        last = pttl;
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("saw no renewal of {key} within 10000 samples");
}

#[test]
fn after_a_restart_without_persistence_the_overlap_is_bounded_by_renew_every_plus_kill_grace() {
    let mut redis = RedisServer::start();
    let dir = tmp();
    let (pidfile, b_started, a_termed) = (file(&dir, "pid"), file(&dir, "b-started"), file(&dir, "a-termed"));
    // A's command outlives SIGTERM (it only notes when it came): only SIGKILL, --kill-grace
    // after the SIGTERM, ends it. --ttl 3s: --renew-every 1s, --kill-grace 500ms.
    let (mut a, pgid) = spawn_recorded(
        &redis,
        &["-k", "lock:overlap", "--ttl", "3s"],
        &format!("trap 'date +%s%N > {}' TERM; while :; do sleep 0.05; done", a_termed.display()),
        &pidfile,
    );
    let mut b = redlock(&redis)
        .args(["-k", "lock:overlap", "--ttl", "3s", "--wait", "20s", "--", "sh", "-c"])
        .arg("date +%s%N > \"$STARTED\"; sleep 1")
        .env("STARTED", &b_started)
        .stderr(Stdio::null())
        .start();
    // The worst moment: right after A's renewal, so that A notices only at the next one.
    wait_for_renewal(&redis, "lock:overlap");
    redis.restart_empty();
    let deadline = Instant::now() + LIMIT;
    while !group_members(pgid).is_empty() {
        assert!(Instant::now() < deadline, "A's command outlived {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    let a_dead = unix_ms(SystemTime::now());
    let b_start = read_when_present(&b_started, LIMIT).trim().parse::<i128>().unwrap() / 1_000_000;
    let overlap = a_dead - b_start;
    eprintln!("overlap {overlap} ms");
    assert_eq!(wait_bounded(&mut a, LIMIT).code(), Some(125));
    assert_eq!(wait_bounded(&mut b, LIMIT).code(), Some(0));
    // renew-every + kill-grace = 1.5 s, plus a generous margin for retries and scheduling.
    assert!(overlap < 1500 + 500, "A's command ran {overlap} ms into B's");
    // The kill-grace part is real: the command that outlived SIGTERM lived on for --kill-grace
    // (its trap runs once its current `sleep 0.05` ends). How much of that overlapped B's run
    // depends on how soon B took the lock after the restart, which is not what this checks.
    let termed = read_when_present(&a_termed, LIMIT).trim().parse::<i128>().unwrap() / 1_000_000;
    assert!(a_dead - termed > 500 - 60, "SIGKILL {} ms after SIGTERM", a_dead - termed);
}

/// A given Redis timeout must fit in the renewal slack too: the shortest TTL named then makes
/// room for it, and works.
#[test]
fn the_shortest_ttl_named_makes_room_for_a_given_timeout() {
    let redis = RedisServer::start();
    let r = run(
        redlock(&redis).args([
            "-k",
            "lock:short-timeout",
            "--ttl",
            "1ms",
            "--connect-timeout",
            "1s",
            "--",
            "true",
        ]),
        Duration::from_secs(10),
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    let named = r.stderr.split("as given is ").nth(1).expect("names the shortest --ttl");
    let shortest = named.split(';').next().unwrap().trim().to_owned();
    let r = run(
        redlock(&redis).args([
            "-k",
            "lock:short-timeout",
            "--ttl",
            &shortest,
            "--connect-timeout",
            "1s",
            "--",
            "true",
        ]),
        Duration::from_secs(10),
    );
    assert_eq!(r.code, 0, "--ttl {shortest}: {}", r.stderr);
    let r = run(
        redlock(&redis).args([
            "-k",
            "lock:short-timeout",
            "--ttl",
            "5s",
            "--connect-timeout",
            "5s",
            "--",
            "true",
        ]),
        Duration::from_secs(10),
    );
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("--connect-timeout (5s) must be shorter"), "{}", r.stderr);
    assert!(r.stderr.contains("the shortest that works"), "{}", r.stderr);
}

/// The guardian keeps nothing open but its pipe from the wrapper, the wrapper's stderr (to say
/// what it did) and its releaser's ticket: not stdout (a reader waiting for EOF must get it),
/// and not a descriptor above 1023 that the wrapper inherited.
#[test]
fn the_guardian_keeps_no_descriptor_but_its_pipe_stderr_and_ticket() {
    use std::os::unix::process::CommandExt;
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let inherited = std::fs::File::open("/dev/null").unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&inherited);
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:fds", "--ttl", "2s", "--"]).args(recorded("sleep 30")).env("PIDFILE", &pidfile);
    // SAFETY: between fork and exec only dup2(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if nix::libc::dup2(raw, 1500) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut wrapper = cmd.stdout(Stdio::piped()).start();
    let pgid: i32 = recorded_pid(&pidfile);
    let guardian = find_guardian(wrapper.id(), pgid);
    let fds_of = |g: i32| {
        let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{g}/fd"))
            .map(|d| d.filter_map(|e| Some(e.ok()?.file_name().to_str()?.to_owned())).collect())
            .unwrap_or_default();
        fds.sort();
        fds
    };
    // The guardian closes what it inherited as it starts, which on a loaded machine may be
    // after the command has started: what it keeps is what it holds once settled.
    let fds: Option<Vec<String>> = guardian.map(|g| {
        wait_until(Duration::from_secs(5), || fds_of(g) == ["0", "2", "3"]);
        fds_of(g)
    });
    let ticket = guardian.and_then(|g| std::fs::read_link(format!("/proc/{g}/fd/3")).ok());
    // Nothing is left running, whatever the assertion says.
    kill(Pid::from_raw(-pgid), Signal::SIGKILL).unwrap();
    let _ = wait_bounded(&mut wrapper, LIMIT);
    assert_eq!(fds.expect("found the guardian"), ["0", "2", "3"], "the guardian's descriptors");
    assert!(ticket.is_some_and(|t| t.to_string_lossy().starts_with("/memfd:redlock-run-ticket")));
}

/// The guardian of a wrapper whose command leads group `pgid`: the wrapper's child that is not
/// the command (waited for up to 5 s).
fn find_guardian(wrapper: u32, pgid: i32) -> Option<i32> {
    let children = |parent: u32| -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().is_some_and(|stat| {
                    let after = &stat[stat.rfind(')').unwrap() + 2..];
                    after.split(' ').nth(1) == Some(&parent.to_string())
                })
            })
            .collect()
    };
    let mut guardian = None;
    wait_until(Duration::from_secs(5), || {
        guardian = children(wrapper).into_iter().find(|p| *p != pgid);
        guardian.is_some()
    });
    guardian
}

/// `pkill redlock-run` signals the guardian too: it ignores the signal and stays, so that a
/// wrapper killed afterwards (while it stops its command, or by an impatient operator) still
/// takes its command's whole group with it.
#[test]
fn the_guardian_outlives_signals_meant_for_every_wrapper() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    // The command ignores SIGTERM and has a background job: only the guardian can end that job
    // once the wrapper is SIGKILLed.
    let (mut wrapper, pgid) = spawn_recorded(
        &redis,
        &["-k", "lock:pkill", "--ttl", "60s", "--kill-grace", "30s"],
        "trap '' TERM; sleep 100 & while :; do sleep 0.1; done",
        &pidfile,
    );
    let guardian = find_guardian(wrapper.id(), pgid).expect("found the guardian");
    for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        kill(Pid::from_raw(guardian), sig).unwrap();
    }
    kill(Pid::from_raw(wrapper.id() as i32), Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let guardian_alive = process_alive(guardian);
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    let gone = wait_until(Duration::from_secs(2), || group_members(pgid).is_empty());
    // Nothing is left running, whatever the assertions say.
    let _ = kill(Pid::from_raw(-pgid), Signal::SIGKILL);
    assert!(guardian_alive, "the guardian ended on a signal meant for the wrapper");
    assert!(gone, "the command's group outlived its SIGKILLed wrapper: {:?}", group_members(pgid));
}

/// docs/GUIDE.md: if the wrapper dies, the kernel kills the command (parent-death signal), even when
/// nothing else is left to do it (here the guardian was killed first).
#[test]
fn the_command_dies_with_its_wrapper_even_without_the_guardian() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let (mut wrapper, pid) =
        spawn_recorded(&redis, &["-k", "lock:pdeathsig", "--ttl", "2s"], "exec sleep 100", &pidfile);
    let guardian = find_guardian(wrapper.id(), pid).expect("found the guardian");
    kill(Pid::from_raw(guardian), Signal::SIGKILL).unwrap();
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    let died = wait_until(Duration::from_secs(2), || !process_alive(pid));
    let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
    assert!(died, "the command outlived its wrapper");
}

/// A guardian killed while the command runs is replaced at once, and the run says so: a wrapper
/// SIGKILLed afterwards still takes its command's whole group with it (the parent-death signal
/// alone reaches only the command, not its background job).
#[test]
fn a_guardian_killed_while_the_command_runs_is_replaced() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (pidfile, log) = (file(&dir, "pid"), file(&dir, "stderr"));
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:guardian-killed", "--ttl", "60s", "--"])
        .args(recorded("sleep 100 & while :; do sleep 0.1; done"))
        .env("PIDFILE", &pidfile)
        .stderr(std::fs::File::create(&log).unwrap())
        .start();
    let pgid = recorded_pid(&pidfile);
    assert!(wait_until(Duration::from_secs(2), || group_members(pgid).len() >= 2), "the job runs");
    let first = find_guardian(wrapper.id(), pgid).expect("found the guardian");
    kill(Pid::from_raw(first), Signal::SIGKILL).unwrap();
    let mut second = None;
    wait_until(Duration::from_secs(5), || {
        second = find_guardian(wrapper.id(), pgid)
            .filter(|&g| g != first && process_state(g as u32).as_deref() != Some("Z"));
        second.is_some()
    });
    // The warning is written by the wrapper's logging thread: read before the SIGKILL.
    let said = wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("guardian")
    });
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    let gone = wait_until(Duration::from_secs(2), || group_members(pgid).is_empty());
    let _ = kill(Pid::from_raw(-pgid), Signal::SIGKILL);
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(second.is_some(), "no guardian took the killed one's place: {stderr}");
    assert!(said, "the run says its guardian was replaced: {stderr}");
    assert!(gone, "the command's group outlived its SIGKILLed wrapper: {:?}", group_members(pgid));
}

/// A waiter's guardian killed while it waits (a `pkill -KILL` matching it) is replaced when the
/// command starts: the run goes on, guarded, instead of ending with 126 ("Broken pipe" from the
/// dead guardian's socket), even when the guardian had said it runs before it was killed.
#[test]
fn a_waiters_guardian_killed_while_it_waits_is_replaced() {
    let redis = RedisServer::start();
    let dir = tmp();
    let waiter_pid = file(&dir, "waiter");
    let mut holder = redlock(&redis).args(["-k", "lock:regard", "--", "sleep", "0.7"]).start();
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:regard")));
    let mut waiter = redlock(&redis)
        .args(["-k", "lock:regard", "--ttl", "5s", "--wait", "10s", "--"])
        .args(recorded("sleep 100 & exec sleep 100"))
        .env("PIDFILE", &waiter_pid)
        .stderr(Stdio::piped())
        .start();
    let early = find_guardian(waiter.id(), -1).expect("a run starts its guardian as it starts");
    // Killed once it has said it runs: exec'd, and asleep waiting for news from its wrapper.
    let said = wait_until(Duration::from_secs(5), || {
        let cmdline = std::fs::read(format!("/proc/{early}/cmdline")).unwrap_or_default();
        cmdline.starts_with(b"redlock-run: guardian\0") && process_state(early as u32).as_deref() == Some("S")
    });
    kill(Pid::from_raw(early), Signal::SIGKILL).unwrap();
    assert!(said, "the guardian was exec'd and waits");
    assert!(wait_bounded(&mut holder, LIMIT).success());
    let started = wait_until(Duration::from_secs(10), || waiter_pid.exists());
    if !started {
        let o = wait_output(&mut waiter, LIMIT);
        panic!("the command did not start: {:?} {}", o.status, String::from_utf8_lossy(&o.stderr));
    }
    let pid: i32 = read_when_present(&waiter_pid, Duration::from_secs(5)).trim().parse().unwrap();
    assert!(wait_until(Duration::from_secs(2), || group_members(pid).len() == 2));
    // Guarded: a SIGKILLed wrapper takes the command's whole group with it.
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    let gone = wait_until(Duration::from_secs(2), || group_members(pid).is_empty());
    let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
    assert!(gone, "the command's group outlived its wrapper: {:?}", group_members(pid));
}

/// A run starts its guardian as it starts (exec'd, it is ready by the time the lock is handed
/// over). That guardian then guards the command like any other: a SIGKILLed waiter-turned-
/// holder takes its command's whole group with it. A waiter that gives up leaves nothing behind.
#[test]
fn a_waiters_guardian_guards_its_command_and_leaves_with_it() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (holder_pid, waiter_pid) = (file(&dir, "holder"), file(&dir, "waiter"));
    let mut holder = redlock(&redis)
        .args(["-k", "lock:early", "--ttl", "5s", "--"])
        .args(recorded("sleep 0.7"))
        .env("PIDFILE", &holder_pid)
        .start();
    read_when_present(&holder_pid, Duration::from_secs(5));
    // Gives up before the holder is done: nothing of it may stay.
    let mut quitter = redlock(&redis)
        .args(["-k", "lock:early", "--wait", "200ms", "--", "true"])
        .stderr(Stdio::null())
        .start();
    // Its guardian, started with the run.
    let early = find_guardian(quitter.id(), -1).expect("a run starts its guardian as it starts");
    assert_eq!(wait_bounded(&mut quitter, LIMIT).code(), Some(75));
    assert!(wait_until(Duration::from_secs(2), || !process_alive(early)), "the guardian outlived its waiter");
    let mut waiter = redlock(&redis)
        .args(["-k", "lock:early", "--ttl", "5s", "--wait", "10s", "--"])
        .args(recorded("sleep 100 & exec sleep 100"))
        .env("PIDFILE", &waiter_pid)
        .start();
    let pid: i32 = read_when_present(&waiter_pid, Duration::from_secs(10)).trim().parse().unwrap();
    assert!(wait_until(Duration::from_secs(2), || group_members(pid).len() == 2));
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    let gone = wait_until(Duration::from_secs(2), || group_members(pid).is_empty());
    let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
    assert!(wait_bounded(&mut holder, LIMIT).success());
    assert!(gone, "the waiter's command group outlived it: {:?}", group_members(pid));
}

/// The exec'd guardians of wrapper `wrapper`, by their command line (docs/GUIDE.md § What
/// the command gets: `redlock-run: guardian WRAPPER-PID FD`), wherever they were re-parented.
fn execd_guardians_of(wrapper: u32) -> Vec<i32> {
    let prefix = format!("redlock-run: guardian\0{wrapper}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(prefix.as_bytes()))
        })
        .collect()
}

/// The guardian is a process of its own, exec'd anew: it shares no memory with its wrapper (the
/// OOM killer kills every process that shares the memory of the one it picks, and would take
/// it along with the wrapper), `ps` names it for what it is, and `pkill redlock-run` finds it.
/// (A waiting run execs it in every build; see docs/GUIDE.md § What the command gets.)
#[test]
fn the_guardian_is_a_process_of_its_own_named_for_what_it_is() {
    /// kcmp(2)'s KCMP_VM: 0 when two processes share one address space.
    const KCMP_VM: i64 = 1;
    let redis = RedisServer::start();
    let _: () = redis.cmd(&[b"SET", b"lock:own", b"someone-else", b"PX", b"60000"]);
    let mut waiter =
        redlock(&redis).args(["-k", "lock:own", "--wait", "30s", "--", "true"]).stderr(Stdio::null()).start();
    let guardian = find_guardian(waiter.id(), -1);
    let cmdline = |g: i32| {
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{g}/cmdline")).unwrap_or_default())
            .replace('\0', " ")
    };
    let comm = |g: i32| std::fs::read_to_string(format!("/proc/{g}/comm")).unwrap_or_default();
    let seen = guardian.map(|g| {
        // Exec'd through /proc/self/exe, it is named "exe" until its first lines rename it.
        wait_until(Duration::from_secs(5), || {
            cmdline(g).starts_with("redlock-run: guardian") && comm(g).trim() == "redlock-run"
        });
        let comm = comm(g);
        // SAFETY: kcmp only compares two processes' kernel objects.
        let shared = unsafe { libc::syscall(libc::SYS_kcmp, g, waiter.id() as i32, KCMP_VM, 0, 0) };
        (cmdline(g), comm, shared)
    });
    let _ = waiter.kill();
    let _ = waiter.wait();
    let (cmdline, comm, shared) = seen.expect("found the guardian");
    assert!(cmdline.starts_with(&format!("redlock-run: guardian {} ", waiter.id())), "{cmdline:?}");
    assert_eq!(comm.trim(), "redlock-run");
    assert!(shared > 0, "kcmp(KCMP_VM) = {shared}: the guardian shares its wrapper's memory");
}

/// The exec'd guardian may run on the CPUs its wrapper may run on: it is started on another CPU
/// than the wrapper's (where the kernel would queue it behind the wrapper), and given the
/// wrapper's set back once it runs, before the command starts. Here a run that waits, which
/// execs its guardian in every build, under strace where there is one, which holds each of the
/// wrapper's `sched_setaffinity` calls back by 20 ms: the guardian's start never overtakes them.
#[test]
fn the_guardian_may_run_where_its_wrapper_may() {
    let cpus = |pid: i32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_owned())
    };
    let mine = cpus(std::process::id() as i32).expect("Cpus_allowed_list");
    if !mine.contains([',', '-']) {
        return; // one CPU: nowhere else to start the guardian
    }
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let _: () = redis.cmd(&[b"SET", b"lock:cpus", b"someone-else", b"PX", b"300"]);
    let slow = ["strace", "-o", "/dev/null", "-e", "trace=sched_setaffinity"];
    let slow = Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success()).then_some(slow);
    let mut cmd = Command::new(slow.map_or(bin(), |s| s[0]));
    default_signals(&mut cmd);
    if let Some(slow) = slow {
        cmd.args(&slow[1..]).args(["-e", "inject=sched_setaffinity:delay_enter=20000", bin()]);
    }
    let mut waiter = cmd
        .args(["--redis-url", &redis.url(), "-k", "lock:cpus", "--wait", "30s", "--"])
        .args(recorded("exec sleep 100"))
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null())
        .start();
    let pgid = recorded_pid(&pidfile);
    // The command's parent: the wrapper (strace's child, under strace).
    let stat = std::fs::read_to_string(format!("/proc/{pgid}/stat")).unwrap_or_default();
    let wrapper = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<i32>().ok());
    let seen = wrapper.and_then(|w| Some((cpus(find_guardian(w as u32, pgid)?), cpus(w))));
    if let Some(w) = wrapper {
        let _ = kill(Pid::from_raw(w), Signal::SIGKILL);
    }
    let _ = waiter.kill();
    let _ = waiter.wait();
    let _ = kill(Pid::from_raw(-pgid), Signal::SIGKILL);
    let (guardian, wrapper) = seen.expect("found the wrapper and its guardian");
    assert_eq!(wrapper.as_deref(), Some(mine.as_str()));
    assert_eq!(guardian, wrapper, "the guardian's CPUs once the command runs");
}

/// A run that finds the lock busy, at once or after waiting, leaves no guardian behind (it may
/// have started one: with the run in a static build, when it began to wait in every build).
#[test]
fn a_run_that_finds_the_lock_busy_leaves_no_guardian_behind() {
    let redis = RedisServer::start();
    let _: () = redis.cmd(&[b"SET", b"lock:skipped", b"someone-else", b"PX", b"30000"]);
    for wait in ["0s", "150ms", "0s", "150ms"] {
        let mut run = redlock(&redis)
            .args(["-k", "lock:skipped", "--wait", wait, "--", "true"])
            .stderr(Stdio::null())
            .start();
        let pid = run.id();
        assert_eq!(wait_bounded(&mut run, LIMIT).code(), Some(75));
        assert!(
            wait_until(Duration::from_secs(2), || execd_guardians_of(pid).is_empty()),
            "its guardian stayed: {:?}",
            execd_guardians_of(pid)
        );
    }
}

/// Where the guardian cannot be exec'd (here /proc is hidden, so /proc/self/exe is missing), one
/// is forked right before the command instead, and guards it the same: the SIGKILLed wrapper's
/// command and its background job die with it.
#[test]
fn where_the_guardian_cannot_be_execd_a_forked_one_guards_the_command() {
    if !can_unshare(&["--mount"]) {
        return;
    }
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut wrapper = Command::new("unshare")
        .args(["--mount", "sh", "-c", "mount -t tmpfs none /proc && exec \"$0\" \"$@\"", bin()])
        .args(["--redis-url", &redis.url(), "-k", "lock:noexec", "--ttl", "5s", "--"])
        .args(recorded("sleep 100 & exec sleep 100"))
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null())
        .start();
    let pgid = recorded_pid(&pidfile);
    let members = wait_until(Duration::from_secs(2), || group_members(pgid).len() == 2);
    // unshare and sh exec'd the wrapper: it has the pid of the process spawned here.
    let cmdline = find_guardian(wrapper.id(), pgid).map(|g| {
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{g}/cmdline")).unwrap_or_default()).into_owned()
    });
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    let gone = wait_until(Duration::from_secs(2), || group_members(pgid).is_empty());
    let _ = kill(Pid::from_raw(-pgid), Signal::SIGKILL);
    assert!(members, "the command and its job run");
    let cmdline = cmdline.expect("found the guardian");
    assert!(cmdline.starts_with(bin()), "a forked guardian has its wrapper's command line: {cmdline:?}");
    assert!(gone, "the command's group outlived its SIGKILLed wrapper: {:?}", group_members(pgid));
}

/// A wrapper reaps its guardian before it exits: none is left a zombie for an init that never
/// reaps (a container's PID 1 that is a script), whether the run ran its command or found the
/// lock busy, or was no run after all (`--help`, a usage error: a static build starts the
/// guardian before it parses the command line). The wrappers run under a copy of this test that is a subreaper and reaps only
/// them, so that an unreaped guardian would end up its zombie child.
#[test]
fn no_guardian_is_left_a_zombie() {
    if let Some(url) = std::env::var_os("ZOMBIE_TEST_REDIS_URL") {
        return zombie_counting_parent(&url.to_string_lossy());
    }
    let redis = RedisServer::start();
    let _: () = redis.cmd(&[b"SET", b"lock:zbusy", b"someone-else", b"PX", b"60000"]);
    let mut parent = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lease::no_guardian_is_left_a_zombie", "--nocapture", "--test-threads", "1"])
        .env("ZOMBIE_TEST_REDIS_URL", redis.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    let out = wait_output(&mut parent, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("statuses: [0, 0, 75, 75, 0, 64]"), "{stdout}");
    assert!(stdout.contains("zombies: 0"), "{stdout}");
}

/// The counting parent of `no_guardian_is_left_a_zombie`: runs two wrappers that run their
/// command, two that find the lock busy, one asked for `--help` and one with a usage error, one
/// after another, then counts its zombie children.
fn zombie_counting_parent(url: &str) {
    nix::sys::prctl::set_child_subreaper(true).expect("become a subreaper");
    let runs: [&[&str]; 6] = [
        &["-k", "lock:zfree", "--", "true"],
        &["-k", "lock:zfree", "--", "true"],
        &["-k", "lock:zbusy", "--", "true"],
        &["-k", "lock:zbusy", "--", "true"],
        &["--help"],
        &["-k", "lock:zfree", "--no-such-option", "--", "true"],
    ];
    let statuses: Vec<i32> = runs
        .iter()
        .map(|args| {
            let mut run = Command::new(bin())
                .args(["--redis-url", url])
                .args(*args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .start();
            wait_bounded(&mut run, LIMIT).code().unwrap_or(-1)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let me = std::process::id().to_string();
    let zombies = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            let after: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
            after.first() == Some(&"Z") && after.get(1) == Some(&me.as_str())
        })
        .count();
    println!("statuses: {statuses:?}");
    println!("zombies: {zombies}");
}

/// Out of descriptors, the guardian may not be startable while the rest of the run is: then
/// the command is not run (126), rather than run with nothing to kill what it starts if the
/// wrapper is killed. Swept over how many descriptors the wrapper inherits under a limit of 64,
/// so that one of them leaves room for everything but the guardian. A static build starts its
/// guardian before anything else takes a descriptor: no count can leave room for all but it,
/// and the sweep only finds the command never run unguarded.
#[test]
fn without_a_guardian_the_command_is_not_run() {
    let redis = RedisServer::start();
    let dir = tmp();
    let mut refused = 0;
    for taken in 30..61 {
        let marker = file(&dir, &format!("ran-{taken}"));
        let mut cmd = redlock(&redis);
        cmd.args(["-k", "lock:fds-full", "--", "sh", "-c", "echo ran > \"$MARKER\""]).env("MARKER", &marker);
        with_descriptors(&mut cmd, 64, taken);
        let r = run(&mut cmd, LIMIT);
        if r.stderr.contains("guardian") {
            assert_eq!(r.code, 126, "{taken} taken: {}", r.stderr);
            assert!(!marker.exists(), "{taken} taken: the command ran without a guardian: {}", r.stderr);
            assert!(r.stderr.contains("cannot start the guardian"), "{}", r.stderr);
            refused += 1;
        }
    }
    let version = run(Command::new(bin()).arg("--version"), LIMIT).stdout;
    let static_build = String::from_utf8_lossy(&version).contains("musl");
    assert!(refused > 0 || static_build, "no descriptor count left room for everything but the guardian");
}

/// Started with nearly every descriptor taken (a parent that leaks them), a run fails with a
/// diagnosis, whichever part of its set-up runs out first: never a panic (tokio's signal
/// handling aborted when it could not make its socket pair), never the command unguarded.
#[test]
fn out_of_descriptors_at_start_a_run_fails_with_a_message_not_a_panic() {
    let redis = RedisServer::start();
    let dir = tmp();
    let mut statuses = std::collections::BTreeMap::new();
    // Up to 3 free of 64: with none left, the dynamic loader of a glibc build fails before the
    // wrapper's first instruction (127, its own message).
    for taken in 50..61 {
        let marker = file(&dir, &format!("ran-{taken}"));
        let mut cmd = redlock(&redis);
        cmd.args(["-k", "lock:fds-start", "--", "sh", "-c", "echo ran > \"$MARKER\""]).env("MARKER", &marker);
        with_descriptors(&mut cmd, 64, taken);
        let r = run(&mut cmd, LIMIT);
        assert!(!r.stderr.contains("panicked"), "{taken} taken: {}", r.stderr);
        assert!([0, 70, 126].contains(&r.code), "{taken} taken: {}: {}", r.code, r.stderr);
        assert_eq!(marker.exists(), r.code == 0, "{taken} taken: {}", r.stderr);
        if r.code != 0 {
            assert!(r.stderr.contains("error:"), "{taken} taken: says why: {}", r.stderr);
        }
        *statuses.entry(r.code).or_insert(0) += 1;
    }
    println!("statuses: {statuses:?}");
    assert!(statuses.contains_key(&70), "no count of descriptors ran out in the set-up: {statuses:?}");
    assert_eq!(redis.cmd::<i64>(&[b"EXISTS", b"lock:fds-start"]), 0, "no lock left behind");
}

/// Started through the dynamic loader (`ld.so bin() …`), /proc/self/exe is the loader, which
/// cannot be the guardian: its complaint stays out of the run's stderr, and a forked guardian
/// takes its place.
#[test]
fn started_through_the_dynamic_loader_the_run_is_quiet_and_guarded() {
    let loader = std::path::Path::new("/lib64/ld-linux-x86-64.so.2");
    if !loader.exists() {
        eprintln!("skipped: no x86-64 dynamic loader here");
        return;
    }
    let redis = RedisServer::start();
    let r = run(
        Command::new(loader).arg(bin()).args(["--redis-url", &redis.url(), "-k", "lock:ldso", "--", "true"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("error while loading"), "{}", r.stderr);
}
