//! The run's guardian, from its start to its reaping: the one owner of `sys::Guardian`, which
//! run, acquire, child and supervise call. It starts the guardian (exec'd early, or forked
//! right before the command), replaces one that is killed, and keeps it told what it needs if
//! the wrapper cannot act: the lease deadline (the guardian kills the command's group by then)
//! and what a release takes (a ticket: after the wrapper's death the guardian, once the group
//! is certainly dead, execs a releaser that gives the lock back at once — [`release_after_death`]).

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{LogFormat, Output, Verbosity};
use crate::exit::{Error, status};
use crate::lock::settings::{DEFAULT_SOURCE, RedisConfig, Tls, Topology};
use crate::lock::{Conn, GUARDIAN_KILL_AHEAD, Kind, Lock, Released, show_key};
use crate::sys;

/// How long the command waits for its exec'd guardian to say that it runs (started as the run
/// started or began to wait, it usually has long before) before a forked one takes its place.
const READY_WITHIN: Duration = Duration::from_secs(2);

/// A process of a script's tree: its pid and start time (/proc's clock ticks).
type Member = (nix::unistd::Pid, u64);

pub struct Guard {
    guardian: Option<sys::Guardian>,
    /// The release's ticket, a memory file each guardian gets a copy of; empty until
    /// [`Guard::ticket`] writes it.
    ticket: Option<std::fs::File>,
    /// What every guardian is told, a replacement too.
    acquired: Option<i64>,
    kill_by: Option<i64>,
    /// The lease deadline `kill_by` was worked out from.
    deadline: Option<Instant>,
    command: Option<nix::unistd::Pid>,
    /// A script guarded as itself and its descendants (not its group): the script and the
    /// members last told, each with its start time.
    tree: Option<(Member, Vec<Member>)>,
    no_lock: bool,
    /// Why the last exec of a guardian failed, said once one is forked instead.
    exec_failed: Option<std::io::Error>,
}

impl Guard {
    /// A guard for a run, with an empty ticket; no guardian runs yet.
    pub fn new() -> Guard {
        let ticket = sys::ticket_file()
            .map_err(|e| {
                tracing::debug!(
                    "no ticket for the guardian ({e}): a killed wrapper's lock will expire by itself"
                )
            })
            .ok();
        Guard {
            guardian: None,
            ticket: ticket.map(std::fs::File::from),
            acquired: None,
            kill_by: None,
            deadline: None,
            command: None,
            tree: None,
            no_lock: false,
            exec_failed: None,
        }
    }

    /// Writes what releasing the lock takes, before the lock is asked for: a guardian started
    /// earlier reads it only once the wrapper died (an empty one: nothing was asked of Redis).
    pub fn ticket(&mut self, ticket: &Ticket) {
        use std::io::Write;
        let Some(file) = &self.ticket else { return };
        if let Err(e) = (&*file).write_all(&ticket.encode()) {
            tracing::debug!(
                "no ticket for the guardian ({e}): a killed wrapper's lock will expire by itself"
            );
        }
    }

    /// The guard of what may be a run, its guardian exec'd at once where that is cheap
    /// ([`sys::CHEAP_EXEC`]): before the command line is parsed, so that the guardian's start
    /// overlaps all of the wrapper's own (BENCHMARKS.md). Not a run after all (`--help`, a usage
    /// error): dropped, it dismisses the guardian.
    pub fn before_parsing() -> Option<Guard> {
        if !sys::CHEAP_EXEC {
            return None;
        }
        let mut guard = Guard::new();
        guard.start();
        Some(guard)
    }

    /// Execs the guardian now, if none runs: it starts on another CPU while the run goes on.
    /// Failing is said only with `-vv`, and only if the command is about to start: one is forked
    /// then, or the run says why not.
    pub fn start(&mut self) {
        if self.guardian.is_none() {
            match sys::Guardian::exec(self.ticket.as_ref().map(|t| t.as_fd())) {
                Ok(guardian) => self.adopt(guardian),
                Err(e) => self.exec_failed = Some(e),
            }
        }
    }

    /// [`Guard::start`] where an exec costs the wrapper less than the fork right before the
    /// command that it saves (a static build, [`sys::CHEAP_EXEC`]): the guardian's start then
    /// takes no time of the run's, if it is made before anything else of the run.
    pub fn start_early(&mut self) {
        if sys::CHEAP_EXEC {
            self.start();
        }
    }

    /// Makes sure a guardian runs before the command `argv` starts: the exec'd one once it says
    /// it runs, else — its exec failed, someone killed it, or there was none — one forked now.
    /// None at all (out of processes or descriptors): the command is not run (126), since
    /// nothing would kill what it starts if the wrapper were killed.
    pub async fn ready(&mut self, argv: &[OsString]) -> Result<(), Error> {
        if let Some(guardian) = &mut self.guardian {
            let deadline = Instant::now() + READY_WITHIN;
            loop {
                match guardian.ready() {
                    sys::Ready::Yes => return Ok(()),
                    sys::Ready::Gone => break,
                    sys::Ready::NotYet => {}
                }
                match tokio::time::timeout_at(deadline, guardian.news()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break,
                    Err(_) => {
                        tracing::debug!("the exec'd guardian did not say it runs in time");
                        break;
                    }
                }
            }
        }
        self.fork(argv)
    }

    /// Forks a guardian in place of the current one (see [`Guard::ready`]).
    pub fn fork(&mut self, argv: &[OsString]) -> Result<(), Error> {
        if let Some(e) = self.exec_failed.take() {
            tracing::debug!("the guardian cannot be exec'd: {e}");
        }
        self.guardian = None;
        let guardian = sys::Guardian::fork(self.ticket.as_ref().map(|t| t.as_fd())).map_err(|e| {
            let program = argv.first().map_or(std::ffi::OsStr::new(""), |p| p.as_os_str());
            let reason = format!("cannot start the guardian of its process group: {e}");
            Error::spawn(program, reason, status::NOT_EXECUTABLE)
        })?;
        self.adopt(guardian);
        Ok(())
    }

    /// The guardian the command's process tells its pid before its exec.
    pub fn current(&self) -> Option<&sys::Guardian> {
        self.guardian.as_ref()
    }

    /// The command `pid` started, its guardian told by the command's own process.
    pub fn guarding(&mut self, pid: nix::unistd::Pid) {
        self.command = Some(pid);
    }

    /// A process the wrapper did not start, `pid`, leading its group: the guardian is told at
    /// once (a script's holder guards the script).
    pub fn guarding_now(&mut self, pid: nix::unistd::Pid) {
        self.command = Some(pid);
        if let Some(g) = &self.guardian {
            g.guard(pid);
        }
    }

    /// A script that does not lead its process group, and its live descendants as last seen
    /// (`members`: the script first, at the first call; each with its start time): the
    /// guardian kills them, never a group. Told only the members it does not know yet.
    pub fn guarding_tree(&mut self, members: &[Member]) {
        let Some((root, known)) = &mut self.tree else {
            let Some(&root) = members.first() else { return };
            self.command = Some(root.0);
            if let Some(g) = &self.guardian {
                g.guard_tree(root.0, root.1);
                members[1..].iter().for_each(|&(pid, start)| g.known(pid, start));
            }
            self.tree = Some((root, members.to_vec()));
            return;
        };
        if let Some(g) = &self.guardian {
            for &(pid, start) in members.iter().filter(|m| **m != *root && !known.contains(m)) {
                g.known(pid, start);
            }
        }
        known.clear();
        known.extend_from_slice(members);
    }

    /// Resolves once the current guardian is gone (someone killed it); never without one.
    pub fn gone(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
        match &self.guardian {
            Some(guardian) => Box::pin(guardian.gone()),
            None => Box::pin(std::future::pending()),
        }
    }

    /// The guardian died while the command runs (someone killed it): another one is forked and
    /// told all the first one knew, so that a wrapper killed later still takes the whole group
    /// with it and gives the lock back.
    pub fn replace(&mut self) {
        match sys::Guardian::fork(self.ticket.as_ref().map(|t| t.as_fd())) {
            Ok(guardian) => {
                tracing::warn!("the guardian process is gone (killed?); another one guards the command");
                self.adopt(guardian);
            }
            Err(e) => {
                tracing::warn!(
                    "the guardian process is gone (killed?), and no other can be started ({e}): if the \
                     wrapper is killed now, background jobs of the command may outlive it"
                );
                self.guardian = None;
            }
        }
    }

    /// The wrapper is about to stop itself with its stopped command, and runs again.
    pub fn watch(&self) {
        if let Some(g) = &self.guardian {
            g.watch();
        }
    }

    pub fn unwatch(&self) {
        if let Some(g) = &self.guardian {
            g.unwatch();
        }
    }

    /// The lock was taken at `at`.
    pub fn acquired(&mut self, at: Instant) {
        let at = monotonic(at);
        self.acquired = Some(at);
        if let Some(g) = &self.guardian {
            g.acquired(at);
        }
    }

    /// The lease's deadline is now `deadline` (`None`: the command may outlive the lease,
    /// `--on-lost ignore`): the guardian kills the command's group [`GUARDIAN_KILL_AHEAD`]
    /// before it unless told a later one first.
    pub fn lease_ends(&mut self, deadline: Option<Instant>) {
        if deadline == self.deadline {
            return;
        }
        self.deadline = deadline;
        let at = deadline.map(|d| monotonic(d.checked_sub(GUARDIAN_KILL_AHEAD).unwrap_or(d)));
        self.kill_by = at;
        if let Some(g) = &self.guardian {
            g.kill_by(at);
        }
    }

    /// The run holds no lock (`--fail-open`): nothing to release if the wrapper dies.
    pub fn no_lock(&mut self) {
        self.no_lock = true;
        self.ticket = None;
        if let Some(g) = &self.guardian {
            g.no_lock();
        }
    }

    /// The command's group is gone: the guardian leaves without doing anything.
    pub fn dismiss(&mut self) {
        if let Some(g) = self.guardian.take() {
            g.dismiss();
        }
    }

    /// [`Guard::dismiss`] once what this returns is dropped; the guard has no guardian from now on.
    pub fn dismiss_later(&mut self) -> Dismissal {
        Dismissal(self.guardian.take())
    }

    fn adopt(&mut self, guardian: sys::Guardian) {
        match (&self.tree, self.command) {
            (Some((root, known)), _) => {
                guardian.guard_tree(root.0, root.1);
                known.iter().filter(|m| *m != root).for_each(|&(pid, start)| guardian.known(pid, start));
            }
            (None, Some(pid)) => guardian.guard(pid),
            (None, None) => {}
        }
        if let Some(at) = self.acquired {
            guardian.acquired(at);
        }
        if self.kill_by.is_some() {
            guardian.kill_by(self.kill_by);
        }
        if self.no_lock {
            guardian.no_lock();
        }
        self.guardian = Some(guardian);
    }

    /// A guard of `guardian`, without a ticket, in tests.
    #[cfg(test)]
    pub fn with(guardian: sys::Guardian) -> Guard {
        Guard {
            guardian: Some(guardian),
            ticket: None,
            acquired: None,
            kill_by: None,
            deadline: None,
            command: None,
            tree: None,
            no_lock: false,
            exec_failed: None,
        }
    }

    /// The guardian itself, in tests.
    #[cfg(test)]
    pub fn guardian_mut(&mut self) -> Option<&mut sys::Guardian> {
        self.guardian.as_mut()
    }
}

/// A guardian to dismiss: dropping this dismisses it (see [`Guard::dismiss_later`]).
#[expect(dead_code, reason = "held, not read: dropping it dismisses the guardian")]
pub struct Dismissal(Option<sys::Guardian>);

/// Reaps the guardians of no more use before the wrapper exits (see `sys::reap_guardians`).
pub fn reap() {
    sys::reap_guardians();
}

/// `at` as nanoseconds of `CLOCK_MONOTONIC`, the clock `Instant` reads and the guardian shares.
fn monotonic(at: Instant) -> i64 {
    let now = Instant::now();
    let ns = sys::monotonic_ns();
    match at.checked_duration_since(now) {
        Some(ahead) => ns.saturating_add(ahead.as_nanos() as i64),
        None => ns.saturating_sub(now.duration_since(at).as_nanos() as i64),
    }
}

/// What releasing the lock takes, for a process other than the wrapper: where Redis is and how
/// to reach it, the keys, the kind, the value, and how the run releases.
#[derive(Debug)]
pub struct Ticket {
    pub redis: RedisConfig,
    pub keys: Vec<Vec<u8>>,
    pub ttl: Duration,
    pub kind: Kind,
    pub value: String,
    /// How long a release hands the lock to the next waiter for.
    pub grant: Duration,
    pub min_hold: Duration,
    pub output: Output,
}

impl Ticket {
    /// Length-prefixed fields, in the order of the struct; read only by this same program.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        let r = &self.redis;
        w.bytes(r.url.as_bytes());
        w.bytes(r.url_source.as_bytes());
        match &r.topology {
            Topology::Single => w.u64(0),
            Topology::Sentinel { sentinels, master } => {
                w.u64(1);
                w.list(sentinels.iter().map(|s| s.as_bytes()));
                w.bytes(master.as_bytes());
            }
            Topology::Cluster { seeds } => {
                w.u64(2);
                w.list(seeds.iter().map(|s| s.as_bytes()));
            }
            Topology::Quorum { urls } => {
                w.u64(3);
                w.list(urls.iter().map(|s| s.as_bytes()));
            }
        }
        w.opt(r.password.as_deref().map(str::as_bytes));
        w.opt(r.sentinel_password.as_deref().map(str::as_bytes));
        w.opt(r.tls.ca.as_deref());
        w.opt(r.tls.client.as_ref().map(|(cert, _)| cert.as_slice()));
        w.opt(r.tls.client.as_ref().map(|(_, key)| key.as_slice()));
        w.u64(r.tls.insecure.into());
        w.duration(r.connect_timeout);
        w.duration(r.command_timeout);
        w.list(self.keys.iter().map(Vec::as_slice));
        w.duration(self.ttl);
        w.u64(match self.kind {
            Kind::Exclusive => 0,
            Kind::Shared => 1,
            Kind::Limit(n) => 1 + u64::from(n),
        });
        w.bytes(self.value.as_bytes());
        w.duration(self.grant);
        w.duration(self.min_hold);
        w.u64(match self.output.verbosity {
            Verbosity::Quiet => 0,
            Verbosity::Normal => 1,
            Verbosity::Info => 2,
            Verbosity::Debug => 3,
        });
        w.u64((self.output.format == LogFormat::Json).into());
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<Ticket> {
        let mut r = Reader(bytes);
        let url = r.string()?;
        let url_source = r.string()?;
        let topology = match r.u64()? {
            0 => Topology::Single,
            1 => Topology::Sentinel { sentinels: r.strings()?, master: r.string()? },
            2 => Topology::Cluster { seeds: r.strings()? },
            3 => Topology::Quorum { urls: r.strings()? },
            _ => return None,
        };
        let password = r.opt()?.map(String::from_utf8).transpose().ok()?;
        let sentinel_password = r.opt()?.map(String::from_utf8).transpose().ok()?;
        let ca = r.opt()?;
        let client = match (r.opt()?, r.opt()?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            _ => None,
        };
        let tls = Tls { ca, client, insecure: r.u64()? == 1 };
        let redis = RedisConfig {
            url,
            // Only named in messages: one of the names a URL comes from.
            url_source: ["--redis-url", "REDLOCK_REDIS_URL", "REDIS_URL"]
                .into_iter()
                .find(|s| *s == url_source)
                .unwrap_or(DEFAULT_SOURCE),
            topology,
            password,
            sentinel_password,
            tls,
            connect_timeout: r.duration()?,
            command_timeout: r.duration()?,
        };
        let keys = r.list()?;
        let ttl = r.duration()?;
        let kind = match r.u64()? {
            0 => Kind::Exclusive,
            1 => Kind::Shared,
            n => Kind::Limit(u32::try_from(n - 1).ok()?),
        };
        let value = r.string()?;
        let grant = r.duration()?;
        let min_hold = r.duration()?;
        let verbosity = match r.u64()? {
            0 => Verbosity::Quiet,
            1 => Verbosity::Normal,
            2 => Verbosity::Info,
            _ => Verbosity::Debug,
        };
        let format = if r.u64()? == 1 { LogFormat::Json } else { LogFormat::Text };
        r.0.is_empty().then_some(Ticket {
            redis,
            keys,
            ttl,
            kind,
            value,
            grant,
            min_hold,
            output: Output { verbosity, format },
        })
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn opt(&mut self, b: Option<&[u8]>) {
        self.u64(b.is_some().into());
        if let Some(b) = b {
            self.bytes(b);
        }
    }
    fn list<'a>(&mut self, items: impl ExactSizeIterator<Item = &'a [u8]>) {
        self.u64(items.len() as u64);
        for item in items {
            self.bytes(item);
        }
    }
    fn duration(&mut self, d: Duration) {
        self.u64(d.as_nanos().min(u128::from(u64::MAX)) as u64);
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u64(&mut self) -> Option<u64> {
        let (n, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_le_bytes(*n))
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = usize::try_from(self.u64()?).ok()?;
        let (b, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(b.to_vec())
    }
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?).ok()
    }
    fn opt(&mut self) -> Option<Option<Vec<u8>>> {
        match self.u64()? {
            0 => Some(None),
            _ => Some(Some(self.bytes()?)),
        }
    }
    fn list(&mut self) -> Option<Vec<Vec<u8>>> {
        let n = self.u64()?;
        (0..n).map(|_| self.bytes()).collect()
    }
    fn strings(&mut self) -> Option<Vec<String>> {
        self.list()?.into_iter().map(|s| String::from_utf8(s).ok()).collect()
    }
    fn duration(&mut self) -> Option<Duration> {
        Some(Duration::from_nanos(self.u64()?))
    }
}

/// The releaser's whole run: exec'd by a guardian whose wrapper died, it gives the lock back —
/// only once the guardian has found the command's group certainly dead — and leaves the queue.
pub fn release_after_death(job: sys::Releaser) -> u8 {
    if job.ticket.is_empty() {
        // Written before the first request to Redis: the wrapper died before it asked for anything.
        return status::SUCCESS;
    }
    let Some(ticket) = Ticket::decode(&job.ticket) else {
        crate::logging::say(&format!(
            "redlock-run: the wrapper (pid {}) died; its lock expires by itself (unreadable ticket)\n",
            job.wrapper
        ));
        return status::INTERNAL;
    };
    let _log = crate::logging::init(ticket.output);
    // Its lines are about the dead wrapper's run: its keys, and its holder as the value says.
    crate::logging::about_keys(&ticket.keys);
    if let Some(holder) = crate::lock::Holder::parse(ticket.value.as_bytes()) {
        crate::logging::about_holder(&holder);
    }
    let names = ticket.keys.iter().map(|k| show_key(k)).collect::<Vec<_>>().join(", ");
    let wrapper = job.wrapper;
    let why = match job.verdict {
        sys::Verdict::Dead | sys::Verdict::NothingRan => None,
        sys::Verdict::Unsignalable => {
            Some("a process of its command's group cannot be signalled (another user's?)")
        }
        sys::Verdict::Stuck => Some("a process of its command's group was still alive 1s after SIGKILL"),
        sys::Verdict::NoProc => Some("/proc cannot show whether its command's processes are dead"),
    };
    if let Some(why) = why {
        tracing::error!(
            "the wrapper (pid {wrapper}) died and {why}: the lock on {names} was NOT released and expires by \
             itself within --ttl ({})",
            humantime::format_duration(ticket.ttl)
        );
        return status::INTERNAL;
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return status::INTERNAL;
    };
    runtime.block_on(async {
        let nodes = match ticket.redis.nodes().iter().map(Conn::new).collect::<Result<Vec<_>, _>>() {
            Ok(nodes) => nodes,
            Err(e) => return tracing::error!("the wrapper (pid {wrapper}) died; {e}"),
        };
        let mut lock = match Lock::new(nodes, &ticket.keys, ticket.ttl, None, ticket.kind, None) {
            Ok(lock) => lock.adopt(ticket.value.clone()),
            Err(f) => return tracing::error!("the wrapper (pid {wrapper}) died; {f}"),
        };
        lock.hand_over_for(ticket.grant);
        let now = Instant::now();
        let held = job.acquired.map(|at| Duration::from_nanos(sys::monotonic_ns().saturating_sub(at).max(0) as u64));
        let keep = held.map_or(Duration::ZERO, |h| ticket.min_hold.saturating_sub(h));
        let acquired = held.and_then(|h| now.checked_sub(h)).unwrap_or(now);
        if job.verdict == sys::Verdict::NothingRan {
            // Out of the queue first, so that no release hands the lock to this run. (A run
            // whose command ran is in no queue, and its release, the full one, hands the lock
            // on; leaving would delete the lock first, and the release find it gone.)
            let _ = tokio::time::timeout(Duration::from_secs(1), lock.leave_queue()).await;
            // A waiter's death: its place is given back, and a lock handed over to it meanwhile.
            let released = tokio::time::timeout(Duration::from_secs(3), lock.release(keep, false)).await;
            let handed = matches!(released, Ok(Ok((Released::Deleted | Released::Kept, _))));
            return tracing::warn!(
                "the wrapper (pid {wrapper}) died before its command started; its place in the queue{} given back",
                if handed { " and the lock handed to it were" } else { " was" }
            );
        }
        tracing::warn!(
            "the wrapper (pid {wrapper}) died; its command's processes were killed and are all gone, so the \
             lock on {names} is released now"
        );
        crate::release::release(&mut lock, keep, false, acquired, None).await;
    });
    status::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_reads_back_as_written() {
        let ticket = Ticket {
            redis: RedisConfig {
                url: "rediss://u:p@h:1/2".into(),
                url_source: "REDLOCK_REDIS_URL",
                topology: Topology::Sentinel { sentinels: vec!["a".into(), "b".into()], master: "m".into() },
                password: Some("pw".into()),
                sentinel_password: None,
                tls: Tls {
                    ca: Some(b"ca".to_vec()),
                    client: Some((b"c".to_vec(), b"k".to_vec())),
                    insecure: true,
                },
                connect_timeout: Duration::from_millis(1500),
                command_timeout: Duration::from_secs(2),
            },
            keys: vec![b"k\xff".to_vec(), b"".to_vec()],
            ttl: Duration::from_secs(30),
            kind: Kind::Limit(7),
            value: "token host 1 2".into(),
            grant: Duration::from_secs(3),
            min_hold: Duration::from_secs(60),
            output: Output { verbosity: Verbosity::Info, format: LogFormat::Json },
        };
        let bytes = ticket.encode();
        let back = Ticket::decode(&bytes).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{ticket:?}"));
        assert_eq!(back.redis.tls.ca, ticket.redis.tls.ca);
        assert_eq!(back.redis.tls.client, ticket.redis.tls.client);
        for cut in 0..bytes.len() {
            assert!(Ticket::decode(&bytes[..cut]).is_none(), "a ticket cut at {cut} is refused");
        }
    }
}
