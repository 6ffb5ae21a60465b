//! The Redis side. This file owns the lock itself: acquire / renew / release on one node or on
//! each node of a Redlock quorum, and the quorum rule. Around it: connecting per topology
//! (`conn`, `sentinel`), what went wrong (`fault`, `mistakes`), URLs (`url`), the scripts and
//! their replies (`scripts`, `replies`), what is stored (`keys`, `values`), the lease deadline
//! (`lease`), and the operator's view (`admin`). The retry schedules that use these single
//! attempts are beside the run's steps: `acquire.rs`, `renew.rs`, `release.rs`.

pub mod admin;
mod conn;
mod fault;
pub mod keys;
mod lease;
mod mistakes;
mod replies;
mod scripts;
mod sentinel;
pub mod url;

#[cfg(test)]
mod queue_tests;
mod values;

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::Value;

use crate::config::Idempotency;

pub use conn::Conn;
pub use fault::Fault;
pub use keys::Keys;
pub use lease::{Lease, drift};
pub use values::{Holder, Kind, Success, rfc3339_ms};

/// How long the fence counter outlives the last acquisition (it is re-initialised from the
/// server clock when it is gone, so expiring it is safe).
const FENCE_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// What one acquisition attempt found.
#[derive(Debug)]
pub enum Acquired {
    /// The lock is ours: its fence and the lease measured from just before the request.
    Yes { fence: i64, lease: Lease },
    /// Someone else holds it: the holder this run waits for, its remaining TTL (`None`: the
    /// key never expires) and value; `holding`: how many hold; `same_id`: that holder runs the
    /// same `--idempotency-key`; `position`: this run's place in the queue when it joined it
    /// (1 = next).
    Busy { pttl: Option<Duration>, holder: Vec<u8>, holding: u64, same_id: bool, position: Option<u64> },
    /// The holders would admit this run, but other runs are queued for it ahead of this one:
    /// the one it waits for (its lock value), and this run's place when it joined the queue.
    Queued { first: Vec<u8>, position: Option<u64> },
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

/// How many of `n` nodes must agree for the lock to be held (Redlock's majority): ⌊n/2⌋+1.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// One lock owner: the connections, the key names and the value that proves ownership.
///
/// With one node this is the plain lease lock. With N independent masters (Redlock) every
/// operation goes to all of them in parallel and counts as done when a majority agrees
/// ([`quorum`]) for the lock, the same for each renewal.
pub struct Lock {
    nodes: Vec<Conn>,
    keys: Keys,
    value: String,
    ttl: Duration,
    /// The success record's key and lifetime, with `--idempotency-key`.
    record: Option<(Vec<u8>, Duration)>,
    /// This run's arrival number in the queue, once it has joined: if its entry lapses, it
    /// joins again with it and gets its place back.
    arrival: Option<u64>,
    kind: Kind,
}

/// What one node is asked for in an acquisition.
struct Ask<'a> {
    keys: &'a Keys,
    value: &'a str,
    kind: Kind,
    ttl: Duration,
    record: Option<&'a (Vec<u8>, Duration)>,
    join: bool,
    arrival: Option<u64>,
}

/// One node's answer to an acquisition.
enum NodeAcquired {
    Granted(i64),
    Busy {
        pttl: Option<Duration>,
        holder: Vec<u8>,
        holding: u64,
        same_id: bool,
        position: Option<u64>,
        arrival: Option<u64>,
    },
    Queued {
        first: Vec<u8>,
        position: Option<u64>,
        arrival: Option<u64>,
    },
    Done(Vec<u8>),
}

impl Lock {
    pub fn new(
        nodes: Vec<Conn>,
        key: &[u8],
        ttl: Duration,
        idempotency: Option<&Idempotency>,
        kind: Kind,
    ) -> Result<Self, Fault> {
        let keys = Keys::new(key);
        let record = idempotency.map(|i| (keys.record(&i.id), i.ttl));
        let value = Holder::this_process(kind)?.value();
        Ok(Lock { nodes, keys, value, ttl, record, arrival: None, kind })
    }

    /// Whether waiters queue in arrival order: on one Redis (a single node, the Sentinels'
    /// master, a Cluster). A Redlock quorum does not queue: independent queues could each put
    /// another waiter first, and no one would get a majority.
    pub fn queues(&self) -> bool {
        self.nodes.len() == 1
    }

    /// Subscribes to what wakes a waiter, on the first node that accepts: its own turn in the
    /// queue ([`Lock::queues`]), or else the announcement of each release.
    pub async fn watch_releases(&mut self) -> Result<redis::aio::PubSubStream, Fault> {
        let channel =
            if self.queues() { self.keys.wake(self.token()) } else { self.keys.released_channel.clone() };
        let mut last = Fault::Unavailable("no node to subscribe to".into());
        for node in &mut self.nodes {
            match node.subscribe(&channel).await {
                Ok(stream) => return Ok(stream),
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

    /// The value stored at the key: `<token> <host> <pid> <start unix ms>`.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The random token that starts the value.
    fn token(&self) -> &str {
        self.value.split(' ').next().unwrap_or_default()
    }

    /// Gives up this run's place in the queue (its wait ended without the lock), waking the
    /// next waiter if the lock is free. Best effort: an entry left behind lapses by itself.
    pub async fn leave_queue(&mut self) -> Result<(), Fault> {
        if !self.queues() {
            return Ok(());
        }
        let Lock { nodes, keys, value, .. } = self;
        let mut script = scripts::LEAVE.key(&keys.lock);
        script.key(&keys.queue).key(&keys.queue_expiry).arg(value.as_str()).arg(&keys.wake_prefix);
        nodes[0].invoke::<i64>(&script).await.map(drop)
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

    /// One attempt on every node at once, given up as soon as a majority can no longer grant.
    /// The lease counts from just before the requests went out, so the time the slowest needed
    /// node took is already spent. What a failed attempt took is given back.
    /// With `join`, a busy lock puts this run in the queue (or keeps its place there): see
    /// [`Lock::queues`].
    pub async fn acquire(&mut self, join: bool) -> Result<Acquired, Fault> {
        let n = self.nodes.len();
        let quorum = quorum(n);
        let join = join && self.queues();
        let Lock { nodes, keys, value, ttl, record, arrival, kind } = self;
        let ask = Ask {
            keys,
            value: value.as_str(),
            kind: *kind,
            ttl: *ttl,
            record: record.as_ref(),
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
        let mut fence = i64::MIN;
        // Each node's busy answer, as `Acquired::Busy`.
        let mut busy: Vec<Acquired> = Vec::new();
        let mut queued = None;
        // This run's arrival number, when the (one) queueing node answered with it.
        let mut new_arrival = None;
        let mut faults: Vec<Fault> = Vec::new();
        let mut done = None;
        while let Some((i, answer)) = pending.next().await {
            match answer {
                Ok(NodeAcquired::Granted(f)) => {
                    granted_by.push(i);
                    fence = fence.max(f);
                }
                Ok(NodeAcquired::Busy { pttl, holder, holding, same_id, position, arrival }) => {
                    new_arrival = new_arrival.or(arrival);
                    busy.push(Acquired::Busy { pttl, holder, holding, same_id, position })
                }
                Ok(NodeAcquired::Queued { first, position, arrival }) => {
                    new_arrival = new_arrival.or(arrival);
                    queued = Some((first, position))
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
        let granted = granted_by.len();
        if granted >= quorum && done.is_none() {
            if n == 1 || self.raise_fence(&granted_by, fence).await >= quorum {
                return Ok(Acquired::Yes { fence, lease: Lease::new(sent, self.ttl) });
            }
            faults.push(Fault::Unavailable("could not raise the fence counter on a majority".into()));
        }
        if n > 1 {
            // Nodes that granted, or may still grant an abandoned request, are released; the
            // caller retries as it sees fit.
            let _ = self.release(Duration::ZERO, false).await;
        }
        if let Some(record) = done {
            return Ok(Acquired::AlreadyDone { record });
        }
        if let Some((first, position)) = queued {
            // Only one node queues (see `queues`).
            return Ok(Acquired::Queued { first, position });
        }
        if busy.len() > n - quorum || (faults.is_empty() && !busy.is_empty()) {
            let left = |b: &Acquired| match b {
                Acquired::Busy { pttl, .. } => pttl.unwrap_or(Duration::MAX),
                _ => Duration::MAX,
            };
            let soonest = busy.into_iter().min_by_key(left);
            return Ok(soonest.expect("busy is not empty"));
        }
        Err(fault::worst(faults))
    }

    /// Redlock: raises the fence counter on the nodes that granted to the fence handed out;
    /// returns on how many it was confirmed. (The nodes' counters drift apart otherwise, and a
    /// later majority could hand out a lower fence.)
    async fn raise_fence(&mut self, granted_by: &[usize], fence: i64) -> usize {
        let Lock { nodes, keys, ttl, .. } = self;
        let mut script = scripts::RAISE_FENCE.key(&keys.fence);
        script.arg(fence).arg(millis(FENCE_TTL.max(*ttl * 2)));
        let raised = futures_util::future::join_all(
            nodes
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| granted_by.contains(i))
                .map(|(_, node)| node.invoke::<i64>(&script)),
        )
        .await;
        raised.iter().filter(|r| matches!(r, Ok(1))).count()
    }

    /// Extends the lease if the key still holds our value on a majority. `Ok(false)`: it does
    /// not, and cannot (lost).
    pub async fn renew(&mut self) -> Result<bool, Fault> {
        let n = self.nodes.len();
        let quorum = quorum(n);
        let Lock { nodes, keys, value, ttl, .. } = self;
        let mut script = scripts::RENEW.key(&keys.lock);
        script.key(&keys.holders).arg(value.as_str()).arg(millis(*ttl));
        let mut pending: FuturesUnordered<_> =
            nodes.iter_mut().map(|node| node.invoke::<i64>(&script)).collect();
        let (mut renewed, mut lost) = (0, 0);
        let mut faults = Vec::new();
        while let Some(answer) = pending.next().await {
            match answer {
                Ok(1) => renewed += 1,
                Ok(_) | Err(Fault::WrongType(_)) => lost += 1,
                Err(f) => faults.push(f),
            }
            // Lost as soon as a majority can no longer confirm; renewed when every node has
            // answered (each bounded by the per-node timeout), so that no live node's copy lapses.
            if lost > n - quorum {
                return Ok(false);
            }
        }
        if renewed >= quorum {
            return Ok(true);
        }
        Err(if faults.is_empty() {
            Fault::Unavailable(format!("renewed on {renewed} of {n} nodes, {quorum} needed"))
        } else {
            fault::worst(faults)
        })
    }

    /// Deletes the key on every node where it still holds our value and tells waiters — or,
    /// with `keep`, lets it live that much longer (`--min-hold`). With `succeeded` and
    /// `--idempotency-key`, records the success in the same round trip.
    pub async fn release(&mut self, keep: Duration, succeeded: bool) -> Result<Released, Fault> {
        let Lock { nodes, keys, value, record, .. } = self;
        let record = record.as_ref().filter(|_| succeeded);
        // Waiters of a quorum listen on one node, which may not have held our lock.
        let announce = nodes.len() > 1;
        let answers = futures_util::future::join_all(
            nodes.iter_mut().map(|node| release_on(node, keys, value, keep, record, announce)),
        )
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

async fn acquire_on(node: &mut Conn, ask: &Ask<'_>) -> Result<NodeAcquired, Fault> {
    let Ask { keys, value, kind, ttl, record, join, arrival } = *ask;
    let mut script = scripts::ACQUIRE.key(&keys.lock);
    script.key(&keys.fence).key(&keys.queue).key(&keys.queue_expiry).key(&keys.queue_seq);
    script.key(&keys.holders);
    if let Some((record, _)) = record {
        script.key(record);
    }
    script.arg(value).arg(millis(ttl)).arg(millis(FENCE_TTL.max(ttl * 2)));
    script.arg(if join { "1" } else { "0" }).arg(millis(QUEUE_ENTRY)).arg(&keys.wake_prefix);
    script.arg(arrival.unwrap_or(0));
    let reply: Vec<Value> = node.invoke(&script).await?;
    let unexpected = || replies::unexpected("acquire", &reply);
    match reply.first() {
        Some(Value::Int(1)) => {
            Ok(NodeAcquired::Granted(replies::fence(reply.get(1)).ok_or_else(unexpected)?))
        }
        Some(Value::Int(0)) => {
            let pttl = replies::int(reply.get(1)).ok_or_else(unexpected)?;
            let pttl = u64::try_from(pttl).ok().map(Duration::from_millis);
            let holder = replies::bytes(reply.get(2)).unwrap_or_default();
            Ok(NodeAcquired::Busy {
                pttl,
                holder,
                holding: replies::int(reply.get(5)).and_then(|n| u64::try_from(n).ok()).unwrap_or(1),
                same_id: replies::int(reply.get(6)) == Some(1),
                position: position(reply.get(3)),
                arrival: position(reply.get(4)),
            })
        }
        Some(Value::Int(3)) => Ok(NodeAcquired::Queued {
            first: replies::bytes(reply.get(1)).unwrap_or_default(),
            position: position(reply.get(2)),
            arrival: position(reply.get(3)),
        }),
        Some(Value::Int(2)) => Ok(NodeAcquired::Done(replies::bytes(reply.get(1)).unwrap_or_default())),
        Some(Value::Int(-1)) => Err(replies::not_a_lock(&keys.lock, reply.get(1), reply.get(2))),
        Some(Value::Int(-2)) => Err(fence_fault(keys, &replies::text(reply.get(1)))),
        Some(Value::Int(-3)) => Err(mismatch(
            keys,
            kind,
            &replies::bytes(reply.get(1)).unwrap_or_default(),
            replies::int(reply.get(2)) == Some(1),
        )),
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
    if error.starts_with("NOPERM") || error.contains("can't run this command") {
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

async fn release_on(
    node: &mut Conn,
    keys: &Keys,
    value: &str,
    keep: Duration,
    record: Option<&(Vec<u8>, Duration)>,
    announce: bool,
) -> Result<Released, Fault> {
    let mut script = scripts::RELEASE.key(&keys.lock);
    script.key(&keys.queue).key(&keys.queue_expiry).key(&keys.holders);
    if let Some((key, _)) = record {
        script.key(key);
    }
    script.arg(value).arg(&keys.released_channel).arg(millis(keep)).arg(if announce { "1" } else { "0" });
    match record {
        Some((_, ttl)) => script.arg(Success::now().value()).arg(millis(*ttl)),
        None => script.arg("").arg(0),
    };
    script.arg(&keys.wake_prefix);
    let reply: Vec<Value> = node.invoke(&script).await?;
    match reply.get(1) {
        Some(Value::Int(0)) | None => {}
        error => {
            tracing::warn!("could not record the success of --idempotency-key: {}", replies::text(error))
        }
    }
    match reply.first() {
        Some(Value::Int(1)) => Ok(Released::Deleted),
        Some(Value::Int(2)) => Ok(Released::Kept),
        Some(Value::Int(0)) => Ok(Released::NotOurs),
        _ => Err(replies::unexpected("release", &reply)),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A key for messages: text when it is printable UTF-8, escaped bytes otherwise.
pub fn show_key(key: &[u8]) -> String {
    format!("\"{}\"", key.escape_ascii())
}
