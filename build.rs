//! Build facts for `--version`: the git commit, when built from a checkout.

use std::process::Command;

fn main() {
    // Only this project's own checkout counts (a crate unpacked inside some other git
    // repository must not report that one's commit); a packaged crate names the commit it was
    // packaged from in .cargo_vcs_info.json.
    let commit = if std::path::Path::new(".git").exists() {
        Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    } else {
        packaged_commit()
    };
    let build = match commit {
        Some(commit) => format!(" (commit {commit}; TLS: rustls with ring)"),
        None => " (TLS: rustls with ring)".to_owned(),
    };
    println!("cargo:rustc-env=REDLOCK_RUN_BUILD={build}");
    // A new commit changes the version line: watch HEAD and the branch it points to (outside a
    // plain checkout, nothing).
    let head = std::fs::read_to_string(".git/HEAD").unwrap_or_default();
    let branch = head.strip_prefix("ref: ").map(|r| format!(".git/{}", r.trim()));
    for path in
        [Some(".git/HEAD".to_owned()), branch, Some(".git/packed-refs".to_owned())].into_iter().flatten()
    {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// The commit in `.cargo_vcs_info.json` (`"sha1": "…"`), written by `cargo package`.
fn packaged_commit() -> Option<String> {
    let info = std::fs::read_to_string(".cargo_vcs_info.json").ok()?;
    let sha = info.split("\"sha1\"").nth(1)?.split('"').nth(1)?;
    (sha.len() >= 12 && sha.bytes().all(|b| b.is_ascii_hexdigit())).then(|| sha[..12].to_owned())
}
