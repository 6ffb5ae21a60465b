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

    /// A short prefix of the token, not to be given secret (as it is stored: JSON escapes it,
    /// text shows it through [`Holder::token_shown`]).
    pub fn token_prefix(&self) -> &str {
        // Eight characters, not bytes: a value anyone wrote may have others than hex digits.
        let end = self.token.char_indices().nth(8).map_or(self.token.len(), |(at, _)| at);
        &self.token[..end]
    }

    /// The token's prefix as text shows it, as [`shown`] writes a stored word.
    pub fn token_shown(&self) -> String {
        shown(self.token_prefix())
    }

    /// "host (pid 123), run started 2026-11-30T01:02:03Z", with the note as [`Holder::who`]
    /// has it. The time is the run's start (its wait included), not when it took the lock.
    pub fn describe(&self) -> String {
        format!("{}, run started {}", self.who(), rfc3339_ms(self.since_ms))
    }

    /// "host (pid 123)", or with a note, "host (pid 123, note "…")": every stored word in it
    /// escaped as [`shown`] has it, since anyone who can write the key chose them.
    pub fn who(&self) -> String {
        let note = self.note.as_ref().map(|n| format!(", note {n:?}")).unwrap_or_default();
        format!("{} (pid {}{note})", shown(&self.host), self.pid)
    }
}

/// A character that a line of text must not carry as it is: a control character, or one that
/// is not seen but changes how what is around it shows (zero-width, bidirectional controls).
pub fn unseen(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// A word read from a stored value, as text shows it: what [`unseen`] matches written as
/// Rust writes it (`\n`, `\t`, `\u{1b}`, `\u{202e}`), as a note's quotes have it, so that a
/// value cannot move the cursor, set a title or turn the rest of a line around.
fn shown(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        if unseen(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
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

    /// "host (pid 123) at 2026-11-30T01:02:03Z", the host as [`shown`] has it.
    pub fn describe(&self) -> String {
        format!("{} (pid {}) at {}", shown(&self.host), self.pid, rfc3339_ms(self.at_ms))
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
        assert_eq!(h.describe(), "web-1 (pid 4711), run started 2025-11-30T00:00:00Z");
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
        assert_eq!(h.describe(), "web-1 (pid 4711, note \"ci job%\"), run started 2025-11-30T00:00:00Z");
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
    fn what_anyone_wrote_is_shown_escaped() {
        let value =
            "\u{1b}]0;t\u{7}\u{e9}\u{1b}abcdef~n%20\u{202e} \u{1b}]0;pwned\u{7}\u{202e} 1 1764460800000";
        let h = Holder::parse(value.as_bytes()).unwrap();
        let text = format!("{} {}", h.describe(), h.token_shown());
        assert_eq!(
            text,
            "\\u{1b}]0;pwned\\u{7}\\u{202e} (pid 1, note \"n \\u{202e}\"), run started \
             2025-11-30T00:00:00Z \\u{1b}]0;t\\u{7}\u{e9}\\u{1b}"
        );
        assert_eq!(h.token_prefix(), "\u{1b}]0;t\u{7}\u{e9}\u{1b}", "eight characters, not bytes");
        let s = Success::parse(b"a\tb 12 1764460800000").unwrap();
        assert_eq!(s.describe(), "a\\tb (pid 12) at 2025-11-30T00:00:00Z");
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
