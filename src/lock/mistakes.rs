//! Telling what the user got wrong from an outage: a plaintext client at a TLS port or the
//! reverse, a service that is not Redis, a URL or topology flags that do not fit the server
//! (a Cluster node without `--cluster`, a Sentinel given as a Redis, a plain Redis given as a
//! Sentinel, a database the server does not have). Each is reported as the mistake it is, with
//! its fix, instead of being retried as if Redis were down. The probes knock on the address
//! with a connection of their own, bounded by the limit they are given.

use std::time::Duration;

use redis::{ConnectionAddr, RedisError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fault::Fault;
use super::sentinel::Node;

/// A plaintext connection that the server reset at once (not a timeout: a frozen node must
/// cost no more than its timeout) may have reached a TLS port: probe it. `own` is the node's
/// address when it may be probed directly (see `Conn`).
pub async fn plaintext_to_tls_port(
    err: &RedisError,
    fault: &Fault,
    own: Option<&ConnectionAddr>,
    limit: Duration,
) -> Option<Fault> {
    if !matches!(fault, Fault::Unavailable(_))
        || err.is_timeout()
        || err.is_connection_refusal()
        || !(err.is_connection_dropped() || err.is_io_error())
    {
        return None;
    }
    let addr @ ConnectionAddr::Tcp(host, port) = own? else {
        return None;
    };
    speaks_tls(host, *port, limit).await.then(|| {
        Fault::Config(format!("{addr} speaks TLS: use a rediss:// URL (and --tls-ca-file if needed)"))
    })
}

/// A TLS handshake with a plaintext Redis stalls until the timeout: whether that is why a TLS
/// connection to `addr` failed.
pub async fn tls_to_plaintext_port(fault: &Fault, addr: &ConnectionAddr, limit: Duration) -> Option<Fault> {
    if let (Fault::Unavailable(_), ConnectionAddr::TcpTls { host, port, .. }) = (fault, addr)
        && speaks_plain_resp(host, *port, limit).await
    {
        return Some(Fault::Config(format!(
            "{host}:{port} does not speak TLS (a plaintext Redis answers there): use a redis:// URL"
        )));
    }
    None
}

/// After a reply that is not RESP: what the server at the address answers to a PING, when
/// that is not Redis either. Plaintext TCP only (`own`, as for [`plaintext_to_tls_port`]).
pub async fn not_redis(err: &RedisError, own: Option<&ConnectionAddr>, limit: Duration) -> Option<Fault> {
    if err.kind() != redis::ErrorKind::Parse {
        return None;
    }
    let ConnectionAddr::Tcp(host, port) = own? else {
        return None;
    };
    let answer = first_reply_line(host, *port, limit).await?;
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

/// A redirect (MOVED, ASK) on a connection that is not a Cluster connection: `text`, the
/// server's answer, says it is a Cluster node.
pub fn cluster_node_without_cluster(target: &str, text: &str) -> Fault {
    Fault::Config(format!("{target}: the server is a Redis Cluster node (it answered {text}): add --cluster"))
}

/// A refusal that no retry can change: the URL (its database `db`) or the topology flags do
/// not fit the server at `target`.
pub fn misconfigured(target: &str, db: i64, text: &str) -> Option<Fault> {
    if text.contains("DB index is out of range") {
        return Some(Fault::Config(format!(
            "{target}: the server has no database {db} (DB index is out of range; its `databases` \
             setting bounds it, 16 by default): fix the database number in the Redis URL"
        )));
    }
    if text.contains("refused to switch database") {
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

/// What asking `sentinel` for the master failed with, when no retry changes it: the address
/// is no Sentinel (a plain Redis, or no Redis at all), the Sentinel refuses the credentials or
/// the command, or TLS cannot work (refused, or spoken to a plaintext port or the reverse).
pub async fn sentinel_mistake(sentinel: &Node, err: &RedisError, limit: Duration) -> Option<Fault> {
    let shown = &sentinel.shown;
    let fault = Fault::from_redis(err);
    match &fault {
        Fault::Denied(text) => {
            let fix = "fix the user or password in --sentinel, --sentinel-password-file or \
                       REDLOCK_SENTINEL_PASSWORD";
            return Some(Fault::Denied(match err.code() {
                Some("NOAUTH") => format!("Sentinel {shown} requires a password ({text}): {fix}"),
                Some("NOPERM") => format!(
                    "Sentinel {shown}: its ACL does not let this user ask for the master ({text}): allow \
                     SENTINEL GET-MASTER-ADDR-BY-NAME, and SUBSCRIBE to +switch-master"
                ),
                _ => format!("Sentinel {shown} refused the credentials ({text}): {fix}"),
            }));
        }
        Fault::Config(text) => return Some(Fault::Config(format!("Sentinel {shown}: {text}"))),
        _ => {}
    }
    if err.detail().is_some_and(|d| d.contains("unknown command")) {
        return Some(Fault::Config(format!(
            "--sentinel {shown} is not a Sentinel (it answered like a plain Redis: {err}): give the \
             Sentinels' addresses (port 26379 by default), or --redis-url alone for a plain Redis"
        )));
    }
    if err.kind() == redis::ErrorKind::Parse {
        return Some(Fault::Config(format!(
            "--sentinel {shown} does not speak the Redis protocol: give the Sentinels' addresses \
             (port 26379 by default)"
        )));
    }
    let addr = sentinel.client.get_connection_info().addr();
    let mistaken = match plaintext_to_tls_port(err, &fault, Some(addr), limit).await {
        Some(mistake) => Some(mistake),
        None => tls_to_plaintext_port(&fault, addr, limit).await,
    };
    mistaken.map(|m| Fault::Config(format!("--sentinel {shown}: {m}")))
}

/// The first line of a message (redis-rs's parse errors run over several).
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// `EVALSHA` in "… unknown command 'EVALSHA', with args beginning with: …" (Redis 6.2 quotes
/// it with backticks).
fn unknown_command(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("unknown command ")?;
    let quote = rest.chars().next().filter(|q| matches!(q, '\'' | '`'))?;
    let rest = &rest[1..];
    Some(rest.split_once(quote).map_or(rest, |(command, _)| command))
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

    #[test]
    fn an_unknown_command_is_read_in_either_servers_quotes() {
        for text in [
            "ERR unknown command 'EVALSHA', with args beginning with: 'abc' '0'",
            "ERR unknown command `EVALSHA`, with args beginning with: `abc`, `0`, ",
        ] {
            assert_eq!(super::unknown_command(text), Some("EVALSHA"), "{text}");
        }
        assert_eq!(super::unknown_command("ERR wrong number of arguments"), None);
    }
}
