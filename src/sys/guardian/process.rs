//! The guardian's own life, in a process of its own: bare, allocation-free system calls.

use nix::libc;

use super::procfs::{each_process, parse_pid, proc_is_ours, read_small, stat_path};
use super::tree::Tree;
use super::{
    ACQUIRED, CONFIRM_EVERY_NS, CONFIRM_WITHIN_NS, GUARD, KILL_BY, KNOWN, NO_LOCK, RUNS, TREE, UNWATCH,
    Verdict, WATCH,
};
use crate::exit::status;

/// How often a watching guardian looks at the command.
const WATCH_EVERY_MS: i32 = 10;

/// Signals that would end the guardian by default and that it ignores: it stays until the
/// wrapper dismisses it or dies (`pkill redlock-run` must not leave a command unguarded while
/// its wrapper stops it). SIGKILL still ends it. (The handlers it inherits from the wrapper
/// would also keep it alive, by accident; these say so.)
const GUARDIAN_IGNORES: [i32; 11] = [
    nix::libc::SIGHUP,
    nix::libc::SIGINT,
    nix::libc::SIGQUIT,
    nix::libc::SIGTERM,
    nix::libc::SIGUSR1,
    nix::libc::SIGUSR2,
    nix::libc::SIGALRM,
    nix::libc::SIGPIPE,
    nix::libc::SIGTSTP,
    nix::libc::SIGTTIN,
    nix::libc::SIGTTOU,
];

/// The descriptors a guardian starts with (-1: none): its socket, a copy of the wrapper's
/// stderr, the ticket its releaser needs.
pub(in crate::sys) struct Fds {
    pub socket: i32,
    pub stderr: i32,
    pub ticket: i32,
}

/// The guardian's whole life, reading its socket, until `_exit` or the releaser's exec;
/// `announce`: says that it runs once it is ready (an exec'd guardian; see
/// [`Guardian::ready`](super::Guardian::ready)).
///
/// # Safety
/// Only to be called in a process of its own (exec'd or freshly forked) that holds no other
/// end of the socket pair; it never returns.
pub(in crate::sys) unsafe fn guard(fds: Fds, wrapper: i32, open_max: i32, announce: bool) -> ! {
    // SAFETY: (the whole block) plain system calls on file descriptors, paths and process ids this
    // process owns; all async-signal-safe.
    unsafe {
        // Out of the wrapper's process group, so that signals meant for it pass by.
        libc::setpgid(0, 0);
        for sig in GUARDIAN_IGNORES {
            libc::signal(sig, libc::SIG_IGN);
        }
        // An exec'd guardian starts with every signal blocked; those it ignores are discarded.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Keep nothing open but the socket (0), stderr (2) and the ticket (3): not stdout, so
        // that a reader waiting for its end gets it. Copied high first, so that no move
        // overwrites another's source.
        let high = |fd: i32| if fd >= 0 { libc::fcntl(fd, libc::F_DUPFD, 10) } else { -1 };
        let (socket, stderr, ticket) = (high(fds.socket), high(fds.stderr), high(fds.ticket));
        if socket < 0 || libc::dup2(socket, 0) < 0 {
            libc::_exit(status::INTERNAL.into());
        }
        let stderr = stderr >= 0 && libc::dup2(stderr, 2) == 2;
        let mut ticket = ticket >= 0 && libc::dup2(ticket, 3) == 3;
        libc::close(1);
        for (fd, kept) in [(2, stderr), (3, ticket)] {
            if !kept {
                libc::close(fd);
            }
        }
        // One close_range(2) (Linux 5.9) instead of a close per possible descriptor; where the
        // kernel lacks it, the loop, up to the descriptor limit.
        if libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) != 0 {
            for fd in 4..open_max {
                libc::close(fd);
            }
        }
        if announce && libc::write(0, [RUNS].as_ptr().cast(), 1) != 1 {
            // The wrapper is gone already, before its command started (a waiter, say).
            wrapper_died(None, wrapper, -1, ticket, stderr);
        }
        // The command, once it has said its pid: its process group and its /proc stat file.
        let mut command: Option<(i32, [u8; 32])> = None;
        // A script that does not lead its process group, guarded as itself and its descendants
        // (`TREE`), not as a group.
        let mut tree = Tree::new();
        let mut is_tree = false;
        // Never taken for the script's: the guardian and its wrapper (the script's holder, which
        // the script forked through `lock`).
        let spare = [libc::getpid(), wrapper];
        let mut watching = false;
        let mut kill_by = i64::MAX;
        let mut killed = false;
        let mut acquired = -1i64;
        loop {
            let now = super::monotonic_ns();
            if let Some((pid, _)) = command
                && !killed
                && now >= kill_by
            {
                // The lease deadline is here and the wrapper has not stopped its command
                // (stopped itself, say): nothing of it may run once the key can expire.
                if is_tree {
                    tree.kill(spare);
                } else {
                    libc::kill(-pid, libc::SIGKILL);
                }
                killed = true;
            }
            let mut wait = if watching { WATCH_EVERY_NS } else { i64::MAX };
            if command.is_some() && !killed {
                wait = wait.min(kill_by - now);
            }
            let timeout = libc::timespec { tv_sec: wait / 1_000_000_000, tv_nsec: wait % 1_000_000_000 };
            let mut pipe = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
            let limit = if wait == i64::MAX { std::ptr::null() } else { &raw const timeout };
            let ready = libc::ppoll(&mut pipe, 1, limit, std::ptr::null());
            if ready == 0 {
                if watching
                    && let Some((_, path)) = &command
                    && command_runs(path)
                {
                    libc::kill(wrapper, libc::SIGCONT);
                }
                continue;
            }
            if ready < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                libc::_exit(status::INTERNAL.into());
            }
            let mut message = [0u8; 13];
            match libc::read(0, message.as_mut_ptr().cast(), 1) {
                1 if message[0] == WATCH => watching = true,
                1 if message[0] == UNWATCH => watching = false,
                1 if message[0] == NO_LOCK => {
                    if ticket {
                        libc::close(3);
                        ticket = false;
                    }
                }
                1 if message[0] == GUARD => {
                    // The pid came in the same write: it is there.
                    if libc::read(0, message[1..].as_mut_ptr().cast(), 4) != 4 {
                        libc::_exit(status::INTERNAL.into());
                    }
                    let pid = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
                    command = Some((pid, stat_path(pid)));
                }
                1 if message[0] == TREE || message[0] == KNOWN => {
                    if libc::read(0, message[1..].as_mut_ptr().cast(), 12) != 12 {
                        libc::_exit(status::INTERNAL.into());
                    }
                    let pid = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
                    let mut start = [0u8; 8];
                    start.copy_from_slice(&message[5..]);
                    let start = u64::from_ne_bytes(start);
                    if message[0] == TREE {
                        command = Some((pid, stat_path(pid)));
                        is_tree = true;
                        tree.root(pid, start);
                    } else {
                        tree.add(pid, start);
                    }
                }
                1 if message[0] == KILL_BY || message[0] == ACQUIRED => {
                    if libc::read(0, message[1..].as_mut_ptr().cast(), 8) != 8 {
                        libc::_exit(status::INTERNAL.into());
                    }
                    let mut at = [0u8; 8];
                    at.copy_from_slice(&message[1..9]);
                    let at = i64::from_ne_bytes(at);
                    if message[0] == KILL_BY { kill_by = at } else { acquired = at }
                }
                1 => libc::_exit(status::SUCCESS.into()),
                n if n == 0 || *libc::__errno_location() == libc::ECONNRESET => {
                    // EOF without goodbye (a reset, if it left the guardian's news unread):
                    // the wrapper died.
                    let command = command.map(|(pid, _)| {
                        if is_tree { Guarded::Tree(&mut tree, spare) } else { Guarded::Group(pid) }
                    });
                    wrapper_died(command, wrapper, acquired, ticket, stderr);
                }
                _ if *libc::__errno_location() == libc::EINTR => {}
                _ => libc::_exit(status::INTERNAL.into()),
            }
        }
    }
}

/// What the guardian kills if its wrapper dies.
enum Guarded<'a> {
    /// The command's process group.
    Group(i32),
    /// A script's tree, and the processes never to take for its members.
    Tree(&'a mut Tree, [i32; 2]),
}

/// The wrapper died: nothing of its command may live on, and once nothing can, the lock goes
/// back at once (the releaser, where there is a ticket).
///
/// # Safety
/// Only plain system calls; in the guardian's own process.
unsafe fn wrapper_died(
    command: Option<Guarded>,
    wrapper: i32,
    acquired: i64,
    ticket: bool,
    stderr: bool,
) -> ! {
    // SAFETY: (the whole block) plain system calls on a process group and descriptors of its own.
    unsafe {
        let verdict = match command {
            Some(Guarded::Group(pid)) => {
                libc::kill(-pid, libc::SIGKILL);
                group_dead(pid)
            }
            Some(Guarded::Tree(tree, spare)) => {
                tree.kill(spare);
                tree.dead(spare)
            }
            None => Verdict::NothingRan,
        };
        let confirmed = matches!(verdict, Verdict::Dead | Verdict::NothingRan);
        if ticket {
            libc::close(0);
            // Returns only if the exec failed.
            release(wrapper, acquired, verdict);
            if stderr && confirmed {
                // Where this program cannot be run again (an emulator without binfmt runs it:
                // /proc/self/exe is the emulator), or the system refused a process.
                let mut errno = [0u8; 24];
                let len = decimal(i64::from(*libc::__errno_location()), &mut errno);
                say(b"redlock-run: the wrapper died; its lock cannot be released early, since this program could not be run again to release it (execve of /proc/self/exe: errno ");
                say(&errno[..len]);
                say(b"), and expires by itself\n");
            }
        }
        if stderr && !confirmed {
            say(b"redlock-run: the wrapper died and its command's processes could not be confirmed dead: its lock was NOT released and expires by itself\n");
        }
        libc::_exit(status::SUCCESS.into())
    }
}

/// How often a watching guardian looks at the command.
const WATCH_EVERY_NS: i64 = WATCH_EVERY_MS as i64 * 1_000_000;

/// Writes `line` to stderr (descriptor 2), best effort.
///
/// # Safety
/// A plain system call.
unsafe fn say(line: &[u8]) {
    // SAFETY: the buffer outlives the call.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// Execs the releaser (see [`super::Releaser`]) with the ticket on descriptor 3; returns only
/// if that fails.
///
/// # Safety
/// Only plain system calls; in the guardian's own process.
unsafe fn release(wrapper: i32, acquired: i64, verdict: Verdict) {
    let mut numbers = [[0u8; 24]; 3];
    let index = Verdict::ALL.iter().position(|&v| v == verdict).unwrap_or(0) as i64;
    for (buf, n) in numbers.iter_mut().zip([wrapper as i64, acquired, index]) {
        decimal(n, buf);
    }
    let argv = [
        super::RELEASER_ARGV0.as_ptr(),
        numbers[0].as_ptr().cast(),
        numbers[1].as_ptr().cast(),
        numbers[2].as_ptr().cast(),
        std::ptr::null(),
    ];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: NUL-terminated strings and NULL-terminated arrays that live across the call.
    unsafe {
        libc::execve(c"/proc/self/exe".as_ptr(), argv.as_ptr(), envp.as_ptr());
    }
}

/// Writes `n` in decimal, NUL-terminated, into `buf`, without allocating; returns its length.
fn decimal(n: i64, buf: &mut [u8; 24]) -> usize {
    let mut digits = [0u8; 20];
    let (mut m, mut len) = (n.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (m % 10) as u8;
        len += 1;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    let mut at = 0;
    if n < 0 {
        buf[0] = b'-';
        at = 1;
    }
    for i in 0..len {
        buf[at + i] = digits[len - 1 - i];
    }
    buf[at + len] = 0;
    at + len
}

/// Whether every process of group `pgid` is dead (gone, or a zombie) after SIGKILL, looking
/// again until [`CONFIRM_WITHIN_NS`] has passed.
///
/// # Safety
/// Only plain system calls; in the guardian's own process.
unsafe fn group_dead(pgid: i32) -> Verdict {
    // SAFETY: (the whole block) plain system calls on paths, buffers and process ids of its own.
    unsafe {
        let until = super::monotonic_ns() + CONFIRM_WITHIN_NS;
        loop {
            // No process at all in the group, zombies included: certain without /proc.
            if libc::kill(-pgid, 0) != 0 && *libc::__errno_location() == libc::ESRCH {
                return Verdict::Dead;
            }
            if !proc_is_ours() {
                return Verdict::NoProc;
            }
            match members(pgid) {
                Members::None => return Verdict::Dead,
                Members::Unsignalable => return Verdict::Unsignalable,
                Members::Unreadable => return Verdict::NoProc,
                Members::Live => {}
            }
            if super::monotonic_ns() >= until {
                return Verdict::Stuck;
            }
            // A member forked as the first SIGKILL went out gets it too.
            libc::kill(-pgid, libc::SIGKILL);
            let pause = libc::timespec { tv_sec: 0, tv_nsec: CONFIRM_EVERY_NS };
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
    }
}

/// What `/proc` shows of a process group's members.
enum Members {
    /// None alive (zombies are not).
    None,
    /// At least one alive, every one of them one the guardian may signal.
    Live,
    /// One alive that the guardian may not signal: SIGKILL cannot reach it.
    Unsignalable,
    Unreadable,
}

/// Looks through `/proc` for live members of group `pgid`.
///
/// # Safety
/// Only plain system calls; in the guardian's own process.
unsafe fn members(pgid: i32) -> Members {
    let mut found = Members::None;
    // SAFETY: plain system calls on paths and process ids of its own.
    let read = unsafe {
        each_process(|pid| {
            let Some((state, group)) = stat_of(&stat_path(pid)) else { return true };
            if group != pgid || matches!(state, b'Z' | b'X' | b'x') {
                return true;
            }
            if libc::kill(pid, 0) != 0 && *libc::__errno_location() == libc::EPERM {
                found = Members::Unsignalable;
                return false;
            }
            found = Members::Live;
            true
        })
    };
    if read { found } else { Members::Unreadable }
}

/// The state letter and the process group of the process whose stat file is at `path`.
///
/// # Safety
/// Only plain system calls.
unsafe fn stat_of(path: &[u8; 32]) -> Option<(u8, i32)> {
    let mut buf = [0u8; 512];
    // SAFETY: `stat_path` fills at most 21 of the path's 32 zeroed bytes.
    let n = unsafe { read_small(path.as_ptr().cast(), &mut buf) }?;
    parse_stat(&buf[..n])
}

/// The state and process group from a stat line: `PID (COMM) STATE PPID PGRP …`, where COMM
/// may hold anything, `)` included.
fn parse_stat(stat: &[u8]) -> Option<(u8, i32)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat.get(close + 2..)?.split(|&b| b == b' ');
    let state = *fields.next()?.first()?;
    let _ppid = fields.next()?;
    Some((state, parse_pid(fields.next()?)?))
}

/// Whether the command (its /proc stat file at `stat_path`, NUL-terminated) is alive, not
/// stopped and not in uninterruptible sleep. Async-signal-safe: no allocation.
///
/// # Safety
/// Only plain system calls; callable between fork and `_exit`.
unsafe fn command_runs(stat_path: &[u8; 32]) -> bool {
    // D is not running either: a vfork() parent waits there for its stopped child, and a
    // process that was really continued soon shows R or S.
    // SAFETY: only plain system calls.
    !matches!(unsafe { stat_of(stat_path) }, Some((b'T' | b't' | b'Z' | b'X' | b'x' | b'D', _)) | None)
}

#[cfg(test)]
mod guardian_tests {
    use super::stat_path;

    #[test]
    fn stat_lines_give_their_state_and_group_whatever_the_name() {
        assert_eq!(super::parse_stat(b"12 (sh) S 1 12 12 0"), Some((b'S', 12)));
        assert_eq!(super::parse_stat(b"12 (a) b) Z 1 345 12 0"), Some((b'Z', 345)));
        assert_eq!(super::parse_stat(b"12 (sh"), None);
        assert_eq!(super::parse_stat(b"12 (sh) R 1 x"), None);
    }

    #[test]
    fn numbers_are_written_in_decimal_without_allocating() {
        for n in [0, 7, -1, 1234567890123, i64::MIN, i64::MAX] {
            let mut buf = [0u8; 24];
            super::decimal(n, &mut buf);
            let end = buf.iter().position(|&b| b == 0).unwrap();
            assert_eq!(std::str::from_utf8(&buf[..end]).unwrap(), n.to_string());
        }
    }

    #[test]
    fn stat_paths_are_written_whole_and_nul_terminated() {
        for pid in [1, 9, 10, 12345, 4_194_304, i32::MAX] {
            let path = stat_path(pid);
            let end = path.iter().position(|&b| b == 0).expect("NUL-terminated");
            assert_eq!(std::str::from_utf8(&path[..end]).unwrap(), format!("/proc/{pid}/stat"));
        }
    }
}
