//! Resource limits: the open-file limit a run needs and the guardian closes up to.

use nix::libc;

/// The highest descriptor number a process may open, plus one (the soft RLIMIT_NOFILE, at most
/// 65536): how far the guardian closes descriptors one by one where close_range(2) is missing.
pub(super) fn open_max() -> i32 {
    let mut limit = nix::libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which outlives the call.
    let ok = unsafe { nix::libc::getrlimit(nix::libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if ok { i32::try_from(limit.rlim_cur.min(65536)).unwrap_or(1024) } else { 1024 }
}

/// The fewest descriptors a run may be allowed (`ulimit -n`): its own need is about a dozen
/// (the runtime, a connection per Redis node and one for announcements, the guardian's socket),
/// with room to spare for Redlock quorums and several keys.
pub const MIN_DESCRIPTORS: u64 = 64;

/// Refuses to start under an open-file limit too low to work with: out of descriptors, a
/// connection fails as if Redis were unreachable, and `--fail-open` would then run the command
/// without the lock while Redis is fine.
pub fn enough_descriptors() -> Result<(), crate::exit::Error> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur >= MIN_DESCRIPTORS {
        return Ok(());
    }
    Err(crate::exit::Error::Config(format!(
        "the open-file limit is {} (ulimit -n); redlock-run needs at least {MIN_DESCRIPTORS} \
         descriptors to hold a lock safely",
        limit.rlim_cur
    )))
}
