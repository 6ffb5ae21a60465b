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
    // The target, so that a copied binary says what it was built for (x86-64 or aarch64).
    let target = std::env::var("TARGET").unwrap_or_default();
    let build = match commit {
        Some(commit) => format!(" (commit {commit}; {target}; TLS: rustls with ring)"),
        None => format!(" ({target}; TLS: rustls with ring)"),
    };
    println!("cargo:rustc-env=REDLOCK_RUN_BUILD={build}");
    // A new commit changes the version line: watch HEAD and the branch it points to (outside a
    // checkout, nothing). Git says where they are: in a worktree `.git` is a file, HEAD lives in
    // the worktree's own git dir and the branches in the main one.
    let head_path = git_path("HEAD").unwrap_or_else(|| ".git/HEAD".to_owned());
    let head = std::fs::read_to_string(&head_path).unwrap_or_default();
    let branch = head.strip_prefix("ref: ").and_then(|r| git_path(r.trim()));
    for path in [Some(head_path), branch, git_path("packed-refs")].into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    link_the_unwinder_statically();
    link_position_dependent();
}

/// The glibc build's executable is linked at a fixed address (its code stays position
/// independent): a position-independent one has ld.so apply some 5 000 relocations and copy
/// the pages they write at every start (BENCHMARKS.md). The static builds get the same from
/// `relocation-model=static` in .cargo/config.toml.
fn link_position_dependent() {
    let var = |name| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}

/// A glibc build takes the unwinder from libgcc_eh.a instead of loading libgcc_s.so.1 at every
/// start: one shared library fewer to map and relocate, and its constructor's CPUID probes
/// (each one an exit to the hypervisor in a VM) gone. Found first, it leaves `-lgcc_s`, which
/// std asks for, nothing to resolve, so `--as-needed` drops it. A linker that has no
/// libgcc_eh.a (not gcc's) keeps the shared one. BENCHMARKS.md has the figures.
fn link_the_unwinder_statically() {
    let var = |name| std::env::var(name).unwrap_or_default();
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if !glibc || var("CARGO_CFG_TARGET_FEATURE").split(',').any(|f| f == "crt-static") {
        return;
    }
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let linker = std::env::var("RUSTC_LINKER").unwrap_or_else(|_| "cc".to_owned());
    let found = Command::new(linker)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .is_some_and(|path| std::path::Path::new(path.trim()).is_absolute());
    if found {
        println!("cargo:rustc-link-lib=static:-bundle=gcc_eh");
    }
}

/// Where git keeps `path` for this checkout (`git rev-parse --git-path`), when this is one.
fn git_path(path: &str) -> Option<String> {
    if !std::path::Path::new(".git").exists() {
        return None;
    }
    let out = Command::new("git").args(["rev-parse", "--git-path", path]).output().ok()?;
    let found = String::from_utf8(out.stdout).ok().filter(|_| out.status.success())?;
    Some(found.trim().to_owned()).filter(|p| !p.is_empty())
}

/// The commit in `.cargo_vcs_info.json` (`"sha1": "…"`), written by `cargo package`.
fn packaged_commit() -> Option<String> {
    let info = std::fs::read_to_string(".cargo_vcs_info.json").ok()?;
    let sha = info.split("\"sha1\"").nth(1)?.split('"').nth(1)?;
    (sha.len() >= 12 && sha.bytes().all(|b| b.is_ascii_hexdigit())).then(|| sha[..12].to_owned())
}
