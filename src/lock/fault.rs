//! Why a Redis request failed, in the terms the wrapper acts on: the [`Fault`] classes, how a
//! redis-rs error falls into one, which fault explains a failure on several nodes best, and
//! the exit status each leads to.

use nix::libc;
use redis::RedisError;

use crate::exit::Error;

/// Why a Redis request did not give an answer the caller can use.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Fault {
    /// Redis could not be reached: connection refused or timed out, name resolution failed, the
    /// connection dropped, or no reply came within the timeout. The outcome is unknown and a
    /// retry (on a new connection) may succeed. The only fault `--fail-open` applies to.
    #[error("{0}")]
    Unavailable(String),
    /// Redis answered, but cannot serve the request now: OOM, READONLY (a replica), LOADING,
    /// BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN. Retried like an outage, never a reason to run
    /// without the lock: Redis is there and may hold it.
    #[error("{0}")]
    Transient(String),
    /// Authentication failed or the ACL forbids a command or key.
    #[error("{0}")]
    Denied(String),
    /// The key exists with a type other than string.
    #[error("{0}")]
    WrongType(String),
    /// A configuration that cannot work: TLS refused (unknown CA, wrong host name), TLS spoken
    /// to a plaintext port or plaintext to a TLS port, a master no Sentinel knows.
    #[error("{0}")]
    Config(String),
    /// Anything else Redis said no to (a script error).
    #[error("{0}")]
    Failed(String),
    /// A reply of a shape the scripts never produce, or a local failure: an internal error.
    #[error("{0}")]
    Internal(String),
}

impl Fault {
    /// The same class of fault, saying `message`.
    pub fn with_message(self, message: String) -> Fault {
        match self {
            Fault::Unavailable(_) => Fault::Unavailable(message),
            Fault::Transient(_) => Fault::Transient(message),
            Fault::Denied(_) => Fault::Denied(message),
            Fault::WrongType(_) => Fault::WrongType(message),
            Fault::Config(_) => Fault::Config(message),
            Fault::Failed(_) => Fault::Failed(message),
            Fault::Internal(_) => Fault::Internal(message),
        }
    }

    pub fn from_redis(err: &RedisError) -> Self {
        let text = err.to_string();
        if let Some(tls) = tls_failure(err) {
            return Fault::Config(format!("TLS failed: {tls}"));
        }
        if let Some(certs) = system_certificates_failure(err) {
            return Fault::Config(format!(
                "the system's CA certificates could not be loaded ({certs}): fix SSL_CERT_FILE or \
                 SSL_CERT_DIR, or give --tls-ca-file"
            ));
        }
        // Out of descriptors or memory here says nothing about Redis: never "unreachable",
        // which `--fail-open` would take as leave to run the command without the lock.
        if io_error(err)
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|e| matches!(e, libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS))
        {
            return Fault::Internal(format!("no resources on this host: {text}"));
        }
        if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() || err.is_connection_refusal()
        {
            return Fault::Unavailable(text);
        }
        match err.code() {
            Some("NOAUTH") => {
                return Fault::Denied(format!("Redis requires a password, and none was given ({text})"));
            }
            Some("WRONGPASS" | "NOPERM") => return Fault::Denied(text),
            Some("WRONGTYPE") => return Fault::WrongType(text),
            // In the server's words ("TRYAGAIN Multiple keys request during rehashing of slot").
            Some(code) if is_transient(code) => {
                return Fault::Transient(match err.detail() {
                    Some(detail) => format!("{code} {detail}"),
                    None => code.to_owned(),
                });
            }
            _ => {}
        }
        // A Redis at `maxclients` accepts a connection only to refuse it: full, not failing.
        if text.contains(MAX_CLIENTS) {
            return Fault::Transient(MAX_CLIENTS.into());
        }
        // A Redis with a password refuses a request longer than an unauthenticated client may
        // send (more than 10 arguments, as the scripts' calls have) before it says NOAUTH.
        if text.contains("unauthenticated multibulk length") || text.contains("unauthenticated bulk length") {
            return Fault::Denied(format!(
                "Redis requires a password, and none was given (it refused the request before \
                 authentication: {text})"
            ));
        }
        // Inside a script an ACL denial comes back as a plain ERR.
        if err.kind() == redis::ErrorKind::AuthenticationFailed
            || text.contains("can't run this command")
            || text.contains("no permissions to access")
        {
            return Fault::Denied(text);
        }
        Fault::Failed(text)
    }

    /// The wrapper's error for this fault, with `context` (what was being done) in front.
    pub fn into_error(self, context: &str) -> Error {
        match self {
            Fault::Unavailable(m) => Error::Unavailable(format!("{context}: Redis unavailable: {m}")),
            Fault::Transient(m) => Error::Unavailable(format!("{context}: Redis answered: {m}")),
            Fault::Denied(m) => Error::Permission(format!("{context}: Redis denied access: {m}")),
            Fault::WrongType(m) => Error::WrongType(format!("{context}: {m}")),
            Fault::Config(m) => Error::Config(format!("{context}: {m}")),
            Fault::Failed(m) => Error::Unavailable(format!("{context}: Redis failed: {m}")),
            Fault::Internal(m) => Error::Internal(anyhow::anyhow!("{context}: {m}")),
        }
    }
}

/// What a Redis at `maxclients` answers a new connection before it closes it.
pub const MAX_CLIENTS: &str = "max number of clients reached";

/// Whether an error code is one a Redis gives while it cannot serve a request for now.
pub fn is_transient(code: &str) -> bool {
    // NOSCRIPT: the script was loaded again and flushed again before it could run (someone
    // runs SCRIPT FLUSH in a loop); the next attempt loads it once more.
    matches!(
        code,
        "READONLY" | "LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "OOM" | "CLUSTERDOWN" | "NOSCRIPT"
    )
}

/// The I/O error behind a Redis error, if there is one.
fn io_error(err: &RedisError) -> Option<&std::io::Error> {
    cause(err)?.downcast_ref::<std::io::Error>()
}

/// The error behind a Redis error (redis-rs keeps it behind an `Arc<dyn Error>`).
fn cause(err: &RedisError) -> Option<&(dyn std::error::Error + 'static)> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let source = std::error::Error::source(err)?;
    Some(match source.downcast_ref::<Shared>() {
        Some(shared) => shared.as_ref(),
        None => source,
    })
}

/// Loading the system's CA certificates failed (an SSL_CERT_FILE that cannot be read, say):
/// redis-rs passes that on as an I/O error of its own kind.
fn system_certificates_failure(err: &RedisError) -> Option<String> {
    cause(err)?.downcast_ref::<rustls_native_certs::Error>().map(ToString::to_string)
}

/// The TLS error behind a Redis error, if that is what it is (the I/O error's payload).
fn tls_failure(err: &RedisError) -> Option<String> {
    io_error(err)?.get_ref()?.downcast_ref::<rustls::Error>().map(ToString::to_string)
}

/// The fault that best explains a failure on several nodes: a mistake to fix before an outage.
pub fn worst(faults: Vec<Fault>) -> Fault {
    let rank = |f: &Fault| match f {
        Fault::WrongType(_) => 0,
        Fault::Config(_) => 1,
        Fault::Denied(_) => 2,
        Fault::Internal(_) => 3,
        Fault::Failed(_) => 4,
        Fault::Transient(_) => 5,
        Fault::Unavailable(_) => 6,
    };
    faults.into_iter().min_by_key(rank).unwrap_or_else(|| Fault::Unavailable("no node answered".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_local_resources_is_not_an_unreachable_redis() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::ENOBUFS] {
            let err = RedisError::from(std::io::Error::from_raw_os_error(errno));
            assert!(matches!(Fault::from_redis(&err), Fault::Internal(_)), "errno {errno}");
        }
        let refused = RedisError::from(std::io::Error::from_raw_os_error(libc::ECONNREFUSED));
        assert!(matches!(Fault::from_redis(&refused), Fault::Unavailable(_)));
    }
}
