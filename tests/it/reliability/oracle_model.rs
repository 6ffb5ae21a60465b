//! The oracle's model of each kind, checked by hand, without Redis.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use crate::support::oracle::{self, Oracle};
use crate::support::*;

/// A hand-driven client of the oracle: enters with a fence, kind and resource, and writes.
struct Holder {
    conn: UnixStream,
    replies: BufReader<UnixStream>,
}

impl Holder {
    fn enter(oracle: &Oracle, fence: u64, kind: &str, resource: &str) -> (Holder, bool) {
        let conn = UnixStream::connect(oracle.path()).expect("connect to the oracle");
        let replies = BufReader::new(conn.try_clone().expect("clone"));
        let mut h = Holder { conn, replies };
        let ok = h.say(&format!("ENTER {fence} 1 1 1 1000 {kind} {resource}"));
        (h, ok)
    }

    fn write(&mut self, fence: u64) -> bool {
        self.say(&format!("WRITE {fence}"))
    }

    /// Sends a line; true for `OK`, false for `STALE`.
    fn say(&mut self, line: &str) -> bool {
        self.conn.write_all(format!("{line}\n").as_bytes()).expect("send");
        let mut answer = String::new();
        self.replies.read_line(&mut answer).expect("answer");
        answer.trim() == "OK"
    }
}

/// The oracle's model of each kind (tests/support/oracle.rs), driven by hand: it flags a key
/// held beyond its kind, refuses the stale holder's writes and not the legitimate ones', and
/// shows a fence that went backwards.
#[test]
fn oracle_flags_holders_beyond_their_kind_and_refuses_stale_writes() {
    let dir = tmp();
    let oracle = Oracle::start(dir.path());
    let overlaps_on = |key: &str| -> Vec<oracle::Overlap> {
        oracle.report().overlaps.into_iter().filter(|o| o.resource == key).collect()
    };

    // A semaphore of 2: two holders write whatever their fences' order; a third displaces the
    // lowest fence, whose writes are refused from then on, and is recorded with the one that
    // displaced it.
    let (mut b, ok_b) = Holder::enter(&oracle, 11, "limit=2", "sem");
    let (mut a, ok_a) = Holder::enter(&oracle, 10, "limit=2", "sem");
    assert!(ok_a && ok_b && a.write(10) && b.write(11), "two holders of --limit 2 both write");
    assert!(overlaps_on("sem").is_empty());
    let (mut c, ok_c) = Holder::enter(&oracle, 12, "limit=2", "sem");
    assert!(ok_c && b.write(11) && c.write(12), "the fresher holders write");
    assert!(!a.write(10), "the displaced holder is refused");
    let sem = overlaps_on("sem");
    assert_eq!(sem.len(), 1, "{sem:?}");
    assert_eq!((sem[0].fences.as_slice(), sem[0].rejected), (&[10, 12][..], 1), "{sem:?}");
    assert_eq!(oracle.report().resources["sem"].peak, 3);
    // A fourth with a fence lower than all (a fence gone backwards) is refused at its entry,
    // and has no overlap of its own: its refusals are outside any.
    let (mut d, ok_d) = Holder::enter(&oracle, 5, "limit=2", "sem");
    assert!(!ok_d && !d.write(5) && b.write(11) && c.write(12));
    assert_eq!(overlaps_on("sem").len(), 1);

    // Readers and a writer: readers write together whatever their fences' order; a writer
    // beside them is an overlap for each, and it refuses them; a reader or writer with a
    // fence below the writer's is refused.
    let (mut r1, ok1) = Holder::enter(&oracle, 21, "shared", "rw");
    let (mut r2, ok2) = Holder::enter(&oracle, 20, "shared", "rw");
    assert!(ok1 && ok2 && r1.write(21) && r2.write(20), "readers hold together");
    assert!(overlaps_on("rw").is_empty());
    let (mut w, ok_w) = Holder::enter(&oracle, 22, "exclusive", "rw");
    assert!(ok_w && w.write(22));
    assert!(!r1.write(21) && !r2.write(20), "readers older than the writer are refused");
    assert_eq!(overlaps_on("rw").len(), 2);
    let (mut late, ok_late) = Holder::enter(&oracle, 19, "shared", "rw");
    assert!(!ok_late && !late.write(19), "a reader older than the writer is refused");
    let w_overlap = overlaps_on("rw").into_iter().find(|o| o.fences[0] == 22).expect("the writer's overlap");
    assert_eq!(w_overlap.fences, [22, 19], "the writer's overlap shows the lower fence that came after it");
    drop((r1, r2, late, w));
    let (mut r3, ok3) = Holder::enter(&oracle, 24, "shared", "rw");
    assert!(ok3 && r3.write(24), "a reader after the writer left");
    let (mut old_writer, ok_old) = Holder::enter(&oracle, 23, "exclusive", "rw");
    assert!(!ok_old && !old_writer.write(23), "a writer below the last reader's fence is refused");

    // Kinds that do not go together on one key, and a fence used twice, are counted.
    let (_mixed, _) = Holder::enter(&oracle, 30, "exclusive", "sem");
    let (_again, _) = Holder::enter(&oracle, 12, "limit=2", "sem");
    let report = oracle.report();
    assert_eq!(report.resources["sem"].kind_conflicts, 1);
    assert_eq!(report.fence_reused, 1);
    drop((a, b, c, d, r3, old_writer));
}
