//! The command's process: spawn it in its own process group, signal the group, reap it (and any
//! orphaned descendants), and turn its end into an exit status.

use std::ffi::OsString;
use std::io;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::signal::unix::{Signal as SignalStream, SignalKind, signal};

use tokio::sync::mpsc;

use crate::config::env::{WRAPPER_VARIABLES, vars};
use crate::exit::{Error, signal_status, status};
use crate::guard::Guard;
use crate::sys;

pub mod adopted;
mod tree;
use adopted::{Script, UnlockRequest};
use tree::Tree;

/// How often the descendants of a script that does not lead its process group are looked for
/// while it runs (`tree`): one reparented away between two looks is not found.
const WALK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Environment the command receives from the wrapper.
pub struct LockEnv {
    /// The first key, and every key separated by spaces.
    pub key: OsString,
    pub keys: OsString,
    /// The stored value and the fences (the first key's, and every key's separated by spaces);
    /// absent for a run without a lock (`--fail-open`).
    pub token: Option<String>,
    pub fence: Option<String>,
    pub fences: Option<String>,
    pub ttl_ms: u64,
    /// Start the command with PR_SET_NO_NEW_PRIVS (`--no-new-privs`).
    pub no_new_privs: bool,
}

pub struct Child {
    pid: Pid,
    /// Whether the terminal was handed to the command and must be taken back.
    foreground: bool,
    how: How,
    exit: Option<u8>,
    stopped: Option<Signal>,
    /// Kills the group if the wrapper dies before it is dismissed, or cannot act by the lease
    /// deadline.
    guard: Guard,
}

/// How the wrapper learns of the command's end.
enum How {
    /// The command is the wrapper's child: SIGCHLD, then `waitpid`.
    Spawned(SignalStream),
    /// A script that took the lock with `redlock-run lock`, watched by its holder, which is
    /// not its parent: its exit status is not known.
    Adopted(Box<Adopted>),
}

struct Adopted {
    script: Script,
    /// `unlock` asking the holder to let go, with where its answer goes.
    let_go: mpsc::UnboundedReceiver<UnlockRequest>,
    asked: Vec<UnlockRequest>,
    /// Let go of: the script runs on without the lock, and nothing stops it.
    released: bool,
    /// A script that does not lead its process group: it and its descendants are the target
    /// of every signal, and are looked for every [`WALK_EVERY`].
    tree: Option<(Tree, tokio::time::Interval)>,
}

/// The command's process group, judged by the processes that can still run: zombies are not
/// members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Empty,
    /// Every live member is stopped (job control).
    Stopped,
    /// At least one live member can run.
    Running,
}

/// What [`Child::wait`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Exited(u8),
    Stopped(Signal),
    /// `unlock`: the script asks to release the lock and go on without it.
    LetGo,
}

impl Child {
    /// Starts `argv` directly (no shell) with the wrapper's stdio and environment, minus the
    /// variables that configure a wrapper, plus the lock's variables.
    ///
    /// `guard`: ready to guard ([`Guard::ready`]); a guardian that dies before the command's
    /// process has told it its pid is replaced by a forked one.
    ///
    /// `sigchld`: SIGCHLD as the wrapper registered it at start-up (`Signals::take_child_exits`),
    /// else registered now; either way before the spawn, so the command's exit cannot be missed.
    pub fn spawn(
        argv: &[OsString],
        env: &LockEnv,
        mut guard: Guard,
        sigchld: Option<SignalStream>,
    ) -> Result<Child, Error> {
        let sigchld = match sigchld {
            Some(stream) => stream,
            None => signal(SignalKind::child()).map_err(|e| Error::Internal(e.into()))?,
        };
        let program = argv.first().expect("clap requires a command");
        let foreground = sys::foreground_terminal();
        sys::become_subreaper();
        let envp = environment(env);
        // Bounded: a guardian forked an instant ago that is killed before the command's process
        // tells it its pid, three times running, is somebody's doing, and reported as such.
        let mut tries = 3;
        let pid = loop {
            let launch =
                sys::Launch { foreground, no_new_privs: env.no_new_privs, guardian: guard.current() };
            match sys::spawn(program, argv, &envp, launch) {
                Err(e) if sys::GuardianGone::is(&e) && tries > 1 => {
                    tries -= 1;
                    tracing::debug!("the guardian died as the command started: another one is forked");
                    guard.fork(argv)?;
                }
                Err(e) => {
                    if foreground {
                        // The child may have taken the terminal before its exec failed.
                        sys::give_terminal_to(nix::unistd::getpgrp());
                    }
                    // Nothing to guard: the command's process is gone (its pid may be reused).
                    guard.dismiss();
                    return Err(spawn_error(program, &e));
                }
                Ok(pid) => break pid,
            }
        };
        if foreground {
            // Also done in the child; doing it here too closes the race with a command that
            // touches the terminal before the child's own call.
            sys::give_terminal_to(pid);
        }
        guard.guarding(pid);
        Ok(Child { pid, foreground, how: How::Spawned(sigchld), exit: None, stopped: None, guard })
    }

    /// Guards `script`, which took the lock with `redlock-run lock`, as a spawned command is
    /// guarded; `let_go` brings `unlock`'s requests.
    ///
    /// A script that does not lead its process group is guarded as itself and its descendants
    /// (`tree`), never its group.
    pub fn adopt(script: Script, mut guard: Guard, let_go: mpsc::UnboundedReceiver<UnlockRequest>) -> Child {
        let pid = script.pid;
        let tree = script.tree.then(|| {
            let mut tree = Tree::new(pid, script.start_time);
            tree.refresh();
            let mut walk = tokio::time::interval(WALK_EVERY);
            walk.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            (tree, walk)
        });
        match &tree {
            Some((tree, _)) => guard.guarding_tree(tree.members()),
            None => guard.guarding_now(pid),
        }
        let adopted = Adopted { script, let_go, asked: Vec::new(), released: false, tree };
        Child {
            pid,
            foreground: false,
            how: How::Adopted(Box::new(adopted)),
            exit: None,
            stopped: None,
            guard,
        }
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Where the answers to the `unlock` requests received go.
    pub fn take_asked(&mut self) -> Vec<UnlockRequest> {
        match &mut self.how {
            How::Adopted(a) => std::mem::take(&mut a.asked),
            How::Spawned(_) => Vec::new(),
        }
    }

    /// The script was let go of (`unlock`): it runs on, and nothing of it is stopped when this
    /// is dropped.
    pub fn keep_running(&mut self) {
        if let How::Adopted(a) = &mut self.how {
            a.released = true;
        }
    }

    /// The command's guardian (see [`Guard`]).
    pub fn guard(&mut self) -> &mut Guard {
        &mut self.guard
    }

    /// Whether the command's group is the terminal's foreground group.
    pub fn owns_terminal(&self) -> bool {
        self.foreground
    }

    /// Sends `sig` to the command's whole process group (a script's tree: `tree`). Harmless
    /// once the group is empty; EPERM means a member may not be signalled by the wrapper
    /// (another user's processes).
    pub fn signal_group(&mut self, sig: Signal) -> Result<(), Errno> {
        if let Some(tree) = self.tree() {
            let result = tree.signal(sig);
            self.tell_guardian();
            return result;
        }
        match killpg(self.pid, sig) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The command's own status, once it has exited and been reaped.
    pub fn exit_code(&self) -> Option<u8> {
        self.exit
    }

    /// The command's process group, judged by the processes that can still run: a zombie
    /// whose parent does not reap it keeps the group alive for `kill`, but not here.
    pub fn group_state(&mut self) -> Group {
        if let Some(tree) = self.tree() {
            return tree.state();
        }
        if killpg(self.pid, None) == Err(Errno::ESRCH) {
            return Group::Empty;
        }
        group_state(self.pid.as_raw()).unwrap_or(Group::Running)
    }

    /// Whether the command is held in uninterruptible sleep with a stop pending — as `sh` is
    /// when Ctrl-Z stopped the child it was vfork()ing, so that no stop is ever reported for the
    /// command itself.
    pub fn stop_pending_in_d(&self) -> bool {
        if !proc_is_ours() {
            return false;
        }
        let dir = format!("/proc/{}", self.pid);
        let in_d = std::fs::read(format!("{dir}/stat"))
            .is_ok_and(|stat| member_state(&stat, self.pid.as_raw()).is_some_and(|(state, _)| state == b'D'));
        // Whether the group is really stopped is then judged member by member.
        in_d && std::fs::read_to_string(format!("{dir}/status")).is_ok_and(|s| stop_pending(&s, true))
    }

    /// Waits until the command itself has exited (its exit status, 128+N for signal N) or was
    /// stopped by job control on the terminal (Ctrl-Z). Reaps every other child that ended
    /// meanwhile (orphans re-parented to the wrapper).
    pub async fn wait(&mut self) -> Event {
        loop {
            self.reap_orphans();
            if let Some(code) = self.exit {
                return Event::Exited(code);
            }
            if let Some(sig) = self.stopped.take() {
                return Event::Stopped(sig);
            }
            match &mut self.how {
                How::Spawned(sigchld) => {
                    sigchld.recv().await;
                }
                How::Adopted(a) => tokio::select! {
                    () = a.script.exited() => {}
                    Some(asked) = a.let_go.recv() => {
                        a.asked.push(asked);
                        return Event::LetGo;
                    }
                    () = walk(&mut a.tree) => self.tell_guardian(),
                },
            }
        }
    }

    /// Reaps every child that has ended: orphans re-parented to the wrapper, and the command
    /// itself, whose status is kept for [`Child::wait`].
    pub fn reap_orphans(&mut self) {
        if let How::Adopted(a) = &self.how {
            // Its exit status is its parent's to know.
            if self.exit.is_none() && a.script.has_exited() {
                self.exit = Some(0);
            }
            return;
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == self.pid => {
                    self.exit = Some(u8::try_from(code).unwrap_or(status::INTERNAL));
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == self.pid => {
                    self.exit = Some(signal_status(sig as i32));
                }
                Ok(WaitStatus::Stopped(pid, sig)) if pid == self.pid && self.foreground => {
                    self.stopped = Some(sig);
                }
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Job control: the command was suspended from the terminal. Suspends the wrapper too, with
    /// the terminal handed back, so the shell regains control; on `fg` the terminal goes back to
    /// the command. Returns once the wrapper runs again; the caller decides whether the command
    /// may continue (the lease may have lapsed meanwhile).
    pub fn suspend_with_command(&self) {
        let own = nix::unistd::getpgrp();
        if self.foreground && sys::terminal_group() == Some(self.pid) {
            sys::give_terminal_to(own);
        }
        // If someone else continues the command meanwhile, the guardian wakes the wrapper.
        self.guard.watch();
        // SIGSTOP rather than SIGTSTP: the kernel discards SIGTSTP in an orphaned process group.
        let _ = nix::sys::signal::raise(Signal::SIGSTOP);
        self.guard.unwatch();
        // Continued in the foreground (`fg`): the shell gave the terminal to the wrapper's group.
        // In the background (`bg`) the terminal stays the shell's.
        if self.foreground && sys::terminal_group() == Some(own) {
            sys::give_terminal_to(self.pid);
        }
    }

    /// Continues the command's group after a suspension; a stop it reported meanwhile is
    /// history.
    pub fn resume_group(&mut self) {
        let _ = self.signal_group(Signal::SIGCONT);
        self.reap_orphans();
        self.stopped = None;
    }

    /// Whether any process of the command's group is still alive.
    pub fn group_alive(&mut self) -> bool {
        match self.tree() {
            Some(tree) => tree.alive(),
            None => killpg(self.pid, None).is_ok(),
        }
    }

    /// The script's tree, when it is guarded as one.
    fn tree(&mut self) -> Option<&mut Tree> {
        match &mut self.how {
            How::Adopted(a) => a.tree.as_mut().map(|(tree, _)| tree),
            How::Spawned(_) => None,
        }
    }

    /// The guardian learns the tree's members, to kill them too if the holder dies.
    fn tell_guardian(&mut self) {
        if let How::Adopted(a) = &self.how
            && let Some((tree, _)) = &a.tree
        {
            self.guard.guarding_tree(tree.members());
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Whatever path leaves the wrapper, nothing of the command outlives it (unless a script
        // let go of its lock).
        let released = matches!(&self.how, How::Adopted(a) if a.released);
        if !released && (self.exit.is_none() || self.group_alive()) {
            let _ = self.signal_group(Signal::SIGKILL);
        }
        self.guard.dismiss();
        if self.foreground && sys::terminal_group() == Some(self.pid) {
            sys::give_terminal_to(nix::unistd::getpgrp());
        }
    }
}

/// The next look at a script's tree, done; never, without one.
async fn walk(tree: &mut Option<(Tree, tokio::time::Interval)>) {
    match tree {
        Some((tree, every)) => {
            every.tick().await;
            tree.refresh();
        }
        None => std::future::pending().await,
    }
}

/// The command's environment ("NAME=value" each): the wrapper's, minus the variables that
/// configure a wrapper and an outer wrapper's lock variables, plus this lock's.
fn environment(env: &LockEnv) -> Vec<OsString> {
    // A script's holder is that script's: `unlock` in a command run under another lock has
    // nothing to release.
    let ours = [vars::KEY, vars::KEYS, vars::TTL_MS, vars::TOKEN, vars::FENCE, vars::FENCES, vars::HOLDER];
    let dropped = |name: &std::ffi::OsStr| WRAPPER_VARIABLES.iter().chain(ours.iter()).any(|v| name == *v);
    let entry = |name: &str, value: &std::ffi::OsStr| {
        let mut e = OsString::from(name);
        e.push("=");
        e.push(value);
        e
    };
    let mut all: Vec<OsString> = std::env::vars_os()
        .filter(|(name, _)| !dropped(name))
        .map(|(name, value)| {
            let mut e = name;
            e.push("=");
            e.push(value);
            e
        })
        .collect();
    all.push(entry(vars::KEY, &env.key));
    all.push(entry(vars::KEYS, &env.keys));
    all.push(entry(vars::TTL_MS, env.ttl_ms.to_string().as_ref()));
    if let (Some(token), Some(fence), Some(fences)) = (&env.token, &env.fence, &env.fences) {
        all.push(entry(vars::TOKEN, token.as_ref()));
        all.push(entry(vars::FENCE, fence.as_ref()));
        all.push(entry(vars::FENCES, fences.as_ref()));
    }
    all
}

/// Whether /proc shows this process's own PID namespace: in a PID namespace whose /proc was not
/// mounted anew (`unshare -p -f` without `--mount-proc`, some sandboxes), the numbers there name
/// other processes, and nothing read there may be taken for the command's. Such a /proc counts
/// as none.
fn proc_is_ours() -> bool {
    static OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OURS.get_or_init(|| {
        let own = std::fs::read_link("/proc/self").ok().and_then(|p| p.to_str()?.parse::<u32>().ok());
        own == Some(std::process::id())
    })
}

/// The state of process group `pgid` from /proc: `None` when /proc cannot be read (or is not
/// this PID namespace's).
fn group_state(pgid: i32) -> Option<Group> {
    if !proc_is_ours() {
        return None;
    }
    // (pid, state, parent) of every member.
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // The process may have gone meanwhile; then it is no member.
        let Ok(stat) = std::fs::read(entry.path().join("stat")) else {
            continue;
        };
        if let Some((state, ppid)) = member_state(&stat, pgid) {
            members.push((pid, state, ppid));
        }
    }
    let mut group = Group::Empty;
    for &(pid, state, _) in &members {
        match state {
            // A zombie, or dead.
            b'Z' | b'X' | b'x' => {}
            b'T' | b't' => group = Group::Stopped,
            // In uninterruptible sleep with a stop pending, it stops before it runs code of its
            // own: `sh` waiting in vfork() (all signals blocked) for a child that SIGTSTP
            // stopped before its exec stays in D until that child goes on.
            b'D' if {
                let vfork_parent =
                    members.iter().any(|&(_, s, ppid)| ppid == pid && matches!(s, b'T' | b't'));
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|status| stop_pending(&status, vfork_parent))
            } =>
            {
                group = Group::Stopped
            }
            _ => return Some(Group::Running),
        }
    }
    Some(group)
}

/// Whether the process whose /proc/PID/status is `status` will stop before it runs code of its
/// own: SIGSTOP pending, or SIGTSTP pending and neither caught nor ignored — nor blocked,
/// unless `blocked_ok` (a vfork() parent blocks everything until its child goes on).
fn stop_pending(status: &str, blocked_ok: bool) -> bool {
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let bit = |sig: Signal| 1u64 << (sig as i32 - 1);
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    let blocked = if blocked_ok { 0 } else { mask("SigBlk:") };
    let tstp_acts = (blocked | mask("SigIgn:") | mask("SigCgt:")) & bit(Signal::SIGTSTP) == 0;
    pending & bit(Signal::SIGSTOP) != 0 || (pending & bit(Signal::SIGTSTP) != 0 && tstp_acts)
}

/// The state letter and parent of a process whose /proc/PID/stat is `stat`, if it belongs to
/// group `pgid`.
fn member_state(stat: &[u8], pgid: i32) -> Option<(u8, i32)> {
    // The fields after the command name (which may hold spaces and parentheses) start after
    // the last ')': state, ppid, pgrp, …
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.bytes().next()?;
    let ppid: i32 = fields.next()?.parse().ok()?;
    let pgrp: i32 = fields.next()?.parse().ok()?;
    (pgrp == pgid).then_some((state, ppid))
}

fn spawn_error(program: &OsString, e: &io::Error) -> Error {
    let code = match e.kind() {
        io::ErrorKind::NotFound => status::NOT_FOUND,
        _ => status::NOT_EXECUTABLE,
    };
    Error::spawn(program, e, code)
}

#[cfg(test)]
mod tests {
    use super::member_state;

    #[test]
    fn member_state_reads_the_state_and_group_after_the_command_name() {
        // The command name may hold spaces and parentheses; the fields start after the last ')'.
        let stat = b"4242 (a) (b c)) Z 1 777 777 0 -1 4194560";
        assert_eq!(member_state(stat, 777), Some((b'Z', 1)));
        assert_eq!(member_state(stat, 778), None);
        assert_eq!(member_state(b"17 (sleep) T 16 17 17 0", 17), Some((b'T', 16)));
        assert_eq!(member_state(b"garbage", 17), None);
    }

    #[test]
    fn a_stop_pending_is_read_from_the_status_masks() {
        use super::stop_pending;
        let status = |pnd: &str, shd: &str, blk: &str, cgt: &str| {
            format!(
                "State:\tD (disk sleep)\nSigPnd:\t{pnd}\nShdPnd:\t{shd}\nSigBlk:\t{blk}\n\
                 SigIgn:\t0000000000000000\nSigCgt:\t{cgt}\n"
            )
        };
        let none = "0000000000000000";
        // SIGSTOP is bit 18, SIGTSTP bit 19.
        assert!(stop_pending(&status(none, "0000000000040000", none, none), false));
        assert!(stop_pending(&status(none, "0000000000080000", none, none), false));
        assert!(!stop_pending(&status(none, "0000000000080000", none, "0000000000080000"), false), "caught");
        let all_blocked = "fffffffffffbfeff";
        assert!(!stop_pending(&status(none, "0000000000090000", all_blocked, none), false), "blocked");
        // A vfork() parent blocks everything; it stops as soon as its child goes on.
        assert!(stop_pending(&status(none, "0000000000090000", all_blocked, none), true));
        assert!(!stop_pending(&status(none, "0000000000004000", none, none), true), "SIGTERM is no stop");
    }

    /// A guardian that dies after the last look at it, before the command's process tells it
    /// its pid, is replaced: the command runs, guarded, instead of failing with "Broken pipe".
    #[tokio::test]
    async fn a_guardian_that_dies_as_the_command_starts_is_replaced() {
        use super::{Child, Event, Guard, LockEnv, sys};
        let dead = sys::Guardian::fork(None).expect("fork a guardian");
        let _ = nix::sys::signal::kill(dead.pid(), nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(dead.pid(), None);
        let env = LockEnv {
            key: "k".into(),
            keys: "k".into(),
            token: None,
            fence: None,
            fences: None,
            ttl_ms: 1000,
            no_new_privs: false,
        };
        let argv = ["sh".into(), "-c".into(), "exit 7".into()];
        let mut child = Child::spawn(&argv, &env, Guard::with(dead), None)
            .expect("the command runs, with another guardian");
        let replacement = child.guard.guardian_mut().expect("guarded");
        assert!(matches!(replacement.ready(), sys::Ready::Yes), "the replacement guardian runs");
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await;
        assert!(matches!(ended, Ok(Event::Exited(7))), "the command ran to its end");
    }
}
