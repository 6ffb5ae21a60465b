//! Signals the wrapper receives. Handlers are installed at start-up, so that a signal that
//! arrives while waiting for the lock aborts the wait, and so that, as PID 1, signals are not
//! dropped by the kernel for lack of a handler.

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use tokio::signal::unix::{Signal as Stream, SignalKind, signal};

pub struct Signals {
    streams: Vec<(Signal, Stream)>,
    /// SIGCHLD, for the command's exit: registered with the others, so that the spawn neither
    /// installs a handler nor finds one it did not note (`sys::note_handlers`).
    child_exits: Option<Stream>,
}

/// Signals the wrapper handles: those forwarded to the command's process group, and the job
/// control ones (TSTP suspends the command with the wrapper; CONT, seen while a suspension is
/// still waiting for the group to stop, calls it off; TTIN/TTOU must never stop the wrapper
/// alone, which would let the lease lapse under a running command). A signal that was ignored
/// when the wrapper started (`nohup`, a shell's background job) stays ignored, for the command
/// too: no handler is installed for it.
const HANDLED: [Signal; 12] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    // Its default would kill the wrapper alone, leaving the lock to expire.
    Signal::SIGALRM,
    Signal::SIGWINCH,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGCONT,
];

impl Signals {
    pub fn install() -> std::io::Result<Self> {
        let streams: Vec<(Signal, Stream)> = HANDLED
            .iter()
            .filter(|&&sig| sig == Signal::SIGCONT || !crate::sys::ignored_at_start(sig))
            .map(|&sig| Ok((sig, signal(SignalKind::from_raw(sig as i32))?)))
            .collect::<std::io::Result<_>>()?;
        // A mask inherited from whatever started the wrapper must not hold back the signals it
        // handles: a blocked SIGTERM would never be passed on, and a blocked SIGCHLD would leave
        // the command's exit unnoticed until the next renewal, with the lock held meanwhile.
        // (The command itself starts with nothing blocked.)
        let mut handled = SigSet::empty();
        handled.add(Signal::SIGCHLD);
        for (sig, _) in &streams {
            handled.add(*sig);
        }
        pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&handled), None)?;
        let child_exits = Some(signal(SignalKind::child())?);
        crate::sys::note_handlers(handled.iter());
        Ok(Signals { streams, child_exits })
    }

    /// SIGCHLD deliveries, for the one command a run starts.
    pub fn take_child_exits(&mut self) -> Option<Stream> {
        self.child_exits.take()
    }

    /// The next signal received. Several deliveries of one signal between two calls count once.
    pub async fn recv(&mut self) -> Signal {
        std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

impl Signals {
    /// Whether SIGCONT arrived since it was last received; consumes it.
    pub fn take_continued(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        self.streams
            .iter_mut()
            .filter(|(sig, _)| *sig == Signal::SIGCONT)
            .any(|(_, stream)| stream.poll_recv(&mut cx).is_ready())
    }

    /// The next signal that ends a run before its command has started: those whose default
    /// action would have ended the wrapper. WINCH, TTIN and TTOU are ignored; TSTP suspends the
    /// wrapper (nothing runs under it yet) until it is continued, `before_stop` called first (to
    /// erase what the wait shows on the terminal).
    pub async fn recv_before_start(&mut self, before_stop: fn()) -> Signal {
        loop {
            match self.recv().await {
                Signal::SIGWINCH | Signal::SIGTTIN | Signal::SIGTTOU | Signal::SIGCONT => {}
                Signal::SIGTSTP => {
                    before_stop();
                    let _ = nix::sys::signal::raise(Signal::SIGSTOP);
                }
                sig => return sig,
            }
        }
    }
}

/// Signals that ask the command to stop, and so start the escalation to SIGKILL after
/// `--kill-grace`. HUP, USR1, USR2, ALRM and WINCH are only passed on: daemons use them to
/// reload.
pub fn is_stop_request(sig: Signal) -> bool {
    matches!(sig, Signal::SIGTERM | Signal::SIGINT | Signal::SIGQUIT)
}
