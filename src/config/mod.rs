//! Command-line arguments → one validated, typed [`Config`]. No clap types past this point.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{
    Cli, Deferred, KeyArg, LogFormatArg, OnLostArg, OutputArgs, RedisArgs, RunArgs, SubcommandArg,
};
use crate::exit::Error;
use crate::lock::KILL_AHEAD;
use crate::lock::settings::{DEFAULT_SOURCE, Idempotency, RedisConfig, Tls, Topology};
use crate::lock::{Kind, NOTE_MAX, drift};

pub mod env;
mod key_rules;
mod server;
mod timing;

use env::*;
use key_rules::*;
use server::*;
pub use timing::MIN_SLACK;
use timing::*;
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
    /// `lock`: a run whose command is the rest of the script that runs it.
    Lock {
        config: Box<Config>,
        allow_interactive: bool,
    },
    Unlock {
        output: Output,
    },
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
            None => Config::from_run(cli.run, cli.command).map(|c| Invocation::Run(Box::new(c))),
            Some(SubcommandArg::Lock(Deferred(a))) => {
                let a = *a;
                let busy = crate::exit::status::BUSY;
                let busy_zero = format!(
                    "would let eval succeed without the lock; end the script with 0 when busy instead: || \
                     {{ s=$?; [ \"$s\" = {busy} ] && exit 0; exit \"$s\"; }}"
                );
                for (given, flag, why) in [
                    (
                        a.run.idempotency_key.is_some(),
                        "--idempotency-key",
                        "records a success from the command's exit status, which a script's holder cannot \
                         see; wrap the command instead",
                    ),
                    (
                        a.run.metrics_file.is_some(),
                        "--metrics-file",
                        "reports the command's outcome (success or failure, the last success), and a \
                         script's exit status is its parent's to know, not its holder's",
                    ),
                    (
                        a.run.no_new_privs,
                        "--no-new-privs",
                        "applies to a command the wrapper starts, and the script runs already",
                    ),
                    (a.run.busy_exit_code == 0, "--busy-exit-code 0", &busy_zero),
                ] {
                    if given {
                        return Err(usage(format!("lock cannot take {}: it {why}", named(flag))));
                    }
                }
                Ok(Invocation::Lock {
                    config: Box::new(Config::from_run(a.run, Vec::new())?),
                    allow_interactive: a.allow_interactive,
                })
            }
            Some(SubcommandArg::Unlock(Deferred(a))) => Ok(Invocation::Unlock { output: output(&a.output) }),
            Some(SubcommandArg::Status(Deferred(a))) => Ok(Invocation::Status {
                keys: keys(&a.key, false)?,
                json: a.json,
                redis: redis_config(&a.redis, OPERATOR_TIMEOUT, OPERATOR_TIMEOUT, None)?,
                output: output(&a.output),
            }),
            Some(SubcommandArg::Release(Deferred(a))) => {
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

    /// The lock keys the invocation is about, in the order given.
    pub fn keys(&self) -> &[Vec<u8>] {
        match self {
            Invocation::Run(c) | Invocation::Lock { config: c, .. } => &c.keys,
            Invocation::Status { keys, .. } | Invocation::Release { keys, .. } => keys,
            Invocation::Unlock { .. } => &[],
        }
    }

    pub fn output(&self) -> Output {
        match self {
            Invocation::Run(c) | Invocation::Lock { config: c, .. } => c.output,
            Invocation::Status { output, .. }
            | Invocation::Release { output, .. }
            | Invocation::Unlock { output } => *output,
        }
    }
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

/// A run, validated: every duration parsed and the lease arithmetic checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// The (first) lock key, as bytes (`--key`; at most `MAX_KEY_LEN`).
    pub key: Vec<u8>,
    /// Every lock key, the first included, in the order given (`--key`, repeated).
    pub keys: Vec<Vec<u8>>,
    /// The lease length, whole milliseconds, as sent to Redis (`--ttl`).
    pub ttl: Duration,
    /// How long to wait for a busy lock; zero fails at once, `None` waits without a limit
    /// (`--wait`, `forever`).
    pub wait: Option<Duration>,
    /// The spread of the random sleep before the first attempt (`--jitter`; zero when not
    /// given: no sleep).
    pub jitter: Duration,
    /// Run without a lock when Redis cannot be reached at all (`--fail-open`).
    pub fail_open: bool,
    /// The least time the lock stays after the acquisition, the command's end notwithstanding
    /// (`--min-hold`; zero when not given).
    pub min_hold: Duration,
    /// The kind of lock (`--shared`, `--limit N`).
    pub kind: Kind,
    /// The label stored with the holder (`--note`; `None` when not given or empty).
    pub note: Option<String>,
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

impl Config {
    fn from_run(cli: RunArgs, command: Vec<OsString>) -> Result<Self, Error> {
        let keys = keys(&cli.key, true)?;
        let key = keys[0].clone();
        let ttl = duration("--ttl", &cli.ttl)?;
        // Redis expires keys in whole milliseconds; the local lease uses exactly what is sent.
        let ttl = Duration::from_millis(ttl.as_millis().try_into().unwrap_or(u64::MAX));
        if ttl.is_zero() {
            return Err(usage(format!("{} must be at least 1ms", named("--ttl"))));
        }
        let renew_every_flag =
            cli.renew_every.as_deref().map(|s| duration("--renew-every", s)).transpose()?;
        let kill_grace_flag = cli.kill_grace.as_deref().map(|s| duration("--kill-grace", s)).transpose()?;
        // The defaults follow the TTL; given values stay as they are.
        let renew_every_for = |ttl: Duration| renew_every_flag.unwrap_or(ttl / 3);
        let kill_grace_for =
            |ttl: Duration| kill_grace_flag.unwrap_or((ttl / 6).min(Duration::from_secs(10)));
        let (renew_every, kill_grace) = (renew_every_for(ttl), kill_grace_for(ttl));
        let wait = wait("--wait", &cli.wait)?;
        if wait.is_none() && cli.fail_open {
            // It would fail open only once Redis had been unreachable for the whole wait.
            let (fail_open, wait) = (named("--fail-open"), named("--wait"));
            return Err(usage(format!(
                "{fail_open} runs the command without the lock once Redis has stayed unreachable for \
                 the whole wait, which {wait}=forever never ends: give {wait} a limit, or drop {fail_open}"
            )));
        }
        let jitter = match &cli.jitter {
            Some(s) => duration_or_zero("--jitter", s)?,
            None => Duration::ZERO,
        };
        let min_hold = match &cli.min_hold {
            Some(s) => duration_or_zero("--min-hold", s)?,
            None => Duration::ZERO,
        };
        let idempotency = match &cli.idempotency_key {
            Some(id) if id.is_empty() => {
                return Err(usage(format!("{} must not be empty", named("--idempotency-key"))));
            }
            Some(id) => Some(Idempotency {
                id: id.as_bytes().to_vec(),
                ttl: whole_millis("--idempotency-ttl", &cli.idempotency_ttl)?,
            }),
            None => {
                whole_millis("--idempotency-ttl", &cli.idempotency_ttl)?;
                None
            }
        };
        let note = note(cli.note.as_deref())?;
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

        if let Some(path) = &cli.metrics_file {
            metrics_file_writable(path)?;
        }

        Ok(Config {
            key,
            keys,
            ttl,
            wait,
            jitter,
            fail_open: cli.fail_open,
            min_hold,
            kind,
            note,
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
            command,
            outer: Outer::from_env(),
        })
    }
}

/// The kind of lock from `--shared` and `--limit`. They do not combine; when one comes from the
/// environment and the other from the command line, the command line wins.
fn kind(cli: &RunArgs) -> Result<Kind, Error> {
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

/// `--note`, checked: text that another run's message and `status` can show on one line as it
/// was given, less the whitespace around it. Empty (or blank) is none (a CI variable that is not
/// set).
fn note(given: Option<&std::ffi::OsStr>) -> Result<Option<String>, Error> {
    let Some(given) = given else { return Ok(None) };
    let flag = named("--note");
    let Some(note) = given.to_str() else {
        return Err(usage(format!("{flag} must be UTF-8 text, not {given:?}")));
    };
    let note = note.trim();
    if note.is_empty() {
        return Ok(None);
    }
    if note.len() > NOTE_MAX {
        return Err(usage(format!(
            "{flag} is {} bytes long, more than the {NOTE_MAX} a note may have: give a short label (a \
             URL, a ticket, a pod's name)",
            note.len()
        )));
    }
    // What could not be shown as it is (a line break, an escape, a right-to-left override that
    // turns the rest of a status line around) is refused rather than stored.
    if let Some(c) = note.chars().find(|&c| crate::lock::unseen(c)) {
        return Err(usage(format!(
            "{flag} must be one line of text without control or invisible characters, and has {c:?}: \
             {note:?}"
        )));
    }
    Ok(Some(note.to_owned()))
}

/// `--metrics-file` is written at exit, after the command ran: a path that cannot take it is
/// refused now, before the lock is taken, rather than warned about then (an alert on the last
/// success would silently never fire).
fn metrics_file_writable(path: &std::path::Path) -> Result<(), Error> {
    crate::metrics::check_writable(path).map_err(|e| {
        let source = crate::cli::value_from_variable("--metrics-file").unwrap_or("--metrics-file".into());
        Error::Config(format!(
            "{source} {}: cannot write the metrics file there ({e}); give a path in an existing, \
             writable directory",
            path.display()
        ))
    })
}

fn usage(msg: impl Into<String>) -> Error {
    Error::Usage(msg.into())
}

#[cfg(test)]
mod tests {
    use super::env::WRAPPER_VARIABLES;
    use super::sentinel_url;

    #[test]
    fn the_commands_variables_never_configure_a_wrapper() {
        let configuring = WRAPPER_VARIABLES;
        assert!(configuring.contains(&"REDLOCK_KEY"), "{configuring:?}");
        for name in super::env::vars::ALL {
            assert!(!configuring.contains(&name), "{name} configures a wrapper");
        }
    }

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
            assert_eq!(sentinel_url(given, "--sentinel").unwrap(), url, "{given}");
        }
        let e = sentinel_url("unix://u:S3cret@/run/sentinel.sock", "--sentinel").unwrap_err().to_string();
        assert!(e.contains("HOST[:PORT]") && !e.contains("S3cret"), "{e}");
        for pasted in ["S3c!ret", "S3c%ret:26379", "u:pw@S3c$ret", "S3cret:pw", ""] {
            let e = sentinel_url(pasted, "REDLOCK_SENTINEL").unwrap_err().to_string();
            assert!(e.starts_with("REDLOCK_SENTINEL ") && e.contains("not a host name"), "{pasted}: {e}");
            assert!(!e.to_lowercase().contains("s3c"), "{pasted}: {e}");
        }
    }
}
