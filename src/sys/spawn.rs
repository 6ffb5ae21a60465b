//! The command's spawn: `CLONE_VM | CLONE_VFORK`, like posix_spawn, with the parent-death
//! signal, the process group, the terminal and `PR_SET_NO_NEW_PRIVS` set before the exec, and
//! PATH searched as execvp does.

use std::io;

use nix::libc;
use nix::unistd::Pid;

use super::clone::clone_until_exec;
use super::dispositions::{HANDLERS, handlers_now};
use super::guardian::{GUARD, Guardian};

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

/// The command's stack until its exec (searching PATH needs a few KiB; untouched pages cost
/// nothing).
const SPAWN_STACK: usize = 256 * 1024;

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

/// Whether a file called `program` is where execvp(3) looks for it (what the command line
/// means by a word that could also be a mistyped subcommand).
pub fn found_on_path(program: &std::ffi::OsStr) -> bool {
    candidates(program, std::env::var_os("PATH").as_deref()).iter().any(|c| std::path::Path::new(c).is_file())
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
