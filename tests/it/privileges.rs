//! A command that becomes another user (sudo, a setuid program) can no longer be signalled by
//! the wrapper: the run says so and never waits for it past the lease; `--no-new-privs`
//! prevents the escalation. The wrapper runs as `nobody` here; the escalation is a setuid-root
//! copy of setpriv(1). These tests need root to set that up.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const NOBODY: u32 = 65534;
const LIMIT: Duration = Duration::from_secs(30);

/// A directory `nobody` can use, holding a copy of the wrapper and a setuid-root setpriv.
struct Stage {
    dir: tempfile::TempDir,
}

impl Stage {
    /// `None` (and a note on stderr) when not root: nothing here can be set up then.
    fn new() -> Option<Self> {
        if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
            eprintln!("skipped: needs root to make a setuid program and to run as nobody");
            return None;
        }
        let dir = tmp();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let setpriv = which("setpriv");
        for (from, to, mode) in
            [(Path::new(bin()), "redlock-run", 0o755), (setpriv.as_path(), "setpriv", 0o4755)]
        {
            let to = dir.path().join(to);
            copy_program(from, &to);
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        Some(Stage { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The wrapper, as `nobody`, running `argv` after becoming root through setuid setpriv.
    fn wrapper_escalating(&self, redis: &RedisServer, args: &[&str], argv: &[&str]) -> Command {
        let mut cmd = Command::new(self.path("redlock-run"));
        default_signals(&mut cmd);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .arg("--redis-url")
            .arg(redis.url())
            .args(args)
            .arg("--")
            .arg(self.path("setpriv"))
            .args(["--reuid", "0", "--regid", "0", "--clear-groups", "--"])
            .args(argv)
            .current_dir(self.dir.path())
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::null());
        cmd
    }
}

fn which(program: &str) -> PathBuf {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{program} not found (util-linux)"))
}

/// The pid of the root `sleep` the escalated command runs, once it runs. (Its output goes to
/// /dev/null, so that it does not hold the wrapper's pipes open.)
fn root_sleeper(marker: &str) -> i32 {
    let mut found = None;
    assert!(wait_until(Duration::from_secs(5), || {
        found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (cmdline == format!("sleep\0{marker}\0").as_bytes()).then_some(pid)
        });
        found.is_some()
    }));
    found.unwrap()
}

/// The lock is lost while the command, now root, cannot be signalled: the wrapper says so and
/// ends at once with 125 instead of waiting for a command it cannot stop.
#[test]
fn a_command_that_became_root_ends_the_run_loudly_when_the_lock_is_lost() {
    let Some(stage) = Stage::new() else { return };
    let redis = RedisServer::start();
    let mut child = stage
        .wrapper_escalating(
            &redis,
            &["-k", "lock:eperm", "--ttl", "3s"],
            &["sh", "-c", "exec sleep 31.5 >/dev/null 2>&1"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .start();
    let sleeper = root_sleeper("31.5");
    redis.cmd::<()>(&[b"DEL", b"lock:eperm"]);
    let started = Instant::now();
    let out = wait_output(&mut child, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let survived = process_alive(sleeper);
    let _ = kill(Pid::from_raw(sleeper), Signal::SIGKILL);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    // Not waiting for the command it cannot stop (31.5 s); room for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(survived, "the root command was out of the wrapper's reach");
    assert!(stderr.contains("cannot signal the command"), "{stderr}");
    assert!(stderr.contains("could not be stopped"), "{stderr}");
}

/// SIGTERM to the wrapper of a command it cannot signal still ends the run within
/// --kill-grace and the bound on SIGKILL; the lock is left to expire rather than released
/// under a command that still runs.
#[test]
fn sigterm_ends_the_run_even_when_the_command_cannot_be_signalled() {
    let Some(stage) = Stage::new() else { return };
    let redis = RedisServer::start();
    let mut child = stage
        .wrapper_escalating(
            &redis,
            &["-k", "lock:eperm-term", "--ttl", "20s", "--kill-grace", "300ms"],
            &["sh", "-c", "exec sleep 32.5 >/dev/null 2>&1"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .start();
    let sleeper = root_sleeper("32.5");
    let started = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let out = wait_output(&mut child, LIMIT);
    let _ = kill(Pid::from_raw(sleeper), Signal::SIGKILL);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    // Not waiting for the command it cannot stop (32.5 s); room for a loaded machine.
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(stderr.contains("NOT released"), "{stderr}");
    assert!(redis.exists(b"lock:eperm-term"), "the lock is left to expire, not released");
}

/// With --no-new-privs the setuid bit does nothing: the command stays the wrapper's user.
#[test]
fn no_new_privs_keeps_the_command_from_becoming_root() {
    let Some(stage) = Stage::new() else { return };
    let redis = RedisServer::start();
    for (flag, escalated) in [(None, true), (Some("--no-new-privs"), false)] {
        let mut args = vec!["-k", "lock:nnp"];
        args.extend(flag);
        let mut escalating = stage
            .wrapper_escalating(&redis, &args, &["id", "-u"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .start();
        let out = wait_output(&mut escalating, LIMIT);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stdout.trim() == "0", escalated, "{flag:?}: {stdout:?} {stderr}");
        if !escalated {
            // The command did run, and setpriv itself found it had no privileges to use.
            assert!(stderr.contains("setresuid"), "{flag:?}: {stderr}");
            assert!(!out.status.success(), "{flag:?}: {stderr}");
        }
    }
}

/// Processes of the group the wrapper cannot stop make the run end with 125 — whatever the
/// command's own status — and the lock is not released under them.
#[test]
fn leftovers_the_wrapper_cannot_stop_end_the_run_with_125() {
    let Some(stage) = Stage::new() else { return };
    let redis = RedisServer::start();
    let setpriv = stage.path("setpriv");
    let setpriv = setpriv.to_str().unwrap();
    // A root background job (given time to become root) outlives a command that exits 0 …
    let root_job = format!(
        "{setpriv} --reuid 0 --regid 0 --clear-groups sh -c 'exec sleep 33.5 >/dev/null 2>&1' & sleep 0.3; exit 0"
    );
    // … or a killable shell whose root child survives SIGTERM and SIGKILL.
    let root_child =
        format!("{setpriv} --reuid 0 --regid 0 --clear-groups sh -c 'exec sleep 34.5 >/dev/null 2>&1'");
    for (script, marker, signal) in [(root_job, "33.5", None), (root_child, "34.5", Some(Signal::SIGTERM))] {
        let mut cmd = Command::new(stage.path("redlock-run"));
        default_signals(&mut cmd);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .args([
                "--redis-url",
                &redis.url(),
                "-k",
                "lock:eperm-left",
                "--ttl",
                "20s",
                "--kill-grace",
                "300ms",
            ])
            .args(["--", "sh", "-c", &script])
            .current_dir(stage.path(""))
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.start();
        let sleeper = root_sleeper(marker);
        if let Some(sig) = signal {
            kill(Pid::from_raw(child.id() as i32), sig).unwrap();
        }
        let out = wait_output(&mut child, LIMIT);
        let _ = kill(Pid::from_raw(sleeper), Signal::SIGKILL);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{script}: {stderr}");
        assert!(stderr.contains("could not be stopped"), "{stderr}");
        assert!(redis.exists(b"lock:eperm-left"), "the lock is left to expire, not released");
        redis.cmd::<()>(&[b"DEL", b"lock:eperm-left"]);
    }
}

/// At the process limit (`ulimit -u`) nothing can be started: not the command, not the thread
/// that writes diagnostics. The run still says why on stderr, exits 126 and gives the lock back.
#[test]
fn at_the_process_limit_the_run_says_why_and_releases() {
    const LONE: u32 = 61_234;
    use std::os::unix::process::CommandExt;
    let Some(stage) = Stage::new() else { return };
    let redis = RedisServer::start();
    let mut cmd = Command::new(stage.path("redlock-run"));
    default_signals(&mut cmd);
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .args(["--redis-url", &redis.url(), "-k", "lock:nproc", "--", "true"])
        .current_dir(stage.path("."))
        .gid(LONE);
    // SAFETY: between fork and exec only setrlimit(2) and setuid(2), async-signal-safe. The
    // limit is set while still root, then applies to a user of its own (no other test runs as
    // it, so that its one process is the wrapper).
    unsafe {
        cmd.pre_exec(|| {
            let one = nix::libc::rlimit { rlim_cur: 1, rlim_max: 1 };
            if nix::libc::setrlimit(nix::libc::RLIMIT_NPROC, &one) != 0 || nix::libc::setuid(LONE) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = run(&mut cmd, LIMIT);
    assert_eq!(r.code, 126, "{}", r.stderr);
    // The guardian's start, or the command's, is refused (whichever comes first).
    assert!(r.stderr.contains("cannot run true: "), "{:?}", r.stderr);
    assert!(r.stderr.contains("Resource temporarily unavailable"), "{:?}", r.stderr);
    assert!(!redis.exists(b"lock:nproc"), "released");
}

/// The wrapper is killed while a member of its command's group, now root, is beyond the
/// guardian's SIGKILL — or where `/proc` (another PID namespace's) cannot show the members:
/// the guardian cannot confirm the group dead, so it does not release (the lock expires by
/// itself) and says why on the wrapper's stderr.
#[test]
fn a_killed_wrapper_whose_command_cannot_be_confirmed_dead_leaves_its_lock_to_expire() {
    let Some(stage) = Stage::new() else { return };
    let redis = RedisServer::start();
    let foreign_proc = can_unshare(&["--pid", "--fork"]);
    for (marker, unshared, why) in
        [("35.5", false, "cannot be signalled"), ("36.5", true, "/proc cannot show")]
    {
        if unshared && !foreign_proc {
            eprintln!("skipped: cannot make a PID namespace");
            continue;
        }
        let mut cmd = stage.wrapper_escalating(
            &redis,
            &["-k", "lock:eperm-crash", "--ttl", "20s"],
            &["sh", "-c", &format!("exec sleep {marker} >/dev/null 2>&1")],
        );
        if unshared {
            // The same run, as a child of a shell that is the namespace's PID 1 (whose end would
            // end the guardian too) and keeps the outer /proc.
            let mut inner = vec![cmd.get_program().to_owned()];
            inner.extend(cmd.get_args().map(|a| a.to_owned()));
            let mut shell = std::process::Command::new("unshare");
            shell
                .args([
                    "--pid",
                    "--fork",
                    "setpriv",
                    "--reuid",
                    "65534",
                    "--regid",
                    "65534",
                    "--clear-groups",
                ])
                .args(["sh", "-c", "\"$@\"; sleep 2", "sh"])
                .args(inner)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .current_dir(stage.path(""))
                .stdin(Stdio::null());
            cmd = shell;
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).start();
        let sleeper = root_sleeper(marker);
        let stat = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap();
        let wrapper: i32 = stat.rsplit(") ").next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        assert!(redis.exists(b"lock:eperm-crash"));
        kill(Pid::from_raw(wrapper), Signal::SIGKILL).unwrap();
        let out = wait_output(&mut child, LIMIT);
        let alive = process_alive(sleeper);
        let _ = kill(Pid::from_raw(sleeper), Signal::SIGKILL);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why) && stderr.contains("was NOT released"), "{marker}: {stderr}");
        assert!(unshared || alive, "the root member was out of reach");
        assert!(redis.exists(b"lock:eperm-crash"), "{marker}: the lock is left to expire");
        redis.cmd::<()>(&[b"DEL", b"lock:eperm-crash"]);
    }
}

/// A command of the wrapper's own user reads nothing under /proc that holds the password: not
/// the wrapper's or its guardian's environment (where a Kubernetes Secret puts it), nor the
/// release's ticket they keep in a memory file. Both are made non-dumpable.
#[test]
fn the_command_finds_no_password_under_proc() {
    const PASSWORD: &str = "S3cretPw-4711";
    let Some(stage) = Stage::new() else { return };
    let redis = RedisServer::start();
    redis.cmd::<()>(&[
        b"ACL",
        b"SETUSER",
        b"job",
        b"on",
        format!(">{PASSWORD}").as_bytes(),
        b"~*",
        b"&*",
        b"+@all",
    ]);
    let seen = stage.path("seen");
    // Every file of every process the command can read, the memory files behind descriptors
    // among them (not pipes or sockets, which would block).
    let look = r#"for p in /proc/[0-9]*; do
        cat "$p/environ" "$p/cmdline" 2>/dev/null
        for f in "$p"/fd/*; do [ -f "$f" ] && cat "$f" 2>/dev/null; done
    done > "$SEEN"; exit 0"#;
    let mut wrapper = Command::new(stage.path("redlock-run"));
    let out = wait_output(
        &mut wrapper
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("REDLOCK_REDIS_URL", format!("redis://job@127.0.0.1:{}", redis.port))
            .env("REDLOCK_PASSWORD", PASSWORD)
            .env("SEEN", &seen)
            .args(["-k", "lock:proc", "--", "sh", "-c", look])
            .current_dir(stage.dir.path())
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .start(),
        LIMIT,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen = std::fs::read(&seen).unwrap();
    assert!(seen.len() > 1000, "the command read /proc: {} bytes", seen.len());
    assert!(
        !seen.windows(PASSWORD.len()).any(|w| w == PASSWORD.as_bytes()),
        "the password is readable under /proc"
    );
}
