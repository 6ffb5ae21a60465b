//! Client tracking on the connection's links: RESP3 links with `CLIENT TRACKING ON NOLOOP`
//! (at every master of a Cluster before each request that reads the lock), the notices they
//! push, and the plain links where Redis refuses.

use super::*;

/// Client tracking (`CLIENT TRACKING ON NOLOOP` on a RESP3 link): Redis pushes a notice when a
/// key the link read is changed by someone else, expires, or is flushed.
pub(super) enum Tracking {
    Off,
    /// Every link made from now on tracks; its notices, and its end, are sent here.
    On(mpsc::UnboundedSender<PushInfo>),
    /// The server, an ACL or a proxy in between refused it: renewals alone find a lost lock.
    Refused,
}

impl Conn {
    /// From now on every link tracks the keys its requests read, and [`Conn::pushed`] hears
    /// what Redis says of them; the link in use is replaced at the next request. Where Redis
    /// refuses, this says so once (debug) and the connection goes on as before.
    pub fn track(&mut self) {
        if matches!(self.tracking, Tracking::Off) {
            let (sender, pushes) = mpsc::unbounded_channel();
            self.tracking = Tracking::On(sender);
            self.pushes = Some(pushes);
            self.link = None;
        }
    }

    /// Links made from now on are plain again (the link in use stays): a release needs no
    /// notices, and a plain link sends its request at once, where a tracking one waits for the
    /// answer to `HELLO` first — so a release to a frozen Redis still waits in its socket, to
    /// run after anything sent before it.
    pub fn untrack(&mut self) {
        if matches!(self.tracking, Tracking::On(_)) {
            self.tracking = Tracking::Off;
            self.pushes = None;
        }
    }

    /// The next message a tracking link pushed: an invalidation, or the end of the link.
    /// Never resolves without tracking.
    pub async fn pushed(&mut self) -> PushInfo {
        match &mut self.pushes {
            // The sender lives in `self.tracking` as long as the receiver does.
            Some(pushes) => match pushes.recv().await {
                Some(push) => self.heard(push),
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    /// Takes every message pushed so far, without waiting.
    pub fn drain_pushes(&mut self) -> Vec<PushInfo> {
        let mut pushes = Vec::new();
        while let Some(push) = self.pushes.as_mut().and_then(|p| p.try_recv().ok()) {
            pushes.push(self.heard(push));
        }
        pushes
    }

    pub(super) fn heard(&mut self, push: PushInfo) -> PushInfo {
        // The next request makes a new link at once rather than fail on this one (a Cluster's
        // client reconnects the node itself).
        if push.kind == redis::PushKind::Disconnection && !self.is_cluster() {
            self.link = None;
        }
        push
    }

    /// Before a request that reads the lock: in a Cluster, whose client reaches each master on a
    /// link of its own and a slot may move to any of them (or to a replica promoted meanwhile),
    /// tracking is turned on at every master first. Elsewhere each tracking link has it from
    /// the start.
    pub async fn arm(&mut self) -> Result<(), Fault> {
        if !(matches!(self.tracking, Tracking::On(_)) && self.is_cluster()) {
            return Ok(());
        }
        let Link::Cluster(c) = self.link().await? else { return Ok(()) };
        let every =
            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::AllSucceeded)));
        match c.route_command(tracking_on(), every).await {
            Ok(_) => Ok(()),
            Err(e) if refuses_tracking(&e) => {
                self.refuse(&e);
                Ok(())
            }
            Err(e) => Err(self.failed(&e)),
        }
    }

    /// Tracking cannot work here: said once, and the links go on without it.
    pub(super) fn refuse(&mut self, why: &RedisError) {
        tracing::debug!(
            "Redis refused client tracking ({why}): a lost lock is found at the next renewal, not at once"
        );
        self.tracking = Tracking::Refused;
        self.pushes = None;
    }
}

/// Notices for the keys this link reads, but not for its own writes.
pub(super) fn tracking_on() -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("TRACKING").arg("ON").arg("NOLOOP");
    cmd
}

/// Redis answered that it cannot track: no RESP3 (no `HELLO`, or a proxy that does not pass
/// it), or `CLIENT TRACKING` unknown or not allowed to this user (`HELLO` itself is allowed to
/// every user). A wrong password is no such answer: it fails the same without tracking.
pub(super) fn refuses_tracking(e: &RedisError) -> bool {
    e.kind() == ErrorKind::RESP3NotSupported
        || e.code() == Some("NOPERM")
        || matches!(Fault::from_redis(e), Fault::Failed(_))
}
