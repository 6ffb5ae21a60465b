//! `--note` (docs/GUIDE.md § Options): a label stored with the holder, shown wherever the holder
//! is named.

use std::time::Duration;

use crate::support::logs::text_lines;
use crate::support::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn a_note_names_the_holder_to_other_runs_status_and_its_own_logs() {
    let redis = RedisServer::start();
    let dir = tmp();
    let go = file(&dir, "go");
    let note = "ci job https://ci.example/runs/7?x=100%";
    // Shared, on two keys: the note is in every value the run stores.
    let mut holder = redlock(&redis)
        .env("REDLOCK_NOTE", note)
        .args(["-v", "--shared", "-k", "lock:note:a", "-k", "lock:note:b"])
        .args(["--", "sh", "-c", HOLD_UNTIL_GO])
        .env("GO", &go)
        .stderr(std::process::Stdio::piped())
        .start();
    assert!(wait_until(LIMIT, || redis.exists(b"lock:note:b")));

    let busy = run(redlock(&redis).args(["-k", "lock:note:b", "--", "true"]), LIMIT);
    assert_eq!(busy.code, 75, "{}", busy.stderr);
    assert!(busy.stderr.contains(&format!("(pid {}, note {note:?})", holder.id())), "{}", busy.stderr);

    let status = |json: &[&str]| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(["status", "--redis-url", &redis.url(), "--key", "lock:note:b"]).args(json);
        run(&mut cmd, LIMIT)
    };
    let text = String::from_utf8_lossy(&status(&[]).stdout).into_owned();
    assert!(text.contains(&format!("note {note:?}")), "{text}");
    let json: Value = serde_json::from_slice(&status(&["--json"]).stdout).expect("status --json is JSON");
    assert_eq!(json["holders"][0]["note"], note, "{json}");
    assert_eq!(json["holders"][0]["pid"], holder.id());

    std::fs::write(&go, "").unwrap();
    let out = wait_output(&mut holder, LIMIT);
    assert!(out.status.success());
    let lines = text_lines(&String::from_utf8_lossy(&out.stderr));
    let acquired = lines.iter().find(|l| l.message.starts_with("acquired")).expect("an acquired line");
    assert!(acquired.fields.iter().any(|(k, v)| k == "note" && v == note), "{:?}", acquired.fields);
}

#[test]
fn a_note_that_does_not_fit_on_one_short_line_is_a_usage_error() {
    let redis = RedisServer::start();
    let at_most = "n".repeat(200);
    let ok = run(redlock(&redis).args(["-k", "lock:note:ok", "--note", &at_most, "--", "true"]), LIMIT);
    assert_eq!(ok.code, 0, "200 bytes fit: {}", ok.stderr);
    let empty =
        run(redlock(&redis).env("REDLOCK_NOTE", "").args(["-k", "lock:note:ok", "--", "true"]), LIMIT);
    assert_eq!(empty.code, 0, "empty is none: {}", empty.stderr);
    // Blank is none too, and a note is stored without the whitespace around it.
    let dir = tmp();
    for (i, (given, stored)) in [(" \t ", " "), ("  pod 7 ", "~pod%207 ")].into_iter().enumerate() {
        let go = file(&dir, &format!("go-{i}"));
        let mut holder = hold_until(&redis, ["-k", "lock:note:blank", "--note", given], &go);
        assert!(wait_until(LIMIT, || redis.exists(b"lock:note:blank")));
        let value = String::from_utf8(redis.get(b"lock:note:blank").unwrap()).unwrap();
        assert_eq!(value.find(['~', ' ']).map(|at| &value[at..at + stored.len()]), Some(stored), "{value}");
        std::fs::write(&go, "").unwrap();
        assert!(wait_bounded(&mut holder, LIMIT).success());
    }

    let long = format!("{at_most}é");
    let too_long = run(redlock(&redis).args(["-k", "lock:note:no", "--note", &long, "--", "true"]), LIMIT);
    assert_eq!(too_long.code, 64, "{}", too_long.stderr);
    assert!(too_long.stderr.contains("--note is 202 bytes long, more than the 200"), "{}", too_long.stderr);
    for bad in ["two\nlines", "a\ttab", "\u{1b}[31mred", "a\u{202e}evil", "zero\u{200b}width", "\u{feff}bom"]
    {
        let refused =
            run(redlock(&redis).env("REDLOCK_NOTE", bad).args(["-k", "lock:note:no", "--", "true"]), LIMIT);
        assert_eq!(refused.code, 64, "{bad:?}: {}", refused.stderr);
        assert!(refused.stderr.contains("REDLOCK_NOTE must be one line"), "{}", refused.stderr);
    }
    assert!(!redis.exists(b"lock:note:no"));
}

#[test]
fn what_anyone_wrote_into_a_value_is_shown_escaped() {
    let redis = RedisServer::start();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let value = format!("0123456789abcdef\u{1b}[2J~n \u{1b}]0;pwned\u{7}\u{202e} 1 {now}");
    redis.cmd::<()>(&[b"SET", b"lock:note:kh", value.as_bytes(), b"PX", b"60000"]);
    let operator = |args: &[&str]| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(args).args(["--redis-url", &redis.url(), "--key", "lock:note:kh"]);
        run(&mut cmd, LIMIT)
    };
    let busy = run(redlock(&redis).args(["-k", "lock:note:kh", "--", "true"]), LIMIT);
    for (what, out) in [
        ("status", operator(&["status"]).stdout),
        ("busy", busy.stderr.into_bytes()),
        ("release", operator(&["release", "--force"]).stdout),
    ] {
        let out = String::from_utf8_lossy(&out).into_owned();
        assert!(out.contains("\\u{1b}]0;pwned\\u{7}\\u{202e} (pid 1"), "{what}: {out:?}");
        assert!(!out.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{what}: {out:?}");
    }
    assert!(!redis.exists(b"lock:note:kh"), "released");
}
