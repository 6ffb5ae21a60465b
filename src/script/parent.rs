//! The script behind `redlock-run lock`: the parent that reads its output, as the shell running
//! `eval "$(redlock-run lock …)"` does. Found and checked from /proc before anything is taken, and
//! the reader again before the assignments are printed.

use nix::unistd::Pid;

use crate::child::adopted::{Script, stat};
use crate::sys;

/// Finds the script: the parent, which must read this process's stdout (a pipe) and, unless
/// `allow_interactive`, not be a shell at a terminal's prompt. A script that leads its process
/// group is guarded as a group, as a command is; one that does not (started as a plain child by
/// a CI runner, by `sh -c`, a subshell) as itself and its descendants. The error says what is
/// wrong and what to do.
pub fn identify(allow_interactive: bool) -> Result<Script, String> {
    let pid = reader()?;
    let script = describe(pid);
    let group = nix::unistd::getpgid(Some(pid))
        .map_err(|e| format!("cannot read the process group of the script ({script}): {e}"))?;
    let tree = group != pid;
    if tree {
        // Stopping the group would stop the shell or runner that started the script.
        tracing::info!(
            "the script ({script}) does not lead its process group (led by {}): the script and its \
             descendants are guarded instead of the group (setsid -w gives the group guarantee)",
            describe(group)
        );
    } else {
        tracing::debug!("the script ({script}) leads its process group: the group is guarded");
    }
    if !allow_interactive && interactive(pid) {
        return Err(format!(
            "the parent ({script}) is an interactive shell: a lost lock would stop it with SIGKILL, ending \
             the session; put the steps in a script, or give --allow-interactive"
        ));
    }
    let gone = || format!("the script ({script}) ended before the lock was taken");
    let start_time = stat(pid).map(|s| s.start_time).ok_or_else(gone)?;
    let pidfd = match sys::pidfd_open(pid) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::debug!("no pidfd for the script ({e}); it is looked at every 50 ms");
            None
        }
    };
    // The pidfd is the script's only if no other process has taken its pid meanwhile.
    if stat(pid).is_none_or(|s| s.start_time != start_time) {
        return Err(gone());
    }
    Ok(Script::new(pid, pidfd, start_time, tree))
}

/// The shell that evaluates this process's output: the parent that reads its stdout pipe, or
/// the shell above the subshells between (`$(cmd 2>file)` runs `cmd` in a subshell of the
/// one that evaluates), which write to the pipe and end with this process.
pub fn reader() -> Result<Pid, String> {
    // No `$(…)` in what may end up evaluated by mistake (`2>&1`).
    const HOW: &str = "use it in a script, as `redlock-run lock --help` shows";
    let pipe = match nix::sys::stat::fstat(std::io::stdout()) {
        Ok(st) if st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFIFO => st.st_ino,
        _ => {
            return Err(format!(
                "lock prints shell assignments for eval, and its output is not a pipe: {HOW}"
            ));
        }
    };
    let mut pid = nix::unistd::getppid();
    let mut between = Vec::new();
    for _ in 0..=MAX_SUBSHELLS {
        let process = describe(pid);
        match pipe_end(pid, pipe) {
            Ok(Some(PipeEnd::Read)) => {
                // A subshell is a fork of the shell: the same program with the same arguments.
                return match between.into_iter().find(|&w| program(w).is_none_or(|p| Some(p) != program(pid)))
                {
                    Some(other) => Err(format!(
                        "lock's output passes through {}, which is not a subshell of the shell that reads \
                         it ({process}): run lock itself in the script's $(...)",
                        describe(other)
                    )),
                    None => Ok(pid),
                };
            }
            Ok(Some(PipeEnd::Write)) => match stat(pid) {
                Some(s) => {
                    between.push(pid);
                    pid = s.parent;
                }
                None => return Err(format!("{process} ended before the lock was taken")),
            },
            Ok(None) => {
                return Err(format!(
                    "lock prints shell assignments for eval, and its parent ({process}) does not read them: {HOW}"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "cannot tell whether the parent ({process}) reads lock's output ({e}): {HOW}, as the \
                     same user"
                ));
            }
        }
    }
    Err(format!("lock's output is read by none of its {MAX_SUBSHELLS} nearest ancestors: {HOW}"))
}

/// Waits (at most a second) until `pid` sleeps: a shell reading `$(...)` sleeps in its read,
/// while one still running may be about to hand the pipe on.
pub fn wait_until_asleep(pid: Pid) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while stat(pid).is_some_and(|s| matches!(s.state, b'R' | b'D')) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// "backup.sh, pid 4242", as messages name a process.
pub fn describe(pid: Pid) -> String {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(name) => format!("{}, pid {pid}", name.trim_end()),
        Err(_) => format!("pid {pid}"),
    }
}

/// What a process runs, its executable and its arguments; `None` if either cannot be read.
fn program(pid: Pid) -> Option<(std::path::PathBuf, Vec<u8>)> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    Some((exe, std::fs::read(format!("/proc/{pid}/cmdline")).ok()?))
}

/// How many subshells may stand between the script and this process.
const MAX_SUBSHELLS: usize = 4;

enum PipeEnd {
    Read,
    Write,
}

/// Which end of the pipe with inode `pipe` process `pid` holds: the read end if any.
fn pipe_end(pid: Pid, pipe: u64) -> std::io::Result<Option<PipeEnd>> {
    let target = format!("pipe:[{pipe}]");
    let mut end = None;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let entry = entry?;
        if std::fs::read_link(entry.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                entry.file_name().to_string_lossy()
            ))?;
            let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).map(str::trim);
            let flags = flags.and_then(|f| i32::from_str_radix(f, 8).ok()).unwrap_or(0);
            if flags & nix::libc::O_ACCMODE == nix::libc::O_RDONLY {
                return Ok(Some(PipeEnd::Read));
            }
            end = Some(PipeEnd::Write);
        }
    }
    Ok(end)
}

/// A shell at a prompt: its command line names no script and no `-c` command, and it reads a
/// terminal.
fn interactive(pid: Pid) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let mut args = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty());
    // `busybox sh`: the shell is the applet named after busybox.
    let busybox = args.next().is_some_and(|a| a.rsplit(|b| *b == b'/').next() == Some(&b"busybox"[..]));
    if busybox {
        args.next();
    }
    let has_operand = args.any(|a| !a.starts_with(b"-") && !a.starts_with(b"+"));
    let on_terminal = std::fs::read_link(format!("/proc/{pid}/fd/0"))
        .is_ok_and(|t| t.starts_with("/dev/pts") || t.to_string_lossy().starts_with("/dev/tty"));
    !has_operand && on_terminal
}
