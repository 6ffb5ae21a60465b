//! The fenced oracle: resources the commands under test write to with their fence, as stores
//! that check fencing tokens would. One resource per lock key, each guarded by one family of
//! kinds of lock: exclusive and `--shared` runs (readers and a writer), or `--limit N` runs (a
//! semaphore). The oracle refuses stale writes and records who held what when, every time a
//! resource had more holders than its kind allows, and every fence used twice.
//!
//! # What "stale" means for each kind
//!
//! A fenced store keeps what it has seen and refuses a write that a fresher holder has made
//! out of date. With one holder at a time that is simply "the highest fence wins"; with several
//! legitimate holders at once it cannot be: a semaphore's holders, or readers holding together,
//! have different fences, and a register of the highest would refuse the legitimate ones with
//! the lower fences. So:
//!
//! - **Readers and a writer** (exclusive and `--shared` runs; a key with exclusive runs only is
//!   the case the soak started with): the store keeps the highest fence of any accepted write
//!   and the highest fence of an accepted *exclusive* write. An exclusive holder's write is
//!   accepted only if its fence is at least the former (a writer is fenced off by anyone
//!   fresher), a shared holder's only if its fence is at least the latter (readers are fenced
//!   off by a fresher writer, never by each other). While the lock keeps its promise nobody is
//!   ever refused: fences increase with every acquisition, and a holder with a higher fence
//!   than an exclusive one was admitted after that one released, and the other way round.
//! - **A semaphore** (`--limit N`): no fence order among holders is wrong, so the store is
//!   fenced by capacity instead: it accepts at most N holders at once. A holder entering when
//!   N accepted holders are present makes the one with the lowest fence among them all (itself
//!   included) *displaced*: refused for the rest of its stay. While the lock keeps its promise
//!   no one is ever displaced. When the lock's state is lost, the holders from before the loss
//!   have the lowest fences and are the ones refused. When only one holder's lease lapsed (its
//!   wrapper paused) fences cannot tell which of the holders it was, and the oldest is
//!   refused: the store still never lets more than N write at once, and the soak bounds the
//!   excess itself (below), which does not depend on that choice.
//!
//! # Overlaps
//!
//! An [`Overlap`] is recorded for each command that was present when the resource went beyond
//! what its kind allows, from that moment:
//!
//! - readers and a writer: a command still present when another entered and one of the two
//!   is exclusive, until it left (with exclusive runs only: every command present when another
//!   entered);
//! - a semaphore: the command displaced by an entry, until it left or no more than N were
//!   present any more, whichever came first (a displaced holder need not be the stale one; the
//!   excess ends either way). An entrant displaced at its own entry (its fence the lowest: a
//!   fence went backwards, or a stale holder arrived late) gets no record, so its refused
//!   writes show up as refused outside any overlap.
//!
//! Each record lists the fence of the command it is about, then those of the entries that
//! went beyond the kind beside it, and counts that command's writes refused meanwhile.

use std::collections::{BTreeMap, HashMap};
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
/// The kind of lock the command holds, as [`Kind::name`] writes it (`exclusive` when unset).
/// The resource is the lock key, from `REDLOCK_LOCK_KEY`.
pub const ORACLE_KIND: &str = "RELIABILITY_ORACLE_KIND";

/// How often an oracle client writes while it holds the resource.
pub const WRITE_EVERY: Duration = Duration::from_millis(100);

/// The kind of lock a command holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Exclusive,
    Shared,
    /// `--limit N`, N ≥ 2 (`--limit 1` is the exclusive lock).
    Limit(usize),
}

impl Kind {
    /// `exclusive`, `shared` or `limit=N`.
    pub fn name(self) -> String {
        match self {
            Kind::Exclusive => "exclusive".to_owned(),
            Kind::Shared => "shared".to_owned(),
            Kind::Limit(n) => format!("limit={n}"),
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "exclusive" | "limit=1" => Some(Kind::Exclusive),
            "shared" => Some(Kind::Shared),
            _ => match s.strip_prefix("limit=")?.parse() {
                Ok(n) if n >= 2 => Some(Kind::Limit(n)),
                _ => None,
            },
        }
    }

    /// The wrapper's options for this kind.
    pub fn flags(self) -> Vec<String> {
        match self {
            Kind::Exclusive => Vec::new(),
            Kind::Shared => vec!["--shared".to_owned()],
            Kind::Limit(n) => vec!["--limit".to_owned(), n.to_string()],
        }
    }

    /// The kinds that go together on one key: exclusive with shared (`None`), or one limit.
    fn family(self) -> Option<usize> {
        match self {
            Kind::Exclusive | Kind::Shared => None,
            Kind::Limit(n) => Some(n),
        }
    }

    /// Whether holders of these two kinds of one family may not hold together.
    fn conflicts(self, other: Kind) -> bool {
        self == Kind::Exclusive || other == Kind::Exclusive
    }
}

/// A command present when its resource went beyond what its kind allows (see the module
/// documentation): from then until it left, or, for a semaphore, until the excess ended.
#[derive(Debug, Clone)]
pub struct Overlap {
    /// The resource (lock key).
    pub resource: String,
    pub start: Instant,
    pub end: Instant,
    /// Its fence, then those of the entries that went beyond the kind beside it, in order.
    pub fences: Vec<u64>,
    /// Its writes rejected as stale meanwhile (for a semaphore: for the rest of its stay).
    pub rejected: u64,
}

impl Overlap {
    pub fn duration(&self) -> Duration {
        self.end - self.start
    }
}

/// One command's stay, from its entry to its end (the end of its connection).
#[derive(Debug, Clone)]
#[allow(dead_code)] // ppid and pgid are only shown, by Debug, in failure messages
pub struct Stay {
    pub resource: String,
    pub kind: Kind,
    pub fence: u64,
    pub ppid: i32,
    pub pgid: i32,
    pub entered: Instant,
    pub left: Option<Instant>,
    /// It wrote to the end of its hold and left by itself (rather than being stopped).
    pub finished: bool,
}

/// What the oracle saw on one resource.
#[derive(Debug, Clone, Default)]
pub struct ResourceReport {
    /// The kinds of the commands that entered, with how many stays each.
    pub kinds: BTreeMap<Kind, usize>,
    /// The most commands present at once, and the most shared ones.
    pub peak: usize,
    pub peak_shared: usize,
    /// Entries of a kind that does not go with the resource's first one (the lock refuses to
    /// hold those together, 65; the soak never mixes them).
    pub kind_conflicts: u64,
}

/// What the oracle saw.
#[derive(Debug, Clone, Default)]
pub struct OracleReport {
    pub stays: Vec<Stay>,
    pub writes_accepted: u64,
    /// Writes refused as stale (see the module documentation), as a fenced resource would.
    pub stale_rejected: u64,
    /// Writes accepted although another holder of the same resource had already written with
    /// the same fence: the fence did not tell them apart, so a stale writer may have got
    /// through.
    pub stale_accepted: u64,
    /// Entries whose fence another, earlier holder of the same resource had already used.
    pub fence_reused: u64,
    /// The most commands present at once on one resource.
    pub peak_holders: usize,
    pub overlaps: Vec<Overlap>,
    pub resources: BTreeMap<String, ResourceReport>,
}

/// A command present at the oracle: the holder of the resource, or one of several when they
/// overlap.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // `entered` is only shown, by Debug, in failure messages
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
    resource: String,
    kind: Kind,
    fence: u64,
    occupant: Occupant,
    stay: usize,
    /// Refused for the rest of its stay (a semaphore's displaced holder).
    displaced: bool,
    /// Since its resource went beyond its kind, and whether the record is still running.
    overlap: Option<Overlap>,
    overlap_running: bool,
    /// A second handle on its connection, to check whether its process is still there.
    conn: UnixStream,
}

/// What the oracle keeps about one resource.
#[derive(Default)]
struct Resource {
    /// The first entry's kind, which says the family (`None`: exclusive or shared).
    first: Option<Kind>,
    /// Readers and a writer: the highest fence of any accepted write, and of an accepted
    /// exclusive one.
    max_any: Option<u64>,
    max_exclusive: Option<u64>,
    /// Every fence seen at an entry, and whose it was.
    fences: HashMap<u64, u64>,
    /// Every fence written with, and who wrote with it first.
    writers: HashMap<u64, u64>,
    report: ResourceReport,
}

#[derive(Default)]
struct OracleState {
    next_id: u64,
    present: Vec<Present>,
    resources: HashMap<String, Resource>,
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
            if p.overlap_running {
                overlap.end = now;
            }
            self.report.overlaps.push(overlap);
        }
        // A semaphore back within its permits: the excess is over.
        if let Some(n) = self.resources.get(&p.resource).and_then(|r| r.first).and_then(Kind::family) {
            let here = self.present.iter().filter(|q| q.resource == p.resource).count();
            if here <= n {
                for q in self.present.iter_mut().filter(|q| q.resource == p.resource && q.overlap_running) {
                    if let Some(o) = q.overlap.as_mut() {
                        o.end = now;
                    }
                    q.overlap_running = false;
                }
            }
        }
    }

    /// A command enters its resource with its fence: its stay is recorded and checked against
    /// those present, and its entry is its first write.
    fn enter(&mut self, me: u64, stay: Stay, occupant: Occupant, conn: UnixStream) -> bool {
        let (now, kind, fence) = (stay.entered, stay.kind, stay.fence);
        let resource = stay.resource.clone();
        let res = self.resources.entry(resource.clone()).or_default();
        let first = *res.first.get_or_insert(kind);
        if first.family() != kind.family() {
            res.report.kind_conflicts += 1;
        }
        if let Some(&other) = res.fences.get(&fence)
            && other != me
        {
            self.report.fence_reused += 1;
        }
        res.fences.insert(fence, me);
        *res.report.kinds.entry(kind).or_insert(0) += 1;
        self.present.push(Present {
            id: me,
            resource: resource.clone(),
            kind,
            fence,
            occupant,
            stay: self.report.stays.len(),
            displaced: false,
            overlap: None,
            overlap_running: false,
            conn,
        });
        self.report.stays.push(stay);
        let record = |fences: Vec<u64>| Overlap {
            resource: resource.clone(),
            start: now,
            end: now,
            fences,
            rejected: 0,
        };
        match first.family() {
            None => {
                for p in self.present.iter_mut().filter(|p| p.resource == resource && p.id != me) {
                    if p.kind.conflicts(kind) {
                        p.overlap.get_or_insert_with(|| record(vec![p.fence])).fences.push(fence);
                        p.overlap_running = true;
                    }
                }
            }
            Some(n) => loop {
                let accepted = || self.present.iter().filter(|p| p.resource == resource && !p.displaced);
                if accepted().count() <= n {
                    break;
                }
                let Some(lowest) = accepted().min_by_key(|p| p.fence).map(|p| p.id) else { break };
                let p = self.present.iter_mut().find(|p| p.id == lowest).expect("present");
                p.displaced = true;
                if p.id != me {
                    p.overlap = Some(record(vec![p.fence, fence]));
                    p.overlap_running = true;
                }
            },
        }
        let res = self.resources.get_mut(&resource).expect("entered above");
        let here: Vec<&Present> = self.present.iter().filter(|p| p.resource == resource).collect();
        res.report.peak = res.report.peak.max(here.len());
        res.report.peak_shared =
            res.report.peak_shared.max(here.iter().filter(|p| p.kind == Kind::Shared).count());
        self.report.peak_holders = self.report.peak_holders.max(here.len());
        self.write(me, fence)
    }

    /// A fenced write (see the module documentation for when it is refused).
    fn write(&mut self, id: u64, fence: u64) -> bool {
        let Some(p) = self.present.iter_mut().find(|p| p.id == id) else {
            return false;
        };
        let res = self.resources.get_mut(&p.resource).expect("entered");
        let accept = match res.first.and_then(Kind::family) {
            Some(_) => !p.displaced,
            None => {
                let bar = if p.kind == Kind::Exclusive { res.max_any } else { res.max_exclusive };
                bar.is_none_or(|max| fence >= max)
            }
        };
        if accept {
            self.report.writes_accepted += 1;
            if *res.writers.entry(fence).or_insert(id) != id {
                self.report.stale_accepted += 1;
            }
            res.max_any = res.max_any.max(Some(fence));
            if p.kind == Kind::Exclusive {
                res.max_exclusive = res.max_exclusive.max(Some(fence));
            }
        } else {
            self.report.stale_rejected += 1;
            if let Some(o) = p.overlap.as_mut() {
                o.rejected += 1;
            }
        }
        accept
    }
}

/// A tiny server on a Unix socket that commands under test connect to while they work: they
/// enter with their fence, the kind of lock they hold and their resource, write with the fence
/// every [`WRITE_EVERY`], and their connection ends with their process. It rejects stale
/// writes, like a resource that checks the fence (see the module documentation), and records
/// every stay and every [`Overlap`].
///
/// A new holder counts as present beside another only if the other's connection is still open
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
        for p in &st.present {
            if let Some(o) = &p.overlap {
                let end = if p.overlap_running { Instant::now() } else { o.end };
                report.overlaps.push(Overlap { end, ..o.clone() });
            }
        }
        report.resources = st.resources.iter().map(|(name, r)| (name.clone(), r.report.clone())).collect();
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

/// One client connection: `ENTER fence pid pgid ppid hold_ms kind resource`, then `WRITE fence`
/// lines, each answered `OK` or `STALE`, until the connection ends.
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
            (["ENTER", fence, _pid, pgid, ppid, hold_ms, kind, resource], None) => {
                let (Ok(fence), Ok(pgid), Ok(ppid), Ok(hold_ms), Some(kind)) =
                    (fence.parse(), pgid.parse(), ppid.parse(), hold_ms.parse(), Kind::parse(kind))
                else {
                    break;
                };
                let occupant = Occupant { ppid, entered: now, done_by: now + Duration::from_millis(hold_ms) };
                let stay = Stay {
                    resource: (*resource).to_owned(),
                    kind,
                    fence,
                    ppid,
                    pgid,
                    entered: now,
                    left: None,
                    finished: false,
                };
                let Ok(conn) = watch.try_clone() else { break };
                let mut st = lock(state);
                st.prune(now);
                let me = st.next_id;
                st.next_id += 1;
                id = Some(me);
                st.enter(me, stay, occupant, conn)
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
/// `REDLOCK_FENCE`, the kind of [`ORACLE_KIND`] and the resource `REDLOCK_LOCK_KEY`, writes every [`WRITE_EVERY`] for [`ORACLE_HOLD_MS`], says it is done and
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
    let kind = match std::env::var(ORACLE_KIND) {
        Ok(kind) => Kind::parse(&kind).ok_or_else(|| invalid("RELIABILITY_ORACLE_KIND unknown"))?,
        Err(_) => Kind::Exclusive,
    };
    let resource = std::env::var("REDLOCK_LOCK_KEY")
        .ok()
        .filter(|k| !k.is_empty() && !k.contains(char::is_whitespace))
        .ok_or_else(|| invalid("REDLOCK_LOCK_KEY missing, or not one word"))?;
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
    let line = format!("ENTER {fence} {pid} {pgid} {ppid} {} {} {resource}\n", hold.as_millis(), kind.name());
    say(&mut conn, line)?;
    while started.elapsed() < hold {
        std::thread::sleep(WRITE_EVERY.min(hold.saturating_sub(started.elapsed())));
        say(&mut conn, format!("WRITE {fence}\n"))?;
    }
    say(&mut conn, "DONE\n".to_owned())?;
    Ok(clean)
}
