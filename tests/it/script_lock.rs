//! `eval "$(redlock-run lock …)"`: a lock for the rest of a shell script, guarded as a wrapped
//! command is (README § A lock across a script's steps, docs/GUIDE.md § A script's steps).

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);
/// Far below the TTLs used here (10 s and more): a key gone within this was released, not
/// expired; with room for a loaded machine.
const AT_ONCE: Duration = Duration::from_secs(5);

/// The shells installed here, as a script's interpreter: bash and dash always (Debian), zsh and
/// busybox sh when installed.
fn shells() -> Vec<Vec<&'static str>> {
    let mut found = Vec::new();
    for shell in [&["bash"][..], &["dash"], &["zsh"], &["busybox", "sh"]] {
        let there = Command::new(shell[0])
            .args(&shell[1..])
            .args(["-c", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if there {
            found.push(shell.to_vec());
        } else {
            eprintln!("skipped for {}: not installed", shell.join(" "));
        }
    }
    assert!(found.len() >= 2, "bash and dash are there");
    found
}

/// `body` run by `shell -c` in a process group of its own (as a job of an interactive shell,
/// or `setsid -w`, starts a script), with `$RR` the binary and Redis chosen by the environment.
fn script(shell: &[&str], redis: &RedisServer, body: &str) -> Command {
    let mut cmd = Command::new(shell[0]);
    cmd.args(&shell[1..]).arg("-c").arg(body);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("REDLOCK_") || n == "REDIS_URL") {
            cmd.env_remove(name);
        }
    }
    cmd.env("RR", bin()).env("REDLOCK_REDIS_URL", redis.url()).process_group(0);
    default_signals(&mut cmd);
    cmd
}

/// The holder's pid, from `REDLOCK_HOLDER` (`redlock-run.PID.RANDOM`).
fn holder_pid(holder: &str) -> i32 {
    holder
        .split('.')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("REDLOCK_HOLDER {holder:?}"))
}

/// A value of the `NAME=value` lines `env` printed.
fn var<'a>(env: &'a str, name: &str) -> &'a str {
    env.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).unwrap_or_else(|| panic!("{name} in {env}"))
}

#[test]
fn a_script_holds_the_lock_until_it_exits_in_every_shell() {
    let redis = RedisServer::start();
    for shell in shells() {
        let dir = tmp();
        let env_file = file(&dir, "env");
        let go = file(&dir, "go");
        let body = r#"eval "$("$RR" lock --key 'lock:it'\''s' --key lock:two --ttl 20s)" || exit
            env | grep '^REDLOCK_' > "$ENV_FILE"
            while [ ! -e "$GO" ]; do sleep 0.01; done"#;
        let mut s = script(&shell, &redis, body).env("ENV_FILE", &env_file).env("GO", &go).start();
        let env = read_when_present(&env_file, Duration::from_secs(10));
        let name = shell.join(" ");
        assert_eq!(var(&env, "REDLOCK_LOCK_KEY"), "lock:it's", "{name}");
        assert_eq!(var(&env, "REDLOCK_KEYS"), "lock:it's lock:two", "{name}");
        assert_eq!(var(&env, "REDLOCK_TTL_MS"), "20000", "{name}");
        let token = var(&env, "REDLOCK_TOKEN");
        assert_eq!(
            redis.get(b"lock:it's").as_deref(),
            Some(token.as_bytes()),
            "{name}: the key holds the token"
        );
        let fences: Vec<&str> = var(&env, "REDLOCK_FENCES").split(' ').collect();
        assert_eq!(fences.len(), 2, "{name}");
        assert_eq!(fences[0], var(&env, "REDLOCK_FENCE"), "{name}");
        // The value, and so `status`, names the script, not its holder.
        let status = run(
            wrapper().args(["status", "--json", "--redis-url", &redis.url(), "--key", "lock:it's"]),
            LIMIT,
        );
        assert!(
            status.stdout.windows(6).any(|w| w == b"\"pid\":"),
            "{}",
            String::from_utf8_lossy(&status.stdout)
        );
        let json = String::from_utf8_lossy(&status.stdout);
        assert!(json.contains(&format!("\"pid\":{}", s.id())), "{name}: status names the script: {json}");
        let holder = holder_pid(var(&env, "REDLOCK_HOLDER"));
        assert!(process_alive(holder), "{name}: the holder runs");
        std::fs::write(&go, "").unwrap();
        assert!(wait_bounded(&mut s, LIMIT).success(), "{name}");
        let exited = Instant::now();
        assert!(
            wait_until(AT_ONCE, || !redis.exists(b"lock:it's") && !redis.exists(b"lock:two")),
            "{name}: released once the script exited"
        );
        eprintln!("{name}: released {:?} after the script's exit", exited.elapsed());
        assert!(wait_until(AT_ONCE, || !process_alive(holder)), "{name}: the holder is gone");
    }
}

/// However the script ends — `exit`, `set -e`, a signal, SIGKILL — the lock goes back at once.
#[test]
fn the_lock_is_released_however_the_script_ends() {
    let redis = RedisServer::start();
    for shell in &shells()[..2] {
        for (how, tail, signal) in [
            ("exit 3", "exit 3", None),
            ("set -e", "set -e; false; sleep 100", None),
            ("SIGTERM", "sleep 100", Some(Signal::SIGTERM)),
            ("SIGKILL", "sleep 100", Some(Signal::SIGKILL)),
        ] {
            let dir = tmp();
            let held = file(&dir, "held");
            let body = format!(
                r#"eval "$("$RR" lock --key lock:ends --ttl 20s)" || exit
                "$RR" status --key lock:ends > /dev/null && echo held > "$HELD"
                {tail}"#
            );
            let mut s = script(shell, &redis, &body).env("HELD", &held).start();
            assert_eq!(read_when_present(&held, Duration::from_secs(10)), "held\n", "{how}");
            if let Some(sig) = signal {
                kill(Pid::from_raw(s.id() as i32), sig).unwrap();
            }
            let status = wait_bounded(&mut s, LIMIT);
            if signal.is_none() {
                assert_ne!(status.code(), Some(0), "{how}");
            }
            assert!(
                wait_until(AT_ONCE, || !redis.exists(b"lock:ends")),
                "{}: {how}: released once the script ended",
                shell.join(" ")
            );
            // Whatever was left of the script's group was stopped with it.
            assert!(wait_until(AT_ONCE, || group_members(s.id() as i32).is_empty()), "{how}");
        }
    }
}

/// Two scripts on one key, over 50 rounds: never both inside (an atomic `mkdir` says so), and
/// the fences they were given only grow.
#[test]
fn two_scripts_on_one_key_never_overlap() {
    let redis = RedisServer::start();
    let dir = tmp();
    let inside = file(&dir, "inside");
    let log = file(&dir, "log");
    let shells = shells();
    // Each round is a script of its own; half of them end with `unlock`, half with their exit.
    let round = r#"eval "$("$RR" lock --key lock:rounds --ttl 10s --wait 20s)" || exit
        mkdir "$INSIDE" || echo overlap >> "$LOG"
        echo "fence $REDLOCK_FENCE" >> "$LOG"
        sleep 0.01
        rmdir "$INSIDE"
        if [ "$UNLOCK" = yes ]; then "$RR" unlock || echo "unlock $?" >> "$LOG"; fi"#;
    let mut children = Vec::new();
    for (n, shell) in shells.iter().take(2).enumerate() {
        let redis_url = redis.url();
        let (shell, inside, log) = (shell.clone(), inside.clone(), log.clone());
        let round = round.to_owned();
        children.push(std::thread::spawn(move || {
            for i in 0..25 {
                let mut cmd = Command::new(shell[0]);
                cmd.args(&shell[1..]).arg("-c").arg(&round);
                for (name, _) in std::env::vars_os() {
                    if name.to_str().is_some_and(|n| n.starts_with("REDLOCK_")) {
                        cmd.env_remove(name);
                    }
                }
                cmd.env("RR", bin())
                    .env("REDLOCK_REDIS_URL", &redis_url)
                    .env("INSIDE", &inside)
                    .env("LOG", &log)
                    .env("UNLOCK", if (i + n) % 2 == 0 { "yes" } else { "no" })
                    .process_group(0);
                let r = run(&mut cmd, LIMIT);
                assert_eq!(r.code, 0, "{}: round {i}: {}", shell.join(" "), r.stderr);
            }
        }));
    }
    for c in children {
        c.join().unwrap();
    }
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains("overlap") && !log.contains("unlock "), "{log}");
    let fences: Vec<u64> = log.lines().filter_map(|l| l.strip_prefix("fence ")?.parse().ok()).collect();
    assert_eq!(fences.len(), 50, "{log}");
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences grow: {fences:?}");
}

/// A lost lock stops the script's group (its `trap … TERM` runs) at once, not at its next
/// renewal (10 s away at the default TTL): deleted by `release --force`, or gone with a Redis
/// restarted empty.
#[test]
fn a_lost_lock_stops_the_script_before_the_key_could_expire() {
    for restart in [false, true] {
        let mut redis = RedisServer::start();
        let dir = tmp();
        let (held, trapped) = (file(&dir, "held"), file(&dir, "trapped"));
        let body = r#"trap 'echo term > "$TRAPPED"; exit 7' TERM
            eval "$("$RR" lock --key lock:lost)" || exit
            echo > "$HELD"
            sleep 100 & wait"#;
        let mut s = script(&["bash"], &redis, body)
            .env("HELD", &held)
            .env("TRAPPED", &trapped)
            .stderr(Stdio::piped())
            .start();
        read_when_present(&held, Duration::from_secs(10));
        // The holder's watch begins 25 ms after the lock is taken (300 ms of sleep were not
        // always enough on a loaded machine).
        assert!(wait_until(Duration::from_secs(10), || redis.tracking_items() > 0), "the watch began");
        let lost = Instant::now();
        if restart {
            redis.restart_empty();
        } else {
            let url = redis.url();
            let r =
                run(wrapper().args(["release", "--force", "--redis-url", &url, "--key", "lock:lost"]), LIMIT);
            assert_eq!(r.code, 0, "{}", r.stderr);
        }
        let out = wait_output(&mut s, LIMIT);
        let stopped = lost.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(7), "restart {restart}: the trap ran: {stderr}");
        assert_eq!(std::fs::read_to_string(&trapped).unwrap(), "term\n");
        // At once: long before the next renewal (10 s), with room for a loaded machine.
        assert!(
            stopped < Duration::from_secs(3),
            "restart {restart}: stopped after {stopped:?}, not at once"
        );
        assert!(stderr.contains("lock lost"), "{stderr}");
    }
}

#[test]
fn unlock_releases_at_once_and_the_script_goes_on() {
    let redis = RedisServer::start();
    let dir = tmp();
    let log = file(&dir, "log");
    let body = r#"eval "$("$RR" lock --key lock:steps --ttl 20s)" || exit
        again=$("$RR" lock --key lock:steps 2>"$LOG.again"); echo "again $? $again" >> "$LOG"
        "$RR" unlock; echo "unlock $?" >> "$LOG"
        "$RR" status --key lock:steps > /dev/null; echo "status $?" >> "$LOG"
        "$RR" unlock 2>"$LOG.twice"; echo "twice $?" >> "$LOG"
        eval "$("$RR" lock --key lock:steps --ttl 20s)" || exit
        "$RR" status --key lock:steps > /dev/null; echo "relocked $?" >> "$LOG""#;
    let r = run(script(&["bash"], &redis, body).env("LOG", &log), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(log_text, "again 64 (exit 64)\nunlock 0\nstatus 1\ntwice 125\nrelocked 0\n");
    let again = std::fs::read_to_string(format!("{}.again", log.display())).unwrap();
    assert!(
        again.contains("already holds \"lock:steps\"") && again.contains("REDLOCK_HOLDER=redlock-run."),
        "{again}"
    );
    let twice = std::fs::read_to_string(format!("{}.twice", log.display())).unwrap();
    assert!(twice.contains("is gone"), "{twice}");
    assert!(wait_until(AT_ONCE, || !redis.exists(b"lock:steps")), "released at the script's exit");
    // Outside a script that took a lock, there is nothing to unlock.
    let r = run(wrapper().arg("unlock"), LIMIT);
    assert_eq!(r.code, 64, "{}", r.stderr);
    assert!(r.stderr.contains("REDLOCK_HOLDER is not set"), "{}", r.stderr);
}

/// A holder that goes away while `unlock` talks to it (it was exiting after an earlier
/// `unlock`: it took the connection, then closed it unread) is gone, as one that no longer
/// listens is: 125, not an internal error.
#[test]
fn a_holder_that_closes_the_connection_unread_is_gone() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("redlock-run-test.{}.closing", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let closing = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        // One byte of the request read, the rest left: closed so, the connection is reset.
        stream.set_read_timeout(Some(LIMIT)).unwrap();
        std::io::Read::read_exact(&mut stream, &mut [0u8; 1]).expect("unlock sent its request");
    });
    let r = run(wrapper().arg("unlock").env("REDLOCK_HOLDER", &name), LIMIT);
    closing.join().unwrap();
    assert_eq!(r.code, 125, "{}", r.stderr);
    assert!(r.stderr.contains("is gone"), "{}", r.stderr);
}

/// A lock that cannot be taken prints only `(exit N)`: nothing is assigned, `eval` fails with
/// the run's status, and `|| exit` ends the script before its steps.
#[test]
fn a_failed_lock_ends_the_script_with_the_runs_status() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let mut holder = hold_until(&redis, ["--key", "lock:busy"], &go);
    assert!(wait_until(LIMIT, || redis.exists(b"lock:busy")), "held by another run");
    for shell in shells() {
        let body = r#"out=$("$RR" lock --key lock:busy); echo "$? [$out]"
            out=$("$RR" lock --key lock:busy --busy-exit-code 1 -q); echo "$? [$out]"
            eval "$("$RR" lock --key lock:busy)" || exit
            echo "not reached""#;
        let r = run(&mut script(&shell, &redis, body), LIMIT);
        let stdout = String::from_utf8_lossy(&r.stdout);
        assert_eq!(r.code, 75, "{}: {stdout} {}", shell.join(" "), r.stderr);
        assert_eq!(stdout, "75 [(exit 75)]\n1 [(exit 1)]\n", "{}", shell.join(" "));
        assert!(r.stderr.contains("busy"), "{}", r.stderr);
        // The guide's way to end with 0, and print nothing, when another host holds the lock.
        let guide = include_str!("../../docs/GUIDE.md");
        let quiet = guide.lines().find(|l| l.contains("|| { s=$?;")).expect("the guide's line").trim();
        let body = format!(
            "{}\necho not reached",
            quiet.replace("redlock-run ", "\"$RR\" ").replace("lock:report", "lock:busy")
        );
        let r = run(&mut script(&shell, &redis, &body), LIMIT);
        assert_eq!(
            (r.code, r.stdout.as_slice(), r.stderr.as_str()),
            (0, &b""[..], ""),
            "{}",
            shell.join(" ")
        );
    }
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut holder, LIMIT).success());
}

#[test]
fn lock_refuses_what_it_cannot_guard() {
    let redis = RedisServer::start();
    // Not under `$(…)`: stdout is no pipe, and nothing is printed.
    let url = redis.url();
    let mut lone = wrapper();
    lone.args(["lock", "--redis-url", &url, "--key", "lock:no"]);
    let mut lone = lone.stdout(Stdio::null()).stderr(Stdio::piped()).start();
    let out = wait_output(&mut lone, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("its output is not a pipe"), "{stderr}");
    // Piped to another process: the parent does not read it.
    let r = run(
        &mut script(&["bash"], &redis, r#""$RR" lock --key lock:no | cat; exit "${PIPESTATUS[0]}""#),
        LIMIT,
    );
    assert_eq!((r.code, r.stdout.as_slice()), (64, &b"(exit 64)\n"[..]), "{}", r.stderr);
    assert!(r.stderr.contains("does not read them"), "{}", r.stderr);
    // Options that a script cannot honour.
    for flags in [
        &["--idempotency-key", "x"][..],
        &["--no-new-privs"],
        &["--busy-exit-code", "0"],
        &["--metrics-file", "m.prom"],
    ] {
        let body = format!(r#"eval "$("$RR" lock --key lock:no {})" || exit; echo ran"#, flags.join(" "));
        let r = run(&mut script(&["bash"], &redis, &body), LIMIT);
        assert_eq!(r.code, 64, "{flags:?}: {}", r.stderr);
        assert!(r.stderr.contains(flags[0]), "{}", r.stderr);
    }
    assert!(!redis.exists(b"lock:no"));
}

/// A parent that reads `lock`'s output when `lock` starts but passes the pipe on before the lock
/// is taken (bash holds the read end of `lock | cat` until it has forked `cat`) is found out
/// before anything is printed: the holder lets go of the script, which runs on, and releases.
#[test]
fn a_reader_that_passes_the_pipe_on_is_found_before_the_assignments() {
    let redis = RedisServer::start();
    // Busy for a while, so that the pipe changes hands while `lock` waits.
    let _: () = redis.cmd(&[b"SET", b"lock:moved", b"other", b"PX", b"1500"]);
    // lock has checked its reader once it has forked its holder.
    let r = pipe_handed_on(&redis, "lock:moved --wait 20s", "time.sleep(0.01)", "");
    assert!(r.stderr.contains("does not read them"), "{}", r.stderr);
    assert!(!redis.exists(b"lock:moved"), "released");
}

/// A python script runs `lock ARGS` with its stdout on a pipe, waits until `lock` has forked
/// its holder (`waiting` each time it looks), runs `then`, and hands the pipe's read end to
/// `cat` by a fork (as a shell does for `lock | cat`). `lock` must refuse and the script run on.
fn pipe_handed_on(redis: &RedisServer, args: &str, waiting: &str, then: &str) -> Run {
    let python = format!(
        r#"
import os, subprocess, sys, time
r, w = os.pipe()
lock = subprocess.Popen([os.environ["RR"], "lock", "--key", *"{args}".split()], stdout=w)
os.close(w)
deadline = time.monotonic() + 20
while not open(f"/proc/{{lock.pid}}/task/{{lock.pid}}/children").read().strip():
    assert time.monotonic() < deadline, "no holder"
    {waiting}
{then}
cat = os.fork()
if cat == 0:
    os.dup2(r, 0)
    os.execvp("cat", ["cat"])
os.close(r)
code = lock.wait()
os.waitpid(cat, 0)
print("script ran on")
sys.exit(code)
"#
    );
    let r = run(&mut script(&["python3"], redis, &python), LIMIT);
    assert_eq!(
        (r.code, String::from_utf8_lossy(&r.stdout).as_ref()),
        (64, "(exit 64)\nscript ran on\n"),
        "{}",
        r.stderr
    );
    r
}

/// A reader still running (not waiting on the pipe) when the lock is taken may be about to pass
/// the pipe on, as a shell that has yet to fork the other end of `lock | cat` is: `lock` waits
/// until it sleeps, then looks again.
#[test]
fn a_reader_that_is_still_running_is_looked_at_again_once_it_waits() {
    let redis = RedisServer::start();
    // Busy, never asleep, until well after the lock is taken; then the pipe goes to cat (a
    // fork: Popen would sleep until cat's exec, holding the pipe).
    let busy = "busy_until = time.monotonic() + 0.5\nwhile time.monotonic() < busy_until:\n    pass";
    pipe_handed_on(&redis, "lock:running", "pass", busy);
    assert!(!redis.exists(b"lock:running"), "released");
}

/// Between the script and `lock` only subshells of the script may stand (`$(lock 2>>log)`): a
/// program of its own that `lock` runs under (`sh -c`, `timeout`, another script) is not the
/// script, and the shell reading its output never asked for the lock.
#[test]
fn only_subshells_may_stand_between_the_script_and_lock() {
    let redis = RedisServer::start();
    for between in
        [r#"sh -c '"$RR" lock --key lock:between; true'"#, r#"timeout 20 "$RR" lock --key lock:between"#]
    {
        let body = format!(
            r#"out=$({between}); echo "status $? $out"; "$RR" status --key lock:between >/dev/null; echo "held $?""#
        );
        let r = run(&mut script(&["bash"], &redis, &body), LIMIT);
        let stdout = String::from_utf8_lossy(&r.stdout);
        assert!(stdout.ends_with("(exit 64)\nheld 1\n"), "{between}: {stdout}{}", r.stderr);
        assert!(r.stderr.contains("not a subshell"), "{between}: {}", r.stderr);
    }
    // Subshells are: the script is the shell above them.
    let dir = tmp();
    let body = r#"eval "$( ( "$RR" lock --key lock:between 2>>"$LOG" ) )" || exit; "$RR" status --key lock:between >/dev/null; echo "held $?""#;
    let r = run(script(&["bash"], &redis, body).env("LOG", file(&dir, "log")), LIMIT);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "held 0\n", "{}", r.stderr);
}

/// An interactive shell is refused (a lost lock would end the session) unless
/// `--allow-interactive`.
#[test]
fn an_interactive_shell_needs_allow_interactive() {
    let redis = RedisServer::start();
    let dir = tmp();
    let out = file(&dir, "out");
    // busybox's shell is `busybox sh`: the applet's name is no script's.
    let mut interactive = vec![vec!["bash", "--norc", "--noprofile", "-i"]];
    interactive.extend(shells().into_iter().filter(|s| s[0] == "busybox").map(|s| [s, vec!["-i"]].concat()));
    let cases = [("", "64\n"), ("--allow-interactive", "0 held\n")];
    for ((flag, expected), argv) in cases.iter().flat_map(|c| interactive.iter().map(move |a| (c, a))) {
        let mut shell = Command::new(argv[0]);
        shell.args(&argv[1..]).env("RR", bin()).env("REDLOCK_REDIS_URL", redis.url());
        let (mut child, mut master) = spawn_on_pty(&mut shell);
        use std::io::Write;
        let line = format!(
            "eval \"$(\"$RR\" lock --key lock:prompt {flag})\"; s=$?; echo \"$s${{REDLOCK_TOKEN:+ held}}\" > {}; exit\n",
            out.display()
        );
        master.write_all(line.as_bytes()).unwrap();
        let text = read_when_present(&out, Duration::from_secs(10));
        assert_eq!(&text, expected, "{argv:?} {flag:?}");
        let _ = std::fs::remove_file(&out);
        wait_bounded(&mut child, LIMIT);
        // Before the shell's fixture is dropped, which would kill the holder that releases.
        assert!(wait_until(AT_ONCE, || !redis.exists(b"lock:prompt")), "released when the shell exited");
    }
}

/// A holder killed (SIGKILL, the OOM killer) takes the script's group with it, through its
/// guardian, and the lock goes back at once.
#[test]
fn a_killed_holder_stops_the_script_and_frees_the_lock() {
    let redis = RedisServer::start();
    let dir = tmp();
    let holder_file = file(&dir, "holder");
    let body = r#"eval "$("$RR" lock --key lock:killed --ttl 20s)" || exit
        echo "$REDLOCK_HOLDER" > "$HOLDER_FILE"
        sleep 100"#;
    let mut s =
        script(&["bash"], &redis, body).env("HOLDER_FILE", &holder_file).stderr(Stdio::piped()).start();
    let holder = holder_pid(read_when_present(&holder_file, Duration::from_secs(10)).trim());
    kill(Pid::from_raw(holder), Signal::SIGKILL).unwrap();
    let out = wait_output(&mut s, LIMIT);
    assert_eq!(out.status.signal(), Some(9), "the script's group was killed");
    assert!(wait_until(AT_ONCE, || !redis.exists(b"lock:killed")), "released at once");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is released now") && !stderr.contains("not-owner"), "one story: {stderr}");
}

/// A holder stopped alone (SIGSTOP) cannot renew: its guardian kills the script's group
/// before the lease could expire, so the next holder never runs beside it.
#[test]
fn a_stopped_holder_cannot_let_its_script_outlive_the_lease() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (holder_file, ticks) = (file(&dir, "holder"), file(&dir, "ticks"));
    let body = r#"eval "$("$RR" lock --key lock:stopped --ttl 2s)" || exit
        echo "$REDLOCK_HOLDER" > "$HOLDER_FILE"
        while :; do date +%s%N >> "$TICKS"; sleep 0.02; done"#;
    let mut s = script(&["bash"], &redis, body)
        .env("HOLDER_FILE", &holder_file)
        .env("TICKS", &ticks)
        .stderr(Stdio::null())
        .start();
    let holder = holder_pid(read_when_present(&holder_file, Duration::from_secs(10)).trim());
    kill(Pid::from_raw(holder), Signal::SIGSTOP).unwrap();
    let mut next = script(
        &["bash"],
        &redis,
        r#"eval "$("$RR" lock --key lock:stopped --wait 10s)" || exit; date +%s%N"#,
    );
    let r = run(next.stderr(Stdio::null()), LIMIT);
    kill(Pid::from_raw(holder), Signal::SIGCONT).unwrap();
    assert_eq!(r.code, 0);
    let entered: u64 = String::from_utf8_lossy(&r.stdout).trim().parse().unwrap();
    let last: u64 =
        std::fs::read_to_string(&ticks).unwrap().lines().filter_map(|l| l.parse().ok()).max().unwrap();
    assert!(last < entered, "the stopped holder's script ran beside the next holder");
    wait_bounded(&mut s, LIMIT);
}

/// A signal to `lock` itself while it waits ends it with 128+N, and the script does not go on.
#[test]
fn a_signal_to_a_waiting_lock_ends_the_script() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let mut other = hold_until(&redis, ["--key", "lock:signalled"], &go);
    assert!(wait_until(LIMIT, || redis.exists(b"lock:signalled")), "held by another run");
    for shell in &shells()[..2] {
        // SIGTERM to `lock` alone (its holder is not in the signal's way): passed on.
        let body = r#"eval "$("$RR" lock --key lock:signalled --wait forever)" || exit; echo "not reached""#;
        let mut s = script(shell, &redis, body).stdout(Stdio::piped()).stderr(Stdio::piped()).start();
        let script_pid = s.id() as i32;
        let mut pid = None;
        assert!(wait_until(Duration::from_secs(10), || {
            pid = children_of(script_pid).into_iter().find(|&p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.windows(5).any(|w| w == b"lock\0"))
            });
            pid.is_some() && redis.cmd::<u64>(&[b"ZCARD", b"{lock:signalled}:queue"]) == 1
        }));
        kill(Pid::from_raw(pid.unwrap()), Signal::SIGTERM).unwrap();
        let out = wait_output(&mut s, LIMIT);
        assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(143), &b""[..]), "{shell:?}: {out:?}");
        assert_eq!(redis.cmd::<u64>(&[b"ZCARD", b"{lock:signalled}:queue"]), 0, "nothing left waiting");
    }
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut other, LIMIT).success());
}

/// Whatever stops a `lock` that was meant (a typo, options before it, `--help` under eval),
/// the script does not go on.
#[test]
fn a_mistaken_lock_line_ends_the_script() {
    let redis = RedisServer::start();
    for line in [
        "lokc --key lock:m",
        "--key lock:m lock",
        "--ttl 1m lock --key lock:m",
        "lock --help",
        "lock --kye lock:m",
    ] {
        let body = format!(r#"eval "$("$RR" {line})" || exit; echo "not reached""#);
        let r = run(&mut script(&["bash"], &redis, &body), LIMIT);
        assert_eq!((r.code, r.stdout.as_slice()), (64, &b""[..]), "{line}: {}", r.stderr);
    }
    // The guide's fail-closed form ends the script even when redlock-run cannot run at all.
    let guide = include_str!("../../docs/GUIDE.md");
    let at = guide.find("    lock=$(redlock-run lock").expect("the guide's fail-closed form");
    let form: Vec<&str> = guide[at..].lines().take(2).map(str::trim).collect();
    for (rr, expected) in [(bin(), 0), ("/nonexistent/redlock-run", 127)] {
        let body = format!("{}\n\"$RR\" status --key lock:backup > /dev/null", form.join("\n"))
            .replace("redlock-run ", "\"$RR\" ");
        let r = run(script(&["sh"], &redis, &body).env("RR", rr), LIMIT);
        assert_eq!(r.code, expected, "{rr}: {}", r.stderr);
    }
    // Outside eval, help is help.
    let help = run(&mut script(&["sh"], &redis, r#""$RR" lock --help | cat"#), LIMIT);
    assert_eq!(help.code, 0);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Hold the lock for the rest of a shell script"));
    assert!(!redis.exists(b"lock:m"));
}

/// Another user cannot unlock a script's lock: 77, and the lock stays.
#[test]
fn another_user_cannot_unlock() {
    if !nix::unistd::geteuid().is_root() {
        return eprintln!("skipped: needs root to run unlock as nobody");
    }
    let redis = RedisServer::start();
    let body = r#"eval "$("$RR" lock --key lock:mine)" || exit
        setpriv --reuid 65534 --regid 65534 --clear-groups "$RR" unlock; echo "nobody $?"
        "$RR" status --key lock:mine > /dev/null; echo "held $?""#;
    let r = run(&mut script(&["bash"], &redis, body), LIMIT);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "nobody 77\nheld 0\n", "{}", r.stderr);
    assert!(r.stderr.contains("or root may unlock it"), "{}", r.stderr);
}

/// The holder lives as long as its script: no password in its arguments or environment.
#[test]
fn no_password_in_the_holders_arguments_or_environment() {
    let redis = RedisServer::start();
    redis.cmd::<()>(&[b"CONFIG", b"SET", b"requirepass", b"S3cretPw"]);
    let dir = tmp();
    let holder_file = file(&dir, "holder");
    let go = file(&dir, "go");
    let url_with_password = redis.url().replacen("redis://", "redis://:S3cretPw@", 1);
    for (url_flag, password_var) in [(url_with_password.as_str(), None), ("", Some("S3cretPw"))] {
        let body = format!(
            r#"eval "$("$RR" lock --key lock:secret {})" || exit
            echo "$REDLOCK_HOLDER" > "$HOLDER_FILE"
            while [ ! -e "$GO" ]; do sleep 0.01; done"#,
            if url_flag.is_empty() { String::new() } else { format!("--redis-url {url_flag}") }
        );
        let mut cmd = script(&["bash"], &redis, &body);
        cmd.env("HOLDER_FILE", &holder_file).env("GO", &go);
        if let Some(pw) = password_var {
            cmd.env("REDLOCK_PASSWORD", pw);
        }
        let mut s = cmd.start();
        let holder = holder_pid(read_when_present(&holder_file, Duration::from_secs(10)).trim());
        for what in ["cmdline", "environ"] {
            let bytes = std::fs::read(format!("/proc/{holder}/{what}")).unwrap();
            assert!(
                !bytes.windows(8).any(|w| w == b"S3cretPw"),
                "{what}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        let cmdline = std::fs::read(format!("/proc/{holder}/cmdline")).unwrap();
        assert!(cmdline.starts_with(b"redlock-run\0lock"), "{}", String::from_utf8_lossy(&cmdline));
        std::fs::write(&go, "").unwrap();
        assert!(wait_bounded(&mut s, LIMIT).success());
        // The holder releases once it sees the script gone; the next case's `lock` does not
        // wait (it found the lock still held on a loaded machine).
        let mut conn = redis::Client::open(url_with_password.as_str()).unwrap().get_connection().unwrap();
        let released = wait_until(Duration::from_secs(10), || {
            !redis::cmd("EXISTS").arg("lock:secret").query::<bool>(&mut conn).unwrap()
        });
        assert!(released, "the holder released");
        std::fs::remove_file(&go).unwrap();
        std::fs::remove_file(&holder_file).unwrap();
    }
}

/// A script that dies while its `lock` waits: the wait ends with it, and the lock is never
/// taken for a script that is gone.
#[test]
fn a_script_that_dies_while_waiting_ends_the_wait() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let mut other = hold_until(&redis, ["--key", "lock:waited"], &go);
    assert!(wait_until(LIMIT, || redis.exists(b"lock:waited")), "held by another run");
    let body = r#"eval "$("$RR" lock --key lock:waited --wait forever)" || exit; sleep 100"#;
    let mut s = script(&["bash"], &redis, body).start();
    let queued = || redis.cmd::<u64>(&[b"ZCARD", b"{lock:waited}:queue"]) == 1;
    assert!(wait_until(Duration::from_secs(10), queued), "the script's lock waits in the queue");
    kill(Pid::from_raw(s.id() as i32), Signal::SIGKILL).unwrap();
    wait_bounded(&mut s, LIMIT);
    assert!(
        wait_until(AT_ONCE, || redis.cmd::<u64>(&[b"ZCARD", b"{lock:waited}:queue"]) == 0),
        "the wait ended with the script"
    );
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut other, LIMIT).success());
    assert!(!wait_until(Duration::from_millis(500), || redis.exists(b"lock:waited")), "nobody took it");
}

/// The processes whose parent is `parent`, from /proc.
fn children_of(parent: i32) -> Vec<i32> {
    let entries = std::fs::read_dir("/proc").unwrap().flatten();
    entries
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid: i32 = stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// The script's exit reaches its parent a moment before its holder has released: the next
/// run on the host, even without `--wait`, waits that moment out instead of finding the lock
/// busy (a holder of this host that has ended is releasing). The moment is stretched here by
/// stopping the holder until the next run has found the lock held.
#[test]
fn the_next_script_waits_for_the_release_of_one_that_ended() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (holder_file, go) = (file(&dir, "holder"), file(&dir, "go"));
    let body = r#"eval "$("$RR" lock --key lock:next --ttl 20s)" || exit
        echo "$REDLOCK_HOLDER" > "$HOLDER_FILE"
        while [ ! -e "$GO" ]; do sleep 0.01; done"#;
    let mut first = script(&["sh"], &redis, body).env("HOLDER_FILE", &holder_file).env("GO", &go).start();
    let holder = Pid::from_raw(holder_pid(read_when_present(&holder_file, Duration::from_secs(10)).trim()));
    kill(holder, Signal::SIGSTOP).unwrap();
    std::fs::write(&go, "").unwrap();
    assert!(wait_bounded(&mut first, LIMIT).success());
    let attempts = redis.calls("evalsha");
    let mut next = script(&["sh"], &redis, r#"eval "$("$RR" lock --key lock:next)" || exit"#)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    // Continued once the next run has found the lock held (its first attempt): it waits a
    // bounded moment for the release, which a fixed 100 ms plus a loaded machine's wake-up of
    // the holder outlasted.
    assert!(wait_until(Duration::from_secs(10), || redis.calls("evalsha") > attempts), "it tried");
    kill(holder, Signal::SIGCONT).unwrap();
    let out = wait_output(&mut next, LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A script's lock carries `--note` as a run's does: its holder's value names it.
#[test]
fn a_script_lock_carries_its_note() {
    let redis = RedisServer::start();
    let body = r#"eval "$(REDLOCK_NOTE='step 2' "$RR" lock --key lock:noted)" || exit
        "$RR" status --key lock:noted"#;
    let r = run(&mut script(&["sh"], &redis, body), LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let status = String::from_utf8_lossy(&r.stdout);
    assert!(status.contains("note \"step 2\")"), "{status}");
}

/// A step that a CI runner starts as a plain child (`bash step.sh` from a shell that leads the
/// group, as GitHub Actions' runner does) holds the lock as itself and its descendants: a lost
/// lock and `--max-runtime` stop the step and its children, never the shell that started it,
/// which goes on.
#[test]
fn a_step_that_does_not_lead_its_group_is_stopped_alone() {
    let redis = RedisServer::start();
    stop_a_step(&redis, "lost", "--ttl 2s", 143);
    stop_a_step(&redis, "max-runtime", "--ttl 20s --max-runtime 1s", 143);
}

/// The same through the holder's guardian: when the holder is killed (and the lock released
/// at once), and when it is stopped and cannot stop the step by the lease deadline.
#[test]
fn the_guardian_stops_a_step_that_does_not_lead_its_group() {
    let redis = RedisServer::start();
    stop_a_step(&redis, "killed", "--ttl 20s", 137);
    stop_a_step(&redis, "stopped", "--ttl 2s", 137);
}

/// `bash step.sh; echo "after $?"` where step.sh takes the lock with `flags`, starts a
/// background and a foreground child, and is stopped `how`: the step and both children are
/// gone, and the outer shell printed `after STATUS`.
fn stop_a_step(redis: &RedisServer, how: &str, flags: &str, status: i32) {
    let dir = tmp();
    let (step, held) = (file(&dir, "step.sh"), file(&dir, "held"));
    let key = format!("lock:step-{how}");
    let body = format!(
        r#"eval "$("$RR" lock --key {key} {flags} -v)" || exit
        sleep 100 &
        echo "$$ ${{REDLOCK_HOLDER#*.}}" > "$HELD"
        sleep 100"#
    );
    std::fs::write(&step, body).unwrap();
    let mut s = script(&["bash"], redis, r#"bash "$STEP"; echo "after $?""#)
        .env("STEP", &step)
        .env("HELD", &held)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .start();
    let text = read_when_present(&held, Duration::from_secs(10));
    let pids: Vec<i32> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap())
        .collect();
    let (step_pid, holder) = (pids[0], Pid::from_raw(pids[1]));
    assert!(wait_until(Duration::from_secs(10), || children_of(step_pid).len() >= 2), "{how}");
    let mut stopped = children_of(step_pid);
    stopped.push(step_pid);
    let status_line =
        run(wrapper().args(["status", "--json", "--redis-url", &redis.url(), "--key", &key]), LIMIT);
    let json = String::from_utf8_lossy(&status_line.stdout);
    assert!(json.contains(&format!("\"pid\":{step_pid}")), "{how}: held for the step: {json}");
    match how {
        "lost" => {
            assert!(wait_until(Duration::from_secs(10), || redis.tracking_items() > 0), "the watch began");
            let _: () = redis.cmd(&[b"SET", key.as_bytes(), b"the-next-holder", b"PX", b"60000"]);
        }
        "killed" => kill(holder, Signal::SIGKILL).unwrap(),
        "stopped" => kill(holder, Signal::SIGSTOP).unwrap(),
        _ => {}
    }
    if how == "stopped" {
        // The stopped holder keeps the step's stderr open: continued once its guardian acted.
        assert!(wait_until(LIMIT, || !process_alive(step_pid)), "the guardian stopped the step");
        kill(holder, Signal::SIGCONT).unwrap();
    }
    let out = wait_output(&mut s, LIMIT);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let after = format!("after {status}\n");
    assert_eq!((out.status.code(), stdout.as_ref()), (Some(0), after.as_str()), "{how}: {stderr}");
    assert!(stderr.contains("does not lead its process group"), "{how}: {stderr}");
    for pid in stopped {
        assert!(wait_until(AT_ONCE, || !process_alive(pid)), "{how}: {pid} of the step was stopped");
    }
    if how == "killed" {
        assert!(wait_until(AT_ONCE, || !redis.exists(key.as_bytes())), "released at once: {stderr}");
    }
}

/// A step that ends leaves none of the descendants its holder saw running: they get SIGTERM,
/// as the rest of a command's group does, and the lock goes back.
#[test]
fn a_step_that_ends_takes_its_known_children_with_it() {
    let redis = RedisServer::start();
    let dir = tmp();
    let (step, held) = (file(&dir, "step.sh"), file(&dir, "held"));
    let body = r#"eval "$("$RR" lock --key lock:ends-step --ttl 20s)" || exit
        sleep 100 &
        echo "$!" > "$HELD"
        sleep 0.7"#;
    std::fs::write(&step, body).unwrap();
    let r = run(
        script(&["bash"], &redis, r#"bash "$STEP"; echo "after $?""#).env("STEP", &step).env("HELD", &held),
        LIMIT,
    );
    assert_eq!((r.code, String::from_utf8_lossy(&r.stdout).as_ref()), (0, "after 0\n"), "{}", r.stderr);
    let child: i32 = std::fs::read_to_string(&held).unwrap().trim().parse().unwrap();
    assert!(wait_until(AT_ONCE, || !process_alive(child)), "the step's background job was stopped");
    assert!(wait_until(AT_ONCE, || !redis.exists(b"lock:ends-step")), "released");
}
