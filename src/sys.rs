//! The few operating-system calls that need `unsafe` or must run between fork and exec.
//!
//! - **The spawn**: `CLONE_VM | CLONE_VFORK`, like posix_spawn, with the parent-death signal,
//!   the process group, the terminal and `PR_SET_NO_NEW_PRIVS` set before the exec, and PATH
//!   searched as execvp does.
//! - **The guardian**: this program exec'd anew (a clone that makes one bare `execve` of
//!   `/proc/self/exe`, without waiting for it; `be_guardian_if_asked` at the top of `main`
//!   turns that process into the guardian, which says on its socket when it runs), so that it
//!   shares no memory with the wrapper and costs it no fork. A static build starts it as a run
//!   starts (`CHEAP_EXEC`); `acquire` starts it when a run starts to wait, in any build. The
//!   command starts once the guardian runs (`child::ready_guardian`), and the command's own
//!   process tells the guardian its pid before its exec, so that it guards from the first
//!   instruction.
//! - Where the exec fails, or the guardian was killed (even between that last look and the
//!   command's process telling it its pid: `GuardianGone`, and the spawn is made again), one is
//!   forked right before the spawn (a fork costs more the earlier it is made); without any
//!   guardian the command is not run. One killed while the command runs is noticed by
//!   `supervise` (a copy of its socket reads end-of-file: `Guardian::gone`) and replaced by a
//!   forked one, told the command's pid by the wrapper (`Guardian::guard`). Guardians are
//!   reaped as the wrapper exits (`reap_guardians`).

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
static HANDLERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Notes which signals have a handler now (see [`HANDLERS`]). Called by a run that has to wait
/// (every handler is installed by then: `Signals::install`), so that it does not look at every
/// signal's disposition when the lock comes and it starts its command; a run that does not
/// wait looks them up at the spawn, and one that finds the lock busy never does.
pub fn note_handlers() {
    if HANDLERS.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        HANDLERS.store(handlers_now(), std::sync::atomic::Ordering::Relaxed);
    }
}

fn handlers_now() -> u64 {
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

/// Becomes a child subreaper, so orphaned descendants of the command are re-parented to the
/// wrapper and reaped by it instead of escaping to init. Returns whether it worked.
pub fn become_subreaper() -> bool {
    nix::sys::prctl::set_child_subreaper(true).is_ok()
}

/// How the command starts: in its own process group (and, with `foreground`, as the terminal's
/// foreground group), killed if the wrapper dies, and with `no_new_privs` unable ever to gain
/// privileges (setuid bits, file capabilities) and so leave the wrapper's reach.
pub struct Launch<'g> {
    pub foreground: bool,
    pub no_new_privs: bool,
    /// Told the command's pid by the command's own process, before its exec.
    pub guardian: Option<&'g Guardian>,
}

/// What the command's process reports to the wrapper before its exec: the error that stopped
/// it (0: none, the exec happened).
struct Handoff {
    /// Where to look for the program, in order (a null pointer ends the list).
    candidates: *const *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// `/bin/sh`, the candidate, then `argv` without its first word: for a file that is not an
    /// executable format (a script without `#!`), which POSIX runs with `sh`. The second word
    /// is filled in by the new process.
    sh_argv: *mut *const libc::c_char,
    parent: libc::pid_t,
    foreground: bool,
    no_new_privs: bool,
    /// The guardian's socket, or -1.
    guardian: libc::c_int,
    /// The signals to set back to their default ([`HANDLERS`]).
    reset: u64,
    errno: libc::c_int,
    /// The guardian could not be told the pid: it is gone (someone killed it).
    guardian_gone: bool,
}

use nix::libc;

/// The command's stack until its exec (searching PATH needs a few KiB; untouched pages cost
/// nothing).
const SPAWN_STACK: usize = 256 * 1024;
/// The guardian's stack until its exec (two system calls).
const GUARDIAN_STACK: usize = 64 * 1024;
const GUARD_PAGE: usize = 64 * 1024;

/// Starts `program` (searched in PATH as execvp(3) does, a script without `#!` run by
/// `/bin/sh`) with `argv` and the environment
/// `envp` ("NAME=value" each), sharing stdio with the wrapper; returns its pid once its exec
/// has happened, or the error that stopped it.
///
/// Like posix_spawn(3), the new process runs in the wrapper's memory until it execs
/// ([`clone_until_exec`]); posix_spawn itself cannot set the parent-death signal, which is why
/// this is done here. The new process resets the wrapper's handlers before it unblocks signals.
pub fn spawn(
    program: &std::ffi::OsStr,
    argv: &[std::ffi::OsString],
    envp: &[std::ffi::OsString],
    launch: Launch<'_>,
) -> io::Result<Pid> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &std::ffi::OsStr| {
        CString::new(s.as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "nul byte found in provided data"))
    };
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    let candidates = candidates(program, std::env::var_os("PATH").as_deref())
        .iter()
        .map(|p| c(p))
        .collect::<io::Result<Vec<_>>>()?;
    let argv = argv.iter().map(|a| c(a)).collect::<io::Result<Vec<_>>>()?;
    let envp = envp.iter().map(|e| c(e)).collect::<io::Result<Vec<_>>>()?;
    let pointers = |strings: &[CString]| {
        strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect::<Vec<_>>()
    };
    let (candidate_ptrs, argv_ptrs, envp_ptrs) = (pointers(&candidates), pointers(&argv), pointers(&envp));
    let mut sh_argv = vec![c"/bin/sh".as_ptr(), std::ptr::null()];
    sh_argv.extend_from_slice(&argv_ptrs[1..]);
    let mut handoff = Handoff {
        candidates: candidate_ptrs.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        sh_argv: sh_argv.as_mut_ptr(),
        parent: nix::unistd::getpid().as_raw(),
        foreground: launch.foreground,
        no_new_privs: launch.no_new_privs,
        guardian: launch.guardian.map_or(-1, Guardian::socket),
        reset: match HANDLERS.load(std::sync::atomic::Ordering::Relaxed) {
            0 => handlers_now(),
            noted => noted,
        },
        errno: 0,
        guardian_gone: false,
    };
    // SAFETY: `launched` makes only async-signal-safe calls and ends in exec or _exit; it reads
    // `handoff` (alive in this frame, which CLONE_VFORK suspends until the exec) and what it
    // points to, and writes its `errno` and the second word of `sh_argv` (a vector of this frame).
    let pid = unsafe { clone_until_exec(launched, (&raw mut handoff).cast(), SPAWN_STACK) }?;
    // SAFETY: read after CLONE_VFORK returned: the new process no longer runs in this memory.
    let errno = unsafe { std::ptr::read_volatile(&raw const handoff.errno) };
    if errno != 0 {
        // It exited without exec'ing: reap it here, its status means nothing.
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        // SAFETY: as `errno` above.
        if unsafe { std::ptr::read_volatile(&raw const handoff.guardian_gone) } {
            return Err(io::Error::other(GuardianGone));
        }
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Pid::from_raw(pid))
}

/// Why [`spawn`] failed when the guardian died between its last check and the spawn: the
/// command's process did not exec, and may be started again with another guardian.
#[derive(Debug)]
pub struct GuardianGone;

impl std::fmt::Display for GuardianGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("its guardian is gone")
    }
}

impl std::error::Error for GuardianGone {}

impl GuardianGone {
    /// Whether `e` is a [`GuardianGone`].
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<GuardianGone>())
    }
}

/// A stack for a new process that runs in the wrapper's memory until its exec: a fresh private
/// mapping whose lowest [`GUARD_PAGE`] bytes are a guard, so that an overflow faults instead of
/// writing into the wrapper's memory. Unmapped when dropped.
struct CloneStack {
    base: *mut libc::c_void,
    len: usize,
}

impl CloneStack {
    fn new(size: usize) -> io::Result<Self> {
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
unsafe fn clone_until_exec(
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
unsafe fn clone_blocked(
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

/// The command's process from the clone to its exec, in the wrapper's memory.
extern "C" fn launched(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY (whole body): `arg` is the `Handoff` on the suspended wrapper's stack; only
    // async-signal-safe system calls are made, and nothing is allocated or locked.
    unsafe {
        let handoff = &mut *arg.cast::<Handoff>();
        let fail = |handoff: &mut Handoff, errno: libc::c_int| -> libc::c_int {
            handoff.errno = if errno == 0 { libc::ECHILD } else { errno };
            libc::_exit(127)
        };
        // The wrapper's handlers must not run here: back to the defaults (exec would reset them
        // anyway), with SIGPIPE as a command expects it (the wrapper ignores it). Ignored
        // signals (nohup) stay ignored. Which ones have a handler is known (`HANDLERS`).
        let mut reset = handoff.reset;
        let mut sig = 1;
        while reset != 0 {
            if reset & 1 != 0 {
                libc::signal(sig, libc::SIG_DFL);
            }
            reset >>= 1;
            sig += 1;
        }
        if libc::setpgid(0, 0) != 0 {
            return fail(handoff, *libc::__errno_location());
        }
        // The parent-death signal fires when the *thread* that cloned exits; the command is
        // spawned from the main thread, which lives as long as the wrapper.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return fail(handoff, *libc::__errno_location());
        }
        if libc::getppid() != handoff.parent {
            // The wrapper died before the line above took effect.
            return fail(handoff, libc::ESRCH);
        }
        if handoff.guardian >= 0 {
            // Its process group is its pid: from here on, a dead wrapper means a dead group.
            let mut message = [GUARD; 5];
            message[1..].copy_from_slice(&libc::getpid().to_ne_bytes());
            if libc::write(handoff.guardian, message.as_ptr().cast(), message.len()) != 5 {
                handoff.guardian_gone = true;
                return fail(handoff, *libc::__errno_location());
            }
        }
        if handoff.foreground {
            // SIGTTOU is blocked: a background group may take the terminal.
            libc::tcsetpgrp(0, libc::getpid());
        }
        if handoff.no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return fail(handoff, *libc::__errno_location());
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // execvp(3)'s search, the same with any C library: the first candidate that execs
        // wins; one found but not executable (EACCES) is reported if none does.
        let mut denied = false;
        let mut at = handoff.candidates;
        while !(*at).is_null() {
            libc::execve(*at, handoff.argv, handoff.envp);
            match *libc::__errno_location() {
                libc::ENOEXEC => {
                    *handoff.sh_argv.add(1) = *at;
                    libc::execve(c"/bin/sh".as_ptr(), handoff.sh_argv.cast_const(), handoff.envp);
                    return fail(handoff, *libc::__errno_location());
                }
                libc::EACCES => denied = true,
                // Not there (or a PATH entry too long to be a path): the next one.
                libc::ENOENT
                | libc::ENOTDIR
                | libc::ESTALE
                | libc::ENODEV
                | libc::ETIMEDOUT
                | libc::ENAMETOOLONG => {}
                errno => return fail(handoff, errno),
            }
            at = at.add(1);
        }
        fail(handoff, if denied { libc::EACCES } else { libc::ENOENT })
    }
}

/// Where execvp(3) looks for `program`: the path itself when it has a `/`, else each directory
/// of `path` (PATH) in order (an empty entry is the current directory; no PATH:
/// `/bin:/usr/bin`).
fn candidates(program: &std::ffi::OsStr, path: Option<&std::ffi::OsStr>) -> Vec<std::ffi::OsString> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    if program.as_bytes().contains(&b'/') {
        return vec![program.to_owned()];
    }
    path.unwrap_or("/bin:/usr/bin".as_ref())
        .as_bytes()
        .split(|&b| b == b':')
        .map(|dir| {
            let mut full = if dir.is_empty() { b".".to_vec() } else { dir.to_vec() };
            full.push(b'/');
            full.extend_from_slice(program.as_bytes());
            std::ffi::OsString::from_vec(full)
        })
        .collect()
}

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
const DISMISS: u8 = b'x';
const WATCH: u8 = b's';
const UNWATCH: u8 = b'r';
const GUARD: u8 = b'p';
/// What an exec'd guardian says once it runs.
const RUNS: u8 = b'g';

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
    fn socket(&self) -> libc::c_int {
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

/// Whether this processor has a [`bare_syscall`].
const BARE_SYSCALLS: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// A system call with up to three arguments, bare: unlike the C library's wrappers it writes
/// no `errno`, which in a process that shares the wrapper's memory is the wrapper's own (the
/// same thread-local storage), and the wrapper may be about to read it. Returns what the
/// kernel returned (a negative error number on failure).
///
/// # Safety
/// As the system call `number` with these arguments.
#[cfg(target_arch = "x86_64")]
unsafe fn bare_syscall(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    let result: isize;
    // SAFETY: the x86-64 Linux system-call convention: number in rax, arguments in rdi, rsi,
    // rdx, the result in rax; rcx and r11 are overwritten.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => result,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    result
}

/// See the x86-64 one.
///
/// # Safety
/// As the system call `number` with these arguments.
#[cfg(target_arch = "aarch64")]
unsafe fn bare_syscall(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    let result: isize;
    // SAFETY: the AArch64 Linux system-call convention: number in x8, arguments in x0, x1, x2,
    // the result in x0.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") a => result,
            in("x1") b,
            in("x2") c,
            options(nostack),
        );
    }
    result
}

/// Never called: [`BARE_SYSCALLS`] is false here.
///
/// # Safety
/// None needed.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn bare_syscall(_: libc::c_long, _: usize, _: usize, _: usize) -> isize {
    -(libc::ENOSYS as isize)
}

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

/// The highest descriptor number a process may open, plus one (the soft RLIMIT_NOFILE, at most
/// 65536): how far the guardian closes descriptors one by one where close_range(2) is missing.
fn open_max() -> i32 {
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

/// How often a watching guardian looks at the command.
const WATCH_EVERY_MS: i32 = 10;

/// Signals that would end the guardian by default and that it ignores: it stays until the
/// wrapper dismisses it or dies (`pkill redlock-run` must not leave a command unguarded while
/// its wrapper stops it). SIGKILL still ends it. (The handlers it inherits from the wrapper
/// would also keep it alive, by accident; these say so.)
const GUARDIAN_IGNORES: [i32; 11] = [
    nix::libc::SIGHUP,
    nix::libc::SIGINT,
    nix::libc::SIGQUIT,
    nix::libc::SIGTERM,
    nix::libc::SIGUSR1,
    nix::libc::SIGUSR2,
    nix::libc::SIGALRM,
    nix::libc::SIGPIPE,
    nix::libc::SIGTSTP,
    nix::libc::SIGTTIN,
    nix::libc::SIGTTOU,
];

/// `/proc/PID/stat`, NUL-terminated, written without allocating (in the guardian).
fn stat_path(pid: i32) -> [u8; 32] {
    let mut path = [0u8; 32];
    path[..6].copy_from_slice(b"/proc/");
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (pid.unsigned_abs(), 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        path[6 + i] = digits[len - 1 - i];
    }
    path[6 + len..6 + len + 5].copy_from_slice(b"/stat");
    path
}

/// The guardian's whole life, reading its socket `socket`, until `_exit`; `announce`: says
/// that it runs once it is ready (an exec'd guardian; see [`Guardian::ready`]).
///
/// # Safety
/// Only to be called in a process of its own (exec'd or freshly forked) that holds no other
/// end of the socket pair; it never returns.
unsafe fn guard(socket: i32, wrapper: i32, open_max: i32, announce: bool) -> ! {
    // SAFETY (whole block): plain system calls on file descriptors, paths and process ids this
    // process owns; all async-signal-safe.
    unsafe {
        // Out of the wrapper's process group, so that signals meant for it pass by.
        libc::setpgid(0, 0);
        for sig in GUARDIAN_IGNORES {
            libc::signal(sig, libc::SIG_IGN);
        }
        // An exec'd guardian starts with every signal blocked; those it ignores are discarded.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Keep nothing open but the socket (not stdout: a reader waiting for EOF must get it).
        if socket != 0 && libc::dup2(socket, 0) < 0 {
            libc::_exit(1);
        }
        // One close_range(2) (Linux 5.9) instead of a close per possible descriptor; where the
        // kernel lacks it, the loop, up to the descriptor limit.
        if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
            for fd in 1..open_max {
                libc::close(fd);
            }
        }
        if announce && libc::write(0, [RUNS].as_ptr().cast(), 1) != 1 {
            // The wrapper is gone already, before its command started.
            libc::_exit(0);
        }
        // The command, once it has said its pid: its process group and its /proc stat file.
        let mut command: Option<(i32, [u8; 32])> = None;
        let mut watching = false;
        loop {
            let mut pipe = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
            let ready = libc::poll(&mut pipe, 1, if watching { WATCH_EVERY_MS } else { -1 });
            if ready == 0 {
                if let Some((_, path)) = &command
                    && command_runs(path)
                {
                    libc::kill(wrapper, libc::SIGCONT);
                }
                continue;
            }
            if ready < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                libc::_exit(1);
            }
            let mut message = [0u8; 5];
            match libc::read(0, message.as_mut_ptr().cast(), 1) {
                1 if message[0] == WATCH => watching = true,
                1 if message[0] == UNWATCH => watching = false,
                1 if message[0] == GUARD => {
                    // The pid came in the same write: it is there.
                    if libc::read(0, message[1..].as_mut_ptr().cast(), 4) != 4 {
                        libc::_exit(1);
                    }
                    let pid = i32::from_ne_bytes([message[1], message[2], message[3], message[4]]);
                    command = Some((pid, stat_path(pid)));
                }
                1 => libc::_exit(0),
                0 => {
                    // EOF without goodbye: the wrapper died. Nothing of its command may live on.
                    if let Some((pid, _)) = command {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                    libc::_exit(0);
                }
                _ if *libc::__errno_location() == libc::EINTR => {}
                _ => libc::_exit(1),
            }
        }
    }
}

/// Whether the command (its /proc stat file at `stat_path`, NUL-terminated) is alive, not
/// stopped and not in uninterruptible sleep. Async-signal-safe: no allocation.
///
/// # Safety
/// Only plain system calls; callable between fork and `_exit`.
unsafe fn command_runs(stat_path: &[u8; 32]) -> bool {
    use nix::libc;
    let mut buf = [0u8; 512];
    // SAFETY: the path is NUL-terminated (`stat_path` fills at most 21 of its 32 zeroed
    // bytes); the buffer outlives the read.
    let n = unsafe {
        let fd = libc::open(stat_path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let Ok(n) = usize::try_from(n) else { return false };
    let stat = &buf[..n];
    // The state follows the last ')' and a space.
    // D is not running either: a vfork() parent waits there for its stopped child, and a
    // process that was really continued soon shows R or S.
    match stat.iter().rposition(|&b| b == b')').and_then(|i| stat.get(i + 2)) {
        Some(b'T' | b't' | b'Z' | b'X' | b'x' | b'D') | None => false,
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::candidates;

    #[test]
    fn candidates_follow_path_as_execvp_does() {
        let path = Some("/a::/b/".as_ref());
        assert_eq!(candidates("x".as_ref(), path), ["/a/x", "./x", "/b//x"]);
        assert_eq!(candidates("./x".as_ref(), path), ["./x"]);
        assert_eq!(candidates("d/x".as_ref(), path), ["d/x"]);
        assert_eq!(candidates("x".as_ref(), None), ["/bin/x", "/usr/bin/x"]);
    }
}

#[cfg(test)]
mod guardian_tests {
    use super::stat_path;

    #[test]
    fn stat_paths_are_written_whole_and_nul_terminated() {
        for pid in [1, 9, 10, 12345, 4_194_304, i32::MAX] {
            let path = stat_path(pid);
            let end = path.iter().position(|&b| b == 0).expect("NUL-terminated");
            assert_eq!(std::str::from_utf8(&path[..end]).unwrap(), format!("/proc/{pid}/stat"));
        }
    }
}
