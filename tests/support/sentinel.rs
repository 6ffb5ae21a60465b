//! Sentinel fixtures: a Sentinel process on a free loopback port, and a whole set (a master, a
//! replica and several Sentinels) ready for a failover.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use super::{RedisServer, SYNC_AT_ONCE, free_port, tmp, wait_until};

/// The master name every fixture Sentinel monitors.
pub const MASTER_NAME: &str = "main";

/// How a Sentinel watches its master.
#[derive(Debug, Clone, Copy)]
pub struct Watch {
    pub quorum: u32,
    pub down_after: Duration,
    pub failover_timeout: Duration,
}

/// A Sentinel process watching one master on loopback. Killed on drop; if the test is
/// failing, its log is printed.
pub struct Sentinel {
    pub port: u16,
    process: Child,
    dir: TempDir,
}

impl Sentinel {
    /// A lone Sentinel (quorum 1) that fails over quickly.
    pub fn start(master_port: u16) -> Self {
        Self::start_with(
            master_port,
            Watch {
                quorum: 1,
                down_after: Duration::from_millis(800),
                failover_timeout: Duration::from_secs(4),
            },
        )
    }

    pub fn start_with(master_port: u16, watch: Watch) -> Self {
        for _ in 0..10 {
            if let Some(sentinel) = Self::launch(free_port(), master_port, watch) {
                return sentinel;
            }
        }
        panic!("could not start a Sentinel on a free port");
    }

    /// Starts one on `port` and waits (bounded) until it answers as itself — not as another
    /// test's process that took the port first.
    fn launch(port: u16, master_port: u16, watch: Watch) -> Option<Self> {
        let dir = tmp();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {}\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {}\nsentinel failover-timeout {MASTER_NAME} {}\n",
                dir.path().display(),
                watch.quorum,
                watch.down_after.as_millis(),
                watch.failover_timeout.as_millis(),
            ),
        )
        .unwrap();
        let process = Command::new("redis-server")
            .arg(&conf)
            .args(["--sentinel", "--logfile"])
            .arg(dir.path().join("sentinel.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel (apt install redis-sentinel or redis-server)");
        let mut sentinel = Sentinel { port, process, dir };
        let pid = sentinel.process.id();
        let ready = wait_until(Duration::from_secs(10), || {
            sentinel.process.try_wait().ok().flatten().is_none() && sentinel.server_pid() == Some(pid)
        });
        ready.then_some(sentinel)
    }

    fn server_pid(&self) -> Option<u32> {
        let info: String = self.query(redis::cmd("INFO").arg("server"))?;
        info.lines().find_map(|l| l.strip_prefix("process_id:")?.trim().parse().ok())
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)).ok()?;
        let mut c = client.get_connection_with_timeout(Duration::from_millis(500)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        cmd.query(&mut c).ok()
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port of the master this Sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let addr: Option<(String, u16)> =
            self.query(redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(MASTER_NAME))?;
        addr.map(|(_, p)| p)
    }

    /// `SENTINEL MASTER main` as field → value.
    fn master_state(&self) -> HashMap<String, String> {
        let flat: Vec<String> =
            self.query(redis::cmd("SENTINEL").arg("master").arg(MASTER_NAME)).unwrap_or_default();
        flat.chunks(2).filter(|kv| kv.len() == 2).map(|kv| (kv[0].clone(), kv[1].clone())).collect()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- sentinel log (port {}) ---\n{}", self.port, self.log());
        }
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A master, one replica in sync with it, and Sentinels that all know the replica and each
/// other — ready to fail over.
pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    pub fn start(sentinels: usize, watch: Watch) -> Self {
        // Only the master's first sync is sooner: after a failover the promoted replica, which
        // keeps the default, syncs the demoted master as it would.
        let master = RedisServer::start_with(SYNC_AT_ONCE);
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
        let sentinels: Vec<Sentinel> =
            (0..sentinels).map(|_| Sentinel::start_with(master.port, watch)).collect();
        let set = SentinelSet { master, replica, sentinels };
        let in_sync = wait_until(Duration::from_secs(10), || {
            set.replica.cmd::<String>(&[b"INFO", b"replication"]).contains("master_link_status:up")
        });
        assert!(in_sync, "the replica did not sync with the master");
        let others = (set.sentinels.len() - 1).to_string();
        let acquainted = wait_until(Duration::from_secs(20), || {
            set.sentinels.iter().all(|s| {
                let state = s.master_state();
                state.get("num-slaves").map(String::as_str) == Some("1")
                    && state.get("num-other-sentinels") == Some(&others)
            })
        });
        assert!(acquainted, "the Sentinels did not find the replica and each other");
        set
    }

    /// The wrapper's options to find the master through every Sentinel of the set.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> =
            self.sentinels.iter().flat_map(|s| ["--sentinel".to_owned(), s.addr()]).collect();
        args.extend(["--sentinel-master".to_owned(), MASTER_NAME.to_owned()]);
        args
    }

    /// Whether every Sentinel names the replica as the master.
    pub fn switched(&self) -> bool {
        self.sentinels.iter().all(|s| s.master_port() == Some(self.replica.port))
    }
}
