//! What `redlock-run lock` needs of the system: its holder forked before anything else runs,
//! a handle on the script that is not its child, and no secret left in the holder's
//! arguments or environment.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use nix::libc;
use nix::unistd::Pid;

/// Forks the holder. Only while the process has one thread and no runtime: the child goes on
/// to build one of its own.
pub fn fork_holder() -> io::Result<Option<Pid>> {
    // SAFETY: called before any other thread or the runtime exists (`script::lock`), so the
    // child inherits no lock held by another thread and may run any code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(None),
        nix::unistd::ForkResult::Parent { child } => Ok(Some(child)),
    }
}

/// A pidfd of `pid` (Linux 5.3): readable once the process has exited, whoever its parent is.
pub fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    // SAFETY: a plain system call with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just made for this process alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Overwrites this process's command line with `title` and blanks the values of the
/// environment variables `secret` says hold secrets, in the memory `/proc/PID/cmdline` and
/// `/proc/PID/environ` show: a holder lives as long as its script, and its arguments (a
/// `--redis-url` with a password) or variables (`REDLOCK_PASSWORD`) must not be readable
/// there all that time. Nothing read from them is used any more.
pub fn hide_arguments(title: &[u8], secret: impl Fn(&[u8]) -> bool) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return };
    // Fields after the command name: the 48th to 51st of the whole line.
    let Some(close) = stat.rfind(')') else { return };
    let fields: Vec<&str> = stat[close + 1..].split_ascii_whitespace().collect();
    // The fields after ')' start with the state, the 3rd of the line.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<usize>().ok());
    let (Some(arg_start), Some(arg_end), Some(env_start), Some(env_end)) =
        (field(48), field(49), field(50), field(51))
    else {
        return;
    };
    // The addresses are this process's own only if `environ`, untouched since start-up, starts
    // where they say (an emulator's /proc may show another address space's).
    unsafe extern "C" {
        static environ: *const *const libc::c_char;
    }
    // SAFETY: reading the C library's `environ` pointer (never null after start-up) and its
    // first entry, a pointer, nothing else.
    let first = unsafe { *environ };
    if arg_start == 0 || arg_end <= arg_start || arg_end > env_start || first as usize != env_start {
        return;
    }
    // SAFETY: [arg_start, arg_end) and [env_start, env_end) are this process's own argument
    // and environment strings, as the kernel laid them out on its stack: writable memory that
    // nothing else refers to by now, except `environ`'s pointers to the entries blanked here,
    // which stay valid strings ("NAME=" and NULs).
    unsafe {
        let args = std::slice::from_raw_parts_mut(arg_start as *mut u8, arg_end - arg_start);
        args.fill(0);
        let n = title.len().min(args.len() - 1);
        args[..n].copy_from_slice(&title[..n]);
        let env = std::slice::from_raw_parts_mut(env_start as *mut u8, env_end - env_start);
        for entry in env.split_mut(|b| *b == 0) {
            if let Some(eq) = entry.iter().position(|b| *b == b'=')
                && secret(&entry[..eq])
            {
                entry[eq + 1..].fill(0);
            }
        }
    }
}

/// Points stdin and stdout at /dev/null: a holder must not keep its script's input, nor the
/// pipe `$(…)` reads to its end.
pub fn stdio_to_null() -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    for fd in [0, 1] {
        // SAFETY: dup2 onto the standard descriptors, which stay open (now on /dev/null).
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Resolves once `fd` (a pidfd) is readable.
pub async fn readable(fd: &OwnedFd) -> io::Result<()> {
    use std::os::fd::AsFd;
    // SAFETY: the descriptor is open for as long as `fd` is borrowed, which outlives this
    // registration (dropped on return).
    let watch = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd.as_fd(), tokio::io::Interest::READABLE)
    }?;
    watch.readable().await?.retain_ready();
    Ok(())
}
