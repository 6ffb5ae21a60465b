//! The guardian's own life, in a process of its own: bare, allocation-free system calls.

use nix::libc;

use super::{GUARD, RUNS, UNWATCH, WATCH};

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

/// `/proc/PID/stat`, NUL-terminated, written without allocating (in the guardian).
fn stat_path(pid: i32) -> [u8; 32] {
    let mut path = [0u8; 32];
    path[..6].copy_from_slice(b"/proc/");
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (pid.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        path[6 + i] = digits[len - 1 - i];
    }
    path[6 + len..6 + len + 5].copy_from_slice(b"/stat");
    path
}

/// The guardian's whole life, reading its socket `socket`, until `_exit`; `announce`: says
/// that it runs once it is ready (an exec'd guardian; see [`Guardian::ready`]).
///
/// # Safety
/// Only to be called in a process of its own (exec'd or freshly forked) that holds no other
/// end of the socket pair; it never returns.
pub(super) unsafe fn guard(socket: i32, wrapper: i32, open_max: i32, announce: bool) -> ! {
    // SAFETY (whole block): plain system calls on file descriptors, paths and process ids this
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
        // Keep nothing open but the socket (not stdout: a reader waiting for EOF must get it).
        if socket != 0 && libc::dup2(socket, 0) < 0 {
            libc::_exit(1);
        }
        // One close_range(2) (Linux 5.9) instead of a close per possible descriptor; where the
        // kernel lacks it, the loop, up to the descriptor limit.
        if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
            for fd in 1..open_max {
                libc::close(fd);
            }
        }
        if announce && libc::write(0, [RUNS].as_ptr().cast(), 1) != 1 {
            // The wrapper is gone already, before its command started.
            libc::_exit(0);
        }
        // The command, once it has said its pid: its process group and its /proc stat file.
        let mut command: Option<(i32, [u8; 32])> = None;
        let mut watching = false;
        loop {
            let mut pipe = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
            let ready = libc::poll(&mut pipe, 1, if watching { WATCH_EVERY_MS } else { -1 });
            if ready == 0 {
                if let Some((_, path)) = &command
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
                libc::_exit(1);
            }
            let mut message = [0u8; 5];
            match libc::read(0, message.as_mut_ptr().cast(), 1) {
                1 if message[0] == WATCH => watching = true,
                1 if message[0] == UNWATCH => watching = false,
                1 if message[0] == GUARD => {
                    // The pid came in the same write: it is there.
                    if libc::read(0, message[1..].as_mut_ptr().cast(), 4) != 4 {
                        libc::_exit(1);
                    }
                    let pid = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
                    command = Some((pid, stat_path(pid)));
                }
                1 => libc::_exit(0),
                0 => {
                    // EOF without goodbye: the wrapper died. Nothing of its command may live on.
                    if let Some((pid, _)) = command {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                    libc::_exit(0);
                }
                _ if *libc::__errno_location() == libc::EINTR => {}
                _ => libc::_exit(1),
            }
        }
    }
}

/// Whether the command (its /proc stat file at `stat_path`, NUL-terminated) is alive, not
/// stopped and not in uninterruptible sleep. Async-signal-safe: no allocation.
///
/// # Safety
/// Only plain system calls; callable between fork and `_exit`.
unsafe fn command_runs(stat_path: &[u8; 32]) -> bool {
    use nix::libc;
    let mut buf = [0u8; 512];
    // SAFETY: the path is NUL-terminated (`stat_path` fills at most 21 of its 32 zeroed
    // bytes); the buffer outlives the read.
    let n = unsafe {
        let fd = libc::open(stat_path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let Ok(n) = usize::try_from(n) else { return false };
    let stat = &buf[..n];
    // The state follows the last ')' and a space.
    // D is not running either: a vfork() parent waits there for its stopped child, and a
    // process that was really continued soon shows R or S.
    match stat.iter().rposition(|&b| b == b')').and_then(|i| stat.get(i + 2)) {
        Some(b'T' | b't' | b'Z' | b'X' | b'x' | b'D') | None => false,
        Some(_) => true,
    }
}

#[cfg(test)]
mod guardian_tests {
    use super::stat_path;

    #[test]
    fn stat_paths_are_written_whole_and_nul_terminated() {
        for pid in [1, 9, 10, 12345, 4_194_304, i32::MAX] {
            let path = stat_path(pid);
            let end = path.iter().position(|&b| b == 0).expect("NUL-terminated");
            assert_eq!(std::str::from_utf8(&path[..end]).unwrap(), format!("/proc/{pid}/stat"));
        }
    }
}
