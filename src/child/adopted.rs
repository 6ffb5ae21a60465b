//! A script adopted by its holder (`redlock-run lock`): the process the lock is held for, which
//! the wrapper guards but did not start, and the `unlock` requests that ask it to let go.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::unistd::Pid;

use crate::sys;

/// How often a script is looked at where the kernel has no pidfd (before Linux 5.3).
const POLL_EVERY: Duration = Duration::from_millis(50);

/// The script: the process the lock is held for.
pub struct Script {
    pub pid: Pid,
    /// Readable once the script has exited; `None` where the kernel has no pidfd, and the
    /// script is looked at every [`POLL_EVERY`] instead.
    pidfd: Option<OwnedFd>,
    /// Its start time (/proc/PID/stat), which tells it from a later process with its pid.
    pub start_time: u64,
    /// It does not lead its process group: it and its descendants are guarded, not the group
    /// (`child::tree`).
    pub tree: bool,
}

impl Script {
    pub fn new(pid: Pid, pidfd: Option<OwnedFd>, start_time: u64, tree: bool) -> Script {
        Script { pid, pidfd, start_time, tree }
    }

    /// Whether the script has exited (a zombie its parent has not reaped counts as exited).
    pub fn has_exited(&self) -> bool {
        if let Some(fd) = &self.pidfd {
            use std::os::fd::AsFd;
            let mut poll = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
            return nix::poll::poll(&mut poll, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0);
        }
        stat(self.pid)
            .is_none_or(|s| s.start_time != self.start_time || matches!(s.state, b'Z' | b'X' | b'x'))
    }

    /// Readable once the script has exited, where the kernel has pidfds.
    pub fn pidfd(&self) -> Option<&OwnedFd> {
        self.pidfd.as_ref()
    }

    /// Resolves once the script has exited.
    pub async fn exited(&mut self) {
        if let Some(fd) = &self.pidfd {
            match sys::readable(fd).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!("cannot watch the script's pidfd ({e}); looking every 50 ms");
                    self.pidfd = None;
                }
            }
        }
        while !self.has_exited() {
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

/// An `unlock` waiting for its answer.
pub struct UnlockRequest(pub UnixStream);

impl UnlockRequest {
    /// Answers at once (a line on a local socket): the holder may exit right after.
    pub fn answer(mut self, (code, msg): &(u8, String)) {
        let _ = self.0.write_all(format!("{code} {msg}\n").as_bytes());
    }
}

/// The fields of /proc/PID/stat the script's checks read.
pub struct Stat {
    pub state: u8,
    pub parent: Pid,
    pub start_time: u64,
}

pub fn stat(pid: Pid) -> Option<Stat> {
    let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // State is the 3rd field of the line, the start time the 22nd.
    Some(Stat {
        state: fields.first()?.bytes().next()?,
        parent: Pid::from_raw(fields.get(1)?.parse().ok()?),
        start_time: fields.get(19)?.parse().ok()?,
    })
}
