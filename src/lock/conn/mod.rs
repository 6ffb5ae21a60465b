//! One Redis connection with bounded I/O, reconnecting after a failure. Behind it: a single
//! node (TCP, TLS or a Unix socket), the master a Sentinel names (found again after each
//! failure), or a Redis Cluster (MOVED/ASK followed by the client).

use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue,
    IntoConnectionInfo, ProtocolVersion, PushInfo, RedisConnectionInfo, RedisError, TlsCertificates,
};
use tokio::sync::mpsc;

use super::fault::{self, Fault};
use super::keys;
use super::mistakes;
use super::replies;
use super::sentinel::{Node, Watcher};
use super::settings::{RedisConfig, Topology};
use super::url::{self, redact_url};
use crate::exit::Error;

mod discovery;
mod tracking;

use tracking::{Tracking, refuses_tracking, tracking_on};

/// The live connection.
enum Link {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

pub struct Conn {
    /// The URL's settings: scheme, credentials, database; the address is the node's, or a
    /// placeholder replaced by what Sentinel names.
    info: ConnectionInfo,
    tls: Option<TlsCertificates>,
    topology: Topology,
    config: AsyncConnectionConfig,
    link: Option<Link>,
    /// The client of the node in use (for subscriptions).
    client: Option<Client>,
    /// No request has been answered on this connection yet.
    fresh: bool,
    /// The last request was sent and got no reply within the command timeout.
    timed_out: bool,
    /// The Sentinels given (none for other topologies).
    sentinels: Vec<Node>,
    /// With Sentinel: the switches of the master heard so far (started with the first link).
    watcher: Option<Watcher>,
    /// The watcher's epoch when the Sentinels were last asked: a link made then is stale once
    /// the epoch moves on.
    link_epoch: u64,
    connect_timeout: Duration,
    command_timeout: Duration,
    tracking: Tracking,
    /// What the tracking links push, while [`Tracking::On`].
    pushes: Option<mpsc::UnboundedReceiver<PushInfo>>,
    /// Where we connect, for messages: the URL without its password.
    pub target: String,
}

impl Conn {
    /// Checks the configuration; connects lazily on the first request.
    pub fn new(redis: &RedisConfig) -> Result<Self, Error> {
        let target = match &redis.topology {
            // A quorum's nodes each get a connection of their own (RedisConfig::nodes).
            Topology::Single | Topology::Quorum { .. } => redact_url(&redis.url),
            Topology::Sentinel { master, sentinels } => {
                format!(
                    "master {master:?} of Sentinel {}",
                    sentinels.iter().map(|s| redact_url(s)).collect::<Vec<_>>().join(",")
                )
            }
            Topology::Cluster { seeds } => {
                format!("cluster {}", seeds.iter().map(|s| redact_url(s)).collect::<Vec<_>>().join(","))
            }
        };
        let source = redis.url_source;
        let mut info = url::parse(&redis.url, source)?;
        if let Topology::Cluster { seeds } = &redis.topology {
            // Every seed, not just the first, is checked now and named if malformed.
            for seed in seeds {
                url::parse(seed, source)?;
            }
        }
        // CLIENT SETINFO would add a round trip's worth of work to every connection.
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(password) = &redis.password {
            settings = settings.set_password(password);
        }
        info = info.set_redis_settings(settings);
        let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let certs = redis.tls.any().then(|| redis.tls.certificates());
        let sentinels = match &redis.topology {
            Topology::Sentinel { sentinels, .. } => sentinels
                .iter()
                .map(|s| Node::new(s, redis.sentinel_password.as_deref(), certs.as_ref(), redis.tls.insecure))
                .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        if redis.tls.insecure && (is_tls || sentinels.iter().any(Node::is_tls)) {
            tracing::warn!("--tls-insecure: the server's certificate and host name are NOT verified");
        }
        if redis.tls.insecure
            && let ConnectionAddr::TcpTls { host, port, tls_params, .. } = info.addr().clone()
        {
            info = info.set_addr(ConnectionAddr::TcpTls { host, port, insecure: true, tls_params });
        }
        if redis.tls.any() && !is_tls && !sentinels.iter().any(Node::is_tls) {
            let also = if sentinels.is_empty() { "" } else { " or a rediss:// --sentinel" };
            return Err(Error::Config(format!(
                "--tls-* options need a rediss:// URL{also}, not {} ({source})",
                redact_url(&redis.url)
            )));
        }
        // The master's TLS material, when it speaks TLS (the Sentinels have theirs).
        let tls = certs.filter(|_| is_tls);
        if let Topology::Single = redis.topology {
            // Fail on a bad URL now rather than at the first connection.
            make_client(info.clone(), tls.as_ref()).map_err(|e| url::invalid(&redis.url, source, e))?;
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(redis.connect_timeout))
            .set_response_timeout(Some(redis.command_timeout));
        Ok(Conn {
            info,
            tls,
            topology: redis.topology.clone(),
            config,
            link: None,
            client: None,
            fresh: true,
            timed_out: false,
            sentinels,
            watcher: None,
            link_epoch: 0,
            connect_timeout: redis.connect_timeout,
            command_timeout: redis.command_timeout,
            tracking: Tracking::Off,
            pushes: None,
            target,
        })
    }

    /// Runs a script, connecting first if needed. After a connection-level failure the
    /// connection is dropped so that the next request starts a fresh one.
    pub async fn invoke<T: FromRedisValue>(&mut self, script: &super::scripts::LuaCall) -> Result<T, Fault> {
        self.run(script, false).await
    }

    /// [`Conn::invoke`] with the script run read-only (`EVALSHA_RO`), as Redis runs it while
    /// its writes are paused. Redis 6.2 does not know the command, and an ACL may not allow it.
    pub async fn invoke_read_only<T: FromRedisValue>(
        &mut self,
        script: &super::scripts::LuaCall,
    ) -> Result<T, Fault> {
        let result = self.run(script, true).await;
        if result.is_err() {
            // Redis 6.2's "unknown command" quotes the arguments, which redis-rs cannot read
            // when a key is not UTF-8: the link is not to be trusted after it.
            self.reconnect();
        }
        result
    }

    async fn run<T: FromRedisValue>(
        &mut self,
        script: &super::scripts::LuaCall,
        read_only: bool,
    ) -> Result<T, Fault> {
        let result = match self.link().await? {
            Link::Node(c) => script.invoke_async(c, read_only).await,
            Link::Cluster(c) => script.invoke_async(c, read_only).await,
        };
        self.unless_switched()?;
        self.answered(result).await
    }

    /// Runs one plain command (for the operator's subcommands). With `slot`, a Cluster routes
    /// it to that slot's master (SCAN has no key to route by).
    pub async fn query<T: FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        slot: Option<u16>,
    ) -> Result<T, Fault> {
        let result = match self.link().await? {
            Link::Node(c) => cmd.query_async(c).await,
            Link::Cluster(c) => match slot {
                Some(slot) => {
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                        slot,
                        SlotAddr::Master,
                    )));
                    match c.route_command(cmd.clone(), route).await {
                        Ok(v) => T::from_redis_value(v).map_err(RedisError::from),
                        Err(e) => Err(e),
                    }
                }
                None => cmd.query_async(c).await,
            },
        };
        self.unless_switched()?;
        self.answered(result).await
    }

    /// The next request makes a new link.
    pub fn reconnect(&mut self) {
        self.link = None;
    }

    /// Resolves once the Sentinels have switched the master since they were last asked: the
    /// node in use, and anything it confirmed after that, no longer counts. Never resolves for
    /// other topologies.
    pub fn master_changed(&self) -> impl Future<Output = ()> + Send + 'static {
        let changed = self.watcher.as_ref().map(|w| w.changed_since(self.link_epoch));
        async move {
            match changed {
                Some(changed) => changed.await,
                None => std::future::pending().await,
            }
        }
    }

    /// After a reply: if a switch of the master was heard since the Sentinels were asked, the
    /// reply came from a node they no longer name and does not count, even a success; the next
    /// request goes to the new master.
    fn unless_switched(&mut self) -> Result<(), Fault> {
        match &self.watcher {
            Some(watcher) if watcher.epoch() != self.link_epoch => {
                self.link = None;
                Err(Fault::Unavailable(
                    "the Sentinels switched the master while a request was in flight; its outcome does \
                     not count"
                        .into(),
                ))
            }
            _ => Ok(()),
        }
    }

    /// A separate connection subscribed to `channels`, bounded by the connect and command
    /// timeouts. (In a Cluster, classic pub/sub reaches every node, so any node will do.)
    /// Whether this is a Redis Cluster (whose keys in different slots no one script reaches).
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology, Topology::Cluster { .. })
    }

    pub async fn subscribe(&mut self, channels: &[Vec<u8>]) -> Result<PubSubStream, Fault> {
        let limit = self.connect_timeout + self.command_timeout;
        let clients = match &self.topology {
            // Any node will do; try the seeds in turn.
            Topology::Cluster { seeds } => seeds
                .iter()
                .map(|seed| {
                    let info = seed.as_str().into_connection_info()?;
                    let addr = url::lowercase_host(info.addr().clone());
                    let info = info.set_addr(addr).set_redis_settings(self.info.redis_settings().clone());
                    make_client(info, self.tls.as_ref())
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Fault::from_redis(&e))?,
            _ => {
                self.link().await?;
                vec![self.client.clone().expect("set with the link")]
            }
        };
        let mut last = Fault::Unavailable("no node to subscribe to".into());
        for client in clients {
            let subscribed = tokio::time::timeout(limit, async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(channels).await?;
                Ok::<_, RedisError>(pubsub.into_on_message())
            })
            .await;
            match subscribed {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => last = Fault::from_redis(&e),
                Err(_) => last = Fault::Unavailable(format!("subscribing timed out after {limit:?}")),
            }
        }
        Err(last)
    }

    /// Resolves at the next switch of the master the Sentinels announce from now on (never for
    /// other topologies): a request in flight to the old master is not worth waiting for.
    pub fn master_switching(&self) -> impl Future<Output = ()> + Send + 'static {
        let changed = self.watcher.as_ref().map(|w| w.changed_since(w.epoch()));
        async move {
            match changed {
                Some(changed) => changed.await,
                None => std::future::pending().await,
            }
        }
    }

    async fn link(&mut self) -> Result<&mut Link, Fault> {
        if let Some(watcher) = &self.watcher
            && watcher.epoch() != self.link_epoch
        {
            // The Sentinels have switched the master since this link was made.
            self.link = None;
        }
        if self.link.is_none() {
            let link = match self.topology.clone() {
                Topology::Single | Topology::Quorum { .. } => self.connect_node(self.info.clone()).await?,
                Topology::Sentinel { master, .. } => {
                    let limit = self.connect_timeout + self.command_timeout;
                    let sentinels = &self.sentinels;
                    let watcher =
                        self.watcher.get_or_insert_with(|| Watcher::start(sentinels, &master, limit));
                    // Listening before asking: a switch from here on makes this link stale.
                    watcher.covered(limit).await;
                    self.link_epoch = watcher.epoch();
                    let demoted = watcher.demoted();
                    let (host, port) = self.discover(&self.sentinels, &master, demoted.as_ref()).await?;
                    let named = format!("{host}:{port}");
                    let addr = url::lowercase_host(match self.info.addr() {
                        ConnectionAddr::TcpTls { insecure, .. } => {
                            ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: None }
                        }
                        _ => ConnectionAddr::Tcp(host, port),
                    });
                    let mut link = self.connect_node(self.info.clone().set_addr(addr)).await?;
                    tracing::debug!("connected to {named}, the master the Sentinels name");
                    for refusal in self.watcher.as_ref().map(Watcher::refusals).unwrap_or_default() {
                        tracing::warn!("{refusal}");
                    }
                    // The node must be a master now, not one a failover has just demoted.
                    // (A user whose ACL does not allow ROLE skips the check.)
                    if let Link::Node(conn) = &mut link {
                        match redis::cmd("ROLE").query_async::<Vec<redis::Value>>(conn).await {
                            Ok(role) if replies::bytes(role.first()).is_some_and(|r| r == b"master") => {}
                            // A failover in progress (or a Sentinel that has not caught up):
                            // Redis answered, so never an outage.
                            Ok(_) => {
                                return Err(Fault::Transient(format!(
                                    "the node the Sentinels name for {master:?} is not a master (yet)"
                                )));
                            }
                            Err(e) if e.code() == Some("NOPERM") => {}
                            Err(e) => return Err(self.failed(&e)),
                        }
                    }
                    link
                }
                Topology::Cluster { seeds } => {
                    let limit = self.connect_timeout + self.command_timeout;
                    let timed_out = || Fault::Unavailable("connecting to the cluster timed out".into());
                    let client = self.cluster_client(&seeds)?;
                    let conn = match tokio::time::timeout(limit, client.get_async_connection()).await {
                        Ok(Err(e)) if matches!(self.tracking, Tracking::On(_)) && refuses_tracking(&e) => {
                            self.refuse(&e);
                            let client = self.cluster_client(&seeds)?;
                            tokio::time::timeout(limit, client.get_async_connection())
                                .await
                                .map_err(|_| timed_out())?
                        }
                        connected => connected.map_err(|_| timed_out())?,
                    };
                    Link::Cluster(conn.map_err(|e| self.failed(&e))?)
                }
            };
            self.link = Some(link);
            self.fresh = true;
        }
        Ok(self.link.as_mut().expect("connected above"))
    }

    /// A client of the Cluster behind `seeds`, with this connection's timeouts and credentials.
    fn cluster_client(&self, seeds: &[String]) -> Result<ClusterClient, Fault> {
        // Checked in `new`; parsed again for the host in lowercase.
        let seeds = seeds.iter().filter_map(|s| url::parse(s, "").ok()).collect::<Vec<_>>();
        let mut builder = ClusterClientBuilder::new(seeds)
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.command_timeout)
            // TRYAGAIN, CLUSTERDOWN, LOADING: the client waits 1.28 s or more
            // between its own tries by default, which overruns the request timeout
            // ("timed out"); kept short, it hands back what the server said, and the
            // callers retry within their own budget.
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(100);
        let settings = self.info.redis_settings();
        if let Some(password) = settings.password() {
            builder = builder.password(password);
        }
        if let Some(username) = settings.username() {
            builder = builder.username(username);
        }
        if let Some(tls) = &self.tls {
            builder = builder.certs(tls.clone());
        }
        if let ConnectionAddr::TcpTls { insecure: true, .. } = self.info.addr() {
            builder = builder.tls(redis::TlsMode::Insecure);
        }
        if let Tracking::On(pushes) = &self.tracking {
            builder = builder.use_protocol(ProtocolVersion::RESP3).push_sender(pushes.clone());
        }
        builder.build().map_err(|e| Fault::Config(format!("cluster seeds: {e}")))
    }

    /// A link to the node at `info`'s address; a tracking one while [`Tracking::On`], or a plain
    /// one once Redis refused tracking.
    async fn connect_node(&mut self, info: ConnectionInfo) -> Result<Link, Fault> {
        if let Tracking::On(pushes) = &self.tracking {
            let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
            let client = make_client(info.clone().set_redis_settings(settings), self.tls.as_ref())
                .map_err(|e| Fault::from_redis(&e))?;
            let config = self.config.clone().set_push_sender(pushes.clone());
            let tracked = async {
                let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
                tracking_on().exec_async(&mut conn).await.map(|()| conn)
            };
            match tracked.await {
                Ok(conn) => {
                    self.client = Some(client);
                    return Ok(Link::Node(conn));
                }
                Err(e) if refuses_tracking(&e) => self.refuse(&e),
                Err(e) => return Err(self.failed(&e)),
            }
        }
        let client = make_client(info, self.tls.as_ref()).map_err(|e| Fault::from_redis(&e))?;
        match client.get_multiplexed_async_connection_with_config(&self.config).await {
            Ok(conn) => {
                self.client = Some(client);
                Ok(Link::Node(conn))
            }
            Err(e) => {
                let fault = self.failed(&e);
                let limit = self.connect_timeout;
                let addr = client.get_connection_info().addr();
                // The node itself may be probed: a single node, a quorum's, the Sentinels' master.
                let own = (!self.is_cluster()).then_some(addr);
                // With a password, the connection already fails at AUTH: probe for TLS here too.
                if let Some(mistake) = mistakes::plaintext_to_tls_port(&e, &fault, own, limit).await {
                    return Err(mistake);
                }
                if let Some(mistake) = mistakes::not_redis(&e, own, limit + self.command_timeout).await {
                    return Err(mistake);
                }
                if let Some(mistake) = mistakes::tls_to_plaintext_port(&fault, addr, limit).await {
                    return Err(mistake);
                }
                if e.kind() == redis::ErrorKind::AuthenticationFailed
                    && let Some(full) = self.full_before_auth(&client).await
                {
                    return Err(full);
                }
                Err(fault)
            }
        }
    }

    /// A Redis at `maxclients` refuses a connection before reading a command, so a client with
    /// a password hears the refusal as AUTH's answer, which redis-rs reports as a failed
    /// authentication (without the server's words): ask once more without the password.
    async fn full_before_auth(&self, client: &Client) -> Option<Fault> {
        let anonymous = RedisConnectionInfo::default().set_skip_set_lib_name();
        let info = client.get_connection_info().clone().set_redis_settings(anonymous);
        let probe = make_client(info, self.tls.as_ref()).ok()?;
        let answer = tokio::time::timeout(self.connect_timeout + self.command_timeout, async {
            let mut conn = probe.get_multiplexed_async_connection_with_config(&self.config).await?;
            redis::cmd("PING").query_async::<()>(&mut conn).await
        })
        .await
        .ok()?;
        let refused = answer.err()?;
        tracing::debug!("asked again without the password: {refused}");
        matches!(Fault::from_redis(&refused), Fault::Transient(m) if m == fault::MAX_CLIENTS)
            .then(|| Fault::Transient(fault::MAX_CLIENTS.into()))
    }

    /// Whether the last request was sent and got no reply in time: Redis may have carried it out.
    pub fn unanswered(&self) -> bool {
        self.timed_out
    }

    /// Classifies a reply. A plaintext connection reset at its first request is checked for a
    /// TLS port, so that the mistake is reported as such instead of retried.
    async fn answered<T>(&mut self, result: Result<T, RedisError>) -> Result<T, Fault> {
        self.timed_out = matches!(&result, Err(e) if e.is_timeout());
        match result {
            Ok(v) => {
                self.fresh = false;
                Ok(v)
            }
            Err(e) => {
                let first = self.fresh;
                let fault = self.failed(&e);
                let (own, limit) = (self.own_node(), self.connect_timeout);
                if first && let Some(mistake) = mistakes::plaintext_to_tls_port(&e, &fault, own, limit).await
                {
                    return Err(mistake);
                }
                if let Some(mistake) = mistakes::not_redis(&e, own, limit + self.command_timeout).await {
                    self.link = None;
                    return Err(mistake);
                }
                Err(fault)
            }
        }
    }

    /// The one node behind this connection when the mistake probes may knock on it directly:
    /// a single node, a quorum's node, or the master the Sentinels named (a Cluster's nodes are
    /// the client's business).
    fn own_node(&self) -> Option<&ConnectionAddr> {
        match self.topology {
            Topology::Single | Topology::Quorum { .. } => Some(self.info.addr()),
            Topology::Sentinel { .. } => self.client.as_ref().map(|c| c.get_connection_info().addr()),
            Topology::Cluster { .. } => None,
        }
    }

    /// After a request on `key` that got no reply in time: whether the node serving it answers
    /// a PING on a connection of its own, as it does while its writes are paused (`CLIENT
    /// PAUSE WRITE`, as a failover pauses them): it is there, only not running scripts.
    pub async fn answers_while_unanswered(&self, key: &[u8]) -> bool {
        if !self.timed_out {
            return false;
        }
        let ping = async {
            match &self.topology {
                Topology::Cluster { seeds } => {
                    let mut conn = self.cluster_client(seeds).ok()?.get_async_connection().await.ok()?;
                    let route = Route::new(keys::slot(key), SlotAddr::Master);
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    conn.route_command(redis::cmd("PING"), route).await.ok().map(drop)
                }
                _ => {
                    let client = self.client.as_ref()?;
                    let mut conn =
                        client.get_multiplexed_async_connection_with_config(&self.config).await.ok()?;
                    redis::cmd("PING").query_async::<()>(&mut conn).await.ok()
                }
            }
        };
        matches!(tokio::time::timeout(self.connect_timeout + self.command_timeout, ping).await, Ok(Some(())))
    }

    /// The bound on one request.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    fn failed(&mut self, err: &RedisError) -> Fault {
        let fault = match Fault::from_redis(err) {
            // A redirect the Cluster client did not follow through: the slots are moving (the
            // client retries only briefly), so it is transient — unless this is no Cluster
            // connection at all.
            Fault::Failed(text) if matches!(err.code(), Some("MOVED" | "ASK")) => match self.topology {
                Topology::Cluster { .. } => Fault::Transient(text),
                _ => mistakes::cluster_node_without_cluster(&self.target, &text),
            },
            Fault::Failed(text) => {
                let db = self.info.redis_settings().db();
                mistakes::misconfigured(&self.target, db, &text).unwrap_or(Fault::Failed(text))
            }
            fault => fault,
        };
        if matches!(fault, Fault::Unavailable(_) | Fault::Transient(_) | Fault::Config(_)) {
            self.link = None;
        }
        fault
    }
}

fn make_client(info: ConnectionInfo, tls: Option<&TlsCertificates>) -> Result<Client, RedisError> {
    match tls {
        Some(certs) => Client::build_with_tls(info, certs.clone()),
        None => Client::open(info),
    }
}
