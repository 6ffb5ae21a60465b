//! redlock-run: run a command under a Redis lease lock, one machine at a time.
//!
//! Data flows one way: command line (`cli`) → validated `config::Config` → the lock in Redis
//! (`lock`) and the supervised command (`child`, `supervise`) → an exit status (`exit`).

mod acquire;
mod backoff;
mod child;
#[doc(hidden)]
pub mod cli;
mod config;
mod exit;
mod lock;
mod logging;
mod metrics;
mod operator;
mod run;
mod signals;
mod supervise;
mod sys;

use std::process::ExitCode;

/// Parses the command line, runs, and returns the exit status; every diagnostic goes to stderr.
pub fn main() -> ExitCode {
    let cli = match cli::Cli::from_args() {
        Ok(cli) => cli,
        // --help and --version.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(0);
        }
        Err(e) => {
            eprint!("{}", usage_error(&e));
            return ExitCode::from(exit::status::USAGE);
        }
    };
    let invocation = match config::Invocation::from_cli(cli) {
        Ok(invocation) => invocation,
        Err(e) => {
            let _log = logging::init(config::Output {
                verbosity: config::Verbosity::Normal,
                format: config::LogFormat::Text,
            });
            return report(e);
        }
    };
    let output = invocation.output();
    let _log = logging::init(output);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return report(exit::Error::Internal(e.into())),
    };
    let result = runtime.block_on(async {
        match invocation {
            config::Invocation::Run(config) => run::run(config).await,
            config::Invocation::Status { key, json, redis, .. } => operator::status(&key, json, &redis).await,
            config::Invocation::Release { key, json, redis, .. } => {
                operator::release(&key, json, &redis).await
            }
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        // With -q a busy lock is an expected outcome, like a skipped run: cron mails nothing.
        Err(e @ exit::Error::Busy { .. }) if output.verbosity == config::Verbosity::Quiet => {
            ExitCode::from(e.code())
        }
        Err(e) => report(e),
    }
}

fn report(e: exit::Error) -> ExitCode {
    tracing::error!("{e}");
    ExitCode::from(e.code())
}

/// clap's error in the tool's own style (`redlock-run: error: …`). Its tip "to pass '-x' as a
/// value, use '-- -x'" is wrong for a wrapper, where whatever follows `--` is the command: it is
/// replaced by one that fits.
fn usage_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let rendered = e.render().to_string();
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.as_str(),
        _ => "",
    };
    let tip = if matches!(arg, "-n" | "-E") || arg.starts_with("-E") {
        Some(
            "-n and -E are flock(1) flags: redlock-run fails at once when the lock is busy (--wait 0 \
             is the default) and then exits with --busy-exit-code N (75 by default)",
        )
    } else if arg.strip_prefix('-').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit())) {
        Some("durations and numbers cannot be negative")
    } else if arg.starts_with('-') {
        Some("to give an option a value that starts with '-', write --option=VALUE")
    } else {
        None
    };
    let mut out = String::new();
    let mut lines = rendered.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim_start().starts_with("tip: to pass '") {
            // Its blank line goes with it.
            lines.next_if(|l| l.trim().is_empty());
            continue;
        }
        if out.is_empty() {
            out.push_str("redlock-run: ");
            out.push_str(line);
            out.push('\n');
            if let Some(tip) = tip {
                out.push_str(&format!("\n  tip: {tip}\n"));
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
