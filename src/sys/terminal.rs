//! The terminals: the one on stdin (whether the run is in its foreground, and handing it over)
//! and the one on stderr (its width, and whether the run is in its foreground).

use std::io::{self, IsTerminal};
use std::os::fd::BorrowedFd;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

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

/// Whether the terminal on stderr is this process's to write on: its group is the terminal's
/// foreground one (not a job sent to the background, `cmd &` or `bg`), or the terminal is not the
/// one the process is controlled by (no job control there, nobody else's prompt to write over).
pub fn stderr_in_foreground() -> bool {
    // SAFETY: fd 2 stays open for the life of the process (it is never closed here); the borrow
    // ends with the call, which fails harmlessly on a descriptor that is no terminal.
    let stderr = unsafe { BorrowedFd::borrow_raw(2) };
    tcgetpgrp(stderr).map_or(true, |pg| pg == getpgrp())
}

/// How many columns the terminal on stderr has, if stderr is one that says.
pub fn stderr_columns() -> Option<u16> {
    let mut size = nix::libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct given, which outlives the call;
    // on a descriptor that is no terminal it fails and writes nothing.
    let ok = unsafe { nix::libc::ioctl(2, nix::libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col)
}
