//! Giving the lock back: compare-and-delete on every node, holding on until `--min-hold`, and
//! the hand-over to the first waiter.

use super::*;

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

/// Whether the success record of `--idempotency-key` was written with a release that found it
/// due: `Err` says why no node wrote it.
pub type Recorded = Result<(), String>;

impl Lock {
    /// Deletes every key on every node where it still holds our value and tells waiters — or,
    /// with `keep`, lets it live that much longer (`--min-hold`). With `succeeded` and
    /// `--idempotency-key`, records the success in the same round trip (see [`Recorded`]).
    pub async fn release(&mut self, keep: Duration, succeeded: bool) -> Result<(Released, Recorded), Fault> {
        let all = 0..self.groups.len();
        self.release_groups(all, keep, succeeded).await
    }

    pub(super) async fn release_groups(
        &mut self,
        groups: std::ops::Range<usize>,
        keep: Duration,
        succeeded: bool,
    ) -> Result<(Released, Recorded), Fault> {
        // Only a queue hands over.
        let grant = if self.queues() { self.grant } else { Duration::ZERO };
        let Lock { nodes, keys, groups: all, value, record, ttl, kind, waiters, may_hold, held, .. } = self;
        // Waiters of a quorum listen on one node, which may not have held our lock.
        let several = nodes.len() > 1;
        let announce = several && *held;
        let cluster = nodes[0].is_cluster();
        let release = Release { keep, announce, grant, fence_ttl: fence_ttl(*ttl) };
        let scripts: Vec<_> = all[groups]
            .iter()
            .map(|group| {
                let record = record.as_ref().filter(|_| succeeded && group.contains(&0));
                let lean = (*kind == Kind::Exclusive
                    && !*waiters
                    && group.len() == 1
                    && record.is_none()
                    && keep.is_zero()
                    && !several)
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
        let answers = futures_util::future::join_all(nodes.iter_mut().zip(may_hold.iter()).map(
            |(node, &may_hold)| async move {
                let mut outcome = None;
                let mut recorded = Ok(());
                for script in scripts {
                    let (got, record) = match release_on(node, script).await {
                        Ok(got) => got,
                        // A node that never held the lock has nothing to give back.
                        Err(f) if !may_hold => {
                            tracing::debug!("release: {} (which never held the lock): {f}", node.target);
                            (Released::NotOurs, Err(format!("{} never held the lock", node.target)))
                        }
                        Err(f) => return Err(f),
                    };
                    outcome = Some(outcome.map_or(got, |o| merge(o, got)));
                    recorded = recorded.and(record);
                }
                Ok((outcome.ok_or_else(|| Fault::Internal("no key to release".into()))?, recorded))
            },
        ))
        .await;
        let n = answers.len();
        let mut faults = Vec::new();
        let mut outcome = None;
        let (mut written, mut not_written) = (0, None);
        for answer in answers {
            match answer {
                Ok((released, record)) => {
                    match record {
                        Ok(()) => written += 1,
                        Err(why) => not_written = Some(why),
                    }
                    match released {
                        Released::Deleted => outcome = Some(Released::Deleted),
                        Released::Kept if outcome != Some(Released::Deleted) => {
                            outcome = Some(Released::Kept)
                        }
                        r => {
                            outcome.get_or_insert(r);
                        }
                    }
                }
                Err(f) => faults.push(f),
            }
        }
        // A node that did not answer may still hold the lock: that is a failure to retry (a
        // retry finds the nodes already released "not ours", which is fine), never a success —
        // but for a minority of a quorum, whose lock no run can count on: it expires there.
        if !faults.is_empty() && (n == 1 || n - faults.len() < quorum(n)) {
            return Err(fault::worst(faults));
        }
        for fault in &faults {
            tracing::debug!(
                "release: a node of the quorum did not answer ({fault}); its copy expires by itself"
            );
        }
        // The record counts where a run would find it: on the node, or on a majority of a quorum
        // (a minority that has it may be the part that is down when the next run asks).
        let recorded = match not_written {
            Some(why) if written < quorum(n) => Err(if n == 1 {
                why
            } else {
                format!("written on {written} of {n} nodes, {} needed; {why}", quorum(n))
            }),
            _ => Ok(()),
        };
        Ok((outcome.ok_or_else(|| Fault::Internal("no node to release on".into()))?, recorded))
    }
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
) -> scripts::LuaCall {
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

async fn release_on(node: &mut Conn, script: &Call) -> Result<(Released, Recorded), Fault> {
    let reply = call(node, script).await?;
    let recorded = match reply.first() {
        Some(Value::Int(0)) | None => Ok(()),
        error => Err(format!("{} answered: {}", node.target, replies::text(error))),
    };
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
    Ok((merged.expect("not empty"), recorded))
}
