//! The target of the Sentinel phase: a secured Sentinel set, failed over in the ways the phase
//! asks, and what the test saw of each failover.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use super::SLACK;
use super::harness::{Disruption, Injected, Reach, Shared, Target, await_holder};
use super::soak::SENTINEL_LOOPS;
use crate::support::fault::Rng;
use crate::support::oracle::{Occupant, Oracle};
use crate::support::sentinel::{MASTER_NAME, SentinelSet, Setup, Watch};
use crate::support::*;

/// What the test saw of one Sentinel failover.
#[derive(Debug, Clone)]
pub(super) struct Failover {
    /// The master before it.
    pub(super) from: u16,
    /// The lock key held a value on that master as the failover began.
    pub(super) had_lock: bool,
    /// The replica promoted, when the test saw it answer ROLE as a master, and whether the
    /// lock key held a value there at that moment (before any wrapper could reach it).
    pub(super) promoted: Option<(u16, Instant, bool)>,
    /// When every Sentinel named the promoted replica.
    pub(super) switched: Option<Instant>,
    /// When the demoted master was a replica of the new one again, in sync, and every Sentinel
    /// named the new one (waited for before the next failover).
    pub(super) whole: Option<Instant>,
    /// The Sentinels had not made a node a replica of the new master within [`WHOLE_LIMIT`]
    /// (seen once in a long soak, when a failover came a second after the previous one's
    /// demoted master was converted), so the test did it as an operator would: `REPLICAOF`.
    pub(super) nudged: Vec<u16>,
}

impl Failover {
    /// A lock held on the master was missing on the replica promoted: its last write was lost.
    pub(super) fn lost_lock(&self) -> bool {
        self.had_lock && matches!(self.promoted, Some((_, _, false)))
    }
}

/// The Sentinels' password (`requirepass`; they authenticate to each other with it).
const SENTINEL_PASSWORD: &str = "sentinel-secret";
/// The wrappers' ACL user on the data nodes, with a password of its own.
const LOCKER: &str = "locker";
const LOCKER_PASSWORD: &str = "locker-secret";
/// docs/GUIDE.md § Least-privilege ACL, for keys starting with `lock:` (no ROLE: the wrapper skips its
/// check that the node is a master).
const LOCKER_ACL: &str = "resetchannels ~lock:* ~{lock:* &lock:* &{lock:* -@all +evalsha +script|load \
     +set +get +type +pttl +pexpire +incr +del +exists +publish +time +zrange +zscore +zadd +zrem +zrank \
     +zcount +zrangebyscore +hset +hget +hdel +subscribe +scan +mget";
/// How long a failover may take to be seen (promoted, then named by every Sentinel), and the
/// set to be whole again after it.
pub(super) const FAILOVER_LIMIT: Duration = Duration::from_secs(20);
pub(super) const WHOLE_LIMIT: Duration = Duration::from_secs(25);

/// A master, two replicas and three Sentinels on loopback (quorum 2, down after 1 s), which
/// the wrappers reach through the Sentinels. The Sentinels require a password; the wrappers log
/// in to the data nodes as [`LOCKER`], created on each node (ACLs are not replicated).
pub(super) struct Sentinels {
    set: SentinelSet,
    /// The password files.
    dir: tempfile::TempDir,
    watched: Arc<AtomicU16>,
}

impl Sentinels {
    pub(super) fn start() -> Self {
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
