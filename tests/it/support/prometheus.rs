//! Reading what `--metrics-file` wrote: the text exposition format, checked by hand and, where
//! it is installed, by `promtool check metrics`.

use std::io::Write;
use std::process::{Command, Stdio};

/// Checks the text exposition format: HELP/TYPE before samples, metric names and labels well
/// formed, values numeric. Returns the samples as (name{labels}, value).
pub fn parse_prometheus(text: &str) -> Vec<(String, f64)> {
    let mut typed = std::collections::HashSet::new();
    let mut samples = Vec::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            assert!(name_ok(rest.split(' ').next().unwrap()), "{line}");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(name_ok(name) && ["gauge", "counter", "untyped"].contains(&kind), "{line}");
            typed.insert(name.to_owned());
        } else {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("sample: {line}"));
            let name = series.split('{').next().unwrap();
            assert!(name_ok(name), "{line}");
            assert!(typed.contains(name), "TYPE precedes {name}");
            let labels = &series[name.len()..];
            if !labels.is_empty() {
                let inner = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}')).expect("{labels}");
                for pair in inner.split("\",").map(|p| p.trim_end_matches('"')) {
                    let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("label {pair} in {line}"));
                    assert!(name_ok(k), "{line}");
                    assert!(!v.contains('\n'));
                }
            }
            samples.push((
                series.to_owned(),
                value.parse::<f64>().unwrap_or_else(|_| panic!("value in {line}")),
            ));
        }
    }
    samples
}

pub fn sample(samples: &[(String, f64)], series: &str) -> Option<f64> {
    samples.iter().find(|(s, _)| s == series).map(|(_, v)| *v)
}

/// Runs `promtool check metrics` on `text` when promtool is on PATH (Debian: `prometheus`) and
/// fails the test on what it reports; says it skipped otherwise. Returns whether it ran.
pub fn promtool_check(text: &str) -> bool {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("skipped: promtool is not installed (apt install prometheus)");
        return false;
    };
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
    let out = super::wait_output(&mut child, std::time::Duration::from_secs(30));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
    true
}
