//! The processes a test starts, owned by it with everything they start in turn: a wrapper, its
//! guardian and releaser, the command's group, whatever the command left behind, a script's
//! holder. Dropping a [`Process`] kills and reaps the child, lets the rest finish what the
//! child's end set off (a guardian's or a holder's release) for a moment, then kills what is
//! left, whether the test passed or failed, so that none outlives it (a stopped wrapper and its
//! guardian once held the output pipe of `cargo test` for 13 minutes).

use std::collections::HashSet;
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The variable that marks what a [`Process`] started: the names of the processes it descends
/// from, `:`-separated (a test binary a test runs marks its own processes below its mark).
/// Inherited by every descendant that does not clear its environment; the wrapper passes it on
/// to the command (it is not one of the wrapper's variables).
const OWNERS: &str = "TEST_PROCESS_OWNERS";

/// How long the rest may take to end on its own once the child is gone: a guardian releasing
/// after its wrapper's death, a holder after its script's exit (milliseconds, unless Redis is
/// frozen). Stopped ones are continued meanwhile.
const ENDS_WITHIN: Duration = Duration::from_secs(2);

/// How long a drop then waits for what it killed to be gone (a process in uninterruptible
/// sleep dies when it wakes).
const REAP_WITHIN: Duration = Duration::from_secs(10);

/// A child of the test, and everything it starts, killed on drop: the child first (SIGCONT,
/// should it be stopped, then SIGKILL) and reaped; then every process that carries its mark,
/// every member of a process group one of them leads, and the guardians and releasers of
/// every wrapper among them (exec'd with an empty environment, they are known by their argv:
/// `redlock-run: guardian WRAPPER-PID ...`), once they have had [`ENDS_WITHIN`] to end on their
/// own. Derefs to the [`Child`].
pub struct Process {
    child: Child,
    mark: String,
}

/// Starts a [`Command`] as a [`Process`].
pub trait Start {
    /// Spawns the command, marked; fails the test if it cannot.
    fn start(&mut self) -> Process;
}

impl Start for Command {
    fn start(&mut self) -> Process {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let mark = format!("{}.{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let owners = match std::env::var(OWNERS) {
            Ok(outer) if !outer.is_empty() => format!("{outer}:{mark}"),
            _ => mark.clone(),
        };
        self.env(OWNERS, owners);
        let child =
            self.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", self.get_program().to_string_lossy()));
        Process { child, mark }
    }
}

impl Deref for Process {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for Process {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Signalled only while unreaped: until then its pid cannot be another process's.
        if let Ok(None) = self.child.try_wait() {
            let pid = Pid::from_raw(self.child.id() as i32);
            let _ = kill(pid, Signal::SIGCONT);
            let _ = kill(pid, Signal::SIGKILL);
            let _ = self.child.wait();
        }
        let left = sweep(&self.mark, self.child.id() as i32);
        if !left.is_empty() {
            eprintln!("processes of {} still alive {REAP_WITHIN:?} after SIGKILL: {left:?}", self.mark);
        }
    }
}

/// Waits for what carries `mark` (and the rest, see [`Process`]) to end, for [`ENDS_WITHIN`],
/// then kills what is left until none is alive, bounded by [`REAP_WITHIN`]; returns those still
/// alive then. Zombies are left to their parents (init, or a subreaper among them, killed too).
fn sweep(mark: &str, child: i32) -> Vec<i32> {
    let me = std::process::id() as i32;
    let my_group = nix::unistd::getpgrp().as_raw();
    let mut ours: HashSet<i32> = HashSet::from([child]);
    let kill_from = Instant::now() + ENDS_WITHIN;
    let deadline = kill_from + REAP_WITHIN;
    loop {
        let mut found = Vec::new();
        for process in processes() {
            if process.pid == me || process.state == 'Z' {
                continue;
            }
            let marked = process.owners().is_some_and(|o| o.split(':').any(|m| m == mark));
            let grouped = process.pgid != my_group && ours.contains(&process.pgid);
            let guards = process.guards().is_some_and(|w| ours.contains(&w));
            if marked || grouped || guards {
                found.push(process.pid);
            }
        }
        if found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        let now = Instant::now();
        for &pid in &found {
            ours.insert(pid);
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            if now >= kill_from {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A process as /proc shows it.
struct Seen {
    pid: i32,
    /// Its name (`comm`): a guardian's is `redlock-run`, a releaser's `exe`.
    name: String,
    state: char,
    pgid: i32,
}

impl Seen {
    fn file(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(format!("/proc/{}/{name}", self.pid)).ok()
    }

    /// Its `TEST_PROCESS_OWNERS`.
    fn owners(&self) -> Option<String> {
        let environ = self.file("environ")?;
        let prefix = format!("{OWNERS}=");
        environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(prefix.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// The wrapper's pid, if this is a guardian or a releaser.
    fn guards(&self) -> Option<i32> {
        if self.name != "redlock-run" && self.name != "exe" {
            return None;
        }
        let cmdline = self.file("cmdline")?;
        let mut args = cmdline.split(|&b| b == 0);
        let role = args.next()?;
        if role != b"redlock-run: guardian" && role != b"redlock-run: releaser" {
            return None;
        }
        std::str::from_utf8(args.next()?).ok()?.parse().ok()
    }
}

fn processes() -> Vec<Seen> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // Fields after the name (which may contain spaces and parentheses) start after the
            // last ')'.
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(Seen {
                pid,
                name: name.to_owned(),
                state: fields.first()?.chars().next()?,
                pgid: fields.get(2)?.parse().ok()?,
            })
        })
        .collect()
}
