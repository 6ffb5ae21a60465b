//! A waiter's side: the subscription that wakes it, its places in the queues, and whether the
//! run it waits behind waits for the run it is nested in.

use super::*;

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

impl Lock {
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
}
