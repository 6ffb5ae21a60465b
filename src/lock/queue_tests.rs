//! The queue's rules, driven with generated event orders against the real scripts on a real
//! server, started as the behaviour tests start theirs (`tests/it/support/server.rs`: on a free
//! loopback port, without persistence; `REDLOCK_TEST_SERVER` picks another server, Valkey).
//!
//! Simulated waiters attempt (joining the queue or not), keep alive, leave, stop calling (die),
//! and the holder releases, in generated orders with pauses between them. The queue's clock is
//! the server's `TIME`, which a test cannot pause: entries live 100 ms here (the scripts take
//! the lifetime as an argument), and the rules about liveness are checked only outside a
//! margin around each entry's end, where the local and the server clock could disagree.
//!
//! Some exclusive waiters listen on their grant channels, as a run that can take a lock handed
//! over does; a release hands the free lock to the first live waiter when that one listens.
//!
//! Invariants checked after every step:
//! - the lock is granted only when it was free;
//! - a run is granted the lock only if no live waiter joined before it (a run that does not
//!   queue: no live waiter at all), so waiters are served in arrival order and a run that does
//!   not wait never jumps the queue;
//! - the first live waiter is granted a free lock when it asks (no one else can take it);
//! - a release hands the lock over only to the first live waiter, exclusive and listening, and
//!   always does when that one is certainly live; otherwise it leaves the lock free;
//! - arrival numbers increase with each new waiter, and a waiter that joins again keeps its own;
//! - an exclusive holder's lease, counted as a run counts it (`Lease`: granted, handed over,
//!   renewed), never ends later than the key's expiry in Redis minus the drift of the write
//!   that set it, whether its TTL is shorter or longer than the hand-over's.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use redis::Value;

use super::{Keys, Kind, Lease, drift, scripts};

#[path = "../../tests/it/support/server.rs"]
#[allow(dead_code)] // the unit tests use part of the behaviour tests' launcher
mod server;

/// An entry's lifetime without a keep-alive, in these tests.
const ENTRY: Duration = Duration::from_millis(100);
/// No liveness rule is checked this close to an entry's end (clock and scheduling skew).
const MARGIN: Duration = Duration::from_millis(40);
const WAITERS: usize = 5;

/// The suite's server (`REDLOCK_TEST_SERVER`, else `redis-server`), as the behaviour tests
/// start it, and this test's connection to it.
struct Server {
    conn: redis::Connection,
    redis: server::RedisServer,
}

impl Server {
    fn start() -> Server {
        let redis = server::RedisServer::start();
        let conn = connect(&redis);
        Server { conn, redis }
    }
}

fn connect(redis: &server::RedisServer) -> redis::Connection {
    let client = redis::Client::open(redis.url()).unwrap();
    client.get_connection_with_timeout(Duration::from_secs(5)).expect("connect")
}

#[derive(Debug, Clone)]
enum Step {
    /// Waiter `w` asks for the lock, queueing (`join`) or not. A queued waiter's ask is also
    /// its keep-alive.
    Ask { w: usize, join: bool },
    /// One of the holders releases (an index into them, modulo their number).
    Release(usize),
    /// Waiter `w` gives up its place.
    Leave(usize),
    /// One of the holders renews (an index into them, modulo their number).
    Renew(usize),
    /// Time passes (entries may lapse).
    Pause(u64),
}

/// Waiters 0..QUEUERS queue when they ask (runs with `--wait`); the last one never does (a
/// run without it).
const QUEUERS: usize = WAITERS - 1;

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..WAITERS).prop_map(|w| Step::Ask { w, join: w < QUEUERS }),
        2 => (0..WAITERS).prop_map(Step::Release),
        1 => (0..WAITERS).prop_map(Step::Renew),
        1 => (0..QUEUERS).prop_map(Step::Leave),
        2 => (0u64..180).prop_map(Step::Pause),
    ]
}

/// The kind of lock of each waiter in one generated case: all exclusive, all `--limit N`, or
/// exclusive and shared mixed.
fn kinds() -> impl Strategy<Value = Vec<Kind>> {
    prop_oneof![
        Just(vec![Kind::Exclusive; WAITERS]),
        (2u32..=3).prop_map(|n| vec![Kind::Limit(n); WAITERS]),
        proptest::collection::vec(prop_oneof![Just(Kind::Exclusive), Just(Kind::Shared)], WAITERS),
    ]
}

/// What the test knows of a waiter.
#[derive(Debug, Default, Clone)]
struct Waiter {
    /// Its arrival number, once it has joined.
    arrival: Option<u64>,
    /// Whether it is in the queue (joined, and neither granted nor left since).
    queued: bool,
    /// When its entry was last kept alive (local clock, just before the request).
    kept: Option<Instant>,
    /// Just after that request returned.
    kept_done: Option<Instant>,
}

impl Waiter {
    /// Certainly alive / certainly lapsed in the server's eyes at `now`.
    fn surely_live(&self, now: Instant) -> bool {
        self.queued && self.kept.is_some_and(|k| now + MARGIN < k + ENTRY)
    }
    fn surely_lapsed(&self, now: Instant) -> bool {
        !self.queued || self.kept_done.is_some_and(|k| now > k + ENTRY + MARGIN)
    }
    /// Whether it comes before a run with arrival number `mine` (`None`: a run that has not
    /// joined, which comes after everyone queued).
    fn before(&self, mine: Option<u64>) -> bool {
        match (self.arrival, mine) {
            (Some(a), Some(m)) => a < m,
            (_, None) => true,
            (None, Some(_)) => false,
        }
    }
}

fn value(w: usize, kind: Kind) -> String {
    let suffix = match kind {
        Kind::Exclusive => String::new(),
        Kind::Shared => " shared".to_owned(),
        Kind::Limit(n) => format!(" limit={n}"),
    };
    format!("token{w} host{w} {w} 0{suffix}")
}

fn ask(
    conn: &mut redis::Connection,
    keys: &Keys,
    value: &str,
    join: bool,
    arrival: Option<u64>,
) -> Vec<Value> {
    ask_for(conn, keys, value, Duration::from_secs(60), join, arrival)
}

fn ask_for(
    conn: &mut redis::Connection,
    keys: &Keys,
    value: &str,
    ttl: Duration,
    join: bool,
    arrival: Option<u64>,
) -> Vec<Value> {
    let mut script = scripts::ACQUIRE.key(&keys.lock);
    script.key(&keys.fence).key(&keys.queue).key(&keys.queue_expiry).key(&keys.queue_seq);
    script.key(&keys.holders);
    script.arg(value).arg(ttl.as_millis() as u64).arg(60_000);
    script.arg(if join { "1" } else { "0" }).arg(ENTRY.as_millis() as u64).arg(arrival.unwrap_or(0));
    script.arg(&keys.wake_prefix);
    let lean = (exclusive(value) && !join).then(|| {
        let mut lean = scripts::ACQUIRE_ONE.key(&keys.lock);
        lean.key(&keys.fence).key(&keys.queue).arg(value).arg(ttl.as_millis() as u64).arg(60_000);
        lean
    });
    call(conn, lean, script)
}

fn exclusive(value: &str) -> bool {
    value.split(' ').nth(4).is_none()
}

/// As the wrapper calls a script: the lean one first where it fits, the full one when there is
/// none or the lean one hands the call back.
fn call(conn: &mut redis::Connection, lean: Option<scripts::LuaCall>, full: scripts::LuaCall) -> Vec<Value> {
    if let Some(lean) = lean {
        let reply: Vec<Value> = lean.invoke(conn).expect("the lean script");
        if reply != [Value::Int(scripts::NOT_MINE)] {
            return reply;
        }
    }
    full.invoke(conn).expect("the full script")
}

fn int(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// How many permits the holders leave to a run of `kind` (`None`: it may not hold beside them).
fn free(kind: Kind, holding: &[usize], kinds: &[Kind]) -> Option<usize> {
    match kind {
        Kind::Exclusive => holding.is_empty().then_some(1),
        Kind::Shared => holding.iter().all(|h| kinds[*h] == Kind::Shared).then_some(usize::MAX),
        Kind::Limit(n) => (n as usize).checked_sub(holding.len()).filter(|f| *f > 0),
    }
}

/// What a release is asked to do besides the keys: hand over for this long, the fence TTL.
const GRANT_MS: u64 = 60_000;

/// The waiters' TTLs: shorter and longer than the hand-over.
fn ttls() -> impl Strategy<Value = Vec<Duration>> {
    proptest::collection::vec(
        prop_oneof![Just(Duration::from_secs(20)), Just(Duration::from_secs(120))],
        WAITERS,
    )
}

/// A holder's lease as the run counts it, and the duration of the write that last set the
/// key's expiry (for its drift).
#[derive(Debug, Clone, Copy)]
struct Held {
    lease: Lease,
    written: Duration,
}

fn local(t: Instant) -> tokio::time::Instant {
    tokio::time::Instant::from_std(t)
}

/// How far the server's clock (the wall clock, which sets the key's expiry) has run ahead of
/// the monotonic one the lease counts on. A VM's or sandbox's clock may be adjusted apart by
/// a fraction of a millisecond in a case; the drift allowance is there for that, so the check
/// below, which keeps the whole allowance in reserve, must not count it against the lease.
struct Clocks {
    /// The least of `server − local` seen so far (each sample's bound taken after the reply).
    least_offset: i128,
}

impl Clocks {
    fn start(conn: &mut redis::Connection) -> Clocks {
        let (_, least_offset) = Clocks::sample(conn);
        Clocks { least_offset }
    }

    /// `server − local` in µs, bounded by the local times before and after TIME ran: (the
    /// most it can be, the least).
    fn sample(conn: &mut redis::Connection) -> (i128, i128) {
        let origin = *ORIGIN;
        let before = origin.elapsed().as_micros() as i128;
        let (secs, micros): (i128, i128) = redis::cmd("TIME").query(conn).unwrap();
        let after = origin.elapsed().as_micros() as i128;
        let server = secs * 1_000_000 + micros;
        (server - before, server - after)
    }

    /// The most the server's clock can have gained on ours since the case began.
    fn gained(&mut self, conn: &mut redis::Connection) -> Duration {
        let (most, least) = Clocks::sample(conn);
        let gained = Duration::from_micros((most - self.least_offset).max(0) as u64);
        self.least_offset = self.least_offset.min(least);
        gained
    }
}

static ORIGIN: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// The lease of an exclusive holder never ends later than the key's expiry, minus drift (but
/// for what the server's clock gained on ours).
fn within_expiry(
    conn: &mut redis::Connection,
    keys: &Keys,
    step: usize,
    held: &Held,
    clocks: &mut Clocks,
) -> Result<(), TestCaseError> {
    let pttl: i64 = redis::cmd("PTTL").arg(&keys.lock).query(conn).unwrap();
    let read = Instant::now();
    prop_assert!(pttl > 0, "step {}: an exclusive holder's key has no expiry: {}", step, pttl);
    let expiry = local(read) + Duration::from_millis(pttl as u64 + 1);
    let gained = clocks.gained(conn);
    prop_assert!(
        held.lease.deadline() + drift(held.written) <= expiry + gained,
        "step {}: the lease ends {:?} after the key's expiry minus drift (the server's clock gained {:?})",
        step,
        (held.lease.deadline() + drift(held.written)) - expiry,
        gained
    );
    Ok(())
}

fn renew(conn: &mut redis::Connection, keys: &Keys, value: &str, ttl: Duration) -> Vec<Value> {
    let mut script = scripts::RENEW.key(&keys.lock);
    script.key(&keys.holders).arg(value).arg(ttl.as_millis() as u64);
    let lean = exclusive(value).then(|| {
        let mut lean = scripts::RENEW_ONE.key(&keys.lock);
        lean.arg(value).arg(ttl.as_millis() as u64);
        lean
    });
    call(conn, lean, script)
}

/// Subscribes a connection of its own to waiter `w`'s grant channel (the SUBSCRIBE confirmed,
/// so that a release after this finds it listening).
fn listen(server: &Server, keys: &Keys, w: usize) -> redis::Connection {
    let mut conn = connect(&server.redis);
    let _: Value = redis::cmd("SUBSCRIBE")
        .arg(keys.grant(&format!("token{w}")))
        .query(&mut conn)
        .expect("SUBSCRIBE confirmed");
    conn
}

/// A new holder's fence is above every earlier one; it becomes the highest.
fn rises(step: usize, fence: i64, highest: &mut i64) -> Result<(), TestCaseError> {
    prop_assert!(fence > *highest, "step {}: fence {} not above {}", step, fence, *highest);
    *highest = fence;
    Ok(())
}

/// The lock's value if it is a string, else `None`.
fn string_at(conn: &mut redis::Connection, key: &[u8]) -> Option<String> {
    let t: String = redis::cmd("TYPE").arg(key).query(conn).unwrap();
    if t != "string" {
        return None;
    }
    redis::cmd("GET").arg(key).query(conn).unwrap()
}

fn release(conn: &mut redis::Connection, keys: &Keys, value: &str) -> Vec<Value> {
    let mut script = scripts::RELEASE.key(&keys.lock);
    script.key(&keys.fence).key(&keys.queue).key(&keys.queue_expiry).key(&keys.holders);
    script.arg(value).arg(0).arg("0").arg("").arg(0).arg(GRANT_MS).arg(60_000);
    script.arg(&keys.released_channel).arg(&keys.wake_prefix);
    let lean = exclusive(value).then(|| {
        let mut lean = scripts::RELEASE_ONE.key(&keys.lock);
        lean.key(&keys.queue).arg(value);
        lean
    });
    call(conn, lean, script)
}

fn check(kinds: &[Kind], ttls: &[Duration], listens: &[bool], steps: &[Step]) -> Result<(), TestCaseError> {
    let mut server = Server::start();
    let keys = Keys::new(b"lock:generated");
    // Exclusive waiters that queue may listen; the connections stay open for the whole case.
    let listening: Vec<bool> =
        (0..WAITERS).map(|w| listens[w] && w < QUEUERS && kinds[w] == Kind::Exclusive).collect();
    let _listeners: Vec<_> =
        (0..WAITERS).filter(|w| listening[*w]).map(|w| listen(&server, &keys, w)).collect();
    let conn = &mut server.conn;
    let mut clocks = Clocks::start(conn);
    let mut waiters = vec![Waiter::default(); WAITERS];
    let mut holding: Vec<usize> = Vec::new();
    let mut held: Vec<Option<Held>> = vec![None; WAITERS];
    let mut highest_arrival = 0u64;
    let mut highest_fence = 0i64;
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Pause(ms) => std::thread::sleep(Duration::from_millis(ms)),
            Step::Renew(h) => {
                if holding.is_empty() {
                    continue;
                }
                let h = holding[h % holding.len()];
                let sent = Instant::now();
                let mut lease = held[h].map(|l| l.lease);
                if let Some(lease) = lease.as_mut() {
                    lease.sending(local(sent));
                }
                let reply = renew(conn, &keys, &value(h, kinds[h]), ttls[h]);
                prop_assert_eq!(reply.first(), Some(&Value::Int(1)), "step {}: {} renews", i, h);
                if let Some(mut lease) = lease {
                    prop_assert!(lease.renewed(local(sent), local(Instant::now())), "step {}: renewed", i);
                    held[h] = Some(Held { lease, written: ttls[h] });
                }
            }
            Step::Release(h) => {
                if holding.is_empty() {
                    continue;
                }
                let h = holding.remove(h % holding.len());
                held[h] = None;
                let now = Instant::now();
                let reply = release(conn, &keys, &value(h, kinds[h]));
                prop_assert_eq!(reply.get(1), Some(&Value::Int(1)), "step {}: the holder's release", i);
                // Who may, and who must, be handed the lock: the first live waiter, if it
                // listens, when no one holds any more.
                let first_candidate = |w: usize, surely: bool| {
                    listening[w]
                        && waiters[w].queued
                        && holding.is_empty()
                        && (0..WAITERS).all(|x| {
                            x == w
                                || !waiters[x].before(waiters[w].arrival)
                                || !waiters[x].queued
                                || if surely {
                                    waiters[x].surely_lapsed(now)
                                } else {
                                    !waiters[x].surely_live(now)
                                }
                        })
                };
                let handed = string_at(conn, &keys.lock);
                match (0..WAITERS).find(|w| handed.as_deref() == Some(value(*w, kinds[*w]).as_str())) {
                    Some(w) => {
                        prop_assert!(
                            first_candidate(w, false) && !waiters[w].surely_lapsed(now),
                            "step {}: handed over to {} while {:?} hold, waiters {:?}",
                            i,
                            w,
                            holding,
                            waiters
                        );
                        let fence: i64 = redis::cmd("GET").arg(&keys.fence).query(conn).unwrap();
                        rises(i, fence, &mut highest_fence)?;
                        let in_queue: Option<u64> = redis::cmd("ZSCORE")
                            .arg(&keys.queue)
                            .arg(value(w, kinds[w]))
                            .query(conn)
                            .unwrap();
                        prop_assert!(in_queue.is_none(), "step {}: {} handed over but still queued", i, w);
                        // Counted from its last attempt, answered busy before the release ran.
                        let attempt = waiters[w].kept.expect("a queued waiter asked");
                        let grant = Duration::from_millis(GRANT_MS);
                        held[w] = Some(Held {
                            lease: Lease::handed(local(attempt), grant, ttls[w]),
                            written: grant,
                        });
                        holding.push(w);
                        waiters[w].queued = false;
                    }
                    None => {
                        prop_assert!(
                            handed.is_none(),
                            "step {}: the lock holds {:?} after a release",
                            i,
                            handed
                        );
                        for w in 0..WAITERS {
                            prop_assert!(
                                !(first_candidate(w, true) && waiters[w].surely_live(now)),
                                "step {}: {} was first, live and listening, and was not handed the lock: {:?}",
                                i,
                                w,
                                waiters
                            );
                        }
                    }
                }
            }
            Step::Leave(w) => {
                if holding.contains(&w) {
                    continue;
                }
                let mut script = scripts::LEAVE.key(&keys.lock);
                script.key(&keys.queue).key(&keys.queue_expiry).arg(value(w, kinds[w]));
                script.arg(&keys.wake_prefix);
                let _: i64 = script.invoke(conn).expect("LEAVE");
                waiters[w].queued = false;
            }
            Step::Ask { w, join } => {
                if holding.contains(&w) {
                    continue;
                }
                let now = Instant::now();
                let mine = waiters[w].arrival;
                let kind = kinds[w];
                // The waiters before this run that hold it back: every one for an exclusive
                // run and a semaphore, the exclusive ones for a shared run.
                let blocking = |x: usize| x != w && (kind != Kind::Shared || kinds[x] == Kind::Exclusive);
                let before = |x: usize| blocking(x) && waiters[x].before(mine);
                let surely_before =
                    (0..WAITERS).filter(|x| before(*x) && waiters[*x].surely_live(now)).count();
                let maybe_before =
                    (0..WAITERS).filter(|x| before(*x) && !waiters[*x].surely_lapsed(now)).count();
                let free = free(kind, &holding, kinds);
                // It must not be granted ahead of as many live waiters as there are free permits
                // (a shared run: ahead of any live exclusive one); it must be granted when the
                // holders admit it and fewer waiters than that can come first.
                let must_not =
                    free.is_none_or(|f| surely_before >= f.min(if kind == Kind::Shared { 1 } else { f }));
                let must = join
                    && (waiters[w].surely_live(now) || mine.is_none())
                    && free.is_some_and(|f| maybe_before < f.min(if kind == Kind::Shared { 1 } else { f }));
                let reply = ask_for(conn, &keys, &value(w, kind), ttls[w], join, mine);
                let after = Instant::now();
                let code = match reply.first() {
                    Some(Value::Int(n)) => *n,
                    _ => i64::MIN,
                };
                match code {
                    1 => {
                        prop_assert!(
                            !must_not,
                            "step {}: granted to {} ({:?}) while {:?} hold, waiters {:?}",
                            i,
                            w,
                            kind,
                            holding,
                            waiters
                        );
                        let fence: i64 = match reply.get(1) {
                            Some(Value::BulkString(b)) => std::str::from_utf8(b).unwrap().parse().unwrap(),
                            other => return Err(TestCaseError::fail(format!("step {i}: fence {other:?}"))),
                        };
                        rises(i, fence, &mut highest_fence)?;
                        if kind == Kind::Exclusive {
                            held[w] = Some(Held { lease: Lease::new(local(now), ttls[w]), written: ttls[w] });
                        }
                        holding.push(w);
                        waiters[w].queued = false;
                        // The permit invariant: never more holders than the kind admits.
                        let limit = match kind {
                            Kind::Limit(n) => n as usize,
                            Kind::Exclusive => 1,
                            Kind::Shared => usize::MAX,
                        };
                        prop_assert!(holding.len() <= limit, "step {}: {:?} hold", i, holding);
                        prop_assert!(
                            holding.len() == 1 || holding.iter().all(|h| kinds[*h] != Kind::Exclusive),
                            "step {}: an exclusive holder beside others: {:?}",
                            i,
                            holding
                        );
                    }
                    0 | 3 => {
                        prop_assert!(
                            !must,
                            "step {}: {} ({:?}) could hold and was first, but was refused: {:?} {:?} {:?}",
                            i,
                            w,
                            kind,
                            reply,
                            holding,
                            waiters
                        );
                        prop_assert!(
                            code == 3 || free.is_none(),
                            "step {}: busy though the holders {:?} admit {:?}: {:?}",
                            i,
                            holding,
                            kind,
                            reply
                        );
                        if join {
                            let (position, arrival) = match code {
                                0 => (int(reply.get(3)), int(reply.get(4))),
                                _ => (int(reply.get(2)), int(reply.get(3))),
                            };
                            prop_assert!(position.is_some(), "step {}: {:?}", i, reply);
                            let Some(arrival) = arrival else {
                                return Err(TestCaseError::fail(format!(
                                    "step {i}: no arrival in {reply:?}"
                                )));
                            };
                            match mine {
                                Some(a) => prop_assert_eq!(a, arrival, "step {}: {} keeps its arrival", i, w),
                                None => {
                                    prop_assert!(
                                        arrival > highest_arrival,
                                        "step {}: a new arrival is last",
                                        i
                                    );
                                    highest_arrival = arrival;
                                }
                            }
                            waiters[w].arrival = Some(arrival);
                            waiters[w].queued = true;
                            waiters[w].kept = Some(now);
                            waiters[w].kept_done = Some(after);
                        }
                    }
                    _ => prop_assert!(false, "step {}: unexpected reply {:?}", i, reply),
                }
            }
        }
        for h in held.iter().flatten() {
            within_expiry(conn, &keys, i, h, &mut clocks)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_queue_serves_live_waiters_in_arrival_order_within_each_kind_s_limit(
        kinds in kinds(),
        ttls in ttls(),
        listens in proptest::collection::vec(any::<bool>(), WAITERS),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        check(&kinds, &ttls, &listens, &steps)?;
    }
}

/// Several keys: each waiter asks for a set of them (in its own order), all or nothing.
mod several {
    use super::*;

    const KEYS: usize = 3;

    #[derive(Debug, Clone)]
    enum Step {
        Ask(usize),
        Release(usize),
        Leave(usize),
        Pause(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (0..WAITERS).prop_map(Step::Ask),
            2 => (0..WAITERS).prop_map(Step::Release),
            1 => (0..QUEUERS).prop_map(Step::Leave),
            2 => (0u64..180).prop_map(Step::Pause),
        ]
    }

    /// Each waiter's keys: a non-empty set of the three, in a generated order.
    fn wants() -> impl Strategy<Value = Vec<Vec<usize>>> {
        let one = proptest::sample::subsequence((0..KEYS).collect::<Vec<_>>(), 1..=KEYS).prop_shuffle();
        proptest::collection::vec(one, WAITERS)
    }

    fn ask(
        conn: &mut redis::Connection,
        keys: &[Keys],
        w: usize,
        join: bool,
        arrival: Option<u64>,
    ) -> Vec<Value> {
        let mut script = scripts::ACQUIRE.prepare_invoke();
        for k in keys {
            script.key(&k.lock).key(&k.fence).key(&k.queue).key(&k.queue_expiry).key(&k.queue_seq);
            script.key(&k.holders);
        }
        script.arg(value(w, Kind::Exclusive)).arg(60_000).arg(60_000);
        script.arg(if join { "1" } else { "0" }).arg(ENTRY.as_millis() as u64).arg(arrival.unwrap_or(0));
        for k in keys {
            script.arg(&k.wake_prefix);
        }
        script.invoke(conn).expect("ACQUIRE")
    }

    fn check(wants: &[Vec<usize>], steps: &[Step]) -> Result<(), TestCaseError> {
        let mut server = Server::start();
        let conn = &mut server.conn;
        let all: Vec<Keys> = (0..KEYS).map(|k| Keys::new(format!("lock:several:{k}").as_bytes())).collect();
        let keys_of = |w: usize| -> Vec<Keys> { wants[w].iter().map(|&k| all[k].clone()).collect() };
        let shares = |a: usize, b: usize| wants[a].iter().any(|k| wants[b].contains(k));
        let mut waiters = vec![Waiter::default(); WAITERS];
        let mut holding: Vec<usize> = Vec::new();
        let mut fences = [0i64; KEYS];
        for (i, step) in steps.iter().enumerate() {
            match *step {
                Step::Pause(ms) => std::thread::sleep(Duration::from_millis(ms)),
                Step::Release(h) => {
                    if holding.is_empty() {
                        continue;
                    }
                    let h = holding.remove(h % holding.len());
                    let mut script = scripts::RELEASE.prepare_invoke();
                    for k in keys_of(h) {
                        script.key(&k.lock).key(&k.fence).key(&k.queue).key(&k.queue_expiry);
                        script.key(&k.holders);
                    }
                    script.arg(value(h, Kind::Exclusive)).arg(0).arg("0").arg("").arg(0);
                    script.arg(GRANT_MS).arg(60_000);
                    for k in keys_of(h) {
                        script.arg(&k.released_channel).arg(&k.wake_prefix);
                    }
                    let reply: Vec<Value> = script.invoke(conn).expect("RELEASE");
                    prop_assert!(reply[1..].iter().all(|o| *o == Value::Int(1)), "step {}: {:?}", i, reply);
                    // Waiters for several keys never listen for a lock handed over.
                    for k in keys_of(h) {
                        let held: bool = redis::cmd("EXISTS").arg(&k.lock).query(conn).unwrap();
                        prop_assert!(!held, "step {}: a released key is held", i);
                    }
                }
                Step::Leave(w) => {
                    if holding.contains(&w) {
                        continue;
                    }
                    let mut script = scripts::LEAVE.prepare_invoke();
                    for k in keys_of(w) {
                        script.key(&k.lock).key(&k.queue).key(&k.queue_expiry);
                    }
                    script.arg(value(w, Kind::Exclusive));
                    for k in keys_of(w) {
                        script.arg(&k.wake_prefix);
                    }
                    let _: i64 = script.invoke(conn).expect("LEAVE");
                    waiters[w].queued = false;
                }
                Step::Ask(w) => {
                    if holding.contains(&w) {
                        continue;
                    }
                    let join = w < QUEUERS;
                    let now = Instant::now();
                    let mine = waiters[w].arrival;
                    let free = holding.iter().all(|h| !shares(*h, w));
                    // Waiters that share a key with this run and come before it.
                    let before = |x: usize| x != w && shares(x, w) && waiters[x].before(mine);
                    let surely_behind = (0..WAITERS).any(|x| before(x) && waiters[x].surely_live(now));
                    let surely_first = join
                        && (waiters[w].surely_live(now) || mine.is_none())
                        && (0..WAITERS).all(|x| !before(x) || waiters[x].surely_lapsed(now));
                    let reply = ask(conn, &keys_of(w), w, join, mine);
                    let after = Instant::now();
                    match reply.first() {
                        Some(Value::Int(1)) => {
                            prop_assert!(free, "step {}: {} granted while {:?} hold", i, w, holding);
                            prop_assert!(!surely_behind, "step {}: {} jumped a queue: {:?}", i, w, waiters);
                            prop_assert_eq!(reply.len(), wants[w].len() + 1, "step {}: one fence a key", i);
                            for (&k, f) in wants[w].iter().zip(&reply[1..]) {
                                let Value::BulkString(f) = f else {
                                    return Err(TestCaseError::fail("fence"));
                                };
                                let f: i64 = std::str::from_utf8(f).unwrap().parse().unwrap();
                                prop_assert!(
                                    f > fences[k],
                                    "step {}: key {}'s fence {} after {}",
                                    i,
                                    k,
                                    f,
                                    fences[k]
                                );
                                fences[k] = f;
                            }
                            holding.push(w);
                            waiters[w].queued = false;
                        }
                        Some(Value::Int(0 | 3)) => {
                            prop_assert!(
                                !(free && surely_first),
                                "step {}: {} could hold every key and was first: {:?} {:?} {:?}",
                                i,
                                w,
                                reply,
                                holding,
                                waiters
                            );
                            if join {
                                let arrival = match reply.first() {
                                    Some(Value::Int(0)) => int(reply.get(4)),
                                    _ => int(reply.get(3)),
                                };
                                let Some(arrival) = arrival else {
                                    return Err(TestCaseError::fail(format!("step {i}: {reply:?}")));
                                };
                                if let Some(a) = mine {
                                    prop_assert_eq!(a, arrival, "step {}: {} keeps its arrival", i, w);
                                }
                                // One arrival number in every queue of the run: the same order everywhere.
                                for k in keys_of(w) {
                                    let score: Option<u64> = redis::cmd("ZSCORE")
                                        .arg(&k.queue)
                                        .arg(value(w, Kind::Exclusive))
                                        .query(conn)
                                        .unwrap();
                                    prop_assert_eq!(
                                        score,
                                        Some(arrival),
                                        "step {}: {}'s place at a key",
                                        i,
                                        w
                                    );
                                }
                                waiters[w].arrival = Some(arrival);
                                waiters[w].queued = true;
                                waiters[w].kept = Some(now);
                                waiters[w].kept_done = Some(after);
                            }
                        }
                        _ => prop_assert!(false, "step {}: unexpected reply {:?}", i, reply),
                    }
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn several_keys_are_taken_together_and_queued_in_one_order(
            wants in wants(),
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            check(&wants, &steps)?;
        }
    }
}

/// A waiter that joins again after Redis lost the queue (and its counters) gets its arrival
/// number back, in the queue, and the counter is raised to it.
#[test]
fn a_waiter_joins_again_with_its_arrival_number_after_data_loss() {
    let mut server = Server::start();
    let conn = &mut server.conn;
    let keys = Keys::new(b"lock:rejoin");
    let _: () = redis::cmd("SET").arg(&keys.lock).arg("someone").arg("PX").arg(60_000).query(conn).unwrap();
    let reply = ask(conn, &keys, &value(1, Kind::Exclusive), true, Some(7));
    assert_eq!(int(reply.get(3)), Some(1), "in the queue again: {reply:?}");
    assert_eq!(int(reply.get(4)), Some(7), "with its arrival number: {reply:?}");
    let counter: u64 = redis::cmd("GET").arg(&keys.queue_seq).query(conn).unwrap();
    assert_eq!(counter, 7, "the counter raised to it");
    let next = ask(conn, &keys, &value(2, Kind::Exclusive), true, None);
    assert_eq!(int(next.get(4)), Some(8), "a new arrival after it: {next:?}");
}

fn fence_of(v: Option<&Value>) -> Option<i64> {
    super::replies::fence(v)
}

/// A waiter tells a lock handed over after its last attempt (the fence in the message is above
/// the counter that attempt found) from one handed over before it, which has lapsed since:
/// that attempt found the counter at least as high as the fence it was handed.
#[test]
fn a_handover_after_an_attempt_has_a_fence_above_what_that_attempt_found() {
    let mut server = Server::start();
    let keys = Keys::new(b"lock:seen");
    let _listener = listen(&server, &keys, 1);
    let conn = &mut server.conn;
    let (holder, waiter, other) =
        (value(0, Kind::Exclusive), value(1, Kind::Exclusive), value(4, Kind::Exclusive));
    assert_eq!(ask(conn, &keys, &holder, false, None).first(), Some(&Value::Int(1)), "granted");
    let busy = ask(conn, &keys, &waiter, true, None);
    assert_eq!(busy.first(), Some(&Value::Int(0)), "{busy:?}");
    let seen = fence_of(busy.get(8)).expect("the counter it found");
    release(conn, &keys, &holder);
    assert_eq!(string_at(conn, &keys.lock).as_deref(), Some(waiter.as_str()), "handed over");
    let handed: i64 = redis::cmd("GET").arg(&keys.fence).query(conn).unwrap();
    assert!(handed > seen, "handed over after the attempt: {handed} > {seen}");
    // The waiter does not take it up in time (frozen): it lapses, and another run takes it.
    let _: () = redis::cmd("PEXPIRE").arg(&keys.lock).arg(1).query(conn).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let taken = ask(conn, &keys, &other, false, None);
    assert_eq!(taken.first(), Some(&Value::Int(1)), "the other run took it: {taken:?}");
    let again = ask(conn, &keys, &waiter, true, None);
    assert_eq!(again.first(), Some(&Value::Int(0)), "{again:?}");
    let seen_after = fence_of(again.get(8)).expect("the counter it found");
    assert!(handed <= seen_after, "the message of the lapsed handover ({handed}) is older than {seen_after}");
}

/// A waiter that gives up after a release handed it the lock (its wait ran out, a signal) gives
/// the lock back with its place.
#[test]
fn a_waiter_that_leaves_gives_back_a_lock_handed_over_to_it() {
    let mut server = Server::start();
    let keys = Keys::new(b"lock:leave");
    let _listener = listen(&server, &keys, 1);
    let conn = &mut server.conn;
    let (holder, waiter) = (value(0, Kind::Exclusive), value(1, Kind::Exclusive));
    ask(conn, &keys, &holder, false, None);
    ask(conn, &keys, &waiter, true, None);
    release(conn, &keys, &holder);
    assert_eq!(string_at(conn, &keys.lock).as_deref(), Some(waiter.as_str()), "handed over");
    let mut script = scripts::LEAVE.key(&keys.lock);
    script.key(&keys.queue).key(&keys.queue_expiry).arg(&waiter).arg(&keys.wake_prefix);
    let _: i64 = script.invoke(conn).expect("LEAVE");
    let held: bool = redis::cmd("EXISTS").arg(&keys.lock).query(conn).unwrap();
    assert!(!held, "given back");
    // Someone else's lock is never touched by a leaving waiter.
    ask(conn, &keys, &holder, false, None);
    let _: i64 = script.invoke(conn).expect("LEAVE");
    assert_eq!(string_at(conn, &keys.lock).as_deref(), Some(holder.as_str()));
}

/// A queue of waiters that all died (their entries lapsed) costs one call no more than 100
/// removals: until they are gone the lock is busy for a run that does not queue (they count as
/// queued), and each call removes 100 more, so the run is granted within a few calls.
#[test]
fn a_call_removes_at_most_a_hundred_lapsed_entries() {
    let mut server = Server::start();
    let conn = &mut server.conn;
    let keys = Keys::new(b"lock:lapsed");
    for i in 0..1000 {
        let member = value(100 + i, Kind::Exclusive);
        let _: () = redis::cmd("ZADD").arg(&keys.queue).arg(i + 1).arg(&member).query(conn).unwrap();
        let _: () = redis::cmd("ZADD").arg(&keys.queue_expiry).arg(1).arg(&member).query(conn).unwrap();
    }
    let left =
        |conn: &mut redis::Connection| -> u64 { redis::cmd("ZCARD").arg(&keys.queue).query(conn).unwrap() };
    for call in 1..=9 {
        let reply = ask(conn, &keys, &value(0, Kind::Exclusive), false, None);
        assert_eq!(reply.first(), Some(&Value::Int(3)), "call {call}: busy while some are left: {reply:?}");
        assert_eq!(left(conn), 1000 - 100 * call, "call {call} removed 100");
    }
    // The tenth removes the last hundred, and finds the lock free.
    let reply = ask(conn, &keys, &value(0, Kind::Exclusive), false, None);
    assert_eq!(reply.first(), Some(&Value::Int(1)), "granted once they are gone: {reply:?}");
    assert_eq!(left(conn), 0);
}
