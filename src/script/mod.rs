//! `redlock-run lock` and `unlock`: a lock for the rest of a shell script
//! (docs/ARCHITECTURE.md § A script's lock).
//!
//! `lock` forks its holder before anything else runs. The holder takes the lock as a run
//! does (`run::run`, with the script as its target), then leaves the script's session, tells
//! the `lock` process the assignments to print and supervises the script as a run supervises
//! its command; the `lock` process prints them if the script still reads its output, and exits
//! with the holder's status (on any failure `lib::main` prints `(exit N)` instead:
//! [`print_failing`]). `unlock` asks the holder, through a socket named in `REDLOCK_HOLDER`,
//! to let go.

mod parent;

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::child::adopted::{Script, UnlockRequest};
use crate::child::{Child, LockEnv};
use crate::config::env::vars::HOLDER;
use crate::config::env::{WRAPPER_VARIABLES, vars};
use crate::exit::{Error, signal_status, status};
use crate::guard::Guard;

/// How long `unlock` waits for its answer: the holder's release is bounded by 3 s.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// What `unlock` gets back: the status it exits with, and a line for stderr (empty: none).
pub type Answer = (u8, String);

/// Where `lock` stands after [`begin`].
pub enum Begun {
    /// In the holder, which goes on to take the lock.
    Holder(ScriptHolder),
    /// The `lock` process, done: its status (what it printed, if anything, is printed).
    Done(u8),
}

/// Checks that the script can hold the lock, then forks the holder. Before the runtime, with
/// one thread. `keys`: the keys to take, for the check that the script does not hold them
/// already.
pub fn begin(allow_interactive: bool, keys: &[Vec<u8>]) -> Begun {
    let script = match parent::identify(allow_interactive) {
        Ok(script) => script,
        Err(msg) => return refuse(&msg),
    };
    if let Some(msg) = held_already(script.pid, keys) {
        return refuse(&msg);
    }
    let (read, write) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(pipe) => pipe,
        Err(e) => return fail(&format!("cannot make a pipe for the holder: {e}")),
    };
    let parent = nix::unistd::getpid();
    match crate::sys::fork_holder() {
        Err(e) => fail(&format!("cannot start the holder: {e}")),
        Ok(Some(holder)) => {
            drop(write);
            Begun::Done(relay(read, holder, &script))
        }
        Ok(None) => {
            drop(read);
            crate::sys::hide_arguments(b"redlock-run\0lock\0(holder)", |name| {
                WRAPPER_VARIABLES.iter().any(|v| v.as_bytes() == name) || name == b"REDIS_URL"
            });
            // A `lock` process that is killed takes the waiting holder with it.
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
            if nix::unistd::getppid() != parent {
                std::process::exit(status::INTERNAL.into());
            }
            Begun::Holder(ScriptHolder { pid: script.pid, script: Some(script), report: Some(write) })
        }
    }
}

fn refuse(msg: &str) -> Begun {
    tracing::error!(exit_status = status::USAGE, "{msg}");
    Begun::Done(status::USAGE)
}

fn fail(msg: &str) -> Begun {
    tracing::error!(exit_status = status::INTERNAL, "{msg}");
    Begun::Done(status::INTERNAL)
}

/// Whether a shell evaluates this process's output (`eval "$(…)"`): a shell reads it, not a
/// program that captures it (help2man, a test).
pub fn evaluated() -> bool {
    const SHELLS: [&str; 9] = ["sh", "bash", "dash", "zsh", "ash", "busybox", "ksh", "mksh", "yash"];
    parent::reader().is_ok_and(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| SHELLS.contains(&c.trim_end()))
    })
}

/// What `lock` prints when it fails, whatever failed (but on a terminal): `(exit N)`, so that
/// `eval` fails with its status (`eval` of nothing succeeds, in every shell) and `|| exit`
/// ends the script with it. Nothing is assigned.
pub fn print_failing(code: u8) {
    use std::io::IsTerminal;
    let mut out = std::io::stdout().lock();
    if !out.is_terminal() {
        let _ = out.write_all(format!("(exit {code})\n").as_bytes()).and_then(|()| out.flush());
    }
}

/// The signals the `lock` process passes on to the waiting holder.
const PASSED_ON: [nix::sys::signal::Signal; 7] = {
    use nix::sys::signal::Signal::*;
    [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM]
};

/// The `lock` process: waits for the holder's report, prints the assignments it carries and
/// exits with its status. A script that ends meanwhile ends the holder's wait (SIGTERM); a
/// signal to this process is passed on to the holder, and ends `lock` with 128+N whatever
/// the holder reports (the script must not go on as if it held the lock).
fn relay(report: OwnedFd, holder: Pid, script: &Script) -> u8 {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use nix::sys::signal::{SigSet, Signal, kill};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use std::os::fd::AsFd;
    let mut mask = SigSet::empty();
    for sig in PASSED_ON {
        if !crate::sys::ignored_at_start(sig) {
            mask.add(sig);
        }
    }
    let signals = mask
        .thread_block()
        .and_then(|()| SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK));
    let signals = signals.map_err(|e| tracing::debug!("signals to lock are not passed on: {e}")).ok();
    let (mut told, mut signalled) = (false, None);
    loop {
        let mut fds = vec![PollFd::new(report.as_fd(), PollFlags::POLLIN)];
        if let Some(fd) = &signals {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        if let Some(fd) = script.pidfd().filter(|_| !told) {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        let every =
            if told || script.pidfd().is_some() { PollTimeout::NONE } else { PollTimeout::from(50u16) };
        let _ = poll(&mut fds, every);
        if fds[0].any().unwrap_or(true) {
            break;
        }
        if let Some(Ok(Some(info))) = signals.as_ref().map(SignalFd::read_signal)
            && let Ok(sig) = Signal::try_from(info.ssi_signo as i32)
        {
            let _ = kill(holder, sig);
            signalled.get_or_insert(sig);
        }
        if !told && script.has_exited() {
            let _ = kill(holder, Signal::SIGTERM);
            told = true;
        }
    }
    if let Some(sig) = signalled {
        // Whatever the holder said: it releases once the script, which gets no assignments,
        // has ended.
        let _ = std::fs::File::from(report).read_to_end(&mut Vec::new());
        return signal_status(sig as i32);
    }
    let mut bytes = Vec::new();
    let _ = std::fs::File::from(report).read_to_end(&mut bytes);
    let Some((&code, assignments)) = bytes.split_first() else {
        // The holder died without a word.
        let died = match nix::sys::wait::waitpid(holder, None) {
            Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => signal_status(sig as i32),
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => u8::try_from(code).unwrap_or(status::INTERNAL),
            _ => status::INTERNAL,
        };
        return if died == 0 { status::INTERNAL } else { died };
    };
    if code != 0 {
        return code;
    }
    let (holder_name, assignments) =
        assignments.split_at(assignments.iter().position(|b| *b == b'\n').unwrap_or(0));
    let assignments = assignments.get(1..).unwrap_or_default();
    // The parent may have passed the pipe on since it was checked (bash holds the read end of
    // `lock | cat` until it has forked `cat`): the holder lets go of the script, which runs on.
    parent::wait_until_asleep(script.pid);
    let reader = parent::reader().and_then(|pid| {
        (pid == script.pid).then_some(()).ok_or_else(|| {
            format!("lock's output is now read by {}, not by the script", parent::describe(pid))
        })
    });
    if let Err(msg) = reader {
        let holder_name = std::ffi::OsStr::from_bytes(holder_name);
        if let Err(e) = ask(holder_name, "unlock", ANSWER_WITHIN) {
            tracing::warn!(
                "the holder could not be asked to release ({e}): it holds the lock until the script ends"
            );
        }
        tracing::error!(exit_status = status::USAGE, "{msg}");
        return status::USAGE;
    }
    let mut out = std::io::stdout().lock();
    if out.write_all(assignments).and_then(|()| out.flush()).is_err() {
        // The script is gone; its holder sees that and releases.
        return status::INTERNAL;
    }
    status::SUCCESS
}

/// The holder, before and while it holds the lock for the script.
pub struct ScriptHolder {
    script: Option<Script>,
    pid: Pid,
    /// Where the outcome goes to the `lock` process, until it has gone.
    report: Option<OwnedFd>,
}

impl ScriptHolder {
    pub fn script_pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// The lock could not be taken: the `lock` process exits with `code` and prints nothing.
    pub fn failed(&mut self, code: u8) {
        if let Some(fd) = self.report.take() {
            let _ = std::fs::File::from(fd).write_all(&[code.max(1)]);
        }
    }

    /// The lock is taken: the holder leaves the script's session and its stdio, listens for
    /// `unlock`, makes sure its guardian runs, and tells the `lock` process what to print.
    /// From here on the script is guarded as a run's command is.
    pub async fn take_over(&mut self, env: &LockEnv, mut guard: Guard) -> Result<Child, Error> {
        let internal =
            |what: &str, e: &dyn std::fmt::Display| Error::Internal(anyhow::anyhow!("{what}: {e}"));
        // Signals for the script's terminal or group no longer reach the holder, and `$(…)`
        // reads to the end once the `lock` process has exited.
        let _ = nix::unistd::setsid();
        crate::sys::stdio_to_null().map_err(|e| internal("cannot put stdin and stdout on /dev/null", &e))?;
        let name = format!("redlock-run.{}.{:08x}", std::process::id(), rand::random::<u32>());
        let listener = SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|addr| UnixListener::bind_addr(&addr))
            .and_then(|l| {
                l.set_nonblocking(true)?;
                tokio::net::UnixListener::from_std(l)
            })
            .map_err(|e| internal("cannot listen for unlock", &e))?;
        guard.ready(&[OsString::from("the script")]).await?;
        let (let_go, requests) = mpsc::unbounded_channel();
        let script = self.script.take().expect("taken over once");
        let child = Child::adopt(script, guard, requests);
        tokio::spawn(serve(listener, child.pid(), let_go));
        let _ = nix::sys::prctl::set_pdeathsig(None);
        let mut text = vec![0u8];
        text.extend(format!("{name}\n").as_bytes());
        text.extend(assignments(env, &name));
        let report = self.report.take().expect("reported once");
        std::fs::File::from(report)
            .write_all(&text)
            .map_err(|e| internal("the lock command that started the holder is gone", &e))?;
        Ok(child)
    }
}

/// The shell's assignments: `export NAME='value'` lines, POSIX-quoted.
fn assignments(env: &LockEnv, holder: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut set = |name: &str, value: &[u8]| {
        out.extend_from_slice(format!("export {name}=").as_bytes());
        out.extend(quoted(value));
        out.push(b'\n');
    };
    set(vars::KEY, env.key.as_bytes());
    set(vars::KEYS, env.keys.as_bytes());
    set(vars::TTL_MS, env.ttl_ms.to_string().as_bytes());
    set(HOLDER, holder.as_bytes());
    match (&env.token, &env.fence, &env.fences) {
        (Some(token), Some(fence), Some(fences)) => {
            set(vars::TOKEN, token.as_bytes());
            set(vars::FENCE, fence.as_bytes());
            set(vars::FENCES, fences.as_bytes());
        }
        // No lock (--fail-open): nothing of an outer lock's may pass for this one's.
        _ => out.extend_from_slice(
            format!("unset {} {} {}\n", vars::TOKEN, vars::FENCE, vars::FENCES).as_bytes(),
        ),
    }
    out
}

/// `value` in single quotes, each `'` in it written `'\''`: the shell takes every other byte
/// as it is.
fn quoted(value: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in value {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// The holder's socket: `who` answers the script's pid, `unlock` asks the supervisor to let go
/// (it answers through the [`UnlockRequest`]). Only the holder's own user (or root) is heard.
async fn serve(
    listener: tokio::net::UnixListener,
    script: Pid,
    let_go: mpsc::UnboundedSender<UnlockRequest>,
) {
    let own = nix::unistd::geteuid().as_raw();
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let let_go = let_go.clone();
        tokio::spawn(async move {
            let mut line = String::new();
            // A request is one short line.
            let mut read = tokio::io::BufReader::new(tokio::io::AsyncReadExt::take(&mut stream, 256));
            let asked = tokio::time::timeout(Duration::from_secs(1), read.read_line(&mut line)).await;
            if !matches!(asked, Ok(Ok(_))) {
                return;
            }
            if !stream.peer_cred().is_ok_and(|c| c.uid() == own || c.uid() == 0) {
                let denied = format!(
                    "{} only the holder's user (uid {own}) or root may unlock it\n",
                    status::PERMISSION
                );
                let _ = stream.write_all(denied.as_bytes()).await;
                return;
            }
            match line.trim_end() {
                "who" => {
                    let _ = stream.write_all(format!("{script}\n").as_bytes()).await;
                }
                "unlock" => {
                    if let Ok(stream) = stream.into_std()
                        && stream.set_nonblocking(false).is_ok()
                    {
                        let _ = let_go.send(UnlockRequest(stream));
                    }
                }
                _ => {}
            }
        });
    }
}

/// Asks the holder named by `REDLOCK_HOLDER` one thing, and returns its answer line.
fn ask(holder: &std::ffi::OsStr, request: &str, within: Duration) -> std::io::Result<String> {
    let addr = SocketAddr::from_abstract_name(holder.as_bytes())?;
    let mut stream = UnixStream::connect_addr(&addr)?;
    stream.set_read_timeout(Some(within))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    let mut answer = String::new();
    stream.take(4096).read_to_string(&mut answer)?;
    Ok(answer)
}

/// The script already holds one of `keys` through a holder of its own (a second `lock` of the
/// same key would wait for itself): what to say.
fn held_already(script: Pid, keys: &[Vec<u8>]) -> Option<String> {
    let holder = std::env::var_os(HOLDER).filter(|h| !h.is_empty())?;
    let held = std::env::var_os(vars::KEYS)?;
    let overlap = held.as_bytes().split(|b| *b == b' ').find(|k| keys.iter().any(|key| key == k))?;
    let answer = ask(&holder, "who", Duration::from_secs(1)).ok()?;
    (answer.trim() == script.to_string()).then(|| {
        format!(
            "this script ({}) already holds {} through its holder ({HOLDER}={}): run `redlock-run unlock` \
             before taking it again",
            parent::describe(script),
            crate::lock::show_key(overlap),
            holder.to_string_lossy()
        )
    })
}

/// `redlock-run unlock`: asks the holder named in `REDLOCK_HOLDER` to release, says what it
/// answered, and returns the status to exit with.
pub fn unlock() -> u8 {
    let Some(holder) = std::env::var_os(HOLDER).filter(|h| !h.is_empty()) else {
        tracing::error!(
            exit_status = status::USAGE,
            "no lock to release: {HOLDER} is not set (a script takes one with eval \"$(redlock-run lock \
             --key KEY)\")"
        );
        return status::USAGE;
    };
    let shown = holder.to_string_lossy();
    let answer = match ask(&holder, "unlock", ANSWER_WITHIN) {
        Ok(answer) => answer,
        // No longer listening, or gone while answering (exiting after an earlier `unlock`).
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
            ) =>
        {
            String::new()
        }
        Err(e) => {
            tracing::error!(exit_status = status::INTERNAL, "cannot reach the holder {HOLDER}={shown}: {e}");
            return status::INTERNAL;
        }
    };
    let answer = answer.trim_end();
    let (code, msg) = answer.split_once(' ').unwrap_or((answer, ""));
    let Ok(code) = code.parse::<u8>() else {
        tracing::error!(
            exit_status = status::LEASE_LOST,
            "the holder {HOLDER}={shown} is gone: the lock was released already, or lost and the script stopped"
        );
        return status::LEASE_LOST;
    };
    match (code, msg) {
        (0, "") => tracing::info!("released"),
        (0, msg) => tracing::warn!("{msg}"),
        (code, msg) => tracing::error!(exit_status = code, "{msg}"),
    }
    code
}
