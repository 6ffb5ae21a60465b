//! A script that does not lead its process group (a CI runner's step, `sh -c`, a subshell): the
//! script and its descendants stand for the group that a command's stop path signals
//! (docs/ARCHITECTURE.md § A script's lock). Nothing else is ever signalled: not the shell or
//! runner that started the script, not its other children.
//!
//! The descendants are found in /proc by parent pid, from the script and from every descendant
//! seen before (a child whose parent ended is reparented away, to init or a subreaper, and is
//! found only through the pid it was seen with); each is known with its start time, which tells
//! it from a later process given its pid. To signal them, they are frozen (SIGSTOP) walk after
//! walk until no new one appears, so that none forks away meanwhile, then signalled, then
//! continued.

use std::collections::HashSet;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Group;

/// How many walks a freeze makes at most, looking for children forked as it began.
const FREEZE_WALKS: usize = 16;

/// The script and its live descendants, as last seen.
pub struct Tree {
    /// Every member with its start time; the script first (until it is gone).
    members: Vec<(Pid, u64)>,
    /// The holder itself: the `lock` process that forked it is the script's child, for a moment.
    holder: Pid,
}

/// A process as /proc showed it.
struct Seen {
    pid: Pid,
    parent: Pid,
    start: u64,
    state: u8,
}

impl Tree {
    pub fn new(script: Pid, start: u64) -> Tree {
        Tree { members: vec![(script, start)], holder: nix::unistd::getpid() }
    }

    /// The members, as last seen: the script and its live descendants.
    pub fn members(&self) -> &[(Pid, u64)] {
        &self.members
    }

    /// Walks /proc: drops the members that have ended and adds the descendants of those that
    /// live. Returns whether a member was added. Without /proc (or another namespace's) the
    /// members stay as they are.
    ///
    /// The members' `children` files name their children, so that a walk reads a few files,
    /// not every process's; where the kernel has none, every process is read.
    pub fn refresh(&mut self) -> bool {
        if !super::proc_is_ours() {
            return false;
        }
        if let Some(added) = self.through_children() {
            return added;
        }
        let Some(all) = processes() else { return false };
        self.update(&all)
    }

    /// [`Tree::refresh`] through /proc/PID/task/TID/children; `None` where the kernel has no
    /// such file.
    fn through_children(&mut self) -> Option<bool> {
        self.members.retain(|&(pid, start)| live(pid).is_some_and(|s| s.start_time == start));
        let mut known: HashSet<Pid> = self.members.iter().map(|&(pid, _)| pid).collect();
        let mut added = false;
        let mut next = 0;
        while next < self.members.len() {
            let (pid, _) = self.members[next];
            next += 1;
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
            for task in tasks.flatten() {
                let children = match std::fs::read_to_string(task.path().join("children")) {
                    Ok(children) => children,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && task.path().exists() => {
                        return None;
                    }
                    // Ended meanwhile.
                    Err(_) => continue,
                };
                for child in children.split_ascii_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
                    let child = Pid::from_raw(child);
                    if child == self.holder || known.contains(&child) {
                        continue;
                    }
                    if let Some(s) = live(child).filter(|s| s.parent == pid) {
                        known.insert(child);
                        self.members.push((child, s.start_time));
                        added = true;
                    }
                }
            }
        }
        Some(added)
    }

    fn update(&mut self, all: &[Seen]) -> bool {
        let live = |pid: Pid, start: u64| {
            all.iter().any(|p| p.pid == pid && p.start == start && !matches!(p.state, b'Z' | b'X' | b'x'))
        };
        self.members.retain(|&(pid, start)| live(pid, start));
        let mut known: HashSet<Pid> = self.members.iter().map(|&(pid, _)| pid).collect();
        let mut added = false;
        // Parents before their children, whatever order /proc lists them in.
        loop {
            let before = self.members.len();
            for p in all {
                if known.contains(&p.parent)
                    && !known.contains(&p.pid)
                    && p.pid != self.holder
                    && !matches!(p.state, b'Z' | b'X' | b'x')
                {
                    known.insert(p.pid);
                    self.members.push((p.pid, p.start));
                }
            }
            if self.members.len() == before {
                break;
            }
            added = true;
        }
        added
    }

    /// Sends `sig` to every member, frozen first (but for SIGCONT) so that none forks a child
    /// that escapes it, and continued after (but for a stop). EPERM when a member could not be
    /// signalled; the others are.
    pub fn signal(&mut self, sig: Signal) -> Result<(), Errno> {
        use Signal::{SIGCONT, SIGKILL, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU};
        if sig == SIGCONT {
            self.refresh();
            return self.send(SIGCONT);
        }
        let mut result = self.freeze();
        if sig != SIGSTOP {
            result = result.and(self.send(sig));
        }
        if !matches!(sig, SIGKILL | SIGSTOP | SIGTSTP | SIGTTIN | SIGTTOU) {
            let _ = self.send(SIGCONT);
        }
        result
    }

    /// SIGSTOP to every member, walk after walk, until a walk finds no new one (bounded).
    fn freeze(&mut self) -> Result<(), Errno> {
        let mut frozen: HashSet<(Pid, u64)> = HashSet::new();
        let mut result = Ok(());
        for _ in 0..FREEZE_WALKS {
            self.refresh();
            let mut new = false;
            for &(pid, start) in &self.members {
                if frozen.insert((pid, start)) {
                    new = true;
                    if kill(pid, Signal::SIGSTOP) == Err(Errno::EPERM) {
                        result = Err(Errno::EPERM);
                    }
                }
            }
            if !new {
                break;
            }
        }
        result
    }

    fn send(&self, sig: Signal) -> Result<(), Errno> {
        let mut result = Ok(());
        for &(pid, _) in &self.members {
            if kill(pid, sig) == Err(Errno::EPERM) {
                result = Err(Errno::EPERM);
            }
        }
        result
    }

    /// The members' state, judged as a group's is: zombies are not members.
    pub fn state(&mut self) -> Group {
        if !super::proc_is_ours() {
            // Without /proc only the members' pids can be asked.
            let alive = self.members.iter().any(|&(pid, _)| kill(pid, None).is_ok());
            return if alive { Group::Running } else { Group::Empty };
        }
        self.refresh();
        let stopped = |pid: Pid| live(pid).is_some_and(|s| matches!(s.state, b'T' | b't'));
        match &self.members[..] {
            [] => Group::Empty,
            members if members.iter().all(|&(pid, _)| stopped(pid)) => Group::Stopped,
            _ => Group::Running,
        }
    }

    /// Whether a member still lives.
    pub fn alive(&mut self) -> bool {
        self.state() != Group::Empty
    }
}

/// Process `pid`'s stat, unless it is gone or a zombie.
fn live(pid: Pid) -> Option<super::adopted::Stat> {
    super::adopted::stat(pid).filter(|s| !matches!(s.state, b'Z' | b'X' | b'x'))
}

/// Every process /proc shows.
fn processes() -> Option<Vec<Seen>> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // Gone meanwhile: no process.
        if let Some(s) = super::adopted::stat(Pid::from_raw(pid)) {
            all.push(Seen { pid: Pid::from_raw(pid), parent: s.parent, start: s.start_time, state: s.state });
        }
    }
    Some(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(pid: i32, parent: i32, start: u64, state: u8) -> Seen {
        Seen { pid: Pid::from_raw(pid), parent: Pid::from_raw(parent), start, state }
    }

    /// The walk follows parent pids from the members, in any order /proc lists them, keeps a
    /// descendant reparented away, and never takes the script's parent, its siblings, the
    /// holder, or a later process that was given a member's pid.
    #[test]
    fn a_walk_finds_the_descendants_and_nothing_else() {
        let mut tree = Tree { members: vec![(Pid::from_raw(10), 100)], holder: Pid::from_raw(13) };
        let all = [
            seen(12, 11, 102, b'S'),
            seen(11, 10, 101, b'S'),
            seen(10, 1, 100, b'S'),
            seen(9, 1, 90, b'S'),
            seen(13, 11, 103, b'S'),
            seen(14, 13, 104, b'S'),
            seen(15, 10, 105, b'Z'),
            seen(16, 9, 106, b'S'),
        ];
        assert!(tree.update(&all));
        let pids = |t: &Tree| t.members.iter().map(|&(p, _)| p.as_raw()).collect::<Vec<_>>();
        assert_eq!(pids(&tree), [10, 11, 12]);
        // 11 ends: 12 is reparented to init and still a member; 11's pid is given to another.
        let all =
            [seen(12, 1, 102, b'S'), seen(10, 1, 100, b'S'), seen(11, 9, 200, b'S'), seen(17, 11, 201, b'S')];
        assert!(!tree.update(&all));
        assert_eq!(pids(&tree), [10, 12]);
        // The script ends; its known descendant is the tree.
        let all = [seen(12, 1, 102, b'T'), seen(18, 12, 300, b'T')];
        assert!(tree.update(&all));
        assert_eq!(pids(&tree), [12, 18]);
    }
}
