//! Diagnostics on stderr through `tracing`. stdout belongs to the command.
//!
//! Lines are handed to a writer thread through a bounded queue and dropped when it is full, so
//! that a stderr nobody reads (a full pipe) can never block the watchdog. (tracing-appender's
//! non-blocking writer would do, but on a stuck stderr its shutdown prints to stdout.) The thread
//! starts with the first line: a quiet, successful run never pays for it. When no thread can be
//! started (the process limit), lines go to stderr directly, when that cannot block.

use std::fmt;
use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, Format, FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogFormat, Output, Verbosity};

/// Lines queued for stderr before new ones are dropped.
const QUEUE: usize = 1024;
/// How long the wrapper waits at exit for queued lines to reach stderr.
const FLUSH_LIMIT: Duration = Duration::from_secs(1);
/// Opens every JSON line: a collector that merges the command's output with the wrapper's can
/// tell the wrapper's lines apart.
const JSON_SOURCE: &str = r#"{"source":"redlock-run","#;

/// Installs the subscriber. Keep the guard until exit: dropping it flushes (bounded).
pub fn init(output: Output) -> Guard {
    let level = match output.verbosity {
        Verbosity::Quiet => Level::ERROR,
        Verbosity::Normal => Level::WARN,
        Verbosity::Info => Level::INFO,
        Verbosity::Debug => Level::DEBUG,
    };
    let queue = Queue(Arc::new(OnceLock::new()));
    let builder = tracing_subscriber::fmt().with_writer(queue.clone()).with_max_level(level).with_ansi(false);
    let installed = match output.format {
        LogFormat::Text => builder.event_format(Text).try_init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(Json(
                format::format()
                    .json()
                    .flatten_event(true)
                    .with_target(false)
                    .with_current_span(false)
                    .with_span_list(false),
            ))
            .try_init(),
    }
    .is_ok();
    Guard { queue: installed.then_some(queue) }
}

enum Msg {
    Line(Vec<u8>),
    Flush(SyncSender<()>),
}

fn write_lines(rx: Receiver<Msg>) {
    // stderr is locked per line, never for the life of the thread: a write stuck on a full pipe
    // must not hold a lock that anything else could wait for.
    for msg in rx {
        match msg {
            Msg::Line(line) => {
                let _ = io::stderr().write_all(&line);
            }
            Msg::Flush(done) => {
                let _ = io::stderr().flush();
                let _ = done.send(());
            }
        }
    }
}

pub struct Guard {
    queue: Option<Queue>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(Some(Sink::Thread(tx))) = self.queue.as_ref().map(|q| q.0.get()) else { return };
        let give_up = Instant::now() + FLUSH_LIMIT;
        let (done_tx, done) = mpsc::sync_channel(1);
        let mut msg = Msg::Flush(done_tx);
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

/// `redlock-run: warning: message field=value …`, one line per event.
struct Text;

impl<S, N> FormatEvent<S, N> for Text
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        write!(writer, "redlock-run: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// One object per line: `{"source":"redlock-run","timestamp":…,"level":…,"message":…,
/// fields…}`; tracing-subscriber's JSON with the wrapper's name put first.
struct Json(Format<format::Json>);

impl<S, N> FormatEvent<S, N> for Json
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::with_capacity(160);
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // The object always has a timestamp and a level, so a comma may follow the new field.
        let rest = line.strip_prefix('{').ok_or(fmt::Error)?;
        write!(writer, "{JSON_SOURCE}{rest}")
    }
}
