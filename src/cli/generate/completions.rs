//! Completion scripts for bash, zsh and fish, generated from the clap definition.
//!
//! clap_complete's scripts for these shells get three things wrong for this command line: a
//! command of its own after the options (or after `--`) besides two subcommands, a binary name
//! with a hyphen (bash's case labels disagree), and an option whose value is still missing
//! (fish's argparse fails, so `--on-lost <TAB>` offered files). These generators read the same
//! definition and write scripts that walk the words the way the wrapper parses them: options
//! and their values, then `status`/`release` as the first word, or the command, whose own words
//! are completed by the shell's completion for that command.

use clap::builder::ValueHint;
use clap::{ArgAction, Command};

/// What a level of the command line (the wrapper, or one subcommand) accepts.
struct Level {
    /// Empty for the wrapper itself.
    name: String,
    about: String,
    options: Vec<Opt>,
}

struct Opt {
    short: Option<char>,
    long: Option<String>,
    help: String,
    value: Option<ValueKind>,
    repeats: bool,
}

/// What an option's value can be.
enum ValueKind {
    /// One of these words (with their descriptions).
    Words(Vec<(String, String)>),
    /// A path.
    Path,
    /// Anything (a key, a duration, a URL): nothing to offer.
    Free(String),
}

pub(super) struct Model {
    bin: String,
    top: Level,
    subs: Vec<Level>,
}

impl Model {
    pub(super) fn new(mut cmd: Command) -> Model {
        cmd.build();
        let bin = cmd.get_name().to_owned();
        let subs = cmd.get_subcommands().map(|s| level(s, s.get_name())).collect();
        Model { bin, top: level(&cmd, ""), subs }
    }

    fn levels(&self) -> impl Iterator<Item = &Level> {
        std::iter::once(&self.top).chain(&self.subs)
    }

    /// The shell-safe stem of function names (`redlock_run`).
    fn stem(&self) -> String {
        self.bin.replace('-', "_")
    }
}

fn level(cmd: &Command, name: &str) -> Level {
    let options = cmd
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
        .map(|a| {
            let takes_value = !matches!(
                a.get_action(),
                ArgAction::SetTrue
                    | ArgAction::SetFalse
                    | ArgAction::Count
                    | ArgAction::Help
                    | ArgAction::HelpShort
                    | ArgAction::HelpLong
                    | ArgAction::Version
            );
            let value = takes_value.then(|| {
                let words: Vec<_> = a
                    .get_possible_values()
                    .iter()
                    .filter(|v| !v.is_hide_set())
                    .map(|v| {
                        (
                            v.get_name().to_owned(),
                            one_line(&v.get_help().map(|h| h.to_string()).unwrap_or_default()),
                        )
                    })
                    .collect();
                if !words.is_empty() {
                    ValueKind::Words(words)
                } else if matches!(
                    a.get_value_hint(),
                    ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath
                ) {
                    ValueKind::Path
                } else {
                    let name = a.get_value_names().and_then(|n| n.first()).map(|n| n.to_string());
                    ValueKind::Free(name.unwrap_or_else(|| "VALUE".to_owned()))
                }
            });
            Opt {
                short: a.get_short(),
                long: a.get_long().map(str::to_owned),
                help: one_line(&a.get_help().map(|h| h.to_string()).unwrap_or_default()),
                value,
                repeats: matches!(a.get_action(), ArgAction::Append | ArgAction::Count),
            }
        })
        .collect();
    Level {
        name: name.to_owned(),
        about: one_line(&cmd.get_about().map(|h| h.to_string()).unwrap_or_default()),
        options,
    }
}

/// A description on one line, without the bracketed notes of `--help` and without backquotes
/// (zsh would run what they enclose).
fn one_line(text: &str) -> String {
    let text = text.split(" [").next().unwrap_or_default().replace('`', "");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Opt {
    fn names(&self) -> Vec<String> {
        self.short
            .map(|c| format!("-{c}"))
            .into_iter()
            .chain(self.long.iter().map(|l| format!("--{l}")))
            .collect()
    }
}

/// Options of `level` taking a value / not taking one, as bash/fish case patterns.
fn with_value(level: &Level) -> Vec<String> {
    level.options.iter().filter(|o| o.value.is_some()).flat_map(Opt::names).collect()
}

/// A regex for a cluster of short flags that ends with a short option taking the next word as
/// its value (`-vk KEY`).
fn cluster_regex(level: &Level) -> String {
    let shorts = |value: bool| -> String {
        level.options.iter().filter(|o| o.value.is_some() == value).filter_map(|o| o.short).collect()
    };
    format!("^-[{}]*[{}]$", shorts(false), shorts(true))
}

fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

const HEADER: &str =
    "Generated from the command-line definition (src/cli.rs) by `redlock-run --generate`; do not edit.";

pub(super) fn bash(m: &Model) -> String {
    let stem = m.stem();
    let subs: Vec<&str> = m.subs.iter().map(|s| s.name.as_str()).collect();
    let mut out = format!(
        "# bash completion for {bin}                                   -*- shell-script -*-\n# {HEADER}\n\
         # Works on its own; with the bash-completion package, values written --opt=VALUE and the\n\
         # command's own arguments (after `--` or the command name) are completed too.\n\n",
        bin = m.bin
    );

    out.push_str(&format!(
        "# Whether word $2 is an option of ${{1:-the wrapper}} that takes the next word as its value.\n\
         _{stem}_takes_value() {{\n    case $1 in\n"
    ));
    for level in m.levels() {
        let names = with_value(level);
        out.push_str(&format!("        {})\n", sh_quote(&level.name)));
        if !names.is_empty() {
            out.push_str(&format!("            case $2 in {}) return 0 ;; esac\n", names.join("|")));
        }
        out.push_str(&format!("            [[ $2 =~ {} ]] ;;\n", cluster_regex(level)));
    }
    out.push_str("        *) return 1 ;;\n    esac\n}\n\n");

    out.push_str(&format!("# The options of ${{1:-the wrapper}}.\n_{stem}_options() {{\n    case $1 in\n"));
    for level in m.levels() {
        let names: Vec<String> = level.options.iter().flat_map(Opt::names).collect();
        out.push_str(&format!(
            "        {}) REPLY={} ;;\n",
            sh_quote(&level.name),
            sh_quote(&names.join(" "))
        ));
    }
    out.push_str("    esac\n}\n\n");

    out.push_str(&format!(
        "# Completes the value of option $2 of ${{1:-the wrapper}}; a free value (a key, a duration, a\n\
         # URL) gets nothing.\n_{stem}_value() {{\n    local opt=$2\n    [[ $opt == -[!-]?* ]] && opt=-${{opt: -1}}\n    case $1,$opt in\n"
    ));
    for level in m.levels() {
        for opt in &level.options {
            let names: Vec<String> =
                opt.names().iter().map(|n| format!("{},{n}", sh_quote(&level.name))).collect();
            match &opt.value {
                Some(ValueKind::Words(words)) => {
                    let words: Vec<&str> = words.iter().map(|(w, _)| w.as_str()).collect();
                    out.push_str(&format!(
                        "        {}) COMPREPLY=($(compgen -W {} -- \"$cur\")) ;;\n",
                        names.join("|"),
                        sh_quote(&words.join(" "))
                    ));
                }
                Some(ValueKind::Path) => {
                    out.push_str(&format!("        {}) _{stem}_files ;;\n", names.join("|")));
                }
                _ => {}
            }
        }
    }
    out.push_str("        *) COMPREPLY=() ;;\n    esac\n}\n\n");

    out.push_str(&format!(
        r#"_{stem}_files() {{
    if declare -F _filedir >/dev/null; then
        _filedir
    else
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}

# Completes the command's own words, which start at words[$1]: its name, then whatever the
# shell's completion for that command offers (bash-completion's _command_offset), or files.
_{stem}_command() {{
    if declare -F _command_offset >/dev/null; then
        # bash-completion joined words that bash split at ':' (URLs); _command_offset counts
        # bash's words.
        local j=0 k=0 joined=
        while (( k < $1 && j < ${{#COMP_WORDS[@]}} )); do
            joined+=${{COMP_WORDS[j]}}
            (( j++ ))
            if [[ $joined == "${{words[k]}}" ]]; then
                joined=
                (( k++ ))
            fi
        done
        (( k == $1 )) || j=$(( $1 + ${{#COMP_WORDS[@]}} - ${{#words[@]}} ))
        _command_offset "$j"
    elif (( $1 == cword )); then
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -c -- "$cur") $(compgen -f -X '!*/*' -- "$cur"))
    else
        _{stem}_files
    fi
}}

_{stem}() {{
    local cur prev words cword split=false
    if declare -F _init_completion >/dev/null; then
        _init_completion -s -n : || return
    else
        # Words split at blanks only, so that URLs stay whole (no quoting rules).
        read -ra words <<<"${{COMP_LINE:0:COMP_POINT}}"
        [[ ${{COMP_LINE:0:COMP_POINT}} == *[[:blank:]] || ${{#words[@]}} -eq 0 ]] && words+=("")
        cword=$(( ${{#words[@]}} - 1 ))
        cur=${{words[cword]}}
        prev=${{words[cword - 1]}}
        if [[ $cur == --?*=* ]]; then
            prev=${{cur%%=*}}
            cur=${{cur#*=}}
            split=true
        fi
    fi

    local i=1 sub= word
    while (( i < cword )); do
        word=${{words[i]}}
        if [[ $word == -- ]]; then
            # After a subcommand's options nothing may follow.
            [[ -z $sub ]] && _{stem}_command $(( i + 1 ))
            return
        elif _{stem}_takes_value "$sub" "$word"; then
            if (( i + 1 == cword )); then
                _{stem}_value "$sub" "$word"
                return
            fi
            (( i++ ))
        elif [[ $word == -* ]]; then
            :
        elif [[ -z $sub && $i -eq 1 && $word == @({subs}) ]]; then
            sub=$word
        elif [[ -z $sub ]]; then
            _{stem}_command "$i"
            return
        fi
        (( i++ ))
    done

    if [[ $split == true ]]; then
        _{stem}_value "$sub" "$prev"
    elif [[ $cur == -* ]]; then
        _{stem}_options "$sub"
        COMPREPLY=($(compgen -W "$REPLY" -- "$cur"))
    elif [[ -z $sub ]]; then
        _{stem}_command "$cword"
        (( cword == 1 )) && COMPREPLY+=($(compgen -W {subs_words} -- "$cur"))
    fi
    return 0
}}

complete -F _{stem} {bin}
"#,
        subs = subs.join("|"),
        subs_words = sh_quote(&subs.join(" ")),
        bin = m.bin,
    ));
    out
}

/// A description inside double quotes in a spec: nothing in it may expand.
fn zsh_quoted(text: &str) -> String {
    zsh_text(text).replace('"', r#"\""#).replace('$', r"\$").replace('`', r"\`")
}

/// Text inside a zsh `_arguments` spec's `[…]` description or `:message:`.
fn zsh_text(text: &str) -> String {
    text.replace('\\', r"\\")
        .replace('[', r"\[")
        .replace(']', r"\]")
        .replace(':', r"\:")
        .replace('\'', r"'\''")
}

fn zsh_specs(level: &Level) -> String {
    let mut out = String::new();
    for opt in &level.options {
        let names = opt.names();
        let exclusive = if opt.repeats { "*".to_owned() } else { format!("({})", names.join(" ")) };
        let action = match &opt.value {
            None => String::new(),
            Some(ValueKind::Words(words)) => {
                let items: Vec<String> =
                    words.iter().map(|(w, h)| format!(r#"{w}\:"{}""#, zsh_quoted(h))).collect();
                format!(":{}:(({}))", zsh_text(&opt_value_name(opt)), items.join(" "))
            }
            Some(ValueKind::Path) => format!(":{}:_files", zsh_text(&opt_value_name(opt))),
            Some(ValueKind::Free(name)) => format!(":{}: ", zsh_text(name)),
        };
        for name in &names {
            let suffix = match (&opt.value, name.starts_with("--")) {
                (None, _) => "",
                (Some(_), true) => "=",
                (Some(_), false) => "+",
            };
            out.push_str(&format!("    '{exclusive}{name}{suffix}[{}]{action}' \\\n", zsh_text(&opt.help)));
        }
    }
    out
}

fn opt_value_name(opt: &Opt) -> String {
    match &opt.value {
        Some(ValueKind::Free(name)) => name.clone(),
        Some(ValueKind::Path) => "path".to_owned(),
        _ => opt.long.clone().unwrap_or_default(),
    }
}

pub(super) fn zsh(m: &Model) -> String {
    let bin = &m.bin;
    let mut out = format!("#compdef {bin}\n# {HEADER}\n\n_{bin}() {{\n");
    out.push_str(
        "    local curcontext=$curcontext state state_descr line ret=1\n    typeset -A opt_args\n    # The whole line: _arguments narrows words to the command's own.\n    local -a all_words=(\"${words[@]}\")\n\n    _arguments -s -S -C : \\\n",
    );
    out.push_str(&zsh_specs(&m.top));
    out.push_str("    ': :->first' \\\n    '*:: :->rest' && ret=0\n\n");
    let subs: Vec<String> =
        m.subs.iter().map(|s| format!(r#"{}\:"{}""#, s.name, zsh_quoted(&s.about))).collect();
    out.push_str(&format!(
        r#"    case $state in
        first)
            # Only the first word can be a subcommand: after options or `--` it is a command,
            # even one called status or release.
            if (( CURRENT > 2 )); then
                _command_names -e && ret=0
            else
                _alternative \
                    'subcommands:operator command:(({subs}))' \
                    'commands:command:_command_names -e' && ret=0
            fi
            ;;
        rest)
            # A subcommand only as the first word; anything else is the command.
            local first=$line[1]
            [[ $all_words[2] == "$first" ]] || first=
            case $first in
"#,
        subs = subs.join(" ")
    ));
    for sub in &m.subs {
        out.push_str(&format!(
            "                {name})\n                    curcontext=${{curcontext%:*:*}}:{bin}-{name}:\n                    _arguments -s -S : \\\n{specs}                        && ret=0\n                    ;;\n",
            name = sub.name,
            specs = zsh_specs(sub).replace("    '", "                        '"),
        ));
    }
    out.push_str(
        r#"                *)
                    # The command's own words: its completion, as for sudo or timeout.
                    _normal && ret=0
                    ;;
            esac
            ;;
    esac
    return ret
}

"#,
    );
    out.push_str(&format!(
        "if [ \"$funcstack[1]\" = \"_{bin}\" ]; then\n    _{bin} \"$@\"\nelse\n    compdef _{bin} {bin}\nfi\n"
    ));
    out
}

fn fish_text(text: &str) -> String {
    format!("'{}'", text.replace('\\', r"\\").replace('\'', r"\'"))
}

pub(super) fn fish(m: &Model) -> String {
    let stem = format!("__{}", m.stem());
    let bin = &m.bin;
    let mut out = format!("# fish completion for {bin}\n# {HEADER}\n\n");
    out.push_str(&format!(
        "# Whether $argv[2] is an option of $argv[1] (empty: the wrapper) that takes the next word as\n\
         # its value.\nfunction {stem}_takes_value\n    switch \"$argv[1]\"\n"
    ));
    for level in m.levels() {
        out.push_str(&format!("        case {}\n", fish_text(&level.name)));
        let names = with_value(level);
        if !names.is_empty() {
            out.push_str(&format!(
                "            contains -- $argv[2] {}\n            and return 0\n",
                names.join(" ")
            ));
        }
        out.push_str(&format!(
            "            string match -rq -- {} $argv[2]\n            return\n",
            fish_text(&cluster_regex(level))
        ));
    }
    out.push_str("    end\n    return 1\nend\n\n");
    let subs: Vec<&str> = m.subs.iter().map(|s| s.name.as_str()).collect();
    out.push_str(&format!(
        r#"# Where the words before the cursor leave us: "top" (the wrapper's options), the name of a
# subcommand, or "command" followed by the command's words so far.
function {stem}_state
    set -l words (commandline -opc)
    set -e words[1]
    set -l sub
    set -l first 1
    while set -q words[1]
        set -l word $words[1]
        set -e words[1]
        if test "$word" = --
            # After a subcommand's options nothing may follow.
            if test -n "$sub"
                echo none
                return
            end
            echo command
            set -q words[1]
            and printf '%s\n' $words
            return
        else if {stem}_takes_value "$sub" $word
            set -e words[1]
        else if string match -q -- '-*' $word
        else if test -z "$sub" -a $first = 1; and contains -- $word {subs}
            set sub $word
        else if test -z "$sub"
            echo command
            printf '%s\n' $word $words
            return
        end
        set first 0
    end
    if test -n "$sub"
        echo $sub
    else
        echo top
    end
end

function {stem}_at
    test ({stem}_state)[1] = $argv[1]
end

# The first word: a subcommand or the command.
function {stem}_first_word
    test (count (commandline -opc)) = 1
end

# The command's own words, completed as that command's.
function {stem}_command
    set -l words ({stem}_state)
    set -e words[1]
    set -l current (commandline -ct)
    if set -q words[1]
        complete -C (string join ' ' -- (string escape -- $words) $current)
    else
        {stem}_programs
    end
end

# Programs and paths: the wrapper runs a program, never a fish builtin or function.
function {stem}_programs
    set -l token (commandline -ct)
    # No program's name starts with '-' (and `complete -C` would read it as an option).
    string match -q -- '-*' $token
    and return
    set -l inner (builtin -n) (functions -an)
    for line in (complete -C "$token")
        set -l name (string split -m1 \t -- $line)[1]
        if not contains -- $name $inner; or command -q -- $name
            echo $line
        end
    end
end

complete -c {bin} -f
complete -c {bin} -n '{stem}_at command' -xa '({stem}_command)'
complete -c {bin} -n '{stem}_at top' -xa '({stem}_programs)'
"#,
        subs = subs.join(" "),
    ));
    for sub in &m.subs {
        out.push_str(&format!(
            "complete -c {bin} -n '{stem}_first_word' -xa {} -d {}\n",
            sub.name,
            fish_text(&sub.about)
        ));
    }
    for level in m.levels() {
        let at = if level.name.is_empty() { "top" } else { &level.name };
        for opt in &level.options {
            let mut line = format!("complete -c {bin} -n '{stem}_at {at}'");
            if let Some(c) = opt.short {
                line.push_str(&format!(" -s {c}"));
            }
            if let Some(l) = &opt.long {
                line.push_str(&format!(" -l {l}"));
            }
            line.push_str(&format!(" -d {}", fish_text(&opt.help)));
            match &opt.value {
                None => {}
                Some(ValueKind::Words(words)) => {
                    let items: Vec<String> = words
                        .iter()
                        .map(|(w, h)| format!("{w}\\t{}", fish_text(h)).replace(['"', '$'], ""))
                        .collect();
                    line.push_str(&format!(" -xa \"{}\"", items.join("\n")));
                }
                Some(ValueKind::Path) => line.push_str(" -rF"),
                Some(ValueKind::Free(_)) => line.push_str(" -x"),
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
