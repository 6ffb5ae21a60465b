//! Signal dispositions: which were ignored at start, which have a handler of the wrapper's.

use nix::libc;
use nix::sys::signal::Signal;

/// Whether `sig` was ignored (SIG_IGN) when the wrapper started, as `nohup` and shells starting
/// background jobs arrange: such a signal is left ignored, for the command too.
pub fn ignored_at_start(sig: Signal) -> bool {
    use nix::libc;
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: with a null new action, sigaction only reads the current one into `old`, a
    // zeroed, properly sized sigaction that lives across the call.
    let read = unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), old.as_mut_ptr()) };
    // SAFETY: zero-initialised, and filled in by the kernel when the call succeeded.
    read == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// The signals the new process sets back to their default before its exec (bit N − 1 for
/// signal N): those with a handler of the wrapper's, and SIGPIPE, which the Rust runtime
/// ignores (a command expects it at its default; signals ignored when the wrapper started stay
/// ignored). Zero: not noted yet, and the spawn looks them up itself.
pub(super) static HANDLERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Notes which signals have a handler now (see [`HANDLERS`]). Called by a run that has to wait
/// (every handler is installed by then: `Signals::install`), so that it does not look at every
/// signal's disposition when the lock comes and it starts its command; a run that does not
/// wait looks them up at the spawn, and one that finds the lock busy never does.
pub fn note_handlers() {
    if HANDLERS.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        HANDLERS.store(handlers_now(), std::sync::atomic::Ordering::Relaxed);
    }
}

pub(super) fn handlers_now() -> u64 {
    let mut mask = 0u64;
    for sig in 1..=libc::SIGRTMAX().min(64) {
        let mut current = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: with a null new action, sigaction only reads the current one into `current`,
        // a zeroed, properly sized sigaction that lives across the call.
        let read = unsafe { libc::sigaction(sig, std::ptr::null(), current.as_mut_ptr()) };
        // SAFETY: zero-initialised, and filled in by the kernel when the call succeeded.
        let handler = unsafe { current.assume_init() }.sa_sigaction;
        if read == 0 && handler != libc::SIG_DFL && (handler != libc::SIG_IGN || sig == libc::SIGPIPE) {
            mask |= 1 << (sig - 1);
        }
    }
    mask
}
