//! The packaging metadata, checked cheaply on every `cargo test` (the package itself is built,
//! linted, installed and tested by `.ci/package`): every file the Debian package declares is
//! there and goes where Debian's tools look for it, the package's changelog names the crate's
//! version, nothing depends on a Redis server, the scripts parse, and `cargo binstall` looks
//! for the assets the release workflow attaches.

use std::path::Path;
use std::process::Command;

use crate::support::{run, wrapper};

/// What a run of `--version` or of the loader may take, on a loaded machine.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

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

/// `key = "value"` pairs of each `[package.metadata.binstall…]` section, by its header.
fn binstall_sections() -> Vec<(String, Vec<(String, String)>)> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut inside = false;
    for line in MANIFEST.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = header.starts_with("package.metadata.binstall");
            if inside {
                sections.push((header.to_owned(), Vec::new()));
            }
        } else if let (true, Some((key, value))) = (inside, line.split_once(" = ")) {
            let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).expect("a string value");
            sections.last_mut().unwrap().1.push((key.to_owned(), value.to_owned()));
        }
    }
    sections
}

/// The release's assets as .github/workflows/release.yml names them, `${version}` filled in.
fn release_assets(version: &str) -> Vec<String> {
    let workflow = std::fs::read_to_string(Path::new(ROOT).join(".github/workflows/release.yml")).unwrap();
    let list = &workflow[workflow.find("for asset in").expect("release.yml's list of assets")..];
    let list = &list[..list.find("; do").expect("the list's end")];
    list.split('"').skip(1).step_by(2).map(|a| a.replace("${version}", version)).collect()
}

/// `cargo binstall` finds the binaries the release workflow attaches, which are the ones
/// .ci/package builds: every Linux target's pkg-url, expanded as binstall does, names one of
/// the workflow's assets under the tag the workflow is run on.
#[test]
fn binstall_downloads_the_assets_the_release_attaches() {
    let version = env!("CARGO_PKG_VERSION");
    let sections = binstall_sections();
    let top = &sections
        .iter()
        .find(|(h, _)| h == "package.metadata.binstall")
        .expect("[package.metadata.binstall]")
        .1;
    assert!(top.contains(&("pkg-fmt".to_owned(), "bin".to_owned())), "a bare binary: {top:?}");

    let assets = release_assets(version);
    assert_eq!(assets.len(), 4, "two static binaries and two packages: {assets:?}");
    let package = std::fs::read_to_string(Path::new(ROOT).join(".ci/package")).unwrap();
    for asset in &assets {
        let built = format!("dist/{}", asset.replace(version, "${version}"));
        assert!(package.contains(&built), ".ci/package builds no {built}");
    }
    let workflow = std::fs::read_to_string(Path::new(ROOT).join(".github/workflows/release.yml")).unwrap();
    assert!(
        workflow.contains("tags: [\"v*\"]") && workflow.contains("= \"v$version\""),
        "the tag is v<version>"
    );

    let repo = "https://github.com/owner/redlock-run";
    for (target, arch) in [
        ("x86_64-unknown-linux-musl", "x86_64"),
        ("x86_64-unknown-linux-gnu", "x86_64"),
        ("aarch64-unknown-linux-musl", "aarch64"),
        ("aarch64-unknown-linux-gnu", "aarch64"),
    ] {
        let header = format!("package.metadata.binstall.overrides.{target}");
        let section = &sections.iter().find(|(h, _)| *h == header).unwrap_or_else(|| panic!("[{header}]")).1;
        let template = &section.iter().find(|(k, _)| k == "pkg-url").expect("a pkg-url").1;
        let url = [
            ("{ repo }", repo),
            ("{ version }", version),
            ("{ name }", "redlock-run"),
            ("{ target }", target),
        ]
        .iter()
        .fold(template.clone(), |url, (var, value)| url.replace(var, value));
        let file = url
            .strip_prefix(&format!("{repo}/releases/download/v{version}/"))
            .unwrap_or_else(|| panic!("{target}: {url} is not a download from the release of v{version}"));
        assert!(assets.iter().any(|a| a == file), "{target}: {file} is not among the release's {assets:?}");
        assert!(file.contains(&format!("-{arch}-")), "{target}: {file} is not the {arch} binary");
    }
}

/// A glibc build carries gcc's unwinder (build.rs): libc is the one library its start loads.
#[test]
fn a_glibc_build_loads_no_libgcc_s() {
    let version = run(wrapper().arg("--version"), LIMIT);
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    if !version.contains("-linux-gnu") {
        eprintln!("not a glibc build ({}): nothing to check", version.trim());
        return;
    }
    // glibc's loader lists what it maps and stops before the program runs.
    let out = run(wrapper().env("LD_TRACE_LOADED_OBJECTS", "1"), LIMIT);
    let loaded = String::from_utf8_lossy(&out.stdout);
    assert!(loaded.contains("libc.so.6"), "the loader's list: {loaded}");
    assert!(!loaded.contains("libgcc_s"), "libgcc_s.so.1 is loaded at every start: {loaded}");
}

/// The binary is linked at a fixed address (a glibc build: build.rs; the static ones:
/// .cargo/config.toml), so that no start spends time relocating it: an ELF of type EXEC, not DYN.
#[test]
fn the_binary_is_not_relocated_at_start() {
    let path = crate::support::bin();
    let header = std::fs::read(path).expect("the binary");
    assert_eq!(&header[..4], b"\x7fELF", "{path} is not an ELF file");
    let e_type = u16::from_le_bytes([header[16], header[17]]);
    assert_eq!(e_type, 2, "{path} is position-independent (ELF type {e_type}; 3 is DYN)");
}
