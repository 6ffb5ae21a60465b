//! A waiting run's status line (docs/GUIDE.md § Waiting, outages and once-per-day): on a
//! terminal, one line redrawn in place and erased when the wait ends; on a pipe, none.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);
const ERASE: &str = "\r\x1b[K";

/// Starts `cmd` with its stderr on a pseudo-terminal 200 columns wide; what the terminal gets,
/// read as it comes (until the last process that has it open is gone).
fn on_terminal(cmd: &mut Command) -> (Process, Arc<Mutex<String>>) {
    let size = nix::pty::Winsize { ws_row: 24, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
    let pty = nix::pty::openpty(Some(&size), None).expect("a pseudo-terminal");
    let process = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::from(pty.slave)).start();
    let seen = Arc::new(Mutex::new(String::new()));
    let into = seen.clone();
    let mut master = std::fs::File::from(pty.master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            lock(&into).push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    (process, seen)
}

#[test]
fn a_waiting_run_on_a_terminal_shows_where_it_stands_then_erases_it() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let holder = hold_until(&redis, ["-k", "lock:line", "--note", "pod 7"], &go);
    assert!(wait_until(LIMIT, || redis.exists(b"lock:line")));
    let queued = || redis.cmd::<i64>(&[b"ZCARD", b"{lock:line}:queue"]);
    let first = redlock(&redis)
        .args(["-k", "lock:line", "--wait", "30s", "--", "true"])
        .stderr(Stdio::piped())
        .start();
    assert!(wait_until(LIMIT, || queued() == 1));

    // Second in the queue, it sees the line change as the seconds pass, then the lock come:
    // the command's output starts on a clean line.
    let command = ["--", "sh", "-c", "echo got it >&2"];
    let (mut second, seen) =
        on_terminal(redlock(&redis).args(["-k", "lock:line", "--wait", "20s"]).args(command));
    assert!(wait_until(LIMIT, || lock(&seen).contains("waited 1s")), "{:?}", lock(&seen));
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let line = lock(&seen).rsplit(ERASE).find(|l| !l.is_empty()).unwrap().to_owned();
    let held_by = format!("held by {host} (pid {}, note \"pod 7\"), its run started ", holder.id());
    assert!(
        line.starts_with(
            "redlock-run: waiting for \"lock:line\": waited 1s, 19s left, place 2 in the queue; "
        ),
        "{line:?}"
    );
    assert!(line.contains(&held_by), "{line:?}");
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut second, LIMIT).success());
    // The terminal may still hold what the run wrote last.
    wait_until(Duration::from_secs(2), || lock(&seen).ends_with('\n'));
    let all = lock(&seen).clone();
    let (lines, after) = all.rsplit_once(ERASE).expect("erased");
    assert_eq!(after, "got it\r\n", "{all:?}");
    assert!(lines.contains(&held_by) && !lines.contains('\n'), "the line alone before: {all:?}");
    drop((holder, first));

    // A wait that runs out, and one that a signal ends: the line is erased, and the error line
    // that follows starts at its start.
    let go = file(&dir, "go-again");
    let _holder = hold_until(&redis, ["-k", "lock:line"], &go);
    assert!(wait_until(LIMIT, || redis.exists(b"lock:line")));
    for (wait, signal, says) in
        [("1s", None, "is still busy at the end of --wait"), ("20s", Some(Signal::SIGTERM), "SIGTERM")]
    {
        let (mut waiter, seen) =
            on_terminal(redlock(&redis).args(["-k", "lock:line", "--wait", wait, "--", "true"]));
        if let Some(signal) = signal {
            assert!(wait_until(LIMIT, || lock(&seen).contains("waiting for")), "{:?}", lock(&seen));
            let pid = Pid::from_raw(waiter.id() as i32);
            // Ctrl-Z: the line is gone before the run stops, and drawn again once continued.
            kill(pid, Signal::SIGTSTP).unwrap();
            assert!(wait_until(LIMIT, || stopped(pid)), "stopped");
            // Stopped, it writes nothing more: what the terminal's reader has yet to pass on was
            // written before the stop.
            let erased = wait_until(Duration::from_secs(5), || lock(&seen).ends_with(ERASE));
            assert!(erased && stopped(pid), "erased before it stopped: {:?}", lock(&seen));
            kill(pid, Signal::SIGCONT).unwrap();
            let drawn = || lock(&seen).rsplit(ERASE).next().is_some_and(|l| l.contains("waiting for"));
            assert!(wait_until(LIMIT, drawn), "drawn again: {:?}", lock(&seen));
            kill(pid, signal).unwrap();
        }
        assert!(!wait_bounded(&mut waiter, LIMIT).success());
        wait_until(Duration::from_secs(2), || lock(&seen).ends_with('\n'));
        let all = lock(&seen).clone();
        let (before, error) = all.rsplit_once(ERASE).expect("erased");
        assert!(before.contains("waiting for \"lock:line\""), "{all:?}");
        assert!(error.starts_with("redlock-run: error: ") && error.contains(says), "{all:?}");
    }
}

/// Whether `pid` is stopped (`T` in /proc/PID/stat, after the command's name in parentheses).
fn stopped(pid: Pid) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
}

#[test]
fn a_waiting_run_on_a_pipe_draws_no_line_and_logs_each_holder_once_at_v() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let holder = hold_until(&redis, ["-k", "lock:pipe", "--note", "pod 8"], &go);
    assert!(wait_until(LIMIT, || redis.exists(b"lock:pipe")));
    let quiet = run(redlock(&redis).args(["-k", "lock:pipe", "--wait", "1500ms", "--", "true"]), LIMIT);
    assert_eq!(quiet.code, 75);
    assert!(!quiet.stderr.contains("waiting") && !quiet.stderr.contains('\r'), "{:?}", quiet.stderr);
    assert_eq!(quiet.stderr.lines().count(), 1, "the busy line alone: {:?}", quiet.stderr);

    let verbose =
        run(redlock(&redis).args(["-v", "-k", "lock:pipe", "--wait", "1500ms", "--", "true"]), LIMIT);
    assert_eq!(verbose.code, 75);
    let said = format!("waiting for the lock, held by {} (pid {}, note \"pod 8\")", hostname(), holder.id());
    assert_eq!(verbose.stderr.matches(&said).count(), 1, "{}", verbose.stderr);
    assert!(!verbose.stderr.contains('\r'), "{:?}", verbose.stderr);
    let at_once = run(redlock(&redis).args(["-v", "-k", "lock:pipe", "--", "true"]), LIMIT);
    assert_eq!(at_once.code, 75);
    assert!(!at_once.stderr.contains("waiting for"), "no wait, the busy line alone: {}", at_once.stderr);
}

fn hostname() -> String {
    nix::unistd::gethostname().unwrap().into_string().unwrap()
}
