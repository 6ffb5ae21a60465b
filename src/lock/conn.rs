//! One Redis connection with bounded I/O, reconnecting after a failure. Behind it: a single
//! node (TCP, TLS or a Unix socket), the master a Sentinel names (found again after each
//! failure), or a Redis Cluster (MOVED/ASK followed by the client).

use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, ConnectionInfo, FromRedisValue, IntoConnectionInfo,
    RedisError, ScriptInvocation, TlsCertificates,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fault::Fault;
use super::sentinel::Watcher;
use super::url::{self, redact_url};
use crate::config::{RedisConfig, Topology};
use crate::exit::Error;

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
    /// Which Sentinel to ask first next time.
    sentinel_turn: usize,
    /// With Sentinel: the switches of the master heard so far (started with the first link).
    watcher: Option<Watcher>,
    /// The watcher's epoch when the Sentinels were last asked: a link made then is stale once
    /// the epoch moves on.
    link_epoch: u64,
    connect_timeout: Duration,
    command_timeout: Duration,
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
        if redis.tls.insecure {
            tracing::warn!("--tls-insecure: the server's certificate and host name are NOT verified");
            if let ConnectionAddr::TcpTls { host, port, tls_params, .. } = info.addr().clone() {
                info = info.set_addr(ConnectionAddr::TcpTls { host, port, insecure: true, tls_params });
            }
        }
        let tls = if redis.tls.any() {
            if !is_tls {
                return Err(Error::Config(format!(
                    "--tls-* options need a rediss:// URL, not {} ({source})",
                    redact_url(&redis.url)
                )));
            }
            Some(redis.tls.certificates())
        } else {
            None
        };
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
            sentinel_turn: 0,
            watcher: None,
            link_epoch: 0,
            connect_timeout: redis.connect_timeout,
            command_timeout: redis.command_timeout,
            target,
        })
    }

    /// Runs a script, connecting first if needed. After a connection-level failure the
    /// connection is dropped so that the next request starts a fresh one.
    pub async fn invoke<T: FromRedisValue>(&mut self, script: &ScriptInvocation<'_>) -> Result<T, Fault> {
        let result = match self.link().await? {
            Link::Node(c) => script.invoke_async(c).await,
            Link::Cluster(c) => script.invoke_async(c).await,
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
                    "the Sentinels switched the master while a request was in flight; its outcome does not count"
                        .into(),
                ))
            }
            _ => Ok(()),
        }
    }

    /// A separate connection subscribed to `channel`, bounded by the connect and command
    /// timeouts. (In a Cluster, classic pub/sub reaches every node, so any node will do.)
    pub async fn subscribe(&mut self, channel: &[u8]) -> Result<PubSubStream, Fault> {
        let limit = self.connect_timeout + self.command_timeout;
        let clients = match &self.topology {
            // Any node will do; try the seeds in turn.
            Topology::Cluster { seeds } => seeds
                .iter()
                .map(|seed| {
                    let info = seed.as_str().into_connection_info()?;
                    let info = info.set_redis_settings(self.info.redis_settings().clone());
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
                pubsub.subscribe(channel).await?;
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

    async fn link(&mut self) -> Result<&mut Link, Fault> {
        if let Some(watcher) = &self.watcher
            && watcher.epoch() != self.link_epoch
        {
            // The Sentinels have switched the master since this link was made.
            self.link = None;
        }
        if self.link.is_none() {
            let link = match self.topology.clone() {
                Topology::Single | Topology::Quorum { .. } => {
                    let client = make_client(self.info.clone(), self.tls.as_ref())
                        .map_err(|e| Fault::from_redis(&e))?;
                    self.connect_node(client).await?
                }
                Topology::Sentinel { mut sentinels, master } => {
                    let limit = self.connect_timeout + self.command_timeout;
                    let watcher =
                        self.watcher.get_or_insert_with(|| Watcher::start(&sentinels, &master, limit));
                    // Listening before asking: a switch from here on makes this link stale.
                    watcher.covered(limit).await;
                    self.link_epoch = watcher.epoch();
                    let demoted = watcher.demoted();
                    // Start with the Sentinel after the one asked last time, so that one stale
                    // Sentinel cannot keep naming a demoted master.
                    let turn = self.sentinel_turn % sentinels.len().max(1);
                    sentinels.rotate_left(turn);
                    self.sentinel_turn += 1;
                    let (host, port) = self.discover(&sentinels, &master, demoted.as_ref()).await?;
                    let addr = match self.info.addr() {
                        ConnectionAddr::TcpTls { insecure, .. } => {
                            ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: None }
                        }
                        _ => ConnectionAddr::Tcp(host, port),
                    };
                    let client = make_client(self.info.clone().set_addr(addr), self.tls.as_ref())
                        .map_err(|e| Fault::from_redis(&e))?;
                    let mut link = self.connect_node(client).await?;
                    // The node must be a master now, not one a failover has just demoted.
                    // (A user whose ACL does not allow ROLE skips the check.)
                    if let Link::Node(conn) = &mut link {
                        match redis::cmd("ROLE").query_async::<Vec<redis::Value>>(conn).await {
                            Ok(role) if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") =>
                                {}
                            Ok(_) => {
                                return Err(Fault::Unavailable(format!(
                                    "the node Sentinel names for {master:?} is not a master (yet)"
                                )));
                            }
                            Err(e) if e.code() == Some("NOPERM") => {}
                            Err(e) => return Err(self.failed(&e)),
                        }
                    }
                    link
                }
                Topology::Cluster { seeds } => {
                    let mut builder = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
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
                    let client = builder.build().map_err(|e| Fault::Config(format!("cluster seeds: {e}")))?;
                    let conn = tokio::time::timeout(
                        self.connect_timeout + self.command_timeout,
                        client.get_async_connection(),
                    )
                    .await
                    .map_err(|_| Fault::Unavailable("connecting to the cluster timed out".into()))?
                    .map_err(|e| self.failed(&e))?;
                    Link::Cluster(conn)
                }
            };
            self.link = Some(link);
            self.fresh = true;
        }
        Ok(self.link.as_mut().expect("connected above"))
    }

    async fn connect_node(&mut self, client: Client) -> Result<Link, Fault> {
        match client.get_multiplexed_async_connection_with_config(&self.config).await {
            Ok(conn) => {
                self.client = Some(client);
                Ok(Link::Node(conn))
            }
            Err(e) => {
                let fault = self.failed(&e);
                // With a password, the connection already fails at AUTH: probe for TLS here too.
                if self.plaintext_to_tls(&e, &fault).await {
                    return Err(self.tls_port_fault());
                }
                if let Some(fault) = self.not_redis(&e).await {
                    return Err(fault);
                }
                // A TLS handshake with a plaintext Redis stalls until the timeout: say why.
                if let (Fault::Unavailable(_), ConnectionAddr::TcpTls { host, port, .. }) =
                    (&fault, client.get_connection_info().addr())
                    && speaks_plain_resp(host, *port, self.connect_timeout).await
                {
                    return Err(Fault::Config(format!(
                        "{host}:{port} does not speak TLS (a plaintext Redis answers there): use a redis:// URL"
                    )));
                }
                Err(fault)
            }
        }
    }

    /// Asks the Sentinels, in order, where the master is. A Sentinel that still names the
    /// master the latest switch replaced has not caught up: the next one is asked.
    async fn discover(
        &self,
        sentinels: &[String],
        master: &str,
        demoted: Option<&(String, u16)>,
    ) -> Result<(String, u16), Fault> {
        let mut last = String::from("no Sentinel answered");
        let mut unknown = None;
        for sentinel in sentinels {
            let asked = async {
                let client = Client::open(format!("redis://{sentinel}"))?;
                let mut conn = client.get_multiplexed_async_connection_with_config(&self.config).await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(self.connect_timeout + self.command_timeout, asked).await {
                Ok(Ok(Some(addr))) if demoted == Some(&addr) => {
                    last = format!(
                        "Sentinel {} still names {}:{}, the master a failover replaced",
                        redact_url(sentinel),
                        addr.0,
                        addr.1
                    );
                }
                Ok(Ok(Some(addr))) => return Ok(addr),
                Ok(Ok(None)) => {
                    unknown = Some(format!(
                        "Sentinel {} does not know a master named {master:?}: check --sentinel-master",
                        redact_url(sentinel)
                    ));
                }
                Ok(Err(e)) if e.detail().is_some_and(|d| d.contains("unknown command")) => {
                    return Err(Fault::Config(format!(
                        "--sentinel {} is not a Sentinel (it answered like a plain Redis: {e}): \
                         give the Sentinels' addresses (port 26379 by default), or --redis-url alone \
                         for a plain Redis",
                        redact_url(sentinel)
                    )));
                }
                Ok(Err(e)) if e.kind() == redis::ErrorKind::Parse => {
                    return Err(Fault::Config(format!(
                        "--sentinel {} does not speak the Redis protocol: give the Sentinels' addresses \
                         (port 26379 by default)",
                        redact_url(sentinel)
                    )));
                }
                Ok(Err(e)) => last = format!("Sentinel {}: {e}", redact_url(sentinel)),
                Err(_) => last = format!("Sentinel {} did not answer", redact_url(sentinel)),
            }
        }
        if let Some(unknown) = unknown {
            // A Sentinel answered, and none named the master: a configuration mistake, whatever
            // the others did (an unreachable one would not know the name either).
            return Err(Fault::Config(unknown));
        }
        Err(Fault::Unavailable(last))
    }

    /// Classifies a reply. A plaintext connection reset at its first request is checked for a
    /// TLS port, so that the mistake is reported as such instead of retried.
    async fn answered<T>(&mut self, result: Result<T, RedisError>) -> Result<T, Fault> {
        match result {
            Ok(v) => {
                self.fresh = false;
                Ok(v)
            }
            Err(e) => {
                let first = self.fresh;
                let fault = self.failed(&e);
                if first && self.plaintext_to_tls(&e, &fault).await {
                    return Err(self.tls_port_fault());
                }
                if let Some(fault) = self.not_redis(&e).await {
                    self.link = None;
                    return Err(fault);
                }
                Err(fault)
            }
        }
    }

    /// A plaintext connection that the server reset at once (not a timeout: a frozen node must
    /// cost no more than its timeout) may have reached a TLS port: probe it.
    async fn plaintext_to_tls(&self, err: &RedisError, fault: &Fault) -> bool {
        if !matches!(fault, Fault::Unavailable(_))
            || err.is_timeout()
            || err.is_connection_refusal()
            || !(err.is_connection_dropped() || err.is_io_error())
            || !matches!(self.topology, Topology::Single | Topology::Quorum { .. })
        {
            return false;
        }
        match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => speaks_tls(host, *port, self.connect_timeout).await,
            _ => false,
        }
    }

    /// The bound on one request.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    fn tls_port_fault(&self) -> Fault {
        let addr = self.info.addr();
        Fault::Config(format!("{addr} speaks TLS: use a rediss:// URL (and --tls-ca-file if needed)"))
    }

    fn failed(&mut self, err: &RedisError) -> Fault {
        let fault = match Fault::from_redis(err) {
            // A redirect the Cluster client did not follow through: the slots are moving (the
            // client retries only briefly), so it is transient — unless this is no Cluster
            // connection at all.
            Fault::Failed(text) if matches!(err.code(), Some("MOVED" | "ASK")) => match self.topology {
                Topology::Cluster { .. } => Fault::Transient(text),
                _ => Fault::Config(format!(
                    "{}: the server is a Redis Cluster node (it answered {text}): add --cluster",
                    self.target
                )),
            },
            Fault::Failed(text) => self.misconfigured(&text).unwrap_or(Fault::Failed(text)),
            fault => fault,
        };
        if matches!(fault, Fault::Unavailable(_) | Fault::Transient(_) | Fault::Config(_)) {
            self.link = None;
        }
        fault
    }

    /// A refusal that no retry can change: the URL or the topology flags do not fit the server.
    fn misconfigured(&self, text: &str) -> Option<Fault> {
        let target = &self.target;
        if text.contains("DB index is out of range") {
            let db = self.info.redis_settings().db();
            return Some(Fault::Config(format!(
                "{target}: the server has no database {db} (DB index is out of range; its `databases` \
                 setting bounds it, 16 by default): fix the database number in the Redis URL"
            )));
        }
        if text.contains("refused to switch database") {
            let db = self.info.redis_settings().db();
            if text.contains("NOAUTH") || text.contains("Authentication required") {
                return Some(Fault::Denied(format!(
                    "{target}: selecting database {db} needs a password the URL does not give"
                )));
            }
            return Some(Fault::Config(format!(
                "{target}: the server refused database {db} (it answered: {}): fix the database number \
                 in the Redis URL",
                first_line(text)
            )));
        }
        if let Some(command) = unknown_command(text) {
            // Never the rest of the reply: it quotes the request's arguments, the lock's value
            // among them.
            return Some(Fault::Config(format!(
                "{target}: the server does not know the command {command} (is it a Sentinel? give \
                 Sentinels with --sentinel and --sentinel-master)"
            )));
        }
        if text.contains("cluster support disabled") {
            return Some(Fault::Config(format!(
                "{target}: not a Cluster node (cluster support disabled): drop --cluster, or give the \
                 address of a Cluster node"
            )));
        }
        None
    }

    /// After a reply that is not RESP: what the server at the address answers to a PING, when
    /// that is not Redis either. Plaintext TCP only (one node or a quorum's node).
    async fn not_redis(&self, err: &RedisError) -> Option<Fault> {
        if err.kind() != redis::ErrorKind::Parse
            || !matches!(self.topology, Topology::Single | Topology::Quorum { .. })
        {
            return None;
        }
        let ConnectionAddr::Tcp(host, port) = self.info.addr() else {
            return None;
        };
        let answer = first_reply_line(host, *port, self.connect_timeout + self.command_timeout).await?;
        // Every RESP2/RESP3 reply starts with one of these.
        if answer.first().is_some_and(|b| b"+-:$*_,#!=(%~|>".contains(b)) {
            return None;
        }
        Some(Fault::Config(format!(
            "{host}:{port} does not speak the Redis protocol (it answered \"{}\"): check the address in the \
             Redis URL",
            answer.escape_ascii()
        )))
    }
}

/// The first line of a message (redis-rs's parse errors run over several).
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// `EVALSHA` in "… unknown command 'EVALSHA', with args beginning with: …".
fn unknown_command(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("unknown command '")?;
    Some(rest.split_once('\'').map_or(rest, |(command, _)| command))
}

fn make_client(info: ConnectionInfo, tls: Option<&TlsCertificates>) -> Result<Client, RedisError> {
    match tls {
        Some(certs) => Client::build_with_tls(info, certs.clone()),
        None => Client::open(info),
    }
}

// A minimal TLS 1.2 ClientHello: one ECDHE suite; any TLS server answers with a handshake
// record (0x16) or an alert (0x15); a plaintext Redis answers with an error or closes.
const HELLO: [u8; 57] = [
    0x16, 0x03, 0x01, 0x00, 0x34, // record: handshake, TLS 1.0 framing, 52 bytes
    0x01, 0x00, 0x00, 0x30, // ClientHello, 48 bytes
    0x03, 0x03, // TLS 1.2
    0x52, 0x4c, 0x4b, 0x52, 0x55, 0x4e, 0x72, 0x65, 0x64, 0x6c, 0x6f, 0x63, 0x6b, 0x2d, 0x72, 0x75, 0x6e,
    0x2d, 0x74, 0x6c, 0x73, 0x2d, 0x70, 0x72, 0x6f, 0x62, 0x65, 0x2d, 0x30, 0x31, 0x32,
    0x33, // 32 bytes random
    0x00, // no session id
    0x00, 0x02, 0xc0, 0x2f, // cipher suites: ECDHE-RSA-AES128-GCM-SHA256
    0x01, 0x00, // compression: null
    0x00, 0x05, 0xff, 0x01, 0x00, 0x01, 0x00, // extensions: renegotiation_info
];

/// Whether the server at host:port answers a plaintext PING like a Redis.
async fn speaks_plain_resp(host: &str, port: u16, limit: Duration) -> bool {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        Some(first[0])
    };
    matches!(tokio::time::timeout(limit, probe).await, Ok(Some(b'+' | b'-')))
}

/// The first line (at most 60 bytes) the server at host:port answers to a plaintext PING.
async fn first_reply_line(host: &str, port: u16, limit: Duration) -> Option<Vec<u8>> {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").await.ok()?;
        let mut answer = vec![0u8; 60];
        let n = stream.read(&mut answer).await.ok()?;
        answer.truncate(n);
        Some(answer)
    };
    let mut answer = tokio::time::timeout(limit, probe).await.ok()??;
    if let Some(end) = answer.iter().position(|b| *b == b'\r' || *b == b'\n') {
        answer.truncate(end);
    }
    (!answer.is_empty()).then_some(answer)
}

/// Whether the server at host:port answers a TLS ClientHello with a TLS record (handshake or
/// alert) — that is, whether a plaintext client has been pointed at a TLS port.
async fn speaks_tls(host: &str, port: u16, limit: Duration) -> bool {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(&HELLO).await.ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        Some(first[0])
    };
    matches!(tokio::time::timeout(limit, probe).await, Ok(Some(0x15 | 0x16)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tls_probe_is_a_well_formed_client_hello() {
        // The lengths in the record and handshake headers match what follows them.
        let hello = super::HELLO;
        assert_eq!(usize::from(u16::from_be_bytes([hello[3], hello[4]])), hello.len() - 5);
        assert_eq!(usize::from(hello[8]), hello.len() - 9);
        let ext_start = 9 + 2 + 32 + 1 + 4 + 2;
        assert_eq!(
            usize::from(u16::from_be_bytes([hello[ext_start], hello[ext_start + 1]])),
            hello.len() - ext_start - 2
        );
    }
}
