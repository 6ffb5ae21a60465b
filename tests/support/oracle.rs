//! The fenced oracle: a resource the commands under test write to with their fence, as a
//! store that checks fencing tokens would. It refuses stale writes and records who held it
//! when, every overlap of two holders, and every fence used twice.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::lock;

/// Environment variables that turn a process into an oracle client (see [`oracle_client`]).
pub const ORACLE_SOCKET: &str = "RELIABILITY_ORACLE_SOCKET";
pub const ORACLE_HOLD_MS: &str = "RELIABILITY_ORACLE_HOLD_MS";

/// How often an oracle client writes while it holds the resource.
pub const WRITE_EVERY: Duration = Duration::from_millis(100);

/// A command that was still present when another one entered: it overlapped from that
/// entry until it left (whether or not the newer ones stayed all that time).
#[derive(Debug, Clone)]
pub struct Overlap {
    pub start: Instant,
    pub end: Instant,
    /// Its fence, then those of the commands that entered while it was present, in order.
    pub fences: Vec<u64>,
    /// Its writes rejected as stale meanwhile.
    pub rejected: u64,
}

impl Overlap {
    pub fn duration(&self) -> Duration {
        self.end - self.start
    }
}

/// One command's stay, from its entry to its end (the end of its connection).
#[derive(Debug, Clone)]
pub struct Stay {
    pub fence: u64,
    pub ppid: i32,
    pub pgid: i32,
    pub entered: Instant,
    pub left: Option<Instant>,
    /// It wrote to the end of its hold and left by itself (rather than being stopped).
    pub finished: bool,
}

/// What the oracle saw.
#[derive(Debug, Clone, Default)]
pub struct OracleReport {
    pub stays: Vec<Stay>,
    pub writes_accepted: u64,
    /// Writes carrying a fence lower than one already written: refused, as a fenced resource
    /// would.
    pub stale_rejected: u64,
    /// Writes accepted although another holder had already written with the same fence: the
    /// fence did not tell them apart, so a stale writer got through.
    pub stale_accepted: u64,
    /// Entries whose fence another, earlier holder had already used.
    pub fence_reused: u64,
    pub peak_holders: usize,
    pub overlaps: Vec<Overlap>,
}

/// A command present at the oracle: the holder of the resource, or one of several when they
/// overlap.
#[derive(Debug, Clone, Copy)]
pub struct Occupant {
    /// Its wrapper (the command's parent).
    pub ppid: i32,
    pub entered: Instant,
    /// When it means to finish its work, unless stopped.
    pub done_by: Instant,
}

/// An occupant present right now, with what the oracle tracks about it.
struct Present {
    id: u64,
    fence: u64,
    occupant: Occupant,
    stay: usize,
    /// Since another command entered while this one was present.
    overlap: Option<Overlap>,
    /// A second handle on its connection, to check whether its process is still there.
    conn: UnixStream,
}

#[derive(Default)]
struct OracleState {
    next_id: u64,
    present: Vec<Present>,
    /// The highest fence written so far and the holder that wrote it.
    max_fence: Option<(u64, u64)>,
    /// Every fence seen at an entry, and whose it was.
    fences: HashMap<u64, u64>,
    report: OracleReport,
}

impl OracleState {
    /// Forgets holders whose connection is gone (their process ended) at `now`.
    fn prune(&mut self, now: Instant) {
        let gone: Vec<u64> = self.present.iter().filter(|p| !peer_open(&p.conn)).map(|p| p.id).collect();
        for id in gone {
            self.leave(id, now, false);
        }
    }

    fn leave(&mut self, id: u64, now: Instant, finished: bool) {
        let Some(i) = self.present.iter().position(|p| p.id == id) else {
            return;
        };
        let p = self.present.swap_remove(i);
        let stay = &mut self.report.stays[p.stay];
        stay.left = Some(now);
        stay.finished = finished;
        if let Some(mut overlap) = p.overlap {
            overlap.end = now;
            self.report.overlaps.push(overlap);
        }
    }

    /// A fenced write: refused when a higher fence has been written.
    fn write(&mut self, id: u64, fence: u64) -> bool {
        let accept = match self.max_fence {
            None => true,
            Some((max, _)) if fence > max => true,
            Some((max, owner)) if fence == max => {
                if owner != id {
                    self.report.stale_accepted += 1;
                }
                true
            }
            Some(_) => false,
        };
        if accept {
            self.report.writes_accepted += 1;
            if self.max_fence.is_none_or(|(max, _)| fence > max) {
                self.max_fence = Some((fence, id));
            }
        } else {
            self.report.stale_rejected += 1;
            if let Some(o) = self.present.iter_mut().find(|p| p.id == id).and_then(|p| p.overlap.as_mut()) {
                o.rejected += 1;
            }
        }
        accept
    }
}

/// A tiny server on a Unix socket that commands under test connect to while they work: they
/// enter with their fence, write with it every [`WRITE_EVERY`], and their connection ends with
/// their process. It rejects stale writes, like a resource that checks the fence, and records
/// every stay and, for every command still present when another entered, how long it went on.
///
/// A new holder counts as overlapping another only if the other's connection is still open
/// when the new holder's entry is handled: no overlap is ever inferred from the oracle's own
/// delay in noticing a departure.
pub struct Oracle {
    path: PathBuf,
    state: Arc<Mutex<OracleState>>,
    stop: Arc<AtomicBool>,
}

impl Oracle {
    pub fn start(dir: &Path) -> Self {
        let path = dir.join("oracle.sock");
        let listener = UnixListener::bind(&path).expect("bind the oracle socket");
        let state = Arc::new(Mutex::new(OracleState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (Arc::clone(&state), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let st = Arc::clone(&st);
                std::thread::spawn(move || serve(conn, &st));
            }
        });
        Oracle { path, state, stop }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The commands present right now, the most recent entry last.
    pub fn occupants(&self) -> Vec<Occupant> {
        let mut st = lock(&self.state);
        st.prune(Instant::now());
        let mut present: Vec<(usize, Occupant)> = st.present.iter().map(|p| (p.stay, p.occupant)).collect();
        present.sort_by_key(|(stay, _)| *stay);
        present.into_iter().map(|(_, h)| h).collect()
    }

    pub fn report(&self) -> OracleReport {
        let mut st = lock(&self.state);
        st.prune(Instant::now());
        let mut report = st.report.clone();
        for o in st.present.iter().filter_map(|p| p.overlap.as_ref()) {
            report.overlaps.push(Overlap { end: Instant::now(), ..o.clone() });
        }
        report
    }
}

impl Drop for Oracle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One client connection: `ENTER fence pid pgid ppid hold_ms`, then `WRITE fence` lines, each answered
/// `OK` or `STALE`, until the connection ends.
fn serve(conn: UnixStream, state: &Mutex<OracleState>) {
    let Ok(watch) = conn.try_clone() else { return };
    let Ok(mut out) = conn.try_clone() else { return };
    let mut id = None;
    let mut finished = false;
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let now = Instant::now();
        let verdict = match (words.as_slice(), id) {
            (["ENTER", fence, _pid, pgid, ppid, hold_ms], None) => {
                let (Ok(fence), Ok(pgid), Ok(ppid), Ok(hold_ms)) =
                    (fence.parse(), pgid.parse(), ppid.parse(), hold_ms.parse())
                else {
                    break;
                };
                let occupant = Occupant { ppid, entered: now, done_by: now + Duration::from_millis(hold_ms) };
                let Ok(conn) = watch.try_clone() else { break };
                let mut st = lock(state);
                st.prune(now);
                let me = st.next_id;
                st.next_id += 1;
                id = Some(me);
                if let Some(&other) = st.fences.get(&fence)
                    && other != me
                {
                    st.report.fence_reused += 1;
                }
                st.fences.insert(fence, me);
                let stay = st.report.stays.len();
                st.report.stays.push(Stay { fence, ppid, pgid, entered: now, left: None, finished: false });
                for p in &mut st.present {
                    p.overlap
                        .get_or_insert_with(|| Overlap {
                            start: now,
                            end: now,
                            fences: vec![p.fence],
                            rejected: 0,
                        })
                        .fences
                        .push(fence);
                }
                st.present.push(Present { id: me, fence, occupant, stay, conn, overlap: None });
                let holders = st.present.len();
                st.report.peak_holders = st.report.peak_holders.max(holders);
                st.write(me, fence)
            }
            (["WRITE", fence], Some(me)) => {
                let Ok(fence) = fence.parse() else { break };
                lock(state).write(me, fence)
            }
            (["DONE"], Some(_)) => {
                finished = true;
                true
            }
            _ => break,
        };
        if out.write_all(if verdict { b"OK\n" } else { b"STALE\n" }).is_err() {
            break;
        }
    }
    if let Some(me) = id {
        lock(state).leave(me, Instant::now(), finished);
    }
}

/// Whether the other end of `conn` is still open (its process alive), without consuming
/// anything and without blocking.
fn peer_open(conn: &UnixStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: a valid socket descriptor kept open by `conn` for the call, and a one-byte buffer
    // that outlives it; MSG_PEEK leaves the data for the connection's reader.
    let n = unsafe {
        libc::recv(conn.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
    };
    match n {
        0 => false,
        n if n > 0 => true,
        _ => std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock,
    }
}

/// The command under test, when [`ORACLE_SOCKET`] is set: enters the oracle with
/// `REDLOCK_FENCE`, writes every [`WRITE_EVERY`] for [`ORACLE_HOLD_MS`], says it is done and
/// exits — 0, or 3 if any write was rejected as stale. A stale writer keeps going (and keeps
/// being rejected) until the wrapper stops it: the overlap measured is the wrapper's doing.
/// Returns without doing anything when the variable is not set.
pub fn oracle_client() {
    let Some(socket) = std::env::var_os(ORACLE_SOCKET) else { return };
    let code = match client_session(Path::new(&socket)) {
        Ok(true) => 0,
        Ok(false) => 3,
        Err(e) => {
            eprintln!("oracle client: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn client_session(socket: &Path) -> std::io::Result<bool> {
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_owned());
    let fence: u64 = std::env::var("REDLOCK_FENCE")
        .ok()
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| invalid("REDLOCK_FENCE missing"))?;
    let hold =
        Duration::from_millis(std::env::var(ORACLE_HOLD_MS).ok().and_then(|h| h.parse().ok()).unwrap_or(100));
    let started = Instant::now();
    let mut conn = UnixStream::connect(socket)?;
    let mut replies = BufReader::new(conn.try_clone()?);
    let mut clean = true;
    let mut say = |conn: &mut UnixStream, line: String| -> std::io::Result<()> {
        conn.write_all(line.as_bytes())?;
        let mut answer = String::new();
        replies.read_line(&mut answer)?;
        match answer.trim() {
            "OK" => {}
            "STALE" => clean = false,
            other => return Err(invalid(&format!("unexpected answer {other:?}"))),
        }
        Ok(())
    };
    let pgid = nix::unistd::getpgrp();
    let (pid, ppid) = (std::process::id(), std::os::unix::process::parent_id());
    say(&mut conn, format!("ENTER {fence} {pid} {pgid} {ppid} {}\n", hold.as_millis()))?;
    while started.elapsed() < hold {
        std::thread::sleep(WRITE_EVERY.min(hold.saturating_sub(started.elapsed())));
        say(&mut conn, format!("WRITE {fence}\n"))?;
    }
    say(&mut conn, "DONE\n".to_owned())?;
    Ok(clean)
}
