//! The environment: the variables that configure a wrapper (never passed to the command),
//! an outer run's lock, and reading a variable's value.

use super::*;

/// The variables the command receives (and a script's holder, [`HOLDER`](vars::HOLDER)). None
/// of them configures a wrapper ([`WRAPPER_VARIABLES`]), so a nested `redlock-run` never takes
/// the outer lock's key.
pub mod vars {
    pub const KEY: &str = "REDLOCK_LOCK_KEY";
    pub const TOKEN: &str = "REDLOCK_TOKEN";
    pub const FENCE: &str = "REDLOCK_FENCE";
    pub const TTL_MS: &str = "REDLOCK_TTL_MS";
    /// Every key, and every key's fence, in the order given, separated by spaces.
    pub const KEYS: &str = "REDLOCK_KEYS";
    pub const FENCES: &str = "REDLOCK_FENCES";
    /// A script's holder (`redlock-run lock`): where `unlock` finds it.
    pub const HOLDER: &str = "REDLOCK_HOLDER";
    pub const ALL: [&str; 7] = [KEY, TOKEN, FENCE, TTL_MS, KEYS, FENCES, HOLDER];
}

/// Every environment variable that configures a wrapper: what the command must not inherit, so
/// that a `redlock-run` inside it configures itself afresh (and no password leaks into it).
/// Other `REDLOCK_*` variables are the user's and are passed on. A test keeps this list equal
/// to the CLI's own (start-up does not build the clap command a second time for it).
pub const WRAPPER_VARIABLES: [&str; 34] = [
    "REDLOCK_BUSY_EXIT_CODE",
    "REDLOCK_CLUSTER",
    "REDLOCK_COMMAND_TIMEOUT",
    "REDLOCK_CONNECT_TIMEOUT",
    "REDLOCK_FAIL_OPEN",
    "REDLOCK_IDEMPOTENCY_KEY",
    "REDLOCK_IDEMPOTENCY_TTL",
    "REDLOCK_JITTER",
    "REDLOCK_KEY",
    "REDLOCK_KILL_GRACE",
    "REDLOCK_LIMIT",
    "REDLOCK_LOG_FORMAT",
    "REDLOCK_MAX_RUNTIME",
    "REDLOCK_METRICS_FILE",
    "REDLOCK_MIN_HOLD",
    "REDLOCK_NOTE",
    "REDLOCK_NO_NEW_PRIVS",
    "REDLOCK_ON_LOST",
    // Read by hand rather than by clap (see `redis_config`).
    "REDLOCK_PASSWORD",
    "REDLOCK_PASSWORD_FILE",
    "REDLOCK_QUIET",
    "REDLOCK_REDIS_URL",
    "REDLOCK_RENEW_EVERY",
    // Read by hand rather than by clap (see `redis_config`).
    "REDLOCK_SENTINEL",
    "REDLOCK_SENTINEL_MASTER",
    "REDLOCK_SENTINEL_PASSWORD",
    "REDLOCK_SENTINEL_PASSWORD_FILE",
    "REDLOCK_SHARED",
    "REDLOCK_TLS_CA_FILE",
    "REDLOCK_TLS_CERT_FILE",
    "REDLOCK_TLS_INSECURE",
    "REDLOCK_TLS_KEY_FILE",
    "REDLOCK_TTL",
    "REDLOCK_WAIT",
];

/// The lock a run nested in another's command sees in its environment (`REDLOCK_KEYS`,
/// `REDLOCK_TOKEN`).
#[derive(Debug, Clone)]
pub struct Outer {
    pub keys: Vec<Vec<u8>>,
    pub value: String,
}

impl Outer {
    pub(super) fn from_env() -> Option<Outer> {
        use std::os::unix::ffi::OsStringExt;
        let value = std::env::var(vars::TOKEN).ok()?;
        let key = std::env::var_os(vars::KEY)?.into_vec();
        let all = std::env::var_os(vars::KEYS).map_or_else(|| key.clone(), OsStringExt::into_vec);
        // One key may contain spaces; several may not (config refuses them).
        let keys =
            if all == key { vec![key] } else { all.split(|b| *b == b' ').map(<[u8]>::to_vec).collect() };
        Some(Outer { keys, value })
    }
}

/// `REDLOCK_*` variables of the environment that configure nothing but are a letter or two
/// from one that does (`REDLOCK_TLL`): likely typos, with the variable meant. The variables a
/// run gives its command, and any others, are the user's own and pass on unremarked.
pub fn mistyped_variables() -> Vec<(String, &'static str)> {
    std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| {
            name.starts_with("REDLOCK_")
                && !WRAPPER_VARIABLES.contains(&name.as_str())
                && !vars::ALL.contains(&name.as_str())
        })
        .filter_map(|name| {
            let typed = &name["REDLOCK_".len()..];
            let allowed = if typed.len() <= 4 { 1 } else { 2 };
            let distance = |k: &str| edits(typed.as_bytes(), &k.as_bytes()["REDLOCK_".len()..]);
            let meant = WRAPPER_VARIABLES.iter().copied().min_by_key(|k| distance(k))?;
            // Nearer to a variable of the command's (REDLOCK_TOKENS): the user's own.
            let nearest_output = vars::ALL.iter().map(|k| distance(k)).min().unwrap_or(usize::MAX);
            let edits = distance(meant);
            (edits <= allowed && edits < nearest_output).then_some((name, meant))
        })
        .collect()
}

/// The warnings of [`mistyped_variables`], one line each, for where no log is set up yet.
pub fn mistyped_lines() -> String {
    mistyped_variables()
        .into_iter()
        .map(|(name, meant)| {
            format!("redlock-run: warning: {name} is set but configures nothing: did you mean {meant}?\n")
        })
        .collect()
}

/// Edits from `a` to `b`: a byte added, dropped or changed, or two neighbours swapped.
fn edits(a: &[u8], b: &[u8]) -> usize {
    let mut d = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let change = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + change);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// How an error names the option `flag` (`--ttl`): by its variable (`REDLOCK_TTL`) when the
/// value came from there, else by the flag. For error messages only: it builds the whole
/// command-line definition (`cli::value_from_variable`, which names clap's errors' sources too).
pub(super) fn named(flag: &str) -> String {
    crate::cli::value_from_variable(flag).unwrap_or_else(|| flag.to_owned())
}

/// A variable's value, if set and not empty. A value that is not UTF-8 is an error, never a
/// reason to fall back to the next source (another Redis) without a word.
pub(super) fn non_empty_env(name: &str) -> Result<Option<String>, Error> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v).filter(|v| !v.is_empty())),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::Config(format!("{name} is not valid UTF-8: fix or unset it")))
        }
    }
}
