//! The Redis side. This file owns the lock itself: acquire / renew / release on one node or on
//! each node of a Redlock quorum, and the quorum rule. Around it: connecting per topology
//! (`conn`, `sentinel`), what went wrong (`fault`, `mistakes`), URLs (`url`), the scripts and
//! their replies (`scripts`, `replies`), what is stored (`keys`, `values`), the lease deadline
//! (`lease`), and the operator's view (`admin`). The retry schedules that use these single
//! attempts are beside the run's steps: `acquire/`, `renew.rs`, `release.rs`.

pub mod admin;
mod conn;
mod fault;
pub mod keys;
mod lease;
mod mistakes;
mod replies;
mod scripts;
mod sentinel;
pub mod settings;
pub mod url;
mod watch;

#[cfg(test)]
mod queue_tests;
mod values;

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::Value;
use scripts::Call;

pub use conn::Conn;
pub use fault::Fault;
pub use keys::Keys;
pub use lease::{GUARDIAN_KILL_AHEAD, Handover, KILL_AHEAD, Lease, drift};
pub use settings::Idempotency;
pub use values::{Holder, Kind, Success, hostname, rfc3339_ms};
pub use watch::Notice;

/// How long the fence counter outlives the last acquisition (it is re-initialised from the
/// server clock when it is gone, so expiring it is safe).
const FENCE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The fence counter's TTL for a lock of `ttl`: [`FENCE_TTL`], or longer for a longer lock.
fn fence_ttl(ttl: Duration) -> Duration {
    FENCE_TTL.max(ttl * 2)
}

/// What one acquisition attempt found.
#[derive(Debug)]
pub enum Acquired {
    /// The lock is ours: the fence of each key (in the order given) and the lease measured
    /// from just before the request.
    Yes { fences: Vec<i64>, lease: Lease },
    /// Someone else holds key `key` (its index, in the order given): the holder this run
    /// waits for, its remaining TTL (`None`: the key never expires) and value; `holding`: how
    /// many hold; `same_id`: that holder runs the same `--idempotency-key`; `position`: this
    /// run's place in that key's queue when it joined it (1 = next); `ended`: the holder is
    /// a process of this host that has ended, so its release is under way (set by the caller,
    /// which can look: never here).
    Busy {
        key: usize,
        pttl: Option<Duration>,
        holder: Vec<u8>,
        holding: u64,
        same_id: bool,
        position: Option<u64>,
        ended: bool,
    },
    /// The holders would admit this run, but at key `key` other runs are queued ahead of it:
    /// the one it waits for (its lock value), and this run's place when it joined the queue.
    Queued { key: usize, first: Vec<u8>, position: Option<u64> },
    /// The success record of `--idempotency-key` exists: the work is done. Nothing was taken.
    AlreadyDone { record: Vec<u8> },
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Deleted, and waiters told.
    Deleted,
    /// Kept until the end of `--min-hold`.
    Kept,
    /// The key did not hold our value (expired or taken over) and was left untouched.
    NotOurs,
}

/// How long a queued waiter's entry lives without a keep-alive. A waiter that dies delays the
/// queue by at most this plus [`QUEUE_KEEPALIVE`].
pub const QUEUE_ENTRY: Duration = Duration::from_millis(1500);
/// How often a queued waiter keeps its entry alive; each keep-alive is also an attempt, so a
/// lock that expired (its holder died) goes to the first waiter within this.
pub const QUEUE_KEEPALIVE: Duration = Duration::from_millis(500);

/// A waiter's subscription: what wakes it ([`Lock::watch_releases`]). Dropping it closes it.
pub struct Wakeups(redis::aio::PubSubStream);

/// What woke a waiter.
pub enum Wake {
    /// The subscription ended.
    Ended,
    /// A release was announced, or this run's turn in the queue came: try again.
    Turn,
    /// A release took the lock for this run, with this fence, for `grant` (see the RELEASE
    /// script).
    HandedOver { fence: i64, grant: Duration },
}

impl Wakeups {
    /// The next wake-up, or the end of the subscription.
    pub async fn next(&mut self) -> Wake {
        match self.0.next().await {
            None => Wake::Ended,
            Some(msg) => {
                handed_over(&msg).map_or(Wake::Turn, |(fence, grant)| Wake::HandedOver { fence, grant })
            }
        }
    }
}

/// `<fence> <grant ms>` on this run's grant channel; anything else is a turn to try again.
fn handed_over(msg: &redis::Msg) -> Option<(i64, Duration)> {
    let channel: Vec<u8> = msg.get_channel().ok()?;
    if !channel.ends_with(keys::GRANT_SUFFIX) {
        return None;
    }
    let (fence, ms) = std::str::from_utf8(msg.get_payload_bytes()).ok()?.split_once(' ')?;
    let grant = Duration::from_millis(ms.parse().ok()?);
    Some((fence.parse().ok()?, grant))
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
    /// This run waited in a queue: others are likely queued behind it, for its release to
    /// hand the lock to, which only the full script does.
    queued: bool,
}

/// What one node is asked for in an acquisition: the keys of one group.
struct Ask<'a> {
    keys: Vec<&'a Keys>,
    value: &'a str,
    kind: Kind,
    ttl: Duration,
    record: Option<&'a (Vec<u8>, Duration)>,
    join: bool,
    arrival: Option<u64>,
}

/// One node's answer to an acquisition of one group; `key` indices are the group's.
enum NodeAcquired {
    Granted(Vec<i64>),
    Busy {
        key: usize,
        pttl: Option<Duration>,
        holder: Vec<u8>,
        holding: u64,
        same_id: bool,
        position: Option<u64>,
        arrival: Option<u64>,
        seen: Option<i64>,
    },
    Queued {
        key: usize,
        first: Vec<u8>,
        position: Option<u64>,
        arrival: Option<u64>,
        seen: Option<i64>,
    },
    Done(Vec<u8>),
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
    ) -> Result<Self, Fault> {
        let keys: Vec<Keys> = keys.iter().map(|k| Keys::new(k)).collect();
        let record = idempotency.map(|i| (keys[0].record(&i.id), i.ttl));
        let value = Holder::this_process(kind)?.value();
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
            queued: false,
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
        self.queued = true;
        self
    }

    /// A release hands the lock over to the first queued waiter that can take it that way,
    /// for `grant` (it extends that at once to its own TTL): see `scripts::RELEASE`.
    pub fn hand_over_for(&mut self, grant: Duration) {
        self.grant = grant;
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
    pub fn queues(&self) -> bool {
        self.nodes.len() == 1 && self.groups.len() == 1
    }

    /// Whether the keys are in several slots of a Cluster (taken slot after slot).
    pub fn spans_slots(&self) -> bool {
        self.groups.len() > 1
    }

    /// Subscribes to what wakes a waiter, on the first node that accepts: its own turn in the
    /// queue of any of its keys ([`Lock::queues`]), or else the announcement of each release;
    /// and the lock handed over to it ([`Lock::takes_handover`]).
    pub async fn watch_releases(&mut self) -> Result<Wakeups, Fault> {
        let token = self.token().to_owned();
        let mut channels: Vec<Vec<u8>> = self
            .keys
            .iter()
            .map(|k| if self.queues() { k.wake(&token) } else { k.released_channel.clone() })
            .collect();
        if self.takes_handover() {
            channels.push(self.keys[0].grant(&token));
        }
        let mut last = Fault::Unavailable("no node to subscribe to".into());
        for node in &mut self.nodes {
            match node.subscribe(&channels).await {
                Ok(stream) => return Ok(Wakeups(stream)),
                Err(e) => last = e,
            }
        }
        Err(last)
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

    /// Gives up this run's places in the queues (its wait ended without the lock), waking the
    /// waiters that can now hold. Best effort: an entry left behind lapses by itself.
    pub async fn leave_queue(&mut self) -> Result<(), Fault> {
        if !self.queues() {
            return Ok(());
        }
        let Lock { nodes, keys, value, .. } = self;
        let mut script = scripts::LEAVE.prepare_invoke();
        for k in keys.iter() {
            script.key(&k.lock).key(&k.queue).key(&k.queue_expiry);
        }
        script.arg(value.as_str());
        for k in keys.iter() {
            script.arg(&k.wake_prefix);
        }
        nodes[0].invoke::<i64>(&script).await.map(drop)
    }

    /// Whether `waiter`, queued before this run, is also queued for one of `keys` that the
    /// run with value `holder` holds (the run this one is nested in): it cannot go before that
    /// run ends, which waits for this one. Plain reads, one key after the other; any failure
    /// is a no.
    pub async fn waits_for(&mut self, waiter: &[u8], keys: &[Vec<u8>], holder: &str) -> bool {
        let node = &mut self.nodes[0];
        for key in keys {
            let names = Keys::new(key);
            let queued: Result<Option<f64>, _> =
                node.query(redis::cmd("ZSCORE").arg(&names.queue).arg(waiter), None).await;
            if !matches!(queued, Ok(Some(_))) {
                continue;
            }
            let value: Result<Option<Vec<u8>>, _> = node.query(redis::cmd("GET").arg(key), None).await;
            let held = match value {
                Ok(v) => v.as_deref() == Some(holder.as_bytes()),
                // A sorted set: `--shared` or `--limit`.
                Err(_) => matches!(
                    node.query::<Option<f64>>(redis::cmd("ZSCORE").arg(key).arg(holder), None).await,
                    Ok(Some(_))
                ),
            };
            if held {
                return true;
            }
        }
        false
    }

    /// A short prefix of the token, safe to log.
    pub fn token_prefix(&self) -> &str {
        &self.value[..8]
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

    /// One attempt to take every key, given up as soon as it cannot succeed. The lease counts
    /// from just before the first request went out, so the time the slowest needed node took
    /// is already spent. What a failed attempt took is given back.
    /// With `join`, a busy lock puts this run in the queues (or keeps its places there): see
    /// [`Lock::queues`].
    pub async fn acquire(&mut self, join: bool) -> Result<Acquired, Fault> {
        if self.groups.len() == 1 {
            return self.acquire_group(0, join && self.queues()).await;
        }
        // Slot after slot; everything taken so far goes back as soon as one is not granted.
        let sent = tokio::time::Instant::now();
        let mut fences = vec![0; self.keys.len()];
        for g in 0..self.groups.len() {
            let answer = self.acquire_group(g, false).await;
            match answer {
                Ok(Acquired::Yes { fences: got, .. }) => {
                    for (&i, f) in self.groups[g].iter().zip(got) {
                        fences[i] = f;
                    }
                }
                other => {
                    // The failed group may have been taken by a request whose reply was lost.
                    let taken = if other.is_err() { g + 1 } else { g };
                    let _ = self.release_groups(0..taken, Duration::ZERO, false).await;
                    return other;
                }
            }
        }
        Ok(Acquired::Yes { fences, lease: Lease::new(sent, self.ttl) })
    }

    /// One attempt on the keys of group `g`, on every node at once, given up as soon as a
    /// majority can no longer grant. Key indices in the answer are the lock's.
    async fn acquire_group(&mut self, g: usize, join: bool) -> Result<Acquired, Fault> {
        let n = self.nodes.len();
        let quorum = quorum(n);
        let width = self.groups[g].len();
        let Lock { nodes, keys, groups, value, ttl, record, arrival, kind, .. } = self;
        let ask = Ask {
            keys: groups[g].iter().map(|&i| &keys[i]).collect(),
            value: value.as_str(),
            kind: *kind,
            ttl: *ttl,
            // The success record is the first key's, checked with its group.
            record: record.as_ref().filter(|_| groups[g].contains(&0)),
            join,
            arrival: *arrival,
        };
        let ask = &ask;
        let sent = tokio::time::Instant::now();
        let mut pending: FuturesUnordered<_> = nodes
            .iter_mut()
            .enumerate()
            .map(|(i, node)| async move { (i, acquire_on(node, ask).await) })
            .collect();
        let mut granted_by: Vec<usize> = Vec::new();
        let mut fences = vec![i64::MIN; width];
        // Each node's busy answer, as `Acquired::Busy`.
        let mut busy: Vec<Acquired> = Vec::new();
        let mut queued = None;
        // This run's arrival number, when the (one) queueing node answered with it.
        let mut new_arrival = None;
        // The first key's fence counter, as the busy answers found it.
        let mut new_seen = None;
        let mut faults: Vec<Fault> = Vec::new();
        let mut done = None;
        while let Some((i, answer)) = pending.next().await {
            match answer {
                Ok(NodeAcquired::Granted(got)) => {
                    granted_by.push(i);
                    for (f, g) in fences.iter_mut().zip(got) {
                        *f = (*f).max(g);
                    }
                }
                Ok(NodeAcquired::Busy { key, pttl, holder, holding, same_id, position, arrival, seen }) => {
                    new_arrival = new_arrival.or(arrival);
                    new_seen = new_seen.max(seen);
                    busy.push(Acquired::Busy { key, pttl, holder, holding, same_id, position, ended: false })
                }
                Ok(NodeAcquired::Queued { key, first, position, arrival, seen }) => {
                    new_arrival = new_arrival.or(arrival);
                    new_seen = new_seen.max(seen);
                    queued = Some(Acquired::Queued { key, first, position })
                }
                Ok(NodeAcquired::Done(r)) => done = Some(r),
                Err(f) => faults.push(f),
            }
            // Stop at once when a majority can no longer grant. Once it has granted, the other
            // nodes still get their answer in (each is bounded by the per-node timeout): a lock
            // on every live node survives the loss of one more, and their fences count too.
            let refused = busy.len() + faults.len() + usize::from(queued.is_some());
            if done.is_some() || n - refused < quorum {
                break;
            }
        }
        drop(pending);
        if new_arrival.is_some() {
            self.arrival = new_arrival;
        }
        self.seen = new_seen;
        self.queued |= join && (queued.is_some() || !busy.is_empty());
        let granted = granted_by.len();
        if granted >= quorum && done.is_none() {
            if n == 1 || self.raise_fences(g, &granted_by, &fences).await >= quorum {
                return Ok(Acquired::Yes { fences, lease: Lease::new(sent, self.ttl) });
            }
            faults.push(Fault::Unavailable("could not raise the fence counter on a majority".into()));
        }
        if n > 1 {
            // Nodes that granted, or may still grant an abandoned request, are released; the
            // caller retries as it sees fit.
            let _ = self.release(Duration::ZERO, false).await;
        }
        let global = |key: usize| self.groups[g][key];
        if let Some(record) = done {
            return Ok(Acquired::AlreadyDone { record });
        }
        if let Some(Acquired::Queued { key, first, position }) = queued {
            // Only one node queues (see `queues`).
            return Ok(Acquired::Queued { key: global(key), first, position });
        }
        if busy.len() > n - quorum || (faults.is_empty() && !busy.is_empty()) {
            let left = |b: &Acquired| match b {
                Acquired::Busy { pttl, .. } => pttl.unwrap_or(Duration::MAX),
                _ => Duration::MAX,
            };
            let soonest = busy.into_iter().min_by_key(left).expect("busy is not empty");
            return Ok(match soonest {
                Acquired::Busy { key, pttl, holder, holding, same_id, position, ended } => {
                    Acquired::Busy { key: global(key), pttl, holder, holding, same_id, position, ended }
                }
                other => other,
            });
        }
        Err(fault::worst(faults))
    }

    /// Redlock: raises the fence counters of group `g`'s keys on the nodes that granted to the
    /// fences handed out; returns on how many nodes every one was confirmed. (The nodes'
    /// counters drift apart otherwise, and a later majority could hand out a lower fence.)
    async fn raise_fences(&mut self, g: usize, granted_by: &[usize], fences: &[i64]) -> usize {
        let keys: Vec<&Keys> = self.groups[g].iter().map(|&i| &self.keys[i]).collect();
        let ttl = fence_ttl(self.ttl);
        let raised = futures_util::future::join_all(
            self.nodes.iter_mut().enumerate().filter(|(i, _)| granted_by.contains(i)).map(|(_, node)| {
                let keys = &keys;
                async move {
                    let mut script = scripts::RAISE_FENCE.prepare_invoke();
                    script.arg(millis(ttl));
                    for (k, fence) in keys.iter().zip(fences) {
                        script.key(&k.fence).arg(*fence);
                    }
                    matches!(node.invoke::<i64>(&script).await, Ok(1))
                }
            }),
        )
        .await;
        raised.iter().filter(|r| **r).count()
    }

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

    /// Runs one script per group on every node, each answering `{1[, left ms]}` (every key of
    /// the group holds our value) or `{0, key}`: ours when a majority holds them all, lost as
    /// soon as a majority no longer can; a key gone on a minority is a warning.
    async fn on_majority(&mut self, scripts: &[Call], done: &str) -> Result<Holding, Fault> {
        let n = self.nodes.len();
        let quorum = quorum(n);
        let Lock { nodes, keys, groups, .. } = self;
        let groups = &*groups;
        // One round trip per node: the groups (one, but for keys in several Cluster slots) at
        // once. A node answers with the key it no longer holds, if any.
        let mut pending: FuturesUnordered<_> = nodes
            .iter_mut()
            .map(|node| async move {
                node.arm().await?;
                let mut soonest: Option<Duration> = None;
                for (script, group) in scripts.iter().zip(groups) {
                    let reply = call(node, script).await?;
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
                Ok::<Result<Option<Duration>, usize>, Fault>(Ok(soonest))
            })
            .collect();
        let (mut held, mut lost) = (0, 0);
        let mut expires_in: Option<Duration> = None;
        let mut faults = Vec::new();
        while let Some(answer) = pending.next().await {
            match answer {
                Ok(Ok(left)) => {
                    held += 1;
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

    /// Deletes every key on every node where it still holds our value and tells waiters — or,
    /// with `keep`, lets it live that much longer (`--min-hold`). With `succeeded` and
    /// `--idempotency-key`, records the success in the same round trip.
    pub async fn release(&mut self, keep: Duration, succeeded: bool) -> Result<Released, Fault> {
        let all = 0..self.groups.len();
        self.release_groups(all, keep, succeeded).await
    }

    async fn release_groups(
        &mut self,
        groups: std::ops::Range<usize>,
        keep: Duration,
        succeeded: bool,
    ) -> Result<Released, Fault> {
        // Only a queue hands over.
        let grant = if self.queues() { self.grant } else { Duration::ZERO };
        let Lock { nodes, keys, groups: all, value, record, ttl, kind, queued, .. } = self;
        // Waiters of a quorum listen on one node, which may not have held our lock.
        let announce = nodes.len() > 1;
        let cluster = nodes[0].is_cluster();
        let release = Release { keep, announce, grant, fence_ttl: fence_ttl(*ttl) };
        let scripts: Vec<_> = all[groups]
            .iter()
            .map(|group| {
                let record = record.as_ref().filter(|_| succeeded && group.contains(&0));
                let lean = (*kind == Kind::Exclusive
                    && !*queued
                    && group.len() == 1
                    && record.is_none()
                    && keep.is_zero()
                    && !announce)
                    .then(|| {
                        let k = &keys[group[0]];
                        let mut script = scripts::RELEASE_ONE.key(&k.lock);
                        script.key(&k.queue).arg(value.as_str());
                        if cluster {
                            script.arg(&k.released_channel);
                        }
                        script
                    });
                Call { lean, full: release_script(group.iter().map(|&i| &keys[i]), value, record, &release) }
            })
            .collect();
        let scripts = &scripts;
        let answers = futures_util::future::join_all(nodes.iter_mut().map(|node| async move {
            let mut outcome = None;
            for script in scripts {
                let got = release_on(node, script).await?;
                outcome = Some(outcome.map_or(got, |o| merge(o, got)));
            }
            outcome.ok_or_else(|| Fault::Internal("no key to release".into()))
        }))
        .await;
        let mut faults = Vec::new();
        let mut outcome = None;
        for answer in answers {
            match answer {
                Ok(Released::Deleted) => outcome = Some(Released::Deleted),
                Ok(Released::Kept) if outcome != Some(Released::Deleted) => outcome = Some(Released::Kept),
                Ok(r) => {
                    outcome.get_or_insert(r);
                }
                Err(f) => faults.push(f),
            }
        }
        // A node that did not answer may still hold the lock: that is a failure to retry (a
        // retry finds the nodes already released "not ours", which is fine), never a success.
        if !faults.is_empty() {
            return Err(fault::worst(faults));
        }
        outcome.ok_or_else(|| Fault::Internal("no node to release on".into()))
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

/// What a release found at several keys, as one outcome: deleted if any was, else kept if
/// any was, else not ours.
fn merge(a: Released, b: Released) -> Released {
    match (a, b) {
        (Released::Deleted, _) | (_, Released::Deleted) => Released::Deleted,
        (Released::Kept, _) | (_, Released::Kept) => Released::Kept,
        _ => Released::NotOurs,
    }
}

async fn acquire_on(node: &mut Conn, ask: &Ask<'_>) -> Result<NodeAcquired, Fault> {
    let Ask { ref keys, value, kind, ttl, record, join, arrival } = *ask;
    let lean = (keys.len() == 1 && kind == Kind::Exclusive && record.is_none() && !join).then(|| {
        let mut script = scripts::ACQUIRE_ONE.key(&keys[0].lock);
        script.key(&keys[0].fence).key(&keys[0].queue);
        script.arg(value).arg(millis(ttl)).arg(millis(fence_ttl(ttl)));
        script
    });
    let mut script = scripts::ACQUIRE.prepare_invoke();
    for k in keys {
        script.key(&k.lock).key(&k.fence).key(&k.queue).key(&k.queue_expiry).key(&k.queue_seq);
        script.key(&k.holders);
    }
    if let Some((record, _)) = record {
        script.key(record);
    }
    script.arg(value).arg(millis(ttl)).arg(millis(fence_ttl(ttl)));
    script.arg(if join { "1" } else { "0" }).arg(millis(QUEUE_ENTRY)).arg(arrival.unwrap_or(0));
    for k in keys {
        script.arg(&k.wake_prefix);
    }
    let acquire = Call { lean, full: script };
    let reply = match call(node, &acquire).await {
        // Never the unreachable Redis `--fail-open` runs the command without. The lean acquire
        // reads before it writes: run read-only, it still finds a holder.
        Err(Fault::Unavailable(_)) if node.answers_while_unanswered(&keys[0].lock).await => {
            match peek(node, acquire.lean.as_ref()).await {
                Some(busy) => busy,
                None => {
                    return Err(Fault::Transient(
                        "a PING, but not the lock's script within --command-timeout: its writes \
                         paused (CLIENT PAUSE WRITE, as during a failover), or its scripts slow"
                            .into(),
                    ));
                }
            }
        }
        reply => reply?,
    };
    let unexpected = || replies::unexpected("acquire", &reply);
    // A key index from the script (1-based) as the group's (0-based).
    let key_at = |v: Option<&Value>| {
        replies::int(v)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| (1..=keys.len()).contains(i))
            .map(|i| i - 1)
    };
    match reply.first() {
        Some(Value::Int(1)) => {
            let fences: Option<Vec<i64>> = reply[1..].iter().map(|f| replies::fence(Some(f))).collect();
            match fences {
                Some(fences) if fences.len() == keys.len() => Ok(NodeAcquired::Granted(fences)),
                _ => Err(unexpected()),
            }
        }
        Some(Value::Int(0)) => {
            let pttl = replies::int(reply.get(1)).ok_or_else(unexpected)?;
            let pttl = u64::try_from(pttl).ok().map(Duration::from_millis);
            let holder = replies::bytes(reply.get(2)).unwrap_or_default();
            Ok(NodeAcquired::Busy {
                key: key_at(reply.get(7)).ok_or_else(unexpected)?,
                pttl,
                holder,
                holding: replies::int(reply.get(5)).and_then(|n| u64::try_from(n).ok()).unwrap_or(1),
                same_id: replies::int(reply.get(6)) == Some(1),
                position: position(reply.get(3)),
                arrival: position(reply.get(4)),
                seen: replies::fence(reply.get(8)),
            })
        }
        Some(Value::Int(3)) => Ok(NodeAcquired::Queued {
            key: key_at(reply.get(4)).ok_or_else(unexpected)?,
            first: replies::bytes(reply.get(1)).unwrap_or_default(),
            position: position(reply.get(2)),
            arrival: position(reply.get(3)),
            seen: replies::fence(reply.get(5)),
        }),
        Some(Value::Int(2)) => Ok(NodeAcquired::Done(replies::bytes(reply.get(1)).unwrap_or_default())),
        Some(Value::Int(-1)) => {
            let name = reply.get(2);
            let lock = keys
                .iter()
                .find(|k| replies::bytes(name).is_some_and(|n| n == k.lock))
                .map_or(&keys[0].lock, |k| &k.lock);
            // A name next to a lock: the lock it belongs to.
            let lock = keys
                .iter()
                .find(|k| {
                    replies::bytes(name)
                        .is_some_and(|n| [&k.queue, &k.queue_expiry, &k.holders].iter().any(|x| **x == n))
                })
                .map_or(lock, |k| &k.lock);
            Err(replies::not_a_lock(lock, reply.get(1), name))
        }
        Some(Value::Int(-2)) => {
            let k = keys[key_at(reply.get(2)).unwrap_or(0)];
            Err(fence_fault(k, &replies::text(reply.get(1))))
        }
        Some(Value::Int(-3)) => {
            let k = keys[key_at(reply.get(3)).unwrap_or(0)];
            Err(mismatch(
                k,
                kind,
                &replies::bytes(reply.get(1)).unwrap_or_default(),
                replies::int(reply.get(2)) == Some(1),
            ))
        }
        _ => Err(unexpected()),
    }
}

/// A holder (`held`) or a queued waiter of the key, its value given, uses a kind of lock this
/// run's does not go with.
fn mismatch(keys: &Keys, mine: Kind, theirs: &[u8], held: bool) -> Fault {
    let (kind, who) = match Holder::parse(theirs) {
        Some(h) => (h.kind, format!("{} (pid {}, token {}…)", h.host, h.pid, h.token_prefix())),
        None => (Kind::Exclusive, "a value not written by redlock-run".to_owned()),
    };
    let flag = |k: Kind| match k {
        Kind::Exclusive => "an exclusive lock (no --shared, no --limit or --limit 1)".to_owned(),
        Kind::Shared => "--shared".to_owned(),
        Kind::Limit(n) => format!("--limit {n}"),
    };
    Fault::WrongType(format!(
        "lock {} is {} with {} by {who}, but this run asks for {}; every run on a key must use the \
         same kind of lock: exclusive and --shared runs go together, --limit N only with the same N",
        show_key(&keys.lock),
        if held { "in use" } else { "waited for" },
        flag(kind),
        flag(mine)
    ))
}

/// A place in the queue (`false` from Lua when the run did not join).
fn position(reply: Option<&Value>) -> Option<u64> {
    replies::int(reply).and_then(|p| u64::try_from(p).ok()).filter(|p| *p > 0)
}

/// The fence counter could not be bumped (the lock was not taken): denied by the ACL, Redis
/// out of memory or read-only, the counter at its maximum, or not a counter at all.
fn fence_fault(keys: &Keys, error: &str) -> Fault {
    let fence = show_key(&keys.fence);
    let code = error.split_whitespace().next().unwrap_or_default();
    // Valkey words a script's ACL refusal "ERR ACL failure in script: … no permissions to run …".
    if error.starts_with("NOPERM")
        || error.contains("can't run this command")
        || error.contains("no permissions to run")
    {
        Fault::Denied(format!("bumping the fence counter {fence}: {error}"))
    } else if fault::is_transient(code) {
        Fault::Transient(format!("bumping the fence counter {fence}: {error}"))
    } else if error.contains("would overflow") {
        Fault::WrongType(format!(
            "fence counter {fence} is at the largest value Redis can hold ({}) and cannot be increased \
             any further; the lock was not taken. Fenced resources that stored it reject every lower \
             fence: reset the highest fence they keep, then delete {fence} (a new counter starts from \
             the server clock)",
            i64::MAX
        ))
    } else {
        Fault::WrongType(format!(
            "fence counter {fence} is not an integer ({error}); it was left untouched and the lock not taken"
        ))
    }
}

/// The release of `keys` (one group), for [`release_on`].
/// How a release goes, besides the keys: `keep` (`--min-hold`), whether to announce it even
/// where the lock was not ours (Redlock), how long to take the lock for a waiter it hands over
/// to (zero: never), and the fence counter's TTL.
struct Release {
    keep: Duration,
    announce: bool,
    grant: Duration,
    fence_ttl: Duration,
}

fn release_script<'k>(
    keys: impl Iterator<Item = &'k Keys> + Clone,
    value: &str,
    record: Option<&(Vec<u8>, Duration)>,
    how: &Release,
) -> scripts::Invocation {
    let mut script = scripts::RELEASE.prepare_invoke();
    for k in keys.clone() {
        script.key(&k.lock).key(&k.fence).key(&k.queue).key(&k.queue_expiry).key(&k.holders);
    }
    if let Some((key, _)) = record {
        script.key(key);
    }
    script.arg(value).arg(millis(how.keep)).arg(if how.announce { "1" } else { "0" });
    match record {
        Some((_, ttl)) => script.arg(Success::now().value()).arg(millis(*ttl)),
        None => script.arg("").arg(0),
    };
    script.arg(millis(how.grant)).arg(millis(how.fence_ttl));
    for k in keys {
        script.arg(&k.released_channel).arg(&k.wake_prefix);
    }
    script
}

async fn release_on(node: &mut Conn, script: &Call) -> Result<Released, Fault> {
    let reply = call(node, script).await?;
    match reply.first() {
        Some(Value::Int(0)) | None => {}
        error => {
            tracing::warn!("could not record the success of --idempotency-key: {}", replies::text(error))
        }
    }
    let outcomes =
        reply.get(1..).filter(|o| !o.is_empty()).ok_or_else(|| replies::unexpected("release", &reply))?;
    let mut merged = None;
    for outcome in outcomes {
        let got = match outcome {
            Value::Int(1) => Released::Deleted,
            Value::Int(2) => Released::Kept,
            Value::Int(0) => Released::NotOurs,
            _ => return Err(replies::unexpected("release", &reply)),
        };
        merged = Some(merged.map_or(got, |m| merge(m, got)));
    }
    Ok(merged.expect("not empty"))
}

/// The lean acquire's busy answer, run read-only (where Redis runs that while its writes are
/// paused): `None` when the lock is free (its first write fails) or the call is not of the lean
/// shape.
async fn peek(node: &mut Conn, lean: Option<&scripts::Invocation>) -> Option<Vec<Value>> {
    let reply: Vec<Value> = node.invoke_read_only(lean?).await.ok()?;
    matches!(reply.first(), Some(Value::Int(0))).then_some(reply)
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
