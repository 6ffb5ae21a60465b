//! The guardian, a process beside the wrapper that kills the command's group if the wrapper
//! dies (its own life, once it runs: [`process`]).
//!
//! It is this program exec'd anew (a clone that makes one bare `execve` of
//! `/proc/self/exe`, without waiting for it; `be_guardian_if_asked` at the top of `main`
//! turns that process into the guardian, which says on its socket when it runs), so that it
//! shares no memory with the wrapper and costs it no fork. A static build starts it as a run
//! starts (`CHEAP_EXEC`); `acquire` starts it when a run starts to wait, in any build. The
//! command starts once the guardian runs (`child::ready_guardian`), and the command's own
//! process tells the guardian its pid before its exec, so that it guards from the first
//! instruction.
//!
//! Where the exec fails, or the guardian was killed (even between that last look and the
//! command's process telling it its pid: `GuardianGone`, and the spawn is made again), one is
//! forked right before the spawn (a fork costs more the earlier it is made); without any
//! guardian the command is not run. One killed while the command runs is noticed by
//! `supervise` (a copy of its socket reads end-of-file: `Guardian::gone`) and replaced by a
//! forked one, told the command's pid by the wrapper (`Guardian::guard`). Guardians are
//! reaped as the wrapper exits (`reap_guardians`).

mod process;

use std::io;

use nix::libc;
use nix::unistd::Pid;

use super::arch::{BARE_SYSCALLS, bare_syscall};
use super::clone::{CloneStack, clone_blocked};
use super::limits::open_max;
use process::guard;

/// The guardian's stack until its exec (two system calls).
const GUARDIAN_STACK: usize = 64 * 1024;

/// A small process beside the wrapper, for what the wrapper cannot do itself:
/// - if the wrapper dies without saying goodbye (SIGKILL, the OOM killer), it kills the
///   command's whole process group (the parent-death signal reaches only the command itself,
///   not what the command started);
/// - while the wrapper is suspended with its command (job control), it wakes the wrapper
///   (SIGCONT) as soon as the command runs again — continued by someone other than the
///   wrapper — so that nothing of the command ever runs while nothing renews its lock.
///
/// It is this same program exec'd anew (`/proc/self/exe`, run by [`be_guardian_if_asked`]),
/// started when a run starts (a static build; see [`CHEAP_EXEC`]) or starts to wait: its exec
/// and start-up then happen on another CPU while the run takes the lock, and the wrapper pays a
/// clone, not a fork (whose shared pages fault on the wrapper's next writes; BENCHMARKS.md).
/// It must not share the wrapper's memory once it runs: the OOM killer kills every process sharing the
/// memory of the one it picks. Where it cannot be exec'd (no /proc, a security policy, a
/// processor this file has no bare `execve` for), it is forked instead, right before the
/// command (a fork costs more the earlier it is made).
pub struct Guardian {
    /// Our end of the socket pair: closed by the kernel when the wrapper dies.
    socket: std::os::fd::OwnedFd,
    /// An exec'd guardian that has not said yet that it runs.
    starting: Option<Starting>,
    /// Its process, to reap once it is of no more use (see [`reap_guardians`]).
    pid: libc::pid_t,
}

/// What an exec'd guardian's process uses in the wrapper's memory until its exec, kept until
/// it says it runs (or has exited).
#[expect(dead_code, reason = "held, not read: their memory must stay until then")]
struct Starting {
    stack: CloneStack,
    exec: Box<GuardianExec>,
}

/// What the guardian is told, one byte each; `GUARD` is followed by the command's pid (4 bytes,
/// native order) in the same write, made by the command's process before its exec.
pub(super) const DISMISS: u8 = b'x';
pub(super) const WATCH: u8 = b's';
pub(super) const UNWATCH: u8 = b'r';
pub(in crate::sys) const GUARD: u8 = b'p';
/// What an exec'd guardian says once it runs.
pub(super) const RUNS: u8 = b'g';

/// Whether the guardian can be told the command's pid.
pub enum Ready {
    Yes,
    /// An exec'd guardian that has not said yet that it runs.
    NotYet,
    /// Gone: its exec failed, or someone killed it.
    Gone,
}

impl Guardian {
    /// Starts the guardian as a new exec of this program, without waiting for the exec: its
    /// process shares the wrapper's memory until then, with every signal blocked, and makes only
    /// bare system calls (see [`guardian_exec`]). It can guard a command once it says it runs
    /// ([`Guardian::ready`]).
    pub fn exec() -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        if !BARE_SYSCALLS {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        let (socket, theirs) = socket_pair()?;
        // Theirs survives the exec (the guardian moves it to stdin); ours and every other
        // descriptor of the wrapper's do not.
        nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))?;
        let strings = [nix::unistd::getpid().as_raw().to_string(), theirs.as_raw_fd().to_string()]
            .map(|s| std::ffi::CString::new(s).expect("a number has no NUL byte"));
        let mut exec = Box::new(GuardianExec {
            argv: [GUARDIAN_ARGV0.as_ptr(), strings[0].as_ptr(), strings[1].as_ptr(), std::ptr::null()],
            strings,
        });
        let stack = CloneStack::new(GUARDIAN_STACK)?;
        // SAFETY: `guardian_exec` only reads `exec` and what it points to, which live in
        // `Starting` with the stack until it has exec'd or exited, makes bare system calls
        // that write no memory the wrapper uses, and ends in exec or _exit. No CLONE_VFORK: the
        // wrapper does not wait for the exec.
        let pid = unsafe { clone_blocked(guardian_exec, (&raw mut *exec).cast(), &stack, 0) }?;
        Ok(Guardian { socket, starting: Some(Starting { stack, exec }), pid })
    }

    /// Forks the guardian, right before the command (where it is not exec'd): it runs at once.
    pub fn fork() -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let (socket, theirs) = socket_pair()?;
        let wrapper = nix::unistd::getpid().as_raw();
        let open_max = open_max();
        // SAFETY: the child only makes async-signal-safe system calls (close and those of
        // `guard`) and never returns into Rust code that could allocate or lock.
        match unsafe { nix::unistd::fork() }? {
            nix::unistd::ForkResult::Child => unsafe {
                libc::close(socket.as_raw_fd());
                guard(theirs.as_raw_fd(), wrapper, open_max, false)
            },
            nix::unistd::ForkResult::Parent { child } => {
                Ok(Guardian { socket, starting: None, pid: child.as_raw() })
            }
        }
    }

    /// Whether the guardian can guard a command now, without waiting.
    pub fn ready(&mut self) -> Ready {
        let mut fd = libc::pollfd { fd: self.socket(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd, alive across the call; a zero timeout: nothing waits.
        let polled = unsafe { libc::poll(&mut fd, 1, 0) };
        let news = if polled > 0 { fd.revents } else { 0 };
        if self.starting.is_some() && news != 0 {
            // It said it runs, or it is gone (its end closed): either way its process has left
            // the wrapper's memory, and what it used there can go.
            self.starting = None;
            let mut said = [0u8; 1];
            if nix::unistd::read(&self.socket, &mut said) != Ok(1) || said[0] != RUNS {
                return Ready::Gone;
            }
        }
        if news & (libc::POLLHUP | libc::POLLERR) != 0 {
            // No one reads its socket any more: someone killed it (even after it said it runs).
            return Ready::Gone;
        }
        if self.starting.is_some() { Ready::NotYet } else { Ready::Yes }
    }

    /// Waits until [`Guardian::ready`] may have news: its socket is readable or hung up.
    pub async fn news(&self) -> io::Result<()> {
        use std::os::fd::AsFd;
        // SAFETY: the descriptor is the guardian's socket, open for as long as `self` lives,
        // which outlives this registration (dropped on return).
        let socket = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                self.socket.as_fd(),
                tokio::io::Interest::READABLE,
            )
        }
        .map_err(io::Error::from)?;
        socket.readable().await?.clear_ready();
        Ok(())
    }

    /// Its process.
    #[cfg(test)]
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.pid)
    }

    /// Its socket's descriptor (readable when [`Guardian::ready`] has news).
    pub(in crate::sys) fn socket(&self) -> libc::c_int {
        use std::os::fd::AsRawFd;
        self.socket.as_raw_fd()
    }

    /// The wrapper is about to stop itself with its stopped command: wake it if the command
    /// runs again first.
    pub fn watch(&self) {
        let _ = nix::unistd::write(&self.socket, &[WATCH]);
    }

    /// The wrapper runs again.
    pub fn unwatch(&self) {
        let _ = nix::unistd::write(&self.socket, &[UNWATCH]);
    }

    /// Guard the command `pid` (its process group): what the command's own process says before
    /// its exec, said by the wrapper to a guardian that takes another's place.
    pub fn guard(&self, pid: Pid) {
        let mut message = [GUARD; 5];
        message[1..].copy_from_slice(&pid.as_raw().to_ne_bytes());
        let _ = nix::unistd::write(&self.socket, &message);
    }

    /// Resolves once this guardian is gone (someone killed it), without holding on to it: it
    /// waits on a copy of the wrapper's end of the socket (close-on-exec), which reads
    /// end-of-file (or fails) then, since a guardian that runs says nothing more. Never
    /// resolves if no copy can be made.
    pub fn gone(&self) -> impl Future<Output = ()> + Send + 'static {
        use std::os::fd::AsFd;
        let copy = self.socket.as_fd().try_clone_to_owned().ok().and_then(|fd| {
            let stream = std::os::unix::net::UnixStream::from(fd);
            // The copy shares the wrapper's end's flags: its own writes to the guardian are
            // single bytes to an empty buffer, which never wait anyway.
            stream.set_nonblocking(true).ok()?;
            tokio::net::UnixStream::from_std(stream).ok()
        });
        async move {
            let Some(stream) = copy else { return std::future::pending().await };
            let mut buf = [0u8; 16];
            loop {
                if stream.readable().await.is_err() {
                    return std::future::pending().await;
                }
                match stream.try_read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return,
                }
            }
        }
    }

    /// The command's group is gone: the guardian may leave without doing anything.
    pub fn dismiss(self) {
        let _ = nix::unistd::write(&self.socket, &[DISMISS]);
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        // An exec'd guardian that has not said it runs may still be before its exec, in the
        // wrapper's memory (a wrapper that leaves before its command starts, or gave up waiting
        // for it): what it uses there stays (a few pages, once in a run).
        if let Some(starting) = self.starting.take() {
            std::mem::forget(starting);
        }
        // Our end closes with it: the guardian leaves (it has nothing to guard any more: the
        // command's group is gone, or there was none). Reaped before the wrapper exits.
        if let Ok(mut retired) = RETIRED.lock() {
            retired.push(self.pid);
        }
    }
}

/// Guardians of no more use, to reap before the wrapper exits: a guardian still exiting then
/// would be left a zombie, for an init that may never reap it (a container's PID 1 that is a
/// script, say).
static RETIRED: std::sync::Mutex<Vec<libc::pid_t>> = std::sync::Mutex::new(Vec::new());

/// Reaps the guardians of no more use (see [`RETIRED`]); one that has not left yet (it was
/// dropped an instant ago, or never ran) is killed first. Called as the wrapper exits.
pub fn reap_guardians() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let retired = RETIRED.lock().map(|mut r| std::mem::take(&mut *r)).unwrap_or_default();
    for pid in retired.into_iter().map(Pid::from_raw) {
        // Still a child of ours, unreaped: its pid cannot have been reused, so the SIGKILL can
        // reach only it (reaped elsewhere, or not ours: ECHILD, and nothing is sent).
        if waitpid(pid, Some(WaitPidFlag::WNOHANG)) == Ok(WaitStatus::StillAlive) {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(pid, None);
        }
    }
}

/// A connected pair of Unix stream sockets, close-on-exec: ours, the guardian's.
fn socket_pair() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    Ok((ours.into(), theirs.into()))
}

/// argv[0] of an exec'd guardian (what `ps` shows, followed by its wrapper's pid).
const GUARDIAN_ARGV0: &std::ffi::CStr = c"redlock-run: guardian";

/// The exec'd guardian's argv: `GUARDIAN_ARGV0`, the wrapper's pid, its socket's descriptor.
struct GuardianExec {
    argv: [*const libc::c_char; 4],
    /// What `argv` points to.
    #[expect(dead_code, reason = "held, not read: `argv` points into them")]
    strings: [std::ffi::CString; 2],
}

/// The guardian's process from its clone to its exec, in the wrapper's memory, every signal
/// blocked (the exec sets the wrapper's handlers back to their defaults; the guardian unblocks
/// signals once it ignores those it must outlive). The wrapper runs on meanwhile: only bare
/// system calls are made, and `_exit` if the exec fails.
extern "C" fn guardian_exec(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `GuardianExec` the wrapper keeps until this process has left its
    // memory; its strings are NUL-terminated.
    unsafe {
        let exec = &*arg.cast::<GuardianExec>();
        // Not the wrapper's stdout and stderr (this process's copies of them): what runs before
        // the guardian closes them (a dynamic loader that is not this program, say) must not
        // write there. The exec'd program finds them closed, and the Rust runtime opens
        // /dev/null in their place.
        for fd in [1, 2] {
            bare_syscall(libc::SYS_fcntl, fd, libc::F_SETFD as usize, libc::FD_CLOEXEC as usize);
        }
        let envp = [std::ptr::null::<libc::c_char>()];
        bare_syscall(
            libc::SYS_execve,
            c"/proc/self/exe".as_ptr() as usize,
            exec.argv.as_ptr() as usize,
            envp.as_ptr() as usize,
        );
        libc::_exit(127)
    }
}

/// Whether starting the guardian by exec is cheap enough to do it as every run starts: in a
/// static build (no dynamic loading) the new guardian runs 0.25 ms after its clone; a dynamic
/// build's takes 0.8 ms of CPU to load, more than a fork costs, and competes with the run's own
/// start-up on a small machine (BENCHMARKS.md). A dynamic build execs it when a run has time to
/// spare (waiting for the lock), and forks it right before the command otherwise.
pub const CHEAP_EXEC: bool = cfg!(target_feature = "crt-static");

/// Becomes the guardian when this process was exec'd as one (see [`Guardian`]): argv
/// `redlock-run: guardian WRAPPER-PID FD`, FD its socket; it then never returns. Otherwise
/// returns at once: a run starts.
pub fn be_guardian_if_asked() {
    use std::os::unix::ffi::OsStrExt;
    let mut args = std::env::args_os();
    if args.next().is_none_or(|arg0| arg0.as_bytes() != GUARDIAN_ARGV0.to_bytes()) {
        return;
    }
    let number = |arg: Option<std::ffi::OsString>| arg?.to_str()?.parse::<i32>().ok();
    let (Some(wrapper), Some(socket), None) = (number(args.next()), number(args.next()), args.next()) else {
        return;
    };
    // Named like its wrapper for `pkill redlock-run` and `ps -C`, whose signals it ignores
    // (an exec through /proc/self/exe would be named "exe").
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"redlock-run".as_ptr(), 0, 0, 0) };
    // SAFETY: a process of its own, exec'd for this: nothing else runs in it.
    unsafe { guard(socket, wrapper, open_max(), true) }
}
