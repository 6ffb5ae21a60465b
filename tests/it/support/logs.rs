//! Reading the wrapper's stderr: text lines (`redlock-run: level: message` and logfmt fields)
//! and JSON lines, each checked as it is read.

use serde_json::Value;

/// One text line: its level, its message and its fields (values unquoted and unescaped), in
/// order.
#[derive(Debug)]
pub struct TextLine {
    pub level: String,
    pub message: String,
    pub fields: Vec<(String, String)>,
}

/// Every stderr line as a text line (the test fails on a line that is not one).
pub fn text_lines(stderr: &str) -> Vec<TextLine> {
    stderr.lines().map(|l| text_line(l).unwrap_or_else(|e| panic!("not a text line ({e}): {l:?}"))).collect()
}

/// `redlock-run: level: message k=v k="v w" …`. The fields start at the first ` name=` from
/// which the rest of the line is logfmt pairs through to its end.
pub fn text_line(line: &str) -> Result<TextLine, String> {
    let rest = line.strip_prefix("redlock-run: ").ok_or("no `redlock-run: ` prefix")?;
    let (level, rest) = rest.split_once(": ").ok_or("no level")?;
    if !["error", "warning", "info", "debug"].contains(&level) {
        return Err(format!("level {level:?}"));
    }
    let starts = rest.match_indices(' ').map(|(i, _)| i).chain([rest.len()]);
    for at in starts {
        if let Ok(fields) = logfmt(&rest[at..]) {
            let mut names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
            names.sort();
            if names.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("a field twice: {names:?}"));
            }
            return Ok(TextLine { level: level.to_owned(), message: rest[..at].to_owned(), fields });
        }
    }
    unreachable!("the empty rest parses")
}

/// ` k=v k="v w"` (each pair after a space) to (name, value) pairs. A value is quoted exactly
/// when it is empty or has a space, `=`, quote, backslash or control character; inside quotes,
/// `\"` and `\\` stand for themselves and `\n`, `\r`, `\t`, `\u{…}` for control characters.
pub fn logfmt(mut s: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    while !s.is_empty() {
        s = s.strip_prefix(' ').ok_or("no space before a pair")?;
        let (name, rest) = s.split_once('=').ok_or("no `=`")?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            return Err(format!("name {name:?}"));
        }
        let (value, rest) = if let Some(quoted) = rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next().ok_or("no closing quote")? {
                    (i, '"') => break i + 1,
                    (_, '\\') => match chars.next().ok_or("a lone backslash")?.1 {
                        c @ ('"' | '\\') => value.push(c),
                        'n' => value.push('\n'),
                        'r' => value.push('\r'),
                        't' => value.push('\t'),
                        'u' => {
                            let hex: String =
                                chars.by_ref().map(|(_, c)| c).take_while(|c| *c != '}').collect();
                            let code = u32::from_str_radix(hex.trim_start_matches('{'), 16)
                                .map_err(|e| e.to_string())?;
                            value.push(char::from_u32(code).ok_or("not a character")?);
                        }
                        c => return Err(format!("escape \\{c}")),
                    },
                    (_, c) if c.is_control() => return Err("a control character inside quotes".into()),
                    (_, c) => value.push(c),
                }
            };
            let plain = !value.is_empty()
                && !value.chars().any(|c| c == ' ' || c == '=' || c == '"' || c == '\\' || c.is_control());
            if plain {
                return Err(format!("{name}: quoted, but needs no quotes: {value:?}"));
            }
            (value, &quoted[end..])
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            let value = &rest[..end];
            if value.is_empty() || value.chars().any(|c| c == '=' || c == '"' || c == '\\' || c.is_control())
            {
                return Err(format!("{name}: needs quotes: {value:?}"));
            }
            (value.to_owned(), &rest[end..])
        };
        pairs.push((name.to_owned(), value));
        s = rest;
    }
    Ok(pairs)
}

/// Every stderr line as JSON (the test fails on a line that is not).
pub fn json_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

/// The first JSON line whose message starts with `message`.
pub fn event<'a>(lines: &'a [Value], message: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["message"].as_str().is_some_and(|m| m.starts_with(message)))
        .unwrap_or_else(|| panic!("no {message:?} event in {lines:#?}"))
}
