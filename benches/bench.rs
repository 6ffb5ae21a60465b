//! Whole-process benchmark of redlock-run, side by side with flock(1) in the same run (docs/GUIDE.md §
//! Performance, BENCHMARKS.md).
//!
//!     cargo bench                       # full run, prints a Markdown table
//!     BENCH_RUNS=50 cargo bench         # quicker, fewer samples
//!     BENCH_QUEUE=10,100 cargo bench    # queue sizes of the scaling table (10,100,1000)
//!     BENCH_BASELINE=/path/to/old/redlock-run cargo bench   # the scaling table for it too
//!     BENCH_ONLY=scaling cargo bench    # only some sections (overhead, breakdown, handoff,
//!                                       # requests, memory, throughput, scaling)
//!     BENCH_STATIC=/path/to/redlock-run cargo bench   # the static build's rows (default:
//!                                       # target/x86_64-unknown-linux-musl/release/redlock-run)
//!
//! It starts its own redis-server on a free loopback port. Reference points: `flock FILE true`
//! (a local-only lock), bare `true`, and `etcdctl lock` when etcd and etcdctl are installed;
//! `perf stat` lines when `perf` is installed.

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)] // the benchmark uses part of the tests' harness
mod support;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{RedisServer, bin, free_port, tmp, wait_bounded, wait_until};

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
    if wanted("breakdown") {
        breakdown(&redis, &dir, runs.min(100), &mut out);
    }
    if wanted("handoff") {
        handoff(std::slice::from_ref(&url), &quorum, &dir, runs, &mut out);
    }
    if wanted("crash") {
        crash(&url, &quorum, &dir, runs.min(50), &mut out);
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
    // The tree measured: its commit, marked when files differ from it.
    let commit = Some(cmd_output("git", &["describe", "--always", "--dirty", "--abbrev=7"]))
        .filter(|c| !c.is_empty() && c != "not found")
        .unwrap_or_else(|| "unknown (not a git checkout)".into());
    let size = |path: &str| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let static_build = match static_bin() {
        Some(path) => format!("{path} ({} bytes)", size(&path)),
        None => "not built (`cargo build --release --target x86_64-unknown-linux-musl`)".into(),
    };
    format!(
        "- date: {date}\n- commit: {commit}\n- machine: {cpu}, {cores} cores, {kernel}\n- redis: {}\n- redlock-run: {} ({} bytes)\n\
         - redlock-run, static build: {static_build}",
        redis.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        bin(),
        size(bin())
    )
}

/// The static (musl) build of this source, when built: `BENCH_STATIC`, or where cargo puts it.
fn static_bin() -> Option<String> {
    let path = std::env::var("BENCH_STATIC").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/x86_64-unknown-linux-musl/release/redlock-run").into()
    });
    Path::new(&path).exists().then_some(path)
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

/// Median peak resident memory of a command in KiB, as GNU time reports it (`%M`, the
/// process's own `ru_maxrss`; spawned from a small process, so that the figure is not the
/// spawner's). `None` without /usr/bin/time.
fn peak_rss(make: &MakeCommand, dir: &Path) -> Option<f64> {
    if !Path::new("/usr/bin/time").exists() {
        return None;
    }
    let report = dir.join("rss");
    let mut kib = Vec::new();
    for _ in 0..20 {
        let cmd = make();
        let status = Command::new("/usr/bin/time")
            .args(["-f", "%M", "-o"])
            .arg(&report)
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        assert!(status.success(), "{cmd:?} failed under /usr/bin/time: {status}");
        kib.push(std::fs::read_to_string(&report).ok()?.trim().parse::<f64>().ok()?);
    }
    Some(summary(kib).0)
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

/// The peers side by side: `true`, `flock`, this build, the static build, Redlock over three
/// nodes, `etcdctl lock`, each running `true`, interleaved.
fn overhead(url: &str, quorum: &[String], dir: &tempfile::TempDir, runs: usize, out: &mut String) {
    let lockfile = dir.path().join("flock");
    let redlock = |bin: String| -> MakeCommand {
        Box::new(move || {
            let mut c = Command::new(&bin);
            c.args(["--redis-url", url, "--key", "bench:overhead", "--", "true"]);
            c
        })
    };
    let mut variants: Vec<(&str, MakeCommand)> = vec![
        ("true", Box::new(|| Command::new("true"))),
        (
            "flock FILE true",
            Box::new(move || {
                let mut c = Command::new("flock");
                c.arg(&lockfile).arg("true");
                c
            }),
        ),
        ("redlock-run --key k -- true", redlock(bin().to_owned())),
    ];
    if let Some(path) = static_bin() {
        variants.push(("redlock-run --key k -- true (static build)", redlock(path)));
    }
    variants.push((
        "redlock-run (Redlock, 3 nodes) -- true",
        Box::new(move || {
            let mut c = Command::new(bin());
            c.args(url_args(quorum)).args(["--key", "bench:overhead", "--", "true"]);
            c
        }),
    ));
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
    let flock = 1;
    out.push_str(&format!(
        "## Overhead ({runs} interleaved runs each)\n\nWall time from spawn to exit; the ratio is the \
         median of per-pair ratios to the `flock` run next to it; peak resident memory is the \
         median over 20 runs of GNU time's `%M` (the process itself, not its command).\n\n\
         | command | median | p95 | × flock | peak RSS |\n|---|---|---|---|---|\n"
    ));
    for (i, (name, _)) in variants.iter().enumerate() {
        let (p50, p95, _) = summary(samples[i].clone());
        let ratio = summary(samples[i].iter().zip(&samples[flock]).map(|(r, f)| r / f).collect()).0;
        let rss = peak_rss(&variants[i].1, dir.path())
            .map(|kib| format!("{:.1} MiB", kib / 1024.0))
            .unwrap_or_else(|| "n/a".into());
        out.push_str(&format!("| `{name}` | {p50:.2} ms | {p95:.2} ms | {ratio:.2} | {rss} |\n"));
    }
    if etcd.is_none() {
        out.push_str("\n(etcdctl lock not measured: etcd/etcdctl not installed; `apt-get install etcd-server etcd-client`)\n");
    }
    out.push('\n');
    perf_stat(&variants, runs.min(100), out);
    if let Some((_, mut server)) = etcd {
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// `perf stat -r N` for each variant: CPU time and page faults per run (when `perf` works here).
fn perf_stat(variants: &[(&str, MakeCommand)], runs: usize, out: &mut String) {
    if !available("perf") {
        out.push_str(
            "(perf stat lines not measured: `perf` is not installed; `apt-get install linux-perf`)\n\n",
        );
        return;
    }
    let mut rows = String::new();
    for (name, make) in variants {
        let cmd = make();
        let perf = Command::new("perf")
            .args(["stat", "-x", ",", "-r", &runs.to_string(), "-e", "task-clock,page-faults", "--"])
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output();
        let Some(perf) = perf.ok().filter(|o| o.status.success()) else {
            out.push_str("(perf stat lines not measured: `perf stat` failed here)\n\n");
            return;
        };
        // CSV lines: value,unit,event,…
        let text = String::from_utf8_lossy(&perf.stderr);
        let value = |event: &str| {
            text.lines()
                .find(|l| l.split(',').nth(2).is_some_and(|e| e.starts_with(event)))
                .and_then(|l| l.split(',').next()?.parse::<f64>().ok())
        };
        let (Some(task), Some(faults)) = (value("task-clock"), value("page-faults")) else {
            out.push_str("(perf stat lines not measured: no task-clock or page-faults counts)\n\n");
            return;
        };
        rows.push_str(&format!("| `{name}` | {task:.2} ms | {faults:.0} |\n"));
    }
    out.push_str(&format!(
        "### `perf stat -r {runs}` (CPU time of the process and its children, page faults)\n\n\
         | command | task-clock | page faults |\n|---|---|---|\n{rows}\n"
    ));
}

/// Where the time of one run goes, from timestamps: the wrapper starts (`t0`, taken by this
/// benchmark), Redis has run the acquire script (its MONITOR feed), the command starts (it writes
/// the time), Redis has run the release script, the wrapper has exited (seen by this benchmark).
fn breakdown(redis: &RedisServer, dir: &tempfile::TempDir, runs: usize, out: &mut String) {
    use std::io::BufRead;
    let url = redis.url();
    let mut monitor = std::net::TcpStream::connect(("127.0.0.1", redis.port)).expect("monitor");
    monitor.write_all(b"MONITOR\r\n").unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<i128>();
    let reader = std::io::BufReader::new(monitor.try_clone().unwrap());
    std::thread::spawn(move || {
        for line in reader.lines() {
            let Ok(line) = line else { return };
            // +1733070000.123456 [0 127.0.0.1:40000] "EVALSHA" …
            if line.contains("\"EVALSHA\"") || line.contains("\"evalsha\"") {
                let stamp = line.trim_start_matches('+').split(' ').next().unwrap_or("");
                let (secs, micros) = stamp.split_once('.').unwrap_or(("0", "0"));
                let ns = secs.parse::<i128>().unwrap_or(0) * 1_000_000_000
                    + micros.parse::<i128>().unwrap_or(0) * 1_000;
                if tx.send(ns).is_err() {
                    return;
                }
            }
        }
    });
    let stamp = dir.path().join("phase");
    let lockfile = dir.path().join("flock-phases");
    let mut tools: Vec<(String, String)> = vec![("redlock-run".into(), bin().into())];
    if let Some(path) = static_bin() {
        tools.push(("redlock-run, static build".into(), path));
    }
    let mut rows = String::new();
    for (label, bin) in &tools {
        let mut phases: [Vec<f64>; 5] = Default::default();
        for run in 0..runs + 5 {
            while rx.try_recv().is_ok() {}
            let _ = std::fs::remove_file(&stamp);
            let t0 = now_ns() as i128;
            let mut cmd = Command::new(bin);
            cmd.args(["--redis-url", &url, "--key", "bench:phases", "--"]).args(stamp_cmd(&stamp, None));
            time_once(&mut cmd);
            let exited = now_ns() as i128;
            let (Ok(acquired), Ok(released)) =
                (rx.recv_timeout(Duration::from_secs(2)), rx.recv_timeout(Duration::from_secs(2)))
            else {
                panic!("MONITOR showed no acquire and release");
            };
            if run < 5 {
                continue; // warm-up: page cache, scripts loaded
            }
            let started = read_stamp(&stamp);
            let gaps =
                [acquired - t0, started - acquired, released - started, exited - released, exited - t0];
            for (i, g) in gaps.iter().enumerate() {
                phases[i].push(*g as f64 / 1e6);
            }
        }
        let m: Vec<f64> = phases.iter().map(|p| summary(p.clone()).0).collect();
        rows.push_str(&format!(
            "| {label} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |\n",
            m[0], m[1], m[2], m[3], m[4]
        ));
    }
    drop(monitor);
    // The same command started directly, and under flock: start to its timestamp, then to exit.
    let mut reference = String::new();
    for (label, lock) in [("the command alone", false), ("`flock FILE` + the command", true)] {
        let (mut start, mut rest, mut total) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs + 5 {
            let _ = std::fs::remove_file(&stamp);
            let args = stamp_cmd(&stamp, None);
            let mut cmd = if lock { Command::new("flock") } else { Command::new(&args[0]) };
            if lock {
                cmd.arg(&lockfile).args(&args);
            } else {
                cmd.args(&args[1..]);
            }
            let t0 = now_ns() as i128;
            time_once(&mut cmd);
            let exited = now_ns() as i128;
            if run >= 5 {
                let started = read_stamp(&stamp);
                start.push((started - t0) as f64 / 1e6);
                rest.push((exited - started) as f64 / 1e6);
                total.push((exited - t0) as f64 / 1e6);
            }
        }
        reference.push_str(&format!(
            "| {label} | {:.2} ms | {:.2} ms | {:.2} ms |\n",
            summary(start).0,
            summary(rest).0,
            summary(total).0
        ));
    }
    out.push_str(&format!(
        "## Where the time goes ({runs} runs, medians)\n\nOne run of `redlock-run --key k -- CMD`, \
         where CMD writes the time when it starts and exits. Start-up: from spawning the wrapper to \
         Redis having run the acquire script (exec, dynamic loading, argument parsing, runtime, \
         connection, the request; MONITOR's clock). Acquired → command: the reply, the spawn of \
         the command and its own start. Command → release: the command's exit, reaping it, the \
         request. Release → exit: the reply and the wrapper's exit.\n\n\
         | wrapper | start-up | acquired → command | command → release | release → exit | total |\n\
         |---|---|---|---|---|---|\n{rows}\n\
         | the same CMD | spawn → CMD starts | CMD starts → exit | total |\n|---|---|---|---|\n{reference}\n"
    ));
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

/// One handoff: ms between a holder's command ending and a waiter's command starting.
fn handoff_once(bin: &str, urls: &[String], dir: &tempfile::TempDir) -> f64 {
    let (end, start) = (dir.path().join("end"), dir.path().join("start"));
    let _ = std::fs::remove_file(&end);
    let _ = std::fs::remove_file(&start);
    let mut holder = Command::new(bin)
        .args(url_args(urls))
        .args(["--key", "bench:handoff", "--"])
        .args(stamp_cmd(&end, Some(30)))
        .spawn()
        .expect("holder");
    std::thread::sleep(Duration::from_millis(8));
    let mut waiter = Command::new(bin)
        .args(url_args(urls))
        .args(["--key", "bench:handoff", "--wait", "10s", "--"])
        .args(stamp_cmd(&start, None))
        .spawn()
        .expect("waiter");
    assert!(wait_bounded(&mut holder, Duration::from_secs(10)).success());
    assert!(wait_bounded(&mut waiter, Duration::from_secs(10)).success());
    (read_stamp(&start) - read_stamp(&end)) as f64 / 1e6
}

/// The same handoff between two `flock FILE` runs on one host (flock waits by default).
fn flock_handoff_once(dir: &tempfile::TempDir) -> f64 {
    let (end, start, lock) =
        (dir.path().join("end"), dir.path().join("start"), dir.path().join("flock-handoff"));
    let _ = std::fs::remove_file(&end);
    let _ = std::fs::remove_file(&start);
    let mut holder =
        Command::new("flock").arg(&lock).args(stamp_cmd(&end, Some(30))).spawn().expect("holder");
    std::thread::sleep(Duration::from_millis(8));
    let mut waiter = Command::new("flock").arg(&lock).args(stamp_cmd(&start, None)).spawn().expect("waiter");
    assert!(wait_bounded(&mut holder, Duration::from_secs(10)).success());
    assert!(wait_bounded(&mut waiter, Duration::from_secs(10)).success());
    (read_stamp(&start) - read_stamp(&end)) as f64 / 1e6
}

/// Handoffs of every case interleaved round by round with `flock`'s (A B C flock A B C flock
/// …), so that drift in the machine's load hits them alike; "− flock" is the median of each
/// round's difference to the `flock` handoff of the same round.
fn handoff(single: &[String], quorum: &[String], dir: &tempfile::TempDir, runs: usize, out: &mut String) {
    let static_build = static_bin();
    let mut cases: Vec<(&str, &[String], &str)> = vec![("one Redis", single, bin())];
    if let Some(path) = &static_build {
        cases.push(("one Redis, static build", single, path));
    }
    cases.push(("Redlock, 3 nodes", quorum, bin()));
    let mut gaps: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut flock = Vec::new();
    for _ in 0..runs {
        for (i, (_, urls, bin)) in cases.iter().enumerate() {
            gaps[i].push(handoff_once(bin, urls, dir));
        }
        flock.push(flock_handoff_once(dir));
    }
    let row = |label: &str, gaps: &[f64]| {
        let overlaps = gaps.iter().filter(|g| **g <= 0.0).count();
        let diff: Vec<f64> = gaps.iter().zip(&flock).map(|(g, f)| g - f).collect();
        let (d50, _, _) = summary(diff);
        let (p50, p95, p99) = summary(gaps.to_vec());
        format!(
            "| {label} | {} | {p50:.2} ms | {p95:.2} ms | {p99:.2} ms | {d50:+.2} ms | {overlaps} |\n",
            gaps.len()
        )
    };
    let mut rows = String::new();
    for ((label, _, _), gaps) in cases.iter().zip(&gaps) {
        rows.push_str(&row(label, gaps));
    }
    rows.push_str(&row("`flock FILE` (one host)", &flock));
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
         writing its first (includes the holder's exit and reaping, the release, which hands the lock over, the message, \
         and the spawn and start-up of the next command). Rounds interleave the rows, `flock` last in each; \"− flock\" \
         is the median of each round's difference to that round's `flock` handoff.\n\n\
         | Redis | handoffs | median | p95 | p99 | − flock | overlaps |\n\
         |---|---|---|---|---|---|---|\n{rows}\n\
         The `flock` row is the same handoff between two `flock FILE` runs on one host. For reference, spawning the same command directly until it writes its timestamp takes {spawn_p50:.2} ms \
         (median) on this machine; the lock's own share of the handoff is the difference.\n\n"
    ));
}

/// From SIGKILL of a holding wrapper (its command `sleep` running) to a waiting run's command
/// writing its first timestamp: the guardian kills the group, confirms it dead and releases,
/// and the release hands the lock to the waiter. Beside it, `flock FILE sleep` with its whole
/// group killed (flock's lock lives as long as any process holding the file).
fn crash_once(holder: &mut Command, waiter: &mut Command, start: &Path, group: bool) -> f64 {
    let _ = std::fs::remove_file(start);
    let mut holder = holder.process_group(0).stderr(Stdio::null()).spawn().expect("holder");
    std::thread::sleep(Duration::from_millis(60));
    let mut waiter = waiter.spawn().expect("waiter");
    std::thread::sleep(Duration::from_millis(60));
    let pid = holder.id() as i32;
    let killed = now_ns();
    let target = if group { -pid } else { pid };
    // SAFETY: kill(2) of a process (group) this benchmark started.
    unsafe { libc::kill(target, libc::SIGKILL) };
    let _ = holder.wait();
    assert!(wait_bounded(&mut waiter, Duration::from_secs(40)).success());
    if !group {
        // What the guardian left of the group (nothing, if it did its job).
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    (read_stamp(start) - killed as i128) as f64 / 1e6
}

fn crash(url: &str, quorum: &[String], dir: &tempfile::TempDir, runs: usize, out: &mut String) {
    let start = dir.path().join("start");
    let lock = dir.path().join("flock-crash");
    let mut rows = String::new();
    let mut cases: Vec<(&str, Vec<String>)> = vec![("redlock-run, one Redis", vec![url.to_owned()])];
    cases.push(("redlock-run, Redlock, 3 nodes", quorum.to_vec()));
    for (label, urls) in &cases {
        let mut took = Vec::new();
        for _ in 0..runs {
            let mut holder = Command::new(bin());
            holder.args(url_args(urls)).args(["--key", "bench:crash", "--", "sleep", "100"]);
            let mut waiter = Command::new(bin());
            waiter
                .args(url_args(urls))
                .args(["--key", "bench:crash", "--wait", "60s", "--"])
                .args(stamp_cmd(&start, None));
            took.push(crash_once(&mut holder, &mut waiter, &start, false));
        }
        let (p50, p95, p99) = summary(took);
        rows.push_str(&format!(
            "| {label}: SIGKILL of the wrapper | {runs} | {p50:.2} ms | {p95:.2} ms | {p99:.2} ms |\n"
        ));
    }
    let mut took = Vec::new();
    for _ in 0..runs {
        let mut holder = Command::new("flock");
        holder.arg(&lock).args(["sleep", "100"]);
        let mut waiter = Command::new("flock");
        waiter.arg(&lock).args(stamp_cmd(&start, None));
        took.push(crash_once(&mut holder, &mut waiter, &start, true));
    }
    let (p50, p95, p99) = summary(took);
    rows.push_str(&format!(
        "| `flock FILE sleep`: SIGKILL of its group | {runs} | {p50:.2} ms | {p95:.2} ms | {p99:.2} ms |\n"
    ));
    out.push_str(&format!(
        "## After a crash\n\nFrom SIGKILL of the holder to a waiting run's command writing its first timestamp \
         (default `--ttl 30s`: without the guardian's release the waiter would wait out the lease).\n\n\
         | holder | crashes | median | p95 | p99 |\n|---|---|---|---|---|\n{rows}\n"
    ));
}

fn redis_cost(redis: &RedisServer, out: &mut String) {
    out.push_str("## Redis requests\n\nRequests sent by clients (scripts count once), from `INFO commandstats` deltas.\n\n| scenario | requests | per run |\n|---|---|---|\n");
    let url = redis.url();
    // Load the scripts once, as any long-lived Redis would have them.
    time_once(Command::new(bin()).args(["--redis-url", &url, "--key", "bench:cost", "--", "true"]));
    let before = redis.client_requests();
    let n = 20;
    for _ in 0..n {
        time_once(Command::new(bin()).args(["--redis-url", &url, "--key", "bench:cost", "--", "true"]));
    }
    let used = redis.client_requests() - before;
    out.push_str(&format!(
        "| uncontended run, `-- true` | {used} for {n} runs | {:.1} |\n",
        used as f64 / n as f64
    ));
    let before = redis.client_requests();
    time_once(Command::new(bin()).args([
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
        let mut holder = Command::new(bin())
            .args(["--redis-url", &url, "--key", "bench:herd", "--", "sleep", "0.5"])
            .spawn()
            .expect("holder");
        assert!(wait_until(Duration::from_secs(5), || redis.exists(b"bench:herd")));
        let children: Vec<_> = (0..waiters)
            .map(|_| {
                Command::new(bin())
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
    let mut child = Command::new(bin())
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
                    time_once(Command::new(bin()).args([
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
        tools.push(("redlock-run (this build)".into(), Box::new(move || drain_redlock(bin(), n))));
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
         joined in. With the queue a run costs 4 requests (subscribe, join, the renewal that \
         confirms the lock handed over, release) plus a keep-alive every 0.5 s while it waits, here \
         mostly while the later waiters join (the joining column).\n\n| tool | waiters | joining | drain time | requests per run | inversions |\n\
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
