//! Build facts for `--version`: the git commit, when built from a checkout.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
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
