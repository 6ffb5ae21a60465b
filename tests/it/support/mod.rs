//! Test support: a real `redis-server` per test on a free loopback port, the wrapper binary,
//! and bounded waits. Nothing here touches a Redis it did not start.

pub mod fault;
pub mod logs;
pub mod oracle;
pub mod process;
pub mod prometheus;
pub mod sentinel;
pub mod server;
pub mod tls;

pub use process::{Process, Start};
pub use server::{RedisServer, free_port, server_binary, server_version};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The binary under test: `REDLOCK_TEST_BIN` (another build of it: the aarch64 one under
/// qemu, say), else the one cargo built.
pub fn bin() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        std::env::var("REDLOCK_TEST_BIN")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_redlock-run").into())
    })
}

/// Its command-line client: `REDLOCK_TEST_CLI`, else the `-cli` beside a `-server` given, else
/// `redis-cli` from PATH.
pub fn cli_binary() -> String {
    if let Some(cli) = std::env::var("REDLOCK_TEST_CLI").ok().filter(|s| !s.is_empty()) {
        return cli;
    }
    let server = server_binary();
    match server.strip_suffix("-server").map(|stem| format!("{stem}-cli")) {
        Some(cli) if server.contains('/') && Path::new(&cli).exists() => cli,
        _ => "redis-cli".into(),
    }
}

/// What a test asks its server, over redis-rs.
impl RedisServer {
    /// Requests clients have sent (from INFO commandstats): every command except those that
    /// only run inside the tool's scripts, which commandstats counts too.
    pub fn client_requests(&self) -> u64 {
        const SCRIPT_ONLY: &[&str] = &[
            "set", "get", "type", "pttl", "pexpire", "incr", "del", "publish", "time", "zrange", "zscore",
            "zadd", "zrem", "zrank", "zcount",
        ];
        let info: String = self.cmd(&[b"INFO", b"commandstats"]);
        let per_subcommand = server_version().0 >= 7;
        info.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.strip_prefix("calls=")?.split(',').next()?.parse::<u64>().ok()?;
                // What the tests and the benchmark ask to watch the wrapper is not the wrapper's.
                // (Valkey also counts the test client's own CLIENT SETINFO on connecting.)
                let observer =
                    ["info", "exists", "zcard", "pubsub|numsub", "pubsub|channels", "client|setinfo"];
                // Redis 6.2 counts no subcommands: its `client` and `pubsub` are the observer's too.
                let whole = !per_subcommand && matches!(name, "client" | "pubsub");
                (!SCRIPT_ONLY.contains(&name) && !observer.contains(&name) && !whole).then_some(calls)
            })
            .sum()
    }

    /// Keys tracked for clients (INFO stats `tracking_total_items`: a key for one client is one
    /// item, kept until the key changes even after the client has gone): a holder's watch has
    /// begun once its first check has read the lock key on its tracking connection.
    pub fn tracking_items(&self) -> u64 {
        let info: String = self.cmd(&[b"INFO", b"stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("tracking_total_items:")?.trim().parse().ok())
            .expect("INFO stats has tracking_total_items")
    }

    /// How many times clients (or scripts) have called `command` (from INFO commandstats).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = self.cmd(&[b"INFO", b"commandstats"]);
        let prefix = format!("cmdstat_{}:calls=", command.to_lowercase());
        info.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str())?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    pub fn conn(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("client");
        let conn = client.get_connection_with_timeout(Duration::from_secs(5)).expect("connect to test redis");
        conn.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        conn.set_write_timeout(Some(Duration::from_secs(5))).expect("timeout");
        conn
    }

    /// Runs one command on the test connection.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&[u8]]) -> T {
        let mut c = redis::cmd(std::str::from_utf8(args[0]).expect("command name"));
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut self.conn()).unwrap_or_else(|e| panic!("redis command {:?} failed: {e}", args[0]))
    }

    pub fn exists(&self, key: &[u8]) -> bool {
        self.cmd::<i64>(&[b"EXISTS", key]) == 1
    }

    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cmd(&[b"GET", key])
    }
}

/// Options for a master whose replica is started next: the master sends the replica its
/// dataset at once, instead of waiting 5 s (`repl-diskless-sync-delay`) for more replicas to
/// share the transfer. Only the first sync is sooner; what the replica then does is the same.
pub const SYNC_AT_ONCE: &[&str] = &["--repl-diskless-sync-delay", "0"];

/// The key's value as text, `<hash>` for a hash.
pub fn redis_value(redis: &RedisServer, key: &str) -> Option<String> {
    let kind: String = redis.cmd(&[b"TYPE", key.as_bytes()]);
    match kind.as_str() {
        "none" => None,
        "string" => redis.get(key.as_bytes()).map(|v| String::from_utf8_lossy(&v).into_owned()),
        other => Some(format!("<{other}>")),
    }
}

/// A TCP service on a loopback port that is not Redis: it answers every connection's first
/// read with `reply` and closes it. Stopped on drop.
pub struct NotRedis {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl NotRedis {
    pub fn start(reply: &'static [u8]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut request = [0u8; 512];
                        let _ = conn.read(&mut request);
                        let _ = conn.write_all(reply);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        NotRedis { port, stop }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for NotRedis {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// TCP listeners on loopback ports that accept every connection and never answer (a frozen
/// service whose kernel still accepts). Stopped, and their connections closed, on drop.
pub struct Silent {
    pub ports: Vec<u16>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Silent {
    pub fn start(listeners: usize) -> Self {
        let listeners: Vec<TcpListener> = (0..listeners)
            .map(|_| {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
                listener.set_nonblocking(true).expect("nonblocking");
                listener
            })
            .collect();
        let ports = listeners.iter().map(|l| l.local_addr().expect("addr").port()).collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let mut idle = true;
                for listener in &listeners {
                    if let Ok((conn, _)) = listener.accept() {
                        held.push(conn);
                        idle = false;
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        Silent { ports, stop }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A shell command that runs until the file `$GO` exists (bounded: 60 s).
pub const HOLD_UNTIL_GO: &str =
    "i=0; while [ ! -e \"$GO\" ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done";

/// A run with `args` (its keys and options) whose command holds until the file `go` exists
/// (bounded: 60 s), with its stderr piped; each caller waits for what holding means to it.
pub fn hold_until<S: AsRef<std::ffi::OsStr>>(
    redis: &RedisServer,
    args: impl IntoIterator<Item = S>,
    go: &Path,
) -> Process {
    redlock(redis)
        .args(args)
        .args(["--", "sh", "-c", HOLD_UNTIL_GO])
        .env("GO", go)
        .stderr(Stdio::piped())
        .start()
}

/// The wrapper with a clean environment (no REDLOCK_* or REDIS_URL from the test runner).
pub fn redlock(server: &RedisServer) -> Command {
    redlock_at(&server.url())
}

/// The wrapper with a clean environment, pointed at `url` (a proxy, a port nothing listens
/// on, a URL with credentials, a malformed one).
pub fn redlock_at(url: &str) -> Command {
    let mut cmd = wrapper();
    cmd.arg("--redis-url").arg(url);
    cmd
}

/// Starts `cmd` under an open-file limit of `limit`, with descriptors 3 to 2 + `taken` already
/// open (on /dev/null), as a parent that leaks them leaves them: the limit caps descriptor
/// numbers, so these take the lowest ones above stdio.
pub fn with_descriptors(cmd: &mut Command, limit: u64, taken: i32) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only open(2), dup2(2), close(2) and setrlimit(2), all
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let last_error = || Err(std::io::Error::last_os_error());
            if taken > 0 {
                let null = nix::libc::open(c"/dev/null".as_ptr(), nix::libc::O_RDONLY);
                if null < 0 {
                    return last_error();
                }
                for fd in 3..3 + taken {
                    if fd != null && nix::libc::dup2(null, fd) < 0 {
                        return last_error();
                    }
                }
                if null >= 3 + taken {
                    nix::libc::close(null);
                }
            }
            let nofile = nix::libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if nix::libc::setrlimit(nix::libc::RLIMIT_NOFILE, &nofile) != 0 {
                return last_error();
            }
            Ok(())
        })
    }
}

/// Whether `unshare` with these options works here (root and util-linux); tests that need it
/// say they are skipped otherwise.
pub fn can_unshare(options: &[&str]) -> bool {
    let works = Command::new("unshare").args(options).arg("true").status().is_ok_and(|s| s.success());
    if !works {
        eprintln!("skipped: `unshare {}` does not work here (needs root and util-linux)", options.join(" "));
    }
    works
}

/// Starts `cmd` with the signals the wrapper handles at their default disposition, whatever
/// the test runner inherited (`nohup` ignores SIGHUP; a shell's `&` ignores SIGINT and
/// SIGQUIT): the wrapper keeps an inherited ignore (docs/GUIDE.md), and the tests must not depend on
/// how they were started.
pub fn default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for sig in
                [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2]
            {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// The wrapper with a clean environment and no Redis chosen yet.
pub fn wrapper() -> Command {
    let mut cmd = Command::new(bin());
    default_signals(&mut cmd);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("REDLOCK_") || n == "REDIS_URL") {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Polls `children` until all but `running` of them have exited (bounded by `limit`); returns
/// their exit codes so far (`None` for those still running).
pub fn settle(children: &mut [Process], running: usize, limit: Duration) -> Vec<Option<i32>> {
    let mut codes = vec![None; children.len()];
    wait_until(limit, || {
        for (c, code) in children.iter_mut().zip(codes.iter_mut()) {
            if code.is_none() {
                *code = c.try_wait().expect("try_wait").map(|s| s.code().expect("exit code"));
            }
        }
        codes.iter().flatten().count() == children.len() - running
    });
    codes
}

pub struct Run {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub elapsed: Duration,
    /// The wrapper and whatever it left behind, for the test to look at until it drops the run.
    #[expect(dead_code, reason = "held, not read: killed on drop")]
    pub process: Process,
}

/// Runs to completion, bounded by `limit` (the process is killed and the test fails beyond it).
pub fn run(cmd: &mut Command, limit: Duration) -> Run {
    let started = Instant::now();
    let mut process = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).start();
    let out = wait_output(&mut process, limit);
    Run {
        code: out.status.code().unwrap_or_else(|| panic!("wrapper died of a signal: {:?}", out.status)),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: started.elapsed(),
        process,
    }
}

/// Copies a program to `to` in a process of its own: a descriptor this (threaded) process
/// held open for writing would be inherited by a child another test forks meanwhile, and the
/// copy's exec would then fail with ETXTBSY.
pub fn copy_program(from: &Path, to: &Path) {
    let status = Command::new("cp").arg(from).arg(to).status().expect("cp");
    assert!(status.success(), "cp {} {}", from.display(), to.display());
}

/// Collects a child's output, killing it if it runs longer than `limit`.
pub fn wait_output(child: &mut Child, limit: Duration) -> Output {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    std::thread::spawn(move || {
        let err = std::thread::spawn(move || {
            let mut err = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_end(&mut err);
            }
            err
        });
        let mut out = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut out);
        }
        let _ = tx.send((out, err.join().unwrap_or_default()));
    });
    let status = wait_bounded(child, limit);
    // Leftover processes may hold the pipes open; give the readers a bounded moment.
    let (stdout, stderr) = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    Output { status, stdout, stderr }
}

/// Waits for a child, failing the test (after killing it) beyond `limit`.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {} still running after {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Locks `m` even if a thread panicked while holding it: what the threads of a test share stays
/// readable for the failure message.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls `cond` every 5 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Live (non-zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return members;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the command name (which may contain spaces) start after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse() == Ok(pgid) {
            members.push(pid);
        }
    }
    members
}

/// A process's state letter (R, S, T, Z, …) from /proc, if it exists.
pub fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().next()?.to_owned())
}

pub fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.split_whitespace().next() != Some("Z")))
        .unwrap_or(false)
}

/// Whether process `pid` has a handler of its own for `signal` (`SigCgt` in /proc): sent
/// before then, the signal's default action (death, a stop) is taken instead.
pub fn catches(pid: u32, signal: nix::sys::signal::Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| u64::from_str_radix(l.strip_prefix("SigCgt:")?.trim(), 16).ok())
        .is_some_and(|caught| caught & (1 << (signal as i32 - 1)) != 0)
}

/// Bytes that reached loopback port `port` and that no one has read yet: what a client sent
/// to a frozen (SIGSTOPped) server there, which the kernel still receives.
pub fn unread_at(port: u16) -> u64 {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    tcp.lines()
        .skip(1)
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let local = u16::from_str_radix(fields.get(1)?.rsplit_once(':')?.1, 16).ok()?;
            let rx = u64::from_str_radix(fields.get(4)?.split_once(':')?.1, 16).ok()?;
            (local == port).then_some(rx)
        })
        .sum()
}

/// Reads a file the command under test writes (e.g. its pid), waiting for it to appear.
pub fn read_when_present(path: &Path, limit: Duration) -> String {
    let mut text = String::new();
    let found = wait_until(limit, || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        text.ends_with('\n')
    });
    assert!(found, "{} did not appear within {limit:?}", path.display());
    text
}

pub fn tmp() -> TempDir {
    tempfile::Builder::new().prefix("redlock-test-").tempdir().expect("temp dir")
}

pub fn file(dir: &TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// The classic lost-update check: `wrappers` shell loops each run `rounds` wrappers with
/// `--wait` (and the Redis options in `redis_args`), whose command reads a counter file,
/// sleeps and writes it back plus one. Returns the final count (`wrappers × rounds` if the
/// critical sections never overlapped).
pub fn contended_counter(redis_args: &[String], key: &str, wrappers: usize, rounds: usize) -> usize {
    let dir = tmp();
    let counter = file(&dir, "counter");
    std::fs::write(&counter, "0\n").unwrap();
    let script = "n=$(cat \"$COUNTER\"); sleep 0.02; echo $((n + 1)) > \"$COUNTER\"";
    let loop_script = format!(
        "for i in $(seq {rounds}); do \"$BIN\" {} -k {key} --wait 60s -- sh -c '{script}' || exit 1; done",
        redis_args.join(" ")
    );
    let children: Vec<_> = (0..wrappers)
        .map(|_| {
            Command::new("sh")
                .args(["-c", &loop_script])
                .env("BIN", bin())
                .env("COUNTER", &counter)
                .stderr(Stdio::piped())
                .start()
        })
        .collect();
    for mut c in children {
        let out = wait_output(&mut c, Duration::from_secs(120));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::read_to_string(&counter).unwrap().trim().parse().unwrap()
}

/// Starts `n` wrappers at once (built by `wrapper`, which is given the key) whose command marks
/// a file and then holds the lock until all the others have exited. Checks that exactly one ran
/// and the others found the lock busy (75).
pub fn exactly_one_of(n: usize, key: &str, wrapper: impl Fn() -> Command) {
    let dir = tmp();
    let (marker, release) = (file(&dir, "ran"), file(&dir, "release"));
    let mut children: Vec<_> = (0..n)
        .map(|_| {
            wrapper()
                .args([
                    "-k",
                    key,
                    "--",
                    "sh",
                    "-c",
                    "echo x >> \"$1\"; while [ ! -e \"$2\" ]; do sleep 0.01; done",
                ])
                .arg("sh")
                .arg(&marker)
                .arg(&release)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .start()
        })
        .collect();
    let mut codes = settle(&mut children, 1, Duration::from_secs(20));
    let settled = codes.iter().flatten().count() == n - 1;
    std::fs::write(&release, "").unwrap();
    for (c, code) in children.iter_mut().zip(codes.iter_mut()) {
        if code.is_none() {
            *code = wait_bounded(c, Duration::from_secs(30)).code();
        }
    }
    assert!(settled, "{} wrappers gave up while one held the lock: {codes:?}", n - 1);
    let codes: Vec<i32> = codes.into_iter().map(Option::unwrap).collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "exactly one ran: {codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == 75).count(), n - 1, "the others were busy: {codes:?}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "x\n", "the command ran once");
}

/// Like [`run`], with stdout a pipe whose reader is already gone (`cmd | head -0`): every write
/// to stdout fails with EPIPE. `stdout` of the result is empty.
pub fn run_into_closed_pipe(cmd: &mut Command, limit: Duration) -> Run {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let started = Instant::now();
    let mut process = cmd.stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped()).start();
    let out = wait_output(&mut process, limit);
    Run {
        code: out.status.code().unwrap_or_else(|| panic!("died of a signal: {:?}", out.status)),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: started.elapsed(),
        process,
    }
}

/// A busy loop on every core, for as long as it lives (and never more than two minutes, should
/// the test die without dropping it).
pub struct CpuHog(#[expect(dead_code, reason = "held, not read: killed on drop")] Vec<Process>);

impl CpuHog {
    pub fn start() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        CpuHog(
            (0..cores)
                .map(|_| {
                    Command::new("timeout")
                        .args(["120", "sh", "-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .start()
                })
                .collect(),
        )
    }
}

/// Starts `cmd` as the leader of a new session whose controlling terminal is a new pty, as a
/// login shell's job would be. Returns the child and the pty master (drained in the background).
pub fn spawn_on_pty(cmd: &mut Command) -> (Process, std::fs::File) {
    use std::os::fd::OwnedFd;
    use std::os::unix::process::CommandExt;
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave: OwnedFd = pty.slave;
    let master = std::fs::File::from(pty.master);
    cmd.stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave.try_clone().unwrap());
    // SAFETY: between fork and exec only async-signal-safe calls: setsid and the ioctl that
    // makes the pty (already on fd 0) the controlling terminal of the new session.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.start();
    drop(slave);
    let mut reader = master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
    });
    (child, master)
}
