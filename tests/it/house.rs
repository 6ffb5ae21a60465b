//! The rules of docs/ARCHITECTURE.md that the compiler does not keep, read from the sources:
//! imports go down the layers its picture draws and never run in a circle, the Redis client
//! stays in `lock/`, clap in `cli/` and `config/`, every exit status comes from `exit.rs`, and
//! no file but a test grows past 700 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a file of the tool's own code may be (tests aside).
const MAX_LINES: usize = 700;

/// One file of `src/`: its module path (`lock::conn`; the crate root is empty), its code
/// without comments and without its tests, and whether it holds tests only.
struct Module {
    path: Vec<String>,
    file: String,
    code: String,
    test_only: bool,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn modules() -> Vec<Module> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = root().join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    let mods: Vec<Module> = files
        .iter()
        .map(|file| {
            let rel = file.strip_prefix(&src).unwrap().with_extension("");
            let mut path: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if path.last().is_some_and(|l| l == "mod") {
                path.pop();
            }
            if path == ["lib"] || path == ["main"] {
                path.clear();
            }
            let name = path.last().cloned().unwrap_or_default();
            let text = std::fs::read_to_string(file).unwrap();
            Module {
                test_only: name == "tests" || name.ends_with("_tests"),
                code: without_tests(&without_comments(&text)),
                file: file.strip_prefix(root()).unwrap().display().to_string(),
                path,
            }
        })
        .collect();
    assert!(mods.len() > 30, "found the sources: {}", mods.len());
    mods
}

/// The code without `//` comments (doc comments too: a link in one is no import) and without
/// string literals' contents, which may quote paths.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    in_string = false;
                    out.push('"');
                }
                '\n' => out.push('\n'),
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push('"');
            }
            // A character literal of a quote or a backslash is not a string's start.
            '\'' if chars.peek() == Some(&'"') || chars.peek() == Some(&'\\') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\'' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The code before its test module (by the house's custom the last item of a file).
fn without_tests(code: &str) -> String {
    match code.find("#[cfg(test)]\nmod ") {
        Some(at) if code[at..].lines().nth(1).is_some_and(|l| l.trim_end().ends_with('{')) => {
            code[..at].to_owned()
        }
        _ => code.to_owned(),
    }
}

/// The modules `m` uses: `crate::a::b` and `super::…` paths, and its own submodules by name,
/// each resolved to the deepest module that exists.
fn uses(m: &Module, known: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let deepest = |mut path: Vec<String>| {
        while !path.is_empty() && !known.contains(&path) {
            path.pop();
        }
        path
    };
    let mut out = BTreeSet::new();
    let code = &m.code;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (at, _) in code.match_indices("::") {
        // The path this `::` is part of, from its first segment.
        let start = code[..at].rfind(|c: char| !(ident(c) || c == ':')).map_or(0, |i| i + 1);
        let end = at + code[at..].find(|c: char| !(ident(c) || c == ':')).unwrap_or(code.len() - at);
        if code[start..at].contains("::") {
            continue; // not the path's first `::`
        }
        let segments: Vec<String> =
            code[start..end].split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
        let Some(first) = segments.first() else { continue };
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "super" => {
                let mut p = m.path.clone();
                p.pop();
                p
            }
            "self" => m.path.clone(),
            // A submodule of this one, named as it is declared.
            name if known.contains(&[m.path.clone(), vec![name.to_owned()]].concat()) => {
                [m.path.clone(), vec![name.to_owned()]].concat()
            }
            _ => continue,
        };
        base.extend(segments[1..].iter().cloned());
        // `use crate::lock::{self, settings::Tls}`: the brace group's own paths.
        if code[end..].starts_with('{') {
            let group = &code[end + 1..end + code[end..].find('}').unwrap_or(0)];
            for item in group.split(',') {
                let item = item.trim();
                if let Some((sub, _)) = item.split_once("::") {
                    out.insert(deepest([base.clone(), vec![sub.trim().to_owned()]].concat()));
                }
            }
        }
        out.insert(deepest(base));
    }
    out.remove(&m.path);
    out.remove(&Vec::new());
    out
}

/// The layers ARCHITECTURE.md draws, top first: the indented block under `## Layers`.
fn layers() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let section = doc.split("\n## Layers\n").nth(1).expect("ARCHITECTURE.md has a `## Layers` section");
    let section = section.split("\n## ").next().unwrap();
    let layers: Vec<Vec<String>> = section
        .lines()
        .skip_while(|l| !l.starts_with("    "))
        .take_while(|l| l.starts_with("    "))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert!(layers.len() > 3, "the picture has its layers: {layers:?}");
    layers
}

#[test]
fn imports_go_down_the_layers_that_architecture_draws() {
    let mods = modules();
    let known: BTreeSet<Vec<String>> = mods.iter().map(|m| m.path.clone()).collect();
    let layers = layers();
    let height = layers.len();
    let floor: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.as_str(), height - i)))
        .collect();
    let tops: BTreeSet<&str> = known.iter().filter_map(|p| p.first()).map(String::as_str).collect();
    let drawn: BTreeSet<&str> = floor.keys().copied().collect();
    assert_eq!(tops, drawn, "the picture names every module of src/, and only those");
    let mut climbs = Vec::new();
    for m in mods.iter().filter(|m| !m.test_only && !m.path.is_empty()) {
        let from = m.path[0].as_str();
        for used in uses(m, &known) {
            let to = used[0].as_str();
            if to != from && floor[to] >= floor[from] {
                climbs.push(format!("{} uses {} ({from} is not above {to})", m.file, used.join("::")));
            }
        }
    }
    assert!(climbs.is_empty(), "imports that do not go down the layers:\n{}", climbs.join("\n"));
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let mods = modules();
    let known: BTreeSet<Vec<String>> = mods.iter().map(|m| m.path.clone()).collect();
    // A module may use what its ancestors hold: they are where it is declared.
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = mods
        .iter()
        .filter(|m| !m.test_only)
        .map(|m| {
            let to = uses(m, &known).into_iter().filter(|u| !m.path.starts_with(u)).collect();
            (m.path.clone(), to)
        })
        .collect();
    // Depth-first: a module met again while still on the path closes a circle.
    fn visit(
        at: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        done: &mut BTreeSet<Vec<String>>,
        path: &mut Vec<Vec<String>>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            return Some(path[i..].iter().chain([at]).map(|p| p.join("::")).collect());
        }
        if !done.insert(at.clone()) {
            return None;
        }
        path.push(at.clone());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, done, path) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        if let Some(circle) = visit(start, &graph, &mut done, &mut Vec::new()) {
            panic!("modules that import each other in a circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn redis_stays_in_lock_clap_in_cli_and_config_and_lock_reads_no_config() {
    for m in modules() {
        let top = m.path.first().map_or("", String::as_str);
        if top == "lock" {
            assert!(!m.code.contains("crate::config"), "{} reads the configuration", m.file);
        } else {
            assert!(!m.code.contains("redis::"), "{} uses the Redis client outside lock/", m.file);
        }
        // The crate root dispatches on the parsed command line (`cli::Cli`), like `config`.
        if !matches!(top, "cli" | "config" | "") {
            for clap in ["clap::", "clap_complete", "clap_mangen", "crate::cli"] {
                assert!(!m.code.contains(clap), "{} uses {clap} outside cli/ and config/", m.file);
            }
        }
    }
}

#[test]
fn every_exit_status_comes_from_exit_rs() {
    let digit_after = |code: &str, what: &str| {
        code.match_indices(what)
            .any(|(at, _)| code[at + what.len()..].trim_start().starts_with(|c: char| c.is_ascii_digit()))
    };
    for m in modules().iter().filter(|m| !m.test_only && m.path != ["exit"]) {
        for what in ["ExitCode::from(", "exit(", "exit_status =", ": u8 ="] {
            assert!(
                !digit_after(&m.code, what),
                "{}: an exit status by number ({what}…): name it in exit.rs",
                m.file
            );
        }
    }
}

/// The binary starts through its own entry point, not std's (`main.rs`), and on musl std then
/// has no command line to give: it is read through `sys::args_os` only.
#[test]
fn the_command_line_is_read_through_sys() {
    for m in modules().iter().filter(|m| !m.test_only && m.path != ["sys", "start"]) {
        for std_args in ["env::args()", "env::args_os()"] {
            assert!(!m.code.contains(std_args), "{} reads std::{std_args}: use sys::args_os()", m.file);
        }
    }
}

#[test]
fn no_file_of_the_tool_is_longer_than_700_lines() {
    for m in modules().iter().filter(|m| !m.test_only) {
        let text = std::fs::read_to_string(root().join(&m.file)).unwrap();
        let code = match text.find("#[cfg(test)]\nmod tests {") {
            Some(at) => &text[..at],
            None => &text,
        };
        let lines = code.lines().count();
        assert!(
            lines <= MAX_LINES,
            "{} has {lines} lines besides its tests: split it by what it does",
            m.file
        );
    }
}
