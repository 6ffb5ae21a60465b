//! What the lock needs to know about Redis and the run, as `config` validated it: where Redis
//! is and how to reach it, and the success record of `--idempotency-key`. `lock/` reads these
//! and nothing else of the configuration.

use std::time::Duration;

/// What a URL's source is called when nothing named one.
pub const DEFAULT_SOURCE: &str = "the default";

/// Where Redis is and the bounds on talking to it.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// The node's URL; with Sentinel, only its scheme, credentials and database count.
    pub url: String,
    /// Where the URL came from, for messages: `--redis-url`, `REDLOCK_REDIS_URL` or `REDIS_URL`.
    pub url_source: &'static str,
    /// One node, Sentinel, Cluster or a Redlock quorum.
    pub topology: Topology,
    /// From --password-file or REDLOCK_PASSWORD; overrides the URL's.
    pub password: Option<String>,
    /// From --sentinel-password-file or REDLOCK_SENTINEL_PASSWORD: for the Sentinels whose
    /// address carries no password.
    pub sentinel_password: Option<String>,
    /// TLS material and whether to verify (used with rediss:// URLs, the Sentinels' too).
    pub tls: Tls,
    /// Bound on establishing one connection.
    pub connect_timeout: Duration,
    /// Bound on one request.
    pub command_timeout: Duration,
}

impl RedisConfig {
    /// Where the URL came from, for messages about reaching it: nothing when it was given as
    /// `--redis-url`, the variable's name, or that it is the default and how to change it.
    pub fn source_note(&self) -> String {
        if let Topology::Sentinel { .. } = self.topology {
            // The URL's host is not used: the Sentinels name the master.
            return String::new();
        }
        match self.url_source {
            "--redis-url" => String::new(),
            DEFAULT_SOURCE => " (the default; set --redis-url or REDLOCK_REDIS_URL)".to_owned(),
            var => format!(" (from {var})"),
        }
    }
}

/// Single node, the master a Sentinel names, a Cluster, or a Redlock quorum of independent
/// masters.
#[derive(Debug, Clone)]
pub enum Topology {
    Single,
    Sentinel { sentinels: Vec<String>, master: String },
    Cluster { seeds: Vec<String> },
    Quorum { urls: Vec<String> },
}

impl RedisConfig {
    /// One configuration per connection to make: the quorum's nodes, or this one.
    pub fn nodes(&self) -> Vec<RedisConfig> {
        match &self.topology {
            Topology::Quorum { urls } => urls
                .iter()
                .map(|url| RedisConfig { url: url.clone(), topology: Topology::Single, ..self.clone() })
                .collect(),
            _ => vec![self.clone()],
        }
    }
}

/// TLS material, read from the files at start-up.
#[derive(Clone, Default)]
pub struct Tls {
    /// PEM CA certificates to trust instead of the system's (`--tls-ca-file`).
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate and key for mutual TLS (`--tls-cert-file`, `--tls-key-file`).
    pub client: Option<(Vec<u8>, Vec<u8>)>,
    /// Skip verifying the server (`--tls-insecure`).
    pub insecure: bool,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key material is never printed.
        f.debug_struct("Tls").field("ca", &self.ca.is_some()).field("client", &self.client.is_some()).finish()
    }
}

impl Tls {
    pub fn any(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    pub fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.ca.clone(),
        }
    }
}

/// `--idempotency-key`: the ID of a run whose success is recorded, and for how long.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// The run's ID (`--idempotency-key`), as bytes.
    pub id: Vec<u8>,
    /// How long a success record lives (`--idempotency-ttl`).
    pub ttl: Duration,
}
