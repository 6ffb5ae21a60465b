//! Where a waiting run stands, as apt shows its wait for the dpkg lock: on a terminal, one
//! status line on stderr, redrawn in place (the key, who holds it, when its run started, this run's
//! place in the queue, the time waited and what is left of `--wait`) and erased when the wait
//! ends; elsewhere (cron, CI logs) no such line, but at `-v` one log line each time the holder
//! changes. What the line says comes from the attempts' answers, which the shell hands over;
//! the machine knows nothing of it.

use std::io::IsTerminal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::machine::OUTAGE_RETRY;
use crate::config::{Config, LogFormat, Verbosity};
use crate::lock::{Acquired, Fault, Holder, show_key};
use crate::logging;

/// How often the line is redrawn while nothing else happens (it changes once a second).
pub const REDRAW_EVERY: Duration = Duration::from_millis(250);
/// The width of a terminal that does not say.
const COLUMNS: usize = 80;

/// What the wait has met so far, and what of it is on the screen.
pub struct Progress {
    /// A status line is drawn: stderr is a terminal, the log is text and not `-q`.
    line: bool,
    format: LogFormat,
    keys: Vec<Vec<u8>>,
    started: Instant,
    wait: Option<Duration>,
    /// What the last attempt found, once one found the lock taken (or Redis away).
    found: Option<Found>,
    /// The value of the holder the last attempt found (not for runs queued ahead), and the
    /// one last logged (without a line).
    value: Option<Vec<u8>>,
    logged: Option<Vec<u8>>,
    /// The text on the screen (empty: none).
    drawn: String,
    /// Whether the terminal is this run's to draw on now ([`crate::sys::stderr_in_foreground`]).
    foreground: fn() -> bool,
}

/// What the last attempt found.
enum Found {
    /// Held at key `key` (or, `queued`, free but with runs queued before this one, the first
    /// of them as `holder`).
    Taken { key: usize, holder: Option<Holder>, holding: u64, position: Option<u64>, queued: bool },
    /// Redis could not answer.
    Unanswered,
}

impl Progress {
    pub fn new(config: &Config, started: Instant) -> Self {
        let terminal =
            std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
        Progress {
            line: terminal
                && config.output.verbosity != Verbosity::Quiet
                && config.output.format == LogFormat::Text,
            format: config.output.format,
            keys: config.keys.clone(),
            started,
            wait: config.wait,
            found: None,
            value: None,
            logged: None,
            drawn: String::new(),
            foreground: crate::sys::stderr_in_foreground,
        }
    }

    /// Whether the line is redrawn as time passes.
    pub fn draws(&self) -> bool {
        self.line && self.found.is_some()
    }

    /// An attempt's answer: who holds the lock now, or that Redis did not answer (the place in
    /// the queue known before is kept when an answer does not give one).
    pub fn observe(&mut self, answer: &Result<Acquired, Fault>) {
        let position_before = match &self.found {
            Some(Found::Taken { position, .. }) => *position,
            _ => None,
        };
        let (key, value, holding, position, queued) = match answer {
            Ok(Acquired::Busy { key, holder, holding, position, .. }) => {
                (*key, holder, *holding, *position, false)
            }
            Ok(Acquired::Queued { key, first, position }) => (*key, first, 1, *position, true),
            Ok(_) => return,
            Err(_) => {
                self.found = Some(Found::Unanswered);
                self.value = None;
                return;
            }
        };
        let holder = Holder::parse(value);
        self.value = (!queued).then(|| value.clone());
        let position = position.or(position_before);
        self.found = Some(Found::Taken { key, holder, holding, position, queued });
    }

    /// The run waits now (after an attempt's answer): the line is drawn, or without one, a
    /// holder not met before is logged. (A run that does not wait says nothing here: its busy
    /// line names the holder.)
    pub fn waits(&mut self, now: Instant) {
        if self.line {
            return self.draw(now);
        }
        let (Some(value), Some(Found::Taken { key, holder, .. })) = (&self.value, &self.found) else {
            return;
        };
        if self.logged.as_ref() == Some(value) {
            return;
        }
        self.logged = Some(value.clone());
        // The busy key (one of several), and in JSON the holder apart, as the busy line has it.
        let key = self.keys.get(*key).map(|k| k.escape_ascii().to_string());
        let h = holder.as_ref().and_then(|h| self.format.json_only(h));
        match holder {
            Some(holder) => tracing::info!(
                key,
                holder.host = h.map(|h| h.host.as_str()),
                holder.pid = h.map(|h| h.pid),
                holder.note = h.and_then(|h| h.note.as_deref()),
                "waiting for the lock, held by {}",
                holder.describe()
            ),
            None => tracing::info!(key, "waiting for the lock, held by a value not written by redlock-run"),
        }
    }

    /// Draws the line as it stands now, if it changed or was erased (before a stop, Ctrl-Z).
    /// A run in the background draws nothing, and forgets a line it drew without erasing it:
    /// what is on the screen by then is another's (the shell's prompt, the job in front).
    pub fn draw(&mut self, now: Instant) {
        if !self.draws() {
            return;
        }
        if !(self.foreground)() {
            return self.forget();
        }
        let columns = crate::sys::stderr_columns().map_or(COLUMNS, usize::from);
        let text = self.text(now, unix_ms(), columns);
        if text != self.drawn || !logging::status_shown() {
            logging::show_status(&text);
            self.drawn = text;
        }
    }

    /// Erases the line, if drawn (in the foreground); returns once it is gone from the screen.
    pub fn clear(&mut self) {
        // Nothing drawn, nothing to ask the terminal (every run that did not wait on one).
        if self.drawn.is_empty() {
            return;
        }
        if !(self.foreground)() {
            return self.forget();
        }
        logging::clear_status();
        self.drawn.clear();
    }

    fn forget(&mut self) {
        if !self.drawn.is_empty() {
            logging::forget_status();
            self.drawn.clear();
        }
    }

    /// The line at `now` (`now_ms` on the wall clock, for the holder's age), cut to fit in
    /// `columns` less one, so that it never wraps (a wrapped line is not redrawn in place).
    fn text(&self, now: Instant, now_ms: u64, columns: usize) -> String {
        let whole = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string();
        let waited = now.saturating_duration_since(self.started);
        // An outage is ridden out for at least `OUTAGE_RETRY`, whatever `--wait` says.
        let budget = match self.found {
            Some(Found::Unanswered) => self.wait.map(|w| w.max(OUTAGE_RETRY)),
            _ => self.wait,
        };
        let left = match budget {
            // Counted down as a clock does: whole seconds, rounded up.
            Some(wait) => {
                let left = wait.saturating_sub(waited);
                let up = Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0));
                format!("{} left", whole(up))
            }
            None => "no limit".to_owned(),
        };
        let mut text = format!("waited {}, {left}", whole(waited));
        let (key, state) = match &self.found {
            None => return String::new(),
            Some(Found::Unanswered) => (0, "Redis does not answer, trying again".to_owned()),
            Some(Found::Taken { key, holder, holding, position, queued }) => {
                if let Some(p) = position {
                    text.push_str(&format!(", place {p} in the queue"));
                }
                let who = match holder {
                    Some(h) => {
                        let age = Duration::from_millis(now_ms.saturating_sub(h.since_ms));
                        // The value's time is its run's start, wait included, not when it took the lock.
                        format!("{}, its run started {} ago", h.who(), whole(age))
                    }
                    None => "another client".to_owned(),
                };
                let state = match (queued, holding) {
                    (true, _) => format!("free, but queued runs go first: {who}"),
                    (false, 0 | 1) => format!("held by {who}"),
                    (false, n) => format!("held by {n} runs, among them {who}"),
                };
                (*key, state)
            }
        };
        // What changes least and is longest (the holder) last: a narrow terminal cuts it first.
        let name = show_key(self.keys.get(key).map_or(&[][..], Vec::as_slice));
        let text = format!("redlock-run: waiting for {name}: {text}; {state}");
        cut(text, columns.saturating_sub(1).max(1))
    }
}

/// `text` cut to at most `fit` columns, `…` last when cut. Without a table of widths every
/// character other than ASCII counts as two columns (as wide as CJK or an emoji gets): the line
/// may be cut a little early, never wrap.
fn cut(text: String, fit: usize) -> String {
    let width = |c: char| if c.is_ascii() { 1 } else { 2 };
    if text.chars().map(width).sum::<usize>() <= fit {
        return text;
    }
    let mut used = width('…');
    let end = text
        .char_indices()
        .find(|&(_, c)| {
            used += width(c);
            used > fit
        })
        .map_or(text.len(), |(at, _)| at);
    format!("{}…", &text[..end])
}

/// Before the run stops itself (Ctrl-Z): the line goes from the screen, erased in the
/// foreground and forgotten in the background as [`Progress::clear`] has it; the next redraw
/// after SIGCONT draws it again.
pub fn before_stop() {
    if crate::sys::stderr_in_foreground() { logging::clear_status() } else { logging::forget_status() }
}

fn unix_ms() -> u64 {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(wait: Option<Duration>, found: Found) -> (Progress, Instant) {
        let started = Instant::now();
        let p = Progress {
            line: true,
            format: LogFormat::Text,
            keys: vec![b"lock:a".to_vec(), b"lock:b".to_vec()],
            started,
            wait,
            found: Some(found),
            value: None,
            logged: None,
            drawn: String::new(),
            foreground: || true,
        };
        (p, started)
    }

    #[test]
    fn a_run_in_the_background_draws_nothing_and_forgets_what_it_drew() {
        let (mut p, started) = progress(None, Found::Unanswered);
        p.foreground = || false;
        p.draw(started);
        assert_eq!(p.drawn, "", "drawn in the background");
        p.drawn = "drawn in the foreground".to_owned();
        p.draw(started);
        assert_eq!(p.drawn, "", "still taken for on the screen");
        p.foreground = || true;
        p.draw(started);
        assert!(p.drawn.contains("Redis does not answer"), "not drawn in the foreground: {}", p.drawn);
    }

    #[test]
    fn the_line_says_who_holds_what_for_how_long_and_what_is_left() {
        let holder = Holder::parse(b"0123456789abcdef~ci%207 web-1 4711 1764460800000").unwrap();
        let found =
            Found::Taken { key: 1, holder: Some(holder), holding: 1, position: Some(2), queued: false };
        let (p, started) = progress(Some(Duration::from_secs(600)), found);
        let now = started + Duration::from_millis(41_500);
        let text = p.text(now, 1764460800000 + 192_000, 500);
        assert_eq!(
            text,
            "redlock-run: waiting for \"lock:b\": waited 41s, 9m 19s left, place 2 in the queue; held by \
             web-1 (pid 4711, note \"ci 7\"), its run started 3m 12s ago"
        );
        let cut = p.text(now, 1764460800000, 40);
        assert_eq!(cut.chars().count(), 38, "39 columns, the … counted as two: {cut}");
        assert!(cut.ends_with('…') && text.starts_with(cut.trim_end_matches('…')), "{cut}");

        // Wide characters take two columns each: cut by what the line takes, not its length.
        let wide = Holder::parse("0123~日本語のノート日本語のノート日本語のノート w 1 0".as_bytes());
        let found = Found::Taken { key: 0, holder: wide, holding: 1, position: None, queued: false };
        let (p, started) = progress(None, found);
        let columns = |t: &str| t.chars().map(|c| if c.is_ascii() { 1 } else { 2 }).sum::<usize>();
        for width in [60, 80, 120] {
            let cut = p.text(started, 0, width);
            assert!(columns(&cut) < width, "{width}: {cut}");
            assert!(columns(&cut) >= width - 3, "{width}: {cut}");
        }

        let (p, started) = progress(None, Found::Unanswered);
        assert_eq!(
            p.text(started, 0, 100),
            "redlock-run: waiting for \"lock:a\": waited 0s, no limit; Redis does not answer, trying again"
        );
        let (p, started) = progress(Some(Duration::ZERO), Found::Unanswered);
        assert!(p.text(started, 0, 100).contains("waited 0s, 1s left;"), "the outage's own budget");
    }
}
