//! Redis URLs as the user gives them: parsed into connection settings, with errors that say
//! where the URL came from, and shown in messages without their password.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError};

use crate::exit::Error;

/// Parses the URL that came from `source` (`--redis-url`, a variable, the default).
pub fn parse(url: &str, source: &str) -> Result<ConnectionInfo, Error> {
    // A `@` after the host is a password's: one with `#`, `/` or `?` in it, not
    // percent-encoded, ends the host early, and the URL would name a host made of the
    // password's first half (a lookup that fails like an unreachable Redis, and sends that
    // half to the resolver).
    if let Some((scheme, rest)) = url.split_once("://")
        && ["redis", "rediss", "valkey", "valkeys"].iter().any(|s| s.eq_ignore_ascii_case(scheme))
    {
        let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if rest[host_end..].contains('@') {
            return Err(Error::Config(format!(
                "{source} {}: a `@` after the host: percent-encode `@ : / ? #` in a user name or \
                 password (%40 %3A %2F %3F %23)",
                redact_url(url)
            )));
        }
    }
    if let Some(wrong) = what_is_wrong(url) {
        return Err(Error::Config(format!("{source} {}: {wrong}", redact_url(url))));
    }
    let info = url.into_connection_info().map_err(|e| invalid(url, source, e))?;
    let addr = lowercase_host(info.addr().clone());
    Ok(info.set_addr(addr))
}

/// Host names are case-insensitive (DNS; glibc's /etc/hosts lookup), but musl's /etc/hosts
/// lookup is not: `redis://LOCALHOST` failed in the static build only. Written in lowercase
/// for every build alike (a certificate's names are matched without regard to case anyway).
pub fn lowercase_host(addr: ConnectionAddr) -> ConnectionAddr {
    match addr {
        ConnectionAddr::Tcp(host, port) => ConnectionAddr::Tcp(host.to_ascii_lowercase(), port),
        ConnectionAddr::TcpTls { host, port, insecure, tls_params } => {
            ConnectionAddr::TcpTls { host: host.to_ascii_lowercase(), port, insecure, tls_params }
        }
        other => other,
    }
}

/// The error for a URL that redis-rs rejected.
pub fn invalid(url: &str, source: &str, e: RedisError) -> Error {
    // Neither the URL nor redis-rs's message about it may show a password; say where it came from.
    let expected = "expected redis://[user[:password]@]host:port[/db], rediss://… or unix:///path";
    if scheme_end(url).is_none() {
        return Error::Config(format!(
            "{source} {}: no scheme ({expected}); the value is not shown, in case it is a password",
            redact_url(url)
        ));
    }
    Error::Config(format!("{source} {}: {e} ({expected})", redact_url(url)))
}

/// What is wrong with a URL, in the tool's words, where it can tell: the scheme, the port, an
/// IPv6 address's brackets, the database, a socket's path. Never quotes what may be a password.
fn what_is_wrong(url: &str) -> Option<String> {
    const TCP: [&str; 4] = ["redis", "rediss", "valkey", "valkeys"];
    const UNIX: [&str; 3] = ["unix", "redis+unix", "valkey+unix"];
    let (scheme, rest) = url.split_once(':')?;
    let is = |names: &[&str]| names.iter().any(|n| n.eq_ignore_ascii_case(scheme));
    if is(&UNIX) {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        return (!path.starts_with('/'))
            .then(|| format!("a {scheme}: URL takes an absolute path: {scheme}:///path/to/redis.sock"));
    }
    if !is(&TCP) {
        // A name made of a scheme's characters only: anything else is no scheme (`u:pw@h`).
        let looks_like_one =
            scheme.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'));
        return (looks_like_one && rest.starts_with("//")).then(|| {
            format!("{scheme}:// is not a Redis URL scheme: use redis://, rediss:// (TLS) or unix:///path")
        });
    }
    let rest = rest.strip_prefix("//")?;
    if rest.contains('#') {
        // redis-rs reads `#insecure` as: do not verify the certificate. That is --tls-insecure's
        // to say, with its warning on every run.
        return Some(
            "a URL fragment (`#…`) is not taken: for TLS without verification, give --tls-insecure".into(),
        );
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.matches('@').count() > 1 {
        // The last `@` ends the credentials: the host after it would be sent the password and
        // what looks like the host before it.
        return Some("more than one `@`: percent-encode `@` in a user name or password (%40)".into());
    }
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let port = if let Some(v6) = host_port.strip_prefix('[') {
        let Some((address, after)) = v6.split_once(']') else {
            return Some("an IPv6 address's `[` has no closing `]`: redis://[::1]:6379".into());
        };
        if address.split('%').next().is_none_or(|a| a.parse::<std::net::Ipv6Addr>().is_err()) {
            return Some(format!(
                "[{}] is not an IPv6 address: brackets are for one, as in redis://[::1]:6379",
                address.escape_default()
            ));
        }
        if !after.is_empty() && !after.starts_with(':') {
            return Some("after an IPv6 address's `]` comes `:port` or nothing".into());
        }
        after.strip_prefix(':')
    } else {
        let (host, port) = host_port.split_once(':').map_or((host_port, None), |(h, p)| (h, Some(p)));
        if host.is_empty() {
            return Some(
                "no host: redis://host:port (credentials before it: redis://user:password@host)".into(),
            );
        }
        if port.is_some_and(|p| p.contains(':')) {
            return Some("more than one `:` after the host: one port, or an IPv6 address in brackets".into());
        }
        port
    };
    match port.filter(|p| !p.is_empty()) {
        Some(port) if !port.bytes().all(|b| b.is_ascii_digit()) => {
            // Not shown: `redis://user:password` without a host reads as a host and a port.
            return Some(
                "the port (after the host's `:`) is not a number; credentials go before the host: \
                 redis://user:password@host:port"
                    .into(),
            );
        }
        Some(port) if !port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p)) => {
            return Some(format!("port {port} is out of range: a port is 1 to 65535"));
        }
        _ => {}
    }
    let db = path.strip_prefix('/').map(|p| p.split(['?', '#']).next().unwrap_or_default());
    db.filter(|db| !db.is_empty() && !db.bytes().all(|b| b.is_ascii_digit()))
        .map(|_| "the database (after the host's `/`) is not a number: redis://host:port/0".into())
}

/// Where the scheme of a URL as given ends (after its `:` and slashes), if it has one: any
/// name before `://`, or a Redis scheme followed by `:` or `/` (`redis:/h`, `redis//h`).
fn scheme_end(url: &str) -> Option<usize> {
    const SCHEMES: [&str; 7] = ["redis", "rediss", "valkey", "valkeys", "unix", "redis+unix", "valkey+unix"];
    let name = url
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
        .filter(|_| url.starts_with(|c: char| c.is_ascii_alphabetic()))
        .unwrap_or(0);
    let after_colon = if url[name..].starts_with(':') { name + 1 } else { name };
    let slashes = url[after_colon..].len() - url[after_colon..].trim_start_matches('/').len();
    // Otherwise `u:` in `u:pw@h` would be taken for a scheme and `pw` for a user name.
    let is_scheme = (after_colon > name && slashes >= 2)
        || (SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(&url[..name])) && after_colon + slashes > name);
    is_scheme.then_some(after_colon + slashes)
}

/// The URL with any password replaced by `***`, for messages. It must hold for malformed input
/// too (`redis:/u:pw@h`, `redis//u:pw@h`), which is exactly what error messages show: after the
/// scheme, everything up to the last `@` is credentials — kept is only a user name before a
/// `:` — and the value of any `pass`/`password` query parameter is replaced too. A value
/// without a scheme is not shown at all: it may be a password pasted where the URL goes.
pub fn redact_url(url: &str) -> String {
    let Some(prefix_end) = scheme_end(url) else {
        return if url.is_empty() { String::new() } else { "***".to_owned() };
    };
    let (prefix, rest) = url.split_at(prefix_end);
    let rest = match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) if !user.is_empty() && !user.contains(['/', '?', '#']) => {
                format!("{user}:***{}", &rest[at..])
            }
            _ => format!("***{}", &rest[at..]),
        },
        // No `@`: `user:password` alone (`redis://bob:pw`) would read as host and port. A "port"
        // that is not a number may be a password.
        None => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..end].rsplit_once(':') {
                Some((host, port))
                    if !rest.starts_with('[')
                        && !port.is_empty()
                        && !port.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    format!("{host}:***{}", &rest[end..])
                }
                _ => rest.to_owned(),
            }
        }
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
    format!("{prefix}{rest}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_names_are_written_in_lowercase() {
        for (url, host) in [
            ("redis://LOCALHOST:6379", "localhost"),
            ("rediss://u:Pw@Redis.Example.COM:6380/2", "redis.example.com"),
            ("redis://[::1]:6379", "::1"),
        ] {
            let info = super::parse(url, "--redis-url").unwrap();
            let got = match info.addr() {
                redis::ConnectionAddr::Tcp(h, _) | redis::ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                other => panic!("{other:?}"),
            };
            assert_eq!(got, host, "{url}");
        }
    }

    use super::redact_url;

    #[test]
    fn a_password_that_ends_the_host_early_is_refused() {
        for url in ["redis://:S3c#ret@h:1", "rediss://u:S3c/ret@h", "redis://:S3c?r@et@h:1/0"] {
            let e = super::parse(url, "--redis-url").unwrap_err().to_string();
            assert!(e.contains("percent-encode") && !e.contains("S3c"), "{url}: {e}");
        }
        assert!(super::parse("redis://:S3c%23ret@h:1/2?protocol=resp3", "--redis-url").is_ok());
        assert!(super::parse("unix:///run/redis.sock?pass=p@ss", "--redis-url").is_ok());
    }

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

    #[test]
    fn passwords_in_malformed_urls_are_redacted() {
        for (url, shown) in [
            ("redis:/u:S3cret@h:6379", "redis:/u:***@h:6379"),
            ("redis//u:S3cret@h:1", "redis//u:***@h:1"),
            ("redis:u:S3cret@h", "redis:u:***@h"),
            ("redis:///u:S3cret@h", "redis:///u:***@h"),
            ("redis:/:S3cret@h", "redis:/***@h"),
            ("redis:/u:S3c@ret@h", "redis:/u:***@h"),
            ("foo://u:S3cret@h", "foo://u:***@h"),
            ("redis://bob:S3cret", "redis://bob:***"),
            ("redis://bob:S3cret/0", "redis://bob:***/0"),
            ("redis:h?db=1&PASS=S3cret", "redis:h?db=1&PASS=***"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!redact_url(url).contains("S3c"), "{url}");
        }
        // Nothing that looks like credentials after a scheme: unchanged.
        for url in ["redis:/h:6379", "redis//h:1", "unix:/run/redis.sock", "", "redis://[::1]:6379/2"] {
            assert_eq!(redact_url(url), url);
        }
    }

    /// Without a scheme, a value may be a password pasted where the URL goes: nothing of it is
    /// shown, nor of a host name or port it may hold.
    #[test]
    fn a_url_that_cannot_work_says_what_is_wrong_in_its_own_words() {
        for (url, says) in [
            ("http://h:6379", "http:// is not a Redis URL scheme"),
            ("redis://h:99999", "port 99999 is out of range"),
            ("rediss://h:0", "port 0 is out of range"),
            ("redis://[::1", "has no closing `]`"),
            ("redis://u:S3cret@[::1", "has no closing `]`"),
            ("redis://bob:S3cret", "the port (after the host's `:`) is not a number"),
            ("redis://h/first", "the database (after the host's `/`) is not a number"),
            ("unix:relative.sock", "takes an absolute path"),
            ("rediss://h:6380#insecure", "give --tls-insecure"),
            ("redis://u:S3cret@127.0.0.1:6379@evil", "more than one `@`"),
            ("redis://u:S3cret@[127.0.0.1]:6379", "is not an IPv6 address"),
            ("redis://u:S3cret@", "no host"),
            ("redis://u:S3cret@:6379", "no host"),
            ("redis://h:6379:6380", "more than one `:`"),
        ] {
            let Err(e) = super::parse(url, "--redis-url") else { panic!("{url} parsed") };
            let e = e.to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("S3cret") && !e.contains("InvalidClientConfig"), "{url}: {e}");
        }
        for url in [
            "redis://h:6379/0",
            "rediss://u:p@h:1",
            "redis://[::1]:6380/2",
            "unix:///tmp/r.sock",
            "redis://h",
        ] {
            assert!(super::parse(url, "--redis-url").is_ok(), "{url}");
        }
    }

    #[test]
    fn a_value_without_a_scheme_is_not_shown() {
        for url in [
            "S3cret",
            "S3cret:pw",
            "u:S3cret@h:6379",
            "S3cret@h:6379",
            ":S3cret@h",
            "//u:S3cret@h",
            "u:S3c://ret@h",
            "redi:u:S3cret@h",
            "redis@:S3cret@h",
            "h:6379?password=S3cret",
            "h:6379",
            "127.0.0.1",
        ] {
            assert_eq!(redact_url(url), "***", "{url}");
            let e = super::parse(url, "--redis-url").unwrap_err().to_string();
            assert!(e.contains("--redis-url ***: no scheme") && !e.contains("S3c"), "{url}: {e}");
        }
        // redis-rs takes this one (the URL standard drops leading spaces), but as given it has
        // no scheme: nothing of it is shown.
        assert_eq!(redact_url(" redis://u:S3cret@h"), "***");
    }
}
