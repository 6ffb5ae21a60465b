//! The exit-status table (README § Exit status) in one place, and the error type that maps
//! onto it.

use std::time::Duration;

/// Exit statuses the wrapper produces itself. The command's own status passes through as is.
pub mod status {
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
    /// The lock is held by someone else; carries who holds it (`None`: a value redlock-run did
    /// not write), or with `queued`, the run queued first that this one must let go first; its
    /// time left (`None`: it never expires) and the status to exit with (`--busy-exit-code`).
    /// `key`: the busy one (of several, the first that was). All for the JSON error line.
    #[error("{message}")]
    Busy {
        message: String,
        key: String,
        holder: Option<Box<crate::lock::Holder>>,
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
