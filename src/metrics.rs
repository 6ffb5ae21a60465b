//! `--metrics-file`: the run's outcome in Prometheus text format, written atomically (a temp
//! file in the same directory, then rename) for the node_exporter textfile collector.
//!
//! Every outcome writes the same series, so that no alert needs `absent()`. A value that does
//! not apply to the outcome is `NaN`: `command_exit_status` of a run that never ran its
//! command, `hold_seconds` of one that never held the lock, `acquire_wait_seconds` of one that
//! never tried. The exception is `last_success_timestamp_seconds`, which carries the last
//! success this file recorded for the same key (read from the file before it is replaced; `0`
//! when it holds none), so that `time() - max by (key) (…_last_success_timestamp_seconds) >
//! 86400` also fires for a job that never succeeded.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How a run ended, as the `outcome` label of `redlock_run_outcome` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The command ran under the lock and exited 0.
    Success,
    /// The command succeeded, but its `--idempotency-key` record could not be written or
    /// confirmed: a later run with the ID will run it again.
    Unrecorded,
    /// The command ran under the lock and failed.
    Failed,
    /// Someone else held the lock.
    Busy,
    /// `--idempotency-key`: a run with this ID already succeeded.
    Skipped,
    /// The lock was lost and the command stopped.
    Lost,
    /// `--max-runtime` stopped the command.
    Timeout,
    /// Redis could not be used; nothing ran.
    Unavailable,
    /// `--fail-open`: the command ran without a lock.
    Unlocked,
    /// A signal arrived before the command started.
    Interrupted,
    /// The command could not be started.
    NotRun,
    /// Anything else.
    Error,
}

impl Outcome {
    /// Every outcome: the metric carries all of them, 1 for the one that happened, so alerts
    /// need no absent() juggling.
    pub const ALL: [Outcome; 12] = [
        Outcome::Success,
        Outcome::Unrecorded,
        Outcome::Failed,
        Outcome::Busy,
        Outcome::Skipped,
        Outcome::Lost,
        Outcome::Timeout,
        Outcome::Unavailable,
        Outcome::Unlocked,
        Outcome::Interrupted,
        Outcome::NotRun,
        Outcome::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Unrecorded => "unrecorded",
            Outcome::Failed => "failed",
            Outcome::Busy => "busy",
            Outcome::Skipped => "skipped",
            Outcome::Lost => "lost",
            Outcome::Timeout => "timeout",
            Outcome::Unavailable => "unavailable",
            Outcome::Unlocked => "unlocked",
            Outcome::Interrupted => "interrupted",
            Outcome::NotRun => "not_run",
            Outcome::Error => "error",
        }
    }
}

/// What one run did, gathered along the way.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub outcome: Option<Outcome>,
    pub exit_status: u8,
    pub command_status: Option<u8>,
    pub acquire_wait: Option<Duration>,
    /// The run's place in the queue when it joined it (1 = next); `None` if it never queued.
    pub queue_position: Option<u64>,
    pub held: Option<Duration>,
    pub renewals: u64,
    pub renewal_failures: u64,
    pub lost: bool,
}

const METRIC_SUCCESS: &str = "redlock_run_last_success_timestamp_seconds";

/// Writes the metrics file; failure is a warning, never a change of exit status.
pub fn write(path: &Path, key: &[u8], report: &Report) {
    if let Err(e) = try_write(path, key, report) {
        tracing::warn!(path = %path.display(), "could not write the metrics file: {e}");
    }
}

fn try_write(path: &Path, key: &[u8], report: &Report) -> std::io::Result<()> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let label = format!("key=\"{}\"", escape_label(&String::from_utf8_lossy(key)));
    let outcome = report.outcome.unwrap_or(Outcome::Error);
    let last_success = match outcome {
        Outcome::Success | Outcome::Unrecorded => now,
        _ => previous_success(path, &label).unwrap_or(0.0),
    };
    let or_nan = |value: Option<f64>| value.unwrap_or(f64::NAN);

    let mut t = String::new();
    let mut gauge = |name: &str, help: &str, lines: &[(String, f64)]| {
        let _ = writeln!(t, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, value) in lines {
            let _ = writeln!(t, "{name}{{{labels}}} {value}");
        }
    };
    let one = |value: f64| vec![(label.clone(), value)];
    gauge("redlock_run_last_run_timestamp_seconds", "When the last run ended (unix time).", &one(now));
    let outcomes: Vec<_> = Outcome::ALL
        .iter()
        .map(|o| (format!("{label},outcome=\"{}\"", o.label()), if *o == outcome { 1.0 } else { 0.0 }))
        .collect();
    gauge("redlock_run_outcome", "Outcome of the last run: 1 for what happened, 0 for the rest.", &outcomes);
    gauge(
        "redlock_run_exit_status",
        "Exit status of the last run of the wrapper.",
        &one(report.exit_status.into()),
    );
    gauge(
        "redlock_run_command_exit_status",
        "Exit status of the last run's command; NaN if it did not run.",
        &one(or_nan(report.command_status.map(f64::from))),
    );
    gauge(
        "redlock_run_acquire_wait_seconds",
        "How long the last run waited for the lock; NaN if it did not try.",
        &one(or_nan(report.acquire_wait.map(|d| d.as_secs_f64()))),
    );
    gauge(
        "redlock_run_queue_position",
        "The last run's place in the queue when it joined it (1 = next); 0 if it did not queue.",
        &one(report.queue_position.unwrap_or(0) as f64),
    );
    gauge(
        "redlock_run_hold_seconds",
        "How long the last run held the lock; NaN if it did not hold it.",
        &one(or_nan(report.held.map(|d| d.as_secs_f64()))),
    );
    gauge("redlock_run_renewals", "Successful lease renewals in the last run.", &one(report.renewals as f64));
    gauge(
        "redlock_run_renewal_failures",
        "Renewal attempts that could not be confirmed in the last run.",
        &one(report.renewal_failures as f64),
    );
    gauge(
        "redlock_run_lock_lost",
        "1 if the last run lost its lock while the command ran.",
        &one(if report.lost { 1.0 } else { 0.0 }),
    );
    gauge(
        METRIC_SUCCESS,
        "When a run last succeeded (unix time), as this file last recorded it; 0 if never.",
        &one(last_success),
    );

    let tmp = temp_path(path);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(t.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Where the file is written before it is renamed into place: beside it, so that the rename is
/// atomic, and not ending in .prom, so that the collector never reads a half-written file.
fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join(format!(".{name}.{}.tmp", std::process::id()))
}

/// Checks at start that the file can be written at exit: creates and removes the temp file the
/// write will use, so that whatever would refuse it then (a missing directory, permissions, a
/// read-only filesystem, an ACL) refuses it now, and checks that the rename can replace `path`.
pub fn check_writable(path: &Path) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::FileTypeExt;
    if path.file_name().is_none() {
        return Err(Error::new(ErrorKind::InvalidInput, "it names no file"));
    }
    // The write renames a new file over the path, which would replace whatever is there.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let kind = meta.file_type();
        let what = if kind.is_file() {
            None
        } else if kind.is_dir() {
            Some("a directory")
        } else if kind.is_symlink() {
            Some("a symbolic link")
        } else if kind.is_char_device() {
            Some("a character device")
        } else if kind.is_fifo() {
            Some("a FIFO")
        } else {
            Some("a socket or a block device")
        };
        if let Some(what) = what {
            let why = format!("it is {what}, not a regular file, and the write would replace it");
            return Err(Error::new(ErrorKind::InvalidInput, why));
        }
    }
    let tmp = temp_path(path);
    std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    std::fs::remove_file(&tmp)
}

/// The last-success timestamp of the same key in the previous file, if any.
fn previous_success(path: &Path, label: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let prefix = format!("{METRIC_SUCCESS}{{{label}}} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok()).filter(|t: &f64| t.is_finite())
}

/// Label values escape backslash, double quote and newline (the exposition format's rules).
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn the_start_up_check_refuses_what_the_write_would_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.prom");
        super::check_writable(&path).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing left behind");
        assert!(super::check_writable(&dir.path().join("missing/job.prom")).is_err());
        assert!(super::check_writable(dir.path()).is_err(), "a directory");
        assert!(super::check_writable(Path::new("/")).is_err(), "no file name");
        std::fs::write(&path, "").unwrap();
        assert!(super::check_writable(&path.join("job.prom")).is_err(), "under a plain file");
        super::check_writable(&path).unwrap();
    }

    #[test]
    fn what_does_not_apply_is_nan_and_the_last_success_carries_over() {
        use super::{Outcome, Report};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.prom");
        let value = |name: &str| {
            let text = std::fs::read_to_string(&path).unwrap();
            let prefix = format!("{name}{{key=\"k\"}} ");
            text.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_owned)).unwrap()
        };
        let busy = Report { outcome: Some(Outcome::Busy), exit_status: 75, ..Report::default() };
        super::try_write(&path, b"k", &busy).unwrap();
        assert_eq!(value("redlock_run_command_exit_status"), "NaN");
        assert_eq!(value("redlock_run_hold_seconds"), "NaN");
        assert_eq!(value("redlock_run_acquire_wait_seconds"), "NaN");
        assert_eq!(value(super::METRIC_SUCCESS), "0", "no success in the file yet");

        let success =
            Report { outcome: Some(Outcome::Success), command_status: Some(0), ..Report::default() };
        super::try_write(&path, b"k", &success).unwrap();
        let at = value(super::METRIC_SUCCESS);
        assert!(at.parse::<f64>().unwrap() > 1.7e9, "{at}");
        super::try_write(&path, b"k", &busy).unwrap();
        assert_eq!(value(super::METRIC_SUCCESS), at, "carried over");
        super::try_write(&path, b"other", &busy).unwrap();
        super::try_write(&path, b"k", &busy).unwrap();
        assert_eq!(value(super::METRIC_SUCCESS), "0", "another key's success is not this one's");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(super::escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
