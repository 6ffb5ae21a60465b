//! What Redis tells a holder between renewals: its connections track the lock keys (client
//! tracking, RESP3), so a key deleted, replaced, expired or flushed, or a connection that
//! ended, is heard at once. The renewal loop (`renew.rs`) owns the watch and decides what a
//! notice leads to; this is what it asks of the lock.

use redis::{PushInfo, PushKind, Value};

use super::{Call, Conn, Fault, Holding, Keys, Lock, scripts};

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

    /// The watch is over (the command ended): new links are plain again. What it heard of
    /// waiters is kept for the release.
    pub fn unwatch(&mut self) {
        self.drain_notices();
        for node in &mut self.nodes {
            node.untrack();
        }
    }

    /// The next notice about this lock from any node: invalidations of other keys the scripts
    /// read (the fence counter, the queue) are skipped. Never resolves without tracking.
    pub async fn notice(&mut self) -> Notice {
        loop {
            let (push, _, _) =
                futures_util::future::select_all(self.nodes.iter_mut().map(|n| Box::pin(n.pushed()))).await;
            if let Some(notice) = self.heard(&push) {
                return notice;
            }
        }
    }

    /// What `push` says of this lock, if anything; a queue that changed means waiters came.
    fn heard(&mut self, push: &PushInfo) -> Option<Notice> {
        match push.kind {
            PushKind::Disconnection => Some(Notice::Disconnected),
            PushKind::Invalidate => match push.data.first() {
                // A flush (FLUSHALL, FLUSHDB) names no key.
                Some(Value::Nil) | None => Some(Notice::Invalidated),
                Some(Value::Array(names)) => {
                    let named = |of: fn(&Keys) -> &Vec<u8>| {
                        names.iter().any(
                            |n| matches!(n, Value::BulkString(b) if self.keys.iter().any(|k| of(k) == b)),
                        )
                    };
                    self.waiters |= named(|k| &k.queue);
                    named(|k| &k.lock).then_some(Notice::Invalidated)
                }
                Some(_) => None,
            },
            _ => None,
        }
    }

    /// Forgets the notices heard so far (a check that follows answers for them), each link's
    /// end taken into account, but not the waiters they told of.
    pub fn drain_notices(&mut self) {
        let pushes: Vec<PushInfo> = self.nodes.iter_mut().flat_map(Conn::drain_pushes).collect();
        for push in &pushes {
            self.heard(push);
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
                    script.key(&self.keys[i].lock).key(&self.keys[i].queue);
                }
                script.arg(self.value.as_str());
                Call { lean: None, full: script }
            })
            .collect();
        self.on_majority(&scripts, "confirmed").await
    }
}
