//! The exit-status table (README § Exit status) in one place, and the error type that maps
//! onto it.

use std::time::Duration;

/// Exit statuses the wrapper produces itself. The command's own status passes through as is.
pub mod status {
    pub const SUCCESS: u8 = 0;
    /// `status`: the lock is free; `release`: there was nothing to release.
    pub const NOT_HELD: u8 = 1;
    pub const USAGE: u8 = 64;
    pub const WRONG_TYPE: u8 = 65;
    pub const UNAVAILABLE: u8 = 69;
    pub const INTERNAL: u8 = 70;
    pub const BUSY: u8 = 75;
    pub const PERMISSION: u8 = 77;
    pub const CONFIG: u8 = 78;
    pub const MAX_RUNTIME: u8 = 124;
    pub const LEASE_LOST: u8 = 125;
    pub const NOT_EXECUTABLE: u8 = 126;
    pub const NOT_FOUND: u8 = 127;
    /// Added to a signal number for a death by that signal (shell convention).
    pub const SIGNAL_BASE: u8 = 128;
}

/// The exit-status table as README § Exit status shows it (a test keeps the two equal) and the
/// man page prints it: (status, meaning).
pub const TABLE: [(&str, &str); 12] = [
    ("0–255", "the command's own exit status; 128+N if it died of signal N"),
    (
        "64",
        "usage error: bad flag, bad duration, missing command, timing flags that leave no room, `--shared` with `--limit`, either with a Redlock quorum",
    ),
    (
        "65",
        "the key (or its fence counter) holds data of another type, the fence counter is at its maximum, or the key is held or waited for with a kind of lock this run's does not go with (`--limit 3` against `--limit 5`, an exclusive lock or `--shared`); nothing was changed",
    ),
    (
        "69",
        "Redis unavailable or failing (fail closed): nothing listens, timeouts, OOM, READONLY, LOADING, TRYAGAIN, …",
    ),
    (
        "70",
        "internal error, or this host out of resources (file descriptors, memory) where Redis is not to blame — e.g. a wrapper started with nearly every descriptor of its open-file limit already taken; help, the version or a generated document that cannot be written to stdout (a full disk)",
    ),
    ("75", "the lock is held by someone else (`--busy-exit-code`)"),
    (
        "77",
        "Redis (or a Sentinel, when no other Sentinel names the master) refused the credentials or wants a password none was given for, or the ACL denies a command or key",
    ),
    (
        "78",
        "configuration error: malformed or unsupported Redis URL, a service that does not speak the Redis protocol, a Sentinel given as the Redis URL (or a plain Redis as `--sentinel`, a master name the Sentinels do not know, TLS that cannot work with a `--sentinel`), `--cluster` against a standalone Redis, a database number the server does not have, the system's CA certificates that cannot be loaded (`SSL_CERT_FILE` missing or empty) for a `rediss://` URL without `--tls-ca-file`, an open-file limit (`ulimit -n`) below 64 (out of descriptors a connection would fail as if Redis were unreachable, and `--fail-open` would run the command unlocked), a `--metrics-file` whose directory does not exist or cannot be written (checked before the lock is taken)",
    ),
    ("124", "the command was stopped by `--max-runtime`"),
    (
        "125",
        "lease lost: the command was stopped because ownership could not be kept — or could not be stopped at all (another user's process, or one that outlived SIGKILL); the lock was then left to expire",
    ),
    (
        "126 / 127",
        "the command could not be started (not executable, or the system refused a new process or its guardian: the process or descriptor limit) / not found",
    ),
    ("128+N", "a signal N arrived before the command was started (nothing was run or held)"),
];

/// The subcommands' exit statuses as their man pages show them: (status, meaning), `None` for
/// any other.
pub const STATUS_TABLE: &[(Option<u8>, &str)] = &[
    (Some(status::SUCCESS), "the lock is held"),
    (Some(status::NOT_HELD), "the lock is free"),
    (Some(status::USAGE), "usage error"),
    (Some(status::UNAVAILABLE), "Redis unavailable"),
    (Some(status::PERMISSION), "Redis refused the credentials or the ACL denies a command"),
    (Some(status::CONFIG), "configuration error"),
];

pub const RELEASE_TABLE: &[(Option<u8>, &str)] = &[
    (Some(status::SUCCESS), "the lock was released"),
    (Some(status::NOT_HELD), "there was nothing to release"),
    (Some(status::USAGE), "usage error (also: --force missing)"),
    (Some(status::WRONG_TYPE), "the key holds another type; it was left alone"),
    (Some(status::UNAVAILABLE), "Redis unavailable"),
    (Some(status::PERMISSION), "Redis refused the credentials or the ACL denies a command"),
    (Some(status::CONFIG), "configuration error"),
];

pub const LOCK_TABLE: &[(Option<u8>, &str)] = &[
    (Some(status::SUCCESS), "the lock is held for the script; the assignments are printed"),
    (
        Some(status::USAGE),
        "usage error, or a script that cannot be guarded: not evaluating the output, interactive, or \
         holding the key already",
    ),
    (Some(status::WRONG_TYPE), "the key holds another type, or is used with another kind of lock"),
    (Some(status::UNAVAILABLE), "Redis unavailable"),
    (Some(status::INTERNAL), "internal error"),
    (Some(status::BUSY), "lock busy (--busy-exit-code)"),
    (Some(status::PERMISSION), "Redis refused the credentials or the ACL denies a command"),
    (Some(status::CONFIG), "configuration error"),
    (None, "on any failure only (exit N) is printed, so that eval fails with status N"),
];

pub const UNLOCK_TABLE: &[(Option<u8>, &str)] = &[
    (Some(status::SUCCESS), "the lock was released"),
    (Some(status::USAGE), "no lock: REDLOCK_HOLDER is not set"),
    (Some(status::INTERNAL), "the holder cannot be reached"),
    (Some(status::PERMISSION), "the holder belongs to another user (only its user and root may unlock it)"),
    (Some(status::LEASE_LOST), "the lock was lost (the script is being stopped), or its holder is gone"),
];

/// The exit statuses in a paragraph, for `--help`.
pub fn summary() -> String {
    use status::*;
    format!(
        "Exit status: the command's own status ({SIGNAL_BASE}+N if it died of signal N); {USAGE} usage error;
{WRONG_TYPE} the key holds another type, or is used with another kind of lock (--limit, --shared);
{UNAVAILABLE} Redis unavailable; {INTERNAL} internal error; {BUSY} lock busy; {PERMISSION} Redis refused the credentials or
the ACL denies a command; {CONFIG} configuration error (malformed Redis URL, ulimit -n below 64);
{MAX_RUNTIME} stopped by --max-runtime; {LEASE_LOST} lease lost, command stopped; {NOT_EXECUTABLE} command could not be
started (not executable, or the process limit); {NOT_FOUND} command not found."
    )
}

/// Everything that ends a run without the command's own status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    WrongType(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Permission(String),
    #[error("{0}")]
    Config(String),
    /// The lock is held by someone else; carries the value stored by who holds it, or with
    /// `queued`, by the run queued first that this one must let go first (a value redlock-run
    /// did not write is reported as foreign); its time left (`None`: it never expires) and the
    /// status to exit with (`--busy-exit-code`). `key`: the busy one (of several, the first
    /// that was). All for the JSON error line.
    #[error("{message}")]
    Busy {
        message: String,
        key: String,
        holder: Vec<u8>,
        queued: bool,
        expires_in: Option<Duration>,
        code: u8,
    },
    #[error("cannot run {command}: {reason}")]
    Spawn { command: String, reason: String, code: u8 },
    /// A signal arrived before the command was started.
    #[error("interrupted by signal {name} before the command started")]
    Interrupted { name: &'static str, signal: i32 },
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

impl Error {
    /// A signal arrived before the command was started.
    pub fn interrupted(sig: nix::sys::signal::Signal) -> Self {
        Error::Interrupted { name: sig.as_str(), signal: sig as i32 }
    }

    /// The command `program` could not be started. Its name is shown with its bytes escaped,
    /// so that a newline or a control character in it cannot start what looks like another
    /// line of the wrapper's.
    pub fn spawn(program: &std::ffi::OsStr, reason: impl std::fmt::Display, code: u8) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let command = program.as_bytes().escape_ascii().to_string();
        Error::Spawn { command, reason: reason.to_string(), code }
    }

    pub fn code(&self) -> u8 {
        match self {
            Error::Usage(_) => status::USAGE,
            Error::WrongType(_) => status::WRONG_TYPE,
            Error::Unavailable(_) => status::UNAVAILABLE,
            Error::Permission(_) => status::PERMISSION,
            Error::Config(_) => status::CONFIG,
            Error::Busy { code, .. } => *code,
            Error::Spawn { code, .. } => *code,
            Error::Interrupted { signal, .. } => signal_status(*signal),
            Error::Internal(_) => status::INTERNAL,
        }
    }
}

/// 128+N for a death by signal N.
pub fn signal_status(signal: i32) -> u8 {
    status::SIGNAL_BASE.saturating_add(u8::try_from(signal).unwrap_or(127))
}

#[cfg(test)]
mod tests {
    use super::status::*;

    /// Every status the wrapper chooses, in the order the table lists them.
    const CHOSEN: [u8; 11] = [
        USAGE,
        WRONG_TYPE,
        UNAVAILABLE,
        INTERNAL,
        BUSY,
        PERMISSION,
        CONFIG,
        MAX_RUNTIME,
        LEASE_LOST,
        NOT_EXECUTABLE,
        NOT_FOUND,
    ];

    #[test]
    fn the_table_and_the_summary_name_every_status_and_no_other() {
        let listed: Vec<u8> = super::TABLE
            .iter()
            .flat_map(|(codes, _)| codes.split(" / ").filter_map(|c| c.parse::<u8>().ok()))
            .collect();
        assert_eq!(listed, CHOSEN);
        let summary = super::summary();
        let said: Vec<u8> =
            summary.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse::<u8>().ok()).collect();
        for code in CHOSEN {
            assert!(said.contains(&code), "--help does not say what {code} means: {summary}");
        }
    }

    #[test]
    fn each_subcommand_table_names_a_status_once_and_starts_with_success() {
        for table in [super::STATUS_TABLE, super::RELEASE_TABLE, super::LOCK_TABLE, super::UNLOCK_TABLE] {
            let codes: Vec<_> = table.iter().map(|(code, _)| code).collect();
            let unique: std::collections::BTreeSet<_> = codes.iter().collect();
            assert_eq!(codes.len(), unique.len(), "{table:?}");
            assert_eq!(table[0].0, Some(SUCCESS));
        }
    }
}
