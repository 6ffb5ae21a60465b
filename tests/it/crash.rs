//! A wrapper that dies (SIGKILL, the OOM killer) or cannot act (stopped alone): its guardian
//! kills the command's group, gives the lock back once nothing of it can run, and never lets
//! the command outlive the lease (docs/GUIDE.md § What the command gets).

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);
/// Far below any TTL used here (30 s): a key gone within this was released, not expired.
const AT_ONCE: Duration = Duration::from_secs(2);

/// A wrapper with `flags` around a command that records its pid and keeps a background job in
/// its group; returns it, stderr piped, once the command runs with its job.
fn wrapper_with_job(redis: &RedisServer, flags: &[&str], dir: &tempfile::TempDir) -> (Process, i32) {
    let pidfile = file(dir, "pid");
    let wrapper = redlock(redis)
        .args(flags)
        .args(["--", "sh", "-c", "echo $$ > \"$PIDFILE\"; sleep 100 & exec sleep 100"])
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::piped())
        .start();
    let pid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || group_members(pid).len() == 2),
        "the command and its job run"
    );
    (wrapper, pid)
}

#[test]
fn a_killed_wrapper_frees_its_lock_at_once_whatever_its_kind() {
    let redis = RedisServer::start();
    // SIGABRT: how the release build ends on a panic (`panic = "abort"`).
    for (flags, signal) in [
        (&["-k", "lock:crash"][..], Signal::SIGKILL),
        (&["-k", "lock:crash", "--shared"], Signal::SIGKILL),
        (&["-k", "lock:crash", "--limit", "2"], Signal::SIGKILL),
        (&["-k", "lock:crash", "-k", "lock:crash-too", "--note", "pod 7"], Signal::SIGKILL),
        (&["-k", "lock:crash"], Signal::SIGABRT),
    ] {
        let dir = tmp();
        let (mut wrapper, pid) = wrapper_with_job(&redis, flags, &dir);
        assert!(redis.exists(b"lock:crash"), "{flags:?}: held");
        kill(Pid::from_raw(wrapper.id() as i32), signal).unwrap();
        wrapper.wait().unwrap();
        let killed = Instant::now();
        assert!(
            wait_until(AT_ONCE, || group_members(pid).is_empty()
                && !redis.exists(b"lock:crash")
                && !redis.exists(b"lock:crash-too")),
            "{flags:?}: the group ({:?}) and the lock are gone at once",
            group_members(pid)
        );
        let took = killed.elapsed();
        let mut stderr = String::new();
        std::io::Read::read_to_string(wrapper.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(stderr.contains("died; its command's processes were killed"), "{flags:?}: {stderr}");
        // The releaser's lines name the dead run as its own did, its note too.
        assert_eq!(stderr.contains("note=\"pod 7\""), flags.contains(&"--note"), "{flags:?}: {stderr}");
        eprintln!("{flags:?}: free {took:?} after the wrapper's SIGKILL");
        let next = run(redlock(&redis).args(flags).args(["--", "true"]), LIMIT);
        assert_eq!(next.code, 0, "{flags:?}: {}", next.stderr);
    }
}

#[test]
fn a_killed_redlock_wrapper_frees_its_lock_on_every_node() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut cmd = wrapper();
    for node in &nodes {
        cmd.arg("--redis-url").arg(node.url());
    }
    let mut wrapper = cmd
        .args(["-k", "lock:crash-quorum", "--", "sh", "-c", "echo $$ > \"$PIDFILE\"; exec sleep 100"])
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null())
        .start();
    let pid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    assert!(nodes.iter().all(|n| n.exists(b"lock:crash-quorum")));
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    assert!(
        wait_until(AT_ONCE, || !process_alive(pid) && nodes.iter().all(|n| !n.exists(b"lock:crash-quorum"))),
        "released on every node"
    );
}

/// The guardian's release is a compare-and-delete: a lock that is no longer the dead run's
/// stays whoever's it is.
#[test]
fn a_killed_wrappers_guardian_never_releases_another_runs_lock() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (mut wrapper, pid) = wrapper_with_job(&redis, &["-k", "lock:crash-other"], &dir);
    redis.cmd::<()>(&[b"SET", b"lock:crash-other", b"someone else's"]);
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    assert!(wait_until(AT_ONCE, || group_members(pid).is_empty()));
    let mut stderr = String::new();
    std::io::Read::read_to_string(wrapper.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("no longer this run's"), "{stderr}");
    assert_eq!(redis.get(b"lock:crash-other").as_deref(), Some(&b"someone else's"[..]));
}

/// A waiter killed in the queue gives its place back at once, not when its entry lapses.
#[test]
fn a_waiter_killed_while_queued_leaves_the_queue_at_once() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let mut holder = hold_until(&redis, ["-k", "lock:crash-queue"], &go);
    assert!(wait_until(Duration::from_secs(5), || redis.exists(b"lock:crash-queue")));
    let mut waiter = redlock(&redis)
        .args(["-k", "lock:crash-queue", "--wait", "30s", "--", "true"])
        .stderr(Stdio::piped())
        .start();
    let queued = || redis.cmd::<i64>(&[b"ZCARD", b"{lock:crash-queue}:queue"]);
    assert!(wait_until(Duration::from_secs(5), || queued() == 1), "the waiter queued");
    // Waiting: its guardian runs (started once the first answer was "busy").
    let guardian = format!("redlock-run: guardian\0{}\0", waiter.id());
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(guardian.as_bytes()))
        })
    }));
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    // An entry left behind would lapse after 2 s.
    assert!(wait_until(Duration::from_millis(1000), || queued() == 0), "the queue is empty at once");
    let mut stderr = String::new();
    std::io::Read::read_to_string(waiter.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("died before its command started; its place in the queue was given back"),
        "{stderr}"
    );
    assert!(redis.exists(b"lock:crash-queue"), "the holder's lock is untouched");
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_output(&mut holder, LIMIT).status.code(), Some(0));
}

/// The wrapper alone stopped (SIGSTOP to its pid, not to the command's group) cannot renew:
/// its guardian stops the command before the lease could expire, so that a second run that
/// takes the lock then never runs beside it.
#[test]
fn a_wrapper_stopped_alone_cannot_outlive_its_lease() {
    let redis = RedisServer::start();
    let dir = tmp();
    let log = file(&dir, "log");
    let ticks = "while :; do date +%s%N >> \"$LOG\"; sleep 0.02; done";
    let mut first = redlock(&redis)
        .args(["-k", "lock:stopped-alone", "--ttl", "2s", "--", "sh", "-c", ticks])
        .env("LOG", &log)
        .stderr(Stdio::null())
        .start();
    assert!(wait_until(Duration::from_secs(5), || std::fs::metadata(&log).is_ok_and(|m| m.len() > 0)));
    let wrapper = Pid::from_raw(first.id() as i32);
    kill(wrapper, Signal::SIGSTOP).unwrap();
    let second = run(
        redlock(&redis).args([
            "-k",
            "lock:stopped-alone",
            "--ttl",
            "2s",
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            "date +%s%N; sleep 1",
        ]),
        LIMIT,
    );
    kill(wrapper, Signal::SIGCONT).unwrap();
    assert_eq!(second.code, 0, "{}", second.stderr);
    let started: u128 = String::from_utf8_lossy(&second.stdout).trim().parse().unwrap();
    let last_tick: u128 =
        std::fs::read_to_string(&log).unwrap().lines().filter_map(|l| l.parse().ok()).max().unwrap();
    assert!(
        last_tick < started,
        "the first command ticked {} ms after the second started",
        (last_tick - started) / 1_000_000
    );
    assert_eq!(wait_bounded(&mut first, LIMIT).code(), Some(125));
}

/// Where this program cannot be run again once the wrapper died (here: its file lost its run
/// bit; under an emulator without binfmt, /proc/self/exe is the emulator), the guardian still
/// kills the group, and says that the lock expires by itself and why.
#[test]
fn a_guardian_that_cannot_run_the_releaser_says_why_and_leaves_the_lock_to_expire() {
    use std::os::unix::fs::PermissionsExt;
    let redis = RedisServer::start();
    let dir = tmp();
    let copy = file(&dir, "redlock-run");
    copy_program(std::path::Path::new(bin()), &copy);
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pidfile = file(&dir, "pid");
    let mut cmd = std::process::Command::new(&copy);
    default_signals(&mut cmd);
    let mut wrapper = cmd
        .env_remove("REDLOCK_TTL")
        .args(["--redis-url", &redis.url(), "-k", "lock:noexec", "--"])
        .args(["sh", "-c", "echo $$ > \"$PIDFILE\"; exec sleep 100"])
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::piped())
        .start();
    let pid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    kill(Pid::from_raw(wrapper.id() as i32), Signal::SIGKILL).unwrap();
    wrapper.wait().unwrap();
    assert!(wait_until(AT_ONCE, || group_members(pid).is_empty()), "the command was killed");
    let mut stderr = String::new();
    std::io::Read::read_to_string(wrapper.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("could not be run again to release it (execve of /proc/self/exe: errno 13)"),
        "{stderr}"
    );
    assert!(redis.exists(b"lock:noexec"), "left to expire");
}

/// A wrapper killed before it asked Redis for anything (its guardian starts first, its ticket is
/// written before the first request): the releaser its guardian starts finds an empty ticket and
/// leaves without a word, where an unreadable one is an error.
#[test]
fn a_releaser_with_an_empty_ticket_has_nothing_to_release() {
    use std::os::unix::process::CommandExt;
    let dir = tmp();
    for (bytes, code, said) in [(&b""[..], 0, false), (&b"garbage"[..], 70, true)] {
        let path = file(&dir, "ticket");
        std::fs::write(&path, bytes).unwrap();
        let ticket = std::fs::File::open(&path).unwrap();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&ticket);
        let mut cmd = wrapper();
        cmd.arg0("redlock-run: releaser").args(["1", "-1", "1"]);
        // SAFETY: between fork and exec only dup2(2) and fcntl(2), which are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                // Open across the exec, even where the file is descriptor 3 already.
                if nix::libc::dup2(raw, 3) < 0 || nix::libc::fcntl(3, nix::libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = run(&mut cmd, LIMIT);
        assert_eq!(out.code, code, "{bytes:?}: {}", out.stderr);
        assert_eq!(out.stderr.contains("unreadable ticket"), said, "{bytes:?}: {}", out.stderr);
    }
}
