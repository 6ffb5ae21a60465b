//! A `--metrics-file` that cannot be written is a configuration error found at start (exit
//! 78, one line naming where the path came from), not a warning at exit after the job ran:
//! the alert on the last success would otherwise never fire.

use std::time::Duration;

use crate::support::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Runs a command that marks a file, with the metrics file at `path` given by `flag` (or by
/// `REDLOCK_METRICS_FILE` when `flag` is false), and checks that it was refused before
/// anything else: exit 78, one line that names the source, Redis never asked, nothing run.
fn refused(path: &std::path::Path, flag: bool, says: &str) {
    let redis = RedisServer::start();
    let asked = redis.client_requests();
    let dir = tmp();
    let ran = file(&dir, "ran");
    let mut cmd = redlock(&redis);
    cmd.args(["-k", "lock:metrics-path"]);
    if flag {
        cmd.arg("--metrics-file").arg(path);
    } else {
        cmd.env("REDLOCK_METRICS_FILE", path);
    }
    let r = run(cmd.arg("--").arg("touch").arg(&ran), LIMIT);
    assert_eq!(r.code, 78, "{}: {}", path.display(), r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "one line: {}", r.stderr);
    assert!(r.stderr.starts_with("redlock-run: error: "), "{}", r.stderr);
    assert!(r.stderr.contains(says), "names {says}: {}", r.stderr);
    assert!(!ran.exists(), "the command did not run");
    assert_eq!(redis.client_requests(), asked, "Redis was not even asked");
    assert_eq!(redis.cmd::<i64>(&[b"DBSIZE"]), 0, "nothing written to Redis");
}

#[test]
fn a_metrics_file_in_a_missing_directory_is_refused_at_start() {
    let dir = tmp();
    refused(&dir.path().join("no-such-dir/job.prom"), true, "--metrics-file");
}

#[test]
fn a_metrics_file_from_the_environment_is_refused_by_its_variable_s_name() {
    let dir = tmp();
    let path = dir.path().join("no-such-dir/job.prom");
    refused(&path, false, "REDLOCK_METRICS_FILE");
}

#[test]
fn a_metrics_file_under_a_plain_file_or_at_a_directory_is_refused() {
    let dir = tmp();
    let plain = file(&dir, "plain");
    std::fs::write(&plain, "").unwrap();
    refused(&plain.join("job.prom"), true, "--metrics-file");
    refused(dir.path(), true, "--metrics-file");
}

/// A directory that exists but takes no new file, whoever asks (root too): /proc.
#[test]
fn a_metrics_file_in_a_directory_that_takes_no_file_is_refused() {
    refused(std::path::Path::new("/proc/job.prom"), true, "--metrics-file");
}

/// A writable place passes the check and leaves nothing behind but the metrics file.
#[test]
fn a_writable_metrics_file_passes_and_the_check_leaves_nothing_behind() {
    let redis = RedisServer::start();
    let dir = tmp();
    let path = file(&dir, "job.prom");
    let r = run(
        redlock(&redis).args(["-k", "lock:metrics-path", "--metrics-file"]).arg(&path).args(["--", "true"]),
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("job.prom")], "no temp file left behind");
}

/// The file is written by renaming a new one over the path: a device, a FIFO or a symbolic link
/// there would be replaced by a regular file (`--metrics-file /dev/null` once replaced the
/// device), so anything but a regular file is refused, and left as it was.
#[test]
fn a_metrics_path_that_is_no_regular_file_is_refused_and_left_alone() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tmp();
    let fifo = file(&dir, "fifo.prom");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    refused(&fifo, true, "not a regular file");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still one");

    let target = file(&dir, "target.prom");
    std::fs::write(&target, "").unwrap();
    let link = file(&dir, "link.prom");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    refused(&link, false, "REDLOCK_METRICS_FILE");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link is still one");

    // A character device like /dev/null (root may make one; elsewhere the FIFO stands for it).
    let device = file(&dir, "null.prom");
    let made = std::process::Command::new("mknod").arg(&device).args(["c", "1", "3"]).status();
    if made.is_ok_and(|s| s.success()) {
        refused(&device, true, "a character device");
        assert!(std::fs::symlink_metadata(&device).unwrap().file_type().is_char_device());
    }
}
