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
/// signal N): those with a handler of the wrapper's, and SIGPIPE, which the wrapper ignores as
/// it starts (`start.rs`; a command expects it at its default; signals ignored when the wrapper
/// started stay ignored). Zero: not noted, and the spawn looks at every signal itself.
pub(super) static HANDLERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Notes which signals have a handler (see [`HANDLERS`]): `installed`, the wrapper's own, the
/// only ones (the program starts without std's stack-overflow handler: `start.rs`). Called once
/// the handlers are installed, so that the spawn does not look at every signal's disposition
/// between the lock and the command.
pub fn note_handlers(installed: impl IntoIterator<Item = Signal>) {
    let bit = |sig: libc::c_int| 1u64 << (sig - 1);
    let mut mask = bit(libc::SIGPIPE);
    for sig in installed {
        mask |= bit(sig as libc::c_int);
    }
    HANDLERS.store(mask, std::sync::atomic::Ordering::Relaxed);
}

fn has_handler(sig: libc::c_int) -> bool {
    let mut current = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: with a null new action, sigaction only reads the current one into `current`, a
    // zeroed, properly sized sigaction that lives across the call.
    let read = unsafe { libc::sigaction(sig, std::ptr::null(), current.as_mut_ptr()) };
    // SAFETY: zero-initialised, and filled in by the kernel when the call succeeded.
    let handler = unsafe { current.assume_init() }.sa_sigaction;
    read == 0 && handler != libc::SIG_DFL && handler != libc::SIG_IGN
}

/// Every signal with a handler now, and SIGPIPE: for a spawn whose handlers were not noted.
pub(super) fn handlers_now() -> u64 {
    let mut mask = 1u64 << (libc::SIGPIPE - 1);
    for sig in 1..=libc::SIGRTMAX().min(64) {
        if has_handler(sig) {
            mask |= 1 << (sig - 1);
        }
    }
    mask
}
