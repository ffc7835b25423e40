//! The process's one handler of SIGINT and SIGTERM (feature `signals`): installed once, when
//! the first command asks ([`stop_on_signals`]), it turns each signal into a stage of every
//! registered [`Stopper`] — the first stops them in order, the next hurries them — and
//! [`signalled`] tells whether a stop was a signal's. Until a command registers, a signal ends
//! the process as the kernel's default does. [`with_hangup`] adds SIGHUP for commands that must
//! tear down when their terminal closes (the lab's).

use crate::shutdown::{Shutdown, Stage, Stopper};
use std::sync::{LazyLock, Mutex, OnceLock, PoisonError};

/// One command's stop, told of each signal.
type Listener = Box<dyn FnMut() + Send>;

/// The signals that came and the stops they advance.
struct Fanout {
    /// Stopped by the first signal, hurried by the second: [`signalled`] reads it.
    seen: Stopper,
    /// Each registered stop, told of every signal. The signal thread advances `seen` and tells
    /// them under this lock, so that a stop registered as a signal comes is told of it once.
    listeners: Mutex<Vec<Listener>>,
}

impl Fanout {
    fn new() -> Fanout {
        Fanout { seen: Stopper::new(), listeners: Mutex::new(Vec::new()) }
    }

    /// A signal came.
    fn deliver(&self) {
        let mut listeners = self.listeners.lock().unwrap_or_else(PoisonError::into_inner);
        self.seen.stop();
        for l in listeners.iter_mut() {
            l();
        }
    }

    /// Tell `listener` of every signal from now on, and now of those that came already (one,
    /// or two for any number more).
    fn listen(&self, mut listener: Listener) {
        let mut listeners = self.listeners.lock().unwrap_or_else(PoisonError::into_inner);
        let came = self.seen.shutdown().stage();
        if came >= Stage::Stopping {
            listener();
        }
        if came == Stage::Hurrying {
            listener();
        }
        listeners.push(listener);
    }
}

/// The process's signals: SIGINT and SIGTERM once [`install`]ed.
static SIGNALS: LazyLock<Fanout> = LazyLock::new(Fanout::new);

/// Install the process's one handler of SIGINT and SIGTERM (once; later calls return how the
/// first went): a thread that delivers each to [`SIGNALS`]. Its handle adds signals later
/// ([`with_hangup`]: SIGHUP).
fn install() -> std::io::Result<&'static signal_hook::iterator::Handle> {
    static INSTALLED: OnceLock<Result<signal_hook::iterator::Handle, String>> = OnceLock::new();
    let done = INSTALLED.get_or_init(|| {
        let signals = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];
        let mut it = signal_hook::iterator::Signals::new(signals).map_err(|e| e.to_string())?;
        let handle = it.handle();
        let spawned = std::thread::Builder::new().name("linerate-signals".into()).spawn(move || {
            for _ in it.forever() {
                SIGNALS.deliver();
            }
        });
        spawned.map(|_| handle).map_err(|e| e.to_string())
    });
    done.as_ref().map_err(|e| std::io::Error::other(e.clone()))
}

/// From now on each SIGINT or SIGTERM advances `stopper` a stage (the first stops it in
/// order, the next hurries it), telling `on_signal` first the stage it brings `stopper` to (to
/// log it). Installs the process's handler on the first call.
pub fn stop_on_signals(stopper: &Stopper, mut on_signal: impl FnMut(Stage) + Send + 'static) -> std::io::Result<()> {
    install()?;
    let s = stopper.clone();
    SIGNALS.listen(Box::new(move || {
        on_signal(if s.shutdown().is_stopped() { Stage::Hurrying } else { Stage::Stopping });
        s.stop();
    }));
    Ok(())
}

/// Whether a signal came (a stop was a signal's, not another stop's).
pub fn signalled() -> bool {
    SIGNALS.seen.shutdown().is_stopped()
}

/// The process's one stop for a command that tears down before it ends (the lab's `up`, `run`
/// and `emulate`): SIGINT, SIGTERM and, for these commands, SIGHUP too (a closed terminal must
/// not leave namespaces behind) stop it in order; the next one hurries it. Every call shares it.
pub fn with_hangup() -> std::io::Result<Shutdown> {
    static STOP: OnceLock<Stopper> = OnceLock::new();
    install()?.add_signal(signal_hook::consts::SIGHUP)?;
    let stopper = STOP.get_or_init(|| {
        let stopper = Stopper::new();
        let s = stopper.clone();
        SIGNALS.listen(Box::new(move || {
            s.stop();
        }));
        stopper
    });
    Ok(stopper.shutdown())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_advances_every_registered_stop_and_a_late_one_hears_of_those_that_came() {
        let fan = Fanout::new();
        let (early, late, later) = (Stopper::new(), Stopper::new(), Stopper::new());
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (e, t) = (early.clone(), told.clone());
        fan.listen(Box::new(move || {
            t.lock().unwrap().push(e.shutdown().stage());
            e.stop();
        }));
        assert_eq!(fan.seen.shutdown().stage(), Stage::Running);
        fan.deliver();
        assert_eq!((early.shutdown().stage(), fan.seen.shutdown().stage()), (Stage::Stopping, Stage::Stopping));
        let l = late.clone();
        fan.listen(Box::new(move || {
            l.stop();
        }));
        assert_eq!(late.shutdown().stage(), Stage::Stopping, "told of the signal that came before");
        fan.deliver();
        fan.deliver();
        assert_eq!((early.shutdown().stage(), late.shutdown().stage()), (Stage::Hurrying, Stage::Hurrying));
        assert_eq!(*told.lock().unwrap(), [Stage::Running, Stage::Stopping, Stage::Hurrying], "told of each");
        let l = later.clone();
        fan.listen(Box::new(move || {
            l.stop();
        }));
        assert_eq!(later.shutdown().stage(), Stage::Hurrying, "two or more came");
    }

    #[test]
    fn the_signals_are_installed_once_and_every_caller_sees_their_stop() {
        let (first, second) = (with_hangup().unwrap(), with_hangup().unwrap());
        assert!(!first.is_stopped());
        // SIGHUP (not SIGINT or SIGTERM, which the harness itself might be sent) to this process.
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::HUP).unwrap();
        assert!(first.wait_timeout(std::time::Duration::from_secs(60)), "the signal thread stops it");
        assert!(second.is_stopped(), "one stop for every caller");
        assert!(with_hangup().unwrap().is_stopped(), "a later caller shares it too");
    }
}
