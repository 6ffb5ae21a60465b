//! Following a Sentinel failover while the lock is held or awaited: every Sentinel given is
//! subscribed to `+switch-master`, and each switch of our master starts a new epoch. A
//! connection made in an older epoch is to a node the Sentinels no longer name, so nothing it
//! answers confirms ownership (see `Conn`).

use std::time::Duration;

use futures_util::StreamExt;
use redis::{Client, ConnectionAddr, TlsCertificates};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::fault::Fault;
use super::url;
use crate::backoff::full_jitter;
use crate::exit::Error;

type Addr = (String, u16);

/// One Sentinel as given: a client with its own credentials and TLS, and how messages name it.
#[derive(Clone)]
pub struct Node {
    pub client: Client,
    /// `--sentinel`'s URL without its password.
    pub shown: String,
}

impl Node {
    /// From a URL as `config::server::sentinel_url` writes it. The password comes from the URL, or else
    /// `password` (--sentinel-password-file, REDLOCK_SENTINEL_PASSWORD); a `rediss://` Sentinel
    /// is verified with the same TLS material as the master (`tls`, `insecure`).
    pub fn new(
        given: &str,
        password: Option<&str>,
        tls: Option<&TlsCertificates>,
        insecure: bool,
    ) -> Result<Self, Error> {
        let shown = url::redact_url(given);
        let info = url::parse(given, "--sentinel")?;
        // CLIENT SETINFO is not a Sentinel command either.
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if settings.db() != 0 {
            return Err(Error::Config(format!(
                "--sentinel {shown}: a Sentinel has no databases; give the master's database in \
                 --redis-url"
            )));
        }
        if settings.password().is_none()
            && let Some(password) = password
        {
            settings = settings.set_password(password);
        }
        let info = info.set_redis_settings(settings);
        let client = match info.addr().clone() {
            ConnectionAddr::Tcp(..) => Client::open(info),
            ConnectionAddr::TcpTls { host, port, tls_params, .. } => {
                let info = info.set_addr(ConnectionAddr::TcpTls { host, port, insecure, tls_params });
                match tls {
                    Some(certs) => Client::build_with_tls(info, certs.clone()),
                    None => Client::open(info),
                }
            }
            _ => {
                return Err(Error::Config(format!(
                    "--sentinel {shown}: give a Sentinel as HOST[:PORT], redis://… or rediss://…"
                )));
            }
        };
        let client = client.map_err(|e| url::invalid(given, "--sentinel", e))?;
        Ok(Node { client, shown })
    }

    pub fn is_tls(&self) -> bool {
        matches!(self.client.get_connection_info().addr(), ConnectionAddr::TcpTls { .. })
    }
}

/// What the watcher has heard.
#[derive(Debug, Clone, Default)]
struct State {
    /// Bumped by every switch of our master, and by every subscription made while one may have
    /// been missed.
    epoch: u64,
    /// The latest switch heard (old master, new master). A Sentinel that still names the old
    /// one has not caught up; the others announce the same switch, which changes nothing.
    switch: Option<(Addr, Addr)>,
    /// Subscriptions in place now.
    live: usize,
    /// Sentinels tried at least once.
    tried: usize,
    /// A connection was made while no subscription was in place: the next one to be made
    /// starts a new epoch.
    uncovered: bool,
    /// Subscriptions refused for a reason no retry changes, not yet said (see `refusals`).
    refused: Vec<String>,
}

/// One subscription per Sentinel, each re-made (with bounded backoff) when it breaks. The
/// subscriptions end when the watcher is dropped.
pub struct Watcher {
    state: watch::Sender<State>,
    tasks: Vec<JoinHandle<()>>,
    /// Whether the first subscriptions have been waited for.
    waited: bool,
}

impl Watcher {
    /// Subscribes to every Sentinel in the background; `limit` bounds each attempt.
    pub fn start(sentinels: &[Node], master: &str, limit: Duration) -> Self {
        let (state, _) = watch::channel(State::default());
        let tasks = sentinels
            .iter()
            .map(|sentinel| tokio::spawn(follow(sentinel.clone(), master.to_owned(), state.clone(), limit)))
            .collect();
        Watcher { state, tasks, waited: false }
    }

    /// Makes sure a switch from now on is heard: the first time, waits (at most `limit`) until
    /// a subscription is in place or every Sentinel has been tried. Without a subscription, the
    /// next one made starts a new epoch.
    pub async fn covered(&mut self, limit: Duration) {
        let limit = if std::mem::replace(&mut self.waited, true) { Duration::ZERO } else { limit };
        let n = self.tasks.len();
        let mut state = self.state.subscribe();
        let _ = tokio::time::timeout(limit, state.wait_for(|s| s.live > 0 || s.tried == n)).await;
        self.state.send_if_modified(|s| {
            s.uncovered = s.live == 0;
            s.uncovered
        });
    }

    /// Subscriptions refused since last asked (credentials, an ACL without the channel, TLS):
    /// said once the master is found, so that a run that fails for the same reason says it
    /// once.
    pub fn refusals(&self) -> Vec<String> {
        let mut refused = Vec::new();
        self.state.send_if_modified(|s| {
            refused = std::mem::take(&mut s.refused);
            false
        });
        refused
    }

    pub fn epoch(&self) -> u64 {
        self.state.borrow().epoch
    }

    /// The master the latest switch replaced, if any.
    pub fn demoted(&self) -> Option<Addr> {
        self.state.borrow().switch.as_ref().map(|(old, _)| old.clone())
    }

    /// Resolves once the epoch is no longer `seen`.
    pub fn changed_since(&self, seen: u64) -> impl Future<Output = ()> + Send + 'static {
        let mut state = self.state.subscribe();
        async move {
            // The sender lives as long as the watcher, and so does whoever awaits this.
            if state.wait_for(|s| s.epoch != seen).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Keeps one subscription to `sentinel` in place and reports what it hears.
async fn follow(sentinel: Node, master: String, state: watch::Sender<State>, limit: Duration) {
    let shown = &sentinel.shown;
    let mut subscribed_before = false;
    let mut failures = 0u32;
    let mut warned = false;
    loop {
        let subscribed = tokio::time::timeout(limit, subscribe(&sentinel.client)).await;
        let first = failures == 0 && !subscribed_before;
        // Not an outage that passes: refused credentials, an ACL without the channel, TLS that
        // cannot work. Kept to be said once the master is found (the master may still be found
        // through this Sentinel, but its news of a failover is not heard); in the same update
        // as the first try, so that whoever waits for the tries sees it.
        let refusal = match &subscribed {
            Ok(Err(e)) if !warned && matches!(Fault::from_redis(e), Fault::Denied(_) | Fault::Config(_)) => {
                warned = true;
                Some(format!(
                    "cannot subscribe to +switch-master at Sentinel {shown} ({e}): a failover it \
                     announces is noticed only when a request fails"
                ))
            }
            _ => None,
        };
        if refusal.is_some() || (first && !matches!(subscribed, Ok(Ok(_)))) {
            state.send_modify(|s| {
                s.tried += usize::from(first);
                s.refused.extend(refusal);
            });
        }
        match subscribed {
            Ok(Ok(mut switches)) => {
                failures = 0;
                state.send_modify(|s| {
                    s.tried += usize::from(first);
                    s.live += 1;
                    // While this subscription was down (or none was in place when the master
                    // was looked up), a switch may have gone unheard: look it up again.
                    if subscribed_before || s.uncovered {
                        s.epoch += 1;
                        s.uncovered = false;
                    }
                });
                subscribed_before = true;
                while let Some(message) = switches.next().await {
                    let payload: String = message.get_payload().unwrap_or_default();
                    let Some(switch) = parse_switch(&payload, &master) else { continue };
                    let news = state.send_if_modified(|s| {
                        if s.switch.as_ref() == Some(&switch) {
                            return false;
                        }
                        s.epoch += 1;
                        s.switch = Some(switch.clone());
                        true
                    });
                    let ((old_host, old_port), (new_host, new_port)) = switch;
                    // One Sentinel's word (it may watch another deployment's master of the
                    // same name): the master is asked of all of them again.
                    let text = format!(
                        "a Sentinel announced that master {master:?} moved from {old_host}:{old_port} \
                         to {new_host}:{new_port}; asking the Sentinels again"
                    );
                    if news {
                        tracing::info!(sentinel = %shown, "{text}");
                    } else {
                        tracing::debug!(sentinel = %shown, "{text} (already heard)");
                    }
                }
                state.send_modify(|s| s.live -= 1);
                let why = "the subscription to the Sentinel broke; subscribing again";
                tracing::debug!(sentinel = %shown, "{why}");
            }
            Ok(Err(e)) => tracing::debug!(sentinel = %shown, "cannot subscribe to the Sentinel: {e}"),
            Err(_) => tracing::debug!(sentinel = %shown, "subscribing to the Sentinel timed out"),
        }
        failures += 1;
        tokio::time::sleep(full_jitter(Duration::from_millis(100), failures, Duration::from_secs(2))).await;
    }
}

async fn subscribe(sentinel: &Client) -> redis::RedisResult<redis::aio::PubSubStream> {
    let mut pubsub = sentinel.get_async_pubsub().await?;
    pubsub.subscribe("+switch-master").await?;
    Ok(pubsub.into_on_message())
}

/// `<name> <old-ip> <old-port> <new-ip> <new-port>`, for our master only.
fn parse_switch(payload: &str, master: &str) -> Option<(Addr, Addr)> {
    let fields: Vec<&str> = payload.split(' ').collect();
    match fields[..] {
        [name, old_ip, old_port, new_ip, new_port] if name == master => {
            Some(((old_ip.to_owned(), old_port.parse().ok()?), (new_ip.to_owned(), new_port.parse().ok()?)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_switch;

    #[test]
    fn only_switches_of_our_master_count() {
        let ours = parse_switch("main 10.0.0.1 6379 10.0.0.2 6380", "main");
        assert_eq!(ours, Some((("10.0.0.1".into(), 6379), ("10.0.0.2".into(), 6380))));
        assert_eq!(parse_switch("other 10.0.0.1 6379 10.0.0.2 6380", "main"), None);
        assert_eq!(parse_switch("main 10.0.0.1 6379", "main"), None);
        assert_eq!(parse_switch("main 10.0.0.1 x 10.0.0.2 6380", "main"), None);
    }
}
