//! The server launcher of the tests: a real `redis-server` (or `REDLOCK_TEST_SERVER`) per test
//! on a free loopback port, in a temp dir, without persistence. Only std, nix and tempfile, so
//! that the library's unit tests start their servers with it too (`#[path]`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

/// The server the tests start: `REDLOCK_TEST_SERVER` (a `valkey-server`, say), else
/// `redis-server` from PATH.
pub fn server_binary() -> String {
    std::env::var("REDLOCK_TEST_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// The server's version, major and minor (`redis-server --version`: "… v=6.2.14 …"; Valkey 8.1
/// says 8.1): a test of what a later server does can tell an older one.
pub fn server_version() -> (u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(server_binary()).arg("--version").output().expect("the server's --version");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v = text.split_whitespace().find_map(|w| w.strip_prefix("v=")).expect("v= in --version");
        let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    })
}

/// A `redis-server` owned by one test: its own port, temp dir and log, no persistence.
/// Killed on drop; if the test is failing, its log is printed.
pub struct RedisServer {
    pub port: u16,
    dir: TempDir,
    process: Option<Child>,
    /// Options after the defaults (TLS, cluster mode, a password, …).
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with extra options; `{dir}` in them stands for its temp dir.
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new().prefix("redlock-test-").tempdir().expect("temp dir");
        let extra = extra.iter().map(|a| a.replace("{dir}", &dir.path().display().to_string())).collect();
        let mut server = RedisServer { port: 0, dir, process: None, extra };
        for _ in 0..10 {
            server.port = free_port();
            if server.launch() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port (is it installed? apt install redis-server)");
    }

    /// Starts a server on a given port (one that was free a moment ago).
    pub fn start_on(port: u16) -> Self {
        let dir = tempfile::Builder::new().prefix("redlock-test-").tempdir().expect("temp dir");
        let mut server = RedisServer { port, dir, process: None, extra: Vec::new() };
        assert!(server.launch(), "could not start redis-server on port {port}");
        server
    }

    /// Kills the server (SIGKILL) and starts it again on the same port from the snapshot a
    /// `SAVE` left in its dir, with `extra` options for this start only. Waits (bounded) until
    /// it answers, which may be `-LOADING` when `wait_loaded` is false.
    pub fn restart_from_snapshot(&mut self, extra: &[&str], wait_loaded: bool) {
        assert!(
            self.dir.path().join("dump.rdb").exists(),
            "no snapshot in {}: SAVE first",
            self.dir.path().display()
        );
        self.stop();
        let kept = self.extra.len();
        self.extra.extend(extra.iter().map(|a| a.to_string()));
        let started = if wait_loaded { self.launch() } else { self.launch_until(answers) };
        self.extra.truncate(kept);
        assert!(started, "redis-server did not restart on port {}; log:\n{}", self.port, self.log());
    }

    /// Starts the process on `self.port` and waits (bounded) until it answers PING.
    fn launch(&mut self) -> bool {
        self.launch_until(ping)
    }

    /// Starts the process on `self.port` and waits (bounded) until `ready(port)`.
    fn launch_until(&mut self, ready: fn(u16) -> bool) -> bool {
        let log = self.dir.path().join("redis.log");
        let child = Command::new(server_binary())
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (apt install redis-server)");
        self.process = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.process.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                eprintln!("redis-server on port {} exited early ({status}); log:\n{}", self.port, self.log());
                self.process = None;
                return false;
            }
            if ready(self.port) {
                // Make sure the server answering is ours, not another test's on a reused port.
                let pid = self.process.as_ref().map(|c| c.id()).unwrap_or(0);
                if self.server_pid() == Some(pid) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        false
    }

    /// The pid of the server answering on the port (`INFO server`, on a plain connection).
    fn server_pid(&self) -> Option<u32> {
        let addr = ([127, 0, 0, 1], self.port).into();
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        stream.write_all(b"INFO server\r\n").ok()?;
        let mut reply = BufReader::new(stream);
        let mut header = String::new();
        reply.read_line(&mut header).ok()?;
        let mut info = vec![0; header.strip_prefix('$')?.trim_end().parse().ok()?];
        reply.read_exact(&mut info).ok()?;
        String::from_utf8_lossy(&info)
            .lines()
            .find_map(|l| l.strip_prefix("process_id:")?.trim().parse().ok())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.process.as_ref().expect("running").id() as i32)
    }

    pub fn freeze(&self) {
        kill(self.pid(), Signal::SIGSTOP).expect("SIGSTOP redis");
    }

    pub fn thaw(&self) {
        kill(self.pid(), Signal::SIGCONT).expect("SIGCONT redis");
    }

    /// Kills the server and starts a new, empty one on the same port.
    pub fn restart_empty(&mut self) {
        self.stop();
        assert!(self.launch(), "redis-server did not restart on port {}; log:\n{}", self.port, self.log());
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- redis-server log (port {}) ---\n{}", self.port, self.log());
        }
        self.thaw_quietly();
        self.stop();
    }
}

impl RedisServer {
    fn thaw_quietly(&self) {
        if let Some(c) = &self.process {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
        }
    }
}

/// A port nothing listens on right now.
/// A loopback port for a server of a test, or for one that must stay unanswered: free now, one
/// this process has not handed out before, and below the kernel's ephemeral range (32768 on),
/// so that no `bind(0)` and no outgoing connection of a wrapper takes it meanwhile. (Such ports,
/// handed out again while a test still counted on them, let one test's Redis answer another's
/// "nothing listens here".) From 10000 to 19999, so that a Cluster node's bus port (+10000)
/// is never another node's port.
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let offset = std::process::id().wrapping_mul(7919) % 10_000;
    for _ in 0..10_000 {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = 10_000 + ((offset + n) % 10_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port from 10000 to 19999");
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Whether something on `port` answers a PING like a Redis: `+PONG`, or an error such as
/// `-LOADING`.
fn answers(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut first = [0u8; 1];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut first).is_ok() && matches!(first[0], b'+' | b'-')
}
