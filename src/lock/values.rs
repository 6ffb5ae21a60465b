//! What the tool stores, written and read back (for messages and `status`) in one place: the
//! lock's value (`<token> <host> <pid> <start unix ms>`, followed by ` shared` or ` limit=N` for
//! those kinds of lock) and a success record (`<host> <pid> <unix ms>`).
//!
//! A `--note` rides in the first word, after the token: `<token>~<note>`, its spaces and `%`
//! written `%20` and `%25`. Every version reads the first word as a whole (the wake-up channels,
//! `--holder`'s prefix) and the kind from the words after it, so a run that knows no notes
//! still reads a noted value's host, pid, start and kind, and queues beside it as before.

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
    /// The run's `--note`, as given.
    pub note: Option<String>,
}

/// The longest `--note`, in bytes: a URL or a pod's name fits, a log does not.
pub const NOTE_MAX: usize = 200;

/// Between the token and the note in the value's first word.
const NOTE_MARK: char = '~';

impl Holder {
    /// This process, holding from now on with a fresh token: 128 random bits from the OS.
    pub fn this_process(kind: Kind, note: Option<&str>) -> Result<Self, Fault> {
        let mut token = [0u8; 16];
        rand::rngs::SysRng
            .try_fill_bytes(&mut token)
            .map_err(|e| Fault::Internal(format!("cannot read the OS random source: {e}")))?;
        let token = token.iter().map(|b| format!("{b:02x}")).collect();
        let note = note.map(str::to_owned);
        Ok(Holder { token, host: hostname(), pid: std::process::id(), since_ms: unix_ms(), kind, note })
    }

    /// The value stored at the lock key (or as a member of its set of holders).
    pub fn value(&self) -> String {
        let first = match &self.note {
            Some(note) => {
                format!("{}{NOTE_MARK}{}", self.token, note.replace('%', "%25").replace(' ', "%20"))
            }
            None => self.token.clone(),
        };
        let value = format!("{first} {} {} {}", self.host, self.pid, self.since_ms);
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
        let (token, note) = match fields[0].split_once(NOTE_MARK) {
            Some((token, note)) => (token, Some(unescape(note))),
            None => (fields[0], None),
        };
        Some(Holder {
            token: token.to_owned(),
            host: fields[1].to_owned(),
            pid: fields[2].parse().ok()?,
            since_ms: fields[3].parse().ok()?,
            kind,
            note,
        })
    }

    /// A short prefix of the token, safe to show.
    pub fn token_prefix(&self) -> &str {
        &self.token[..self.token.len().min(8)]
    }

    /// "host (pid 123) since 2026-11-30T01:02:03Z", with the note as [`Holder::who`] has it.
    pub fn describe(&self) -> String {
        format!("{} since {}", self.who(), rfc3339_ms(self.since_ms))
    }

    /// "host (pid 123)", or with a note, "host (pid 123, note "…")".
    pub fn who(&self) -> String {
        let note = self.note.as_ref().map(|n| format!(", note {n:?}")).unwrap_or_default();
        format!("{} (pid {}{note})", self.host, self.pid)
    }
}

/// A note as written in the value: `%20` and `%25` back to a space and `%`.
fn unescape(note: &str) -> String {
    let mut out = String::with_capacity(note.len());
    let mut rest = note;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let (c, skip) = match rest.get(at..at + 3) {
            Some("%20") => (' ', 3),
            Some("%25") => ('%', 3),
            _ => ('%', 1),
        };
        out.push(c);
        rest = &rest[at + skip..];
    }
    out.push_str(rest);
    out
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
    fn a_note_leaves_the_words_older_runs_read_as_they_were() {
        let value = "0123456789abcdef0123456789abcdef~ci%20job%25 web-1 4711 1764460800000 limit=3";
        let h = Holder::parse(value.as_bytes()).unwrap();
        assert_eq!(
            (h.token.as_str(), h.note.as_deref()),
            ("0123456789abcdef0123456789abcdef", Some("ci job%"))
        );
        assert_eq!(h.describe(), "web-1 (pid 4711, note \"ci job%\") since 2025-11-30T00:00:00Z");
        for kind in [Kind::Exclusive, Kind::Shared, Kind::Limit(3)] {
            let plain = Holder::this_process(kind, None).unwrap();
            let noted = Holder { note: Some("a b".repeat(NOTE_MAX / 3)), ..plain.clone() };
            let (plain, noted) = (plain.value(), noted.value());
            let words = |v: &str| v.split(' ').skip(1).map(str::to_owned).collect::<Vec<_>>();
            // What the queue's Lua and an older parser read: the same words after the first,
            // and a first word that starts with the token.
            assert_eq!(words(&plain), words(&noted));
            assert!(noted.starts_with(&format!("{}~", plain.split(' ').next().unwrap())), "{noted}");
        }
        assert_eq!(unescape("%2%%41%2"), "%2%%41%2");
    }

    #[test]
    fn what_is_written_parses_back() {
        for kind in [Kind::Exclusive, Kind::Shared, Kind::Limit(2), Kind::Limit(u32::MAX)] {
            let h = Holder::this_process(kind, None).unwrap();
            assert_eq!(h.token.len(), 32);
            assert_eq!(Holder::parse(h.value().as_bytes()), Some(h));
            for note in ["https://ci.example/jobs/1?a=b~c", "deploy 100% done", "%20 %25 ~ ünï"] {
                let h = Holder::this_process(kind, Some(note)).unwrap();
                assert_eq!(Holder::parse(h.value().as_bytes()), Some(h));
            }
        }
        let s = Success::now();
        assert_eq!(Success::parse(s.value().as_bytes()), Some(s));
    }
}
