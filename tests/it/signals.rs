//! Signals, terminals and PID 1 (docs/GUIDE.md § What the command gets, § Interactive use, § Containers
//! and Kubernetes): the command gets each signal once, nothing is left behind, and the lock is
//! released only after the command has exited.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);

fn pid_of(child: &std::process::Child) -> Pid {
    Pid::from_raw(child.id() as i32)
}

/// A shell command that records `$$` in `$PIDFILE`, then loops until it is signalled.
fn trapping(trap: &str) -> String {
    format!("{trap}; echo $$ > \"$PIDFILE\"; while :; do sleep 0.01; done")
}

#[test]
fn each_forwarded_signal_reaches_the_command_exactly_once() {
    let redis = RedisServer::start();
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
    ] {
        let name = &sig.as_str()[3..];
        let dir = tmp();
        let pidfile = file(&dir, "pid");
        let log = file(&dir, "log");
        // The trap only records: the command ends by itself 300 ms after the first delivery, so
        // a second delivery (a double forward) would be recorded too.
        let script = format!(
            "trap 'echo {name} >> \"$LOG\"' {name}; echo $$ > \"$PIDFILE\"; \
             while [ ! -s \"$LOG\" ]; do sleep 0.01; done; sleep 0.3; exit 7"
        );
        let mut wrapper = redlock(&redis)
            .args(["-k", "lock:signals", "--", "sh", "-c", &script])
            .env("PIDFILE", &pidfile)
            .env("LOG", &log)
            .stderr(Stdio::piped())
            .start();
        read_when_present(&pidfile, Duration::from_secs(5));
        kill(pid_of(&wrapper), sig).unwrap();
        let out = wait_output(&mut wrapper, LIMIT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(7), "{name}: the command's status: {stderr}");
        assert!(!redis.exists(b"lock:signals"), "{name}: released once the wrapper is gone");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            format!("{name}\n"),
            "{name} delivered exactly once"
        );
    }
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:grace", "--kill-grace", "500ms", "--", "sh", "-c", &trapping("trap '' TERM")])
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null())
        .start();
    let pgid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    let sent = Instant::now();
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    let status = wait_bounded(&mut wrapper, LIMIT);
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(137), "killed by SIGKILL");
    // After the grace, and then at once (with room for a loaded machine).
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(5), "escalated after {took:?}");
    assert!(group_members(pgid).is_empty());
    assert!(!redis.exists(b"lock:grace"));
}

#[test]
fn a_second_sigterm_kills_at_once() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:second", "--kill-grace", "10s", "--", "sh", "-c", &trapping("trap '' TERM")])
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null())
        .start();
    read_when_present(&pidfile, Duration::from_secs(5));
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(wrapper.try_wait().unwrap().is_none(), "still within the grace");
    let second = Instant::now();
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    let status = wait_bounded(&mut wrapper, LIMIT);
    assert_eq!(status.code(), Some(137));
    // At once: long before the 10 s grace.
    assert!(second.elapsed() < Duration::from_secs(5), "took {:?}", second.elapsed());
    assert!(!redis.exists(b"lock:second"));
}

#[test]
fn nothing_of_the_group_survives_a_signal() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:group", "--", "sh", "-c", "echo $$ > \"$PIDFILE\"; sleep 300 & exec sleep 300"])
        .env("PIDFILE", &pidfile)
        .start();
    let pgid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    assert!(wait_until(Duration::from_secs(2), || group_members(pgid).len() == 2));
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(143));
    assert!(group_members(pgid).is_empty(), "left behind: {:?}", group_members(pgid));
}

#[test]
fn background_jobs_left_by_the_command_are_stopped_before_release() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let r = run(
        redlock(&redis)
            .args(["-k", "lock:leftover", "--kill-grace", "300ms", "--", "sh", "-c"])
            .arg("echo $$ > \"$PIDFILE\"; sleep 300 & sh -c 'trap \"\" TERM; sleep 300' & exit 4")
            .env("PIDFILE", &pidfile),
        LIMIT,
    );
    assert_eq!(r.code, 4, "{}", r.stderr);
    let pgid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(group_members(pgid).is_empty(), "left behind: {:?}", group_members(pgid));
    assert!(!redis.exists(b"lock:leftover"));
}

/// An attempt in flight when the signal arrives may still take the lock once Redis answers;
/// the wrapper takes it back before leaving.
#[test]
fn a_signal_during_an_attempt_leaves_nothing_held() {
    let redis = RedisServer::start();
    // Load the scripts first, so the frozen server receives the acquire itself.
    assert_eq!(run(redlock(&redis).args(["-k", "lock:inflight", "--", "true"]), LIMIT).code, 0);
    redis.freeze();
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:inflight", "--ttl", "1m", "--", "true"])
        .stderr(Stdio::null())
        .start();
    // In flight: sent, waiting unread at the frozen server; and the wrapper handles SIGTERM.
    let in_flight = || unread_at(redis.port) > 0 && catches(wrapper.id(), Signal::SIGTERM);
    assert!(wait_until(Duration::from_secs(10), in_flight), "the attempt was sent");
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(143));
    redis.thaw();
    // What the wrapper sent has been read (and run) once nothing waits unread.
    assert!(wait_until(Duration::from_secs(10), || unread_at(redis.port) == 0), "the server read it all");
    assert!(!redis.exists(b"lock:inflight"), "the abandoned attempt's lock was taken back");
}

/// SIGTSTP sent to the wrapper (no terminal involved) suspends the command with it; SIGCONT
/// resumes both. The wrapper never sleeps alone while its command runs unrenewed.
#[test]
fn sigtstp_suspends_the_command_with_the_wrapper() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:tstp", "--", "sh", "-c", "echo $$ > \"$PIDFILE\"; sleep 1; exit 3"])
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null())
        .start();
    let pid: u32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    kill(pid_of(&wrapper), Signal::SIGTSTP).unwrap();
    assert!(wait_until(Duration::from_secs(10), || process_state(wrapper.id()).as_deref() == Some("T")));
    // `sh` caught in vfork() for `sleep` shows D while its child, stopped before its exec, shows
    // T: the group is suspended all the same (docs/GUIDE.md § Interactive use).
    let suspended = || match process_state(pid).as_deref() {
        Some("T") => true,
        Some("D") => group_members(pid as i32)
            .iter()
            .any(|&m| m != pid as i32 && process_state(m as u32).as_deref() == Some("T")),
        _ => false,
    };
    assert!(
        wait_until(Duration::from_secs(10), suspended),
        "the command is suspended too: {:?}",
        process_state(pid)
    );
    kill(pid_of(&wrapper), Signal::SIGCONT).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(3));
    assert!(!redis.exists(b"lock:tstp"));
}

#[test]
fn a_signal_while_redis_does_not_answer_aborts_with_nothing_run() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"SET", b"lock:abort", b"other-holder", b"PX", b"60000"]);
    redis.freeze();
    let dir = tmp();
    let marker = file(&dir, "ran");
    // Requests that would wait 10 s for the frozen server: the signal, not a timeout, ends it.
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:abort", "--ttl", "1m", "--connect-timeout", "10s", "--command-timeout", "10s"])
        .args(["--", "touch"])
        .arg(&marker)
        .stderr(Stdio::piped())
        .start();
    let waiting = || unread_at(redis.port) > 0 && catches(wrapper.id(), Signal::SIGTERM);
    assert!(wait_until(Duration::from_secs(10), waiting), "the wrapper asked the frozen server");
    let sent = Instant::now();
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    let status = wait_bounded(&mut wrapper, LIMIT);
    assert_eq!(status.code(), Some(143));
    assert!(sent.elapsed() < Duration::from_secs(5), "took {:?}", sent.elapsed());
    redis.thaw();
    assert!(!marker.exists(), "the command never ran");
    assert_eq!(redis.get(b"lock:abort").as_deref(), Some(&b"other-holder"[..]));
}

/// As PID 1 of a new PID namespace (a container entrypoint): orphans are reaped, SIGTERM is
/// honoured (the kernel drops signals PID 1 has no handler for) and the status is the command's.
#[test]
fn as_pid_1_it_reaps_orphans_and_honours_sigterm() {
    if !can_unshare(&["--pid", "--fork", "--mount-proc"]) {
        return;
    }
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let zombies = file(&dir, "zombies");
    // Orphans: each `( sleep … & )` leaves a sleep whose parent has exited; they are re-parented
    // to PID 1. After they end, count zombies in the namespace's /proc.
    let script = "echo $$ > \"$PIDFILE\"; \
        for i in 1 2 3 4 5; do ( sleep 0.05 & ); done; sleep 0.5; \
        grep -l '^[0-9]* ([^)]*) Z' /proc/[0-9]*/stat 2>/dev/null | wc -l > \"$ZOMBIES\"; \
        trap 'exit 9' TERM; while :; do sleep 0.01; done";
    let mut unshare = Command::new("unshare");
    default_signals(&mut unshare);
    unshare
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(bin())
        .args(["--redis-url", &redis.url(), "-k", "lock:pid1", "-v", "--", "sh", "-c", script])
        .env("PIDFILE", &pidfile)
        .env("ZOMBIES", &zombies)
        .stderr(Stdio::piped());
    let mut outer = unshare.start();
    read_when_present(&zombies, Duration::from_secs(10));
    let zombie_count: u32 = std::fs::read_to_string(&zombies).unwrap().trim().parse().unwrap();
    assert_eq!(zombie_count, 0, "orphans were reaped");
    // The wrapper is unshare's child (PID 1 inside the namespace).
    let children =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", outer.id(), outer.id())).unwrap();
    let wrapper: i32 = children.split_whitespace().next().expect("unshare has a child").parse().unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{wrapper}/status"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with("NSpid:"))
            .map(|l| l.split_whitespace().last().unwrap().to_owned()),
        Some("1".to_owned()),
        "the wrapper is PID 1 in its namespace"
    );
    // PID 1 cannot be stopped by a signal from its own namespace: SIGTSTP leaves the command
    // running, and the wrapper says so.
    kill(Pid::from_raw(wrapper), Signal::SIGTSTP).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(process_state(wrapper as u32).as_deref(), Some("T"));
    kill(Pid::from_raw(wrapper), Signal::SIGTERM).unwrap();
    let out = wait_output(&mut outer, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "the command's status: {stderr}");
    assert!(stderr.contains("PID 1 and cannot be suspended"), "{stderr}");
    assert!(!redis.exists(b"lock:pid1"));
}

/// In a PID namespace whose /proc was not mounted anew, /proc names the enclosing namespace's
/// processes: the wrapper reads nothing there. Stopped processes outside, whose group numbers
/// were the command's inside, made it take its group for stopped and suspend itself while a
/// member that ignores SIGTSTP ran on, the lease lapsed.
#[test]
fn in_a_pid_namespace_without_its_own_proc_nothing_there_is_taken_for_the_commands_group() {
    if !can_unshare(&["--pid", "--fork", "--mount-proc"]) {
        return;
    }
    let redis = RedisServer::start();
    let dir = tmp();
    let log = file(&dir, "log");
    let key = "lock:foreign-proc";
    // The outer namespace has its own /proc: stopped sessions 2..14 there. The inner one keeps
    // that /proc, where the command's group number (a small one) names one of them.
    let bin = bin();
    let inner = format!(
        "'{bin}' --redis-url {} -k {key} --ttl 2s --kill-grace 1s -- sh -c \
         'trap \"\" TSTP; while :; do echo x >> \"$LOG\"; sleep 0.02; done'; true",
        redis.url()
    );
    let outer = "for i in $(seq 2 14); do setsid sleep 600 & done; sleep 0.2; \
         kill -STOP $(pgrep -x sleep); unshare --pid --fork sh -c \"$INNER\"; true";
    let mut unshare = Command::new("unshare");
    default_signals(&mut unshare);
    let mut ns = unshare
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", outer])
        .env("INNER", &inner)
        .env("LOG", &log)
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(Duration::from_secs(10), || lines(&log) > 0), "the command runs");
    let wrapper = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.starts_with(bin.as_bytes()) && cmdline.windows(key.len()).any(|w| w == key.as_bytes())
        })
        .expect("the wrapper");
    kill(Pid::from_raw(wrapper), Signal::SIGTSTP).unwrap();
    // Past the TTL: the member ignores SIGTSTP, so the wrapper must stop it (SIGSTOP after the
    // grace) or keep the lock; it must never be running while the lock has lapsed.
    std::thread::sleep(Duration::from_millis(3500));
    let before = lines(&log);
    std::thread::sleep(Duration::from_millis(500));
    let progressed = lines(&log) > before;
    let held = redis.exists(key.as_bytes());
    let _ = kill(Pid::from_raw(ns.id() as i32), Signal::SIGKILL);
    let _ = ns.wait();
    assert!(
        held || !progressed,
        "a member ran on with the lease lapsed (wrapper suspended on a look-alike group)"
    );
}

/// With an empty /proc (a tmpfs mounted over it), the group looked empty while its background
/// job ran: the job was killed with SIGKILL at once instead of SIGTERM and the grace.
#[test]
fn with_an_empty_proc_leftovers_still_get_sigterm_first() {
    if !can_unshare(&["--mount", "--fork"]) {
        return;
    }
    let redis = RedisServer::start();
    let dir = tmp();
    let log = file(&dir, "log");
    let job = "(trap 'echo term >> \"$LOG\"; exit 0' TERM; sleep 30 & wait) & sleep 0.3; exit 3";
    let r = run(
        Command::new("unshare")
            .args(["--mount", "--fork", "sh", "-c", "mount -t tmpfs none /proc && exec \"$@\"", "sh", bin()])
            .args(["--redis-url", &redis.url(), "-k", "lock:empty-proc", "--kill-grace", "2s", "--"])
            .args(["sh", "-c", job])
            .env("LOG", &log),
        LIMIT,
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&log).unwrap_or_default(), "term\n", "{}", r.stderr);
    assert!(!redis.exists(b"lock:empty-proc"));
}

/// On a terminal the command is the foreground process group: it can read the terminal, and
/// one Ctrl-C reaches it once.
#[test]
fn on_a_terminal_the_command_reads_it_and_gets_ctrl_c_once() {
    let redis = RedisServer::start();
    let dir = tmp();
    let log = file(&dir, "log");
    let script = "echo ready >> \"$LOG\"; read line; echo \"read $line\" >> \"$LOG\"; \
        trap 'echo INT >> \"$LOG\"; exit 5' INT; echo armed >> \"$LOG\"; \
        while :; do sleep 0.01; done";
    let (mut wrapper, mut master) =
        spawn_on_pty(redlock(&redis).args(["-k", "lock:tty", "--", "sh", "-c", script]).env("LOG", &log));
    let logged = |what: &str| std::fs::read_to_string(&log).unwrap_or_default().contains(what);
    assert!(wait_until(Duration::from_secs(5), || logged("ready")));
    master.write_all(b"hello\n").unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || logged("armed")),
        "the command read the terminal without being stopped"
    );
    master.write_all(b"\x03").unwrap();
    let status = wait_bounded(&mut wrapper, LIMIT);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("INT").count(), 1, "Ctrl-C delivered once: {text:?}");
    assert!(text.contains("read hello"), "the command read the terminal: {text:?}");
    assert_eq!(status.code(), Some(5), "{text:?}");
    assert!(!redis.exists(b"lock:tty"));
}

/// Ctrl-Z suspends the command and the wrapper with it (so a shell gets its prompt back);
/// continuing resumes both, unless the lease lapsed meanwhile.
#[test]
fn ctrl_z_suspends_the_job_and_the_lease_still_rules_on_resume() {
    let redis = RedisServer::start();
    // A lease of 2 s (suspended for 3 s) is renewed on time on a loaded machine; 1 s was not.
    for (ttl, suspended_for, expected) in [("30s", 300u64, 6), ("2s", 3000, 125)] {
        let dir = tmp();
        let log = file(&dir, "log");
        let script = "echo ready >> \"$LOG\"; sleep 1; echo done >> \"$LOG\"; exit 6";
        let (mut wrapper, mut master) = spawn_on_pty(
            redlock(&redis)
                .args(["-k", "lock:suspend", "--ttl", ttl, "--", "sh", "-c", script])
                .env("LOG", &log),
        );
        assert!(wait_until(Duration::from_secs(5), || {
            std::fs::read_to_string(&log).unwrap_or_default().contains("ready")
        }));
        master.write_all(b"\x1a").unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || process_state(wrapper.id()).as_deref() == Some("T")),
            "the wrapper suspended itself with the command"
        );
        std::thread::sleep(Duration::from_millis(suspended_for));
        kill(pid_of(&wrapper), Signal::SIGCONT).unwrap();
        let status = wait_bounded(&mut wrapper, LIMIT);
        assert_eq!(status.code(), Some(expected), "ttl {ttl}, suspended {suspended_for} ms");
        let finished = std::fs::read_to_string(&log).unwrap().contains("done");
        assert_eq!(finished, expected == 6, "the command finished only when the lease allowed it");
        assert!(!redis.exists(b"lock:suspend"));
    }
}

/// Logging never blocks the watchdog: with stderr a full pipe nobody reads and -vv, a lost lock
/// still stops the command, and a signal is still passed on.
#[test]
fn a_stderr_nobody_reads_never_blocks_the_watchdog() {
    let redis = RedisServer::start();
    for trigger in ["lost", "signal"] {
        let dir = tmp();
        let pidfile = file(&dir, "pid");
        // The command fills the shared stderr pipe (64 KiB) and the rest of its output blocks.
        let script = "echo $$ > \"$PIDFILE\"; head -c 1000000 /dev/zero >&2 & while :; do sleep 0.01; done";
        let mut wrapper = redlock(&redis)
            .args([
                "-vv",
                "-k",
                "lock:stderr",
                "--ttl",
                "3s",
                "--renew-every",
                "200ms",
                "--kill-grace",
                "300ms",
                "--",
            ])
            .args(["sh", "-c", script])
            .env("PIDFILE", &pidfile)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .start();
        let pgid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let started = Instant::now();
        match trigger {
            "lost" => {
                redis.cmd::<i64>(&[b"DEL", b"lock:stderr"]);
            }
            _ => kill(pid_of(&wrapper), Signal::SIGTERM).unwrap(),
        }
        assert!(
            wait_until(Duration::from_secs(3), || group_members(pgid).is_empty()),
            "{trigger}: the command was stopped"
        );
        let stopped = started.elapsed();
        let status = wait_bounded(&mut wrapper, Duration::from_secs(10));
        assert!(stopped < Duration::from_millis(1500), "{trigger}: stopped after {stopped:?}");
        assert_eq!(status.code(), Some(if trigger == "lost" { 125 } else { 143 }), "{trigger}");
    }
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().count()
}

/// SIGTSTP to the wrapper when the command ignores it: the wrapper keeps running (and renewing)
/// while the command runs, stops the group with SIGSTOP after --kill-grace, and only then
/// suspends itself — so the command never runs while nothing renews its lock.
#[test]
fn a_command_that_ignores_sigtstp_is_stopped_before_the_wrapper_suspends() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (pidfile, log) = (file(&dir, "pid"), file(&dir, "log"));
    // A grace of 2 s, so that the look at 500 ms comes within it even on a loaded machine,
    // and a lease that leaves its renewals room (1.3 s of slack).
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:tstp-ignored", "--ttl", "5s", "--kill-grace", "2s", "--", "sh", "-c"])
        .arg("trap '' TSTP; echo $$ > \"$PIDFILE\"; while :; do echo x >> \"$LOG\"; sleep 0.05; done")
        .env("PIDFILE", &pidfile)
        .env("LOG", &log)
        .stderr(Stdio::null())
        .start();
    let pid: u32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    kill(pid_of(&wrapper), Signal::SIGTSTP).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_ne!(process_state(wrapper.id()).as_deref(), Some("T"), "suspended while the command runs");
    assert!(
        wait_until(Duration::from_secs(10), || process_state(wrapper.id()).as_deref() == Some("T")),
        "the wrapper suspends once the group is stopped"
    );
    // SIGSTOP takes effect when the command leaves the kernel (a write of its log, say: `D`).
    // `sh` waiting in vfork() for its `sleep`, which the SIGSTOP caught before its exec, stays in
    // `D` until that child goes on: stopped all the same (as the wrapper judges it).
    let stopped = || match process_state(pid).as_deref() {
        Some("T") => true,
        Some("D") => group_members(pid as i32).into_iter().any(|m| {
            let stat = std::fs::read_to_string(format!("/proc/{m}/stat")).unwrap_or_default();
            let after: Vec<&str> =
                stat.rsplit_once(')').map_or(vec![], |(_, r)| r.split_whitespace().collect());
            after.first() == Some(&"T") && after.get(1) == Some(&pid.to_string().as_str())
        }),
        _ => false,
    };
    assert!(
        wait_until(Duration::from_secs(5), stopped),
        "the command was stopped with SIGSTOP: {:?}",
        process_state(pid)
    );
    // The lease lapses meanwhile; whoever takes the lock next runs alone.
    let before = lines(&log);
    assert!(
        wait_until(Duration::from_secs(15), || !redis.exists(b"lock:tstp-ignored")),
        "the lease of the suspended wrapper lapsed"
    );
    assert_eq!(process_state(wrapper.id()).as_deref(), Some("T"), "still suspended");
    assert_eq!(run(redlock(&redis).args(["-k", "lock:tstp-ignored", "--", "true"]), LIMIT).code, 0);
    assert_eq!(lines(&log), before, "the suspended command made progress");
    kill(pid_of(&wrapper), Signal::SIGCONT).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(125), "the lapsed lease rules on resume");
    assert_eq!(lines(&log), before, "the command never ran again after the lease lapsed");
}

/// A zombie whose parent left the session stays in the command's group (kill(2) still finds
/// the group), but it is no live member: the run ends with the command, and a SIGTERM is never
/// ignored for its sake.
#[test]
fn a_zombie_left_in_the_group_does_not_keep_the_wrapper_alive() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "sleeper");
    // The fork child exits at once and stays a zombie: its parent (the sleeper) never waits
    // for it, and has left the group with setsid.
    let python = "import os,sys,time\n\
                  if os.fork() == 0: time.sleep(.2); os._exit(0)\n\
                  os.setsid()\n\
                  open(sys.argv[1], 'w').write(f'{os.getpid()}\\n')\n\
                  time.sleep(60)";
    let r = run(
        redlock(&redis)
            .args(["-k", "lock:zombie", "--ttl", "5s", "--", "sh", "-c"])
            // The shell ends once the sleeper has left the group (bounded: 10 s), and the fork
            // child is a zombie.
            .arg(format!(
                "python3 -c \"{python}\" \"$PIDFILE\" >/dev/null 2>&1 & \
                 i=0; while [ ! -s \"$PIDFILE\" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
                 sleep 0.5"
            ))
            .env("PIDFILE", &pidfile),
        Duration::from_secs(15),
    );
    let sleeper: i32 = read_when_present(&pidfile, Duration::from_secs(1)).trim().parse().unwrap();
    let _ = kill(Pid::from_raw(sleeper), Signal::SIGKILL);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(5), "took {:?}", r.elapsed);
    assert!(!redis.exists(b"lock:zombie"));
}

/// `sh` starts `&` jobs with SIGINT and SIGQUIT ignored: after a forwarded SIGINT ended the
/// command, what it left behind gets SIGTERM at once instead of waiting for --kill-grace.
#[test]
fn leftovers_get_sigterm_as_soon_as_the_command_has_exited() {
    let redis = RedisServer::start();
    for sig in [Signal::SIGINT, Signal::SIGQUIT] {
        let dir = tmp();
        let (pidfile, log) = (file(&dir, "pid"), file(&dir, "log"));
        let mut wrapper = redlock(&redis)
            .args(["-k", "lock:leftover-int", "--kill-grace", "10s", "--", "sh", "-c"])
            .arg(
                "(trap 'echo term >> \"$LOG\"; exit 0' TERM; echo $$ > \"$PIDFILE\"; \
                 while :; do sleep 0.05; done) & wait",
            )
            .env("PIDFILE", &pidfile)
            .env("LOG", &log)
            .stderr(Stdio::null())
            .start();
        // Written once the background job has its trap in place.
        read_when_present(&pidfile, Duration::from_secs(5));
        let sent = Instant::now();
        kill(pid_of(&wrapper), sig).unwrap();
        let status = wait_bounded(&mut wrapper, LIMIT);
        assert!(sent.elapsed() < Duration::from_secs(5), "{sig}: took {:?}", sent.elapsed());
        assert_eq!(status.code(), Some(128 + sig as i32), "{sig}");
        assert!(std::fs::read_to_string(&log).unwrap_or_default().contains("term"), "{sig}: no SIGTERM");
        assert!(!redis.exists(b"lock:leftover-int"));
    }
}

/// While the wrapper is suspended with its command, someone continues the command alone (not
/// the wrapper): the wrapper is woken at once and renews again, so the command never runs
/// while nothing renews its lock.
#[test]
fn a_command_continued_behind_the_suspended_wrappers_back_wakes_the_wrapper() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (pidfile, log) = (file(&dir, "pid"), file(&dir, "stderr"));
    let mut wrapper = redlock(&redis)
        .args(["-v", "-k", "lock:woken", "--ttl", "2s", "--", "sh", "-c"])
        .arg("echo $$ > \"$PIDFILE\"; while :; do sleep 0.05; done")
        .env("PIDFILE", &pidfile)
        .stderr(std::fs::File::create(&log).unwrap())
        .start();
    let pid: i32 = read_when_present(&pidfile, Duration::from_secs(5)).trim().parse().unwrap();
    kill(pid_of(&wrapper), Signal::SIGTSTP).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || process_state(wrapper.id()).as_deref() == Some("T")),
        "the wrapper suspended itself with its command: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The whole group of the command, as `kill -CONT -PGID` would.
    nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || process_state(wrapper.id()).as_deref() != Some("T")),
        "the wrapper was woken when its command ran again"
    );
    // Past the TTL, the lock is still renewed: another run finds it busy.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(run(redlock(&redis).args(["-k", "lock:woken", "--", "true"]), LIMIT).code, 75);
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(143));
}

/// SIGCONT right after SIGTSTP (before the group has stopped) calls the suspension off: the
/// wrapper never ends up stopped on its own with nothing left to wake it.
#[test]
fn sigcont_right_after_sigtstp_leaves_nothing_suspended() {
    let redis = RedisServer::start();
    let dir = tmp();
    let ready = file(&dir, "ready");
    // Sent while the command runs (written once it does), as the suspension is the subject.
    let running = |ready: &std::path::Path| {
        let started = wait_until(Duration::from_secs(10), || ready.exists());
        let _ = std::fs::remove_file(ready);
        started
    };
    for _ in 0..5 {
        let mut wrapper = redlock(&redis)
            .args([
                "-k",
                "lock:tstp-cont",
                "--ttl",
                "3s",
                "--",
                "sh",
                "-c",
                "touch \"$READY\"; sleep 0.5; exit 5",
            ])
            .env("READY", &ready)
            .stderr(Stdio::null())
            .start();
        assert!(running(&ready), "the command runs");
        kill(pid_of(&wrapper), Signal::SIGTSTP).unwrap();
        kill(pid_of(&wrapper), Signal::SIGCONT).unwrap();
        assert_eq!(wait_bounded(&mut wrapper, Duration::from_secs(5)).code(), Some(5));
    }
    // A member that ignores SIGTSTP keeps the suspension waiting for --kill-grace: SIGCONT
    // within that time calls it off too.
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:tstp-cont", "--ttl", "6s", "--kill-grace", "1s", "--", "sh", "-c"])
        .arg("trap '' TSTP; touch \"$READY\"; sleep 2; exit 5")
        .env("READY", &ready)
        .stderr(Stdio::null())
        .start();
    assert!(running(&ready), "the command runs");
    kill(pid_of(&wrapper), Signal::SIGTSTP).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    kill(pid_of(&wrapper), Signal::SIGCONT).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let state = process_state(wrapper.id());
    if state.as_deref() == Some("T") {
        // Nothing would wake it: do not leave it behind.
        let _ = kill(pid_of(&wrapper), Signal::SIGKILL);
    }
    assert_ne!(state.as_deref(), Some("T"), "the suspension went ahead after SIGCONT");
    assert_eq!(wait_bounded(&mut wrapper, Duration::from_secs(5)).code(), Some(5));
}

/// SIGTERM right after SIGTSTP: the command, stopped by the suspension, is continued so that
/// its own SIGTERM handler runs (its status, not SIGKILL's 137).
#[test]
fn sigterm_right_after_sigtstp_reaches_the_commands_handler() {
    let redis = RedisServer::start();
    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut wrapper = redlock(&redis)
        .args(["-k", "lock:tstp-term", "--kill-grace", "5s", "--", "sh", "-c"])
        .arg(trapping("trap 'exit 9' TERM"))
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null())
        .start();
    read_when_present(&pidfile, Duration::from_secs(5));
    let sent = Instant::now();
    kill(pid_of(&wrapper), Signal::SIGTSTP).unwrap();
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(9));
    // Its handler's status, not SIGKILL's after the 5 s grace.
    assert!(sent.elapsed() < Duration::from_secs(5), "took {:?}", sent.elapsed());
}

/// A signal ignored when the wrapper started (`nohup`, a shell's background job) stays ignored,
/// by the wrapper and by the command.
#[test]
fn a_signal_ignored_at_start_stays_ignored() {
    let redis = RedisServer::start();
    let dir = tmp();
    let ready = file(&dir, "ready");
    let mut nohup = Command::new("nohup");
    nohup
        .arg(bin())
        .args(["--redis-url", &redis.url(), "-k", "lock:nohup", "--", "sh", "-c"])
        .arg("touch \"$READY\"; sleep 1; exit 4")
        .env("READY", &ready)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for name in ["REDLOCK_KEY", "REDLOCK_REDIS_URL", "REDIS_URL"] {
        nohup.env_remove(name);
    }
    let mut wrapper = nohup.start();
    // While the command runs (sent earlier, it could reach `nohup` before its exec).
    assert!(wait_until(Duration::from_secs(10), || ready.exists()), "the command started");
    kill(pid_of(&wrapper), Signal::SIGHUP).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(4), "SIGHUP was not passed on");
}

/// The command starts with no signal blocked and none ignored but those ignored when the
/// wrapper started: not SIGPIPE, which the wrapper itself ignores, and none of the signals the
/// wrapper blocks while it starts the command. (`cat` installs no handlers of its own.)
#[test]
fn the_command_starts_with_no_signal_blocked_or_ignored() {
    let redis = RedisServer::start();
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:mask", "--", "cat", "/proc/self/status"]);
    // Other tests of this process may be ignoring signals for a moment: the wrapper starts with
    // every disposition at its default whatever they do.
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for sig in 1..32 {
                nix::libc::signal(sig, nix::libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let r = run(&mut cmd, LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let status = String::from_utf8_lossy(&r.stdout);
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_default().to_owned()
    };
    assert_eq!(field("SigBlk:"), "0000000000000000", "blocked signals");
    // The standard signals (1–31): glibc keeps 32 and 33 for itself, and whatever started
    // this test may ignore them.
    let ignored = u64::from_str_radix(&field("SigIgn:"), 16).unwrap() & 0x7fff_ffff;
    assert_eq!(ignored, 0, "ignored signals: {:x}", ignored);
}

/// Whatever started the wrapper may have blocked signals before exec'ing it (the mask is
/// inherited): the wrapper still handles its signals. A blocked SIGCHLD must not leave the
/// command's exit unnoticed until the next renewal (a third of `--ttl`, with the lock held
/// meanwhile), nor a blocked SIGTERM keep the command from getting it.
#[test]
fn signals_blocked_when_the_wrapper_starts_are_still_handled() {
    let redis = RedisServer::start();
    let blocking = |cmd: &mut Command| {
        // SAFETY: between fork and exec only sigemptyset/sigaddset/sigprocmask, which are
        // async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                let mut set: nix::libc::sigset_t = std::mem::zeroed();
                nix::libc::sigemptyset(&mut set);
                for sig in [nix::libc::SIGCHLD, nix::libc::SIGTERM, nix::libc::SIGINT] {
                    nix::libc::sigaddset(&mut set, sig);
                }
                nix::libc::sigprocmask(nix::libc::SIG_BLOCK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
    };
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:masked", "--ttl", "30s", "--", "true"]);
    blocking(&mut cmd);
    let r = run(&mut cmd, LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Not at the next renewal, 10 s on (with room for a loaded machine).
    assert!(r.elapsed < Duration::from_secs(5), "the command's exit was seen after {:?}", r.elapsed);

    let dir = tmp();
    let pidfile = file(&dir, "pid");
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:masked", "--ttl", "30s", "--", "sh", "-c"])
        .arg(trapping("trap 'exit 7' TERM"))
        .env("PIDFILE", &pidfile)
        .stderr(Stdio::null());
    blocking(&mut cmd);
    let mut wrapper = cmd.start();
    read_when_present(&pidfile, Duration::from_secs(5));
    let sent = Instant::now();
    kill(pid_of(&wrapper), Signal::SIGTERM).unwrap();
    assert_eq!(wait_bounded(&mut wrapper, LIMIT).code(), Some(7), "SIGTERM reached the command");
    assert!(sent.elapsed() < Duration::from_secs(5), "took {:?}", sent.elapsed());
    assert!(!redis.exists(b"lock:masked"));
}
