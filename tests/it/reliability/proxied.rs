//! The target of the phases through the fault proxy: one Redis, and how each fault is injected
//! there.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicU16;
use std::time::{Duration, Instant};

use super::harness::{Disruption, Injected, Reach, Shared, Target, await_holder};
use super::soak::{RENEW_EVERY, TTL};
use super::{LIMIT, SLACK};
use crate::support::fault::{FaultProxy, Mode, Rng};
use crate::support::oracle::{Occupant, Oracle};
use crate::support::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a fault lasts (and any latency it adds), and — for a fault that outlasts the
/// lease or loses the lock — by when it must have stopped a command present at its start.
struct Plan {
    length: Duration,
    latency: Duration,
    stops_within: Option<Duration>,
}

impl Disruption {
    fn plan(self, rng: &mut Rng) -> Plan {
        let (length, latency) = match self {
            Disruption::RedisPauseShort => (rng.millis(200, 800), Duration::ZERO),
            Disruption::BlackholeShort | Disruption::ReplyLossShort => (rng.millis(200, 700), Duration::ZERO),
            Disruption::RedisPauseLong | Disruption::BlackholeLong | Disruption::ReplyLossLong => {
                (TTL + rng.millis(300, 1200), Duration::ZERO)
            }
            // The wrapper's request timeout here is a third of the 1278 ms renewal slack: 426 ms.
            Disruption::LatencyLow => (rng.millis(1500, 2500), rng.millis(20, 150)),
            Disruption::LatencyHigh => (rng.millis(1500, 2500), rng.millis(500, 800)),
            Disruption::WrapperPauseShort => (rng.millis(50, 300), Duration::ZERO),
            Disruption::WrapperPauseLong => (TTL + rng.millis(800, 1200), Duration::ZERO),
            Disruption::ClientKill
            | Disruption::ConnectionReset
            | Disruption::RedisRestart
            | Disruption::KeyDeleted
            | Disruption::KeyExpired
            | Disruption::KeyForceReleased => (Duration::ZERO, Duration::ZERO),
            Disruption::FailoverForced
            | Disruption::FailoverFrozen
            | Disruption::FailoverLossyDel
            | Disruption::FailoverLossyExpire => panic!("{} is injected by `Sentinels::inject`", self.name()),
        };
        let stops_within = match self {
            // Stopped by the lease deadline, at most a TTL after the last renewal.
            Disruption::RedisPauseLong | Disruption::BlackholeLong | Disruption::ReplyLossLong => Some(TTL),
            // Stopped as soon as its wrapper runs again.
            Disruption::WrapperPauseLong => Some(length),
            // Stopped at the next renewal.
            f if f.loses_data() => Some(RENEW_EVERY + SLACK),
            _ => None,
        };
        Plan { length, latency, stops_within }
    }
}

/// Waits (bounded) for a command to be present — for a fault that must stop it, one with
/// enough work ahead that it would still be running then — and injects the fault.
fn inject(
    fault: Disruption,
    redis: &mut RedisServer,
    proxy: &FaultProxy,
    shared: &Shared,
    oracle: &Oracle,
    rng: &mut Rng,
) -> Injected {
    let plan = fault.plan(rng);
    let holder = await_holder(shared, oracle, plan.stops_within.map(|d| d + SLACK));
    let start = Instant::now();
    let mut paused = None;
    let mut revived = false;
    match fault {
        Disruption::RedisPauseShort | Disruption::RedisPauseLong => {
            redis.freeze();
            std::thread::sleep(plan.length);
            redis.thaw();
        }
        Disruption::ClientKill => {
            redis.cmd::<i64>(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
            redis.cmd::<i64>(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"]);
        }
        Disruption::LatencyLow
        | Disruption::LatencyHigh
        | Disruption::BlackholeShort
        | Disruption::BlackholeLong => {
            proxy.set(match fault {
                Disruption::BlackholeShort | Disruption::BlackholeLong => Mode::Blackhole,
                _ => Mode::Latency(plan.latency),
            });
            std::thread::sleep(plan.length);
            proxy.set(Mode::Pass);
        }
        Disruption::ReplyLossShort | Disruption::ReplyLossLong => {
            proxy.set(Mode::DropReplies);
            std::thread::sleep(plan.length);
            proxy.set(Mode::Pass);
        }
        Disruption::ConnectionReset => proxy.reset_all(),
        Disruption::WrapperPauseShort | Disruption::WrapperPauseLong => {
            // The holder's wrapper (the command's parent), if it is still one of ours.
            let stopped = holder.map(|h| h.ppid).filter(|&pid| {
                let wrappers = lock(&shared.wrappers);
                wrappers.contains(&pid) && kill(Pid::from_raw(pid), Signal::SIGSTOP).is_ok()
            });
            std::thread::sleep(plan.length);
            if let Some(pid) = stopped {
                let wrappers = lock(&shared.wrappers);
                if wrappers.contains(&pid) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
                }
                paused = Some((pid, Instant::now()));
            }
        }
        Disruption::RedisRestart => redis.restart_empty(),
        Disruption::KeyDeleted => {
            for key in &shared.keys {
                redis.cmd::<i64>(&[b"DEL", key.as_bytes()]);
            }
        }
        Disruption::KeyExpired => {
            let values = |redis: &RedisServer| -> Vec<Option<Vec<u8>>> {
                shared.keys.iter().map(|key| redis.cmd(&[b"GET", key.as_bytes()])).collect()
            };
            let before = values(redis);
            for key in &shared.keys {
                redis.cmd::<i64>(&[b"PEXPIRE", key.as_bytes(), b"1"]);
            }
            // A renewal that reaches Redis within the key's last millisecond or two finds it
            // still there and extends it: then nothing was lost, and no one must stop.
            std::thread::sleep(Duration::from_millis(10));
            revived = before.iter().any(Option::is_some) && values(redis) == before;
        }
        Disruption::KeyForceReleased => {
            for key in &shared.keys {
                let r = run(
                    Command::new(bin()).args([
                        "release",
                        "--key",
                        key,
                        "--force",
                        "--redis-url",
                        &redis.url(),
                    ]),
                    LIMIT,
                );
                assert!(r.code == 0 || r.code == 1, "release --force: {} {}", r.code, r.stderr);
            }
        }
        Disruption::FailoverForced
        | Disruption::FailoverFrozen
        | Disruption::FailoverLossyDel
        | Disruption::FailoverLossyExpire => unreachable!("planned above"),
    }
    // A data-loss fault takes effect when it is complete (a restart can take a while on a
    // loaded machine): its holder must be stopped only if its work outlasts the next renewal
    // after that; one whose work ended first was not run without the lock.
    let end = Instant::now();
    let must_stop = |h: &Occupant| match plan.stops_within {
        _ if revived => false,
        Some(within) if fault.loses_data() => h.done_by > end + within,
        Some(_) => true,
        None => false,
    };
    Injected {
        fault,
        start,
        lifted: Instant::now() + plan.latency,
        paused,
        hit_holder: holder.is_some(),
        victim: holder.filter(must_stop).map(|h| h.ppid),
        failover: None,
    }
}

/// One Redis, which the wrappers reach through a [`FaultProxy`].
pub(super) struct Proxied {
    redis: RedisServer,
    proxy: FaultProxy,
    watched: Arc<AtomicU16>,
}

impl Proxied {
    pub(super) fn start() -> Self {
        let redis = RedisServer::start();
        let proxy = FaultProxy::start(redis.port);
        let watched = Arc::new(AtomicU16::new(redis.port));
        Proxied { redis, proxy, watched }
    }
}

impl Target for Proxied {
    fn reach(&self) -> Vec<Reach> {
        vec![Reach::url(&self.proxy.url())]
    }

    fn watched(&self) -> Arc<AtomicU16> {
        Arc::clone(&self.watched)
    }

    fn gap(&self, last: Option<&Injected>, rng: &mut Rng) -> Duration {
        // Data-loss faults get a longer pause after them, so that any overlap they cause (a
        // waiter retries at the holder's PTTL, up to 2 s later) starts before the next fault.
        if last.is_some_and(|f| f.fault.loses_data()) { rng.millis(2200, 2600) } else { rng.millis(400, 800) }
    }

    fn inject(&mut self, fault: Disruption, shared: &Shared, oracle: &Oracle, rng: &mut Rng) -> Injected {
        inject(fault, &mut self.redis, &self.proxy, shared, oracle, rng)
    }

    fn exists(&self, key: &str) -> bool {
        self.redis.exists(key.as_bytes())
    }

    fn log(&self) -> String {
        format!("redis log:\n{}", self.redis.log().lines().rev().take(30).collect::<Vec<_>>().join("\n"))
    }
}
