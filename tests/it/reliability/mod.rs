//! Reliability under injected faults, in a soak: wrappers run in loops against one lock (five
//! of them, exclusive runs), or against a `--limit 3` key and a key of `--shared` and exclusive
//! runs (the kinds phase), while a fault injector disturbs Redis, the network (through
//! [`FaultProxy`](crate::support::fault::FaultProxy)) and the wrappers; or (the Sentinel phase)
//! four loops find the master through secured Sentinels while they fail it over again and
//! again, sometimes losing the lock's last write. The commands report to an
//! [`Oracle`](crate::support::oracle::Oracle) that plays a fenced resource per key.
//! RELIABILITY.md describes the soak and its figures.
//!
//! `soak` has the phases and the tests; `harness` runs a phase against a target, `proxied`
//! (one Redis behind the fault proxy) or `failovers` (a Sentinel set); `outcome` prints and
//! checks what a phase saw; `oracle_model` checks the oracle itself.
//!
//! `SOAK_SECS` (default 60) sets the soak's length (each phase gets a third of it, and two
//! phases run at once), `SOAK_SEED` replays a schedule, `SOAK_VERBOSE` (any value) runs the
//! wrappers with `-vv --log-format=json`: their logs, kept when a check fails, then say what
//! each did and when.

mod failovers;
mod harness;
mod oracle_model;
mod outcome;
mod proxied;
mod soak;

use std::time::Duration;

use crate::support::oracle;

const LIMIT: Duration = Duration::from_secs(30);

/// Scheduling allowance for a loaded two-core machine, on top of the bounds the product
/// promises.
const SLACK: Duration = Duration::from_millis(500);

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Not a test: the command the soak runs under the wrapper is this test binary, re-executed
/// with only this test selected and `RELIABILITY_ORACLE_SOCKET` set (see
/// [`oracle::oracle_client`]). Without that variable it does nothing.
// In this module, not a submodule: the wrappers run it by this path (`harness::wrapper_loop`).
#[test]
fn oracle_client() {
    oracle::oracle_client();
}
