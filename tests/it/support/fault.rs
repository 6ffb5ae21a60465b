//! Fault injection: a TCP proxy between the wrapper and `redis-server` that misbehaves on
//! command, and the seeded generator the soak draws its schedule of faults from.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::lock;

/// What the proxy does with the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// Forward both ways, holding every reply back this long.
    Latency(Duration),
    /// Accept connections, swallow requests, never answer.
    Blackhole,
    /// Deliver requests to Redis, swallow its replies.
    DropReplies,
    /// Reset every connection, and every new one as soon as it is accepted.
    Reset,
}

/// How many chunks of traffic the proxy handled, by fate.
#[derive(Debug, Default, Clone, Copy)]
#[allow(dead_code)] // some counts are only shown, by Debug, in failure messages
pub struct ProxyCounts {
    pub connections: u64,
    pub requests_forwarded: u64,
    pub requests_swallowed: u64,
    pub replies_forwarded: u64,
    pub replies_dropped: u64,
    pub resets: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    requests_forwarded: AtomicU64,
    requests_swallowed: AtomicU64,
    replies_forwarded: AtomicU64,
    replies_dropped: AtomicU64,
    resets: AtomicU64,
}

/// One proxied connection. It is *tainted* once it lost traffic: its byte stream no longer
/// pairs requests with replies, which real TCP never does, so it is reset when the fault ends.
struct Link {
    client: TcpStream,
    upstream: TcpStream,
    tainted: AtomicBool,
    closed: AtomicBool,
}

impl Link {
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.upstream.shutdown(Shutdown::Both);
    }

    /// Closes with a TCP reset towards the client.
    fn reset(&self) {
        abort_on_close(&self.client);
        self.close();
    }
}

struct Shared {
    upstream_port: u16,
    mode: Mutex<Mode>,
    links: Mutex<Vec<Arc<Link>>>,
    counters: Counters,
    stop: AtomicBool,
}

impl Shared {
    fn mode(&self) -> Mode {
        *lock(&self.mode)
    }
}

/// A TCP proxy on a free loopback port in front of a Redis on `upstream_port`. Each accepted
/// connection gets its own upstream connection, so a restarted Redis is used by new ones.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    pub fn start(upstream_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            upstream_port,
            mode: Mutex::new(Mode::Pass),
            links: Mutex::new(Vec::new()),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || accept_loop(&listener, &accepting));
        FaultProxy { port, shared }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Switches the behaviour. Leaving a lossy mode resets the connections that lost traffic;
    /// entering `Reset` resets them all.
    pub fn set(&self, mode: Mode) {
        *lock(&self.shared.mode) = mode;
        let links = lock(&self.shared.links).clone();
        for link in links {
            let reset = match mode {
                Mode::Reset => true,
                Mode::Pass | Mode::Latency(_) => link.tainted.load(Ordering::SeqCst),
                Mode::Blackhole | Mode::DropReplies => false,
            };
            if reset && !link.closed.load(Ordering::SeqCst) {
                self.shared.counters.resets.fetch_add(1, Ordering::Relaxed);
                link.reset();
            }
        }
    }

    /// Resets every open connection once (the mode stays as it is).
    pub fn reset_all(&self) {
        let links = lock(&self.shared.links).clone();
        for link in links.iter().filter(|l| !l.closed.load(Ordering::SeqCst)) {
            self.shared.counters.resets.fetch_add(1, Ordering::Relaxed);
            link.reset();
        }
    }

    pub fn counts(&self) -> ProxyCounts {
        let c = &self.shared.counters;
        ProxyCounts {
            connections: c.connections.load(Ordering::Relaxed),
            requests_forwarded: c.requests_forwarded.load(Ordering::Relaxed),
            requests_swallowed: c.requests_swallowed.load(Ordering::Relaxed),
            replies_forwarded: c.replies_forwarded.load(Ordering::Relaxed),
            replies_dropped: c.replies_dropped.load(Ordering::Relaxed),
            resets: c.resets.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_millis(200));
        for link in lock(&self.shared.links).iter() {
            link.close();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        if shared.mode() == Mode::Reset {
            shared.counters.resets.fetch_add(1, Ordering::Relaxed);
            abort_on_close(&client);
            continue;
        }
        let upstream = TcpStream::connect_timeout(
            &([127, 0, 0, 1], shared.upstream_port).into(),
            Duration::from_millis(500),
        );
        let Ok(upstream) = upstream else {
            // Redis is down (restarting): the client sees its connection reset.
            abort_on_close(&client);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (Ok(client_r), Ok(upstream_r)) = (client.try_clone(), upstream.try_clone()) else {
            continue;
        };
        let link = Arc::new(Link {
            client,
            upstream,
            tainted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        {
            let mut links = lock(&shared.links);
            links.retain(|l| !l.closed.load(Ordering::SeqCst));
            links.push(Arc::clone(&link));
        }
        let (s1, l1) = (Arc::clone(shared), Arc::clone(&link));
        std::thread::spawn(move || pump(client_r, &s1, &l1, Direction::Requests));
        let (s2, l2) = (Arc::clone(shared), link);
        std::thread::spawn(move || pump(upstream_r, &s2, &l2, Direction::Replies));
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Requests,
    Replies,
}

/// Moves one direction of a link's traffic, deciding each chunk's fate by the current mode.
fn pump(mut from: TcpStream, shared: &Shared, link: &Link, direction: Direction) {
    let mut buf = vec![0u8; 16 * 1024];
    let c = &shared.counters;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let deliver = match (shared.mode(), direction) {
            (Mode::Reset, _) => break,
            (Mode::Blackhole, Direction::Requests) => {
                c.requests_swallowed.fetch_add(1, Ordering::Relaxed);
                false
            }
            (Mode::Blackhole | Mode::DropReplies, Direction::Replies) => {
                c.replies_dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
            (Mode::Latency(d), Direction::Replies) => {
                std::thread::sleep(d);
                true
            }
            _ => true,
        };
        if !deliver {
            link.tainted.store(true, Ordering::SeqCst);
            continue;
        }
        let to = match direction {
            Direction::Requests => &link.upstream,
            Direction::Replies => &link.client,
        };
        if (&*to).write_all(chunk).is_err() {
            break;
        }
        match direction {
            Direction::Requests => c.requests_forwarded.fetch_add(1, Ordering::Relaxed),
            Direction::Replies => c.replies_forwarded.fetch_add(1, Ordering::Relaxed),
        };
    }
    if shared.mode() == Mode::Reset {
        link.reset();
    } else {
        link.close();
    }
}

/// Makes the socket's close send a TCP reset (SO_LINGER with a zero timeout).
fn abort_on_close(stream: &TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid socket descriptor that `stream` keeps open for the call, and a pointer to
    // a properly sized and initialised `linger` for the duration of the call.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A small deterministic generator (SplitMix64): the soak's schedule is reproducible from its
/// printed seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A seed from the environment variable `var`, or else from the clock.
    pub fn seed_from_env(var: &str) -> u64 {
        std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
        })
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next_u64() % (hi - lo + 1))
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}
