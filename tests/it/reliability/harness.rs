//! Runs a soak phase: wrapper loops against a target while its faults are injected, and a
//! monitor sampling the lock keys; returns what was seen as a [`SoakOutcome`].

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::failovers::{Failover, Sentinels};
use super::outcome::SoakOutcome;
use super::proxied::Proxied;
use super::{LIMIT, SLACK, ms};
use crate::support::fault::Rng;
use crate::support::oracle::{Kind, ORACLE_HOLD_MS, ORACLE_KIND, ORACLE_SOCKET, Occupant, Oracle};
use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const WAIT: Duration = Duration::from_secs(3);
/// The runs a phase completes (exit 0) at the least: fewer say the tool did not work.
pub(super) const COMPLETED: usize = 8;

/// The lease options a phase's wrappers run with.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    pub(super) ttl: Duration,
    pub(super) renew_every: Duration,
    pub(super) kill_grace: Duration,
}

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
pub(super) enum Runs {
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
pub(super) struct Phase {
    pub(super) name: &'static str,
    /// What the wrappers reach Redis through, and the faults act on.
    pub(super) deployment: Deployment,
    pub(super) timing: Timing,
    pub(super) faults: &'static [Disruption],
    /// How many of `faults` are injected in any case, however short the budget.
    pub(super) at_least: usize,
    pub(super) loops: &'static [Runs],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deployment {
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
pub(super) enum Disruption {
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
    pub(super) fn name(self) -> &'static str {
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
    pub(super) fn loses_data(self) -> bool {
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

#[derive(Debug)]
pub(super) struct Injected {
    pub(super) fault: Disruption,
    pub(super) start: Instant,
    /// When requests the fault held back may last have reached Redis.
    pub(super) lifted: Instant,
    /// The wrapper paused, and when it was continued.
    pub(super) paused: Option<(i32, Instant)>,
    /// A command was present when the fault began.
    pub(super) hit_holder: bool,
    /// The wrapper of a command present with more work ahead than the fault lasts, which the
    /// fault must therefore have stopped (exit 125).
    pub(super) victim: Option<i32>,
    /// What the test saw of a Sentinel failover.
    pub(super) failover: Option<Failover>,
}

impl Injected {
    /// Whether the fault lost the lock's state, so that holders may overlap after it: a fault
    /// that loses data, and for a failover, one whose promoted replica lacked the lock.
    pub(super) fn lost_lock(&self) -> bool {
        self.fault.loses_data() && self.failover.as_ref().is_none_or(Failover::lost_lock)
    }
}

pub(super) struct RunRecord {
    pub(super) pid: i32,
    pub(super) spawned: Instant,
    pub(super) exited: Instant,
    /// The wrapper's exit status, or how it failed to give one.
    pub(super) status: Result<i32, String>,
    /// Processes of the command's group still alive 500 ms after the wrapper exited (it must
    /// not exit before they are gone; the allowance is for the kernel's teardown).
    pub(super) orphans: Vec<i32>,
}

/// How one wrapper loop's wrappers reach Redis: their options (`--redis-url`, `--sentinel`, …)
/// and environment.
#[derive(Clone, Debug, Default)]
pub(super) struct Reach {
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(&'static str, String)>,
}

impl Reach {
    pub(super) fn url(url: &str) -> Reach {
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
pub(super) struct Shared {
    dir: PathBuf,
    /// For loop `n`, `reach[n % reach.len()]`.
    reach: Vec<Reach>,
    timing: Timing,
    /// The phase's lock keys.
    pub(super) keys: Vec<&'static str>,
    oracle: PathBuf,
    stop: AtomicBool,
    /// The injector wants a command with a long hold (to stop it): the next runs get one.
    want_long_hold: AtomicBool,
    /// Wrappers running now. A pid is removed in the same critical section that reaps it, so a
    /// signal sent while holding this lock never reaches a recycled pid.
    pub(super) wrappers: Mutex<HashSet<i32>>,
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
        let mut child = {
            let mut wrappers = lock(&shared.wrappers);
            let child = cmd.start();
            wrappers.insert(child.id() as i32);
            child
        };
        let pid = child.id() as i32;
        let status = reap_within(&mut child, shared, LIMIT);
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
fn reap_within(child: &mut Process, shared: &Shared, limit: Duration) -> Result<i32, String> {
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

/// A holder's value seen at a lock key by the monitor.
pub(super) struct Sighting {
    pub(super) first: Instant,
    pub(super) last: Instant,
    /// The wrapper that stored it (the value is `<token> <host> <pid> <start>`).
    pub(super) pid: Option<i32>,
}

#[derive(Default)]
pub(super) struct MonitorReport {
    pub(super) samples: u64,
    pub(super) sightings: HashMap<Vec<u8>, Sighting>,
    /// Values seen without an expiry, or with more than the TTL left.
    pub(super) bad_ttls: Vec<String>,
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

/// Waits (bounded) for a command to be present — with `work` ahead of it, if given (the next
/// runs then get a long hold) — and returns the one that entered last.
pub(super) fn await_holder(shared: &Shared, oracle: &Oracle, work: Option<Duration>) -> Option<Occupant> {
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

/// What a soak phase's faults act on, and how its wrappers reach Redis.
pub(super) trait Target {
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

/// One soak phase: its faults in turn (at least `at_least` of them, then on until the budget
/// is spent), its wrappers looping meanwhile; returns everything observed.
pub(super) fn soak(phase: &Phase) -> SoakOutcome {
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
    // A loaded machine completes fewer runs between the faults: the loops go on, without
    // faults, until it has completed enough (bounded), so that the count checked says something
    // of the tool rather than of the machine.
    let completed = || lock(&shared.runs).iter().filter(|r| r.status == Ok(0)).count();
    wait_until(Duration::from_secs(30), || completed() >= COMPLETED);
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
