//! Durations and the lease arithmetic: the TTL rule (a TTL that leaves no room is refused,
//! naming the shortest that works), the timeouts' bounds, and parsing `DUR` values.

use super::*;
/// The least time left between a renewal going out and the moment the command would have to be
/// stopped without it: the first renewal goes out `renew-every` after the acquisition's reply,
/// while the lease counts from before its request, and a wrapper descheduled for a moment
/// renews late (why 20 ms: BENCHMARKS.md § Reading the numbers).
pub const MIN_SLACK: Duration = Duration::from_millis(20);

/// The renewal slack: the time between a renewal going out and the moment the command must be
/// stopped if it has not been confirmed (SIGTERM at `deadline − kill-grace`, SIGKILL at
/// `deadline − KILL_AHEAD`, whichever comes first). `None` when there is none at all.
pub(super) fn renewal_slack(ttl: Duration, renew_every: Duration, kill_grace: Duration) -> Option<Duration> {
    ttl.checked_sub(drift(ttl))?.checked_sub(renew_every)?.checked_sub(kill_grace.max(KILL_AHEAD))
}

/// The shortest TTL, in whole milliseconds, for which `works` holds (it holds for every longer
/// one too: the slack grows with the TTL), or `None` when not even the longest does.
pub(super) fn shortest_ttl(works: impl Fn(Duration) -> bool) -> Option<Duration> {
    let (mut lo, mut hi) = (0, u64::try_from(MAX_DURATION.as_millis()).expect("fits"));
    if !works(Duration::from_millis(hi)) {
        return None;
    }
    // Invariant: `works(lo)` is false (or lo = 0), `works(hi)` is true.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if works(Duration::from_millis(mid)) { hi = mid } else { lo = mid }
    }
    Some(Duration::from_millis(hi))
}

/// Why a TTL cannot work with the other timing flags, and the shortest that would.
pub(super) fn too_short(
    ttl: Duration,
    renew_every: Duration,
    kill_grace: Duration,
    shortest: Option<Duration>,
) -> String {
    let fix = match shortest {
        Some(d) => format!(
            "the shortest --ttl that works with the other flags as given is {}; lengthen --ttl or shorten \
             --renew-every / --kill-grace",
            humantime::format_duration(d)
        ),
        None => "no --ttl works with these flags: shorten --renew-every / --kill-grace".to_owned(),
    };
    format!(
        "{} {} leaves no time to renew the lock: {} ({}) + the larger of {} ({}) and {} (when the \
         command is stopped) + {} (for the renewal's round trip) must be less than --ttl minus its \
         drift allowance ({}); {fix}",
        named("--ttl"),
        humantime::format_duration(ttl),
        named("--renew-every"),
        humantime::format_duration(micros(renew_every)),
        named("--kill-grace"),
        humantime::format_duration(micros(kill_grace)),
        humantime::format_duration(KILL_AHEAD),
        humantime::format_duration(MIN_SLACK),
        humantime::format_duration(micros(drift(ttl))),
    )
}

/// Why a given Redis timeout does not fit in the renewal slack, and the shortest TTL that
/// would make room for it.
pub(super) fn timeout_too_long(
    flag: &str,
    timeout: Duration,
    slack: Duration,
    shortest: Option<Duration>,
) -> String {
    let fix = match shortest {
        Some(d) => format!(
            "shorten it, or lengthen --ttl: the shortest that works with the other flags as given is {}",
            humantime::format_duration(d)
        ),
        None => "shorten it".to_owned(),
    };
    format!(
        "{} ({}) must be shorter than the renewal slack, ttl − drift − renew-every − kill-grace ({}): \
         {fix}",
        named(flag),
        humantime::format_duration(timeout),
        humantime::format_duration(micros(slack)),
    )
}

/// A duration for messages: whole microseconds are precise enough.
pub(super) fn micros(d: Duration) -> Duration {
    Duration::from_micros(d.as_micros().try_into().unwrap_or(u64::MAX))
}

/// A positive duration that Redis can keep as a key's lifetime: at least a millisecond.
pub(super) fn whole_millis(flag: &str, value: &str) -> Result<Duration, Error> {
    let d = duration(flag, value)?;
    if d < Duration::from_millis(1) {
        return Err(usage(format!(
            "{} must be at least 1ms (Redis keeps key lifetimes in milliseconds)",
            named(flag)
        )));
    }
    Ok(d)
}

/// A Redis timeout: positive, and short enough to leave time for a retry before the command
/// would have to be stopped.
pub(super) fn bounded_timeout(flag: &str, value: &str, slack: Duration) -> Result<Duration, Error> {
    let d = duration(flag, value)?;
    if d >= slack {
        return Err(usage(format!(
            "{} ({}) must be shorter than the renewal slack, ttl − drift − renew-every − \
             kill-grace ({}): shorten it or lengthen --ttl",
            named(flag),
            humantime::format_duration(d),
            humantime::format_duration(slack),
        )));
    }
    Ok(d)
}

/// Parses `--wait`: a duration that may be zero, or `forever` (`None`): no limit, as flock
/// waits without `-w`.
pub(super) fn wait(flag: &str, value: &str) -> Result<Option<Duration>, Error> {
    let word = value.trim().to_ascii_lowercase();
    if word == "forever" {
        return Ok(None);
    }
    if ["infinity", "infinite", "inf", "never", "unlimited", "always", "-1"].contains(&word.as_str()) {
        return Err(usage(format!(
            "{}: {value:?} is no duration: to wait without a limit, give forever",
            named(flag)
        )));
    }
    duration_or_zero(flag, value).map(Some)
}

/// Parses a duration that may be zero.
pub(super) fn duration_or_zero(flag: &str, value: &str) -> Result<Duration, Error> {
    parse(flag, value)
}

/// Parses a positive duration, naming the flag in the error.
pub(super) fn duration(flag: &str, value: &str) -> Result<Duration, Error> {
    let d = parse(flag, value)?;
    if d.is_zero() {
        return Err(usage(format!("{} must be greater than zero", named(flag))));
    }
    Ok(d)
}

/// The one parser of every `DUR` value, flag or variable: a humantime duration (`500ms`,
/// `1h 30m`), or a bare number of seconds (`5`, `1.5`), as `sleep 5`, `timeout 5` and
/// `flock -w 5` read it. Errors name the variable when the value came from one.
pub(super) fn parse(flag: &str, value: &str) -> Result<Duration, Error> {
    let value = value.trim();
    let refused = |why: String| usage(format!("{}: {why}", named(flag)));
    if value.starts_with('-') {
        return Err(refused(format!("{value:?}: durations cannot be negative")));
    }
    let too_long = || refused(format!("{value:?} is longer than the 10 years this tool accepts"));
    let d = match seconds(value) {
        Some(Ok(d)) => d,
        Some(Err(BadNumber::TooFine)) => {
            return Err(refused(format!(
                "{value:?} has more than 9 decimal places: a duration is counted in nanoseconds"
            )));
        }
        Some(Err(BadNumber::TooLong)) => return Err(too_long()),
        None => humantime::parse_duration(value).map_err(|e| {
            refused(format!(
                "invalid duration {value:?}: {e} (examples: 5 or 1.5 for seconds, 500ms, 30s, 5m, '1h 30m')"
            ))
        })?,
    };
    if d > MAX_DURATION {
        return Err(too_long());
    }
    Ok(d)
}

/// Why a bare number of seconds is no duration.
#[derive(Debug, PartialEq, Eq)]
enum BadNumber {
    /// More than nine decimal places.
    TooFine,
    /// More seconds than a `Duration` holds.
    TooLong,
}

/// A bare number of seconds, exactly: digits with an optional decimal point (`5`, `1.5`,
/// `.5`, `5.`). `None` for anything else (a sign, an exponent, `nan`, `inf`, a unit), which
/// is left to humantime.
fn seconds(value: &str) -> Option<Result<Duration, BadNumber>> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    if fraction.len() > 9 {
        return Some(Err(BadNumber::TooFine));
    }
    let secs = match whole {
        "" => 0,
        _ => match whole.parse::<u64>() {
            Ok(secs) => secs,
            Err(_) => return Some(Err(BadNumber::TooLong)),
        },
    };
    let nanos = if fraction.is_empty() { 0 } else { format!("{fraction:0<9}").parse().expect("nine digits") };
    Some(Ok(Duration::new(secs, nanos)))
}

/// No duration is longer: keeps every deadline computed from one far from clock overflow.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{BadNumber, MAX_DURATION, parse, seconds};

    #[test]
    fn a_bare_number_is_seconds_to_the_nanosecond() {
        for (value, d) in [
            ("5", Duration::from_secs(5)),
            ("0", Duration::ZERO),
            ("1.5", Duration::from_millis(1500)),
            (".5", Duration::from_millis(500)),
            ("5.", Duration::from_secs(5)),
            ("007", Duration::from_secs(7)),
            ("0.000000001", Duration::from_nanos(1)),
            ("1.123456789", Duration::new(1, 123_456_789)),
        ] {
            assert_eq!(seconds(value), Some(Ok(d)), "{value}");
            assert_eq!(parse("--wait", value).unwrap(), d, "{value}");
        }
        assert_eq!(seconds("0.0000000001"), Some(Err(BadNumber::TooFine)));
        assert_eq!(seconds("99999999999999999999"), Some(Err(BadNumber::TooLong)));
        for other in ["", ".", "1.2.3", "-0", "+5", "1e3", "nan", "inf", "5s", "1,5", " 5", "٣"] {
            assert_eq!(seconds(other), None, "{other:?}");
        }
    }

    #[test]
    fn durations_are_refused_with_the_reason() {
        let err = |value: &str| parse("--wait", value).unwrap_err().to_string();
        for value in ["nan", "inf", "1e3", ".", "", "1.2.3", "0x10", "+5", "1,5", "5 parsecs"] {
            assert!(err(value).starts_with("--wait: invalid duration"), "{value:?}: {}", err(value));
        }
        for value in ["-0", "-1.5", " -5s"] {
            assert!(err(value).contains("durations cannot be negative"), "{value:?}: {}", err(value));
        }
        assert!(err("1.0000000001").contains("more than 9 decimal places"));
        for value in ["99999999999999999999", "316224001", "11y"] {
            assert!(err(value).contains("longer than the 10 years"), "{value:?}: {}", err(value));
        }
        assert_eq!(parse("--wait", &MAX_DURATION.as_secs().to_string()).unwrap(), MAX_DURATION);
        assert_eq!(parse("--wait", " 2.5 ").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse("--wait", "1h 30m").unwrap(), Duration::from_secs(5400));
    }

    #[test]
    fn only_the_wait_can_be_forever() {
        assert_eq!(super::wait("--wait", "forever").unwrap(), None);
        assert_eq!(super::wait("--wait", " Forever ").unwrap(), None);
        assert_eq!(super::wait("--wait", "0").unwrap(), Some(Duration::ZERO));
        assert_eq!(super::wait("--wait", "2.5").unwrap(), Some(Duration::from_millis(2500)));
        assert!(super::wait("--wait", "forever and a day").is_err());
        for unlimited in ["infinity", "Inf", "never", "-1"] {
            let e = super::wait("--wait", unlimited).unwrap_err().to_string();
            assert!(e.contains("give forever"), "{unlimited}: {e}");
        }
        assert!(parse("--max-runtime", "forever").is_err());
    }
}
