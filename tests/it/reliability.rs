//! Reliability under injected faults, in a soak: wrappers run in loops against one lock (five
//! of them, exclusive runs), or against a `--limit 3` key and a key of `--shared` and exclusive
//! runs (the kinds phase), while a fault injector disturbs Redis, the network (through
//! [`FaultProxy`]) and the wrappers; or (the Sentinel phase) four loops find the master through
//! secured Sentinels while they fail it over again and again, sometimes losing the lock's last
//! write. The commands report to an [`Oracle`] that plays a fenced resource per key.
//! RELIABILITY.md describes the soak and its figures.
//!
//! `SOAK_SECS` (default 60) sets the soak's length (each phase gets a third of it, and two
//! phases run at once), `SOAK_SEED` replays a schedule, `SOAK_VERBOSE` (any value) runs the
//! wrappers with `-vv --log-format=json`: their logs, kept when a check fails, then say what
//! each did and when.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::fault::{FaultProxy, Mode, Rng};
use crate::support::oracle::{
    self, Kind, ORACLE_HOLD_MS, ORACLE_KIND, ORACLE_SOCKET, Occupant, Oracle, OracleReport,
};
use crate::support::sentinel::{MASTER_NAME, SentinelSet, Setup, Watch};
use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);

/// Not a test: the command the soak runs under the wrapper is this test binary, re-executed
/// with only this test selected and `RELIABILITY_ORACLE_SOCKET` set (see
/// [`oracle::oracle_client`]). Without that variable it does nothing.
#[test]
fn oracle_client() {
    oracle::oracle_client();
}

/// A hand-driven client of the oracle: enters with a fence, kind and resource, and writes.
struct Holder {
    conn: UnixStream,
    replies: BufReader<UnixStream>,
}

impl Holder {
    fn enter(oracle: &Oracle, fence: u64, kind: &str, resource: &str) -> (Holder, bool) {
        let conn = UnixStream::connect(oracle.path()).expect("connect to the oracle");
        let replies = BufReader::new(conn.try_clone().expect("clone"));
        let mut h = Holder { conn, replies };
        let ok = h.say(&format!("ENTER {fence} 1 1 1 1000 {kind} {resource}"));
        (h, ok)
    }

    fn write(&mut self, fence: u64) -> bool {
        self.say(&format!("WRITE {fence}"))
    }

    /// Sends a line; true for `OK`, false for `STALE`.
    fn say(&mut self, line: &str) -> bool {
        self.conn.write_all(format!("{line}\n").as_bytes()).expect("send");
        let mut answer = String::new();
        self.replies.read_line(&mut answer).expect("answer");
        answer.trim() == "OK"
    }
}

/// The oracle's model of each kind (tests/support/oracle.rs), driven by hand: it flags a key
/// held beyond its kind, refuses the stale holder's writes and not the legitimate ones', and
/// shows a fence that went backwards.
#[test]
fn oracle_flags_holders_beyond_their_kind_and_refuses_stale_writes() {
    let dir = tmp();
    let oracle = Oracle::start(dir.path());
    let overlaps_on = |key: &str| -> Vec<oracle::Overlap> {
        oracle.report().overlaps.into_iter().filter(|o| o.resource == key).collect()
    };

    // A semaphore of 2: two holders write whatever their fences' order; a third displaces the
    // lowest fence, whose writes are refused from then on, and is recorded with the one that
    // displaced it.
    let (mut b, ok_b) = Holder::enter(&oracle, 11, "limit=2", "sem");
    let (mut a, ok_a) = Holder::enter(&oracle, 10, "limit=2", "sem");
    assert!(ok_a && ok_b && a.write(10) && b.write(11), "two holders of --limit 2 both write");
    assert!(overlaps_on("sem").is_empty());
    let (mut c, ok_c) = Holder::enter(&oracle, 12, "limit=2", "sem");
    assert!(ok_c && b.write(11) && c.write(12), "the fresher holders write");
    assert!(!a.write(10), "the displaced holder is refused");
    let sem = overlaps_on("sem");
    assert_eq!(sem.len(), 1, "{sem:?}");
    assert_eq!((sem[0].fences.as_slice(), sem[0].rejected), (&[10, 12][..], 1), "{sem:?}");
    assert_eq!(oracle.report().resources["sem"].peak, 3);
    // A fourth with a fence lower than all (a fence gone backwards) is refused at its entry,
    // and has no overlap of its own: its refusals are outside any.
    let (mut d, ok_d) = Holder::enter(&oracle, 5, "limit=2", "sem");
    assert!(!ok_d && !d.write(5) && b.write(11) && c.write(12));
    assert_eq!(overlaps_on("sem").len(), 1);

    // Readers and a writer: readers write together whatever their fences' order; a writer
    // beside them is an overlap for each, and it refuses them; a reader or writer with a
    // fence below the writer's is refused.
    let (mut r1, ok1) = Holder::enter(&oracle, 21, "shared", "rw");
    let (mut r2, ok2) = Holder::enter(&oracle, 20, "shared", "rw");
    assert!(ok1 && ok2 && r1.write(21) && r2.write(20), "readers hold together");
    assert!(overlaps_on("rw").is_empty());
    let (mut w, ok_w) = Holder::enter(&oracle, 22, "exclusive", "rw");
    assert!(ok_w && w.write(22));
    assert!(!r1.write(21) && !r2.write(20), "readers older than the writer are refused");
    assert_eq!(overlaps_on("rw").len(), 2);
    let (mut late, ok_late) = Holder::enter(&oracle, 19, "shared", "rw");
    assert!(!ok_late && !late.write(19), "a reader older than the writer is refused");
    let w_overlap = overlaps_on("rw").into_iter().find(|o| o.fences[0] == 22).expect("the writer's overlap");
    assert_eq!(w_overlap.fences, [22, 19], "the writer's overlap shows the lower fence that came after it");
    drop((r1, r2, late, w));
    let (mut r3, ok3) = Holder::enter(&oracle, 24, "shared", "rw");
    assert!(ok3 && r3.write(24), "a reader after the writer left");
    let (mut old_writer, ok_old) = Holder::enter(&oracle, 23, "exclusive", "rw");
    assert!(!ok_old && !old_writer.write(23), "a writer below the last reader's fence is refused");

    // Kinds that do not go together on one key, and a fence used twice, are counted.
    let (_mixed, _) = Holder::enter(&oracle, 30, "exclusive", "sem");
    let (_again, _) = Holder::enter(&oracle, 12, "limit=2", "sem");
    let report = oracle.report();
    assert_eq!(report.resources["sem"].kind_conflicts, 1);
    assert_eq!(report.fence_reused, 1);
    drop((a, b, c, d, r3, old_writer));
}

// ---------------------------------------------------------------------------------------------
// The soak

const KEY: &str = "lock:soak";
const TTL: Duration = Duration::from_secs(2);
const RENEW_EVERY: Duration = Duration::from_millis(400);
const KILL_GRACE: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(3);
const WRAPPERS: usize = 5;
/// The keys of the kinds phase: a semaphore, and readers with writers.
const LIMIT_KEY: &str = "lock:soak:limit";
const PERMITS: usize = 3;
const RW_KEY: &str = "lock:soak:rw";
/// Scheduling allowance for a loaded two-core machine, on top of the bounds the product
/// promises.
const SLACK: Duration = Duration::from_millis(500);

/// The lease options a phase's wrappers run with.
#[derive(Clone, Copy, Debug)]
struct Timing {
    ttl: Duration,
    renew_every: Duration,
    kill_grace: Duration,
}

/// The phases through the fault proxy.
const PROXIED: Timing = Timing { ttl: TTL, renew_every: RENEW_EVERY, kill_grace: KILL_GRACE };

/// The Sentinel phase: a longer TTL. A forced failover is clean only if the promoted replica's
/// copy of the key (renewed at most `renew_every` before the promotion) outlives the time until
/// the wrappers hear of the switch, during which their renewals reach the old master only
/// (README § Sentinel: an overlap is possible if a failover takes "longer than about `--ttl`
/// minus `--renew-every`"). Here every Sentinel named the promoted replica 0.1–1.1 s after it
/// answered as a master (they see it in its INFO, asked every second during a failover): with
/// 3 s − 400 ms that leaves 1.5 s of margin on a loaded machine, against 0.5 s with 2 s.
const FAILOVER_TIMING: Timing =
    Timing { ttl: Duration::from_secs(3), renew_every: RENEW_EVERY, kill_grace: KILL_GRACE };

/// How many soak phases run at once. The phases use little CPU (the whole soak about 9 s of it
/// in 68 s: its wrappers mostly wait) and two at once keep their margins (RELIABILITY.md
/// § Running it); three at once on a two-core machine were never measured, so a third waits.
const PHASES_AT_ONCE: usize = 2;
static RUNNING: Mutex<usize> = Mutex::new(0);
static TURN: Condvar = Condvar::new();

/// A phase's place among the [`PHASES_AT_ONCE`]; given back when dropped, however the test ends.
struct Turn;

impl Turn {
    /// Waits for a place, bounded: a phase ahead ends within its budget and five minutes.
    fn take() -> Turn {
        let deadline = Instant::now() + phase_budget() + Duration::from_secs(300);
        let mut running = lock(&RUNNING);
        while *running >= PHASES_AT_ONCE {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no soak phase ended within {:?}",
                phase_budget() + Duration::from_secs(300)
            );
            running = TURN.wait_timeout(running, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        *running += 1;
        Turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        *lock(&RUNNING) -= 1;
        TURN.notify_one();
    }
}

/// Each phase injects every one of its faults once, then goes on until it has had a third of
/// `SOAK_SECS` after 45 s for setting up, draining and the first rounds.
fn phase_budget() -> Duration {
    let total: u64 = std::env::var("SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    Duration::from_secs(total.saturating_sub(45)) / 3
}

/// What a wrapper loop runs: one key, and the kind of lock each run takes. Kinds that do not
/// go together are refused on one key (65), so each key gets runs of one family.
#[derive(Clone, Copy, Debug)]
enum Runs {
    /// Exclusive runs (neither `--shared` nor `--limit`).
    Exclusive(&'static str),
    /// `--limit N` runs.
    Limit(&'static str, usize),
    /// `--shared` runs, one in three of them exclusive instead.
    SharedOrExclusive(&'static str),
}

impl Runs {
    fn key(self) -> &'static str {
        match self {
            Runs::Exclusive(key) | Runs::Limit(key, _) | Runs::SharedOrExclusive(key) => key,
        }
    }

    fn next(self, rng: &mut Rng) -> Kind {
        match self {
            Runs::Exclusive(_) => Kind::Exclusive,
            Runs::Limit(_, n) => Kind::Limit(n),
            Runs::SharedOrExclusive(_) if rng.chance(33) => Kind::Exclusive,
            Runs::SharedOrExclusive(_) => Kind::Shared,
        }
    }
}

/// A soak phase: its faults, injected in turn, and the wrapper loops that run meanwhile.
struct Phase {
    name: &'static str,
    /// What the wrappers reach Redis through, and the faults act on.
    deployment: Deployment,
    timing: Timing,
    faults: &'static [Disruption],
    /// How many of `faults` are injected in any case, however short the budget.
    at_least: usize,
    loops: &'static [Runs],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deployment {
    /// One Redis behind a [`FaultProxy`].
    Proxied,
    /// A master with two replicas, and three Sentinels with a password ([`Sentinels`]).
    Sentinels,
}

impl Phase {
    /// The lock keys its wrappers use, each once.
    fn keys(&self) -> Vec<&'static str> {
        let mut keys: Vec<&'static str> = Vec::new();
        for runs in self.loops {
            if !keys.contains(&runs.key()) {
                keys.push(runs.key());
            }
        }
        keys
    }
}

/// A fault the soak injects: Redis, the network, the lock key or a wrapper disturbed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Disruption {
    RedisPauseShort,
    RedisPauseLong,
    ClientKill,
    LatencyLow,
    LatencyHigh,
    BlackholeShort,
    BlackholeLong,
    ReplyLossShort,
    ReplyLossLong,
    ConnectionReset,
    WrapperPauseShort,
    RedisRestart,
    KeyDeleted,
    KeyForceReleased,
    KeyExpired,
    WrapperPauseLong,
    /// Sentinel failovers: forced (`SENTINEL FAILOVER`), or agreed on while the master is
    /// frozen — neither loses a write; or forced just after the lock's copy on every replica
    /// was made older than the master's (deleted, or expired), which loses it.
    FailoverForced,
    FailoverFrozen,
    FailoverLossyDel,
    FailoverLossyExpire,
}

impl Disruption {
    fn name(self) -> &'static str {
        match self {
            Disruption::RedisPauseShort => "redis SIGSTOP < ttl",
            Disruption::RedisPauseLong => "redis SIGSTOP > ttl",
            Disruption::ClientKill => "CLIENT KILL",
            Disruption::LatencyLow => "latency < timeout",
            Disruption::LatencyHigh => "latency > timeout",
            Disruption::BlackholeShort => "blackhole < ttl",
            Disruption::BlackholeLong => "blackhole > ttl",
            Disruption::ReplyLossShort => "reply loss < ttl",
            Disruption::ReplyLossLong => "reply loss > ttl",
            Disruption::ConnectionReset => "connection reset",
            Disruption::WrapperPauseShort => "wrapper SIGSTOP < lease",
            Disruption::RedisRestart => "redis restart, empty",
            Disruption::KeyDeleted => "DEL lock",
            Disruption::KeyForceReleased => "release --force",
            Disruption::KeyExpired => "PEXPIRE lock 1ms",
            Disruption::WrapperPauseLong => "wrapper SIGSTOP > ttl",
            Disruption::FailoverForced => "failover: SENTINEL FAILOVER",
            Disruption::FailoverFrozen => "failover: master SIGSTOP > down-after",
            Disruption::FailoverLossyDel => "failover, lossy: DEL on the replicas",
            Disruption::FailoverLossyExpire => "failover, lossy: PEXPIRE 1 on the replicas",
        }
    }

    /// Faults after which two holders may legitimately overlap: the lock's state in Redis is
    /// lost, or its holder cannot act in time.
    fn loses_data(self) -> bool {
        matches!(
            self,
            Disruption::RedisRestart
                | Disruption::KeyDeleted
                | Disruption::KeyForceReleased
                | Disruption::KeyExpired
                | Disruption::WrapperPauseLong
                | Disruption::FailoverLossyDel
                | Disruption::FailoverLossyExpire
        )
    }
}

const SAFE_FAULTS: [Disruption; 11] = [
    Disruption::RedisPauseShort,
    Disruption::LatencyLow,
    Disruption::ClientKill,
    Disruption::BlackholeShort,
    Disruption::ReplyLossShort,
    Disruption::ConnectionReset,
    Disruption::WrapperPauseShort,
    Disruption::RedisPauseLong,
    Disruption::LatencyHigh,
    Disruption::BlackholeLong,
    Disruption::ReplyLossLong,
];

const DATA_LOSS_FAULTS: [Disruption; 5] = [
    Disruption::RedisRestart,
    Disruption::KeyDeleted,
    Disruption::WrapperPauseLong,
    Disruption::KeyExpired,
    Disruption::KeyForceReleased,
];

/// The kinds phase: faults that must stop every holder, hide replies or lose wake-ups, then
/// faults that lose the state of all the holders of a key, or the lease of one of them.
const KIND_FAULTS: [Disruption; 5] = [
    Disruption::RedisPauseLong,
    Disruption::ReplyLossShort,
    Disruption::RedisRestart,
    Disruption::KeyForceReleased,
    Disruption::WrapperPauseLong,
];

/// The Sentinel phase: a forced failover, one by agreement, a lossy one, in turn; the lossy
/// ones alternate between the two ways of losing the lock's last write. A default run has the
/// first three (each failover takes about 11 s, most of it the Sentinels' wait before they
/// make the demoted master a replica).
const FAILOVERS: [Disruption; 6] = [
    Disruption::FailoverForced,
    Disruption::FailoverFrozen,
    Disruption::FailoverLossyDel,
    Disruption::FailoverForced,
    Disruption::FailoverFrozen,
    Disruption::FailoverLossyExpire,
];

const ONE_KEY: [Runs; WRAPPERS] = [Runs::Exclusive(KEY); WRAPPERS];

/// Four loops on one key for the Sentinel phase: fewer than five, as the failovers come far
/// apart and each wrapper's discovery asks the Sentinels.
const SENTINEL_LOOPS: [Runs; 4] = [Runs::Exclusive(KEY); 4];

const KIND_LOOPS: [Runs; 8] = [
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::Limit(LIMIT_KEY, PERMITS),
    Runs::SharedOrExclusive(RW_KEY),
    Runs::SharedOrExclusive(RW_KEY),
    Runs::SharedOrExclusive(RW_KEY),
    Runs::SharedOrExclusive(RW_KEY),
];

#[derive(Debug)]
struct Injected {
    fault: Disruption,
    start: Instant,
    /// When requests the fault held back may last have reached Redis.
    lifted: Instant,
    /// The wrapper paused, and when it was continued.
    paused: Option<(i32, Instant)>,
    /// A command was present when the fault began.
    hit_holder: bool,
    /// The wrapper of a command present with more work ahead than the fault lasts, which the
    /// fault must therefore have stopped (exit 125).
    victim: Option<i32>,
    /// What the test saw of a Sentinel failover.
    failover: Option<Failover>,
}

impl Injected {
    /// Whether the fault lost the lock's state, so that holders may overlap after it: a fault
    /// that loses data, and for a failover, one whose promoted replica lacked the lock.
    fn lost_lock(&self) -> bool {
        self.fault.loses_data() && self.failover.as_ref().is_none_or(Failover::lost_lock)
    }
}

/// What the test saw of one Sentinel failover.
#[derive(Debug, Clone)]
struct Failover {
    /// The master before it.
    from: u16,
    /// The lock key held a value on that master as the failover began.
    had_lock: bool,
    /// The replica promoted, when the test saw it answer ROLE as a master, and whether the
    /// lock key held a value there at that moment (before any wrapper could reach it).
    promoted: Option<(u16, Instant, bool)>,
    /// When every Sentinel named the promoted replica.
    switched: Option<Instant>,
    /// When the demoted master was a replica of the new one again, in sync, and every Sentinel
    /// named the new one (waited for before the next failover).
    whole: Option<Instant>,
    /// The Sentinels had not made a node a replica of the new master within [`WHOLE_LIMIT`]
    /// (seen once in a long soak, when a failover came a second after the previous one's
    /// demoted master was converted), so the test did it as an operator would: `REPLICAOF`.
    nudged: Vec<u16>,
}

impl Failover {
    /// A lock held on the master was missing on the replica promoted: its last write was lost.
    fn lost_lock(&self) -> bool {
        self.had_lock && matches!(self.promoted, Some((_, _, false)))
    }
}

struct RunRecord {
    pid: i32,
    spawned: Instant,
    exited: Instant,
    /// The wrapper's exit status, or how it failed to give one.
    status: Result<i32, String>,
    /// Processes of the command's group still alive 500 ms after the wrapper exited (it must
    /// not exit before they are gone; the allowance is for the kernel's teardown).
    orphans: Vec<i32>,
}

/// How one wrapper loop's wrappers reach Redis: their options (`--redis-url`, `--sentinel`, …)
/// and environment.
#[derive(Clone, Debug, Default)]
struct Reach {
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
}

impl Reach {
    fn url(url: &str) -> Reach {
        Reach { args: vec!["--redis-url".to_owned(), url.to_owned()], env: Vec::new() }
    }

    /// A wrapper with a clean environment that reaches Redis this way.
    fn wrapper(&self) -> Command {
        let mut cmd = wrapper();
        cmd.args(&self.args).envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

/// What the wrapper loops and the fault injector share.
struct Shared {
    dir: PathBuf,
    /// For loop `n`, `reach[n % reach.len()]`.
    reach: Vec<Reach>,
    timing: Timing,
    /// The phase's lock keys.
    keys: Vec<&'static str>,
    oracle: PathBuf,
    stop: AtomicBool,
    /// The injector wants a command with a long hold (to stop it): the next runs get one.
    want_long_hold: AtomicBool,
    /// Wrappers running now. A pid is removed in the same critical section that reaps it, so a
    /// signal sent while holding this lock never reaches a recycled pid.
    wrappers: Mutex<HashSet<i32>>,
    runs: Mutex<Vec<RunRecord>>,
}

/// Stops the loops and continues any paused wrapper, however the test ends.
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
        for &pid in lock(&self.0.wrappers).iter() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }
}

/// Runs as a wrapper loop: one wrapper after the other until told to stop, each taking the
/// lock `runs` says and running the oracle client for a random hold (mostly short, sometimes
/// longer than the TTL) with a background job in its group that must not outlive it.
fn wrapper_loop(n: usize, runs: Runs, shared: &Shared, mut rng: Rng) {
    let log = File::options()
        .create(true)
        .append(true)
        .open(shared.dir.join(format!("wrapper-{n}.log")))
        .expect("wrapper log");
    let exe = std::env::current_exe().expect("test binary");
    let script = "echo $$ > \"$PGFILE\"; sleep 30 & exec \"$0\" --exact reliability::oracle_client --test-threads=1 -q";
    let mut run_no = 0;
    while !shared.stop.load(Ordering::SeqCst) {
        run_no += 1;
        let hold = if shared.want_long_hold.load(Ordering::SeqCst) {
            rng.millis(3500, 5000)
        } else if rng.chance(20) {
            rng.millis(1000, 3000)
        } else {
            rng.millis(20, 300)
        };
        let kind = runs.next(&mut rng);
        let pgfile = shared.dir.join(format!("pg-{n}-{run_no}"));
        let t = shared.timing;
        let mut cmd = shared.reach[n % shared.reach.len()].wrapper();
        cmd.args(["-k", runs.key()])
            .args(kind.flags())
            .args([
                "--ttl",
                &ms(t.ttl),
                "--renew-every",
                &ms(t.renew_every),
                "--kill-grace",
                &ms(t.kill_grace),
            ])
            .args(
                std::env::var_os("SOAK_VERBOSE").map(|_| ["-vv", "--log-format=json"]).into_iter().flatten(),
            )
            .args(["--wait", &ms(WAIT), "--", "sh", "-c", script])
            .arg(&exe)
            .env(ORACLE_SOCKET, &shared.oracle)
            .env(ORACLE_KIND, kind.name())
            .env(ORACLE_HOLD_MS, hold.as_millis().to_string())
            .env("PGFILE", &pgfile)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.try_clone().expect("log handle"));
        let spawned = Instant::now();
        let child = {
            let mut wrappers = lock(&shared.wrappers);
            let child = cmd.spawn().expect("spawn the wrapper");
            wrappers.insert(child.id() as i32);
            child
        };
        let pid = child.id() as i32;
        let status = reap_within(child, shared, LIMIT);
        let exited = Instant::now();
        let pgid: Option<i32> = std::fs::read_to_string(&pgfile).ok().and_then(|s| s.trim().parse().ok());
        let orphans = match pgid {
            Some(g) => {
                wait_until(Duration::from_millis(500), || group_members(g).is_empty());
                group_members(g)
            }
            None => Vec::new(),
        };
        let unavailable = status == Ok(69);
        lock(&shared.runs).push(RunRecord { pid, spawned, exited, status, orphans });
        if unavailable {
            // Redis is out of reach for a while; do not spin.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Waits for a wrapper, bounded; reaping and forgetting its pid happen under one lock.
fn reap_within(mut child: Child, shared: &Shared, limit: Duration) -> Result<i32, String> {
    let pid = child.id() as i32;
    let deadline = Instant::now() + limit;
    loop {
        {
            let mut wrappers = lock(&shared.wrappers);
            let reaped: Option<ExitStatus> = child.try_wait().expect("try_wait");
            if let Some(status) = reaped {
                wrappers.remove(&pid);
                return status.code().ok_or_else(|| format!("died of a signal: {status:?}"));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                wrappers.remove(&pid);
                return Err(format!("still running after {limit:?}; killed"));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// A holder's value seen at a lock key by the monitor.
struct Sighting {
    first: Instant,
    last: Instant,
    /// The wrapper that stored it (the value is `<token> <host> <pid> <start>`).
    pid: Option<i32>,
}

#[derive(Default)]
struct MonitorReport {
    samples: u64,
    sightings: HashMap<Vec<u8>, Sighting>,
    /// Values seen without an expiry, or with more than the TTL left.
    bad_ttls: Vec<String>,
}

/// For each lock key, what the monitor samples: an exclusive holder's value and PTTL, or each
/// live holder of a set (`--shared`, `--limit`) with the time left of its lease, both with the
/// key's PTTL.
const SAMPLE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = {}
for _, k in ipairs(KEYS) do
  local kind = redis.call('TYPE', k)['ok']
  if kind == 'string' then
    local pttl = redis.call('PTTL', k)
    table.insert(seen, {redis.call('GET', k), pttl, pttl})
  elseif kind == 'zset' then
    local pttl = redis.call('PTTL', k)
    local live = redis.call('ZRANGEBYSCORE', k, '(' .. now, '+inf', 'WITHSCORES')
    for i = 1, #live, 2 do
      table.insert(seen, {live[i], tonumber(live[i + 1]) - now, pttl})
    end
  end
end
return seen
"#;

/// Samples the lock keys (the values of their holders and the times left, atomically)
/// straight from Redis every 20 ms: from the master on `port`, which a failover changes.
fn monitor(port: &AtomicU16, keys: &[&str], ttl: Duration, stop: &AtomicBool) -> MonitorReport {
    let script = redis::Script::new(SAMPLE);
    let mut report = MonitorReport::default();
    let mut conn: Option<redis::Connection> = None;
    let mut connected_to = 0;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        let port = port.load(Ordering::SeqCst);
        if port != connected_to {
            conn = None;
        }
        if conn.is_none() {
            connected_to = port;
            conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                .ok();
            if let Some(c) = &conn {
                let _ = c.set_read_timeout(Some(Duration::from_millis(300)));
                let _ = c.set_write_timeout(Some(Duration::from_millis(300)));
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        let sample: redis::RedisResult<Vec<(Vec<u8>, i64, i64)>> = invocation.invoke(c);
        let Ok(holders) = sample else {
            conn = None;
            continue;
        };
        let now = Instant::now();
        report.samples += 1;
        let ttl = ttl.as_millis() as i64;
        for (value, left, pttl) in holders {
            if !(0..=ttl).contains(&left) || !(0..=ttl).contains(&pttl) {
                report
                    .bad_ttls
                    .push(format!("{} with {left} ms left and PTTL {pttl}", String::from_utf8_lossy(&value)));
            }
            let pid = std::str::from_utf8(&value).ok().and_then(|v| v.split(' ').nth(2)?.parse().ok());
            report.sightings.entry(value).or_insert(Sighting { first: now, last: now, pid }).last = now;
        }
    }
    report
}

/// How long a fault lasts (and any latency it adds), and — for a fault that outlasts the
/// lease or loses the lock — by when it must have stopped a command present at its start.
struct Plan {
    length: Duration,
    latency: Duration,
    stops_within: Option<Duration>,
}

impl Disruption {
    fn plan(self, rng: &mut Rng) -> Plan {
        let (length, latency) = match self {
            Disruption::RedisPauseShort => (rng.millis(200, 800), Duration::ZERO),
            Disruption::BlackholeShort | Disruption::ReplyLossShort => (rng.millis(200, 700), Duration::ZERO),
            Disruption::RedisPauseLong | Disruption::BlackholeLong | Disruption::ReplyLossLong => {
                (TTL + rng.millis(300, 1200), Duration::ZERO)
            }
            // The wrapper's request timeout here is a third of the 1278 ms renewal slack: 426 ms.
            Disruption::LatencyLow => (rng.millis(1500, 2500), rng.millis(20, 150)),
            Disruption::LatencyHigh => (rng.millis(1500, 2500), rng.millis(500, 800)),
            Disruption::WrapperPauseShort => (rng.millis(50, 300), Duration::ZERO),
            Disruption::WrapperPauseLong => (TTL + rng.millis(800, 1200), Duration::ZERO),
            Disruption::ClientKill
            | Disruption::ConnectionReset
            | Disruption::RedisRestart
            | Disruption::KeyDeleted
            | Disruption::KeyExpired
            | Disruption::KeyForceReleased => (Duration::ZERO, Duration::ZERO),
            Disruption::FailoverForced
            | Disruption::FailoverFrozen
            | Disruption::FailoverLossyDel
            | Disruption::FailoverLossyExpire => panic!("{} is injected by `Sentinels::inject`", self.name()),
        };
        let stops_within = match self {
            // Stopped by the lease deadline, at most a TTL after the last renewal.
            Disruption::RedisPauseLong | Disruption::BlackholeLong | Disruption::ReplyLossLong => Some(TTL),
            // Stopped as soon as its wrapper runs again.
            Disruption::WrapperPauseLong => Some(length),
            // Stopped at the next renewal.
            f if f.loses_data() => Some(RENEW_EVERY + SLACK),
            _ => None,
        };
        Plan { length, latency, stops_within }
    }
}

/// Waits (bounded) for a command to be present — with `work` ahead of it, if given (the next
/// runs then get a long hold) — and returns the one that entered last.
fn await_holder(shared: &Shared, oracle: &Oracle, work: Option<Duration>) -> Option<Occupant> {
    let ahead = work.unwrap_or_default();
    let mut holder = None;
    shared.want_long_hold.store(work.is_some(), Ordering::SeqCst);
    wait_until(Duration::from_secs(if work.is_some() { 8 } else { 2 }), || {
        let now = Instant::now();
        holder = oracle.occupants().into_iter().rev().find(|h| h.done_by > now + ahead);
        holder.is_some()
    });
    shared.want_long_hold.store(false, Ordering::SeqCst);
    holder
}

/// Waits (bounded) for a command to be present — for a fault that must stop it, one with
/// enough work ahead that it would still be running then — and injects the fault.
fn inject(
    fault: Disruption,
    redis: &mut RedisServer,
    proxy: &FaultProxy,
    shared: &Shared,
    oracle: &Oracle,
    rng: &mut Rng,
) -> Injected {
    let plan = fault.plan(rng);
    let holder = await_holder(shared, oracle, plan.stops_within.map(|d| d + SLACK));
    let start = Instant::now();
    let mut paused = None;
    let mut revived = false;
    match fault {
        Disruption::RedisPauseShort | Disruption::RedisPauseLong => {
            redis.freeze();
            std::thread::sleep(plan.length);
            redis.thaw();
        }
        Disruption::ClientKill => {
            redis.cmd::<i64>(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
            redis.cmd::<i64>(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"]);
        }
        Disruption::LatencyLow
        | Disruption::LatencyHigh
        | Disruption::BlackholeShort
        | Disruption::BlackholeLong => {
            proxy.set(match fault {
                Disruption::BlackholeShort | Disruption::BlackholeLong => Mode::Blackhole,
                _ => Mode::Latency(plan.latency),
            });
            std::thread::sleep(plan.length);
            proxy.set(Mode::Pass);
        }
        Disruption::ReplyLossShort | Disruption::ReplyLossLong => {
            proxy.set(Mode::DropReplies);
            std::thread::sleep(plan.length);
            proxy.set(Mode::Pass);
        }
        Disruption::ConnectionReset => proxy.reset_all(),
        Disruption::WrapperPauseShort | Disruption::WrapperPauseLong => {
            // The holder's wrapper (the command's parent), if it is still one of ours.
            let stopped = holder.map(|h| h.ppid).filter(|&pid| {
                let wrappers = lock(&shared.wrappers);
                wrappers.contains(&pid) && kill(Pid::from_raw(pid), Signal::SIGSTOP).is_ok()
            });
            std::thread::sleep(plan.length);
            if let Some(pid) = stopped {
                let wrappers = lock(&shared.wrappers);
                if wrappers.contains(&pid) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
                }
                paused = Some((pid, Instant::now()));
            }
        }
        Disruption::RedisRestart => redis.restart_empty(),
        Disruption::KeyDeleted => {
            for key in &shared.keys {
                redis.cmd::<i64>(&[b"DEL", key.as_bytes()]);
            }
        }
        Disruption::KeyExpired => {
            let values = |redis: &RedisServer| -> Vec<Option<Vec<u8>>> {
                shared.keys.iter().map(|key| redis.cmd(&[b"GET", key.as_bytes()])).collect()
            };
            let before = values(redis);
            for key in &shared.keys {
                redis.cmd::<i64>(&[b"PEXPIRE", key.as_bytes(), b"1"]);
            }
            // A renewal that reaches Redis within the key's last millisecond or two finds it
            // still there and extends it: then nothing was lost, and no one must stop.
            std::thread::sleep(Duration::from_millis(10));
            revived = before.iter().any(Option::is_some) && values(redis) == before;
        }
        Disruption::KeyForceReleased => {
            for key in &shared.keys {
                let r = run(
                    Command::new(BIN).args(["release", "--key", key, "--force", "--redis-url", &redis.url()]),
                    LIMIT,
                );
                assert!(r.code == 0 || r.code == 1, "release --force: {} {}", r.code, r.stderr);
            }
        }
        Disruption::FailoverForced
        | Disruption::FailoverFrozen
        | Disruption::FailoverLossyDel
        | Disruption::FailoverLossyExpire => unreachable!("planned above"),
    }
    // A data-loss fault takes effect when it is complete (a restart can take a while on a
    // loaded machine): its holder must be stopped only if its work outlasts the next renewal
    // after that; one whose work ended first was not run without the lock.
    let end = Instant::now();
    let must_stop = |h: &Occupant| match plan.stops_within {
        _ if revived => false,
        Some(within) if fault.loses_data() => h.done_by > end + within,
        Some(_) => true,
        None => false,
    };
    Injected {
        fault,
        start,
        lifted: Instant::now() + plan.latency,
        paused,
        hit_holder: holder.is_some(),
        victim: holder.filter(must_stop).map(|h| h.ppid),
        failover: None,
    }
}

/// What a soak phase's faults act on, and how its wrappers reach Redis.
trait Target {
    /// How each wrapper loop reaches Redis (loop `n` takes the `n % len`th).
    fn reach(&self) -> Vec<Reach>;
    /// The port of the master now, which the monitor samples (a failover changes it).
    fn watched(&self) -> Arc<AtomicU16>;
    /// Before the next fault: waits (bounded) until the target can take it, noting what it
    /// waited for in the faults so far.
    fn ready(&mut self, _injected: &mut [Injected]) {}
    /// The pause before the next fault, after `last`.
    fn gap(&self, last: Option<&Injected>, rng: &mut Rng) -> Duration;
    fn inject(&mut self, fault: Disruption, shared: &Shared, oracle: &Oracle, rng: &mut Rng) -> Injected;
    /// Whether `key` exists on the master now.
    fn exists(&self, key: &str) -> bool;
    /// What a failing check shows of it.
    fn log(&self) -> String;
}

/// One Redis, which the wrappers reach through a [`FaultProxy`].
struct Proxied {
    redis: RedisServer,
    proxy: FaultProxy,
    watched: Arc<AtomicU16>,
}

impl Proxied {
    fn start() -> Self {
        let redis = RedisServer::start();
        let proxy = FaultProxy::start(redis.port);
        let watched = Arc::new(AtomicU16::new(redis.port));
        Proxied { redis, proxy, watched }
    }
}

impl Target for Proxied {
    fn reach(&self) -> Vec<Reach> {
        vec![Reach::url(&self.proxy.url())]
    }

    fn watched(&self) -> Arc<AtomicU16> {
        Arc::clone(&self.watched)
    }

    fn gap(&self, last: Option<&Injected>, rng: &mut Rng) -> Duration {
        // Data-loss faults get a longer pause after them, so that any overlap they cause (a
        // waiter retries at the holder's PTTL, up to 2 s later) starts before the next fault.
        if last.is_some_and(|f| f.fault.loses_data()) { rng.millis(2200, 2600) } else { rng.millis(400, 800) }
    }

    fn inject(&mut self, fault: Disruption, shared: &Shared, oracle: &Oracle, rng: &mut Rng) -> Injected {
        inject(fault, &mut self.redis, &self.proxy, shared, oracle, rng)
    }

    fn exists(&self, key: &str) -> bool {
        self.redis.exists(key.as_bytes())
    }

    fn log(&self) -> String {
        format!("redis log:\n{}", self.redis.log().lines().rev().take(30).collect::<Vec<_>>().join("\n"))
    }
}

/// The Sentinels' password (`requirepass`; they authenticate to each other with it).
const SENTINEL_PASSWORD: &str = "sentinel-secret";
/// The wrappers' ACL user on the data nodes, with a password of its own.
const LOCKER: &str = "locker";
const LOCKER_PASSWORD: &str = "locker-secret";
/// README § Least-privilege ACL, for keys starting with `lock:` (no ROLE: the wrapper skips its
/// check that the node is a master).
const LOCKER_ACL: &str = "resetchannels ~lock:* ~{lock:* &lock:* &{lock:* -@all +evalsha +script|load \
     +set +get +type +pttl +pexpire +incr +del +exists +publish +time +zrange +zscore +zadd +zrem +zrank \
     +zcount +zrangebyscore +hset +hget +hdel +subscribe +scan +mget";
/// How long a failover may take to be seen (promoted, then named by every Sentinel), and the
/// set to be whole again after it.
const FAILOVER_LIMIT: Duration = Duration::from_secs(20);
const WHOLE_LIMIT: Duration = Duration::from_secs(25);

/// A master, two replicas and three Sentinels on loopback (quorum 2, down after 1 s), which
/// the wrappers reach through the Sentinels. The Sentinels require a password; the wrappers log
/// in to the data nodes as [`LOCKER`], created on each node (ACLs are not replicated).
struct Sentinels {
    set: SentinelSet,
    /// The password files.
    dir: tempfile::TempDir,
    watched: Arc<AtomicU16>,
}

impl Sentinels {
    fn start() -> Self {
        let watch = Watch {
            quorum: 2,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_secs(3),
        };
        let setup = Setup { password: Some(SENTINEL_PASSWORD.to_owned()), extra: String::new() };
        let set = SentinelSet::start_setup(3, 2, watch, &setup);
        for sentinel in &set.sentinels {
            // Each Sentinel learns what the nodes say of themselves every second instead of
            // every 10 s: the demoted master is made a replica sooner, and `whole` hears so.
            sentinel.set_info_period(Duration::from_secs(1));
        }
        for node in set.nodes() {
            // Every node syncs a new replica at once, instead of 5 s later: a promoted replica
            // resyncs the others, and the demoted master, quickly.
            node.cmd::<()>(&[b"CONFIG", b"SET", b"repl-diskless-sync-delay", b"0"]);
            let password = format!(">{LOCKER_PASSWORD}");
            let mut acl: Vec<&[u8]> = vec![b"ACL", b"SETUSER", LOCKER.as_bytes(), b"on", password.as_bytes()];
            acl.extend(LOCKER_ACL.split_whitespace().map(str::as_bytes));
            node.cmd::<()>(&acl);
        }
        let dir = tmp();
        std::fs::write(dir.path().join("locker"), format!("{LOCKER_PASSWORD}\n")).expect("password file");
        std::fs::write(dir.path().join("sentinel"), format!("{SENTINEL_PASSWORD}\n")).expect("password file");
        let master = set.agreed_master().expect("the Sentinels name the master");
        Sentinels { set, dir, watched: Arc::new(AtomicU16::new(master)) }
    }

    /// Every Sentinel names `master`, every other data node replicates it, its link up, and
    /// every Sentinel has heard each of them say so. (A Sentinel that has not polled the
    /// demoted master since it was made a replica still takes it for a master that must be
    /// made a replica: if the next failover promoted that node, it would demote it again
    /// at once, and the set would name a master that is a replica.)
    fn whole(&self, master: u16) -> bool {
        let replicas: Vec<u16> = self.set.nodes().map(|n| n.port).filter(|&p| p != master).collect();
        self.set.agreed_master() == Some(master)
            && replicas.iter().all(|&port| {
                let info: String = probe(port, redis::cmd("INFO").arg("replication")).unwrap_or_default();
                info.contains("role:slave")
                    && info.contains(&format!("master_port:{master}\r"))
                    && info.contains("master_link_status:up")
            })
            && self.set.sentinels.iter().all(|s| s.sees_replicas_of(master, &replicas))
    }

    /// Asks a Sentinel to fail over now, retrying (bounded) while one is still in progress.
    fn force_failover(&self, first: usize) -> Result<(), String> {
        let mut last = String::new();
        let n = self.set.sentinels.len();
        let done = wait_until(Duration::from_secs(5), || {
            (0..n).any(|i| match self.set.sentinels[(first + i) % n].force_failover() {
                Ok(()) => true,
                Err(e) => {
                    last = e;
                    false
                }
            })
        });
        if done { Ok(()) } else { Err(last) }
    }
}

/// A query to the node on `port` with short timeouts, as the default user; `None` when it does
/// not answer (frozen, restarting) or answers an error.
fn probe<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Option<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut c = client.get_connection_with_timeout(Duration::from_millis(200)).ok()?;
    c.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    cmd.query(&mut c).ok()
}

impl Target for Sentinels {
    /// One way of giving the credentials per loop: the master's password from
    /// `--password-file` or `REDLOCK_PASSWORD`; the Sentinels' in each `--sentinel` URL, from
    /// `--sentinel-password-file`, from `REDLOCK_SENTINEL_PASSWORD`, or in the first URL and
    /// from the file for the others. Each loop names the Sentinels starting with another one.
    fn reach(&self) -> Vec<Reach> {
        let file = |name: &str| self.dir.path().join(name).display().to_string();
        let n = self.set.sentinels.len();
        (0..SENTINEL_LOOPS.len())
            .map(|i| {
                let mut args = vec!["--redis-url".to_owned(), format!("redis://{LOCKER}@placeholder:6379")];
                let mut env = Vec::new();
                if i % 2 == 0 {
                    args.extend(["--password-file".to_owned(), file("locker")]);
                } else {
                    env.push(("REDLOCK_PASSWORD", LOCKER_PASSWORD.to_owned()));
                }
                for j in 0..n {
                    let addr = self.set.sentinels[(i + j) % n].addr();
                    args.push("--sentinel".to_owned());
                    args.push(match i {
                        0 => format!("redis://:{SENTINEL_PASSWORD}@{addr}"),
                        3 if j == 0 => format!("redis://:{SENTINEL_PASSWORD}@{addr}"),
                        2 => format!("redis://{addr}"),
                        _ => addr,
                    });
                }
                match i {
                    0 => {}
                    2 => env.push(("REDLOCK_SENTINEL_PASSWORD", SENTINEL_PASSWORD.to_owned())),
                    _ => args.extend(["--sentinel-password-file".to_owned(), file("sentinel")]),
                }
                args.extend(["--sentinel-master".to_owned(), MASTER_NAME.to_owned()]);
                Reach { args, env }
            })
            .collect()
    }

    fn watched(&self) -> Arc<AtomicU16> {
        Arc::clone(&self.watched)
    }

    /// After a failover: the demoted master is a replica of the new one again (the Sentinels
    /// reconfigure it about 10 s after the switch), in sync, and every Sentinel names the new
    /// one — so that the next failover starts from a whole set.
    fn ready(&mut self, injected: &mut [Injected]) {
        let Some(f) = injected.last_mut().and_then(|i| i.failover.as_mut()) else { return };
        let Some((master, ..)) = f.promoted else { return };
        if wait_until(WHOLE_LIMIT, || self.whole(master)) {
            f.whole = Some(Instant::now());
            return;
        }
        // What the Sentinels left out is not what this soak tests (the wrappers' side of a
        // failover): put it right, and wait again.
        for node in self.set.nodes().filter(|n| n.port != master) {
            let info: String = probe(node.port, redis::cmd("INFO").arg("replication")).unwrap_or_default();
            if !info.contains(&format!("master_port:{master}\r")) {
                let _: Option<String> =
                    probe(node.port, redis::cmd("REPLICAOF").arg("127.0.0.1").arg(master.to_string()));
                f.nudged.push(node.port);
            }
        }
        if wait_until(WHOLE_LIMIT, || self.whole(master)) {
            f.whole = Some(Instant::now());
        }
    }

    /// None: the wait in `ready` (about 10 s) is the pause between failovers, and before the
    /// first `inject` waits for a holder anyway.
    fn gap(&self, _last: Option<&Injected>, _rng: &mut Rng) -> Duration {
        Duration::ZERO
    }

    /// Waits (bounded) for a holder with work beyond the switch, fails over, and watches: the
    /// replica promoted (the lock key read there at once, before any wrapper can reach it), then
    /// every Sentinel naming it. A holder whose lock the promoted replica lacked, and whose work
    /// went on past the switch, must be stopped (125).
    fn inject(&mut self, fault: Disruption, shared: &Shared, oracle: &Oracle, rng: &mut Rng) -> Injected {
        let holder = await_holder(shared, oracle, Some(Duration::from_secs(2)));
        let from = self.watched.load(Ordering::SeqCst);
        let replicas: Vec<u16> = self.set.nodes().map(|n| n.port).filter(|&p| p != from).collect();
        let has_lock = |port: u16| {
            shared.keys.iter().any(|k| probe::<i64>(port, redis::cmd("EXISTS").arg(*k)) == Some(1))
        };
        let had_lock = has_lock(from);
        let via = rng.next_u64() as usize % self.set.sentinels.len();
        let start = Instant::now();
        let mut failed_to_start = None;
        match fault {
            Disruption::FailoverForced => failed_to_start = self.force_failover(via).err(),
            Disruption::FailoverFrozen => {
                self.set.node(from).expect("the master is a node of the set").freeze()
            }
            Disruption::FailoverLossyDel | Disruption::FailoverLossyExpire => {
                // The lock's copy on every replica made older than the master's; the fence
                // counter is left alone.
                for replica in self.set.nodes().filter(|n| n.port != from) {
                    replica.cmd::<()>(&[b"CONFIG", b"SET", b"replica-read-only", b"no"]);
                    for key in &shared.keys {
                        match fault {
                            Disruption::FailoverLossyDel => replica.cmd::<i64>(&[b"DEL", key.as_bytes()]),
                            _ => replica.cmd::<i64>(&[b"PEXPIRE", key.as_bytes(), b"1"]),
                        };
                    }
                    replica.cmd::<()>(&[b"CONFIG", b"SET", b"replica-read-only", b"yes"]);
                }
                failed_to_start = self.force_failover(via).err();
            }
            other => panic!("{} is not a failover", other.name()),
        }
        let is_master = |port: u16| {
            probe::<Vec<redis::Value>>(port, &redis::cmd("ROLE")).is_some_and(
                |role| matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master"),
            )
        };
        let mut promoted = None;
        let mut switched = None;
        let mut asked = Instant::now();
        if failed_to_start.is_none() {
            let seen = wait_until(FAILOVER_LIMIT, || {
                if promoted.is_none() {
                    promoted =
                        replicas.iter().find(|&&r| is_master(r)).map(|&p| (p, Instant::now(), has_lock(p)));
                }
                // The Sentinels are asked every 50 ms (three connections each time).
                let Some((p, ..)) = promoted else { return false };
                if asked.elapsed() < Duration::from_millis(50) {
                    return false;
                }
                asked = Instant::now();
                self.set.agreed_master() == Some(p)
            });
            switched = seen.then(Instant::now);
        }
        if fault == Disruption::FailoverFrozen {
            self.set.node(from).expect("the master is a node of the set").thaw();
        }
        if let (Some((p, ..)), Some(_)) = (promoted, switched) {
            self.watched.store(p, Ordering::SeqCst);
        }
        if let Some(e) = failed_to_start {
            eprintln!("[soak] SENTINEL FAILOVER was refused: {e}");
        }
        let failover = Failover { from, had_lock, promoted, switched, whole: None, nudged: Vec::new() };
        let must_stop =
            |h: &Occupant| failover.lost_lock() && switched.is_some_and(|s| h.done_by > s + SLACK);
        Injected {
            fault,
            start,
            // Requests a frozen master held back are served when it is continued.
            lifted: Instant::now(),
            paused: None,
            hit_holder: holder.is_some(),
            victim: holder.filter(must_stop).map(|h| h.ppid),
            failover: Some(failover),
        }
    }

    fn exists(&self, key: &str) -> bool {
        let master = self.watched.load(Ordering::SeqCst);
        probe::<i64>(master, redis::cmd("EXISTS").arg(key)) != Some(0)
    }

    fn log(&self) -> String {
        let mut text = String::new();
        for s in &self.set.sentinels {
            let log = s.log();
            let tail: Vec<&str> = log.lines().rev().take(25).collect();
            text += &format!("\nsentinel {} log (newest first):\n{}", s.port, tail.join("\n"));
        }
        text
    }
}

/// One soak phase: its faults in turn (at least `at_least` of them, then on until the budget
/// is spent), its wrappers looping meanwhile; returns everything observed.
fn soak(phase: &Phase) -> SoakOutcome {
    let _turn = Turn::take();
    let seed = Rng::seed_from_env("SOAK_SEED");
    match phase.deployment {
        Deployment::Proxied => soak_on(phase, &mut Proxied::start(), seed),
        Deployment::Sentinels => soak_on(phase, &mut Sentinels::start(), seed),
    }
}

fn soak_on(phase: &Phase, target: &mut dyn Target, seed: u64) -> SoakOutcome {
    let budget = phase_budget();
    let mut rng = Rng::new(seed);
    let dir = tmp();
    let oracle = Oracle::start(dir.path());
    let reach = target.reach();
    // Loads the scripts, so the first runs under faults are not spent on NOSCRIPT.
    let warm = run(reach[0].wrapper().args(["-k", "lock:warm-up", "--", "true"]), LIMIT);
    assert_eq!(warm.code, 0, "{}", warm.stderr);

    let keys = phase.keys();
    let ttl = phase.timing.ttl;
    let shared = Arc::new(Shared {
        dir: dir.path().to_owned(),
        reach,
        timing: phase.timing,
        keys: keys.clone(),
        oracle: oracle.path().to_owned(),
        stop: AtomicBool::new(false),
        want_long_hold: AtomicBool::new(false),
        wrappers: Mutex::new(HashSet::new()),
        runs: Mutex::new(Vec::new()),
    });
    let guard = StopOnDrop(Arc::clone(&shared));
    let monitor_stop = Arc::new(AtomicBool::new(false));
    let monitor_thread = {
        let (port, stop, keys) = (target.watched(), Arc::clone(&monitor_stop), keys.clone());
        std::thread::spawn(move || monitor(&port, &keys, ttl, &stop))
    };
    let loops: Vec<JoinHandle<()>> = phase
        .loops
        .iter()
        .enumerate()
        .map(|(n, &runs)| {
            let shared = Arc::clone(&shared);
            let rng = Rng::new(seed ^ (n as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
            std::thread::spawn(move || wrapper_loop(n, runs, &shared, rng))
        })
        .collect();

    let faults = phase.faults;
    let started = Instant::now();
    let mut injected: Vec<Injected> = Vec::new();
    let mut next = 0;
    while next < phase.at_least || started.elapsed() < budget {
        target.ready(&mut injected);
        let fault = faults[next % faults.len()];
        next += 1;
        std::thread::sleep(target.gap(injected.last(), &mut rng));
        injected.push(target.inject(fault, &shared, &oracle, &mut rng));
    }
    std::thread::sleep(Duration::from_secs(2));
    let soaked = started.elapsed();

    // Drain: every loop finishes its current run (each bounded by LIMIT).
    shared.stop.store(true, Ordering::SeqCst);
    for l in loops {
        l.join().expect("wrapper loop");
    }
    let drained = started.elapsed() - soaked;
    drop(guard);
    let last_exit = Instant::now();
    let lock_gone = wait_until(ttl + SLACK, || keys.iter().all(|k| !target.exists(k)));
    let lock_gone_after = last_exit.elapsed();
    monitor_stop.store(true, Ordering::SeqCst);
    let monitored = monitor_thread.join().expect("monitor");
    let report = oracle.report();
    let runs = std::mem::take(&mut *lock(&shared.runs));
    let outcome = SoakOutcome {
        phase: phase.name,
        wrappers: phase.loops.len(),
        keys,
        seed,
        timing: phase.timing,
        soaked,
        drained,
        runs,
        injected,
        report,
        monitored,
        lock_gone,
        lock_gone_after,
        target_log: target.log(),
        // Kept for a failing assertion's message; removed when the outcome is dropped in a
        // passing test.
        wrapper_logs: dir.keep(),
    };
    outcome.print();
    outcome.check_common();
    outcome
}

struct SoakOutcome {
    phase: &'static str,
    wrappers: usize,
    keys: Vec<&'static str>,
    seed: u64,
    timing: Timing,
    soaked: Duration,
    drained: Duration,
    runs: Vec<RunRecord>,
    injected: Vec<Injected>,
    report: OracleReport,
    monitored: MonitorReport,
    lock_gone: bool,
    lock_gone_after: Duration,
    /// What the target shows when a check fails (the tail of Redis's log, or the Sentinels').
    target_log: String,
    wrapper_logs: PathBuf,
}

impl SoakOutcome {
    fn statuses(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for r in &self.runs {
            let key = match &r.status {
                Ok(code) => code.to_string(),
                Err(e) => e.clone(),
            };
            *by.entry(key).or_insert(0) += 1;
        }
        by
    }

    fn max_overlap(&self) -> Duration {
        self.report.overlaps.iter().map(|o| o.duration()).max().unwrap_or_default()
    }

    /// The fault injected last before `o` began.
    fn cause(&self, o: &oracle::Overlap) -> Option<&Injected> {
        self.injected.iter().rev().find(|f| f.start <= o.start)
    }

    fn print(&self) {
        let mut faults: BTreeMap<Disruption, (usize, usize)> = BTreeMap::new();
        for f in &self.injected {
            let e = faults.entry(f.fault).or_default();
            e.0 += 1;
            e.1 += usize::from(f.hit_holder);
        }
        let faults: Vec<String> =
            faults.iter().map(|(f, (n, hit))| format!("{} {n} ({hit} with a holder)", f.name())).collect();
        let victims = self.injected.iter().filter(|f| f.victim.is_some()).count();
        let mut by_cause: BTreeMap<&str, (usize, u128)> = BTreeMap::new();
        for o in &self.report.overlaps {
            let e = by_cause.entry(self.cause(o).map_or("none", |f| f.fault.name())).or_default();
            e.0 += 1;
            e.1 = e.1.max(o.duration().as_millis());
        }
        let r = &self.report;
        let killed = r.stays.iter().filter(|s| !s.finished).count();
        let resources: Vec<String> = r
            .resources
            .iter()
            .map(|(key, k)| {
                let kinds: Vec<String> =
                    k.kinds.iter().map(|(kind, n)| format!("{n} {}", kind.name())).collect();
                let shared =
                    if k.peak_shared > 0 { format!(" ({} shared)", k.peak_shared) } else { String::new() };
                format!("{key}: {} stays, peak {} at once{shared}", kinds.join(" + "), k.peak)
            })
            .collect();
        eprintln!(
            "\n[soak: {}] {:.1} s (+{:.1} s draining), seed {} (SOAK_SEED), {} wrappers on {}, \
             ttl {}, renew every {}, kill grace {}\n  \
             runs: {} by exit status {:?}\n  \
             faults injected: {}: {}; {} had to stop a command\n  \
             commands: {} entered, {} stopped before the end of their work, peak {} at once on a key\n  \
             by key: {}\n  \
             overlaps (a command present when its key went beyond what its kind allows): {}, max {} ms; \
             by cause (count, max ms): {:?}\n  \
             writes: {} accepted, {} stale rejected, {} stale accepted, {} fences reused\n  \
             leftovers: {} orphaned groups, {} locks outliving their owner by more than the ttl, \
             {} lock values with a bad TTL; lock gone {} ms after the last wrapper ({} monitor samples)",
            self.phase,
            self.soaked.as_secs_f64(),
            self.drained.as_secs_f64(),
            self.seed,
            self.wrappers,
            self.keys.join(" and "),
            ms(self.timing.ttl),
            ms(self.timing.renew_every),
            ms(self.timing.kill_grace),
            self.runs.len(),
            self.statuses(),
            self.injected.len(),
            faults.join(", "),
            victims,
            r.stays.len(),
            killed,
            r.peak_holders,
            resources.join("; "),
            r.overlaps.len(),
            self.max_overlap().as_millis(),
            by_cause,
            r.writes_accepted,
            r.stale_rejected,
            r.stale_accepted,
            r.fence_reused,
            self.runs.iter().filter(|r| !r.orphans.is_empty()).count(),
            self.leftover_locks().len(),
            self.monitored.bad_ttls.len(),
            self.lock_gone_after.as_millis(),
            self.monitored.samples,
        );
        let failovers = self.failovers();
        if failovers.is_empty() {
            return;
        }
        let span = |ds: Vec<Duration>| match (ds.iter().min(), ds.iter().max()) {
            (Some(lo), Some(hi)) => format!("{}–{} ms", lo.as_millis(), hi.as_millis()),
            _ => "never".to_owned(),
        };
        let promoted = span(failovers.iter().filter_map(|(i, f)| Some(f.promoted?.1 - i.start)).collect());
        let switched =
            span(failovers.iter().filter_map(|(_, f)| Some(f.switched? - f.promoted?.1)).collect());
        let whole = span(failovers.iter().filter_map(|(_, f)| Some(f.whole? - f.switched?)).collect());
        // Per lossy kind: failovers, those whose promoted replica lacked the lock, those that
        // stopped its holder, those followed by an overlap.
        let mut lossy: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
        for (i, f) in failovers.iter().filter(|(i, _)| i.fault.loses_data()) {
            let e = lossy.entry(i.fault.name()).or_default();
            e[0] += 1;
            e[1] += usize::from(f.lost_lock());
            e[2] += usize::from(i.victim.is_some());
            e[3] += usize::from(self.overlaps_after(i) > 0);
        }
        let lossy: Vec<String> = lossy
            .iter()
            .map(|(name, [n, lost, stopped, overlapped])| {
                format!(
                    "{name} {n} (lock lost {lost}, holder stopped {stopped}, overlaps after {overlapped})"
                )
            })
            .collect();
        eprintln!(
            "  failovers: {}: a replica promoted {promoted} after the start, every Sentinel naming it \
             {switched} after that, the set whole again {whole} later ({} times with a node made a \
             replica by the test); {}; runs completed between failovers: {:?}",
            failovers.len(),
            failovers.iter().filter(|(_, f)| !f.nudged.is_empty()).count(),
            lossy.join(", "),
            self.completed_between_failovers(),
        );
    }

    /// Overlaps that began after `fault` and before the next one.
    fn overlaps_after(&self, fault: &Injected) -> usize {
        self.report.overlaps.iter().filter(|o| self.cause(o).is_some_and(|c| std::ptr::eq(c, fault))).count()
    }

    /// The faults that were Sentinel failovers, with what the test saw of each.
    fn failovers(&self) -> Vec<(&Injected, &Failover)> {
        self.injected.iter().filter_map(|i| Some((i, i.failover.as_ref()?))).collect()
    }

    /// For each failover but the last: the runs that completed (exit 0) after it was seen and
    /// before the next one began.
    fn completed_between_failovers(&self) -> Vec<usize> {
        let failovers = self.failovers();
        failovers
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0].1.switched.unwrap_or(w[0].0.start), w[1].0.start);
                self.runs.iter().filter(|r| r.status == Ok(0) && r.spawned >= from && r.exited <= to).count()
            })
            .collect()
    }

    /// The failovers as the test saw them, in ms from each one's start.
    fn failover_timeline(&self) -> String {
        let mut text = String::new();
        for (n, (i, f)) in self.failovers().into_iter().enumerate() {
            let after = |t: Option<Instant>| {
                t.map_or("-".to_owned(), |t| format!("{} ms", (t - i.start).as_millis()))
            };
            text += &format!(
                "failover {n} ({}) from {}: lock on the master {}; promoted {:?} at {} (lock there: {:?}); \
                 every Sentinel named it at {}; whole again at {} (made replicas by the test: {:?}); \
                 holder {}, victim {:?}\n",
                i.fault.name(),
                f.from,
                f.had_lock,
                f.promoted.map(|p| p.0),
                after(f.promoted.map(|p| p.1)),
                f.promoted.map(|p| p.2),
                after(f.switched),
                after(f.whole),
                f.nudged,
                i.hit_holder,
                i.victim,
            );
        }
        text
    }

    /// Lock values that outlived their wrapper by more than the TTL, counted from when the
    /// wrapper's last request could have reached Redis (a fault may have held it back).
    fn leftover_locks(&self) -> Vec<String> {
        let mut bad = Vec::new();
        for (value, s) in &self.monitored.sightings {
            let owner = s.pid.and_then(|pid| {
                self.runs.iter().filter(|r| r.pid == pid && r.spawned <= s.first).max_by_key(|r| r.spawned)
            });
            let Some(run) = owner else {
                bad.push(format!("{}: not a soak wrapper's", String::from_utf8_lossy(value)));
                continue;
            };
            let held_back = self
                .injected
                .iter()
                .filter(|f| f.start <= run.exited && f.lifted >= run.spawned)
                .map(|f| f.lifted)
                .max();
            let owner_gone = held_back.map_or(run.exited, |l| l.max(run.exited));
            if s.last > owner_gone + self.timing.ttl + SLACK {
                bad.push(format!(
                    "{}: seen {} ms after its wrapper could last reach Redis",
                    String::from_utf8_lossy(value),
                    (s.last - owner_gone).as_millis()
                ));
            }
        }
        bad
    }

    fn context(&self) -> String {
        format!(
            "seed {} (rerun with SOAK_SEED={}); wrapper logs in {}; {}{}",
            self.seed,
            self.seed,
            self.wrapper_logs.display(),
            self.failover_timeline(),
            self.target_log
        )
    }

    /// What holds after any fault: every wrapper ended with a status of README § Exit status,
    /// left no process behind, no lock outlived its owner by more than the TTL, the fence told
    /// every holder apart, and enough work got done for all this to mean something.
    fn check_common(&self) {
        let ctx = self.context();
        let allowed = [0, 3, 69, 75, 125];
        let odd: Vec<String> = self
            .runs
            .iter()
            .filter(|r| !matches!(r.status, Ok(c) if allowed.contains(&c)))
            .map(|r| format!("pid {}: {:?}", r.pid, r.status))
            .collect();
        assert!(odd.is_empty(), "wrapper statuses outside {allowed:?}: {odd:?}; {ctx}");
        let orphans: Vec<(i32, &Vec<i32>)> =
            self.runs.iter().filter(|r| !r.orphans.is_empty()).map(|r| (r.pid, &r.orphans)).collect();
        assert!(orphans.is_empty(), "processes outlived their wrapper (pid, survivors): {orphans:?}; {ctx}");
        assert!(
            self.monitored.bad_ttls.is_empty(),
            "lock values with a bad TTL: {:?}; {ctx}",
            self.monitored.bad_ttls
        );
        let leftovers = self.leftover_locks();
        assert!(leftovers.is_empty(), "locks left behind: {leftovers:?}; {ctx}");
        assert!(
            self.lock_gone,
            "the lock was still there {:?} after the last wrapper; {ctx}",
            self.timing.ttl
        );
        let r = &self.report;
        for (key, k) in &r.resources {
            assert_eq!(k.kind_conflicts, 0, "{key} was held by kinds that do not go together: {k:?}; {ctx}");
        }
        assert_eq!(r.fence_reused, 0, "two acquisitions had the same fence; {ctx}");
        assert_eq!(r.stale_accepted, 0, "a stale write got through the fence check; {ctx}");
        // Only a command that a newer one overlapped ever has a write rejected: the fence never
        // goes backwards, not even across Redis losing its data.
        let in_overlaps: u64 = r.overlaps.iter().map(|o| o.rejected).sum();
        assert_eq!(r.stale_rejected, in_overlaps, "writes rejected outside any overlap; {ctx}");
        // Each fault that had to stop a command did: lease lost or unconfirmed, exit 125.
        let mut victims = 0;
        for f in &self.injected {
            let Some(pid) = f.victim else { continue };
            victims += 1;
            let run = self.runs.iter().find(|r| r.pid == pid && r.spawned <= f.start && f.start <= r.exited);
            let status = run.map(|r| r.status.clone());
            assert_eq!(
                status,
                Some(Ok(125)),
                "the command under {} (wrapper {pid}) was not stopped; {ctx}",
                f.fault.name()
            );
        }
        assert!(victims >= 1, "no fault that must stop a command found one to stop; {ctx}");
        let completed = self.runs.iter().filter(|r| r.status == Ok(0)).count();
        assert!(completed >= 8, "only {completed} runs completed: {:?}; {ctx}", self.statuses());
        assert!(self.monitored.samples >= 100, "the monitor sampled {} times", self.monitored.samples);
    }

    /// After faults that lose the lock's state, holders may go beyond what their kind allows,
    /// but each overlap follows such a fault and is bounded (the old holder is stopped at its
    /// next renewal, or as soon as its paused wrapper runs again), the newer holders have
    /// higher fences than the one they overlapped (`in_order`: and rising in the order they
    /// entered, as exclusive holders one after the other do), and the fence check refuses the
    /// older one's writes.
    fn check_overlaps_after_data_loss(&self, in_order: bool) {
        let ctx = self.context();
        let bound = self.timing.renew_every + self.timing.kill_grace + SLACK;
        for o in &self.report.overlaps {
            let cause = self.cause(o);
            assert!(cause.is_some_and(Injected::lost_lock), "overlap {o:?} after {cause:?}; {ctx}");
            let cause = cause.expect("checked above");
            let newer_higher = if in_order {
                o.fences.windows(2).all(|w| w[0] < w[1])
            } else {
                o.fences[1..].iter().all(|&f| f > o.fences[0])
            };
            assert!(newer_higher, "a newer holder had a lower fence: {o:?}; {ctx}");
            match cause.paused {
                // The paused holder runs on until its wrapper wakes, then is stopped at once.
                Some((_, resumed)) => assert!(
                    o.end <= resumed + SLACK,
                    "overlap ended {} ms after the wrapper was continued: {o:?}; {ctx}",
                    (o.end - resumed).as_millis()
                ),
                None => assert!(
                    o.duration() <= bound,
                    "overlap of {} ms after {}, more than renew-every + kill-grace + {} ms: {o:?}; {ctx}",
                    o.duration().as_millis(),
                    cause.fault.name(),
                    SLACK.as_millis()
                ),
            }
            // The older holder writes every 100 ms while it lasts, and each of those is refused.
            if o.duration() > oracle::WRITE_EVERY * 2 {
                assert!(o.rejected >= 1, "no stale write was rejected during {o:?}; {ctx}");
            }
        }
    }

    /// Every failover happened (a replica promoted, every Sentinel naming it), and but for the
    /// last the set was whole again before the next, with runs completed in between; a lossy
    /// failover lost a lock and stopped its holder (125) or was followed by an overlap, so that
    /// the overlap checks meant something.
    fn check_failovers(&self) {
        let ctx = self.context();
        let failovers = self.failovers();
        assert!(!failovers.is_empty(), "no failover; {ctx}");
        for (n, (i, f)) in failovers.iter().enumerate() {
            assert!(
                f.promoted.is_some() && f.switched.is_some(),
                "failover {n} ({}) was not seen within {FAILOVER_LIMIT:?}; {ctx}",
                i.fault.name()
            );
            if n + 1 < failovers.len() {
                assert!(
                    f.whole.is_some(),
                    "after failover {n} ({}) the set was not whole again within {WHOLE_LIMIT:?}; {ctx}",
                    i.fault.name()
                );
            }
        }
        let between = self.completed_between_failovers();
        assert!(between.iter().all(|&n| n >= 1), "runs completed between failovers: {between:?}; {ctx}");
        let meant_something = failovers.iter().any(|(i, f)| {
            i.fault.loses_data() && f.lost_lock() && (i.victim.is_some() || self.overlaps_after(i) > 0)
        });
        assert!(
            meant_something,
            "no lossy failover lost a lock and stopped its holder or was followed by an overlap; {ctx}"
        );
    }
}

impl Drop for SoakOutcome {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.wrapper_logs);
        }
    }
}

/// (1) Faults that lose no lock state — Redis paused shorter and longer than the TTL, killed
/// connections, latency below and above the request timeout, a blackholed network, lost
/// replies, reset connections, a wrapper paused within its lease: never two holders at once,
/// so never a stale write; and (3) every wrapper exits with a status of the exit-status table,
/// leaving nothing behind.
#[test]
fn soak_without_data_loss_faults_never_overlaps() {
    let outcome = soak(&Phase {
        name: "no data-loss faults",
        deployment: Deployment::Proxied,
        timing: PROXIED,
        faults: &SAFE_FAULTS,
        at_least: SAFE_FAULTS.len(),
        loops: &ONE_KEY,
    });
    let ctx = outcome.context();
    let r = &outcome.report;
    assert!(r.overlaps.is_empty(), "overlapping holders: {:?}; {ctx}", r.overlaps);
    assert_eq!(r.peak_holders, 1, "{ctx}");
    assert_eq!(r.stale_rejected, 0, "stale writes without an overlap; {ctx}");
    assert!(!outcome.runs.iter().any(|r| r.status == Ok(3)), "a command saw a stale write; {ctx}");
}

/// (2) Faults that lose the lock's state — Redis restarted empty, the key deleted, force-
/// released or expired by hand, the holder's wrapper paused past its TTL: holders may
/// overlap, but each overlap is bounded (the old holder is stopped at its next renewal, or as
/// soon as its wrapper runs again), the newer holder always has the higher fence, and the
/// fence check rejects every write of the older one; and (3) as above.
#[test]
fn soak_with_data_loss_faults_bounds_overlaps_and_rejects_stale_writers() {
    let outcome = soak(&Phase {
        name: "data-loss faults",
        deployment: Deployment::Proxied,
        timing: PROXIED,
        faults: &DATA_LOSS_FAULTS,
        at_least: DATA_LOSS_FAULTS.len(),
        loops: &ONE_KEY,
    });
    let ctx = outcome.context();
    outcome.check_overlaps_after_data_loss(true);
    assert!(
        !outcome.report.overlaps.is_empty(),
        "no data-loss fault produced an overlap, so nothing was measured; {ctx}"
    );
}

/// (6) The kinds of lock, under faults of both sorts: four wrappers loop on a `--limit 3` key,
/// four on a key of `--shared` runs with one in three exclusive. The oracle plays a fenced
/// resource per key that knows the kind (tests/support/oracle.rs): never more than three
/// holders of the semaphore, never an exclusive holder beside another of the other key, except
/// after a fault that loses the holders' state (Redis restarted empty, the keys force-released,
/// a holder's wrapper paused past its lease), and then bounded as the exclusive lock's
/// overlaps are, with the fresher holders' fences higher and the older holders' writes refused;
/// no fence used twice on a key; and (3) as above.
#[test]
fn soak_with_lock_kinds_never_exceeds_their_holders_outside_data_loss() {
    let outcome = soak(&Phase {
        name: "lock kinds",
        deployment: Deployment::Proxied,
        timing: PROXIED,
        faults: &KIND_FAULTS,
        at_least: KIND_FAULTS.len(),
        loops: &KIND_LOOPS,
    });
    let ctx = outcome.context();
    let r = &outcome.report;
    // The checks meant something: the semaphore was full, readers held together, and writers
    // held between them.
    let semaphore = &r.resources[LIMIT_KEY];
    assert!(semaphore.peak >= PERMITS, "the {PERMITS} permits were never all taken: {semaphore:?}; {ctx}");
    let rw = &r.resources[RW_KEY];
    assert!(rw.peak_shared >= 2, "shared holders never held together: {rw:?}; {ctx}");
    assert!(
        rw.kinds.get(&Kind::Exclusive).is_some_and(|&n| n >= 2),
        "too few exclusive holders: {rw:?}; {ctx}"
    );
    // More holders than the kind allows only in an overlap, and overlaps only after data loss.
    let beyond = |key: &str| r.overlaps.iter().any(|o| o.resource == key);
    assert!(
        semaphore.peak <= PERMITS || beyond(LIMIT_KEY),
        "{} holders of --limit {PERMITS} at once and no overlap recorded: {semaphore:?}; {ctx}",
        semaphore.peak
    );
    outcome.check_overlaps_after_data_loss(false);
}

/// (7) Sentinel failovers (issue 21): four loops of exclusive runs find the master through three
/// Sentinels that require a password, and log in to the data nodes as an ACL user, while the
/// master is failed over again and again — forced (`SENTINEL FAILOVER`), by the Sentinels'
/// agreement while it is frozen, or forced just after the lock's copy on every replica was
/// deleted or expired, which loses the lock's last write — each failover waited for until the
/// demoted master is a replica again. Holders overlap only after a failover whose promoted
/// replica lacked the lock, and each overlap is bounded by renew-every + kill-grace + 500 ms,
/// the bound of README § What the lock does not guarantee for a lock lost in Redis (the holder
/// notices at its next renewal at the latest, then its command gets up to kill-grace): with
/// Sentinel the holder renews on the new master as soon as it hears of the switch, which any
/// waiter that took the lock there needed too (or a Sentinel naming the new master), so
/// the bound holds with room. The newer holder's fence is higher, the older one's writes are
/// refused, every failover happened with runs completed between them, and a lossy failover
/// stopped its holder (125) or was followed by an overlap; and (3) as above.
#[test]
fn soak_with_sentinel_failovers_bounds_overlaps_to_lost_writes() {
    let outcome = soak(&Phase {
        name: "sentinel failovers",
        deployment: Deployment::Sentinels,
        timing: FAILOVER_TIMING,
        faults: &FAILOVERS,
        at_least: 3,
        loops: &SENTINEL_LOOPS,
    });
    outcome.check_failovers();
    outcome.check_overlaps_after_data_loss(true);
}
