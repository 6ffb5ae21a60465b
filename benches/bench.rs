//! Whole-process benchmark of redlock-run, side by side with flock(1) in the same run (README §
//! Performance, BENCHMARKS.md).
//!
//!     cargo bench                       # full run, prints a Markdown table
//!     BENCH_RUNS=50 cargo bench         # quicker, fewer samples
//!     BENCH_QUEUE=10,100 cargo bench    # queue sizes of the scaling table (10,100,1000)
//!     BENCH_BASELINE=/path/to/old/redlock-run cargo bench   # the scaling table for it too
//!     BENCH_ONLY=scaling cargo bench    # only some sections (overhead, handoff, requests,
//!                                       # memory, throughput, scaling)
//!
//! It starts its own redis-server on a free loopback port. Reference points: `flock FILE true`
//! (a local-only lock), bare `true`, and `etcdctl lock` when etcd and etcdctl are installed.

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{BIN, RedisServer, free_port, tmp, wait_bounded, wait_until};

fn main() {
    // The benchmark doubles as the command under test: `bench stamp FILE [SLEEP_MS]` writes the
    // wall-clock time in ns to FILE — on start, or after sleeping SLEEP_MS — and exits.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("stamp") {
        if let Some(ms) = args.get(3) {
            std::thread::sleep(Duration::from_millis(ms.parse().expect("sleep ms")));
        }
        std::fs::write(&args[2], now_ns().to_string()).expect("write stamp");
        return;
    }
    if args.iter().any(|a| a == "--list") {
        // `cargo bench -- --list` / test harness discovery: nothing to list.
        return;
    }

    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tmp();

    println!("# redlock-run benchmark\n");
    println!("{}\n", machine());

    let mut out = String::new();
    // Three more independent masters for the Redlock rows.
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum: Vec<String> = masters.iter().map(RedisServer::url).collect();
    // BENCH_ONLY=scaling,memory runs only those sections.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let wanted = |section: &str| only.is_empty() || only.split(',').any(|s| s.trim() == section);
    if wanted("overhead") {
        overhead(&url, &quorum, &dir, runs, &mut out);
    }
    if wanted("handoff") {
        handoff(std::slice::from_ref(&url), &quorum, &dir, runs, &mut out);
    }
    if wanted("requests") {
        redis_cost(&redis, &mut out);
    }
    if wanted("memory") {
        memory(&url, &mut out);
    }
    if wanted("throughput") {
        throughput(&url, &mut out);
    }
    if wanted("scaling") {
        scaling(&dir, &mut out);
    }
    println!("{out}");
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let kernel = cmd_output("uname", &["-sr"]);
    let redis = cmd_output("redis-server", &["--version"]);
    let date = humantime::format_rfc3339_seconds(SystemTime::now());
    format!(
        "- date: {date}\n- machine: {cpu}, {cores} cores, {kernel}\n- redis: {}\n- redlock-run: {} ({} bytes)",
        redis.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        BIN,
        std::fs::metadata(BIN).map(|m| m.len()).unwrap_or(0)
    )
}

fn cmd_output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "not found".into())
}

fn available(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Builds a fresh command for each timed run.
type MakeCommand<'a> = Box<dyn Fn() -> Command + 'a>;

/// Wall time of one whole process, from spawn to exit.
fn time_once(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let status =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().expect("spawn");
    let took = start.elapsed();
    assert!(status.success(), "{cmd:?} failed: {status}");
    took
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn summary(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.95), percentile(&v, 0.99))
}

fn overhead(url: &str, quorum: &[String], dir: &tempfile::TempDir, runs: usize, out: &mut String) {
    let lockfile = dir.path().join("flock");
    let mut variants: Vec<(&str, MakeCommand)> = vec![
        (
            "redlock-run --key k -- true",
            Box::new(|| {
                let mut c = Command::new(BIN);
                c.args(["--redis-url", url, "--key", "bench:overhead", "--", "true"]);
                c
            }),
        ),
        (
            "flock FILE true",
            Box::new(move || {
                let mut c = Command::new("flock");
                c.arg(&lockfile).arg("true");
                c
            }),
        ),
        ("true", Box::new(|| Command::new("true"))),
        (
            "redlock-run (Redlock, 3 nodes) -- true",
            Box::new(move || {
                let mut c = Command::new(BIN);
                c.args(url_args(quorum)).args(["--key", "bench:overhead", "--", "true"]);
                c
            }),
        ),
    ];
    let etcd = etcd_endpoint(dir.path());
    if let Some((endpoint, _)) = &etcd {
        let endpoint = endpoint.clone();
        variants.push((
            "etcdctl lock NAME true",
            Box::new(move || {
                let mut c = Command::new("etcdctl");
                c.args(["--endpoints", &endpoint, "lock", "bench", "true"]);
                c
            }),
        ));
    }
    // Warm up (page cache, script cache), then interleave A B C A B C … so drift in machine load
    // hits every variant alike.
    for (_, make) in &variants {
        for _ in 0..10 {
            time_once(&mut make());
        }
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for _ in 0..runs {
        for (i, (_, make)) in variants.iter().enumerate() {
            samples[i].push(ms(time_once(&mut make())));
        }
    }
    let ratios: Vec<f64> = samples[0].iter().zip(&samples[1]).map(|(r, f)| r / f).collect();
    let (ratio, _, _) = summary(ratios);
    out.push_str(&format!(
        "## Overhead ({runs} interleaved runs each)\n\n| command | median | p95 |\n|---|---|---|\n"
    ));
    for (i, (name, _)) in variants.iter().enumerate() {
        let (p50, p95, _) = summary(samples[i].clone());
        out.push_str(&format!("| `{name}` | {p50:.2} ms | {p95:.2} ms |\n"));
    }
    out.push_str(&format!("\nredlock-run / flock, median of per-pair ratios: **{ratio:.2}**\n"));
    if etcd.is_some() {
        let etcd_ratio = summary(samples[4].iter().zip(&samples[0]).map(|(e, r)| e / r).collect()).0;
        out.push_str(&format!(
            "etcdctl lock / redlock-run, median of per-pair ratios: **{etcd_ratio:.2}**\n"
        ));
    } else {
        out.push_str("(etcdctl lock not measured: etcd/etcdctl not installed; `apt-get install etcd-server etcd-client`)\n");
    }
    out.push('\n');
    if let Some((_, mut server)) = etcd {
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// A local etcd on loopback ports, when etcd and etcdctl are installed.
fn etcd_endpoint(dir: &Path) -> Option<(String, std::process::Child)> {
    if !available("etcd") || !available("etcdctl") {
        return None;
    }
    let (client, peer) = (free_port(), free_port());
    let endpoint = format!("http://127.0.0.1:{client}");
    let server = Command::new("etcd")
        .args(["--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &endpoint, "--advertise-client-urls", &endpoint])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args(["--initial-cluster", &format!("default=http://127.0.0.1:{peer}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let ready = wait_until(Duration::from_secs(10), || {
        Command::new("etcdctl")
            .args(["--endpoints", &endpoint, "endpoint", "health"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    ready.then_some((endpoint, server))
}

fn stamp_cmd(file: &Path, sleep_ms: Option<u64>) -> Vec<String> {
    let mut v = vec![
        std::env::current_exe().unwrap().display().to_string(),
        "stamp".into(),
        file.display().to_string(),
    ];
    v.extend(sleep_ms.map(|m| m.to_string()));
    v
}

fn read_stamp(path: &Path) -> i128 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

fn url_args(urls: &[String]) -> Vec<String> {
    urls.iter().flat_map(|u| ["--redis-url".to_owned(), u.clone()]).collect()
}

/// Handoff gaps in ms between a holder's command ending and a waiter's command starting.
fn handoff_gaps(urls: &[String], dir: &tempfile::TempDir, runs: usize) -> Vec<f64> {
    let (end, start) = (dir.path().join("end"), dir.path().join("start"));
    let mut gaps = Vec::new();
    for _ in 0..runs {
        let _ = std::fs::remove_file(&end);
        let _ = std::fs::remove_file(&start);
        let mut holder = Command::new(BIN)
            .args(url_args(urls))
            .args(["--key", "bench:handoff", "--"])
            .args(stamp_cmd(&end, Some(30)))
            .spawn()
            .expect("holder");
        std::thread::sleep(Duration::from_millis(8));
        let mut waiter = Command::new(BIN)
            .args(url_args(urls))
            .args(["--key", "bench:handoff", "--wait", "10s", "--"])
            .args(stamp_cmd(&start, None))
            .spawn()
            .expect("waiter");
        assert!(wait_bounded(&mut holder, Duration::from_secs(10)).success());
        assert!(wait_bounded(&mut waiter, Duration::from_secs(10)).success());
        gaps.push((read_stamp(&start) - read_stamp(&end)) as f64 / 1e6);
    }
    gaps
}

fn handoff(single: &[String], quorum: &[String], dir: &tempfile::TempDir, runs: usize, out: &mut String) {
    let mut rows = String::new();
    for (label, urls, n) in [("one Redis", single, runs), ("Redlock, 3 nodes", quorum, runs / 2)] {
        let gaps = handoff_gaps(urls, dir, n);
        let overlaps = gaps.iter().filter(|g| **g <= 0.0).count();
        let (p50, p95, p99) = summary(gaps);
        rows.push_str(&format!("| {label} | {n} | {p50:.2} ms | {p95:.2} ms | {p99:.2} ms | {overlaps} |\n"));
    }
    // The part of the handoff that is the next command's own exec and start-up.
    let start = dir.path().join("start");
    let mut spawn = Vec::new();
    for _ in 0..runs.min(100) {
        let _ = std::fs::remove_file(&start);
        let args = stamp_cmd(&start, None);
        let before = now_ns();
        assert!(Command::new(&args[0]).args(&args[1..]).status().expect("stamp").success());
        spawn.push((read_stamp(&start) - before as i128) as f64 / 1e6);
    }
    let (spawn_p50, _, _) = summary(spawn);
    out.push_str(&format!(
        "## Handoff latency\n\nFrom the holder's command writing its last timestamp to the waiting wrapper's command \
         writing its first (includes the holder's exit and reaping, the release, the announcement, the waiter's acquire, and \
         the spawn and start-up of the next command).\n\n| Redis | handoffs | median | p95 | p99 | overlaps |\n\
         |---|---|---|---|---|---|\n{rows}\n\
         For reference, spawning the same command directly until it writes its timestamp takes {spawn_p50:.2} ms \
         (median) on this machine; the lock's own share of the handoff is the difference.\n\n"
    ));
}

fn redis_cost(redis: &RedisServer, out: &mut String) {
    out.push_str("## Redis requests\n\nRequests sent by clients (scripts count once), from `INFO commandstats` deltas.\n\n| scenario | requests | per run |\n|---|---|---|\n");
    let url = redis.url();
    // Load the scripts once, as any long-lived Redis would have them.
    time_once(Command::new(BIN).args(["--redis-url", &url, "--key", "bench:cost", "--", "true"]));
    let before = redis.client_requests();
    let n = 20;
    for _ in 0..n {
        time_once(Command::new(BIN).args(["--redis-url", &url, "--key", "bench:cost", "--", "true"]));
    }
    let used = redis.client_requests() - before;
    out.push_str(&format!(
        "| uncontended run, `-- true` | {used} for {n} runs | {:.1} |\n",
        used as f64 / n as f64
    ));
    let before = redis.client_requests();
    time_once(Command::new(BIN).args([
        "--redis-url",
        &url,
        "--key",
        "bench:cost",
        "--ttl",
        "1s",
        "--",
        "sleep",
        "2",
    ]));
    let used = redis.client_requests() - before;
    out.push_str(&format!("| one run of 2 s with `--ttl 1s` (renewal every 333 ms) | {used} | {used} |\n"));

    for waiters in [1usize, 10, 50] {
        let before = redis.client_requests();
        let mut holder = Command::new(BIN)
            .args(["--redis-url", &url, "--key", "bench:herd", "--", "sleep", "0.5"])
            .spawn()
            .expect("holder");
        assert!(wait_until(Duration::from_secs(5), || redis.exists(b"bench:herd")));
        let children: Vec<_> = (0..waiters)
            .map(|_| {
                Command::new(BIN)
                    .args(["--redis-url", &url, "--key", "bench:herd", "--wait", "60s", "--", "true"])
                    .spawn()
                    .expect("waiter")
            })
            .collect();
        assert!(wait_bounded(&mut holder, Duration::from_secs(30)).success());
        for mut c in children {
            assert!(wait_bounded(&mut c, Duration::from_secs(60)).success());
        }
        let used = redis.client_requests() - before;
        // The holder's own acquire and release are 2 of these; each waiter's run hands off once.
        let per_handoff = (used - 2) as f64 / waiters as f64;
        let avg_waiting = (waiters as f64 + 1.0) / 2.0;
        out.push_str(&format!(
            "| {waiters} waiter(s) behind a 0.5 s holder | {used} | {per_handoff:.1} per handoff, {:.2} per waiter per handoff |\n",
            per_handoff / avg_waiting
        ));
    }
    out.push('\n');
}

fn memory(url: &str, out: &mut String) {
    let mut child = Command::new(BIN)
        .args(["--redis-url", url, "--key", "bench:rss", "--", "sleep", "1"])
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(600));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_owned())
            .unwrap_or_default()
    };
    let (hwm, rss) = (field("VmHWM:"), field("VmRSS:"));
    assert!(wait_bounded(&mut child, Duration::from_secs(10)).success());
    out.push_str(&format!(
        "## Memory\n\nThe wrapper process itself while its command (`sleep 1`) runs: peak resident {hwm} KiB (VmHWM), current {rss} KiB.\n\n"
    ));
}

fn throughput(url: &str, out: &mut String) {
    let (wrappers, each) = (8, 50);
    let start = Instant::now();
    let threads: Vec<_> = (0..wrappers)
        .map(|_| {
            let url = url.to_owned();
            std::thread::spawn(move || {
                for _ in 0..each {
                    time_once(Command::new(BIN).args([
                        "--redis-url",
                        &url,
                        "--key",
                        "bench:throughput",
                        "--wait",
                        "60s",
                        "--",
                        "true",
                    ]));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let took = start.elapsed();
    let total = wrappers * each;
    out.push_str(&format!(
        "## Throughput under contention\n\n{wrappers} concurrent loops × {each} runs with `--wait`, command `true`: {total} critical sections in {:.2} s = **{:.0} per second**.\n",
        took.as_secs_f64(),
        total as f64 / took.as_secs_f64()
    ));
    let _ = std::io::stdout().flush();
}

/// How one queue drained.
struct Drained {
    /// How long the waiters took to join, one after the other (they keep their entries alive
    /// meanwhile).
    joining: Duration,
    wall: Duration,
    /// Redis requests per run (`None` for etcd).
    per_run: Option<f64>,
    /// Consecutive runs out of the order the waiters joined in.
    inversions: usize,
}

/// The queue at scale: a holder holds the key while `n` waiters join one after the other (each
/// known to be waiting before the next starts), then the holder lets go and the queue drains.
/// For this build, an older build (`BENCH_BASELINE`), and `etcdctl lock` when installed.
fn scaling(dir: &tempfile::TempDir, out: &mut String) {
    let sizes: Vec<usize> = std::env::var("BENCH_QUEUE")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10, 100, 1000]);
    let baseline = std::env::var("BENCH_BASELINE").ok().filter(|b| Path::new(b).exists());
    let etcd = etcd_endpoint(dir.path());
    let mut rows = String::new();
    for &n in &sizes {
        let mut tools: Vec<(String, Box<dyn Fn() -> Drained>)> = Vec::new();
        tools.push(("redlock-run (this build)".into(), Box::new(move || drain_redlock(BIN, n))));
        if let Some(b) = baseline.clone() {
            tools.push(("redlock-run (baseline)".into(), Box::new(move || drain_redlock(&b, n))));
        }
        if let Some((endpoint, _)) = &etcd {
            let endpoint = endpoint.clone();
            tools.push(("`etcdctl lock`".into(), Box::new(move || drain_etcd(&endpoint, n))));
        }
        for (label, drain) in tools {
            let d = drain();
            let per_run = d.per_run.map(|p| format!("{p:.1}")).unwrap_or_else(|| "n/a".into());
            rows.push_str(&format!(
                "| {label} | {n} | {:.1} s | {:.2} s | {per_run} | {} of {} |\n",
                d.joining.as_secs_f64(),
                d.wall.as_secs_f64(),
                d.inversions,
                n.saturating_sub(1)
            ));
            let _ = std::io::stdout().flush();
        }
    }
    if let Some((_, mut server)) = etcd {
        let _ = server.kill();
        let _ = server.wait();
    }
    out.push_str(&format!(
        "## The queue at scale\n\nA holder holds one key while N waiters (`--wait`, command \
         `sh -c 'echo $I >> FILE'`) join one after the other, each known to be waiting before the \
         next starts; then the holder lets go. Wall time: from the holder's release to the last \
         waiter's exit. Requests: Redis requests per run from `INFO commandstats` (scripts count \
         once), keep-alives included. Inversions: consecutive runs out of the order the waiters \
         joined in. With the queue a run costs 4 requests (subscribe, join, take the lock when woken, \
         release) plus a keep-alive every 0.5 s while it waits, here mostly while the later waiters \
         join (the joining column).\n\n| tool | waiters | joining | drain time | requests per run | inversions |\n\
         |---|---|---|---|---|---|\n{rows}\n"
    ));
}

/// A waiter's command: append its number.
fn append_cmd(i: usize, out: &Path) -> Vec<String> {
    vec!["sh".into(), "-c".into(), format!("echo {i} >> '{}'", out.display())]
}

fn hold_until(go: &Path) -> Vec<String> {
    let script = format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 60000 ]; do sleep 0.01; i=$((i+1)); done",
        go.display()
    );
    vec!["sh".into(), "-c".into(), script]
}

fn inversions(out: &Path) -> usize {
    let order: Vec<usize> = std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    order.windows(2).filter(|w| w[1] < w[0]).count()
}

fn drain_redlock(bin: &str, n: usize) -> Drained {
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tmp();
    let (go, out) = (dir.path().join("go"), dir.path().join("out"));
    let key = "bench:queue";
    let mut holder = Command::new(bin)
        .args(["--redis-url", &url, "--key", key, "--"])
        .args(hold_until(&go))
        .spawn()
        .expect("holder");
    assert!(wait_until(Duration::from_secs(10), || redis.exists(key.as_bytes())));
    let before = redis.client_requests();
    let joining = Instant::now();
    // Waiting: in the queue (this build), or subscribed to releases (builds without a queue).
    let waiting = || {
        let queued: u64 = redis.cmd(&[b"ZCARD", b"{bench:queue}:queue"]);
        let subscribed: Vec<(String, u64)> = redis.cmd(&[b"PUBSUB", b"NUMSUB", b"{bench:queue}:released"]);
        queued + subscribed.first().map(|(_, n)| *n).unwrap_or(0)
    };
    let mut waiters: Vec<_> = (0..n)
        .map(|i| {
            let child = Command::new(bin)
                .args(["--redis-url", &url, "--key", key, "--wait", "10m", "-q", "--"])
                .args(append_cmd(i, &out))
                .stderr(Stdio::null())
                .spawn()
                .expect("waiter");
            assert!(wait_until(Duration::from_secs(30), || waiting() > i as u64), "waiter {i} is waiting");
            child
        })
        .collect();
    let joining = joining.elapsed();
    let released = Instant::now();
    let_go(&go, &mut holder, &mut waiters);
    let wall = released.elapsed();
    let used = redis.client_requests().saturating_sub(before + 1);
    Drained { joining, wall, per_run: Some(used as f64 / n as f64), inversions: inversions(&out) }
}

fn drain_etcd(endpoint: &str, n: usize) -> Drained {
    let dir = tmp();
    let (go, out) = (dir.path().join("go"), dir.path().join("out"));
    let lock = format!("bench-queue-{n}");
    let etcdctl = |args: &[&str]| {
        let mut c = Command::new("etcdctl");
        c.args(["--endpoints", endpoint]).args(args);
        c
    };
    let mut holder =
        etcdctl(&["lock", &lock, "--"]).args(hold_until(&go)).stdout(Stdio::null()).spawn().expect("holder");
    // Each locker (holder and waiters) owns one key under the lock's prefix.
    let lockers = || {
        etcdctl(&["get", "--prefix", "--keys-only", &format!("{lock}/")])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().filter(|l| !l.is_empty()).count())
            .unwrap_or(0)
    };
    assert!(wait_until(Duration::from_secs(10), || lockers() == 1), "the etcd holder");
    let joining = Instant::now();
    let mut waiters: Vec<_> = (0..n)
        .map(|i| {
            let child = etcdctl(&["lock", &lock, "--"])
                .args(append_cmd(i, &out))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("etcdctl");
            assert!(wait_until(Duration::from_secs(30), || lockers() > i + 1), "etcd waiter {i}");
            child
        })
        .collect();
    let joining = joining.elapsed();
    let released = Instant::now();
    let_go(&go, &mut holder, &mut waiters);
    Drained { joining, wall: released.elapsed(), per_run: None, inversions: inversions(&out) }
}

/// The holder lets go; it and every waiter must then succeed.
fn let_go(go: &Path, holder: &mut std::process::Child, waiters: &mut [std::process::Child]) {
    std::fs::write(go, "").unwrap();
    assert!(wait_bounded(holder, Duration::from_secs(60)).success());
    for w in waiters {
        assert!(wait_bounded(w, Duration::from_secs(600)).success());
    }
}
