//! The few operating-system calls that need `unsafe` or must run between fork and exec.

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
    HANDLERS.store(handlers_now(), std::sync::atomic::Ordering::Relaxed);
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
    /// The guardian's pipe, or -1.
    guardian: libc::c_int,
    /// The signals to set back to their default ([`HANDLERS`]).
    reset: u64,
    errno: libc::c_int,
}

use nix::libc;

/// The command's stack until its exec (searching PATH needs a few KiB; untouched pages cost
/// nothing).
const SPAWN_STACK: usize = 256 * 1024;
const GUARD_PAGE: usize = 64 * 1024;

/// Starts `program` (searched in PATH as execvp(3) does, a script without `#!` run by
/// `/bin/sh`) with `argv` and the environment
/// `envp` ("NAME=value" each), sharing stdio with the wrapper; returns its pid once its exec
/// has happened, or the error that stopped it.
///
/// Like posix_spawn(3), the new process runs in the wrapper's memory until it execs, and the
/// wrapper waits meanwhile (`CLONE_VM | CLONE_VFORK`): nothing is copied, and the wrapper's
/// pages do not fault on their next write as they do after a fork (150–200 µs a run,
/// BENCHMARKS.md). posix_spawn itself cannot set the parent-death signal, which is why this is
/// done here. Between the clone and the exec the new process makes only async-signal-safe
/// system calls, on its own stack, with every signal blocked until its handlers are reset, so
/// no handler of the wrapper ever runs in it.
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
        guardian: launch.guardian.map_or(-1, Guardian::pipe),
        reset: match HANDLERS.load(std::sync::atomic::Ordering::Relaxed) {
            0 => handlers_now(),
            noted => noted,
        },
        errno: 0,
    };
    // SAFETY: a fresh private anonymous mapping, unmapped below once the new process has
    // exec'd or exited (CLONE_VFORK returns only then); its lowest page is a guard page, so
    // that an overflow faults instead of writing into the wrapper's memory.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SPAWN_STACK + GUARD_PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the mapping just made; used by nobody yet.
    let unmap = || unsafe { libc::munmap(stack, SPAWN_STACK + GUARD_PAGE) };
    // SAFETY: the lowest page of that mapping.
    if unsafe { libc::mprotect(stack, GUARD_PAGE, libc::PROT_NONE) } != 0 {
        let e = io::Error::last_os_error();
        unmap();
        return Err(e);
    }
    let mut old = SigSet::empty();
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old)) {
        unmap();
        return Err(e.into());
    }
    // SAFETY: the stack is ours and large enough; `launched` only reads `handoff` (alive on this
    // thread's stack, which CLONE_VFORK suspends until the exec) and what it points to, and
    // writes its `errno` and the second word of `sh_argv` (a vector of this frame).
    let pid = unsafe {
        libc::clone(
            launched,
            stack.cast::<u8>().add(SPAWN_STACK + GUARD_PAGE).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut handoff).cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    // The new process has left the stack (exec'd or exited).
    unmap();
    if pid < 0 {
        return Err(clone_error);
    }
    // SAFETY: read after CLONE_VFORK returned: the new process no longer runs in this memory.
    let errno = unsafe { std::ptr::read_volatile(&raw const handoff.errno) };
    if errno != 0 {
        // It exited without exec'ing: reap it here, its status means nothing.
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Pid::from_raw(pid))
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
pub struct Guardian {
    /// Our end of the pipe: closed by the kernel when the wrapper dies.
    write: std::os::fd::OwnedFd,
}

/// What the guardian is told, one byte each; `GUARD` is followed by the command's pid (4 bytes,
/// native order) in the same write, made by the command's process before its exec.
const DISMISS: u8 = b'x';
const WATCH: u8 = b's';
const UNWATCH: u8 = b'r';
const GUARD: u8 = b'p';

impl Guardian {
    /// Forks the guardian, right before the command is started: the command's own process
    /// tells it its pid before its exec (see [`spawn`]), so that there is no moment when the
    /// command runs and a SIGKILLed wrapper would leave its group behind. (Forked earlier in a
    /// run it costs more: every page a fork shares faults on the wrapper's next write for as
    /// long as the guardian lives; BENCHMARKS.md.)
    pub fn start() -> io::Result<Self> {
        use std::os::fd::AsRawFd;
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (read_fd, write_fd) = (read.as_raw_fd(), write.as_raw_fd());
        let wrapper = nix::unistd::getpid().as_raw();
        let open_max = open_max();
        // SAFETY: the child only makes async-signal-safe system calls (signal, close_range,
        // close, dup2, setpgid, read, poll, open, kill, _exit) and never returns into Rust code
        // that could allocate or lock.
        match unsafe { nix::unistd::fork() }? {
            nix::unistd::ForkResult::Child => unsafe { guard(read_fd, write_fd, wrapper, open_max) },
            nix::unistd::ForkResult::Parent { .. } => {
                drop(read);
                Ok(Guardian { write })
            }
        }
    }

    /// Whether the guardian is still there to read its pipe (someone may have SIGKILLed it
    /// while the run waited for the lock): the pipe reports an error once no one can read it.
    pub fn alive(&self) -> bool {
        let mut fd = libc::pollfd { fd: self.pipe(), events: 0, revents: 0 };
        // SAFETY: one pollfd, alive across the call; a zero timeout: nothing waits.
        let ready = unsafe { libc::poll(&mut fd, 1, 0) };
        !(ready > 0 && fd.revents & libc::POLLERR != 0)
    }

    /// The descriptor the command's process writes its pid to (see [`spawn`]).
    fn pipe(&self) -> libc::c_int {
        use std::os::fd::AsRawFd;
        self.write.as_raw_fd()
    }

    /// The wrapper is about to stop itself with its stopped command: wake it if the command
    /// runs again first.
    pub fn watch(&self) {
        let _ = nix::unistd::write(&self.write, &[WATCH]);
    }

    /// The wrapper runs again.
    pub fn unwatch(&self) {
        let _ = nix::unistd::write(&self.write, &[UNWATCH]);
    }

    /// The command's group is gone: the guardian may leave without doing anything.
    pub fn dismiss(self) {
        let _ = nix::unistd::write(&self.write, &[DISMISS]);
    }
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
/// (the runtime, a connection per Redis node and one for announcements, the guardian's pipe),
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

/// The guardian's whole life, between fork and `_exit`.
///
/// # Safety
/// Only to be called in a freshly forked child; it never returns.
unsafe fn guard(read_fd: i32, write_fd: i32, wrapper: i32, open_max: i32) -> ! {
    // SAFETY (whole block): plain system calls on file descriptors, paths and process ids this
    // process owns; all async-signal-safe.
    unsafe {
        libc::close(write_fd);
        // Out of the wrapper's process group, so that signals meant for it pass by.
        libc::setpgid(0, 0);
        for sig in GUARDIAN_IGNORES {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Keep nothing open but the pipe (not stdout: a reader waiting for EOF must get it).
        if libc::dup2(read_fd, 0) < 0 {
            libc::_exit(1);
        }
        // One close_range(2) (Linux 5.9) instead of a close per possible descriptor; where the
        // kernel lacks it, the loop, up to the descriptor limit.
        if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
            for fd in 1..open_max {
                libc::close(fd);
            }
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
