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
mod procfs;
mod tree;

use std::io;
use std::os::fd::{BorrowedFd, FromRawFd};

use nix::libc;
use nix::unistd::Pid;

use super::arch::bare_syscall;
use super::clone::{CloneStack, clone_blocked};
use super::limits::open_max;
use crate::exit::status;
use process::{Fds, guard};

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
/// memory of the one it picks. Where it cannot be exec'd (no /proc, a security policy), it is
/// forked instead, right before the command (a fork costs more the earlier it is made).
pub struct Guardian {
    /// Our end of the socket pair: closed by the kernel when the wrapper dies.
    socket: std::os::fd::OwnedFd,
    /// An exec'd guardian that has not said yet that it runs.
    starting: Option<Starting>,
    /// Its process, to reap once it is of no more use (see [`reap_guardians`]).
    pid: libc::pid_t,
}

/// What an exec'd guardian's process uses in the wrapper's memory until its exec, kept until
/// it says it runs (or has exited), and the CPUs to give it back then.
struct Starting {
    #[expect(dead_code, reason = "held, not read: its memory must stay until then")]
    stack: CloneStack,
    #[expect(dead_code, reason = "held, not read: its memory must stay until then")]
    exec: Box<GuardianExec>,
    /// The wrapper's CPUs, where it was started on others (see [`steer_off_this_cpu`]).
    cpus: Option<libc::cpu_set_t>,
}

/// How long the members of the command's group may take to die after SIGKILL before the
/// guardian gives up confirming it (a member in uninterruptible sleep), and how often it looks.
pub(super) const CONFIRM_WITHIN_NS: i64 = 1_000_000_000;
pub(super) const CONFIRM_EVERY_NS: i64 = 1_000_000;

/// What the guardian is told, one byte each; `GUARD` is followed by the command's pid (4 bytes,
/// native order) in the same write, made by the command's process before its exec; `KILL_BY`
/// and `ACQUIRED` by an instant (8 bytes, nanoseconds of `CLOCK_MONOTONIC`, native order).
pub(super) const DISMISS: u8 = b'x';
/// Kill the command's group at this instant unless told a later one (`i64::MAX`: never).
pub(super) const KILL_BY: u8 = b'k';
/// The lock was taken at this instant (for `--min-hold` after the wrapper's death).
pub(super) const ACQUIRED: u8 = b'a';
/// The run holds no lock after all (`--fail-open`): nothing to release if the wrapper dies.
pub(super) const NO_LOCK: u8 = b'n';
pub(super) const WATCH: u8 = b's';
pub(super) const UNWATCH: u8 = b'r';
pub(in crate::sys) const GUARD: u8 = b'p';
/// Guard a script that does not lead its process group as itself and its descendants: its pid
/// (4 bytes) and start time (8 bytes, clock ticks since boot as /proc/PID/stat says), native
/// order.
pub(super) const TREE: u8 = b't';
/// One of that script's descendants, as `TREE` says the script.
pub(super) const KNOWN: u8 = b'd';
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
    ///
    /// `ticket`: what it needs to release the lock if the wrapper dies (see [`Releaser`]); it
    /// also keeps a copy of the wrapper's stderr to say what it did there.
    pub fn exec(ticket: Option<BorrowedFd<'_>>) -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let (socket, theirs) = socket_pair()?;
        // Theirs survives the exec (the guardian moves it to stdin); ours and every other
        // descriptor of the wrapper's do not.
        nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))?;
        // Close-on-exec here; the new process clears the flag on its own copy.
        let stderr = nix::fcntl::fcntl(std::io::stderr(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3)).ok();
        let stderr = stderr.map(|fd| {
            // SAFETY: a descriptor just made by F_DUPFD_CLOEXEC, owned by nobody else.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
        });
        let keep = [stderr.as_ref().map_or(-1, |fd| fd.as_raw_fd()), ticket.map_or(-1, |fd| fd.as_raw_fd())];
        let strings = [nix::unistd::getpid().as_raw(), theirs.as_raw_fd(), keep[0], keep[1]]
            .map(|n| std::ffi::CString::new(n.to_string()).expect("a number has no NUL byte"));
        let mut exec = Box::new(GuardianExec {
            argv: [
                GUARDIAN_ARGV0.as_ptr(),
                strings[0].as_ptr(),
                strings[1].as_ptr(),
                strings[2].as_ptr(),
                strings[3].as_ptr(),
                std::ptr::null(),
            ],
            keep,
            strings,
        });
        let stack = CloneStack::new(GUARDIAN_STACK)?;
        // SAFETY: `guardian_exec` only reads `exec` and what it points to, which live in
        // `Starting` with the stack until it has exec'd or exited, makes bare system calls
        // that write no memory the wrapper uses, and ends in exec or _exit. No CLONE_VFORK: the
        // wrapper does not wait for the exec.
        let pid = unsafe { clone_blocked(guardian_exec, (&raw mut *exec).cast(), &stack, 0) }?;
        let cpus = steer_off_this_cpu(pid);
        Ok(Guardian { socket, starting: Some(Starting { stack, exec, cpus }), pid })
    }

    /// Forks the guardian, right before the command (where it is not exec'd): it runs at once.
    pub fn fork(ticket: Option<BorrowedFd<'_>>) -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let (socket, theirs) = socket_pair()?;
        let wrapper = nix::unistd::getpid().as_raw();
        let open_max = open_max();
        let ticket = ticket.map_or(-1, |fd| fd.as_raw_fd());
        // SAFETY: the child only makes async-signal-safe system calls (close and those of
        // `guard`) and never returns into Rust code that could allocate or lock.
        match unsafe { nix::unistd::fork() }? {
            // SAFETY: the new process's own copy of the socket pair; `guard` never returns.
            nix::unistd::ForkResult::Child => unsafe {
                libc::close(socket.as_raw_fd());
                guard(Fds { socket: theirs.as_raw_fd(), stderr: 2, ticket }, wrapper, open_max, false)
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
            let cpus = self.starting.take().and_then(|s| s.cpus);
            let mut said = [0u8; 1];
            if nix::unistd::read(&self.socket, &mut said) != Ok(1) || said[0] != RUNS {
                return Ready::Gone;
            }
            if let Some(cpus) = cpus {
                give_back_cpus(self.pid, &cpus);
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

    /// Guard the script `pid` (started at `start`, /proc's clock ticks) and its descendants,
    /// not its process group: it does not lead one.
    pub fn guard_tree(&self, pid: Pid, start: u64) {
        self.tell_process(TREE, pid, start);
    }

    /// A descendant of the script [`Guardian::guard_tree`] named, found by the wrapper: the
    /// guardian kills it too, even once it has left the script's tree (reparented away).
    pub fn known(&self, pid: Pid, start: u64) {
        self.tell_process(KNOWN, pid, start);
    }

    fn tell_process(&self, what: u8, pid: Pid, start: u64) {
        let mut message = [what; 13];
        message[1..5].copy_from_slice(&pid.as_raw().to_ne_bytes());
        message[5..].copy_from_slice(&start.to_ne_bytes());
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

    /// Kill the command's group at `at` (nanoseconds of `CLOCK_MONOTONIC`; `None`: never)
    /// unless told a later instant first: the wrapper's lease deadline, kept by the guardian
    /// in case the wrapper cannot act by then (stopped, say).
    pub fn kill_by(&self, at: Option<i64>) {
        self.tell(KILL_BY, at.unwrap_or(i64::MAX));
    }

    /// The lock was taken at `at` (nanoseconds of `CLOCK_MONOTONIC`).
    pub fn acquired(&self, at: i64) {
        self.tell(ACQUIRED, at);
    }

    /// The run holds no lock: if the wrapper dies, there is nothing to release.
    pub fn no_lock(&self) {
        let _ = nix::unistd::write(&self.socket, &[NO_LOCK]);
    }

    fn tell(&self, what: u8, at: i64) {
        let mut message = [what; 9];
        message[1..].copy_from_slice(&at.to_ne_bytes());
        let _ = nix::unistd::write(&self.socket, &message);
    }

    /// The command's group is gone: the guardian may leave without doing anything.
    pub fn dismiss(self) {}
}

impl Drop for Guardian {
    fn drop(&mut self) {
        // Goodbye: the guardian leaves without releasing anything. A panic says none, so that
        // the guardian takes it for the wrapper's death, as it is under `panic = "abort"`.
        if !std::thread::panicking() {
            let _ = nix::unistd::write(&self.socket, &[DISMISS]);
        }
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

/// Moves a guardian just cloned to the wrapper's other CPUs, if it has any: the kernel often
/// queues a new process on its parent's CPU, where it would wait for the wrapper to block before
/// it could exec, while another CPU idles. → The wrapper's CPUs, to give back once the guardian
/// says it runs ([`Guardian::ready`]; the guardian itself could take them back before the move).
fn steer_off_this_cpu(pid: libc::pid_t) -> Option<libc::cpu_set_t> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: an all-zero cpu_set_t is an empty set; the calls read and write only the sets
    // they are given, of the size given. Failing, the guardian just starts where the kernel
    // put it.
    unsafe {
        let mut all: libc::cpu_set_t = std::mem::zeroed();
        let here = libc::sched_getcpu();
        if here < 0 || libc::sched_getaffinity(0, size, &mut all) != 0 {
            return None;
        }
        let mut others = all;
        libc::CPU_CLR(here as usize, &mut others);
        (libc::CPU_COUNT(&others) > 0 && libc::sched_setaffinity(pid, size, &others) == 0).then_some(all)
    }
}

/// Gives the guardian `pid`, a child not yet reaped, the wrapper's CPUs `cpus` back.
fn give_back_cpus(pid: libc::pid_t, cpus: &libc::cpu_set_t) {
    // SAFETY: reads only the set it is given, of its size.
    unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), cpus) };
}

/// A connected pair of Unix stream sockets, close-on-exec: ours, the guardian's.
fn socket_pair() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    Ok((ours.into(), theirs.into()))
}

/// argv[0] of an exec'd guardian (what `ps` shows, followed by its wrapper's pid).
const GUARDIAN_ARGV0: &std::ffi::CStr = c"redlock-run: guardian";

/// The exec'd guardian's argv: `GUARDIAN_ARGV0`, the wrapper's pid, the descriptors of its
/// socket, of its copy of the wrapper's stderr and of the ticket (-1: none).
struct GuardianExec {
    argv: [*const libc::c_char; 6],
    /// The descriptors to keep across the exec (-1: none), close-on-exec in the wrapper.
    keep: [libc::c_int; 2],
    /// What `argv` points to.
    #[expect(dead_code, reason = "held, not read: `argv` points into them")]
    strings: [std::ffi::CString; 4],
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
        // write there. The exec'd program finds them closed, and its start opens /dev/null in
        // their place (`start.rs`).
        for fd in [1, 2] {
            bare_syscall(libc::SYS_fcntl, fd, libc::F_SETFD as usize, libc::FD_CLOEXEC as usize);
        }
        // This process's own copies of the descriptors table: clearing the flag here leaves
        // the wrapper's alone.
        for fd in exec.keep.into_iter().filter(|&fd| fd >= 0) {
            bare_syscall(libc::SYS_fcntl, fd as usize, libc::F_SETFD as usize, 0);
        }
        let envp = [std::ptr::null::<libc::c_char>()];
        bare_syscall(
            libc::SYS_execve,
            c"/proc/self/exe".as_ptr() as usize,
            exec.argv.as_ptr() as usize,
            envp.as_ptr() as usize,
        );
        libc::_exit(status::NOT_FOUND.into())
    }
}

/// Whether starting the guardian by exec is cheap enough to do it as every run starts: in a
/// static build (no dynamic loading) the new guardian runs 0.25 ms after its clone; a dynamic
/// build's takes 0.8 ms of CPU to load, more than a fork costs, and competes with the run's own
/// start-up on a small machine (BENCHMARKS.md). A dynamic build execs it when a run has time to
/// spare (waiting for the lock), and forks it right before the command otherwise.
pub const CHEAP_EXEC: bool = cfg!(target_feature = "crt-static");

/// argv[0] of the process a guardian execs, once the wrapper has died, to release the lock.
const RELEASER_ARGV0: &std::ffi::CStr = c"redlock-run: releaser";

/// The descriptor the releaser finds its ticket on.
const TICKET_FD: i32 = 3;

/// What a guardian found when its wrapper died: whether the command's group is certainly dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No command had started.
    NothingRan,
    /// Every process of the group is gone or a zombie.
    Dead,
    /// A member could not be signalled (another user's, after a setuid program, say).
    Unsignalable,
    /// A member was still alive a while after SIGKILL (uninterruptible sleep, say).
    Stuck,
    /// `/proc` is missing or another PID namespace's: the members cannot be seen.
    NoProc,
}

impl Verdict {
    pub(super) const ALL: [Verdict; 5] =
        [Verdict::NothingRan, Verdict::Dead, Verdict::Unsignalable, Verdict::Stuck, Verdict::NoProc];
}

/// The release after the wrapper's death (see [`guardian_role`]).
pub struct Releaser {
    /// The wrapper that died.
    pub wrapper: i32,
    /// When it took the lock (nanoseconds of `CLOCK_MONOTONIC`), if it had.
    pub acquired: Option<i64>,
    pub verdict: Verdict,
    /// What the wrapper wrote for this (the lock's settings, keys and value).
    pub ticket: Vec<u8>,
}

/// An empty memory file, close-on-exec: the ticket a guardian keeps for its releaser.
pub fn ticket_file() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: the name is NUL-terminated; the descriptor returned is owned by nobody else.
    let fd = unsafe { libc::memfd_create(c"redlock-run-ticket".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Nanoseconds of `CLOCK_MONOTONIC`, the clock of `Instant`, which the guardian shares.
pub fn monotonic_ns() -> i64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the struct it is given, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec * 1_000_000_000 + now.tv_nsec
}

/// What this process was exec'd as. A guardian (see [`Guardian`]; argv `redlock-run: guardian
/// WRAPPER-PID SOCKET STDERR TICKET`, descriptors, -1 for none) never returns; a releaser
/// (argv `redlock-run: releaser WRAPPER-PID ACQUIRED VERDICT`, its ticket on descriptor 3)
/// gets its job. Otherwise `None` at once: a run starts.
pub fn guardian_role() -> Option<Releaser> {
    use std::os::unix::ffi::OsStrExt;
    let mut args = super::args_os();
    let arg0 = args.next()?;
    let number = |arg: Option<std::ffi::OsString>| arg?.to_str()?.parse::<i64>().ok();
    if arg0.as_bytes() == RELEASER_ARGV0.to_bytes() {
        let (Some(wrapper), Some(acquired), Some(verdict), None) =
            (number(args.next()), number(args.next()), number(args.next()), args.next())
        else {
            return None;
        };
        return Some(Releaser {
            wrapper: i32::try_from(wrapper).ok()?,
            acquired: (acquired >= 0).then_some(acquired),
            verdict: *Verdict::ALL.get(usize::try_from(verdict).ok()?)?,
            ticket: read_ticket().ok()?,
        });
    }
    if arg0.as_bytes() != GUARDIAN_ARGV0.to_bytes() {
        return None;
    }
    let mut n = || number(args.next()).and_then(|n| i32::try_from(n).ok());
    let (Some(wrapper), Some(socket), Some(stderr), Some(ticket), None) = (n(), n(), n(), n(), args.next())
    else {
        return None;
    };
    // Named like its wrapper for `pkill redlock-run` and `ps -C`, whose signals it ignores
    // (an exec through /proc/self/exe would be named "exe").
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"redlock-run".as_ptr(), 0, 0, 0) };
    // SAFETY: a process of its own, exec'd for this: nothing else runs in it.
    unsafe { guard(Fds { socket, stderr, ticket }, wrapper, open_max(), true) }
}

/// The releaser's ticket, from descriptor 3.
fn read_ticket() -> io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    use std::os::fd::FromRawFd;
    // SAFETY: descriptor 3 is the ticket the guardian passed across its exec, owned by nobody
    // else in this process.
    let mut file = unsafe { std::fs::File::from_raw_fd(TICKET_FD) };
    // Read from its start: the wrapper's write left the shared offset at its end.
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut ticket = Vec::new();
    file.read_to_end(&mut ticket)?;
    Ok(ticket)
}
