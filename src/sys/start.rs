//! The program's start, in place of std's (`main.rs`), and its command line. std's start-up
//! installs a stack-overflow handler: it maps an alternate signal stack and, for the main
//! thread's stack, glibc reads and parses /proc/self/maps, a tenth of a millisecond of every
//! start there (BENCHMARKS.md). Without it a stack overflow is still a SIGSEGV (the kernel's
//! guard gap), without std's message.

use std::ffi::{CStr, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicIsize, AtomicPtr, Ordering};

use nix::libc;

static ARGC: AtomicIsize = AtomicIsize::new(0);
static ARGV: AtomicPtr<*const libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// What std's start-up does that the wrapper relies on: the command line kept (std hands it
/// out only if its own start-up ran, on musl), descriptors 0–2 open, on /dev/null where they
/// were closed (or a connection opened later could become stdout), and SIGPIPE ignored (a
/// reader gone is an error to report, not death).
///
/// # Safety
/// `argv` holds `argc` pointers to NUL-terminated strings that live as long as the process:
/// the C entry point's arguments.
pub unsafe fn as_std_starts(argc: libc::c_int, argv: *const *const libc::c_char) {
    ARGC.store(argc as isize, Ordering::Relaxed);
    ARGV.store(argv.cast_mut(), Ordering::Relaxed);
    // SAFETY: fcntl only reads a descriptor's flags; open and signal take a NUL-terminated path
    // and a plain disposition. Where they fail, std's own start-up aborts.
    unsafe {
        // F_GETFD, not poll as std does: poll also says POLLNVAL of an open O_PATH descriptor,
        // and /dev/null would then land above 2 and be passed on to the command. In order, each
        // open takes the lowest free descriptor: the one just found closed.
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
                && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) != fd
            {
                libc::abort();
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// The command line, as `std::env::args_os` would give it: read from the process's own
/// arguments at each call (a script's holder blanks them: `hide_arguments`). Where the program
/// did not start through [`as_std_starts`] (the library's tests), std's.
pub fn args_os() -> std::vec::IntoIter<OsString> {
    let argv = ARGV.load(Ordering::Relaxed).cast_const();
    if argv.is_null() {
        return std::env::args_os().collect::<Vec<_>>().into_iter();
    }
    let argc = ARGC.load(Ordering::Relaxed).max(0) as usize;
    let mut args = Vec::with_capacity(argc);
    for i in 0..argc {
        // SAFETY: `argv` holds `argc` entries ([`as_std_starts`]); each, where not null, a
        // NUL-terminated string that lives as long as the process.
        let arg = unsafe { *argv.add(i) };
        if arg.is_null() {
            break;
        }
        // SAFETY: as above.
        args.push(OsStr::from_bytes(unsafe { CStr::from_ptr(arg) }.to_bytes()).to_owned());
    }
    args.into_iter()
}
