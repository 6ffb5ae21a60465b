//! The machine fed by hand on a clock moved by hand: the cases the behaviour tests cover end
//! to end, one decision at a time.

use std::time::Duration;

use super::*;

const MS: Duration = Duration::from_millis(1);

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
        wait,
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
    }))
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
/// never runs. Just within LATE, it is taken.
#[test]
fn a_handover_after_the_wait_ran_out_is_given_back() {
    let wait = Duration::from_secs(1);
    for (at, taken) in [(wait + LATE + MS, false), (wait + LATE / 2, true)] {
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
        assert!(!wait.wakeups && wait.until <= d.machine.outage_until());
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
        assert_eq!(attempt.last(), Some(&Action::Attempt { join: !d.machine.rules.wait.is_zero() }));
        out = d.feed(at + 20 * MS, unavailable());
    }
    assert!(d.now >= d.machine.outage_until(), "gave up before the budget ran out");
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
    assert!(sleep(&out).until <= d.machine.wait_until());
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
