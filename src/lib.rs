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

use clap::Parser;

/// Parses the command line, runs, and returns the exit status; every diagnostic goes to stderr.
pub fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::status::USAGE } else { 0 });
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
