//! The operating-system calls that need `unsafe` or must run between fork and exec, one file
//! per mechanism: the command's spawn, the guardian beside it, a script's holder, the terminal, signal
//! dispositions, resource limits, the scheduling policy, the program's start and its command line, and the per-processor bare system call they rest on.

mod arch;
mod clone;
mod dispositions;
mod guardian;
mod limits;
mod scheduling;
mod script;
mod spawn;
mod start;
mod terminal;

pub use dispositions::{ignored_at_start, note_handlers};
pub use guardian::{
    CHEAP_EXEC, Guardian, Ready, Releaser, Verdict, guardian_role, monotonic_ns, reap_guardians, ticket_file,
};
pub use limits::enough_descriptors;
pub use scheduling::defer_on_wakeup;
pub use script::{fork_holder, hide_arguments, pidfd_open, readable, stdio_to_null};
pub use spawn::{GuardianGone, Launch, become_subreaper, found_on_path, spawn};
pub use start::{args_os, as_std_starts};
pub use terminal::{
    foreground_terminal, give_terminal_to, stderr_columns, stderr_in_foreground, terminal_group,
};
