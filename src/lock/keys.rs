//! Names of everything the tool stores next to a lock key.
//!
//! Every derived name must land in the lock key's Redis Cluster hash slot, so that one script
//! can touch them all (no CROSSSLOT), and must start with a prefix built from the lock key, so
//! that a small ACL key pattern covers them.

/// The lock key and the names derived from it.
#[derive(Debug, Clone)]
pub struct Keys {
    pub lock: Vec<u8>,
    /// What every derived name starts with (see [`slot_prefix`]).
    prefix: Vec<u8>,
    pub fence: Vec<u8>,
    /// Pub/sub channel on which a release is announced to waiters that do not queue (Redlock)
    /// and to older versions.
    pub released_channel: Vec<u8>,
    /// The fair queue of waiters: a sorted set of their lock values, scored by arrival.
    pub queue: Vec<u8>,
    /// When each queued waiter's entry lapses unless kept alive (server ms), by lock value.
    pub queue_expiry: Vec<u8>,
    /// The counter that numbers arrivals in the queue.
    pub queue_seq: Vec<u8>,
    /// For `--shared` and `--limit`, whose lock key is a sorted set of holders (scored by when
    /// each lease ends): each holder's fence, and the success record it will write
    /// (`<fence>` or `<fence> <record key>`), by lock value.
    pub holders: Vec<u8>,
    /// What a waiter's wake-up channel starts with; its token follows (see [`Keys::wake`]).
    pub wake_prefix: Vec<u8>,
}

impl Keys {
    pub fn new(lock: &[u8]) -> Self {
        let prefix = slot_prefix(lock);
        Keys {
            lock: lock.to_vec(),
            fence: derived(&prefix, b":fence"),
            released_channel: derived(&prefix, b":released"),
            queue: derived(&prefix, b":queue"),
            queue_expiry: derived(&prefix, b":queue:expiry"),
            queue_seq: derived(&prefix, b":queue:seq"),
            wake_prefix: derived(&prefix, b":wake:"),
            holders: derived(&prefix, b":holders"),
            prefix,
        }
    }

    /// The other lock key, if any, whose stored names are this key's: this key is exactly the
    /// prefix that other key's names start with (`{a}` for `a`, `{21364}a}` for `a}`), so runs
    /// on the two keys would share one queue and one fence.
    pub fn twin(&self) -> Option<Vec<u8>> {
        let key = &self.lock;
        hash_tag(key)?;
        let inner = key.strip_prefix(b"{")?;
        let close = inner.iter().position(|&b| b == b'}')?;
        let candidate = if close + 1 == inner.len() { &inner[..close] } else { &inner[close + 1..] };
        (!candidate.is_empty() && Keys::new(candidate).prefix == self.prefix).then(|| candidate.to_vec())
    }

    /// The lock key, if any, that `key` is stored next to, and what it is there: a run on such a
    /// key would take that lock's fence counter, queue or success record for a lock of its own.
    /// Of twins (`a` and `{a}`), the plain one.
    pub fn stored_next_to(key: &[u8]) -> Option<(Vec<u8>, &'static str)> {
        const STORED: [(&[u8], &str); 5] = [
            (b":fence", "fence counter"),
            (b":queue:expiry", "queue's expiry times"),
            (b":queue:seq", "queue's arrival counter"),
            (b":queue", "queue"),
            (b":holders", "holders' fences"),
        ];
        let records = (0..key.len())
            .filter(|&at| key[at..].starts_with(b":done:"))
            .map(|at| (&key[..at], "success record"));
        let stored = STORED.iter().filter_map(|(suffix, what)| Some((key.strip_suffix(*suffix)?, *what)));
        for (prefix, what) in stored.chain(records) {
            // The keys whose names start with `prefix`: `a` for `{a}`, `a}b` for `{tag}a}b`,
            // and a key with a hash tag of its own for itself.
            let inner = prefix.strip_prefix(b"{").and_then(|rest| {
                let close = rest.iter().position(|&b| b == b'}')?;
                Some(if close + 1 == rest.len() { &rest[..close] } else { &rest[close + 1..] })
            });
            for lock in inner.into_iter().chain([prefix]) {
                if !lock.is_empty() && slot_prefix(lock) == prefix {
                    return Some((lock.to_vec(), what));
                }
            }
        }
        None
    }

    /// Whether `key` is one of the keys stored next to the lock (a success record included).
    pub fn stores(&self, key: &[u8]) -> bool {
        [&self.fence, &self.queue, &self.queue_expiry, &self.queue_seq, &self.holders]
            .iter()
            .any(|n| *n == key)
            || key.starts_with(&self.record(b""))
    }

    /// The channel on which the waiter with this token is told that its turn has come.
    pub fn wake(&self, token: &str) -> Vec<u8> {
        let mut channel = self.wake_prefix.clone();
        channel.extend_from_slice(token.as_bytes());
        channel
    }

    /// The channel on which the waiter with this token is told that a release handed the lock
    /// over to it (`<fence> <ms>`: see `scripts::RELEASE`).
    pub fn grant(&self, token: &str) -> Vec<u8> {
        let mut channel = self.wake(token);
        channel.extend_from_slice(GRANT_SUFFIX);
        channel
    }

    /// The success record of `--idempotency-key ID`.
    pub fn record(&self, id: &[u8]) -> Vec<u8> {
        let mut suffix = b":done:".to_vec();
        suffix.extend_from_slice(id);
        derived(&self.prefix, &suffix)
    }
}

/// What ends a grant channel's name (after the wake channel's).
pub const GRANT_SUFFIX: &[u8] = b":grant";

fn derived(prefix: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(prefix.len() + suffix.len());
    name.extend_from_slice(prefix);
    name.extend_from_slice(suffix);
    name
}

/// A prefix that hashes to the same Cluster slot as `key`, whatever suffix follows it:
/// - the key itself when it has a hash tag of its own (`lock:{job}` → `lock:{job}:fence`);
/// - the key wrapped in braces when that makes the whole key the tag (`lock:job` → `{lock:job}:fence`);
/// - otherwise (a key with a `}` but no usable tag) a short tag chosen to hash to the key's slot,
///   followed by the key for readability.
fn slot_prefix(key: &[u8]) -> Vec<u8> {
    if hash_tag(key).is_some() {
        return key.to_vec();
    }
    let mut prefix = Vec::with_capacity(key.len() + 8);
    prefix.push(b'{');
    if !key.contains(&b'}') {
        prefix.extend_from_slice(key);
        prefix.push(b'}');
    } else {
        prefix.extend_from_slice(tag_for_slot(slot(key)).as_bytes());
        prefix.push(b'}');
        prefix.extend_from_slice(key);
    }
    prefix
}

/// The part of `key` Redis Cluster hashes: the bytes between the first `{` and the next `}`,
/// when that is not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The Redis Cluster hash slot of a key.
pub fn slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % 16384
}

/// The smallest decimal number whose text hashes to `slot`. Every slot has one below 10^6
/// (checked by a test), so the search is bounded.
fn tag_for_slot(slot: u16) -> String {
    (0u32..1_000_000)
        .map(|n| n.to_string())
        .find(|tag| crc16(tag.as_bytes()) % 16384 == slot)
        .expect("every hash slot has a decimal tag below 10^6")
}

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster uses for key slots.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_cluster_spec_example() {
        // From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
    }

    #[test]
    fn derived_names_share_the_lock_key_slot() {
        for key in [
            &b"lock:job"[..],
            b"lock:{job}:x",
            b"a}b",
            b"{}x",
            b"x{}y}",
            b"}",
            b"{",
            b"\xff\x00{\x01}",
            b"plain key with spaces",
        ] {
            let keys = Keys::new(key);
            assert_eq!(slot(&keys.fence), slot(key), "fence of {key:?}");
            assert_eq!(slot(&keys.released_channel), slot(key), "channel of {key:?}");
            for name in
                [&keys.queue, &keys.queue_expiry, &keys.queue_seq, &keys.holders, &keys.wake("0123abcd")]
            {
                assert_eq!(slot(name), slot(key), "{:?} of {key:?}", String::from_utf8_lossy(name));
            }
            assert_ne!(keys.fence, keys.lock);
        }
    }

    /// Two different keys share their stored names exactly when one is the other's twin, which
    /// a run refuses (`config`): over every key of up to four bytes of `a`, `{`, `}`, `2`.
    #[test]
    fn a_key_stored_next_to_a_lock_names_that_lock() {
        for lock in [&b"job"[..], b"lock:{job}", b"a}b", b"{x}"] {
            let k = Keys::new(lock);
            for (name, what) in [
                (k.fence.clone(), "fence counter"),
                (k.queue.clone(), "queue"),
                (k.queue_expiry.clone(), "queue's expiry times"),
                (k.queue_seq.clone(), "queue's arrival counter"),
                (k.holders.clone(), "holders' fences"),
                (k.record(b"2026-12-04"), "success record"),
                (k.record(b"a:done:b"), "success record"),
            ] {
                let (owner, said) = Keys::stored_next_to(&name).expect("found");
                assert_eq!(said, what, "{}", name.escape_ascii());
                assert_eq!(
                    Keys::new(&owner).fence,
                    k.fence,
                    "{} -> {}",
                    name.escape_ascii(),
                    owner.escape_ascii()
                );
            }
        }
        assert_eq!(
            Keys::stored_next_to(b"{job}:fence").map(|(l, _)| l),
            Some(b"job".to_vec()),
            "the plain twin"
        );
        for key in
            [&b"job"[..], b"lock:fence", b"lock:done:x", b"{job}", b":fence", b"{}:fence", b"lock:{}:fence"]
        {
            assert_eq!(Keys::stored_next_to(key), None, "{}", key.escape_ascii());
        }
    }

    #[test]
    fn only_twins_share_their_stored_names() {
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        let mut keys = Vec::new();
        for _ in 0..4 {
            all = all
                .iter()
                .flat_map(|k| b"a{}2".iter().map(move |&b| [k.as_slice(), &[b]].concat()))
                .collect();
            keys.extend(all.iter().cloned());
        }
        // Each prefix's keys, each with its twin.
        type Sharing = Vec<(Vec<u8>, Option<Vec<u8>>)>;
        let mut by_prefix: std::collections::HashMap<Vec<u8>, Sharing> = std::collections::HashMap::new();
        for k in keys {
            let names = Keys::new(&k);
            by_prefix.entry(names.prefix.clone()).or_default().push((k, names.twin()));
        }
        for sharing in by_prefix.values() {
            for (a, a_twin) in sharing {
                for (b, b_twin) in sharing.iter().filter(|(b, _)| b != a) {
                    let twins = a_twin.as_ref() == Some(b) || b_twin.as_ref() == Some(a);
                    assert!(twins, "{:?} and {:?} share their names", a.escape_ascii(), b.escape_ascii());
                }
            }
            for (a, twin) in sharing {
                if let Some(twin) = twin {
                    assert!(sharing.iter().any(|(b, _)| b == twin), "{:?}: not its twin's", a.escape_ascii());
                }
            }
        }
        assert_eq!(Keys::new(b"{a}").twin(), Some(b"a".to_vec()));
        assert_eq!(Keys::new(b"lock:{a}").twin(), None);
    }

    #[test]
    fn derived_names_are_readable() {
        assert_eq!(Keys::new(b"lock:job").fence, b"{lock:job}:fence");
        assert_eq!(Keys::new(b"lock:{job}").fence, b"lock:{job}:fence");
        assert_eq!(Keys::new(b"lock:job").released_channel, b"{lock:job}:released");
    }

    #[test]
    fn every_slot_has_a_short_tag() {
        let mut seen = vec![false; 16384];
        let mut left = seen.len();
        for n in 0u32..1_000_000 {
            let s = usize::from(crc16(n.to_string().as_bytes()) % 16384);
            if !seen[s] {
                seen[s] = true;
                left -= 1;
                if left == 0 {
                    return;
                }
            }
        }
        panic!("{left} slots have no decimal tag below 10^6");
    }
}
