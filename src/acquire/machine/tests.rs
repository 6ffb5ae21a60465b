//! The machine driven by generated event orders on a simulated clock, against a model of
//! what Redis answers and what wakes a waiter, checking the invariants of the machine's doc
//! comment after every step. The clock is a plain `Instant` that the world moves forward: the
//! machine never reads one.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What Redis answers a request.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Granted,
    Done,
    /// `ended`: the holder is a process of this host that has ended.
    Busy {
        pttl_ms: Option<u64>,
        position: Option<u64>,
        ended: bool,
    },
    Queued {
        position: Option<u64>,
    },
    Unavailable,
    Transient,
    Denied,
}

/// What the subscription brings.
#[derive(Debug, Clone, Copy)]
enum WakeEv {
    Turn,
    HandedOver { grant_ms: u64, since: bool },
    Ended,
    MasterChanged,
}

/// Something that happens in the world, applied when the machine waits for its kind (and
/// dropped otherwise).
#[derive(Debug, Clone, Copy)]
enum Ev {
    /// The answer to the request out (an attempt, or a subscription: in place unless a
    /// fault), this long after it went out.
    Reply { latency_ms: u64, reply: Reply },
    /// During a busy wait, this wake-up, after this long. Past the timer, it comes first only
    /// `stopped`: the process was stopped across both, and then either may be read first.
    Wake { after_ms: u64, wake: WakeEv, stopped: bool },
    /// The wait's timer fires, this late (a stopped process, a slow scheduler).
    Timer { late_ms: u64 },
    /// A signal, after this long, while a request is out or during a wait.
    Signal { after_ms: u64 },
    /// The answer to the nested-run check.
    Nested(bool),
}

#[derive(Debug, Clone)]
struct Case {
    /// `None`: `--wait forever`.
    wait_ms: Option<u64>,
    grace_ms: u64,
    ttl_ms: u64,
    fail_open: bool,
    queues: bool,
    nested: bool,
    two_keys: bool,
    seed: u64,
    events: Vec<Ev>,
}

impl Case {
    fn rules(&self) -> Rules {
        let keys: Vec<Vec<u8>> =
            if self.two_keys { vec![b"a".to_vec(), b"b".to_vec()] } else { vec![b"a".to_vec()] };
        Rules {
            wait: self.wait_ms.map(ms),
            kill_grace: ms(self.grace_ms),
            ttl: ms(self.ttl_ms),
            fail_open: self.fail_open,
            queues: self.queues,
            spans_slots: self.two_keys && !self.queues,
            key: keys[0].clone(),
            keys,
            outer_keys: self.nested.then(|| vec![b"outer".to_vec()]),
        }
    }
}

/// A jitter from a seed: mostly uniform, sometimes its whole ceiling or nothing.
fn jitter(seed: u64) -> Jitter {
    let mut x = seed | 1;
    Box::new(move |base, failures, cap| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let ceiling = base.saturating_mul(1 << failures.min(16)).min(cap);
        match x % 8 {
            0 => ceiling,
            1 => Duration::ZERO,
            _ => ceiling.mul_f64((x >> 11) as f64 / (1u64 << 53) as f64),
        }
    })
}

fn reply() -> impl Strategy<Value = Reply> {
    let position = proptest::option::of(1u64..4);
    prop_oneof![
        4 => Just(Reply::Granted),
        1 => Just(Reply::Done),
        8 => (
            proptest::option::of(prop_oneof![Just(50u64), Just(800), Just(5000)]),
            position.clone(),
            prop_oneof![3 => Just(false), 1 => Just(true)],
        )
            .prop_map(|(pttl_ms, position, ended)| Reply::Busy { pttl_ms, position, ended }),
        5 => position.prop_map(|position| Reply::Queued { position }),
        5 => Just(Reply::Unavailable),
        3 => Just(Reply::Transient),
        1 => Just(Reply::Denied),
    ]
}

fn wake() -> impl Strategy<Value = WakeEv> {
    prop_oneof![
        2 => Just(WakeEv::Turn),
        3 => (prop_oneof![Just(200u64), Just(1300), Just(5000)], any::<bool>())
            .prop_map(|(grant_ms, since)| WakeEv::HandedOver { grant_ms, since }),
        1 => Just(WakeEv::Ended),
        1 => Just(WakeEv::MasterChanged),
    ]
}

fn event() -> impl Strategy<Value = Ev> {
    prop_oneof![
        10 => (prop_oneof![4 => 0u64..30, 1 => 500u64..3000], reply())
            .prop_map(|(latency_ms, reply)| Ev::Reply { latency_ms, reply }),
        8 => (prop_oneof![3 => 0u64..400, 1 => 400u64..2000], wake(), proptest::bool::weighted(0.3))
            .prop_map(|(after_ms, wake, stopped)| Ev::Wake { after_ms, wake, stopped }),
        5 => prop_oneof![4 => Just(0u64), 1 => 1u64..400].prop_map(|late_ms| Ev::Timer { late_ms }),
        1 => (0u64..3000).prop_map(|after_ms| Ev::Signal { after_ms }),
        2 => any::<bool>().prop_map(Ev::Nested),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            prop_oneof![Just(Some(0u64)), Just(Some(300)), Just(Some(1500)), Just(Some(4000)), Just(None)],
            prop_oneof![Just(5u64), Just(200)],
        ),
        (prop_oneof![Just(1000u64), Just(5000)], any::<bool>(), any::<bool>()),
        (any::<bool>(), any::<bool>(), any::<u64>()),
        proptest::collection::vec(event(), 0..40),
    )
        .prop_map(
            |((wait_ms, grace_ms), (ttl_ms, fail_open, queues), (nested, two_keys, seed), events)| Case {
                wait_ms,
                grace_ms,
                ttl_ms,
                fail_open,
                queues,
                nested,
                two_keys,
                seed,
                events,
            },
        )
}

/// What the machine waits for.
#[derive(Debug, Clone, Copy)]
enum Awaiting {
    Subscribe,
    Attempt,
    Nested,
    Sleep(Wait),
}

/// The input that ended the machine's last wait, as far as the checks need it.
#[derive(Debug, Clone, Copy)]
enum Last {
    None,
    Granted(Lease),
    Done,
    Busy,
    /// A fault, as the reply that stood for it (a lock taken too late counts as unreachable).
    Fault(Reply),
    /// A handover, with the lease it leaves counted from the attempt's start.
    HandedOver {
        lease: Lease,
        since: bool,
    },
    /// A signal, and what the machine was waiting for when it came.
    Signal {
        during: Awaiting,
    },
    Other,
}

struct World {
    case: Case,
    rules: Rules,
    events: std::vec::IntoIter<Ev>,
    now: Instant,
    machine: Machine,
    awaiting: Option<Awaiting>,
    /// When the current attempt began (its subscription included), and when its request went out.
    began: Instant,
    request_out: Instant,
    /// The current attempt follows a busy wait.
    after_busy_wait: bool,
    /// An attempt that joins the queue went out.
    joined: bool,
    /// Since the current attempt began: a Leave or an Abandon, and an Abandon.
    gave_back: bool,
    abandoned: bool,
    /// An attempt was answered "not now" since the last busy answer.
    transient_since_busy: bool,
    last: Last,
    queued_notes: u32,
    unqueued_notes: u32,
    nested_checks: u32,
}

impl World {
    fn new(case: Case) -> Self {
        let now = Instant::now();
        let rules = case.rules();
        let machine = Machine::new(rules.clone(), jitter(case.seed), now);
        World {
            events: case.events.clone().into_iter(),
            case,
            rules,
            now,
            machine,
            awaiting: None,
            began: now,
            request_out: now,
            after_busy_wait: false,
            joined: false,
            gave_back: false,
            abandoned: false,
            transient_since_busy: false,
            last: Last::None,
            queued_notes: 0,
            unqueued_notes: 0,
            nested_checks: 0,
        }
    }

    fn queued(&self) -> bool {
        self.rules.waits() && self.rules.queues
    }

    fn start(&mut self) {
        let mut out = Vec::new();
        self.machine.start(self.now, &mut out);
        self.carry_out(out);
        self.check();
    }

    fn input(&mut self, input: Input) {
        let mut out = Vec::new();
        self.machine.handle(input, self.now, &mut out);
        self.carry_out(out);
        self.check();
    }

    /// What the shell does: carry out the actions in order, each answer fed back in its turn.
    fn carry_out(&mut self, out: Vec<Action>) {
        let was = self.awaiting.take();
        let n = out.len();
        for (i, action) in out.into_iter().enumerate() {
            assert!(self.awaiting.is_none(), "an action after one that awaits an answer: {action:?}");
            match action {
                Action::Subscribe => {
                    assert!(self.rules.waits(), "subscribed for --wait 0");
                    self.begin_attempt();
                    self.awaiting = Some(Awaiting::Subscribe);
                }
                Action::Attempt { join } => {
                    assert_eq!(join, self.rules.waits(), "joins the queue exactly when it waits");
                    if !matches!(was, Some(Awaiting::Subscribe)) {
                        self.begin_attempt();
                    }
                    self.request_out = self.now;
                    self.joined |= join && self.rules.queues;
                    self.awaiting = Some(Awaiting::Attempt);
                }
                Action::CheckNested { .. } => {
                    assert!(self.case.nested, "a nested-run check for a run that is not nested");
                    self.nested_checks += 1;
                    assert_eq!(self.nested_checks, 1, "the nested-run check is asked once");
                    self.awaiting = Some(Awaiting::Nested);
                }
                Action::Sleep(wait) => {
                    // Invariants 4 and 6: each wait has a timer, due by the end of the budget, and
                    // within a retry period whatever the budget (none, with --wait forever).
                    assert!(wait.until >= self.now, "a wait that ended before it began");
                    let within = |end: Option<Instant>| end.is_none_or(|end| wait.until <= end);
                    assert!(within(self.machine.outage_until()), "a wait past the outage budget");
                    if wait.wakeups {
                        assert!(within(self.machine.wait_until()), "a busy wait past --wait");
                    }
                    let period = QUEUE_KEEPALIVE.max(BUSY_RETRY_CAP + 50 * MS).max(Duration::from_secs(1));
                    assert!(wait.until <= self.now + period, "a wait longer than a retry period");
                    self.awaiting = Some(Awaiting::Sleep(wait));
                }
                Action::Leave => {
                    assert!(self.queued(), "left a queue the run never joins");
                    self.gave_back = true;
                }
                Action::Abandon => {
                    self.gave_back = true;
                    self.abandoned = true;
                }
                Action::Log(Note::Queued { .. }) => self.queued_notes += 1,
                Action::Log(Note::Unqueued { .. }) => {
                    assert!(self.rules.waits() && !self.rules.queues, "an unqueued waiter only");
                    self.unqueued_notes += 1;
                }
                Action::Unsubscribe
                | Action::PrepareToWait
                | Action::ReleaseShort
                | Action::Log(Note::NestedWait { .. } | Note::Busy { .. } | Note::Outage { .. }) => {}
            }
            if self.awaiting.is_some() {
                assert_eq!(i + 1, n, "an action after one that awaits an answer");
            }
        }
    }

    fn begin_attempt(&mut self) {
        // Invariant 1: after a busy wait, no attempt once --wait + Handover::LATE has passed.
        if self.after_busy_wait {
            assert!(
                self.machine.wait_until().is_none_or(|until| self.now <= until + Handover::LATE),
                "an attempt after the wait ran out"
            );
        }
        self.began = self.now;
        self.gave_back = false;
        self.abandoned = false;
    }

    /// The next event that applies to what the machine waits for; a default once none is left.
    fn step(&mut self) {
        let awaiting = self.awaiting.expect("the machine waits for something or has ended");
        loop {
            let ev = self.events.next();
            let input = match (awaiting, ev) {
                (Awaiting::Subscribe | Awaiting::Attempt, Some(Ev::Signal { after_ms })) => {
                    self.now += ms(after_ms);
                    self.last = Last::Signal { during: awaiting };
                    Input::Signal(Signal::SIGTERM)
                }
                (Awaiting::Subscribe, Some(Ev::Reply { latency_ms, reply })) => {
                    self.now += ms(latency_ms);
                    match self.fault(reply) {
                        Some(fault) => Input::Subscribed(Err(fault)),
                        None => {
                            self.last = Last::Other;
                            Input::Subscribed(Ok(()))
                        }
                    }
                }
                (Awaiting::Subscribe, None) => {
                    self.now += MS;
                    self.last = Last::Other;
                    Input::Subscribed(Ok(()))
                }
                (Awaiting::Attempt, Some(Ev::Reply { latency_ms, reply })) => {
                    self.now += ms(latency_ms);
                    self.answer(reply)
                }
                // Without a limit only the lock (or a signal) ends a wait.
                (Awaiting::Attempt, None) => {
                    self.now += 20 * MS;
                    self.answer(if self.rules.wait.is_none() { Reply::Granted } else { Reply::Unavailable })
                }
                (Awaiting::Nested, Some(Ev::Nested(waits))) => Input::Nested(waits),
                (Awaiting::Nested, None) => Input::Nested(false),
                (Awaiting::Sleep(wait), Some(Ev::Timer { late_ms })) => self.timer(wait, late_ms),
                (Awaiting::Sleep(wait), None) => self.timer(wait, 0),
                (Awaiting::Sleep(wait), Some(Ev::Signal { after_ms })) => {
                    if self.now + ms(after_ms) >= wait.until {
                        self.timer(wait, 0)
                    } else {
                        self.now += ms(after_ms);
                        self.last = Last::Signal { during: awaiting };
                        Input::Signal(Signal::SIGINT)
                    }
                }
                (Awaiting::Sleep(wait), Some(Ev::Wake { after_ms, wake, stopped })) if wait.wakeups => {
                    if self.now + ms(after_ms) >= wait.until && !stopped {
                        self.timer(wait, 0)
                    } else {
                        self.now += ms(after_ms);
                        self.after_busy_wait = true;
                        self.wake(wake)
                    }
                }
                _ => continue,
            };
            self.input(input);
            return;
        }
    }

    fn timer(&mut self, wait: Wait, late_ms: u64) -> Input {
        self.now = self.now.max(wait.until) + ms(late_ms);
        self.after_busy_wait = wait.wakeups;
        self.last = Last::Other;
        Input::Timer
    }

    fn wake(&mut self, wake: WakeEv) -> Input {
        self.last = Last::Other;
        match wake {
            WakeEv::Turn => Input::Turn,
            WakeEv::Ended => Input::SubscriptionEnded,
            WakeEv::MasterChanged => Input::MasterChanged,
            WakeEv::HandedOver { grant_ms, since } => {
                // Counted from the start of the attempt Redis answered before it handed over.
                let lease = Lease::handed(self.began, ms(grant_ms), self.rules.ttl);
                self.last = Last::HandedOver { lease, since };
                Input::HandedOver { fence: 7, grant: ms(grant_ms), since_last_attempt: since }
            }
        }
    }

    /// The fault a reply stands for, if any; noted as the last input.
    fn fault(&mut self, reply: Reply) -> Option<Fault> {
        let fault = match reply {
            Reply::Unavailable => Fault::Unavailable("connection refused".into()),
            Reply::Transient => {
                self.transient_since_busy = true;
                Fault::Transient("LOADING".into())
            }
            Reply::Denied => Fault::Denied("NOPERM".into()),
            _ => return None,
        };
        self.last = Last::Fault(reply);
        Some(fault)
    }

    fn answer(&mut self, reply: Reply) -> Input {
        let at = usize::from(self.case.two_keys);
        let answer = match reply {
            Reply::Granted => {
                let lease = Lease::new(self.request_out, self.rules.ttl);
                self.last = Last::Granted(lease);
                if lease.remaining(self.now) <= self.rules.kill_grace.max(KILL_AHEAD) {
                    // Taken too late to use: given back, and retried like an unreachable Redis.
                    self.last = Last::Fault(Reply::Unavailable);
                }
                Ok(Acquired::Yes { fences: vec![1], lease })
            }
            Reply::Done => {
                self.last = Last::Done;
                Ok(Acquired::AlreadyDone { record: b"host 1 0".to_vec() })
            }
            Reply::Busy { pttl_ms, position, ended } => Ok(Acquired::Busy {
                key: at,
                pttl: pttl_ms.map(ms),
                holder: b"t0 host 1 0".to_vec(),
                holding: 1,
                same_id: false,
                position,
                ended,
            }),
            Reply::Queued { position } => {
                Ok(Acquired::Queued { key: at, first: b"t1 host 2 0".to_vec(), position })
            }
            _ => Err(self.fault(reply).expect("a fault")),
        };
        if matches!(reply, Reply::Busy { .. } | Reply::Queued { .. }) {
            self.last = Last::Busy;
            self.transient_since_busy = false;
        }
        Input::Answer(answer)
    }

    fn check(&self) {
        assert!(self.queued_notes <= 1, "said the place in the queue twice");
        assert!(self.unqueued_notes <= 1, "said twice that the run has no place in a queue");
        let Some(end) = self.machine.end() else {
            // Invariant 6.
            assert!(self.awaiting.is_some(), "neither ended nor waiting for anything");
            return;
        };
        let now = self.now;
        let wait_until = self.machine.wait_until();
        let outage_over = self.machine.outage_until().is_some_and(|until| now >= until);
        let grace = self.rules.kill_grace;
        let outage = |last: Last| matches!(last, Last::Fault(Reply::Unavailable | Reply::Transient));
        match end {
            // Invariants 1 and 2.
            End::Acquired { handed_over: true, lease, .. } => {
                let Last::HandedOver { lease: expected, since } = self.last else {
                    panic!("handed over without a handover: {:?}", self.last)
                };
                assert!(since, "took a handover older than the last attempt");
                assert!(Handover::usable(&expected, now, grace), "took a handover too short to use");
                assert!(
                    wait_until.is_none_or(|until| now <= until + Handover::LATE),
                    "took a handover after the wait ran out"
                );
                assert_eq!(
                    lease.deadline(),
                    expected.deadline(),
                    "the lease counts from the attempt's start"
                );
                assert!(!self.gave_back, "gave back what it then took");
            }
            End::Acquired { handed_over: false, lease, .. } => {
                let Last::Granted(expected) = self.last else { panic!("acquired without a grant") };
                assert_eq!(lease.deadline(), expected.deadline());
                assert!(lease.remaining(now) > grace.max(KILL_AHEAD), "took a lease too short to use");
                assert!(!self.gave_back, "gave back what it then took");
            }
            End::AlreadyDone { .. } => assert!(matches!(self.last, Last::Done)),
            // Invariants 4 and 5.
            End::Unlocked { .. } => {
                assert!(self.rules.fail_open, "failed open without --fail-open");
                assert!(
                    matches!(self.last, Last::Fault(Reply::Unavailable)),
                    "failed open on {:?}",
                    self.last
                );
                assert!(!self.transient_since_busy, "failed open on a Redis that answered");
                assert!(outage_over, "failed open before the outage budget ran out");
                assert!(self.abandoned);
            }
            End::Failed { context: Context::TakingTheLock, .. } => {
                assert!(matches!(self.last, Last::Fault(Reply::Denied)), "{:?}", self.last);
            }
            End::Failed { context, .. } => {
                assert!(outage(self.last) && outage_over, "gave up on an outage before its budget");
                assert!(self.abandoned, "gave up on an attempt of unknown outcome without abandoning it");
                let transient = matches!(self.last, Last::Fault(Reply::Transient));
                let expected = match (transient, self.rules.fail_open, self.transient_since_busy) {
                    (true, ..) => Context::Answering,
                    (false, true, true) => Context::AnsweredEarlier,
                    (false, true, false) => panic!("did not fail open on an unreachable Redis"),
                    (false, false, _) => Context::Unreachable,
                };
                assert_eq!(*context, expected);
            }
            End::Busy { nested, .. } => {
                match wait_until {
                    Some(until) => assert!(now >= until, "gave up before --wait ran out"),
                    None => assert!(nested.is_some(), "gave up a wait without a limit"),
                }
                assert!(!self.joined || self.gave_back, "gave up busy without leaving the queue");
            }
            End::Interrupted(_) => {
                let Last::Signal { during } = self.last else { panic!("interrupted without a signal") };
                let unknown = match during {
                    Awaiting::Subscribe | Awaiting::Attempt => true,
                    Awaiting::Sleep(wait) => !wait.wakeups,
                    Awaiting::Nested => false,
                };
                if unknown {
                    assert!(self.abandoned, "interrupted with an attempt of unknown outcome not abandoned");
                } else {
                    assert!(!self.joined || self.gave_back, "interrupted without leaving the queue");
                }
            }
        }
    }
}

fn simulate(case: Case) {
    let mut world = World::new(case);
    world.start();
    for _ in 0..10_000 {
        if world.machine.end().is_some() {
            break;
        }
        world.step();
    }
    assert!(world.machine.end().is_some(), "the acquisition never ended");
    // Nothing moves it once it has ended.
    let mut out = Vec::new();
    world.machine.handle(Input::Timer, world.now, &mut out);
    world.machine.handle(Input::Signal(Signal::SIGTERM), world.now, &mut out);
    assert!(out.is_empty(), "acted after its end: {out:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_for_any_order_of_events(case in case()) {
        simulate(case);
    }
}

/// A machine fed by hand, on a clock moved by hand.
struct Drive {
    machine: Machine,
    start: Instant,
    now: Instant,
}

impl Drive {
    fn new(rules: Rules) -> (Self, Vec<Action>) {
        let now = Instant::now();
        // The full ceiling, every time: the longest outage waits.
        let jitter: Jitter = Box::new(|base: Duration, failures: u32, cap| {
            base.saturating_mul(1 << failures.min(16)).min(cap)
        });
        let mut drive = Drive { machine: Machine::new(rules, jitter, now), start: now, now };
        let mut out = Vec::new();
        drive.machine.start(now, &mut out);
        (drive, out)
    }

    /// Feeds `input` at `at` after the start.
    fn feed(&mut self, at: Duration, input: Input) -> Vec<Action> {
        self.now = self.start + at;
        let mut out = Vec::new();
        self.machine.handle(input, self.now, &mut out);
        out
    }
}

fn rules(wait: Duration, queues: bool, fail_open: bool) -> Rules {
    Rules {
        wait: Some(wait),
        kill_grace: 200 * MS,
        ttl: Duration::from_secs(5),
        fail_open,
        queues,
        spans_slots: false,
        key: b"k".to_vec(),
        keys: vec![b"k".to_vec()],
        outer_keys: None,
    }
}

fn busy() -> Input {
    Input::Answer(Ok(Acquired::Busy {
        key: 0,
        pttl: Some(Duration::from_secs(3)),
        holder: b"t0 host 1 0".to_vec(),
        holding: 1,
        same_id: false,
        position: Some(1),
        ended: false,
    }))
}

/// A run that does not wait, finding the lock held by a process of this host that has ended
/// (its release under way), tries again every few milliseconds for `ENDED_GRACE`, then is busy.
#[test]
fn a_holder_that_ended_here_is_waited_for_briefly() {
    let ended = || {
        Input::Answer(Ok(Acquired::Busy {
            key: 0,
            pttl: Some(Duration::from_secs(3)),
            holder: b"t0 host 1 0".to_vec(),
            holding: 1,
            same_id: false,
            position: None,
            ended: true,
        }))
    };
    let (mut d, out) = Drive::new(rules(Duration::ZERO, false, false));
    assert!(matches!(out[..], [Action::Attempt { .. }]), "{out:?}");
    let mut attempts = 1;
    let mut out = d.feed(Duration::ZERO, ended());
    while d.machine.end().is_none() {
        let wait = out
            .iter()
            .find_map(|a| match a {
                Action::Sleep(wait) => Some(*wait),
                _ => None,
            })
            .expect("a retry");
        assert!(wait.until <= d.now + ENDED_RETRY, "retried within {ENDED_RETRY:?}");
        let at = wait.until - d.start;
        assert!(d.feed(at, Input::Timer).iter().any(|a| matches!(a, Action::Attempt { .. })));
        attempts += 1;
        out = d.feed(at, ended());
        assert!(attempts < 1000, "bounded");
    }
    let start = d.start;
    assert!(matches!(d.machine.end(), Some(End::Busy { .. })));
    assert!(d.now >= start + ENDED_GRACE && attempts >= 40, "{attempts} attempts over {:?}", d.now - start);
    // A holder that runs: busy at once.
    let (mut d, _) = Drive::new(rules(Duration::ZERO, false, false));
    d.feed(Duration::ZERO, busy());
    assert!(matches!(d.machine.end(), Some(End::Busy { .. })));
}

fn unavailable() -> Input {
    Input::Answer(Err(Fault::Unavailable("connection refused".into())))
}

/// The wait's timer, from the last action of a batch.
fn sleep(out: &[Action]) -> Wait {
    match out.last() {
        Some(Action::Sleep(wait)) => *wait,
        other => panic!("not a wait: {other:?}"),
    }
}

/// `--wait 0` on a busy lock: one attempt that does not queue, no subscription, no wait, and
/// the busy error at once.
#[test]
fn busy_with_wait_0_fails_at_once() {
    let (mut d, out) = Drive::new(rules(Duration::ZERO, true, false));
    assert_eq!(out, [Action::Attempt { join: false }]);
    let out = d.feed(MS, busy());
    assert!(!out.iter().any(|a| matches!(a, Action::Sleep(_) | Action::PrepareToWait | Action::Leave)));
    assert!(matches!(d.machine.end(), Some(End::Busy { nested: None, .. })));
}

/// A lock handed over to a run that was stopped past the end of its wait: not taken, the
/// place in the queue (and with it the lock) given back, and the run ends busy — the command
/// never runs. Just within Handover::LATE, it is taken.
#[test]
fn a_handover_after_the_wait_ran_out_is_given_back() {
    let wait = Duration::from_secs(1);
    for (at, taken) in [(wait + Handover::LATE + MS, false), (wait + Handover::LATE / 2, true)] {
        let (mut d, out) = Drive::new(rules(wait, true, false));
        assert_eq!(out, [Action::Subscribe]);
        assert_eq!(d.feed(MS, Input::Subscribed(Ok(()))), [Action::Attempt { join: true }]);
        let out = d.feed(2 * MS, busy());
        assert!(out.contains(&Action::PrepareToWait));
        assert!(sleep(&out).wakeups && sleep(&out).until <= d.start + wait);
        let handed = Input::HandedOver { fence: 9, grant: Duration::from_secs(5), since_last_attempt: true };
        let out = d.feed(at, handed);
        if taken {
            assert!(out.is_empty());
            assert!(
                matches!(d.machine.end(), Some(End::Acquired { handed_over: true, fences, .. }) if fences == &[9])
            );
        } else {
            assert_eq!(out, [Action::Leave]);
            assert!(matches!(d.machine.end(), Some(End::Busy { .. })));
        }
    }
}

/// A handover that came before the last attempt was answered is not this attempt's to take:
/// the run tries again instead.
#[test]
fn a_handover_older_than_the_last_attempt_is_not_taken() {
    let (mut d, _) = Drive::new(rules(Duration::from_secs(10), true, false));
    d.feed(MS, Input::Subscribed(Ok(())));
    d.feed(2 * MS, busy());
    let handed = Input::HandedOver { fence: 9, grant: Duration::from_secs(5), since_last_attempt: false };
    assert_eq!(d.feed(100 * MS, handed), [Action::Attempt { join: true }]);
    assert!(d.machine.end().is_none());
}

/// Redis unreachable twice, then the lock: each outage wait ends within the budget, and the
/// third attempt takes it.
#[test]
fn an_outage_then_success() {
    let (mut d, _) = Drive::new(rules(Duration::ZERO, false, false));
    let mut at = 10 * MS;
    for _ in 0..2 {
        let out = d.feed(at, unavailable());
        assert!(matches!(&out[0], Action::Log(Note::Outage { msg, .. }) if msg == "connection refused"));
        let wait = sleep(&out);
        assert!(!wait.wakeups && wait.until <= d.machine.outage_until().unwrap());
        at = wait.until - d.start;
        assert_eq!(d.feed(at, Input::Timer), [Action::Attempt { join: false }]);
    }
    let lease = Lease::new(d.now, Duration::from_secs(5));
    d.feed(at + 5 * MS, Input::Answer(Ok(Acquired::Yes { fences: vec![3], lease })));
    assert!(matches!(d.machine.end(), Some(End::Acquired { handed_over: false, .. })));
}

/// Answers every attempt of `d` with `unavailable()` at the end of each wait until the run
/// ends: how it ended, `None` for `--fail-open`'s run without the lock.
fn outage_to_the_end(d: &mut Drive, mut out: Vec<Action>) -> Option<Context> {
    while d.machine.end().is_none() {
        let at = sleep(&out).until - d.start;
        let attempt = d.feed(at, Input::Timer);
        assert_eq!(attempt.last(), Some(&Action::Attempt { join: d.machine.rules.waits() }));
        out = d.feed(at + 20 * MS, unavailable());
    }
    assert!(d.now >= d.machine.outage_until().unwrap(), "gave up before the budget ran out");
    assert_eq!(out.last(), Some(&Action::Abandon), "gave up without taking back the attempt");
    match d.machine.take_end() {
        Some(End::Unlocked { .. }) => None,
        Some(End::Failed { context, .. }) => Some(context),
        other => panic!("{other:?}"),
    }
}

/// `--fail-open` runs without the lock only when Redis was never reached during the outage:
/// one that answered "not now" may hold the lock for someone else.
#[test]
fn fail_open_only_when_redis_never_answered() {
    let transient = || Input::Answer(Err(Fault::Transient("LOADING".into())));
    for (fail_open, first, expected) in [
        (true, unavailable(), None),
        (true, transient(), Some(Context::AnsweredEarlier)),
        (false, unavailable(), Some(Context::Unreachable)),
    ] {
        let (mut d, _) = Drive::new(rules(Duration::ZERO, false, fail_open));
        let out = d.feed(10 * MS, first);
        assert_eq!(outage_to_the_end(&mut d, out), expected);
    }
    // Redis answering "not now" to the last attempt is never a reason to fail open.
    let (mut d, _) = Drive::new(rules(Duration::ZERO, false, true));
    assert!(matches!(d.feed(990 * MS, unavailable()).last(), Some(Action::Sleep(_))));
    d.feed(1000 * MS, Input::Timer);
    assert_eq!(d.feed(1010 * MS, transient()), [Action::Abandon]);
    assert!(matches!(d.machine.end(), Some(End::Failed { context: Context::Answering, .. })));

    // A busy answer ends the outage: that Redis answered before it no longer counts.
    let (mut d, _) = Drive::new(rules(Duration::from_millis(500), false, true));
    let out = d.feed(MS, Input::Subscribed(Err(Fault::Transient("LOADING".into()))));
    d.feed(sleep(&out).until - d.start, Input::Timer);
    let at = d.now - d.start;
    assert_eq!(d.feed(at + MS, Input::Subscribed(Ok(()))), [Action::Attempt { join: true }]);
    let out = d.feed(at + 2 * MS, busy());
    assert!(sleep(&out).until <= d.machine.wait_until().unwrap());
    let at = sleep(&out).until - d.start;
    d.feed(at, Input::Timer);
    let out = d.feed(at + 20 * MS, unavailable());
    assert_eq!(outage_to_the_end(&mut d, out), None);
}

/// A lock taken with too little of its lease left is given back and retried like an outage.
#[test]
fn a_lock_taken_too_late_is_given_back() {
    let (mut d, _) = Drive::new(rules(Duration::ZERO, false, false));
    let lease = Lease::new(d.start, Duration::from_secs(1));
    let out = d.feed(850 * MS, Input::Answer(Ok(Acquired::Yes { fences: vec![1], lease })));
    assert_eq!(out[0], Action::ReleaseShort);
    assert!(matches!(&out[1], Action::Log(Note::Outage { msg, .. }) if msg == TOO_SLOW));
    assert!(matches!(out.last(), Some(Action::Sleep(Wait { wakeups: false, .. }))));
    assert!(d.machine.end().is_none());
}

/// A signal while an attempt is out abandons it; during a busy wait, the run leaves the queue.
#[test]
fn a_signal_abandons_an_attempt_and_leaves_a_wait() {
    let (mut d, _) = Drive::new(rules(Duration::from_secs(5), true, false));
    assert_eq!(d.feed(MS, Input::Signal(Signal::SIGINT)), [Action::Abandon]);
    assert!(matches!(d.machine.end(), Some(End::Interrupted(Signal::SIGINT))));

    let (mut d, _) = Drive::new(rules(Duration::from_secs(5), true, false));
    d.feed(MS, Input::Subscribed(Ok(())));
    d.feed(2 * MS, busy());
    assert_eq!(d.feed(100 * MS, Input::Signal(Signal::SIGTERM)), [Action::Leave]);
}

/// The master changed (or the subscription ended) during a wait: subscribe again, then try
/// at once.
#[test]
fn a_change_of_master_subscribes_again_before_the_next_attempt() {
    let (mut d, _) = Drive::new(rules(Duration::from_secs(5), true, false));
    d.feed(MS, Input::Subscribed(Ok(())));
    d.feed(2 * MS, busy());
    assert_eq!(d.feed(50 * MS, Input::MasterChanged), [Action::Unsubscribe, Action::Subscribe]);
    assert_eq!(d.feed(51 * MS, Input::Subscribed(Ok(()))), [Action::Attempt { join: true }]);
}

/// `--wait forever`: a busy lock and an outage are waited out however long they last, each
/// wait within a retry period (no deadline computed from the limit it does not have); a
/// signal still ends it.
#[test]
fn wait_forever_has_no_end_but_a_signal() {
    let forever = Rules { wait: None, ..rules(Duration::ZERO, true, false) };
    let (mut d, out) = Drive::new(forever.clone());
    assert_eq!(out, [Action::Subscribe]);
    assert_eq!(d.feed(MS, Input::Subscribed(Ok(()))), [Action::Attempt { join: true }]);
    let year = Duration::from_secs(366 * 24 * 3600);
    for at in [2 * MS, year, 10 * year] {
        let out = d.feed(at, busy());
        let wait = sleep(&out);
        assert!(wait.wakeups && wait.until <= d.now + QUEUE_KEEPALIVE, "{wait:?}");
        assert_eq!(d.feed(wait.until - d.start, Input::Timer), [Action::Attempt { join: true }]);
    }
    for _ in 0..3 {
        let at = d.now - d.start + 20 * MS;
        let wait = sleep(&d.feed(at, unavailable()));
        assert!(!wait.wakeups && wait.until <= d.now + Duration::from_secs(1), "{wait:?}");
        assert_eq!(d.feed(wait.until - d.start, Input::Timer), [Action::Attempt { join: true }]);
    }
    assert!(d.machine.end().is_none());
    assert_eq!(d.feed(d.now - d.start + MS, Input::Signal(Signal::SIGINT)), [Action::Abandon]);
    assert!(matches!(d.machine.end(), Some(End::Interrupted(Signal::SIGINT))));
}

/// A nested run that waits without a limit behind a waiter for the outer run's lock would
/// wait for as long as that waiter does, maybe forever, while its outer run cannot end: it
/// is busy at once, saying why.
#[test]
fn a_nested_wait_without_a_limit_that_cannot_end_is_busy_at_once() {
    let nested =
        Rules { wait: None, outer_keys: Some(vec![b"outer".to_vec()]), ..rules(Duration::ZERO, true, false) };
    let (mut d, _) = Drive::new(nested);
    d.feed(MS, Input::Subscribed(Ok(())));
    let queued =
        Input::Answer(Ok(Acquired::Queued { key: 0, first: b"t1 host 2 0".to_vec(), position: Some(2) }));
    let out = d.feed(2 * MS, queued);
    assert!(matches!(out.last(), Some(Action::CheckNested { .. })), "{out:?}");
    assert_eq!(d.feed(3 * MS, Input::Nested(true)), [Action::Leave]);
    assert!(matches!(d.machine.end(), Some(End::Busy { nested: Some(why), .. }) if why.contains("outer")));
}
