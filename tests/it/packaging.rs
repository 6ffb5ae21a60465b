//! The packaging metadata, checked cheaply on every `cargo test` (the package itself is built,
//! linted, installed and tested by `.ci/package`): every file the Debian package declares is
//! there and goes where Debian's tools look for it, the package's changelog names the crate's
//! version, nothing depends on a Redis server, and the scripts parse.

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const MANIFEST: &str = include_str!("../../Cargo.toml");

/// `[package.metadata.deb]`, as written.
fn deb_section() -> &'static str {
    let start = MANIFEST.find("\n[package.metadata.deb]\n").expect("Cargo.toml has [package.metadata.deb]");
    let section = &MANIFEST[start + 1..];
    let end = section[1..].find("\n[").map_or(section.len(), |i| i + 1);
    &section[..end]
}

/// (source, destination, mode) of each asset.
fn assets() -> Vec<(String, String, String)> {
    deb_section()
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("[\""))
        .map(|l| {
            let fields: Vec<String> = l.split('"').skip(1).step_by(2).map(str::to_owned).collect();
            assert_eq!(fields.len(), 3, "an asset is [source, destination, mode]: {l}");
            (fields[0].clone(), fields[1].clone(), fields[2].clone())
        })
        .collect()
}

#[test]
fn every_declared_file_is_there_and_goes_where_debian_looks() {
    let assets = assets();
    for (source, _, mode) in &assets {
        // The binary and the gzipped changelog are made by contrib/build-deb.sh.
        if !source.starts_with("target/") {
            assert!(Path::new(ROOT).join(source).is_file(), "{source} is declared and missing");
        }
        assert!(mode == "644" || mode == "755", "{source}: mode {mode}");
    }
    let to = |dest: &str| assets.iter().find(|(_, d, _)| d == dest).map(|(s, _, m)| (s.as_str(), m.as_str()));
    assert_eq!(to("usr/bin/"), Some(("target/release/redlock-run", "755")), "the binary");
    for page in [
        "redlock-run.1",
        "redlock-run-status.1",
        "redlock-run-release.1",
        "redlock-run-lock.1",
        "redlock-run-unlock.1",
    ] {
        let source = format!("man/{page}");
        assert!(
            assets.iter().any(|(s, d, _)| *s == source && d == "usr/share/man/man1/"),
            "{page} in /usr/share/man/man1 (gzipped by cargo-deb)"
        );
    }
    for (source, dest) in [
        ("completions/redlock-run.bash", "usr/share/bash-completion/completions/redlock-run"),
        ("completions/_redlock-run", "usr/share/zsh/vendor-completions/_redlock-run"),
        ("completions/redlock-run.fish", "usr/share/fish/vendor_completions.d/redlock-run.fish"),
        ("README.md", "usr/share/doc/redlock-run/"),
        ("docs/GUIDE.md", "usr/share/doc/redlock-run/docs/GUIDE.md"),
        ("target/deb/changelog.gz", "usr/share/doc/redlock-run/changelog.gz"),
        ("contrib/deb/lintian-overrides", "usr/share/lintian/overrides/redlock-run"),
    ] {
        assert_eq!(to(dest).map(|(s, _)| s), Some(source), "{dest}");
    }
    for key in ["license-file = [\"contrib/deb/copyright\"", "changelog = \"contrib/deb/changelog\""] {
        assert!(deb_section().contains(key), "[package.metadata.deb] has {key}");
    }
    // The lock server usually lives on another host.
    assert!(!deb_section().contains("redis-server"), "no dependency on redis-server");
}

#[test]
fn the_packages_changelog_names_the_crates_version() {
    let version = env!("CARGO_PKG_VERSION");
    let changelog = std::fs::read_to_string(Path::new(ROOT).join("contrib/deb/changelog")).unwrap();
    let first = changelog.lines().next().unwrap_or_default();
    assert!(first.starts_with(&format!("redlock-run ({version}-")), "contrib/deb/changelog: {first}");
}

#[test]
fn the_packaging_scripts_parse_and_run() {
    for script in [
        ".ci/package",
        "contrib/build-static.sh",
        "contrib/build-deb.sh",
        "contrib/test-deb.sh",
        "contrib/test-scratch.sh",
    ] {
        let path = Path::new(ROOT).join(script);
        let mode = std::os::unix::fs::PermissionsExt::mode(&path.metadata().unwrap().permissions());
        assert!(mode & 0o111 != 0, "{script} is executable");
        let out = Command::new("bash").arg("-n").arg(&path).output().expect("bash");
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn the_container_image_holds_the_static_binary_alone() {
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("contrib/Dockerfile")).unwrap();
    let last = &dockerfile[dockerfile.rfind("\nFROM ").expect("a FROM")..];
    assert!(last.starts_with("\nFROM scratch\n"), "the image is FROM scratch: {last}");
    assert!(dockerfile.contains("contrib/build-static.sh"), "built by the documented script");
    assert!(
        last.contains("/etc/ssl/certs/ca-certificates.crt") && last.contains("ENTRYPOINT [\"/redlock-run\"]")
    );
}
