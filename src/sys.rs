//! The few operating-system calls that need `unsafe` or must run between fork and exec.

use std::io::{self, IsTerminal};
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, getppid, tcgetpgrp, tcsetpgrp};

/// The terminal on stdin, when this process is in its foreground process group (interactive use).
pub fn foreground_terminal() -> bool {
    let stdin = stdin_fd();
    io::stdin().is_terminal() && tcgetpgrp(stdin).is_ok_and(|pg| pg == getpgrp())
}

/// The foreground process group of the terminal on stdin, if there is one.
pub fn terminal_group() -> Option<Pid> {
    tcgetpgrp(stdin_fd()).ok()
}

/// Makes `pgid` the foreground process group of the terminal on stdin. SIGTTOU is blocked for
/// the call because a background group (as the wrapper is, once it has handed the terminal to
/// the command) may not otherwise change it.
pub fn give_terminal_to(pgid: Pid) {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old)).is_ok() {
        // Best effort: the terminal may have gone away (hangup), which is not an error here.
        let _ = tcsetpgrp(stdin_fd(), pgid);
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
}

fn stdin_fd() -> BorrowedFd<'static> {
    // SAFETY: fd 0 stays open for the life of the process (it is never closed here), so a
    // 'static borrow of it is sound; if it is not a terminal the calls above simply fail.
    unsafe { BorrowedFd::borrow_raw(0) }
}

/// Becomes a child subreaper, so orphaned descendants of the command are re-parented to the
/// wrapper and reaped by it instead of escaping to init. Returns whether it worked.
pub fn become_subreaper() -> bool {
    nix::sys::prctl::set_child_subreaper(true).is_ok()
}

/// Arranges for the command to start in its own process group (and, with `foreground`, as the
/// terminal's foreground group) and to be killed if the wrapper dies; with `no_new_privs`, it
/// can never gain privileges (setuid bits, file capabilities) and so never leave the wrapper's
/// reach.
pub fn prepare_child(cmd: &mut Command, foreground: bool, no_new_privs: bool) {
    let parent = nix::unistd::getpid();
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (prctl, getppid, sigprocmask, tcsetpgrp); it allocates
    // nothing and touches no locks.
    unsafe {
        cmd.pre_exec(move || {
            // The parent-death signal fires when the *thread* that forked exits; the command
            // is spawned from the main thread, which lives as long as the wrapper.
            nix::sys::prctl::set_pdeathsig(Some(Signal::SIGKILL)).map_err(io::Error::from)?;
            if getppid() != parent {
                // The wrapper died before the line above took effect.
                // (No allocation here: this runs between fork and exec.)
                return Err(io::Error::from(nix::errno::Errno::ESRCH));
            }
            if foreground {
                give_terminal_to(nix::unistd::getpid());
            }
            if no_new_privs {
                nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
            }
            Ok(())
        });
    }
}

/// A small process that outlives the wrapper for one purpose: if the wrapper dies without
/// saying goodbye (SIGKILL, the OOM killer), it kills the command's whole process group. The
/// parent-death signal reaches only the command itself, not what the command started.
pub struct Guardian {
    /// Our end of the pipe: closed by the kernel when the wrapper dies.
    write: std::os::fd::OwnedFd,
}

impl Guardian {
    /// Forks the guardian of process group `pgid`.
    pub fn start(pgid: Pid) -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (read_fd, write_fd) = (read.as_raw_fd(), write.as_raw_fd());
        // SAFETY: the child only makes async-signal-safe system calls (close, dup2, setpgid,
        // read, kill, _exit) and never returns into Rust code that could allocate or lock.
        match unsafe { nix::unistd::fork() }? {
            nix::unistd::ForkResult::Child => unsafe { guard(read_fd, write_fd, pgid.as_raw()) },
            nix::unistd::ForkResult::Parent { .. } => {
                drop(read);
                Ok(Guardian { write })
            }
        }
    }

    /// The command's group is gone: the guardian may leave without doing anything.
    pub fn dismiss(self) {
        let _ = nix::unistd::write(&self.write, b"x");
    }
}

/// The guardian's whole life, between fork and `_exit`.
///
/// # Safety
/// Only to be called in a freshly forked child; it never returns.
unsafe fn guard(read_fd: i32, write_fd: i32, pgid: i32) -> ! {
    use nix::libc;
    // SAFETY (whole block): plain system calls on file descriptors and process ids this
    // process owns; all async-signal-safe.
    unsafe {
        libc::close(write_fd);
        // Out of the wrapper's process group, so that signals meant for it pass by.
        libc::setpgid(0, 0);
        // Keep nothing open but the pipe (not stdout: a reader waiting for EOF must get it).
        if libc::dup2(read_fd, 0) < 0 {
            libc::_exit(1);
        }
        for fd in 1..1024 {
            libc::close(fd);
        }
        let mut byte = 0u8;
        loop {
            let n = libc::read(0, (&raw mut byte).cast(), 1);
            if n == 1 {
                libc::_exit(0);
            }
            if n == 0 {
                // EOF without goodbye: the wrapper died. Nothing of its command may live on.
                libc::kill(-pgid, libc::SIGKILL);
                libc::_exit(0);
            }
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(1);
            }
        }
    }
}
