//! What a soak phase saw: its figures, printed, and the checks on them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::failovers::{FAILOVER_LIMIT, Failover, WHOLE_LIMIT};
use super::harness::{COMPLETED, Disruption, Injected, MonitorReport, RunRecord, Timing};
use super::{SLACK, ms};
use crate::support::oracle::{self, OracleReport};

pub(super) struct SoakOutcome {
    pub(super) phase: &'static str,
    pub(super) wrappers: usize,
    pub(super) keys: Vec<&'static str>,
    pub(super) seed: u64,
    pub(super) timing: Timing,
    pub(super) soaked: Duration,
    pub(super) drained: Duration,
    pub(super) runs: Vec<RunRecord>,
    pub(super) injected: Vec<Injected>,
    pub(super) report: OracleReport,
    pub(super) monitored: MonitorReport,
    pub(super) lock_gone: bool,
    pub(super) lock_gone_after: Duration,
    /// What the target shows when a check fails (the tail of Redis's log, or the Sentinels').
    pub(super) target_log: String,
    pub(super) wrapper_logs: PathBuf,
}

impl SoakOutcome {
    fn statuses(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for r in &self.runs {
            let key = match &r.status {
                Ok(code) => code.to_string(),
                Err(e) => e.clone(),
            };
            *by.entry(key).or_insert(0) += 1;
        }
        by
    }

    fn max_overlap(&self) -> Duration {
        self.report.overlaps.iter().map(|o| o.duration()).max().unwrap_or_default()
    }

    /// The fault injected last before `o` began.
    fn cause(&self, o: &oracle::Overlap) -> Option<&Injected> {
        self.injected.iter().rev().find(|f| f.start <= o.start)
    }

    pub(super) fn print(&self) {
        let mut faults: BTreeMap<Disruption, (usize, usize)> = BTreeMap::new();
        for f in &self.injected {
            let e = faults.entry(f.fault).or_default();
            e.0 += 1;
            e.1 += usize::from(f.hit_holder);
        }
        let faults: Vec<String> =
            faults.iter().map(|(f, (n, hit))| format!("{} {n} ({hit} with a holder)", f.name())).collect();
        let victims = self.injected.iter().filter(|f| f.victim.is_some()).count();
        let mut by_cause: BTreeMap<&str, (usize, u128)> = BTreeMap::new();
        for o in &self.report.overlaps {
            let e = by_cause.entry(self.cause(o).map_or("none", |f| f.fault.name())).or_default();
            e.0 += 1;
            e.1 = e.1.max(o.duration().as_millis());
        }
        let r = &self.report;
        let killed = r.stays.iter().filter(|s| !s.finished).count();
        let resources: Vec<String> = r
            .resources
            .iter()
            .map(|(key, k)| {
                let kinds: Vec<String> =
                    k.kinds.iter().map(|(kind, n)| format!("{n} {}", kind.name())).collect();
                let shared =
                    if k.peak_shared > 0 { format!(" ({} shared)", k.peak_shared) } else { String::new() };
                format!("{key}: {} stays, peak {} at once{shared}", kinds.join(" + "), k.peak)
            })
            .collect();
        eprintln!(
            "\n[soak: {}] {:.1} s (+{:.1} s draining), seed {} (SOAK_SEED), {} wrappers on {}, \
             ttl {}, renew every {}, kill grace {}\n  \
             runs: {} by exit status {:?}\n  \
             faults injected: {}: {}; {} had to stop a command\n  \
             commands: {} entered, {} stopped before the end of their work, peak {} at once on a key\n  \
             by key: {}\n  \
             overlaps (a command present when its key went beyond what its kind allows): {}, max {} ms; \
             by cause (count, max ms): {:?}\n  \
             writes: {} accepted, {} stale rejected, {} stale accepted, {} fences reused\n  \
             leftovers: {} orphaned groups, {} locks outliving their owner by more than the ttl, \
             {} lock values with a bad TTL; lock gone {} ms after the last wrapper ({} monitor samples)",
            self.phase,
            self.soaked.as_secs_f64(),
            self.drained.as_secs_f64(),
            self.seed,
            self.wrappers,
            self.keys.join(" and "),
            ms(self.timing.ttl),
            ms(self.timing.renew_every),
            ms(self.timing.kill_grace),
            self.runs.len(),
            self.statuses(),
            self.injected.len(),
            faults.join(", "),
            victims,
            r.stays.len(),
            killed,
            r.peak_holders,
            resources.join("; "),
            r.overlaps.len(),
            self.max_overlap().as_millis(),
            by_cause,
            r.writes_accepted,
            r.stale_rejected,
            r.stale_accepted,
            r.fence_reused,
            self.runs.iter().filter(|r| !r.orphans.is_empty()).count(),
            self.leftover_locks().len(),
            self.monitored.bad_ttls.len(),
            self.lock_gone_after.as_millis(),
            self.monitored.samples,
        );
        let failovers = self.failovers();
        if failovers.is_empty() {
            return;
        }
        let span = |ds: Vec<Duration>| match (ds.iter().min(), ds.iter().max()) {
            (Some(lo), Some(hi)) => format!("{}–{} ms", lo.as_millis(), hi.as_millis()),
            _ => "never".to_owned(),
        };
        let promoted = span(failovers.iter().filter_map(|(i, f)| Some(f.promoted?.1 - i.start)).collect());
        let switched =
            span(failovers.iter().filter_map(|(_, f)| Some(f.switched? - f.promoted?.1)).collect());
        let whole = span(failovers.iter().filter_map(|(_, f)| Some(f.whole? - f.switched?)).collect());
        // Per lossy kind: failovers, those whose promoted replica lacked the lock, those that
        // stopped its holder, those followed by an overlap.
        let mut lossy: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
        for (i, f) in failovers.iter().filter(|(i, _)| i.fault.loses_data()) {
            let e = lossy.entry(i.fault.name()).or_default();
            e[0] += 1;
            e[1] += usize::from(f.lost_lock());
            e[2] += usize::from(i.victim.is_some());
            e[3] += usize::from(self.overlaps_after(i) > 0);
        }
        let lossy: Vec<String> = lossy
            .iter()
            .map(|(name, [n, lost, stopped, overlapped])| {
                format!(
                    "{name} {n} (lock lost {lost}, holder stopped {stopped}, overlaps after {overlapped})"
                )
            })
            .collect();
        eprintln!(
            "  failovers: {}: a replica promoted {promoted} after the start, every Sentinel naming it \
             {switched} after that, the set whole again {whole} later ({} times with a node made a \
             replica by the test); {}; runs completed between failovers: {:?}",
            failovers.len(),
            failovers.iter().filter(|(_, f)| !f.nudged.is_empty()).count(),
            lossy.join(", "),
            self.completed_between_failovers(),
        );
    }

    /// Overlaps that began after `fault` and before the next one.
    fn overlaps_after(&self, fault: &Injected) -> usize {
        self.report.overlaps.iter().filter(|o| self.cause(o).is_some_and(|c| std::ptr::eq(c, fault))).count()
    }

    /// The faults that were Sentinel failovers, with what the test saw of each.
    fn failovers(&self) -> Vec<(&Injected, &Failover)> {
        self.injected.iter().filter_map(|i| Some((i, i.failover.as_ref()?))).collect()
    }

    /// For each failover but the last: the runs that completed (exit 0) after it was seen and
    /// before the next one began.
    fn completed_between_failovers(&self) -> Vec<usize> {
        let failovers = self.failovers();
        failovers
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0].1.switched.unwrap_or(w[0].0.start), w[1].0.start);
                self.runs.iter().filter(|r| r.status == Ok(0) && r.spawned >= from && r.exited <= to).count()
            })
            .collect()
    }

    /// The failovers as the test saw them, in ms from each one's start.
    fn failover_timeline(&self) -> String {
        let mut text = String::new();
        for (n, (i, f)) in self.failovers().into_iter().enumerate() {
            let after = |t: Option<Instant>| {
                t.map_or("-".to_owned(), |t| format!("{} ms", (t - i.start).as_millis()))
            };
            text += &format!(
                "failover {n} ({}) from {}: lock on the master {}; promoted {:?} at {} (lock there: {:?}); \
                 every Sentinel named it at {}; whole again at {} (made replicas by the test: {:?}); \
                 holder {}, victim {:?}\n",
                i.fault.name(),
                f.from,
                f.had_lock,
                f.promoted.map(|p| p.0),
                after(f.promoted.map(|p| p.1)),
                f.promoted.map(|p| p.2),
                after(f.switched),
                after(f.whole),
                f.nudged,
                i.hit_holder,
                i.victim,
            );
        }
        text
    }

    /// Lock values that outlived their wrapper by more than the TTL, counted from when the
    /// wrapper's last request could have reached Redis (a fault may have held it back).
    fn leftover_locks(&self) -> Vec<String> {
        let mut bad = Vec::new();
        for (value, s) in &self.monitored.sightings {
            let owner = s.pid.and_then(|pid| {
                self.runs.iter().filter(|r| r.pid == pid && r.spawned <= s.first).max_by_key(|r| r.spawned)
            });
            let Some(run) = owner else {
                bad.push(format!("{}: not a soak wrapper's", String::from_utf8_lossy(value)));
                continue;
            };
            let held_back = self
                .injected
                .iter()
                .filter(|f| f.start <= run.exited && f.lifted >= run.spawned)
                .map(|f| f.lifted)
                .max();
            let owner_gone = held_back.map_or(run.exited, |l| l.max(run.exited));
            if s.last > owner_gone + self.timing.ttl + SLACK {
                bad.push(format!(
                    "{}: seen {} ms after its wrapper could last reach Redis",
                    String::from_utf8_lossy(value),
                    (s.last - owner_gone).as_millis()
                ));
            }
        }
        bad
    }

    pub(super) fn context(&self) -> String {
        format!(
            "seed {} (rerun with SOAK_SEED={}); wrapper logs in {}; {}{}",
            self.seed,
            self.seed,
            self.wrapper_logs.display(),
            self.failover_timeline(),
            self.target_log
        )
    }

    /// What holds after any fault: every wrapper ended with a status of README § Exit status,
    /// left no process behind, no lock outlived its owner by more than the TTL, the fence told
    /// every holder apart, and enough work got done for all this to mean something.
    pub(super) fn check_common(&self) {
        let ctx = self.context();
        let allowed = [0, 3, 69, 75, 125];
        let odd: Vec<String> = self
            .runs
            .iter()
            .filter(|r| !matches!(r.status, Ok(c) if allowed.contains(&c)))
            .map(|r| format!("pid {}: {:?}", r.pid, r.status))
            .collect();
        assert!(odd.is_empty(), "wrapper statuses outside {allowed:?}: {odd:?}; {ctx}");
        let orphans: Vec<(i32, &Vec<i32>)> =
            self.runs.iter().filter(|r| !r.orphans.is_empty()).map(|r| (r.pid, &r.orphans)).collect();
        assert!(orphans.is_empty(), "processes outlived their wrapper (pid, survivors): {orphans:?}; {ctx}");
        assert!(
            self.monitored.bad_ttls.is_empty(),
            "lock values with a bad TTL: {:?}; {ctx}",
            self.monitored.bad_ttls
        );
        let leftovers = self.leftover_locks();
        assert!(leftovers.is_empty(), "locks left behind: {leftovers:?}; {ctx}");
        assert!(
            self.lock_gone,
            "the lock was still there {:?} after the last wrapper; {ctx}",
            self.timing.ttl
        );
        let r = &self.report;
        for (key, k) in &r.resources {
            assert_eq!(k.kind_conflicts, 0, "{key} was held by kinds that do not go together: {k:?}; {ctx}");
        }
        assert_eq!(r.fence_reused, 0, "two acquisitions had the same fence; {ctx}");
        assert_eq!(r.stale_accepted, 0, "a stale write got through the fence check; {ctx}");
        // Only a command that a newer one overlapped ever has a write rejected: the fence never
        // goes backwards, not even across Redis losing its data.
        let in_overlaps: u64 = r.overlaps.iter().map(|o| o.rejected).sum();
        assert_eq!(r.stale_rejected, in_overlaps, "writes rejected outside any overlap; {ctx}");
        // Each fault that had to stop a command did: lease lost or unconfirmed, exit 125.
        let mut victims = 0;
        for f in &self.injected {
            let Some(pid) = f.victim else { continue };
            victims += 1;
            let run = self.runs.iter().find(|r| r.pid == pid && r.spawned <= f.start && f.start <= r.exited);
            let status = run.map(|r| r.status.clone());
            assert_eq!(
                status,
                Some(Ok(125)),
                "the command under {} (wrapper {pid}) was not stopped; {ctx}",
                f.fault.name()
            );
        }
        assert!(victims >= 1, "no fault that must stop a command found one to stop; {ctx}");
        let completed = self.runs.iter().filter(|r| r.status == Ok(0)).count();
        assert!(completed >= COMPLETED, "only {completed} runs completed: {:?}; {ctx}", self.statuses());
        assert!(self.monitored.samples >= 100, "the monitor sampled {} times", self.monitored.samples);
    }

    /// After faults that lose the lock's state, holders may go beyond what their kind allows,
    /// but each overlap follows such a fault and is bounded (the old holder is stopped at its
    /// next renewal, or as soon as its paused wrapper runs again), the newer holders have
    /// higher fences than the one they overlapped (`in_order`: and rising in the order they
    /// entered, as exclusive holders one after the other do), and the fence check refuses the
    /// older one's writes.
    pub(super) fn check_overlaps_after_data_loss(&self, in_order: bool) {
        let ctx = self.context();
        // Heard at once (an invalidation), or when Redis answers again after a restart: checks
        // are tried at most 250 ms apart; then the command's exit after SIGTERM.
        let bound = Duration::from_millis(250) + self.timing.kill_grace + SLACK;
        for o in &self.report.overlaps {
            let cause = self.cause(o);
            assert!(cause.is_some_and(Injected::lost_lock), "overlap {o:?} after {cause:?}; {ctx}");
            let cause = cause.expect("checked above");
            let newer_higher = if in_order {
                o.fences.windows(2).all(|w| w[0] < w[1])
            } else {
                o.fences[1..].iter().all(|&f| f > o.fences[0])
            };
            assert!(newer_higher, "a newer holder had a lower fence: {o:?}; {ctx}");
            match cause.paused {
                // The paused holder runs on until its wrapper wakes, then is stopped at once.
                Some((_, resumed)) => assert!(
                    o.end <= resumed + SLACK,
                    "overlap ended {} ms after the wrapper was continued: {o:?}; {ctx}",
                    (o.end - resumed).as_millis()
                ),
                None => assert!(
                    o.duration() <= bound,
                    "overlap of {} ms after {}, more than 250 ms + kill-grace + {} ms: {o:?}; {ctx}",
                    o.duration().as_millis(),
                    cause.fault.name(),
                    SLACK.as_millis()
                ),
            }
            // The older holder writes every 100 ms while it lasts, and each of those is refused.
            if o.duration() > oracle::WRITE_EVERY * 2 {
                assert!(o.rejected >= 1, "no stale write was rejected during {o:?}; {ctx}");
            }
        }
    }

    /// Every failover happened (a replica promoted, every Sentinel naming it), and but for the
    /// last the set was whole again before the next, with runs completed in between; a lossy
    /// failover lost a lock and stopped its holder (125) or was followed by an overlap, so that
    /// the overlap checks meant something.
    pub(super) fn check_failovers(&self) {
        let ctx = self.context();
        let failovers = self.failovers();
        assert!(!failovers.is_empty(), "no failover; {ctx}");
        for (n, (i, f)) in failovers.iter().enumerate() {
            assert!(
                f.promoted.is_some() && f.switched.is_some(),
                "failover {n} ({}) was not seen within {FAILOVER_LIMIT:?}; {ctx}",
                i.fault.name()
            );
            if n + 1 < failovers.len() {
                assert!(
                    f.whole.is_some(),
                    "after failover {n} ({}) the set was not whole again within {WHOLE_LIMIT:?}; {ctx}",
                    i.fault.name()
                );
            }
        }
        let between = self.completed_between_failovers();
        assert!(between.iter().all(|&n| n >= 1), "runs completed between failovers: {between:?}; {ctx}");
        let meant_something = failovers.iter().any(|(i, f)| {
            i.fault.loses_data() && f.lost_lock() && (i.victim.is_some() || self.overlaps_after(i) > 0)
        });
        assert!(
            meant_something,
            "no lossy failover lost a lock and stopped its holder or was followed by an overlap; {ctx}"
        );
    }
}

impl Drop for SoakOutcome {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.wrapper_logs);
        }
    }
}
