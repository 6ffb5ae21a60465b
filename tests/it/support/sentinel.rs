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

/// How a fixture Sentinel is set up beyond watching its master.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// `requirepass` on the Sentinel; the Sentinels of a set authenticate to each other with it.
    pub password: Option<String>,
    /// More lines for sentinel.conf (TLS, ACL users); `{dir}` stands for the Sentinel's dir.
    pub extra: String,
}

/// A Sentinel process watching one master on loopback. Killed on drop; if the test is
/// failing, its log is printed.
pub struct Sentinel {
    pub port: u16,
    process: Child,
    dir: TempDir,
    password: Option<String>,
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
        Self::start_setup(master_port, watch, &Setup::default())
    }

    pub fn start_setup(master_port: u16, watch: Watch, setup: &Setup) -> Self {
        for _ in 0..10 {
            if let Some(sentinel) = Self::launch(free_port(), master_port, watch, setup) {
                return sentinel;
            }
        }
        panic!("could not start a Sentinel on a free port");
    }

    /// Starts one on `port` and waits (bounded) until it answers as itself — not as another
    /// test's process that took the port first.
    fn launch(port: u16, master_port: u16, watch: Watch, setup: &Setup) -> Option<Self> {
        let dir = tmp();
        let conf = dir.path().join("sentinel.conf");
        let password = setup.password.as_ref().map(|p| format!("requirepass {p}\n")).unwrap_or_default();
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {}\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {}\nsentinel failover-timeout {MASTER_NAME} {}\n\
                 {password}{}\n",
                dir.path().display(),
                watch.quorum,
                watch.down_after.as_millis(),
                watch.failover_timeout.as_millis(),
                setup.extra.replace("{dir}", &dir.path().display().to_string()),
            ),
        )
        .unwrap();
        let process = Command::new(super::server_binary())
            .arg(&conf)
            .args(["--sentinel", "--logfile"])
            .arg(dir.path().join("sentinel.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel (apt install redis-sentinel or redis-server)");
        let mut sentinel = Sentinel { port, process, dir, password: setup.password.clone() };
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

    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let auth = self.password.as_ref().map(|p| format!(":{p}@")).unwrap_or_default();
        let client = redis::Client::open(format!("redis://{auth}127.0.0.1:{}", self.port)).ok()?;
        let mut c = client.get_connection_with_timeout(Duration::from_millis(500)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        cmd.query(&mut c).ok()
    }

    /// Whether this Sentinel last heard every node on `replicas` report itself a replica of
    /// `master` (each replica's INFO, which a Sentinel polls every info-period).
    pub fn sees_replicas_of(&self, master: u16, replicas: &[u16]) -> bool {
        let listed: Vec<Vec<String>> =
            self.query(redis::cmd("SENTINEL").arg("replicas").arg(MASTER_NAME)).unwrap_or_default();
        let fields = |flat: &Vec<String>| -> HashMap<String, String> {
            flat.chunks(2).filter(|kv| kv.len() == 2).map(|kv| (kv[0].clone(), kv[1].clone())).collect()
        };
        replicas.iter().all(|port| {
            listed.iter().map(fields).any(|f| {
                f.get("port") == Some(&port.to_string())
                    && f.get("role-reported").is_some_and(|r| r == "slave")
                    && f.get("master-port") == Some(&master.to_string())
            })
        })
    }

    /// Sets how often this Sentinel polls each node's INFO (10 s by default).
    pub fn set_info_period(&self, period: Duration) -> bool {
        self.query::<String>(
            redis::cmd("SENTINEL").arg("DEBUG").arg("info-period").arg(period.as_millis() as u64),
        )
        .is_some()
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

/// A master, replicas in sync with it, and Sentinels that all know the replicas and each
/// other — ready to fail over.
pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    /// Replicas beyond the first.
    pub more_replicas: Vec<RedisServer>,
    pub sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    pub fn start(sentinels: usize, watch: Watch) -> Self {
        Self::start_setup(sentinels, 1, watch, &Setup::default())
    }

    pub fn start_setup(sentinels: usize, replicas: usize, watch: Watch, setup: &Setup) -> Self {
        assert!(replicas >= 1, "a set fails over to a replica");
        // Only the master's first syncs are sooner: after a failover the promoted replica, which
        // keeps the default, syncs the demoted master as it would.
        let master = RedisServer::start_with(SYNC_AT_ONCE);
        let of = master.port.to_string();
        let mut replicas: Vec<RedisServer> =
            (0..replicas).map(|_| RedisServer::start_with(&["--replicaof", "127.0.0.1", &of])).collect();
        let replica = replicas.remove(0);
        let sentinels: Vec<Sentinel> =
            (0..sentinels).map(|_| Sentinel::start_setup(master.port, watch, setup)).collect();
        let set = SentinelSet { master, replica, more_replicas: replicas, sentinels };
        let in_sync = wait_until(Duration::from_secs(10), || {
            set.replicas()
                .all(|r| r.cmd::<String>(&[b"INFO", b"replication"]).contains("master_link_status:up"))
        });
        assert!(in_sync, "the replicas did not sync with the master");
        let (others, slaves) =
            ((set.sentinels.len() - 1).to_string(), (1 + set.more_replicas.len()).to_string());
        let acquainted = wait_until(Duration::from_secs(20), || {
            set.sentinels.iter().all(|s| {
                let state = s.master_state();
                state.get("num-slaves") == Some(&slaves) && state.get("num-other-sentinels") == Some(&others)
            })
        });
        assert!(acquainted, "the Sentinels did not find the replica and each other");
        set
    }

    fn replicas(&self) -> impl Iterator<Item = &RedisServer> {
        std::iter::once(&self.replica).chain(&self.more_replicas)
    }

    /// Every data node: the master as started, then the replicas.
    pub fn nodes(&self) -> impl Iterator<Item = &RedisServer> {
        std::iter::once(&self.master).chain(self.replicas())
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

impl Sentinel {
    /// `SENTINEL FAILOVER main` here: a failover now, without asking the other Sentinels.
    pub fn force_failover(&self) -> Result<(), String> {
        let auth = self.password.as_ref().map(|p| format!(":{p}@")).unwrap_or_default();
        let client = redis::Client::open(format!("redis://{auth}127.0.0.1:{}", self.port))
            .map_err(|e| e.to_string())?;
        let mut c =
            client.get_connection_with_timeout(Duration::from_millis(500)).map_err(|e| e.to_string())?;
        c.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
        redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER_NAME).query::<()>(&mut c).map_err(|e| e.to_string())
    }
}

impl SentinelSet {
    /// The port every Sentinel names as the master, when they all answer and agree.
    pub fn agreed_master(&self) -> Option<u16> {
        let mut named = self.sentinels.iter().map(Sentinel::master_port);
        let first = named.next()??;
        named.all(|p| p == Some(first)).then_some(first)
    }

    /// The data node listening on `port`.
    pub fn node(&self, port: u16) -> Option<&RedisServer> {
        self.nodes().find(|n| n.port == port)
    }
}
