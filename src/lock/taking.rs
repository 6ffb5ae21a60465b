//! Taking the lock: one attempt on every node, each node's answer, and what a busy lock tells
//! (its holder, the queue, a kind that does not go with this run's).

use super::*;

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
        // Until this attempt succeeds: a lock given back for too little lease left and tried
        // again is not held, and the release after a failed attempt is not a holder's.
        self.held = false;
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
        // Which nodes failed, how, and whether that is a mistake to fix rather than an outage.
        let mut failed: Vec<(usize, String, bool)> = Vec::new();
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
                Err(f) => {
                    let mistake = matches!(f, Fault::Config(_) | Fault::Denied(_) | Fault::WrongType(_));
                    failed.push((i, f.to_string(), mistake));
                    faults.push(f);
                }
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
        self.waiters |= join && (queued.is_some() || !busy.is_empty());
        let granted = granted_by.len();
        let (busy_answers, queued_answer, done_answer) = (busy.len(), queued.is_some(), done.is_some());
        if granted >= quorum && done.is_none() {
            // A node that answers but can never hold the lock (a Sentinel, a refusal, TLS that
            // cannot work) leaves the quorum with less room than it seems to have.
            for (i, why, _) in failed.iter().filter(|(_, _, mistake)| *mistake) {
                let target = &self.nodes[*i].target;
                let why =
                    if why.contains(target.as_str()) { why.clone() } else { format!("{target}: {why}") };
                tracing::warn!("{why}; the lock is held on the other nodes");
            }
            if n == 1 || self.raise_fences(g, &granted_by, &fences).await >= quorum {
                // A node that did not answer in time may still carry out the request.
                for (i, may_hold) in self.may_hold.iter_mut().enumerate() {
                    *may_hold = granted_by.contains(&i) || self.nodes[i].unanswered();
                }
                self.held = true;
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
        let worst = fault::worst(faults);
        if n == 1 || failed.is_empty() {
            return Err(worst);
        }
        // A quorum: which nodes failed and how many answered, not every node as unreachable.
        failed.sort();
        let answered = granted + busy_answers + usize::from(queued_answer) + usize::from(done_answer);
        let mut nodes: Vec<String> =
            failed.iter().map(|(i, why, _)| format!("{}: {why}", self.nodes[*i].target)).collect();
        let unasked = n - answered - failed.len();
        if unasked > 0 {
            // Not waited for once a majority could no longer grant.
            nodes.push(format!("{unasked} more not waited for"));
        }
        let why = format!("{answered} of {n} nodes answered, {quorum} needed; {}", nodes.join("; "));
        Err(worst.with_message(why))
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
            match peek(node, acquire.lean.as_ref(), keys[0], value).await {
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
        Some(h) => (h.kind, format!("{}, token {}…", h.who(), h.token_shown())),
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
    // The error's code: its first word, after the `@user_script: 24: -` Redis 6.2 puts before
    // the error of a command inside a script.
    let code = error
        .split_whitespace()
        .map(|w| w.trim_start_matches('-'))
        .find(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_uppercase()))
        .unwrap_or_default();
    // Valkey words a script's ACL refusal "ERR ACL failure in script: … no permissions to run …".
    if code == "NOPERM" || error.contains("can't run this command") || error.contains("no permissions to run")
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

/// The lean acquire's busy answer, run read-only (where Redis runs that while its writes are
/// paused): `None` when the lock is free (its first write fails) or the call is not of the lean
/// shape.
async fn peek(
    node: &mut Conn,
    lean: Option<&scripts::LuaCall>,
    keys: &Keys,
    value: &str,
) -> Option<Vec<Value>> {
    let reply: Vec<Value> = match node.invoke_read_only(lean?).await {
        Ok(reply) => reply,
        // Redis 6.2 has no EVALSHA_RO: the script's reads, one after the other (plain reads go
        // on while writes are paused).
        Err(_) => {
            let queued: i64 = node.query(redis::cmd("EXISTS").arg(&keys.queue), None).await.ok()?;
            let holder: Option<Vec<u8>> = node.query(redis::cmd("GET").arg(&keys.lock), None).await.ok()?;
            let holder = holder.filter(|h| queued == 0 && h != value.as_bytes())?;
            let pttl: i64 = node.query(redis::cmd("PTTL").arg(&keys.lock), None).await.ok()?;
            let no = Value::Nil;
            vec![Value::Int(0), Value::Int(pttl), Value::BulkString(holder), no.clone(), no.clone()]
                .into_iter()
                .chain([Value::Int(1), Value::Int(0), Value::Int(1), no])
                .collect()
        }
    };
    matches!(reply.first(), Some(Value::Int(0))).then_some(reply)
}

#[cfg(test)]
mod tests {
    use super::{Fault, Keys, fence_fault};

    #[test]
    fn a_fence_counter_refused_by_redis_6_2_is_an_outage_not_corruption() {
        let keys = Keys::new(b"k");
        for error in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "@user_script: 24: -OOM command not allowed when used memory > 'maxmemory'.",
            "@user_script: 24: -READONLY You can't write against a read only replica.",
        ] {
            assert!(matches!(fence_fault(&keys, error), Fault::Transient(_)), "{error}");
        }
        let denied = "@user_script: 24: -NOPERM this user has no permissions to run the 'incr' command";
        assert!(matches!(fence_fault(&keys, denied), Fault::Denied(_)));
        let corrupt = "ERR value is not an integer or out of range";
        assert!(matches!(fence_fault(&keys, corrupt), Fault::WrongType(_)));
    }
}
