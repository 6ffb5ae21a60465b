//! Where Redis is and how to reach it: the URL and its source, topology, Sentinel addresses,
//! TLS material and password files, into `lock::settings`.

use super::*;
/// The URL (flag, then `REDLOCK_REDIS_URL`, then `REDIS_URL`), topology, credentials, TLS
/// material and timeouts; with `slack`, given timeouts must be shorter than it.
pub(super) fn redis_config(
    args: &RedisArgs,
    connect_default: Duration,
    command_default: Duration,
    slack: Option<Duration>,
) -> Result<RedisConfig, Error> {
    let mut urls = args.redis_url.clone();
    let mut url_source = "--redis-url";
    if urls.is_empty() {
        for name in ["REDLOCK_REDIS_URL", "REDIS_URL"] {
            if let Some(url) = non_empty_env(name)? {
                urls.push(url);
                url_source = name;
                break;
            }
        }
    }
    if urls.is_empty() {
        urls.push(DEFAULT_URL.to_owned());
        url_source = DEFAULT_SOURCE;
    }
    for (i, url) in urls.iter().enumerate() {
        let same = |other: &String| other.trim_end_matches('/') == url.trim_end_matches('/');
        if urls[..i].iter().any(same) {
            return Err(usage(format!(
                "--redis-url {} is given more than once: a Redlock quorum needs independent servers, \
                 each given once",
                crate::lock::url::redact_url(url)
            )));
        }
    }
    // REDLOCK_SENTINEL is read here rather than by clap, which would split `--sentinel` values
    // at commas too (a comma in a password would cut it in two, and send the first half to a
    // host named by the second).
    let (sentinels, sentinel_source): (Vec<String>, _) = if args.sentinel.is_empty() {
        let listed = non_empty_env("REDLOCK_SENTINEL")?.unwrap_or_default();
        let listed = listed.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
        (listed, "REDLOCK_SENTINEL")
    } else {
        (args.sentinel.clone(), "--sentinel")
    };
    match (&args.sentinel_master, sentinels.is_empty()) {
        (Some(_), true) => {
            return Err(usage(format!(
                "{} needs --sentinel (or REDLOCK_SENTINEL)",
                named("--sentinel-master")
            )));
        }
        (None, false) => {
            return Err(usage(format!(
                "{sentinel_source} needs --sentinel-master (or REDLOCK_SENTINEL_MASTER)"
            )));
        }
        _ if args.cluster && !sentinels.is_empty() => {
            return Err(usage("--cluster and --sentinel do not go together"));
        }
        _ => {}
    }
    if args.sentinel_password_file.is_some() && sentinels.is_empty() {
        return Err(usage(format!(
            "{} needs --sentinel (or REDLOCK_SENTINEL)",
            named("--sentinel-password-file")
        )));
    }
    let topology = if args.cluster {
        Topology::Cluster { seeds: urls.clone() }
    } else if let Some(master) = &args.sentinel_master {
        let sentinels: Vec<String> =
            sentinels.iter().map(|s| sentinel_url(s, sentinel_source)).collect::<Result<_, _>>()?;
        // Parsed here too, where the error can name the variable a malformed one came from.
        for sentinel in &sentinels {
            crate::lock::url::parse(sentinel, sentinel_source)?;
        }
        for (i, sentinel) in sentinels.iter().enumerate() {
            if sentinels[..i].contains(sentinel) {
                return Err(usage(format!(
                    "{sentinel_source} {} is given more than once",
                    crate::lock::url::redact_url(sentinel)
                )));
            }
        }
        Topology::Sentinel { sentinels, master: master.clone() }
    } else if urls.len() > 1 {
        Topology::Quorum { urls: urls.clone() }
    } else {
        Topology::Single
    };
    if matches!(topology, Topology::Sentinel { .. }) && urls.len() > 1 {
        return Err(usage(
            "with --sentinel, give at most one --redis-url (for scheme, credentials and database)",
        ));
    }
    let password = match (&args.password_file, non_empty_env("REDLOCK_PASSWORD")?) {
        (Some(path), _) => Some(read_password("--password-file", path)?),
        (None, env) => env,
    };
    let sentinel_password = match (&args.sentinel_password_file, &topology) {
        (Some(path), _) => Some(read_password("--sentinel-password-file", path)?),
        (None, Topology::Sentinel { .. }) => non_empty_env("REDLOCK_SENTINEL_PASSWORD")?,
        (None, _) => None,
    };
    let read = |flag: &str, path: &Option<PathBuf>| -> Result<Option<Vec<u8>>, Error> {
        path.as_ref()
            .map(|p| {
                std::fs::read(p).map_err(|e| Error::Config(format!("{} {}: {e}", named(flag), p.display())))
            })
            .transpose()
    };
    // TLS options where nothing speaks TLS would be ignored: the run would go in plain text.
    let tls_flag = [
        (args.tls_insecure, "--tls-insecure"),
        (args.tls_ca_file.is_some(), "--tls-ca-file"),
        (args.tls_cert_file.is_some(), "--tls-cert-file"),
        (args.tls_key_file.is_some(), "--tls-key-file"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag));
    let speaks_tls = |url: &String| url.get(..9).is_some_and(|s| s.eq_ignore_ascii_case("rediss://"));
    if let Some(flag) = tls_flag
        && !urls.iter().chain(&sentinels).any(speaks_tls)
    {
        let scheme = urls[0].split_once("://").map_or("redis", |(scheme, _)| scheme);
        return Err(usage(format!(
            "{} is for TLS, but the Redis URL ({url_source}) is {scheme}://, which is plain text: use \
             rediss:// for TLS, or drop {}",
            named(flag),
            named(flag)
        )));
    }
    let tls = Tls {
        ca: pem("--tls-ca-file", &args.tls_ca_file, Pem::Certificates, read)?,
        client: match (
            pem("--tls-cert-file", &args.tls_cert_file, Pem::Certificates, read)?,
            pem("--tls-key-file", &args.tls_key_file, Pem::PrivateKey, read)?,
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            _ => None,
        },
        insecure: args.tls_insecure,
    };
    let timeout = |flag: &str, value: &Option<String>, default: Duration| match (value, slack) {
        (Some(v), Some(slack)) => bounded_timeout(flag, v, slack),
        (Some(v), None) => duration(flag, v),
        (None, _) => Ok(default),
    };
    Ok(RedisConfig {
        url: urls.swap_remove(0),
        url_source,
        topology,
        password,
        sentinel_password,
        tls,
        connect_timeout: timeout("--connect-timeout", &args.connect_timeout, connect_default)?,
        command_timeout: timeout("--command-timeout", &args.command_timeout, command_default)?,
    })
}

/// Where the Redis URL comes from when nothing names one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// A Sentinel as given, as a URL: `redis://HOST:PORT` for `HOST[:PORT]`, `redis://…` and
/// `rediss://…` as they are, with Sentinel's own port, 26379, wherever none is given (where a
/// Redis URL would mean 6379), and the host in lowercase (see `lock::url::lowercase_host`).
/// `USER:PASSWORD@HOST[:PORT]` without a scheme is taken as `redis://`. `source`: the flag or
/// variable that gave it, for the error.
pub(super) fn sentinel_url(addr: &str, source: &str) -> Result<String, Error> {
    let (scheme, rest, bare) = match addr.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("redis") || scheme.eq_ignore_ascii_case("rediss") =>
        {
            (scheme.to_ascii_lowercase(), rest, false)
        }
        Some(_) => {
            return Err(Error::Config(format!(
                "{source} {}: give a Sentinel as HOST[:PORT], redis://[USER[:PASSWORD]@]HOST[:PORT] or \
                 rediss://… for TLS",
                crate::lock::url::redact_url(addr)
            )));
        }
        None => ("redis".to_owned(), addr, true),
    };
    // The authority ends at the first `/`, `?` or `#` after any credentials (a password in a
    // URL has those percent-encoded; in the bare form it may hold them as they are).
    let start = if bare { rest.rfind('@').map_or(0, |at| at + 1) } else { 0 };
    let end = rest[start..].find(['/', '?', '#']).map_or(rest.len(), |i| start + i);
    let (authority, tail) = rest.split_at(end);
    let (credentials, host) = match authority.rsplit_once('@') {
        Some((credentials, host)) => (format!("{credentials}@"), host.to_ascii_lowercase()),
        None => (String::new(), authority.to_ascii_lowercase()),
    };
    // A bare value that no host could have may be a password pasted in the wrong place: it is
    // refused without being shown.
    let host_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let plausible = host.starts_with('[')
        || match host.rsplit_once(':') {
            Some((name, port)) => name.chars().all(host_char) && port.bytes().all(|b| b.is_ascii_digit()),
            None => host.chars().all(host_char),
        };
    if bare && (host.is_empty() || !plausible) {
        return Err(Error::Config(format!(
            "{source} {}: not a host name: give a Sentinel as HOST[:PORT], \
             [USER:PASSWORD@]HOST[:PORT] or redis[s]://…; the value is not shown, in case it is a password",
            crate::lock::url::redact_url(addr)
        )));
    }
    let has_port = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').is_some_and(|(_, rest)| rest.starts_with(':')),
        None => host.contains(':'),
    };
    let port = if has_port { "" } else { ":26379" };
    Ok(format!("{scheme}://{credentials}{host}{port}{tail}"))
}

/// What a TLS file must hold.
#[derive(Clone, Copy)]
pub(super) enum Pem {
    /// One certificate at least (a CA bundle, or a client certificate chain).
    Certificates,
    PrivateKey,
}

/// Reads a TLS file with `read` and checks that it holds what `flag` needs, so that a wrong
/// file is named with its flag now rather than failing the handshake later under another name.
pub(super) fn pem(
    flag: &str,
    path: &Option<PathBuf>,
    what: Pem,
    read: impl Fn(&str, &Option<PathBuf>) -> Result<Option<Vec<u8>>, Error>,
) -> Result<Option<Vec<u8>>, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let Some(bytes) = read(flag, path)? else { return Ok(None) };
    let shown = path.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
    let problem = match what {
        Pem::Certificates => {
            let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
            match certs {
                Ok(certs) if certs.is_empty() => Some("holds no PEM certificate".to_owned()),
                Ok(_) => None,
                Err(e) => Some(format!("is not valid PEM ({e})")),
            }
        }
        Pem::PrivateKey => match PrivateKeyDer::from_pem_slice(&bytes) {
            Ok(_) => None,
            Err(e) => Some(format!("holds no usable PEM private key ({e})")),
        },
    };
    match problem {
        Some(problem) => Err(Error::Config(format!("{} {shown} {problem}", named(flag)))),
        None => Ok(Some(bytes)),
    }
}

/// The first line of a password file, without its line ending.
pub(super) fn read_password(flag: &str, path: &std::path::Path) -> Result<String, Error> {
    use std::io::Read;
    // Only the first line counts; a file that never ends (`/dev/zero`) is read no further.
    const MOST: u64 = 64 * 1024;
    let failed = |e: std::io::Error| Error::Config(format!("{} {}: {e}", named(flag), path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(MOST).read_to_end(&mut bytes)).map_err(failed)?;
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    if first.len() == bytes.len() && bytes.len() as u64 == MOST {
        return Err(Error::Config(format!(
            "{} {}: no line ends within the first {} KiB",
            named(flag),
            path.display(),
            MOST / 1024
        )));
    }
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    let password = String::from_utf8(first.to_vec()).map_err(|_| {
        Error::Config(format!("{} {}: the first line is not valid UTF-8", named(flag), path.display()))
    })?;
    if password.is_empty() {
        let what = if bytes.is_empty() { "the file is empty" } else { "its first line is empty" };
        return Err(Error::Config(format!("{} {}: {what}", named(flag), path.display())));
    }
    Ok(password)
}
