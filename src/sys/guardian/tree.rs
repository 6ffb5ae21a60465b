//! A guardian's script that does not lead its process group: the script and its descendants,
//! killed instead of a group. Allocation-free, as all of the guardian: a fixed number of
//! members, found by parent pid in `/proc` (from the script and from every member the wrapper
//! told it of, which may have been reparented away), each known with its start time.

use nix::libc;

use super::procfs::{each_process, proc_is_ours, read_small, stat_path};
use super::{CONFIRM_EVERY_NS, CONFIRM_WITHIN_NS, Verdict};

/// How many processes of a script's tree a guardian follows at most.
pub(super) const CAP: usize = 1024;

/// How many walks freezing the tree makes at most, looking for children forked as it began.
const FREEZE_WALKS: usize = 16;

/// The script (first) and the descendants known, each with its start time (clock ticks since
/// boot, /proc/PID/stat's 22nd field), which tells it from a later process given its pid.
pub(super) struct Tree {
    pid: [i32; CAP],
    start: [u64; CAP],
    len: usize,
}

/// What one walk through `/proc` found.
struct Walk {
    /// Members alive (not zombies).
    live: usize,
    added: bool,
    /// A member the guardian may not signal (another user's).
    unsignalable: bool,
    unreadable: bool,
}

impl Tree {
    pub(super) const fn new() -> Tree {
        Tree { pid: [0; CAP], start: [0; CAP], len: 0 }
    }

    /// The script `pid`, started at `start`: the tree begins anew.
    pub(super) fn root(&mut self, pid: i32, start: u64) {
        self.len = 0;
        self.add(pid, start);
    }

    /// A member more; when the tree is full, the members that have ended make room first.
    pub(super) fn add(&mut self, pid: i32, start: u64) {
        if self.index(pid, start).is_some() {
            return;
        }
        if self.len == CAP {
            self.forget_ended();
        }
        if self.len < CAP {
            self.pid[self.len] = pid;
            self.start[self.len] = start;
            self.len += 1;
        }
    }

    fn index(&self, pid: i32, start: u64) -> Option<usize> {
        (0..self.len).find(|&i| self.pid[i] == pid && self.start[i] == start)
    }

    /// Whether `pid` is a member's, as the process that has it now: a live process's parent is
    /// alive, so its start time says whether it is the member or a later process.
    fn is_live_member(&self, pid: i32) -> bool {
        (0..self.len).any(|i| self.pid[i] == pid)
            && stat(pid).is_some_and(|(_, _, start)| self.index(pid, start).is_some())
    }

    fn forget_ended(&mut self) {
        let mut kept = 0;
        for i in 0..self.len {
            let alive =
                stat(self.pid[i]).is_some_and(|(state, _, start)| start == self.start[i] && !dead(state));
            if alive {
                self.pid[kept] = self.pid[i];
                self.start[kept] = self.start[i];
                kept += 1;
            }
        }
        self.len = kept;
    }

    /// One walk: every live process whose parent is a live member joins; `sig` goes to every
    /// live member found (and joined). `spare`: processes never taken (the guardian itself and
    /// its wrapper, which the script forked through `lock` and whose child the guardian is).
    fn walk(&mut self, sig: i32, spare: [i32; 2]) -> Walk {
        let mut walk = Walk { live: 0, added: false, unsignalable: false, unreadable: false };
        // SAFETY: plain system calls on process ids and buffers of its own.
        let read = unsafe {
            each_process(|pid| {
                if spare.contains(&pid) {
                    return true;
                }
                let Some((state, parent, start)) = stat(pid) else { return true };
                if dead(state) {
                    return true;
                }
                if self.index(pid, start).is_none() {
                    if !self.is_live_member(parent) || self.len == CAP {
                        return true;
                    }
                    self.add(pid, start);
                    walk.added = true;
                }
                walk.live += 1;
                if libc::kill(pid, sig) != 0 && *libc::__errno_location() == libc::EPERM {
                    walk.unsignalable = true;
                }
                true
            })
        };
        walk.unreadable = !read;
        walk
    }

    /// Kills the tree: frozen (SIGSTOP) walk after walk until no new member appears, so that
    /// none forks away meanwhile, then SIGKILL to every member. Without `/proc`, only the pids
    /// known are killed.
    pub(super) fn kill(&mut self, spare: [i32; 2]) {
        // SAFETY: plain system calls.
        if !unsafe { proc_is_ours() } {
            for i in 0..self.len {
                // SAFETY: a plain system call.
                unsafe { libc::kill(self.pid[i], libc::SIGKILL) };
            }
            return;
        }
        for _ in 0..FREEZE_WALKS {
            if !self.walk(libc::SIGSTOP, spare).added {
                break;
            }
        }
        self.walk(libc::SIGKILL, spare);
    }

    /// Whether every member is dead after [`Tree::kill`], looking again (and killing what a
    /// walk finds) until [`CONFIRM_WITHIN_NS`] has passed.
    pub(super) fn dead(&mut self, spare: [i32; 2]) -> Verdict {
        // SAFETY: plain system calls.
        if !unsafe { proc_is_ours() } {
            return Verdict::NoProc;
        }
        let until = super::monotonic_ns() + CONFIRM_WITHIN_NS;
        loop {
            let walk = self.walk(libc::SIGKILL, spare);
            if walk.unreadable {
                return Verdict::NoProc;
            }
            if walk.unsignalable {
                return Verdict::Unsignalable;
            }
            if walk.live == 0 {
                return Verdict::Dead;
            }
            if super::monotonic_ns() >= until {
                return Verdict::Stuck;
            }
            let pause = libc::timespec { tv_sec: 0, tv_nsec: CONFIRM_EVERY_NS };
            // SAFETY: the timespec outlives the call.
            unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        }
    }
}

fn dead(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// The state, parent and start time of process `pid`, from /proc/PID/stat.
fn stat(pid: i32) -> Option<(u8, i32, u64)> {
    let mut buf = [0u8; 512];
    // SAFETY: `stat_path` fills at most 21 of the path's 32 zeroed bytes.
    let n = unsafe { read_small(stat_path(pid).as_ptr().cast(), &mut buf) }?;
    parse(&buf[..n])
}

/// `PID (COMM) STATE PPID PGRP … STARTTIME …`, COMM holding anything, `)` included; the start
/// time is the 20th field after COMM.
fn parse(stat: &[u8]) -> Option<(u8, i32, u64)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat.get(close + 2..)?.split(|&b| b == b' ');
    let state = *fields.next()?.first()?;
    let parent = number(fields.next()?)?;
    let start = number(fields.nth(17)?)?;
    Some((state, i32::try_from(parent).ok()?, start))
}

/// A decimal number without allocating.
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    #[test]
    fn stat_lines_give_their_state_parent_and_start_time() {
        let line = b"42 (a) b) S 7 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 123456 1000 2";
        assert_eq!(super::parse(line), Some((b'S', 7, 123456)));
        assert_eq!(super::parse(b"42 (sh) S 7 42"), None);
        let own = std::fs::read(format!("/proc/{}/stat", std::process::id())).unwrap();
        let (_, parent, _) = super::parse(&own).expect("this process's own line");
        assert_eq!(parent, nix::unistd::getppid().as_raw());
    }
}
