//! redlock-run: run a command under a Redis lease lock, one machine at a time.
//!
//! Data flows one way: command line (`cli`) → validated `config::Config` → the lock in Redis
//! (`lock`) and the supervised command (`child`, `supervise`) → an exit status (`exit`).
//! docs/ARCHITECTURE.md is the map.

#![deny(unsafe_code)]

mod acquire;
mod backoff;
mod child;
#[doc(hidden)]
pub mod cli;
mod config;
mod exit;
mod guard;
mod lock;
mod logging;
mod metrics;
mod operator;
mod release;
mod renew;
mod run;
mod script;
mod signals;
mod supervise;
// The one module with `unsafe`: system calls std and nix do not wrap (see its SAFETY notes).
#[allow(unsafe_code)]
mod sys;

/// For the binary's own entry point (`main.rs`), in place of std's start-up, before [`main`].
#[doc(hidden)]
pub use sys::as_std_starts;

/// Parses the command line, runs, and returns the exit status; every diagnostic goes to stderr.
pub fn main() -> u8 {
    // Nothing of this process under /proc (its environment, the ticket's memory file) is for
    // the command, which runs as the same user; its exec makes the command dumpable again.
    let _ = nix::sys::prctl::set_dumpable(false);
    // A run's guardian process is this program exec'd anew, and so is the releaser a guardian
    // starts once its wrapper has died.
    if let Some(job) = sys::guardian_role() {
        return guard::release_after_death(job);
    }
    let lock = sys::args_os().nth(1).is_some_and(|a| a == "lock");
    // Not for a subcommand: `lock` forks its holder first, the others guard nothing.
    let early = if cli::starts_with_subcommand() { None } else { guard::Guard::before_parsing() };
    let mut holder = false;
    let code = main_status(&mut holder, early);
    // A guardian started for what turned out not to be a run is not left a zombie either.
    guard::reap();
    if !holder && code != 0 && (lock || cli::means_lock()) {
        // Whatever stopped `lock`, the script that evaluates its output must not go on.
        script::print_failing(code);
    }
    code
}

/// The exit status; `holder`: set in a script's holder (see [`script::begin`]), whose `lock`
/// process tells the script. `early`: a run's guard, its guardian already started
/// ([`guard::Guard::before_parsing`]); dropped, it dismisses its guardian.
fn main_status(holder: &mut bool, early: Option<guard::Guard>) -> u8 {
    let cli = match cli::Cli::from_args() {
        Ok(cli) => cli,
        // --help and --version; in a script's `eval "$(redlock-run lock --help)"`, on stderr and
        // failing, so that the script neither runs the text nor goes on without the lock.
        Err(stop) if stop.is_help() && cli::means_lock() && script::evaluated() => {
            logging::say(&stop.text());
            return exit::status::USAGE;
        }
        Err(stop) if stop.is_help() => return print_out(&stop.text()),
        Err(stop) => {
            // A mistyped variable may be why (REDLOCK_KYE: then --key is missing).
            logging::say(&format!("{}{}", config::env::mistyped_lines(), stop.usage_error()));
            return exit::status::USAGE;
        }
    };
    if let Some(kind) = cli.generate {
        return print_docs(kind);
    }
    let invocation = match config::Invocation::from_cli(cli) {
        Ok(invocation) => invocation,
        Err(e) => {
            let _log = logging::init(config::Output {
                verbosity: config::Verbosity::Normal,
                format: config::LogFormat::Text,
            });
            for (name, meant) in config::env::mistyped_variables() {
                tracing::warn!("{name} is set but configures nothing: did you mean {meant}?");
            }
            return report(e, config::LogFormat::Text);
        }
    };
    let output = invocation.output();
    let _log = logging::init(output);
    logging::about_keys(invocation.keys());
    for (name, meant) in config::env::mistyped_variables() {
        tracing::warn!("{name} is set but configures nothing: did you mean {meant}?");
    }
    let fail = |e| report(e, output.format);
    if let Err(e) = sys::enough_descriptors() {
        return fail(e);
    }
    if let Err(e) = room_for_the_runtime() {
        return fail(exit::Error::Internal(anyhow::anyhow!(
            "no descriptors left to start with ({e}): nearly all of the open-file limit (ulimit -n) \
             is taken by descriptors the wrapper was started with"
        )));
    }
    let mut holding = match &invocation {
        config::Invocation::Unlock { .. } => return script::unlock(),
        config::Invocation::Lock { allow_interactive, config } => {
            match script::begin(*allow_interactive, &config.keys) {
                script::Begun::Holder(holding) => {
                    *holder = true;
                    Some(holding)
                }
                script::Begun::Done(code) => return code,
            }
        }
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(exit::Error::Internal(e.into())),
    };
    let guard = match &invocation {
        config::Invocation::Run(config) | config::Invocation::Lock { config, .. } => {
            // Nothing runs beside a run that sleeps first (--jitter): its guardian starts after
            // the sleep (`run`).
            let mut guard = match early {
                Some(early) if config.jitter.is_zero() => early,
                early => {
                    drop(early);
                    guard::reap();
                    guard::Guard::new()
                }
            };
            if config.jitter.is_zero() {
                // A holder's (`lock`): its exec takes longer than all the run does before it
                // takes the lock; started first, the guardian runs by then.
                guard.start_early();
            }
            Some(guard)
        }
        _ => None,
    };
    let result = runtime.block_on(async {
        match invocation {
            config::Invocation::Run(config) => {
                run::run(*config, run::Target::Command, guard.expect("a run's guard")).await
            }
            config::Invocation::Lock { config, .. } => {
                let holding = holding.as_mut().expect("forked as the holder");
                run::run(*config, run::Target::Script(holding), guard.expect("a run's guard")).await
            }
            config::Invocation::Unlock { .. } => unreachable!("answered before the runtime"),
            config::Invocation::Status { keys, json, redis, .. } => {
                operator::status(&keys, json, &redis).await
            }
            config::Invocation::Release { keys, holder, json, redis, .. } => {
                operator::release(&keys, holder.as_deref(), json, &redis).await
            }
        }
    });
    // The connections close while a dismissed guardian exits, rather than after it.
    drop(runtime);
    // No guardian left a zombie for an init that may never reap it.
    guard::reap();
    let code = match result {
        Ok(code) => code,
        // With -q a busy lock is an expected outcome, like a skipped run: cron mails nothing.
        Err(e @ exit::Error::Busy { .. }) if output.verbosity == config::Verbosity::Quiet => e.code(),
        Err(e) => report(e, output.format),
    };
    if let Some(holding) = &mut holding {
        // Said after the error line, so that the script sees it before `lock` exits.
        holding.failed(code);
    }
    code
}

/// How many descriptors building the runtime takes: its poller and waker, and the socket pair
/// of tokio's signal handling with a copy of one end.
const RUNTIME_DESCRIPTORS: usize = 6;

/// Makes sure building the runtime cannot run out of descriptors half-way: tokio makes its
/// signal handling's socket pair as the runtime is built and aborts the process if it cannot (a
/// wrapper started with nearly every descriptor taken, by a parent that leaks them). Taken and
/// given back here first, so that running out is an error with a message.
fn room_for_the_runtime() -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let stderr = std::io::stderr();
    let taken = (0..RUNTIME_DESCRIPTORS)
        .map(|_| stderr.as_fd().try_clone_to_owned())
        .collect::<std::io::Result<Vec<_>>>()?;
    drop(taken);
    Ok(())
}

/// The error line for a status the wrapper chose. A text line is the message alone (and, as
/// every line, what it is about: `logging`); a JSON line also carries the status and, for a
/// busy lock, the key that was busy, its holder (as `status --json` shows one) and time left.
fn report(e: exit::Error, format: config::LogFormat) -> u8 {
    let exit_status = e.code();
    match &e {
        exit::Error::Busy { key, holder, queued, expires_in, .. } => {
            // The holder's members as `status --json` shows them (`holder_json`), in JSON only:
            // the text line's message says who it is.
            let holder = lock::Holder::parse(holder);
            let h = holder.as_ref().and_then(|h| format.json_only(h));
            let since = h.map(|h| lock::rfc3339_ms(h.since_ms));
            tracing::error!(
                exit_status = format.json_only(exit_status),
                key = format.json_only(key.as_str()),
                holder.host = h.map(|h| h.host.as_str()),
                holder.pid = h.map(|h| h.pid),
                holder.since = since.as_deref(),
                holder.since_unix_ms = h.map(|h| h.since_ms),
                holder.token_prefix = h.map(|h| h.token_prefix()),
                holder.note = h.and_then(|h| h.note.as_deref()),
                holder.kind = h.map(|h| h.kind.name()),
                holder.limit = h.and_then(|h| match h.kind {
                    lock::Kind::Limit(n) => Some(n),
                    _ => None,
                }),
                foreign_value = format.json_only(holder.is_none() && !queued),
                queued = format.json_only(true).filter(|_| *queued),
                expires_in_ms = expires_in.and_then(|d| format.json_only(d.as_millis() as u64)),
                "{e}"
            );
        }
        _ => tracing::error!(exit_status = format.json_only(exit_status), "{e}"),
    }
    exit_status
}

/// `--generate`: the page or script on stdout (this is no run: there is no command's stdout to
/// keep clean).
fn print_docs(kind: cli::Generate) -> u8 {
    print_out(&cli::generate::render(kind))
}

/// Writes help, the version or a generated document on stdout; one that cannot be written
/// (a full disk) is a failure, not a silent success.
fn print_out(text: &str) -> u8 {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => exit::status::SUCCESS,
        // A reader that had enough (`| head`).
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::status::SUCCESS,
        Err(e) => {
            logging::say(&format!("redlock-run: error: cannot write to stdout: {e}\n"));
            exit::status::INTERNAL
        }
    }
}
