//! Diagnostics on stderr through `tracing`. stdout belongs to the command.
//!
//! Every line carries who it is about: the key(s), and this run's holder identity (host, pid,
//! token prefix) and fence as soon as they exist. They are set once each ([`about_keys`],
//! [`about_holder`], [`about_fences`]) and added to every event by the formatter, so no event
//! has to repeat them, and a field an event gives itself wins over the same one here. One
//! line is either text — `redlock-run: level: message` followed by logfmt fields, each value
//! quoted (`"`, `\` and control characters escaped) exactly when it needs to be — or one JSON
//! object; both are written from the same fields, here and nowhere else. A dotted field name
//! (`holder.host`) is a member of an object in JSON (`"holder":{"host":…}`) and stays as it is
//! in logfmt.
//!
//! Lines are handed to a writer thread through a bounded queue and dropped when it is full, so
//! that a stderr nobody reads (a full pipe) can never block the watchdog. (tracing-appender's
//! non-blocking writer would do, but on a stuck stderr its shutdown prints to stdout.) The thread
//! starts with the first line: a quiet, successful run never pays for it. When no thread can be
//! started (the process limit), lines go to stderr directly, when that cannot block.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogFormat, Output, Verbosity};
use crate::lock::Holder;

/// Lines queued for stderr before new ones are dropped.
const QUEUE: usize = 1024;
/// How long the wrapper waits at exit for queued lines to reach stderr.
const FLUSH_LIMIT: Duration = Duration::from_secs(1);

/// Writes `text` to stderr as it is, for what is said before the subscriber exists (usage
/// errors). A stderr that cannot be written (a pipe whose reader is gone) loses the text, and
/// the exit status still says what happened; `eprint!` would panic instead.
pub fn say(text: &str) {
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// Installs the subscriber. Keep the guard until exit: dropping it flushes (bounded).
pub fn init(output: Output) -> Flusher {
    let level = match output.verbosity {
        Verbosity::Quiet => Level::ERROR,
        Verbosity::Normal => Level::WARN,
        Verbosity::Info => Level::INFO,
        Verbosity::Debug => Level::DEBUG,
    };
    let queue = Queue(Arc::new(OnceLock::new()));
    let installed = tracing_subscriber::fmt()
        .with_writer(queue.clone())
        .with_max_level(level)
        .with_ansi(false)
        .event_format(Lines(output.format))
        .try_init()
        .is_ok();
    if installed {
        let _ = WRITER.set(queue.clone());
    }
    Flusher { queue: installed.then_some(queue) }
}

enum Msg {
    Line(Vec<u8>),
    /// The status line from now on (`None`: none), whether the one before is erased first (not
    /// when it is no longer this run's to erase), and whom to tell once it is written.
    Status(Option<Vec<u8>>, bool, Option<SyncSender<()>>),
    Flush(SyncSender<()>),
}

/// To the start of the line, and erase it: the status line goes before anything is written.
const ERASE: &[u8] = b"\r\x1b[K";

fn write_lines(rx: Receiver<Msg>) {
    // stderr is locked per line, never for the life of the thread: a write stuck on a full pipe
    // must not hold a lock that anything else could wait for.
    let mut status: Option<Vec<u8>> = None;
    for msg in rx {
        match msg {
            // A line goes above the status line: erased, then drawn again below the line, in
            // one write.
            Msg::Line(line) => {
                let _ = match &status {
                    Some(shown) => io::stderr().write_all(&[ERASE, &line, shown].concat()),
                    None => io::stderr().write_all(&line),
                };
            }
            Msg::Status(next, erase, done) => {
                if next.is_some() || (erase && status.is_some()) {
                    let _ = io::stderr().write_all(&[ERASE, next.as_deref().unwrap_or_default()].concat());
                }
                status = next;
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            Msg::Flush(done) => {
                if status.take().is_some() {
                    let _ = io::stderr().write_all(ERASE);
                }
                let _ = io::stderr().flush();
                let _ = done.send(());
            }
        }
    }
}

/// The log's writer, for the status line.
static WRITER: OnceLock<Queue> = OnceLock::new();
/// A status line may be on the screen.
static STATUS_SHOWN: AtomicBool = AtomicBool::new(false);

/// Shows `text` on the last line of stderr, redrawn in place of the one before and kept below
/// the log lines written meanwhile (a waiting run on a terminal: the caller makes sure stderr
/// is one, and that `text` fits on one of its lines). Dropped when the queue is full.
pub fn show_status(text: &str) {
    let Some(Sink::Thread(tx)) = WRITER.get().map(Queue::sink) else { return };
    STATUS_SHOWN.store(true, Ordering::Relaxed);
    let _ = tx.try_send(Msg::Status(Some(text.as_bytes().to_vec()), true, None));
}

/// Erases the status line, if one is shown, and returns once it is erased (bounded by
/// [`FLUSH_LIMIT`]): what comes next on stderr, a line or the command's output, starts on a
/// clean line.
pub fn clear_status() {
    end_status(true);
}

/// Forgets the status line without erasing it (the terminal is no longer this run's to write
/// on: it went to the background): nothing is drawn again below later lines.
pub fn forget_status() {
    end_status(false);
}

/// Whether a status line is shown (drawn and not erased or forgotten since).
pub fn status_shown() -> bool {
    STATUS_SHOWN.load(Ordering::Relaxed)
}

fn end_status(erase: bool) {
    if !STATUS_SHOWN.swap(false, Ordering::Relaxed) {
        return;
    }
    let Some(Sink::Thread(tx)) = WRITER.get().map(Queue::sink) else { return };
    let (done_tx, done) = mpsc::sync_channel(1);
    send_and_wait(&tx, Msg::Status(None, erase, Some(done_tx)), done);
}

/// Queues `msg` (waiting for room, bounded) and waits until the writer says it is done with it.
fn send_and_wait(tx: &SyncSender<Msg>, mut msg: Msg, done: Receiver<()>) {
    let give_up = Instant::now() + FLUSH_LIMIT;
    loop {
        match tx.try_send(msg) {
            Ok(()) => break,
            Err(TrySendError::Full(m)) if Instant::now() < give_up => {
                msg = m;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
    let _ = done.recv_timeout(give_up.saturating_duration_since(Instant::now()));
}

/// Writes out what the log queue holds when dropped, so that the last lines are not lost as the
/// process exits.
pub struct Flusher {
    queue: Option<Queue>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let Some(Some(Sink::Thread(tx))) = self.queue.as_ref().map(|q| q.0.get()) else { return };
        let (done_tx, done) = mpsc::sync_channel(1);
        send_and_wait(tx, Msg::Flush(done_tx), done);
    }
}

/// Where lines go: the writer thread (started on first use), or, when no thread can be started
/// (a process limit reached), stderr directly but only when that cannot block.
#[derive(Clone)]
enum Sink {
    Thread(SyncSender<Msg>),
    Direct,
}

/// Hands each formatted event to the writer thread (started on first use), or drops it when
/// the queue is full.
#[derive(Clone)]
struct Queue(Arc<OnceLock<Sink>>);

impl Queue {
    fn sink(&self) -> Sink {
        self.0
            .get_or_init(|| {
                let (tx, rx) = mpsc::sync_channel(QUEUE);
                match std::thread::Builder::new().name("stderr".into()).spawn(move || write_lines(rx)) {
                    Ok(_) => Sink::Thread(tx),
                    Err(_) => Sink::Direct,
                }
            })
            .clone()
    }
}

/// Writes a line straight to stderr if that cannot block: a pipe reports room for a whole line
/// of up to 4 KiB (PIPE_BUF) as writable. Otherwise the line is dropped, as a full queue's are.
fn write_direct(line: &[u8]) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stderr = io::stderr();
    let mut fds = [PollFd::new(stderr.as_fd(), PollFlags::POLLOUT)];
    let ready = poll(&mut fds, PollTimeout::ZERO) == Ok(1)
        && fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLOUT));
    if ready && line.len() <= 4096 {
        let _ = stderr.lock().write_all(line);
    }
}

struct Line {
    buf: Vec<u8>,
    sink: Sink,
}

impl<'a> MakeWriter<'a> for Queue {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { buf: Vec::with_capacity(160), sink: self.sink() }
    }
}

impl Write for Line {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match &self.sink {
            Sink::Thread(tx) => {
                let _ = tx.try_send(Msg::Line(std::mem::take(&mut self.buf)));
            }
            Sink::Direct => write_direct(&self.buf),
        }
    }
}

/// What every line is about, set once each as it becomes known; read by the formatter without
/// a lock.
static ABOUT: About = About { keys: OnceLock::new(), holder: OnceLock::new(), fences: OnceLock::new() };

struct About {
    keys: OnceLock<Vec<Pair>>,
    holder: OnceLock<Vec<Pair>>,
    fences: OnceLock<Vec<Pair>>,
}

impl About {
    fn pairs(&self) -> impl Iterator<Item = &Pair> {
        [&self.keys, &self.holder, &self.fences].into_iter().filter_map(OnceLock::get).flatten()
    }
}

/// The lines are about these keys: `key` (the first, escaped bytes, as everywhere), and with
/// several, `keys` (all of them, separated by spaces, as `REDLOCK_KEYS` gives them).
pub fn about_keys(keys: &[Vec<u8>]) {
    let Some(first) = keys.first() else { return };
    let mut pairs = vec![Pair::new("key", FieldValue::Str(first.escape_ascii().to_string()))];
    if keys.len() > 1 {
        let all = keys.iter().map(|k| k.escape_ascii().to_string()).collect::<Vec<_>>().join(" ");
        pairs.push(Pair::new("keys", FieldValue::Str(all)));
    }
    let _ = ABOUT.keys.set(pairs);
}

/// The lines are about this holder of the lock: the host and pid its value names, the token's
/// short prefix (never the token itself: README § Logs) and its note, if any.
pub fn about_holder(holder: &Holder) {
    let mut pairs = vec![
        Pair::new("host", FieldValue::Str(holder.host.clone())),
        Pair::new("pid", FieldValue::U64(holder.pid.into())),
        Pair::new("token", FieldValue::Str(holder.token_prefix().to_owned())),
    ];
    if let Some(note) = &holder.note {
        pairs.push(Pair::new("note", FieldValue::Str(note.clone())));
    }
    let _ = ABOUT.holder.set(pairs);
}

/// The lock was acquired with these fences (one a key): `fence` (the first key's), and with
/// several keys, `fences` (as `REDLOCK_FENCES` gives them).
pub fn about_fences(fences: &[i64]) {
    let Some(first) = fences.first() else { return };
    let mut pairs = vec![Pair::new("fence", FieldValue::I64(*first))];
    if fences.len() > 1 {
        let all = fences.iter().map(i64::to_string).collect::<Vec<_>>().join(" ");
        pairs.push(Pair::new("fences", FieldValue::Str(all)));
    }
    let _ = ABOUT.fences.set(pairs);
}

enum FieldValue {
    Str(String),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
}

struct Pair {
    name: &'static str,
    value: FieldValue,
}

impl Pair {
    fn new(name: &'static str, value: FieldValue) -> Self {
        Pair { name, value }
    }
}

/// An event's message and fields, in the order given.
#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<Pair>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` and the message arrive here, formatted by Display.
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.pairs.push(Pair::new(field.name(), FieldValue::Str(format!("{value:?}"))));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.pairs.push(Pair::new(field.name(), FieldValue::Str(value.to_owned())));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.pairs.push(Pair::new(field.name(), FieldValue::I64(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.pairs.push(Pair::new(field.name(), FieldValue::U64(value)));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.pairs.push(Pair::new(field.name(), FieldValue::F64(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.pairs.push(Pair::new(field.name(), FieldValue::Bool(value)));
    }
}

impl Fields {
    /// The event's own fields, then what the lines are about, less what the event says itself.
    fn all<'a>(&'a self, about: &'a About) -> impl Iterator<Item = &'a Pair> {
        let own = |name: &str| self.pairs.iter().any(|p| p.name == name);
        self.pairs.iter().chain(about.pairs().filter(move |p| !own(p.name)))
    }
}

/// One line per event, in the format `--log-format` chose.
struct Lines(LogFormat);

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = *event.metadata().level();
        let line = match self.0 {
            LogFormat::Text => text_line(level, &fields, &ABOUT),
            LogFormat::Json => json_line(level, &fields, &ABOUT),
        };
        writer.write_str(&line)
    }
}

/// `redlock-run: warning: message field=value …`: the message as it is (control characters
/// escaped, so that an event is always one line), then logfmt fields.
fn text_line(level: Level, fields: &Fields, about: &About) -> String {
    use fmt::Write as _;
    let level = match level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    };
    let mut line = String::with_capacity(160);
    let _ = write!(line, "redlock-run: {level}: ");
    for c in fields.message.chars() {
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    for pair in fields.all(about) {
        let _ = write!(line, " {}=", pair.name);
        match &pair.value {
            FieldValue::Str(s) => logfmt_value(&mut line, s),
            FieldValue::I64(n) => {
                let _ = write!(line, "{n}");
            }
            FieldValue::U64(n) => {
                let _ = write!(line, "{n}");
            }
            FieldValue::F64(n) => {
                let _ = write!(line, "{n}");
            }
            FieldValue::Bool(b) => {
                let _ = write!(line, "{b}");
            }
        }
    }
    line.push('\n');
    line
}

/// A logfmt value: as it is when it has no space, `=`, quote, backslash or control character
/// and is not empty; otherwise quoted, with quotes and backslashes escaped by a backslash and
/// control characters as `\n`, `\t`, `\u{1b}`.
fn logfmt_value(line: &mut String, value: &str) {
    let plain = !value.is_empty()
        && !value.chars().any(|c| c == ' ' || c == '=' || c == '"' || c == '\\' || c.is_control());
    if plain {
        line.push_str(value);
        return;
    }
    line.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                line.push('\\');
                line.push(c);
            }
            c if c.is_control() => line.extend(c.escape_default()),
            c => line.push(c),
        }
    }
    line.push('"');
}

/// `{"source":"redlock-run","timestamp":…,"level":…,"message":…,fields…}`: the wrapper's name
/// first, so that a collector that merges the command's output with the wrapper's can tell
/// the wrapper's lines apart.
fn json_line(level: Level, fields: &Fields, about: &About) -> String {
    use serde_json::Value as Json;
    let mut members: Vec<(&str, Json)> = Vec::new();
    for pair in fields.all(about) {
        let value = match &pair.value {
            FieldValue::Str(s) => Json::from(s.as_str()),
            FieldValue::I64(n) => Json::from(*n),
            FieldValue::U64(n) => Json::from(*n),
            FieldValue::F64(n) => Json::from(*n),
            FieldValue::Bool(b) => Json::from(*b),
        };
        match pair.name.split_once('.') {
            Some((object, member)) => {
                let at = match members.iter().position(|(name, v)| *name == object && v.is_object()) {
                    Some(at) => at,
                    None => {
                        members.push((object, Json::Object(Default::default())));
                        members.len() - 1
                    }
                };
                if let Json::Object(map) = &mut members[at].1 {
                    map.insert(member.to_owned(), value);
                }
            }
            None => members.push((pair.name, value)),
        }
    }
    let timestamp = humantime::format_rfc3339_micros(std::time::SystemTime::now());
    let mut line = format!(
        r#"{{"source":"redlock-run","timestamp":"{timestamp}","level":"{level}","message":{}"#,
        Json::from(fields.message.as_str())
    );
    for (name, value) in members {
        line.push(',');
        line.push_str(&Json::from(name).to_string());
        line.push(':');
        line.push_str(&value.to_string());
    }
    line.push_str("}\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(message: &str, pairs: Vec<Pair>) -> Fields {
        Fields { message: message.to_owned(), pairs }
    }

    fn about() -> About {
        let about = About { keys: OnceLock::new(), holder: OnceLock::new(), fences: OnceLock::new() };
        let _ = about.keys.set(vec![Pair::new("key", FieldValue::Str(r#"a\nb "c" \xff"#.into()))]);
        let _ = about.fences.set(vec![Pair::new("fence", FieldValue::I64(17))]);
        about
    }

    #[test]
    fn logfmt_values_are_quoted_when_they_need_it_and_always_alike() {
        let one = |v: &str| {
            let mut s = String::new();
            logfmt_value(&mut s, v);
            s
        };
        assert_eq!(one("lock:json"), "lock:json");
        assert_eq!(one(""), r#""""#);
        assert_eq!(one("a b"), r#""a b""#);
        assert_eq!(one("a=b"), r#""a=b""#);
        assert_eq!(one(r#"say "hi"\"#), r#""say \"hi\"\\""#);
        assert_eq!(one("a\nb\u{1b}"), r#""a\nb\u{1b}""#);
    }

    #[test]
    fn a_text_line_is_the_message_then_the_event_s_fields_then_what_it_is_about() {
        let f = fields("released\nfake", vec![Pair::new("outcome", FieldValue::Str("released".into()))]);
        assert_eq!(
            text_line(Level::INFO, &f, &about()),
            "redlock-run: info: released\\nfake outcome=released key=\"a\\\\nb \\\"c\\\" \\\\xff\" fence=17\n"
        );
        let own = fields("m", vec![Pair::new("key", FieldValue::Str("other".into()))]);
        assert_eq!(text_line(Level::WARN, &own, &about()), "redlock-run: warning: m key=other fence=17\n");
    }

    #[test]
    fn a_json_line_nests_dotted_names_and_carries_what_it_is_about() {
        let f = fields(
            "busy",
            vec![
                Pair::new("exit_status", FieldValue::U64(75)),
                Pair::new("holder.host", FieldValue::Str("web-1".into())),
                Pair::new("holder.pid", FieldValue::U64(4711)),
            ],
        );
        let line = json_line(Level::ERROR, &f, &about());
        assert!(line.starts_with(r#"{"source":"redlock-run","timestamp":""#), "{line}");
        assert!(line.ends_with("}\n"));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["level"], "ERROR");
        assert_eq!(v["message"], "busy");
        assert_eq!(v["holder"], serde_json::json!({"host": "web-1", "pid": 4711}));
        assert_eq!(v["key"], r#"a\nb "c" \xff"#);
        assert_eq!(v["fence"], 17);
    }
}
