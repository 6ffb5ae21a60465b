//! What the tool stores, written and read back (for messages and `status`) in one place: the
//! lock's value (`<token> <host> <pid> <start unix ms>`, followed by ` shared` or ` limit=N` for
//! those kinds of lock) and a success record (`<host> <pid> <unix ms>`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::TryRng;

use super::Fault;

/// The kind of lock a run takes (`--shared`, `--limit N`). Every run on a key must use the
/// same family: exclusive and shared runs go together (readers and writers), a semaphore only
/// with the same limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One holder at a time (the default; `--limit 1`): the lock key is a string.
    Exclusive,
    /// Any number of shared holders together, never beside an exclusive one (`--shared`).
    Shared,
    /// At most this many holders (`--limit N`, N ≥ 2).
    Limit(u32),
}

impl Kind {
    /// The word stored after the value's four fields (`None`: exclusive, which adds nothing).
    fn tag(self) -> Option<String> {
        match self {
            Kind::Exclusive => None,
            Kind::Shared => Some("shared".to_owned()),
            Kind::Limit(n) => Some(format!("limit={n}")),
        }
    }

    fn from_tag(tag: &str) -> Option<Self> {
        match tag {
            "shared" => Some(Kind::Shared),
            _ => {
                // Written by `tag`: a canonical decimal, at least 2.
                let n = tag.strip_prefix("limit=")?;
                if n.starts_with('0') || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                n.parse().ok().filter(|n| *n >= 2).map(Kind::Limit)
            }
        }
    }

    /// As JSON names it: `"exclusive"`, `"shared"` or `"limit"` (with the limit apart).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Exclusive => "exclusive",
            Kind::Shared => "shared",
            Kind::Limit(_) => "limit",
        }
    }

    /// How many may hold at once (`None`: any number of shared holders).
    pub fn limit(self) -> Option<u32> {
        match self {
            Kind::Exclusive => Some(1),
            Kind::Shared => None,
            Kind::Limit(n) => Some(n),
        }
    }
}

/// Who holds a lock, from its stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub token: String,
    pub host: String,
    pub pid: u32,
    pub since_ms: u64,
    pub kind: Kind,
}

impl Holder {
    /// This process, holding from now on with a fresh token: 128 random bits from the OS.
    pub fn this_process(kind: Kind) -> Result<Self, Fault> {
        let mut token = [0u8; 16];
        rand::rngs::SysRng
            .try_fill_bytes(&mut token)
            .map_err(|e| Fault::Internal(format!("cannot read the OS random source: {e}")))?;
        let token = token.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Holder { token, host: hostname(), pid: std::process::id(), since_ms: unix_ms(), kind })
    }

    /// The value stored at the lock key (or as a member of its set of holders).
    pub fn value(&self) -> String {
        let value = format!("{} {} {} {}", self.token, self.host, self.pid, self.since_ms);
        match self.kind.tag() {
            Some(tag) => format!("{value} {tag}"),
            None => value,
        }
    }

    /// `None` for a value that redlock-run did not write.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        let fields = text.split(' ').collect::<Vec<_>>();
        let kind = match fields[..] {
            [_, _, _, _] => Kind::Exclusive,
            [_, _, _, _, tag] => Kind::from_tag(tag)?,
            _ => return None,
        };
        Some(Holder {
            token: fields[0].to_owned(),
            host: fields[1].to_owned(),
            pid: fields[2].parse().ok()?,
            since_ms: fields[3].parse().ok()?,
            kind,
        })
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
    /// This process, succeeding now.
    pub fn now() -> Self {
        Success { host: hostname(), pid: std::process::id(), at_ms: unix_ms() }
    }

    /// The value stored as the success record.
    pub fn value(&self) -> String {
        format!("{} {} {}", self.host, self.pid, self.at_ms)
    }

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

/// This machine's name, or `unknown` when it has none that fits in a space-separated value.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn unix_ms() -> u64 {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX)
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
        assert_eq!(h.kind, Kind::Exclusive);
        assert_eq!(Holder::parse(b"someone else's value"), None);
        let shared = Holder::parse(b"0123456789abcdef web-1 4711 1764460800000 shared").unwrap();
        assert_eq!(shared.kind, Kind::Shared);
        let limit = Holder::parse(b"0123456789abcdef web-1 4711 1764460800000 limit=3").unwrap();
        assert_eq!(limit.kind, Kind::Limit(3));
        for odd in ["limit=1", "limit=0", "limit=03", "limit=+3", "limit=", "other"] {
            let value = format!("0123456789abcdef web-1 4711 1764460800000 {odd}");
            assert_eq!(Holder::parse(value.as_bytes()), None, "{odd}");
        }
        let s = Success::parse(b"web-2 12 1764460800000").unwrap();
        assert_eq!(s.describe(), "web-2 (pid 12) at 2025-11-30T00:00:00Z");
    }

    #[test]
    fn what_is_written_parses_back() {
        for kind in [Kind::Exclusive, Kind::Shared, Kind::Limit(2), Kind::Limit(u32::MAX)] {
            let h = Holder::this_process(kind).unwrap();
            assert_eq!(h.token.len(), 32);
            assert_eq!(Holder::parse(h.value().as_bytes()), Some(h));
        }
        let s = Success::now();
        assert_eq!(Success::parse(s.value().as_bytes()), Some(s));
    }
}
