//! What Redis tells a holder between renewals: its connections track the lock keys (client
//! tracking, RESP3), so a key deleted, replaced, expired or flushed, or a connection that
//! ended, is heard at once. The renewal loop (`renew.rs`) owns the watch and decides what a
//! notice leads to; this is what it asks of the lock.

use redis::{PushKind, Value};

use super::{Call, Fault, Holding, Lock, scripts};

/// What Redis said that may mean the lock is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A lock key was changed by someone else, expired, or the database was flushed.
    Invalidated,
    /// A tracking connection ended (a restart, a failover, the network).
    Disconnected,
}

impl Lock {
    /// From the next request on, every connection tracks the keys it reads.
    pub fn watch(&mut self) {
        for node in &mut self.nodes {
            node.track();
        }
    }

    /// Every node's next request makes a new link.
    pub fn reconnect(&mut self) {
        for node in &mut self.nodes {
            node.reconnect();
        }
    }

    /// The watch is over (the command ended): new links are plain again.
    pub fn unwatch(&mut self) {
        for node in &mut self.nodes {
            node.untrack();
        }
    }

    /// The next notice about this lock from any node: invalidations of other keys the scripts
    /// read (the fence counter, the queue) are skipped. Never resolves without tracking.
    pub async fn notice(&mut self) -> Notice {
        loop {
            let Lock { nodes, keys, .. } = &mut *self;
            let (push, _, _) =
                futures_util::future::select_all(nodes.iter_mut().map(|n| Box::pin(n.pushed()))).await;
            match push.kind {
                PushKind::Disconnection => return Notice::Disconnected,
                PushKind::Invalidate => {
                    let ours = match push.data.first() {
                        // A flush (FLUSHALL, FLUSHDB) names no key.
                        Some(Value::Nil) | None => true,
                        Some(Value::Array(names)) => names.iter().any(
                            |name| matches!(name, Value::BulkString(b) if keys.iter().any(|k| k.lock == *b)),
                        ),
                        Some(_) => false,
                    };
                    if ours {
                        return Notice::Invalidated;
                    }
                }
                _ => {}
            }
        }
    }

    /// Forgets the notices heard so far (a check that follows answers for them), each link's
    /// end taken into account.
    pub fn drain_notices(&mut self) {
        for node in &mut self.nodes {
            node.drain_pushes();
        }
    }

    /// Whether every key still holds this run's value on a majority, as [`Lock::renew`] judges
    /// it, without writing, and when the soonest of them ends. Its reads arm the tracking again.
    pub async fn check(&mut self) -> Result<Holding, Fault> {
        let scripts: Vec<Call> = self
            .groups
            .iter()
            .map(|group| {
                let mut script = scripts::HELD.prepare_invoke();
                for &i in group {
                    script.key(&self.keys[i].lock);
                }
                script.arg(self.value.as_str());
                Call { lean: None, full: script }
            })
            .collect();
        self.on_majority(&scripts, "confirmed").await
    }
}
