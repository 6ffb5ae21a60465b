//! How the wrapper asks the scheduler to treat it.

use nix::libc;

/// From here on the wrapper's thread does not preempt what runs on its CPU when it wakes
/// (`SCHED_BATCH`; it keeps its share of the CPU): woken by Redis's reply to a release that
/// hands the lock over, it lets Redis go on to tell the next holder first, instead of running
/// its own exit there meanwhile. Failing, nothing changes.
pub fn defer_on_wakeup() {
    // SAFETY: an all-zero sched_param is priority 0, the only one SCHED_BATCH takes; the system
    // call reads only it, and 0 is the calling thread. (musl's sched_setscheduler is a stub.)
    unsafe {
        let param: libc::sched_param = std::mem::zeroed();
        libc::syscall(libc::SYS_sched_setscheduler, 0, libc::SCHED_BATCH, &raw const param);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through the system call itself: musl's `sched_setscheduler` does nothing.
    #[test]
    fn the_calling_thread_is_batch_and_the_others_are_not() {
        // SAFETY: reads the calling thread's policy.
        let policy = || unsafe { libc::syscall(libc::SYS_sched_getscheduler, 0) };
        let before = policy();
        let deferred = std::thread::spawn(move || {
            defer_on_wakeup();
            policy()
        });
        assert_eq!(deferred.join().unwrap(), i64::from(libc::SCHED_BATCH));
        assert_eq!(policy(), before, "only the calling thread");
    }
}
