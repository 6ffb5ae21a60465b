//! Command-line arguments → one validated, typed [`Config`]. No clap types past this point.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{Action, Cli, Deferred, KeyArg, LogFormatArg, OnLostArg, OutputArgs, RedisArgs};
use crate::exit::Error;
pub use crate::lock::KILL_AHEAD;
pub use crate::lock::settings::{DEFAULT_SOURCE, Idempotency, RedisConfig, Tls, Topology};
use crate::lock::{Kind, drift};

/// The least time left between a renewal going out and the moment the command would have to be
/// stopped without it: the first renewal goes out `renew-every` after the acquisition's reply,
/// while the lease counts from before its request, and a wrapper descheduled for a moment
/// renews late (why 20 ms: BENCHMARKS.md § Reading the numbers).
pub const MIN_SLACK: Duration = Duration::from_millis(20);

/// The renewal slack: the time between a renewal going out and the moment the command must be
/// stopped if it has not been confirmed (SIGTERM at `deadline − kill-grace`, SIGKILL at
/// `deadline − KILL_AHEAD`, whichever comes first). `None` when there is none at all.
fn renewal_slack(ttl: Duration, renew_every: Duration, kill_grace: Duration) -> Option<Duration> {
    ttl.checked_sub(drift(ttl))?.checked_sub(renew_every)?.checked_sub(kill_grace.max(KILL_AHEAD))
}

/// What to do when ownership of the lock is lost or can no longer be confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    Terminate,
    Ignore,
}

/// How much the wrapper says on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Info,
    Debug,
}

/// Format of the diagnostics on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// `Some(value)` only for JSON: a field that a text line leaves out, because its message
    /// already says it in words or the line has always been read without it. (An event records
    /// no field for a `None`.)
    pub fn json_only<T>(self, value: T) -> Option<T> {
        (self == LogFormat::Json).then_some(value)
    }
}

/// Where diagnostics go and how many.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// How much goes to stderr (`-q`, `-v`, `-vv`).
    pub verbosity: Verbosity,
    /// Text or JSON lines (`--log-format`).
    pub format: LogFormat,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    Run(Box<Config>),
    Status {
        /// Every key given, in order.
        keys: Vec<Vec<u8>>,
        json: bool,
        redis: RedisConfig,
        output: Output,
    },
    Release {
        /// Every key given, in order.
        keys: Vec<Vec<u8>>,
        /// `--holder`: drop only the holder whose token starts with this.
        holder: Option<String>,
        json: bool,
        redis: RedisConfig,
        output: Output,
    },
}

/// The bounds the operator subcommands use when none are given.
const OPERATOR_TIMEOUT: Duration = Duration::from_secs(2);

impl Invocation {
    pub fn from_cli(cli: Cli) -> Result<Self, Error> {
        match cli.action {
            None => Config::from_cli(cli).map(|c| Invocation::Run(Box::new(c))),
            Some(Action::Status(Deferred(a))) => Ok(Invocation::Status {
                keys: keys(&a.key, false)?,
                json: a.json,
                redis: redis_config(&a.redis, OPERATOR_TIMEOUT, OPERATOR_TIMEOUT, None)?,
                output: output(&a.output),
            }),
            Some(Action::Release(Deferred(a))) => {
                if !a.force {
                    return Err(usage(
                        "release deletes the lock whoever holds it and can let two runs overlap; \
                         add --force to do it",
                    ));
                }
                if let Some(prefix) = &a.holder
                    && (prefix.is_empty()
                        || prefix.len() > 32
                        || !prefix.bytes().all(|b| b.is_ascii_hexdigit()))
                {
                    return Err(usage(format!(
                        "--holder must be the start of a holder's token, 1 to 32 hexadecimal digits as \
                         `status` shows them, not {prefix:?}"
                    )));
                }
                Ok(Invocation::Release {
                    keys: keys(&a.key, false)?,
                    holder: a.holder.map(|p| p.to_ascii_lowercase()),
                    json: a.json,
                    redis: redis_config(&a.redis, OPERATOR_TIMEOUT, OPERATOR_TIMEOUT, None)?,
                    output: output(&a.output),
                })
            }
        }
    }

    /// The (first) lock key the invocation is about.
    pub fn key(&self) -> &[u8] {
        match self {
            Invocation::Run(c) => &c.key,
            Invocation::Status { keys, .. } | Invocation::Release { keys, .. } => &keys[0],
        }
    }

    pub fn output(&self) -> Output {
        match self {
            Invocation::Run(c) => c.output,
            Invocation::Status { output, .. } | Invocation::Release { output, .. } => *output,
        }
    }
}

/// Every environment variable that configures a wrapper: what the command must not inherit, so
/// that a `redlock-run` inside it configures itself afresh (and no password leaks into it).
/// Other `REDLOCK_*` variables are the user's and are passed on. A test keeps this list equal
/// to the CLI's own (start-up does not build the clap command a second time for it).
pub const WRAPPER_VARIABLES: [&str; 32] = [
    "REDLOCK_BUSY_EXIT_CODE",
    "REDLOCK_CLUSTER",
    "REDLOCK_COMMAND_TIMEOUT",
    "REDLOCK_CONNECT_TIMEOUT",
    "REDLOCK_FAIL_OPEN",
    "REDLOCK_IDEMPOTENCY_KEY",
    "REDLOCK_IDEMPOTENCY_TTL",
    "REDLOCK_KEY",
    "REDLOCK_KILL_GRACE",
    "REDLOCK_LIMIT",
    "REDLOCK_LOG_FORMAT",
    "REDLOCK_MAX_RUNTIME",
    "REDLOCK_METRICS_FILE",
    "REDLOCK_MIN_HOLD",
    "REDLOCK_NO_NEW_PRIVS",
    "REDLOCK_ON_LOST",
    // Read by hand rather than by clap (see `redis_config`).
    "REDLOCK_PASSWORD",
    "REDLOCK_PASSWORD_FILE",
    "REDLOCK_QUIET",
    "REDLOCK_REDIS_URL",
    "REDLOCK_RENEW_EVERY",
    // Read by hand rather than by clap (see `redis_config`).
    "REDLOCK_SENTINEL",
    "REDLOCK_SENTINEL_MASTER",
    "REDLOCK_SENTINEL_PASSWORD",
    "REDLOCK_SENTINEL_PASSWORD_FILE",
    "REDLOCK_SHARED",
    "REDLOCK_TLS_CA_FILE",
    "REDLOCK_TLS_CERT_FILE",
    "REDLOCK_TLS_INSECURE",
    "REDLOCK_TLS_KEY_FILE",
    "REDLOCK_TTL",
    "REDLOCK_WAIT",
];

/// The most keys one run holds: the script that takes them all checks each (about 6 µs a key
/// in Redis), and must stay far inside the shortest request timeout.
pub const MAX_KEYS: usize = 100;

/// The longest lock key: the command gets it in its environment (`REDLOCK_LOCK_KEY=…`), and Linux
/// limits one environment string to 128 KiB (MAX_ARG_STRLEN); half of that always fits.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// `--key`, once or more (clap has made sure that it is there), in the order given.
fn keys(arg: &KeyArg, for_run: bool) -> Result<Vec<Vec<u8>>, Error> {
    if arg.value.is_empty() {
        return Err(usage("--key is required"));
    }
    if arg.value.len() > MAX_KEYS {
        return Err(usage(format!(
            "--key is given {} times; a run holds at most {MAX_KEYS} keys (the script that takes them \
             all must stay well inside one request's time limit)",
            arg.value.len()
        )));
    }
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(arg.value.len());
    // The names stored next to each key, worked out once per key (a key with a `}` and no
    // usable hash tag needs a search for its slot's tag).
    let mut names: Vec<crate::lock::Keys> = Vec::with_capacity(arg.value.len());
    for raw in &arg.value {
        let raw = raw.as_bytes();
        if raw.is_empty() {
            return Err(usage("--key must not be empty"));
        }
        if keys.iter().any(|k| k == raw) {
            return Err(usage(format!(
                "--key {} is given more than once; each key is held once",
                crate::lock::show_key(raw)
            )));
        }
        // Keys whose stored names coincide (`a` and `{a}`), or a key that is another's stored
        // name (`{a}:fence`), would take one lock twice.
        let mine = crate::lock::Keys::new(raw);
        if let Some(clash) = names.iter().find_map(|k| collision(k, &mine)) {
            return Err(usage(clash));
        }
        if let Some(twin) = mine.twin().filter(|_| for_run) {
            let show = crate::lock::show_key;
            return Err(usage(format!(
                "--key {} would share its queue and its fence with the lock {} (the names stored next to \
                 {} start with {}): use {}, which is in the same Cluster slot, or a key with more than \
                 the hash tag, such as \"lock:{}\"",
                show(raw),
                show(&twin),
                show(&twin),
                show(raw),
                show(&twin),
                raw.escape_ascii()
            )));
        }
        if for_run && arg.value.len() > 1 && splits(raw) {
            return Err(usage(format!(
                "--key {} contains whitespace or a control character: with several keys, the command \
                 gets them separated by spaces (REDLOCK_KEYS), so none may contain any",
                crate::lock::show_key(raw)
            )));
        }
        keys.push(raw.to_vec());
        names.push(mine);
    }
    let total = keys.iter().map(|k| k.len() + 1).sum::<usize>() - 1;
    if total > MAX_KEY_LEN {
        return Err(usage(format!(
            "--key is {total} bytes long{}; the limit is {MAX_KEY_LEN} bytes (64 KiB), so that the \
             command's environment can hold it as REDLOCK_LOCK_KEY and REDLOCK_KEYS",
            if keys.len() > 1 { " in all" } else { "" }
        )));
    }
    Ok(keys)
}

/// How two keys would be one lock: they share what is stored next to them (`a` and `{a}`), or
/// one is a name stored next to the other (`a` and `{a}:fence`).
fn collision(a: &crate::lock::Keys, b: &crate::lock::Keys) -> Option<String> {
    let show = crate::lock::show_key;
    let (first, second) = (show(&a.lock), show(&b.lock));
    if a.fence == b.fence {
        Some(format!(
            "--key {first} and --key {second} share the names stored next to them ({}); they are one lock",
            show(&a.fence)
        ))
    } else if let Some((key, stored)) = [(a, b), (b, a)].into_iter().find(|(k, s)| k.stores(&s.lock)) {
        Some(format!(
            "--key {} is one of the names stored next to --key {}; they are one lock",
            show(&stored.lock),
            show(&key.lock)
        ))
    } else {
        None
    }
}

/// Whether a key would not survive being split at whitespace: any space or control byte, or
/// Unicode whitespace (NBSP and the like, which splitting in Python or awk also honours).
fn splits(key: &[u8]) -> bool {
    key.iter().any(|&b| b <= b' ' || b == 0x7f)
        || String::from_utf8_lossy(key).chars().any(char::is_whitespace)
}

fn output(args: &OutputArgs) -> Output {
    let verbosity = match (args.verbose, args.quiet) {
        (0, true) => Verbosity::Quiet,
        (0, false) => Verbosity::Normal,
        (1, _) => Verbosity::Info,
        (_, _) => Verbosity::Debug,
    };
    let format = match args.log_format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    };
    Output { verbosity, format }
}

/// The URL (flag, then `REDLOCK_REDIS_URL`, then `REDIS_URL`), topology, credentials, TLS
/// material and timeouts; with `slack`, given timeouts must be shorter than it.
fn redis_config(
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
    let sentinels: Vec<String> = if args.sentinel.is_empty() {
        let listed = non_empty_env("REDLOCK_SENTINEL")?.unwrap_or_default();
        listed.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
    } else {
        args.sentinel.clone()
    };
    match (&args.sentinel_master, sentinels.is_empty()) {
        (Some(_), true) => return Err(usage("--sentinel-master needs --sentinel (or REDLOCK_SENTINEL)")),
        (None, false) => return Err(usage("--sentinel needs --sentinel-master")),
        _ if args.cluster && !sentinels.is_empty() => {
            return Err(usage("--cluster and --sentinel do not go together"));
        }
        _ => {}
    }
    if args.sentinel_password_file.is_some() && sentinels.is_empty() {
        return Err(usage("--sentinel-password-file needs --sentinel (or REDLOCK_SENTINEL)"));
    }
    let topology = if args.cluster {
        Topology::Cluster { seeds: urls.clone() }
    } else if let Some(master) = &args.sentinel_master {
        let sentinels: Vec<String> = sentinels.iter().map(|s| sentinel_url(s)).collect::<Result<_, _>>()?;
        for (i, sentinel) in sentinels.iter().enumerate() {
            if sentinels[..i].contains(sentinel) {
                return Err(usage(format!(
                    "--sentinel {} is given more than once",
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
            .map(|p| std::fs::read(p).map_err(|e| Error::Config(format!("{flag} {}: {e}", p.display()))))
            .transpose()
    };
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
/// `USER:PASSWORD@HOST[:PORT]` without a scheme is taken as `redis://`.
fn sentinel_url(addr: &str) -> Result<String, Error> {
    let (scheme, rest, bare) = match addr.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("redis") || scheme.eq_ignore_ascii_case("rediss") =>
        {
            (scheme.to_ascii_lowercase(), rest, false)
        }
        Some(_) => {
            return Err(Error::Config(format!(
                "--sentinel {}: give a Sentinel as HOST[:PORT], redis://[USER[:PASSWORD]@]HOST[:PORT] or \
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
    let has_port = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').is_some_and(|(_, rest)| rest.starts_with(':')),
        None => host.contains(':'),
    };
    let port = if has_port { "" } else { ":26379" };
    Ok(format!("{scheme}://{credentials}{host}{port}{tail}"))
}

/// What a TLS file must hold.
#[derive(Clone, Copy)]
enum Pem {
    /// One certificate at least (a CA bundle, or a client certificate chain).
    Certificates,
    PrivateKey,
}

/// Reads a TLS file with `read` and checks that it holds what `flag` needs, so that a wrong
/// file is named with its flag now rather than failing the handshake later under another name.
fn pem(
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
        Some(problem) => Err(Error::Config(format!("{flag} {shown} {problem}"))),
        None => Ok(Some(bytes)),
    }
}

/// The first line of a password file, without its line ending.
fn read_password(flag: &str, path: &std::path::Path) -> Result<String, Error> {
    use std::io::Read;
    // Only the first line counts; a file that never ends (`/dev/zero`) is read no further.
    const MOST: u64 = 64 * 1024;
    let failed = |e: std::io::Error| Error::Config(format!("{flag} {}: {e}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(MOST).read_to_end(&mut bytes)).map_err(failed)?;
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    if first.len() == bytes.len() && bytes.len() as u64 == MOST {
        return Err(Error::Config(format!(
            "{flag} {}: no line ends within the first {} KiB",
            path.display(),
            MOST / 1024
        )));
    }
    let first = first.strip_suffix(b"\r").unwrap_or(first);
    let password = String::from_utf8(first.to_vec()).map_err(|_| {
        Error::Config(format!("{flag} {}: the first line is not valid UTF-8", path.display()))
    })?;
    if password.is_empty() {
        let what = if bytes.is_empty() { "the file is empty" } else { "its first line is empty" };
        return Err(Error::Config(format!("{flag} {}: {what}", path.display())));
    }
    Ok(password)
}

/// A run, validated: every duration parsed and the lease arithmetic checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// The (first) lock key, as bytes (`--key`; at most `MAX_KEY_LEN`).
    pub key: Vec<u8>,
    /// Every lock key, the first included, in the order given (`--key`, repeated).
    pub keys: Vec<Vec<u8>>,
    /// The lease length, whole milliseconds, as sent to Redis (`--ttl`).
    pub ttl: Duration,
    /// How long to wait for a busy lock; zero fails at once (`--wait`).
    pub wait: Duration,
    /// Run without a lock when Redis cannot be reached at all (`--fail-open`).
    pub fail_open: bool,
    /// The least time the lock stays after the acquisition, the command's end notwithstanding
    /// (`--min-hold`; zero when not given).
    pub min_hold: Duration,
    /// The kind of lock (`--shared`, `--limit N`).
    pub kind: Kind,
    /// `--idempotency-key` and how long its success record lives.
    pub idempotency: Option<Idempotency>,
    /// The renewal period (`--renew-every`, or ttl/3).
    pub renew_every: Duration,
    /// SIGTERM to SIGKILL (`--kill-grace`, or min(10s, ttl/6)).
    pub kill_grace: Duration,
    /// What a lost lock does to the command (`--on-lost`).
    pub on_lost: OnLost,
    /// When the command is stopped whatever else happens (`--max-runtime`).
    pub max_runtime: Option<Duration>,
    /// Start the command with PR_SET_NO_NEW_PRIVS (`--no-new-privs`).
    pub no_new_privs: bool,
    /// The exit status of a busy lock (`--busy-exit-code`).
    pub busy_exit_code: u8,
    /// Where Redis is and how to talk to it.
    pub redis: RedisConfig,
    /// Where to write the metrics at exit (`--metrics-file`).
    pub metrics_file: Option<PathBuf>,
    /// Which diagnostics go to stderr, and in which format.
    pub output: Output,
    /// The command and its arguments, never empty.
    pub command: Vec<OsString>,
    /// The lock of the run whose command started this one, if any (nested runs).
    pub outer: Option<Outer>,
}

/// The lock a run nested in another's command sees in its environment (`REDLOCK_KEYS`,
/// `REDLOCK_TOKEN`).
#[derive(Debug, Clone)]
pub struct Outer {
    pub keys: Vec<Vec<u8>>,
    pub value: String,
}

impl Outer {
    fn from_env() -> Option<Outer> {
        use crate::child::vars;
        use std::os::unix::ffi::OsStringExt;
        let value = std::env::var(vars::TOKEN).ok()?;
        let key = std::env::var_os(vars::KEY)?.into_vec();
        let all = std::env::var_os(vars::KEYS).map_or_else(|| key.clone(), OsStringExt::into_vec);
        // One key may contain spaces; several may not (config refuses them).
        let keys =
            if all == key { vec![key] } else { all.split(|b| *b == b' ').map(<[u8]>::to_vec).collect() };
        Some(Outer { keys, value })
    }
}

impl Config {
    fn from_cli(cli: Cli) -> Result<Self, Error> {
        let keys = keys(&cli.key, true)?;
        let key = keys[0].clone();
        let ttl = duration("--ttl", &cli.ttl)?;
        // Redis expires keys in whole milliseconds; the local lease uses exactly what is sent.
        let ttl = Duration::from_millis(ttl.as_millis().try_into().unwrap_or(u64::MAX));
        if ttl.is_zero() {
            return Err(usage("--ttl must be at least 1ms"));
        }
        let renew_every_flag =
            cli.renew_every.as_deref().map(|s| duration("--renew-every", s)).transpose()?;
        let kill_grace_flag = cli.kill_grace.as_deref().map(|s| duration("--kill-grace", s)).transpose()?;
        // The defaults follow the TTL; given values stay as they are.
        let renew_every_for = |ttl: Duration| renew_every_flag.unwrap_or(ttl / 3);
        let kill_grace_for =
            |ttl: Duration| kill_grace_flag.unwrap_or((ttl / 6).min(Duration::from_secs(10)));
        let (renew_every, kill_grace) = (renew_every_for(ttl), kill_grace_for(ttl));
        let wait = duration_or_zero("--wait", &cli.wait)?;
        let min_hold = match &cli.min_hold {
            Some(s) => duration_or_zero("--min-hold", s)?,
            None => Duration::ZERO,
        };
        let idempotency = match &cli.idempotency_key {
            Some(id) if id.is_empty() => return Err(usage("--idempotency-key must not be empty")),
            Some(id) => Some(Idempotency {
                id: id.as_bytes().to_vec(),
                ttl: whole_millis("--idempotency-ttl", &cli.idempotency_ttl)?,
            }),
            None => {
                whole_millis("--idempotency-ttl", &cli.idempotency_ttl)?;
                None
            }
        };
        let max_runtime = cli.max_runtime.as_deref().map(|s| duration("--max-runtime", s)).transpose()?;

        // Given Redis timeouts must fit in the slack too (see `bounded_timeout`).
        let mut longest_timeout = (Duration::ZERO, "");
        for (flag, value) in [
            ("--connect-timeout", &cli.redis.connect_timeout),
            ("--command-timeout", &cli.redis.command_timeout),
        ] {
            if let Some(d) = value.as_deref().map(|v| duration(flag, v)).transpose()? {
                longest_timeout = longest_timeout.max((d, flag));
            }
        }
        let slack_for = |ttl: Duration| renewal_slack(ttl, renew_every_for(ttl), kill_grace_for(ttl));
        let works = |ttl: Duration| slack_for(ttl).is_some_and(|s| s > MIN_SLACK && s > longest_timeout.0);
        if !works(ttl) {
            let shortest = shortest_ttl(works);
            return Err(usage(match slack_for(ttl) {
                Some(slack) if slack > MIN_SLACK => {
                    let (timeout, flag) = longest_timeout;
                    timeout_too_long(flag, timeout, slack, shortest)
                }
                _ => too_short(ttl, renew_every, kill_grace, shortest),
            }));
        }

        // Redis I/O must never be what delays the stop path: every request is bounded well
        // inside the slack between a renewal and the point where the command must be stopped,
        // leaving room for retries.
        let slack = renewal_slack(ttl, renew_every, kill_grace).expect("checked above");
        // A default is never one a user could not give: shorter than the slack, like a given one.
        let within = |d: Duration| d.min(slack - Duration::from_millis(1));
        let mut redis = redis_config(
            &cli.redis,
            within((slack / 3).clamp(Duration::from_millis(50), Duration::from_secs(5))),
            within((slack / 3).clamp(Duration::from_millis(5), Duration::from_secs(2))),
            Some(slack),
        )?;
        let kind = kind(&cli)?;
        if kind != Kind::Exclusive && matches!(redis.topology, Topology::Quorum { .. }) {
            let (limit_from_env, shared_from_env) = cli.kind_from_env;
            return Err(usage(format!(
                "{} needs one Redis (a single node, the Sentinels' master or a Cluster): a Redlock \
                 quorum (several --redis-url) holds exclusive locks only",
                match kind {
                    Kind::Shared if shared_from_env => "--shared (from REDLOCK_SHARED)",
                    Kind::Shared => "--shared",
                    _ if limit_from_env => "--limit (from REDLOCK_LIMIT)",
                    _ => "--limit",
                }
            )));
        }
        if let Topology::Quorum { .. } = redis.topology {
            // Redlock: a node that does not answer quickly is skipped, not waited for, so that
            // most of the lease is left when a majority has granted it.
            let per_node = within((ttl / 20).clamp(Duration::from_millis(5), Duration::from_millis(50)));
            if cli.redis.command_timeout.is_none() {
                redis.command_timeout = per_node;
            }
            if cli.redis.connect_timeout.is_none() {
                redis.connect_timeout = per_node;
            }
        }

        Ok(Config {
            key,
            keys,
            ttl,
            wait,
            fail_open: cli.fail_open,
            min_hold,
            kind,
            idempotency,
            renew_every,
            kill_grace,
            on_lost: match cli.on_lost {
                OnLostArg::Terminate => OnLost::Terminate,
                OnLostArg::Ignore => OnLost::Ignore,
            },
            max_runtime,
            no_new_privs: cli.no_new_privs,
            busy_exit_code: cli.busy_exit_code,
            redis,
            metrics_file: cli.metrics_file,
            output: output(&cli.output),
            command: cli.command,
            outer: Outer::from_env(),
        })
    }
}

/// The kind of lock from `--shared` and `--limit`. They do not combine; when one comes from the
/// environment and the other from the command line, the command line wins.
fn kind(cli: &Cli) -> Result<Kind, Error> {
    let (limit_from_env, shared_from_env) = cli.kind_from_env;
    let (shared, limit) = match (cli.shared, cli.limit) {
        (true, Some(_)) if shared_from_env && !limit_from_env => (false, cli.limit),
        (true, Some(_)) if limit_from_env && !shared_from_env => (true, None),
        other => other,
    };
    Ok(match (shared, limit) {
        (true, Some(_)) => {
            let source = match (limit_from_env, shared_from_env) {
                (true, true) => " (both from the environment: REDLOCK_SHARED and REDLOCK_LIMIT)",
                _ => "",
            };
            return Err(usage(format!(
                "--shared and --limit cannot be combined{source}: --shared admits any number of shared \
                 holders beside each other (and exclusive runs alone), --limit N admits N holders of \
                 one kind"
            )));
        }
        (true, None) => Kind::Shared,
        (false, None | Some(1)) => Kind::Exclusive,
        (false, Some(n)) => Kind::Limit(n),
    })
}

/// The shortest TTL, in whole milliseconds, for which `works` holds (it holds for every longer
/// one too: the slack grows with the TTL), or `None` when not even the longest does.
fn shortest_ttl(works: impl Fn(Duration) -> bool) -> Option<Duration> {
    let (mut lo, mut hi) = (0, u64::try_from(MAX_DURATION.as_millis()).expect("fits"));
    if !works(Duration::from_millis(hi)) {
        return None;
    }
    // Invariant: `works(lo)` is false (or lo = 0), `works(hi)` is true.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if works(Duration::from_millis(mid)) { hi = mid } else { lo = mid }
    }
    Some(Duration::from_millis(hi))
}

/// Why a TTL cannot work with the other timing flags, and the shortest that would.
fn too_short(
    ttl: Duration,
    renew_every: Duration,
    kill_grace: Duration,
    shortest: Option<Duration>,
) -> String {
    let fix = match shortest {
        Some(d) => format!(
            "the shortest --ttl that works with the other flags as given is {}; lengthen --ttl or shorten \
             --renew-every / --kill-grace",
            humantime::format_duration(d)
        ),
        None => "no --ttl works with these flags: shorten --renew-every / --kill-grace".to_owned(),
    };
    format!(
        "--ttl {} leaves no time to renew the lock: --renew-every ({}) + the larger of --kill-grace ({}) \
         and {} (when the command is stopped) + {} (for the renewal's round trip) must be less than \
         --ttl minus its drift allowance ({}); {fix}",
        humantime::format_duration(ttl),
        humantime::format_duration(micros(renew_every)),
        humantime::format_duration(micros(kill_grace)),
        humantime::format_duration(KILL_AHEAD),
        humantime::format_duration(MIN_SLACK),
        humantime::format_duration(micros(drift(ttl))),
    )
}

/// Why a given Redis timeout does not fit in the renewal slack, and the shortest TTL that
/// would make room for it.
fn timeout_too_long(flag: &str, timeout: Duration, slack: Duration, shortest: Option<Duration>) -> String {
    let fix = match shortest {
        Some(d) => format!(
            "shorten it, or lengthen --ttl: the shortest that works with the other flags as given is {}",
            humantime::format_duration(d)
        ),
        None => "shorten it".to_owned(),
    };
    format!(
        "{flag} ({}) must be shorter than the renewal slack, ttl − drift − renew-every − \
         kill-grace ({}): {fix}",
        humantime::format_duration(timeout),
        humantime::format_duration(micros(slack)),
    )
}

/// A duration for messages: whole microseconds are precise enough.
fn micros(d: Duration) -> Duration {
    Duration::from_micros(d.as_micros().try_into().unwrap_or(u64::MAX))
}

fn usage(msg: impl Into<String>) -> Error {
    Error::Usage(msg.into())
}

/// A variable's value, if set and not empty. A value that is not UTF-8 is an error, never a
/// reason to fall back to the next source (another Redis) without a word.
fn non_empty_env(name: &str) -> Result<Option<String>, Error> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v).filter(|v| !v.is_empty())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::Config(format!("{name} is not valid UTF-8: fix or unset it")))
        }
    }
}

/// A positive duration that Redis can keep as a key's lifetime: at least a millisecond.
fn whole_millis(flag: &str, value: &str) -> Result<Duration, Error> {
    let d = duration(flag, value)?;
    if d < Duration::from_millis(1) {
        return Err(usage(format!(
            "{flag} must be at least 1ms (Redis keeps key lifetimes in milliseconds)"
        )));
    }
    Ok(d)
}

/// A Redis timeout: positive, and short enough to leave time for a retry before the command
/// would have to be stopped.
fn bounded_timeout(flag: &str, value: &str, slack: Duration) -> Result<Duration, Error> {
    let d = duration(flag, value)?;
    if d >= slack {
        return Err(usage(format!(
            "{flag} ({}) must be shorter than the renewal slack, ttl − drift − renew-every − \
             kill-grace ({}): shorten it or lengthen --ttl",
            humantime::format_duration(d),
            humantime::format_duration(slack),
        )));
    }
    Ok(d)
}

/// Parses a humantime duration that may be zero.
fn duration_or_zero(flag: &str, value: &str) -> Result<Duration, Error> {
    if value.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse(flag, value)
}

/// Parses a positive humantime duration, naming the flag in the error.
fn duration(flag: &str, value: &str) -> Result<Duration, Error> {
    let d = parse(flag, value)?;
    if d.is_zero() {
        return Err(usage(format!("{flag} must be greater than zero")));
    }
    Ok(d)
}

fn parse(flag: &str, value: &str) -> Result<Duration, Error> {
    let d = humantime::parse_duration(value.trim()).map_err(|e| {
        usage(format!("{flag}: invalid duration {value:?}: {e} (examples: 500ms, 30s, 5m, '1h 30m')"))
    })?;
    if d > MAX_DURATION {
        return Err(usage(format!("{flag}: {value:?} is longer than the 10 years this tool accepts")));
    }
    Ok(d)
}

/// No duration is longer: keeps every deadline computed from one far from clock overflow.
const MAX_DURATION: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::{WRAPPER_VARIABLES, sentinel_url};

    #[test]
    fn the_wrapper_variables_are_the_clis_own() {
        use clap::CommandFactory;
        fn collect(cmd: &clap::Command, names: &mut Vec<String>) {
            names.extend(cmd.get_arguments().filter_map(|a| a.get_env()?.to_str().map(str::to_owned)));
            for sub in cmd.get_subcommands() {
                collect(sub, names);
            }
        }
        let mut names = vec![
            "REDLOCK_REDIS_URL".to_owned(),
            "REDLOCK_PASSWORD".to_owned(),
            "REDLOCK_SENTINEL_PASSWORD".to_owned(),
            "REDLOCK_SENTINEL".to_owned(),
        ];
        let mut cmd = crate::cli::Cli::command();
        cmd.build(); // the subcommands' options are defined as the command is built
        collect(&cmd, &mut names);
        names.sort();
        names.dedup();
        assert_eq!(names, WRAPPER_VARIABLES);
    }

    #[test]
    fn a_password_file_gives_its_first_line_and_is_read_no_further() {
        let dir = std::env::temp_dir().join(format!("redlock-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let at = |name: &str, text: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            super::read_password("--password-file", &path)
        };
        assert_eq!(at("crlf", b"pw\r\nmore").unwrap(), "pw");
        assert_eq!(at("last", b"p w").unwrap(), "p w");
        let err = |r: Result<String, crate::exit::Error>| r.unwrap_err().to_string();
        assert!(err(at("empty", b"")).contains("the file is empty"));
        assert!(err(at("blank", b"\npw")).contains("its first line is empty"));
        let endless = super::read_password("--password-file", std::path::Path::new("/dev/zero"));
        assert!(err(endless).contains("no line ends"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sentinel_without_a_port_is_on_26379() {
        for (given, url) in [
            ("localhost", "redis://localhost:26379"),
            ("10.0.0.5:5000", "redis://10.0.0.5:5000"),
            ("[::1]", "redis://[::1]:26379"),
            ("[::1]:5000", "redis://[::1]:5000"),
            ("u:pw@host", "redis://u:pw@host:26379"),
            ("u:pw@host:1", "redis://u:pw@host:1"),
            ("U:Pw@Sentinel-A", "redis://U:Pw@sentinel-a:26379"),
            ("u:p/w?x#y@h", "redis://u:p/w?x#y@h:26379"),
            ("redis://h", "redis://h:26379"),
            ("REDISS://u:Pw@H:7000", "rediss://u:Pw@h:7000"),
            ("rediss://:p%40w@h", "rediss://:p%40w@h:26379"),
            ("rediss://h#insecure", "rediss://h:26379#insecure"),
            ("redis://[::1]/", "redis://[::1]:26379/"),
        ] {
            assert_eq!(sentinel_url(given).unwrap(), url, "{given}");
        }
        let e = sentinel_url("unix://u:S3cret@/run/sentinel.sock").unwrap_err().to_string();
        assert!(e.contains("HOST[:PORT]") && !e.contains("S3cret"), "{e}");
    }
}
