//! What the tool stores, read back for messages and `status`: the lock's value
//! (`<token> <host> <pid> <start unix ms>`) and a success record (`<host> <pid> <unix ms>`).

use std::time::{Duration, UNIX_EPOCH};

/// Who holds a lock, from its stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub token: String,
    pub host: String,
    pub pid: u32,
    pub since_ms: u64,
}

impl Holder {
    /// `None` for a value that redlock-run did not write.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        match text.split(' ').collect::<Vec<_>>()[..] {
            [token, host, pid, since] => Some(Holder {
                token: token.to_owned(),
                host: host.to_owned(),
                pid: pid.parse().ok()?,
                since_ms: since.parse().ok()?,
            }),
            _ => None,
        }
    }

    /// A short prefix of the token, safe to show.
    pub fn token_prefix(&self) -> &str {
        &self.token[..self.token.len().min(8)]
    }

    /// "host (pid 123) since 2026-11-30T01:02:03Z".
    pub fn describe(&self) -> String {
        format!("{} (pid {}) since {}", self.host, self.pid, rfc3339_ms(self.since_ms))
    }
}

/// Where and when a run with an idempotency ID succeeded, from its success record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Success {
    pub host: String,
    pub pid: u32,
    pub at_ms: u64,
}

impl Success {
    pub fn parse(value: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        match text.split(' ').collect::<Vec<_>>()[..] {
            [host, pid, at] => {
                Some(Success { host: host.to_owned(), pid: pid.parse().ok()?, at_ms: at.parse().ok()? })
            }
            _ => None,
        }
    }

    /// "host (pid 123) at 2026-11-30T01:02:03Z".
    pub fn describe(&self) -> String {
        format!("{} (pid {}) at {}", self.host, self.pid, rfc3339_ms(self.at_ms))
    }
}

/// A unix time in milliseconds as RFC 3339 (to the second).
pub fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let h = Holder::parse(b"0123456789abcdef0123456789abcdef web-1 4711 1764460800000").unwrap();
        assert_eq!((h.host.as_str(), h.pid, h.token_prefix()), ("web-1", 4711, "01234567"));
        assert_eq!(h.describe(), "web-1 (pid 4711) since 2025-11-30T00:00:00Z");
        assert_eq!(Holder::parse(b"someone else's value"), None);
        let s = Success::parse(b"web-2 12 1764460800000").unwrap();
        assert_eq!(s.describe(), "web-2 (pid 12) at 2025-11-30T00:00:00Z");
    }
}
