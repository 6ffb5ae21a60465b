//! What std's start-up does before `main` that the wrapper relies on, for the glibc build's own
//! entry point (`main.rs`). std's start-up also finds the main thread's stack for its
//! stack-overflow message, which glibc does by reading and parsing /proc/self/maps: a tenth of
//! a millisecond of every start (BENCHMARKS.md). Without that message a stack overflow is still
//! a SIGSEGV, caught by the kernel's guard gap.

use nix::libc;

/// Descriptors 0–2 open, on /dev/null where they were closed (or a connection opened later
/// could become stdout), and SIGPIPE ignored (a reader gone is an error to report, not death),
/// as std leaves them.
pub fn as_std_starts() {
    // SAFETY: poll reads and writes only the three pollfd it is given; open and signal take a
    // NUL-terminated path and a plain disposition. Where they fail, std's own start-up aborts.
    unsafe {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
        let closed: [bool; 3] = loop {
            if libc::poll(fds.as_mut_ptr(), 3, 0) != -1 {
                break fds.map(|p| p.revents & libc::POLLNVAL != 0);
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // No room for poll's own needs: one descriptor at a time.
                Some(libc::EINVAL | libc::EAGAIN | libc::ENOMEM) => {
                    break [0, 1, 2].map(|fd| {
                        libc::fcntl(fd, libc::F_GETFD) == -1
                            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
                    });
                }
                _ => libc::abort(),
            }
        };
        // Each open takes the lowest free descriptor: the closed ones, in order.
        for _ in closed.iter().filter(|&&c| c) {
            if libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) == -1 {
                libc::abort();
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
