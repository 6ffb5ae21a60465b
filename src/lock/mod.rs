//! The Redis side. This file owns the lock itself (`Lock`: its nodes, keys and value), renewing
//! it, and the quorum rule; taking it (`taking`), giving it back (`releasing`) and waiting for
//! it (`waiting`) on one node or on each node of a Redlock quorum are beside. Around them: connecting per topology
//! (`conn`, `sentinel`), what went wrong (`fault`, `mistakes`), URLs (`url`), the scripts and
//! their replies (`scripts`, `replies`), what is stored (`keys`, `values`), the lease deadline
//! (`lease`), and the operator's view (`admin`). The retry schedules that use these single
//! attempts are beside the run's steps: `acquire/`, `renew.rs`, `release.rs`.

pub mod admin;
mod conn;
mod fault;
mod keys;
mod lease;
mod mistakes;
mod releasing;
mod replies;
mod scripts;
mod sentinel;
pub mod settings;
mod taking;
pub mod url;
mod values;
mod waiting;
mod watch;

#[cfg(test)]
mod queue_tests;

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::Value;
use scripts::Call;

pub use conn::Conn;
pub use fault::Fault;
pub use keys::Keys;
pub use lease::{GUARDIAN_KILL_AHEAD, Handover, KILL_AHEAD, Lease, drift};
pub use releasing::{Recorded, Released};
use settings::Idempotency;
pub use taking::Acquired;
pub use values::{Holder, Kind, NOTE_MAX, Success, hostname, rfc3339_ms, unseen};
pub use waiting::{QUEUE_ENTRY, QUEUE_KEEPALIVE, Wake, Wakeups};
pub use watch::Notice;

/// How long the fence counter outlives the last acquisition (it is re-initialised from the
/// server clock when it is gone, so expiring it is safe).
const FENCE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The fence counter's TTL for a lock of `ttl`: [`FENCE_TTL`], or longer for a longer lock.
fn fence_ttl(ttl: Duration) -> Duration {
    FENCE_TTL.max(ttl * 2)
}

/// What a majority of the nodes said of the lock's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Every key holds this run's value; with a check, the soonest any of them ends in Redis
    /// (none: no expiry was read).
    Ours {
        expires_in: Option<Duration>,
    },
    Lost,
}

/// How many of `n` nodes must agree for the lock to be held (Redlock's majority): ⌊n/2⌋+1.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// One lock owner: the connections, the key names and the value that proves ownership.
///
/// With one node this is the plain lease lock. With N independent masters (Redlock) every
/// operation goes to all of them in parallel and counts as done when a majority agrees
/// ([`quorum`]) for the lock, the same for each renewal.
///
/// With several keys the lock holds all of them or none: one script takes them together
/// wherever one script can reach them all (one Redis, each node of a quorum, a Cluster when
/// they share a hash slot). In a Cluster whose keys are in several slots, the keys of each
/// slot are taken together, slot after slot in the order of the slots, and everything taken
/// is given back as soon as one is busy.
pub struct Lock {
    nodes: Vec<Conn>,
    /// The lock keys, in the order given.
    keys: Vec<Keys>,
    /// The keys one script takes together (indices into `keys`), in the order they are taken.
    groups: Vec<Vec<usize>>,
    value: String,
    ttl: Duration,
    /// The success record's key and lifetime, with `--idempotency-key` (it belongs to the
    /// first key).
    record: Option<(Vec<u8>, Duration)>,
    /// This run's arrival number in the queue, once it has joined: if its entry lapses, it
    /// joins again with it and gets its place back.
    arrival: Option<u64>,
    kind: Kind,
    /// How long a release of this run takes the lock for the first waiter it hands it over to
    /// ([`Lock::hand_over_for`]); zero: never.
    grant: Duration,
    /// The first key's fence counter as the last busy answer found it (`None`: absent).
    seen: Option<i64>,
    /// Waiters are likely queued for this lock, for its release to hand it to, which only the
    /// full script does: this run waited in the queue itself, or its watch saw a queue.
    waiters: bool,
    /// This run holds the lock (its last attempt took it), or releases it for one that did: its
    /// release announces itself on every node of a quorum, whose waiters listen on one node
    /// only. A release after an attempt that failed announces only what it deleted.
    held: bool,
    /// By node: whether it may hold the lock (granted it, did not answer in time, or was never
    /// asked by this process). A Redlock node that refused or could not be reached when the
    /// lock was taken holds nothing for the release to give back.
    may_hold: Vec<bool>,
}

impl Lock {
    /// `keys` in the order given: the first is the one `REDLOCK_LOCK_KEY`, `REDLOCK_FENCE` and
    /// `--idempotency-key` are about.
    pub fn new(
        nodes: Vec<Conn>,
        keys: &[Vec<u8>],
        ttl: Duration,
        idempotency: Option<&Idempotency>,
        kind: Kind,
        note: Option<&str>,
    ) -> Result<Self, Fault> {
        let keys: Vec<Keys> = keys.iter().map(|k| Keys::new(k)).collect();
        let record = idempotency.map(|i| (keys[0].record(&i.id), i.ttl));
        let value = Holder::this_process(kind, note)?.value();
        let nodes_len = nodes.len();
        let cluster = nodes.len() == 1 && nodes[0].is_cluster();
        let groups = groups(&keys, cluster);
        Ok(Lock {
            nodes,
            keys,
            groups,
            value,
            ttl,
            record,
            arrival: None,
            kind,
            grant: Duration::ZERO,
            seen: None,
            waiters: false,
            held: false,
            may_hold: vec![true; nodes_len],
        })
    }

    /// The lock taken on behalf of process `pid`, which its value names (a script's holder
    /// takes it for the script).
    pub fn on_behalf_of(&mut self, pid: u32) {
        if let Some(mut holder) = Holder::parse(self.value.as_bytes()) {
            holder.pid = pid;
            self.value = holder.value();
        }
    }

    /// This lock as the run with `value` took it, for a process other than that run's wrapper
    /// (the releaser after the wrapper's death): released with the full script, which hands
    /// the lock over to a waiter and leaves the queue.
    pub fn adopt(mut self, value: String) -> Self {
        self.value = value;
        self.waiters = true;
        self.held = true;
        self
    }

    /// A release hands the lock over to the first queued waiter that can take it that way,
    /// for `grant` (it extends that at once to its own TTL): see `scripts::RELEASE`.
    pub fn hand_over_for(&mut self, grant: Duration) {
        self.grant = grant;
    }

    /// Whether waiters are likely queued for this lock, for its release to hand it to: this run
    /// queued itself, or its watch found a queue or heard one change.
    pub fn has_waiters(&self) -> bool {
        self.waiters
    }

    /// Whether a release can hand the lock over to this run while it waits: it queues, for
    /// one key, exclusive, with no success record to check first.
    pub fn takes_handover(&self) -> bool {
        self.queues() && self.keys.len() == 1 && self.kind == Kind::Exclusive && self.record.is_none()
    }

    /// Whether a lock handed over with `fence` was handed over after the last attempt that
    /// found the lock busy was answered (its fence is higher than the counter that attempt
    /// found), and so may count its lease from before that attempt. One handed over earlier
    /// has lapsed since: that attempt did not find this run holding it.
    pub fn handed_over_since_last_attempt(&self, fence: i64) -> bool {
        self.seen.is_none_or(|seen| fence > seen)
    }

    /// Whether waiters queue in arrival order: on one Redis (a single node, the Sentinels'
    /// master, a Cluster when the keys share a slot). A Redlock quorum does not queue:
    /// independent queues could each put another waiter first, and no one would get a
    /// majority; nor do keys in several slots of a Cluster, which no one script can queue for.
    /// Whether a release after a success writes a success record (`--idempotency-key`).
    pub fn records(&self) -> bool {
        self.record.is_some()
    }

    pub fn queues(&self) -> bool {
        self.nodes.len() == 1 && self.groups.len() == 1
    }

    /// Whether the keys are in several slots of a Cluster (taken slot after slot).
    pub fn spans_slots(&self) -> bool {
        self.groups.len() > 1
    }

    /// Resolves once the Sentinels have switched the master since it was last asked (never
    /// for other topologies): what the lock was last confirmed on no longer counts.
    pub fn master_changed(&self) -> impl Future<Output = ()> + Send + 'static {
        let changes: Vec<_> = self.nodes.iter().map(|n| Box::pin(n.master_changed())).collect();
        async move {
            futures_util::future::select_all(changes).await;
        }
    }

    /// Resolves at the next switch of a master the Sentinels announce from now on.
    pub fn master_switching(&self) -> impl Future<Output = ()> + Send + 'static {
        let changes: Vec<_> = self.nodes.iter().map(|n| Box::pin(n.master_switching())).collect();
        async move {
            futures_util::future::select_all(changes).await;
        }
    }

    /// The value stored at the key: `<token> <host> <pid> <start unix ms>`.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The random token that starts the value.
    fn token(&self) -> &str {
        self.value.split(' ').next().unwrap_or_default()
    }

    /// How many nodes hold the lock (more than one: a Redlock quorum).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Where the lock lives, for messages.
    pub fn target(&self) -> String {
        self.nodes.iter().map(|n| n.target.as_str()).collect::<Vec<_>>().join(", ")
    }

    // Each operation fans out over the nodes with its own loop rather than through a shared
    // helper: they count different answers and stop at different points (acquire once a
    // majority can no longer grant, renew once the lock is lost, release and raise_fence only
    // when every node has answered, release reading the answers in node order), so a helper
    // would take over only the line that sends the requests.

    /// Extends the lease if every key still holds our value on a majority. `Ok(false)`: one
    /// does not, and cannot (lost).
    pub async fn renew(&mut self) -> Result<bool, Fault> {
        let Lock { keys, groups, value, ttl, kind, .. } = &*self;
        let exclusive = *kind == Kind::Exclusive;
        let scripts: Vec<_> = groups
            .iter()
            .map(|group| {
                let lean = (exclusive && group.len() == 1).then(|| {
                    let mut script = scripts::RENEW_ONE.key(&keys[group[0]].lock);
                    script.arg(value.as_str()).arg(millis(*ttl));
                    script
                });
                let mut script = scripts::RENEW.prepare_invoke();
                for &i in group {
                    script.key(&keys[i].lock).key(&keys[i].holders);
                }
                script.arg(value.as_str()).arg(millis(*ttl));
                Call { lean, full: script }
            })
            .collect();
        Ok(matches!(self.on_majority(&scripts, "renewed").await?, Holding::Ours { .. }))
    }

    /// Runs one script per group on every node, each answering `{1[, left ms[, queued]]}` (every
    /// key of the group holds our value; `queued` 1: waiters are queued) or `{0, key}`: ours when
    /// a majority holds them all, lost as soon as a majority no longer can; a key gone on a
    /// minority is a warning.
    async fn on_majority(&mut self, scripts: &[Call], done: &str) -> Result<Holding, Fault> {
        let n = self.nodes.len();
        let quorum = quorum(n);
        let Lock { nodes, keys, groups, waiters, .. } = self;
        let groups = &*groups;
        // One round trip per node: the groups (one, but for keys in several Cluster slots) at
        // once. A node answers with the key it no longer holds, if any.
        let mut pending: FuturesUnordered<_> = nodes
            .iter_mut()
            .map(|node| async move {
                node.arm().await?;
                let mut soonest: Option<Duration> = None;
                let mut queued = false;
                for (script, group) in scripts.iter().zip(groups) {
                    let reply = call(node, script).await?;
                    queued |= replies::int(reply.get(2)) == Some(1);
                    if replies::int(reply.first()) != Some(1) {
                        let at = replies::int(reply.get(1)).and_then(|i| usize::try_from(i).ok());
                        return Ok(Err(at
                            .and_then(|i| group.get(i.wrapping_sub(1)))
                            .copied()
                            .unwrap_or(group[0])));
                    }
                    if let Some(left) = replies::int(reply.get(1)).and_then(|ms| u64::try_from(ms).ok()) {
                        let left = Duration::from_millis(left);
                        soonest = Some(soonest.map_or(left, |s| s.min(left)));
                    }
                }
                Ok::<Result<(Option<Duration>, bool), usize>, Fault>(Ok((soonest, queued)))
            })
            .collect();
        let (mut held, mut lost) = (0, 0);
        let mut expires_in: Option<Duration> = None;
        let mut faults = Vec::new();
        while let Some(answer) = pending.next().await {
            match answer {
                Ok(Ok((left, queued))) => {
                    held += 1;
                    *waiters |= queued;
                    expires_in = match (expires_in, left) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Ok(Err(at)) => {
                    lost += 1;
                    if keys.len() > 1 {
                        tracing::warn!(key = %keys[at].lock.escape_ascii(), "this key no longer holds this run's value");
                    }
                }
                Err(Fault::WrongType(_)) => lost += 1,
                Err(f) => faults.push(f),
            }
            // Lost as soon as a majority can no longer confirm; held when every node has
            // answered (each bounded by the per-node timeout), so that no live node's copy lapses.
            if lost > n - quorum {
                return Ok(Holding::Lost);
            }
        }
        if held >= quorum {
            if lost > 0 {
                tracing::warn!(
                    lost_on = lost,
                    nodes = n,
                    "the lock is gone on {lost} of {n} nodes, still held on a majority"
                );
            }
            return Ok(Holding::Ours { expires_in });
        }
        Err(if faults.is_empty() {
            Fault::Unavailable(format!("{done} on {held} of {n} nodes, {quorum} needed"))
        } else {
            fault::worst(faults)
        })
    }
}

/// The groups of keys one script takes together: all of them, but in a Cluster whose keys
/// are in several slots, one group per slot, in the order of the slots, so that every run
/// takes the slots it shares with another in the same order.
fn groups(keys: &[Keys], cluster: bool) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let slot = keys::slot(&k.lock);
        match groups.iter_mut().find(|g| !cluster || keys::slot(&keys[g[0]].lock) == slot) {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups.sort_by_key(|g| keys::slot(&keys[g[0]].lock));
    groups
}

/// Runs the lean script of a call when it has one, and the full one when there is none or the
/// lean one hands the call back.
async fn call(node: &mut Conn, call: &Call) -> Result<Vec<Value>, Fault> {
    if let Some(lean) = &call.lean {
        let reply: Vec<Value> = node.invoke(lean).await?;
        if !matches!(reply.as_slice(), [Value::Int(scripts::NOT_MINE)]) {
            return Ok(reply);
        }
    }
    node.invoke(&call.full).await
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A key for messages: text when it is printable UTF-8, escaped bytes otherwise.
pub fn show_key(key: &[u8]) -> String {
    format!("\"{}\"", key.escape_ascii())
}
