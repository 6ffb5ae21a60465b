//! The lock keys: how many, how long, and which can share a run (a key's stored names must
//! not collide with another's).

use super::*;
/// The most keys one run holds: the script that takes them all checks each (about 6 µs a key
/// in Redis), and must stay far inside the shortest request timeout.
pub const MAX_KEYS: usize = 100;

/// The longest lock key: the command gets it in its environment (`REDLOCK_LOCK_KEY=…`), and Linux
/// limits one environment string to 128 KiB (MAX_ARG_STRLEN); half of that always fits.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// `--key`, once or more (clap has made sure that it is there), in the order given.
pub(super) fn keys(arg: &KeyArg, for_run: bool) -> Result<Vec<Vec<u8>>, Error> {
    if arg.value.is_empty() {
        return Err(usage("--key is required"));
    }
    if arg.value.len() > MAX_KEYS {
        return Err(usage(format!(
            "--key is given {} times; a run holds at most {MAX_KEYS} keys (the script that takes them \
             all must stay well inside one request's time limit)",
            arg.value.len()
        )));
    }
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(arg.value.len());
    // The names stored next to each key, worked out once per key (a key with a `}` and no
    // usable hash tag needs a search for its slot's tag).
    let mut names: Vec<crate::lock::Keys> = Vec::with_capacity(arg.value.len());
    for raw in &arg.value {
        let raw = raw.as_bytes();
        if raw.is_empty() {
            return Err(usage(format!("{} must not be empty", named("--key"))));
        }
        if keys.iter().any(|k| k == raw) {
            return Err(usage(format!(
                "--key {} is given more than once; each key is held once",
                crate::lock::show_key(raw)
            )));
        }
        // Keys whose stored names coincide (`a` and `{a}`), or a key that is another's stored
        // name (`{a}:fence`), would take one lock twice.
        let mine = crate::lock::Keys::new(raw);
        if let Some(clash) = names.iter().find_map(|k| collision(k, &mine)) {
            return Err(usage(clash));
        }
        if let Some(twin) = mine.twin().filter(|_| for_run) {
            let show = crate::lock::show_key;
            return Err(usage(format!(
                "{} {} would share its queue and its fence with the lock {} (the names stored next to \
                 {} start with {}): use {}, which is in the same Cluster slot, or a key with more than \
                 the hash tag, such as \"lock:{}\"",
                named("--key"),
                show(raw),
                show(&twin),
                show(&twin),
                show(raw),
                show(&twin),
                raw.escape_ascii()
            )));
        }
        if for_run && arg.value.len() > 1 && splits(raw) {
            return Err(usage(format!(
                "--key {} contains whitespace or a control character: with several keys, the command \
                 gets them separated by spaces (REDLOCK_KEYS), so none may contain any",
                crate::lock::show_key(raw)
            )));
        }
        keys.push(raw.to_vec());
        names.push(mine);
    }
    // Checked once every key is known: a pair of keys given together has its own message.
    for raw in keys.iter().filter(|_| for_run) {
        if let Some((lock, what)) = crate::lock::Keys::stored_next_to(raw) {
            let show = crate::lock::show_key;
            return Err(usage(format!(
                "{} {} is the {what} of the lock {}, stored next to that key: it would be read as \
                 held or busy; choose a key of its own",
                named("--key"),
                show(raw),
                show(&lock)
            )));
        }
    }
    let total = keys.iter().map(|k| k.len() + 1).sum::<usize>() - 1;
    if total > MAX_KEY_LEN {
        return Err(usage(format!(
            "{} is {total} bytes long{}; the limit is {MAX_KEY_LEN} bytes (64 KiB), so that the \
             command's environment can hold it as REDLOCK_LOCK_KEY and REDLOCK_KEYS",
            named("--key"),
            if keys.len() > 1 { " in all" } else { "" }
        )));
    }
    Ok(keys)
}

/// How two keys would be one lock: they share what is stored next to them (`a` and `{a}`), or
/// one is a name stored next to the other (`a` and `{a}:fence`).
pub(super) fn collision(a: &crate::lock::Keys, b: &crate::lock::Keys) -> Option<String> {
    let show = crate::lock::show_key;
    let (first, second) = (show(&a.lock), show(&b.lock));
    if a.fence == b.fence {
        Some(format!(
            "--key {first} and --key {second} share the names stored next to them ({}); they are one lock",
            show(&a.fence)
        ))
    } else if let Some((key, stored)) = [(a, b), (b, a)].into_iter().find(|(k, s)| k.stores(&s.lock)) {
        Some(format!(
            "--key {} is one of the names stored next to --key {}; they are one lock",
            show(&stored.lock),
            show(&key.lock)
        ))
    } else {
        None
    }
}

/// Whether a key would not survive being split at whitespace: any space or control byte, or
/// Unicode whitespace (NBSP and the like, which splitting in Python or awk also honours).
pub(super) fn splits(key: &[u8]) -> bool {
    key.iter().any(|&b| b <= b' ' || b == 0x7f)
        || String::from_utf8_lossy(key).chars().any(char::is_whitespace)
}
