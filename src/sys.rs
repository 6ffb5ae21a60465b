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
/// terminal's foreground group) and to be killed if the wrapper dies.
pub fn prepare_child(cmd: &mut Command, foreground: bool) {
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
            Ok(())
        });
    }
}
