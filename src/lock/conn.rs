//! One Redis connection with bounded I/O, reconnecting after a failure, and the classification
//! of what went wrong.

use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSubStream};
use redis::{
    AsyncConnectionConfig, Client, FromRedisValue, IntoConnectionInfo, RedisError, ScriptInvocation,
};

use crate::config::RedisConfig;
use crate::exit::Error;

/// Why a Redis request did not give an answer the caller can use.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Fault {
    /// Timeouts, I/O errors, READONLY, LOADING, BUSY, MASTERDOWN, TRYAGAIN, OOM, …: the outcome
    /// is unknown and a retry (on a new connection) may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// Authentication failed or the ACL forbids a command or key.
    #[error("{0}")]
    Denied(String),
    /// The key exists with a type other than string.
    #[error("{0}")]
    WrongType(String),
    /// Anything else Redis said no to (a script error).
    #[error("{0}")]
    Failed(String),
    /// A reply of a shape the scripts never produce, or a local failure: an internal error.
    #[error("{0}")]
    Internal(String),
}

impl Fault {
    fn from_redis(err: &RedisError) -> Self {
        let text = err.to_string();
        if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() || err.is_connection_refusal()
        {
            return Fault::Unavailable(text);
        }
        match err.code() {
            Some("NOAUTH" | "WRONGPASS" | "NOPERM") => return Fault::Denied(text),
            Some("WRONGTYPE") => return Fault::WrongType(text),
            Some("READONLY" | "LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "OOM" | "CLUSTERDOWN") => {
                return Fault::Unavailable(text);
            }
            _ => {}
        }
        if err.kind() == redis::ErrorKind::AuthenticationFailed {
            return Fault::Denied(text);
        }
        Fault::Failed(text)
    }

    /// The wrapper's error for this fault, with `context` (what was being done) in front.
    pub fn into_error(self, context: &str) -> Error {
        match self {
            Fault::Unavailable(m) => Error::Unavailable(format!("{context}: Redis unavailable: {m}")),
            Fault::Denied(m) => Error::Permission(format!("{context}: Redis denied access: {m}")),
            Fault::WrongType(m) => Error::WrongType(format!("{context}: {m}")),
            Fault::Failed(m) => Error::Unavailable(format!("{context}: Redis failed: {m}")),
            Fault::Internal(m) => Error::Internal(anyhow::anyhow!("{context}: {m}")),
        }
    }
}

pub struct Conn {
    client: Client,
    config: AsyncConnectionConfig,
    conn: Option<MultiplexedConnection>,
    connect_timeout: Duration,
    command_timeout: Duration,
    /// Where we connect, for messages: the URL without its password.
    pub target: String,
}

impl Conn {
    /// Checks the URL; connects lazily on the first request.
    pub fn new(redis: &RedisConfig) -> Result<Self, Error> {
        let (url, connect_timeout, command_timeout) =
            (&redis.url, redis.connect_timeout, redis.command_timeout);
        let target = redact_url(url);
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| Error::Config(format!("--redis-url {target}: {e}")))?;
        // CLIENT SETINFO would add a round trip's worth of work to every connection.
        let redis = info.redis_settings().clone().set_skip_set_lib_name();
        let client = Client::open(info.set_redis_settings(redis))
            .map_err(|e| Error::Config(format!("--redis-url {target}: {e}")))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(command_timeout));
        Ok(Conn { client, config, conn: None, connect_timeout, command_timeout, target })
    }

    /// Runs a script, connecting first if needed. After a connection-level failure the
    /// connection is dropped so that the next request starts a fresh one.
    pub async fn invoke<T: FromRedisValue>(&mut self, script: &ScriptInvocation<'_>) -> Result<T, Fault> {
        let conn = self.connection().await?;
        match script.invoke_async(conn).await {
            Ok(v) => Ok(v),
            Err(e) => Err(self.failed(&e)),
        }
    }

    /// Runs one plain command (for the operator's subcommands).
    pub async fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, Fault> {
        let conn = self.connection().await?;
        match cmd.query_async(conn).await {
            Ok(v) => Ok(v),
            Err(e) => Err(self.failed(&e)),
        }
    }

    /// A separate connection subscribed to `channel`, bounded by the connect and command
    /// timeouts.
    pub async fn subscribe(&mut self, channel: &[u8]) -> Result<PubSubStream, Fault> {
        let limit = self.connect_timeout + self.command_timeout;
        let subscribed = tokio::time::timeout(limit, async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            Ok::<_, RedisError>(pubsub.into_on_message())
        })
        .await;
        match subscribed {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(Fault::from_redis(&e)),
            Err(_) => Err(Fault::Unavailable(format!("subscribing timed out after {limit:?}"))),
        }
    }

    async fn connection(&mut self) -> Result<&mut MultiplexedConnection, Fault> {
        if self.conn.is_none() {
            let conn = self
                .client
                .get_multiplexed_async_connection_with_config(&self.config)
                .await
                .map_err(|e| self.failed(&e))?;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    fn failed(&mut self, err: &RedisError) -> Fault {
        let fault = Fault::from_redis(err);
        if matches!(fault, Fault::Unavailable(_)) {
            self.conn = None;
        }
        fault
    }
}

/// The URL with any password replaced by `***`, for messages: everything between `://` and the
/// last `@` but a user name, and the value of any `pass`/`password` query parameter.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (scheme, rest) = (&url[..scheme_end], &url[scheme_end + 3..]);
    let rest = match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) if !user.is_empty() && !user.contains(['/', '?', '#']) => {
                format!("{user}:***{}", &rest[at..])
            }
            _ => format!("***{}", &rest[at..]),
        },
        None => rest.to_owned(),
    };
    let rest = match rest.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") => {
                        format!("{k}=***")
                    }
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => rest,
    };
    format!("{scheme}://{rest}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact_url("redis://:s3cret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact_url("redis://user:s3cret@h:1"), "redis://user:***@h:1");
        assert_eq!(redact_url("redis://s3cret@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("rediss://u:p@ss@h"), "rediss://u:***@h");
        assert_eq!(redact_url("unix:///run/redis.sock"), "unix:///run/redis.sock");
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=1&pass=s3cret"),
            "unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(redact_url("redis://:pa#ss@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://u:p/a?s#s@h:1/2"), "redis://u:***@h:1/2");
    }
}
