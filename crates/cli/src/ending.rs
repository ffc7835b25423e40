//! How the process ends before its command returns, decided in `main` alone (issue 44): the
//! command runs on a thread of its own while `main` waits for whichever comes first, the
//! command's result or a request to end now. A request comes from a command's second Ctrl-C
//! (its stop reaching [`Stage::Hurrying`], [`interrupt_on_signals`]) or from a thread that
//! learns nothing more can happen (the ssh connection of `serve --ssh` closing, [`request`]);
//! `main` then returns that kind's exit code. Nothing else calls `process::exit`.
//!
//! The signals are handled here too, once for the process: SIGINT and SIGTERM (and SIGHUP for
//! the lab, [`signals`]) turn into stops of the commands' [`Stopper`]s ([`stop_on_signals`]),
//! as a closed output does ([`crate::out::stop_on_close`]), and [`signalled`] tells which of
//! the two it was. The
//! handler is installed when the first command asks for it, not before: until a command has
//! an orderly stop, a signal ends the process as it always did (the kernel's default).

use crate::error::Kind;
use crossbeam_channel::{bounded, Receiver, Sender};
use linerate_model::shutdown::{Shutdown, Stage, Stopper};
use std::sync::{LazyLock, Mutex, OnceLock, PoisonError};

/// Requests to end the process now, read by `main` alone; the first one decides.
fn channel() -> &'static (Sender<Kind>, Receiver<Kind>) {
    static REQUESTS: OnceLock<(Sender<Kind>, Receiver<Kind>)> = OnceLock::new();
    REQUESTS.get_or_init(|| bounded(1))
}

/// Ask `main` to end the process now with `kind`'s exit code (a later request changes nothing).
pub(crate) fn request(kind: Kind) {
    let _ = channel().0.try_send(kind);
}

/// When `shutdown` is hurried (a second Ctrl-C or SIGTERM after the first began an orderly
/// stop), end the process at once with [`Kind::Interrupted`]'s code, as `cp` and `bench` do.
fn on_hurry(shutdown: Shutdown) {
    let spawned = std::thread::Builder::new().name("linerate-hurry".into()).spawn(move || {
        // The channel closes only when the stop is hurried (the shutdown held here keeps its
        // sender alive otherwise).
        let _ = shutdown.hurried().recv();
        if shutdown.is_hurried() {
            request(Kind::Interrupted);
        }
    });
    // Without the thread a second signal only hurries the stop, which still ends the command.
    drop(spawned);
}

/// One command's stop, told of each signal.
type Listener = Box<dyn FnMut() + Send>;

/// The signals that came and the stops they advance.
struct Signals {
    /// Stopped by the first signal, hurried by the second: [`signalled`] reads it.
    seen: Stopper,
    /// Each registered stop, told of every signal. The signal thread advances `seen` and tells
    /// them under this lock, so that a stop registered as a signal comes is told of it once.
    listeners: Mutex<Vec<Listener>>,
}

impl Signals {
    fn new() -> Signals {
        Signals { seen: Stopper::new(), listeners: Mutex::new(Vec::new()) }
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
static SIGNALS: LazyLock<Signals> = LazyLock::new(Signals::new);

/// Install the process's one handler of SIGINT and SIGTERM (once; later calls return how the
/// first went): a thread that delivers each to [`SIGNALS`]. Its handle adds signals later
/// ([`signals`]: SIGHUP).
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
/// log it): `serve` and `mesh`. Installs the process's handler on the first call.
pub(crate) fn stop_on_signals(
    stopper: &Stopper,
    mut on_signal: impl FnMut(Stage) + Send + 'static,
) -> std::io::Result<()> {
    install()?;
    let s = stopper.clone();
    SIGNALS.listen(Box::new(move || {
        on_signal(if s.shutdown().is_stopped() { Stage::Hurrying } else { Stage::Stopping });
        s.stop();
    }));
    Ok(())
}

/// Ctrl-C or SIGTERM stops `stopper` in order; a second one (or one after another stop, a
/// closed output's) ends the process at once with [`Kind::Interrupted`]'s code: `cp` and
/// `bench`.
pub(crate) fn interrupt_on_signals(stopper: &Stopper) -> std::io::Result<()> {
    stop_on_signals(stopper, |_| {})?;
    on_hurry(stopper.shutdown());
    Ok(())
}

/// Whether a signal came (a stop was a signal's, not a closed output's).
pub(crate) fn signalled() -> bool {
    SIGNALS.seen.shutdown().is_stopped()
}

/// The process's one stop for a command that tears down before it ends (the lab's `up`, `run`
/// and `emulate`): SIGINT, SIGTERM and, for these commands, SIGHUP too (a closed terminal must
/// not leave namespaces behind) stop it in order; the next one hurries it. Every call shares it.
pub(crate) fn signals() -> std::io::Result<Shutdown> {
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

/// Run `command` on a thread of its own (a main thread's stack, 8 MiB) and wait for its result
/// or for a request to end now, whichever comes first: `Err(kind)` for a request. A command
/// that panicked (its message is already printed) is an internal failure.
pub(crate) fn run<T: Send + 'static>(command: impl FnOnce() -> T + Send + 'static) -> Result<T, Kind> {
    let (tx, done) = bounded(1);
    let spawned = std::thread::Builder::new().name("linerate".into()).stack_size(8 << 20).spawn(move || {
        let _ = tx.send(command());
    });
    if spawned.is_err() {
        return Err(Kind::Internal);
    }
    crossbeam_channel::select! {
        recv(done) -> r => r.map_err(|_| Kind::Internal),
        recv(channel().1) -> k => Err(k.unwrap_or(Kind::Internal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_signal_advances_every_registered_stop_and_a_late_one_hears_of_those_that_came() {
        let signals = Signals::new();
        let (early, late, later) = (Stopper::new(), Stopper::new(), Stopper::new());
        let told = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (e, t) = (early.clone(), told.clone());
        signals.listen(Box::new(move || {
            t.lock().unwrap().push(e.shutdown().stage());
            e.stop();
        }));
        assert_eq!(signals.seen.shutdown().stage(), Stage::Running);
        signals.deliver();
        assert_eq!((early.shutdown().stage(), signals.seen.shutdown().stage()), (Stage::Stopping, Stage::Stopping));
        let l = late.clone();
        signals.listen(Box::new(move || {
            l.stop();
        }));
        assert_eq!(late.shutdown().stage(), Stage::Stopping, "told of the signal that came before");
        signals.deliver();
        signals.deliver();
        assert_eq!((early.shutdown().stage(), late.shutdown().stage()), (Stage::Hurrying, Stage::Hurrying));
        assert_eq!(*told.lock().unwrap(), [Stage::Running, Stage::Stopping, Stage::Hurrying], "told of each");
        let l = later.clone();
        signals.listen(Box::new(move || {
            l.stop();
        }));
        assert_eq!(later.shutdown().stage(), Stage::Hurrying, "two or more came");
    }

    #[test]
    fn the_signals_are_installed_once_and_every_caller_sees_their_stop() {
        let (first, second) = (signals().unwrap(), signals().unwrap());
        assert!(!first.is_stopped());
        // SIGHUP (not SIGINT or SIGTERM, which the harness itself might be sent) to this process.
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::HUP).unwrap();
        assert!(first.wait_timeout(std::time::Duration::from_secs(60)), "the signal thread stops it");
        assert!(second.is_stopped(), "one stop for every caller");
        assert!(signals().unwrap().is_stopped(), "a later caller shares it too");
    }

    #[test]
    fn a_command_ends_with_its_result_or_with_the_first_request_to_end_now() {
        assert_eq!(run(|| 7), Ok(7));
        // A hurried stop asks for the interrupted code while the command still runs.
        let stopper = Stopper::new();
        let (release, wait) = bounded::<()>(0);
        let s = stopper.clone();
        let got = run(move || {
            on_hurry(s.shutdown());
            s.stop();
            s.stop();
            // The command would go on: it waits until the test is over.
            let _ = wait.recv();
            1
        });
        assert_eq!(got, Err(Kind::Interrupted));
        drop(release);
        // A stop that is not hurried asks for nothing.
        let calm = Stopper::new();
        on_hurry(calm.shutdown());
        calm.stop();
        assert_eq!(run(|| 2), Ok(2));
        // A panicking command is an internal failure.
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let panicked = run(|| -> u8 { panic!("boom") });
        std::panic::set_hook(quiet);
        assert_eq!(panicked, Err(Kind::Internal));
    }
}
