//! The man pages: clap_mangen's rendering of the definition, with the sections people look for
//! (EXIT STATUS, ENVIRONMENT, EXAMPLES, SEE ALSO) in place of clap's EXTRA, and one page per
//! subcommand, as git does (redlock-run-status(1), …).

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit;

/// The main page, `redlock-run(1)`.
pub(super) fn main_page() -> String {
    finish_main_page(&render(Cli::command().version(env!("CARGO_PKG_VERSION"))))
}

/// A subcommand's page, `redlock-run-NAME(1)`.
pub(super) fn sub_page(sub: &str) -> String {
    let mut cmd = Cli::command();
    cmd.build(); // the subcommands' options (see `cli::Deferred`)
    let cmd = cmd.find_subcommand(sub).expect("a subcommand of the definition").clone();
    // clap names take &'static str; two short strings, once per process.
    let name: &'static str = format!("redlock-run-{sub}").leak();
    let invoked: &'static str = format!("redlock-run {sub}").leak();
    let cmd = cmd.name(name).display_name(name).bin_name(invoked);
    finish_sub_page(&render(cmd), sub)
}

/// The committed pages carry the crate's version only: `--version` also names the commit,
/// which would make them differ at every commit.
fn render(cmd: clap::Command) -> String {
    let mut page = Vec::new();
    let source = concat!("redlock-run ", env!("CARGO_PKG_VERSION"));
    clap_mangen::Man::new(cmd).source(source).render(&mut page).expect("writing to memory");
    String::from_utf8(page).expect("clap_mangen writes UTF-8")
}

/// Text for roff: dashes and backslashes escaped, no line read as a request.
fn roff(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-").replace('`', "");
    if text.starts_with(['.', '\'']) { format!("\\&{text}") } else { text }
}

fn item(term: &str, text: &str) -> String {
    format!(".TP\n\\fB{}\\fR\n{}\n", roff(term), roff(text))
}

/// URLs are never hyphenated at a line break (`\%` before them), and the page is ASCII: dashes
/// are groff's named ones and an ellipsis is three dots, which render in any locale.
fn portable(page: &str) -> String {
    let mut out = page.replace('\u{2014}', "\\(em").replace('\u{2013}', "\\(en").replace('\u{2026}', "...");
    for scheme in ["rediss://", "redis://", "unix://"] {
        out = out
            .replace(scheme, &format!("\\%{scheme}"))
            .replace(&format!("\\%\\%{scheme}"), &format!("\\%{scheme}"));
    }
    out
}

/// What the command finds in its environment (README § What the command gets).
const COMMAND_VARIABLES: [(&str, &str); 6] = [
    ("REDLOCK_LOCK_KEY", "the lock key (the first, with several --key)"),
    (
        "REDLOCK_TOKEN",
        "the value stored at the key: a 128-bit random token, then host, pid and start time, \
         then the kind of lock for --shared and --limit",
    ),
    (
        "REDLOCK_FENCE",
        "the fencing token of this acquisition (the first key's); absent without a lock (--fail-open)",
    ),
    ("REDLOCK_TTL_MS", "the lease length in milliseconds"),
    ("REDLOCK_KEYS", "every key, in the order given, separated by spaces"),
    ("REDLOCK_FENCES", "every key's fence, in the same order; absent without a lock"),
];

/// The main page with EXIT STATUS, ENVIRONMENT, EXAMPLES and SEE ALSO sections of its own in
/// place of clap's EXTRA (the `--help` epilogue).
fn finish_main_page(page: &str) -> String {
    let extra = page.find(".SH EXTRA\n").expect("an EXTRA section");
    let version = page.find(".SH VERSION\n").expect("a VERSION section");
    let epilogue = &page[extra..version];
    // The epilogue's first sentence says how durations are written (already roff text).
    let durations = epilogue.find("Durations").and_then(|at| {
        let text = &epilogue[at..];
        text.find("Every option").map(|end| text[..end].trim().to_owned())
    });
    let mut sections = String::new();
    if let Some(durations) = durations {
        sections.push_str(&format!(".SH DURATIONS\n{durations}\n"));
    }
    sections.push_str(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in exit::TABLE {
        sections.push_str(&item(code, meaning));
    }

    sections.push_str(".SH ENVIRONMENT\n");
    sections.push_str(&format!(
        "{}\n",
        roff(
            "Every option but -v, --generate and --allow-interactive can be set with an environment \
             variable; a flag on the command line wins."
        )
    ));
    let mut options: Vec<(String, String)> = Cli::command()
        .get_arguments()
        .filter_map(|a| Some((a.get_env()?.to_str()?.to_owned(), format!("as --{}", a.get_long()?))))
        .collect();
    options.sort();
    for (var, flag) in options {
        sections.push_str(&item(&var, &flag));
    }
    for (var, what) in [
        ("REDLOCK_REDIS_URL", "the Redis URL, when --redis-url is not given"),
        (
            "REDIS_URL",
            "the Redis URL, when neither --redis-url nor REDLOCK_REDIS_URL is given; passed on to the command",
        ),
        ("REDLOCK_PASSWORD", "the Redis password, so that it never sits in argv"),
    ] {
        sections.push_str(&item(var, what));
    }
    sections.push_str(&format!(
        ".PP\n{}\n",
        roff("The command gets the wrapper's environment without the variables above (REDIS_URL excepted), plus:")
    ));
    for (var, what) in COMMAND_VARIABLES {
        sections.push_str(&item(var, what));
    }

    sections.push_str(".SH EXAMPLES\n");
    let examples = epilogue.split("Examples:").nth(1).expect("the epilogue has examples");
    for line in examples.lines().map(str::trim).filter(|l| !l.is_empty()) {
        // Already roff text (clap escaped it).
        sections.push_str(&format!(".PP\n{line}\n"));
    }

    sections.push_str(".SH \"SEE ALSO\"\n");
    sections.push_str(
        "\\fBredlock\\-run\\-status\\fR(1), \\fBredlock\\-run\\-release\\fR(1), \\fBredlock\\-run\\-lock\\fR(1), \
         \\fBredlock\\-run\\-unlock\\fR(1), \\fBflock\\fR(1), \\fBtimeout\\fR(1), \\fBredis\\-server\\fR(1)\n",
    );
    portable(&format!("{}{}{}", &page[..extra], sections, &page[version..]))
}

/// A subcommand's page with its exit statuses and a way back to the main page.
fn finish_sub_page(page: &str, sub: &str) -> String {
    let statuses = match sub {
        "status" => exit::STATUS_TABLE,
        "lock" => exit::LOCK_TABLE,
        "unlock" => exit::UNLOCK_TABLE,
        _ => exit::RELEASE_TABLE,
    };
    let mut sections = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in statuses {
        sections.push_str(&item(&code.map_or("other".to_owned(), |c| c.to_string()), meaning));
    }
    sections.push_str(".SH \"SEE ALSO\"\n\\fBredlock\\-run\\fR(1)\n");
    let page = match page.find(".SH VERSION\n") {
        Some(at) => format!("{}{sections}{}", &page[..at], &page[at..]),
        None => format!("{page}{sections}"),
    };
    portable(&page)
}
