//! The command's spawn: std's `Command` (fork and exec, its process group), with the
//! parent-death signal, the terminal, `PR_SET_NO_NEW_PRIVS` and the guardian told set before
//! the exec, and PATH searched as execvp does.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::process::CommandExt;

use nix::libc;
use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
use nix::unistd::Pid;

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

/// What the command's process needs between the fork and its exec, made beforehand: nothing
/// may be allocated there (the fork copied one thread of a process with several).
struct Exec {
    /// Where to look for the program, in order (null-terminated).
    candidates: Vec<*const libc::c_char>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// `/bin/sh`, the candidate, then `argv` without its first word: for a file that is not an
    /// executable format (a script without `#!`), which POSIX runs with `sh`. The second word
    /// is filled in by the new process.
    sh_argv: Vec<*const libc::c_char>,
    #[expect(dead_code, reason = "held, not read: the pointers point into them")]
    strings: Vec<CString>,
    parent: libc::pid_t,
    foreground: bool,
    no_new_privs: bool,
    /// The guardian's socket, or -1.
    guardian: libc::c_int,
    /// The signals to set back to their default ([`HANDLERS`]).
    reset: u64,
}

// SAFETY: the pointers point into `strings`, which `Exec` owns and never changes; only the new
// process, in its own copy of the memory, writes (`sh_argv[1]`).
unsafe impl Send for Exec {}
// SAFETY: as for `Send`: nothing is written through a shared `Exec`.
unsafe impl Sync for Exec {}

/// Starts `program` (searched in PATH as execvp(3) does, a script without `#!` run by
/// `/bin/sh`) with `argv` and the environment `envp` ("NAME=value" each), sharing stdio with
/// the wrapper; returns its pid once its exec has happened, or the error that stopped it.
///
/// std's `Command` forks and makes it a process group; what posix_spawn(3) cannot do (the
/// parent-death signal, telling the guardian, the terminal, `PR_SET_NO_NEW_PRIVS`) is done in
/// the new process before its exec ([`Exec::run`]), which is also made there: musl's execvp
/// does not run a script without `#!` with `sh`. The new process starts with every signal
/// blocked and resets the wrapper's handlers before it unblocks them.
pub fn spawn(program: &OsStr, argv: &[OsString], envp: &[OsString], launch: Launch<'_>) -> io::Result<Pid> {
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &OsStr| {
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
    let args = argv.iter().map(|a| c(a)).collect::<io::Result<Vec<_>>>()?;
    let vars = envp.iter().map(|e| c(e)).collect::<io::Result<Vec<_>>>()?;
    let pointers = |strings: &[CString]| {
        strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect::<Vec<_>>()
    };
    let (candidates_ptrs, argv_ptrs, envp_ptrs) = (pointers(&candidates), pointers(&args), pointers(&vars));
    let mut sh_argv = vec![c"/bin/sh".as_ptr(), std::ptr::null()];
    sh_argv.extend_from_slice(&argv_ptrs[1..]);
    let guardian = launch.guardian.map_or(-1, Guardian::socket);
    let mut exec = Exec {
        candidates: candidates_ptrs,
        argv: argv_ptrs,
        envp: envp_ptrs,
        sh_argv,
        strings: candidates.into_iter().chain(args).chain(vars).collect(),
        parent: nix::unistd::getpid().as_raw(),
        foreground: launch.foreground,
        no_new_privs: launch.no_new_privs,
        guardian,
        reset: match HANDLERS.load(std::sync::atomic::Ordering::Relaxed) {
            0 => handlers_now(),
            noted => noted,
        },
    };
    let mut command = std::process::Command::new(program);
    command.args(&argv[1..]).process_group(0);
    // SAFETY: `Exec::run` makes only async-signal-safe calls, allocates nothing and touches
    // only its own `Exec` (the new process's copy).
    unsafe { command.pre_exec(move || exec.run()) };
    // The new process inherits this thread's mask (std leaves it alone), so no handler of the
    // wrapper's runs in it, on its copy of the wrapper's memory, before it resets them.
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old))?;
    let spawned = command.spawn();
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    match spawned {
        // Reaped by the wrapper (`Child::wait`): std's handle neither waits nor kills when dropped.
        Ok(child) => Ok(Pid::from_raw(child.id() as libc::pid_t)),
        // std has reaped the process, which did not exec.
        Err(e) if guardian >= 0 && e.raw_os_error() == Some(GUARDIAN_GONE) => {
            Err(io::Error::other(GuardianGone))
        }
        Err(e) => Err(e),
    }
}

/// The error the new process reports when it could not tell the guardian its pid, whatever
/// the write's own error: nothing else before the exec fails with it.
const GUARDIAN_GONE: libc::c_int = libc::EPIPE;

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

impl Exec {
    /// The command's process from the fork (std has made it a process group) to its exec;
    /// returns only the error that stopped it.
    fn run(&mut self) -> io::Result<()> {
        let fail = |errno: libc::c_int| {
            Err(io::Error::from_raw_os_error(if errno == 0 { libc::ECHILD } else { errno }))
        };
        // SAFETY (whole body): only async-signal-safe system calls on what `self` owns; nothing
        // is allocated or locked.
        unsafe {
            // The wrapper's handlers must not run here: back to the defaults (exec would reset
            // them anyway), with SIGPIPE as a command expects it (the wrapper ignores it).
            // Ignored signals (nohup) stay ignored. Which ones have a handler is known
            // (`HANDLERS`).
            let mut reset = self.reset;
            let mut sig = 1;
            while reset != 0 {
                if reset & 1 != 0 {
                    libc::signal(sig, libc::SIG_DFL);
                }
                reset >>= 1;
                sig += 1;
            }
            // The parent-death signal fires when the *thread* that forked exits; the command is
            // spawned from the main thread, which lives as long as the wrapper.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return fail(*libc::__errno_location());
            }
            if libc::getppid() != self.parent {
                // The wrapper died before the line above took effect.
                return fail(libc::ESRCH);
            }
            if self.guardian >= 0 {
                // Its process group is its pid: from here on, a dead wrapper means a dead group.
                let mut message = [GUARD; 5];
                message[1..].copy_from_slice(&libc::getpid().to_ne_bytes());
                let sent =
                    libc::send(self.guardian, message.as_ptr().cast(), message.len(), libc::MSG_NOSIGNAL);
                if sent != 5 {
                    return fail(GUARDIAN_GONE);
                }
            }
            if self.foreground {
                // SIGTTOU is blocked: a background group may take the terminal.
                libc::tcsetpgrp(0, libc::getpid());
            }
            if self.no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return fail(*libc::__errno_location());
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            // execvp(3)'s search, the same with any C library: the first candidate that execs
            // wins; one found but not executable (EACCES) is reported if none does.
            let mut denied = false;
            for &candidate in self.candidates.iter().take_while(|c| !c.is_null()) {
                libc::execve(candidate, self.argv.as_ptr(), self.envp.as_ptr());
                match *libc::__errno_location() {
                    libc::ENOEXEC => {
                        self.sh_argv[1] = candidate;
                        libc::execve(c"/bin/sh".as_ptr(), self.sh_argv.as_ptr(), self.envp.as_ptr());
                        return fail(*libc::__errno_location());
                    }
                    libc::EACCES => denied = true,
                    // Not there (or a PATH entry too long to be a path): the next one.
                    libc::ENOENT
                    | libc::ENOTDIR
                    | libc::ESTALE
                    | libc::ENODEV
                    | libc::ETIMEDOUT
                    | libc::ENAMETOOLONG => {}
                    errno => return fail(errno),
                }
            }
            fail(if denied { libc::EACCES } else { libc::ENOENT })
        }
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
