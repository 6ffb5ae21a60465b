//! A new process that runs in the wrapper's memory until its exec, on a stack of its own.

use std::io;

use nix::libc;
use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};

const GUARD_PAGE: usize = 64 * 1024;

/// A stack for a new process that runs in the wrapper's memory until its exec: a fresh private
/// mapping whose lowest [`GUARD_PAGE`] bytes are a guard, so that an overflow faults instead of
/// writing into the wrapper's memory. Unmapped when dropped.
pub(super) struct CloneStack {
    base: *mut libc::c_void,
    len: usize,
}

impl CloneStack {
    pub(super) fn new(size: usize) -> io::Result<Self> {
        let len = size + GUARD_PAGE;
        // SAFETY: asks for a fresh private anonymous mapping; nothing else is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = CloneStack { base, len };
        // SAFETY: the lowest pages of the mapping just made, used by nobody yet.
        if unsafe { libc::mprotect(base, GUARD_PAGE, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// Where the stack starts (it grows down).
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is `len` bytes long.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for CloneStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, used by no process any more (see `clone_until_exec`).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Starts a child process (SIGCHLD when it ends) that runs `entry(arg)` in the wrapper's memory,
/// on a stack of its own, with every signal blocked, and returns its pid once it has exec'd or
/// exited. Like posix_spawn(3) (`CLONE_VM | CLONE_VFORK`): nothing is copied, and the wrapper's
/// pages do not fault on their next write as they do after a fork (BENCHMARKS.md). The blocked
/// signals keep the wrapper's handlers from ever running in it; `entry` resets or keeps them
/// across its exec.
///
/// # Safety
/// `entry` may make only async-signal-safe calls (nothing that allocates or locks), may touch
/// only what `arg` points to and its own stack, and must end in exec or `_exit`; what `arg`
/// points to must live until this returns.
pub(super) unsafe fn clone_until_exec(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    stack_size: usize,
) -> io::Result<libc::pid_t> {
    let stack = CloneStack::new(stack_size)?;
    // SAFETY: the caller's promise; CLONE_VFORK suspends this thread until the new process has
    // left the stack (exec'd or exited), which is then unmapped when it is dropped here.
    unsafe { clone_blocked(entry, arg, &stack, libc::CLONE_VFORK) }
}

/// `clone(CLONE_VM | SIGCHLD | flags)` running `entry(arg)` on `stack`, with every signal
/// blocked around the call (the new process starts with them all blocked, so that no handler of
/// the wrapper's ever runs in it); the wrapper's mask is restored at once.
///
/// # Safety
/// As [`clone_until_exec`]; `stack` and what `arg` points to must also stay until the new
/// process has left the wrapper's memory.
pub(super) unsafe fn clone_blocked(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    stack: &CloneStack,
    flags: libc::c_int,
) -> io::Result<libc::pid_t> {
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old))?;
    // SAFETY: the stack is the new process's alone and large enough for `entry`, which keeps
    // to what the caller promised.
    let pid = unsafe { libc::clone(entry, stack.top(), libc::CLONE_VM | libc::SIGCHLD | flags, arg) };
    let clone_error = io::Error::last_os_error();
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    if pid < 0 { Err(clone_error) } else { Ok(pid) }
}
