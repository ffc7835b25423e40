//! How the process ends before its command returns, decided in `main` alone (issue 44): the
//! command runs on a thread of its own while `main` waits for whichever comes first, the
//! command's result or a request to end now. A request comes from a command's second Ctrl-C
//! (its stop reaching [`Stage::Hurrying`](linerate_model::shutdown::Stage::Hurrying), [`interrupt_on_signals`]) or from a thread that
//! learns nothing more can happen (the ssh connection of `serve --ssh` closing, [`request`]);
//! `main` then returns that kind's exit code. Nothing else calls `process::exit`.
//!
//! The signals are the process's one handler in `linerate_model::signals`: SIGINT and SIGTERM
//! (and SIGHUP for the lab, [`signals`]) turn into stops of the commands' [`Stopper`]s
//! ([`stop_on_signals`]), as a closed output does ([`crate::out::stop_on_close`]), and
//! [`signalled`] tells which of the two it was. The handler is installed when the first command
//! asks for it, not before: until a command has an orderly stop, a signal ends the process as it
//! always did (the kernel's default).

use crate::error::Kind;
use crossbeam_channel::{bounded, Receiver, Sender};
use linerate_model::shutdown::{Shutdown, Stopper};
use std::sync::OnceLock;

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

pub(crate) use linerate_model::signals::{signalled, stop_on_signals, with_hangup as signals};

/// Ctrl-C or SIGTERM stops `stopper` in order; a second one (or one after another stop, a
/// closed output's) ends the process at once with [`Kind::Interrupted`]'s code: `cp` and
/// `bench`.
pub(crate) fn interrupt_on_signals(stopper: &Stopper) -> std::io::Result<()> {
    stop_on_signals(stopper, |_| {})?;
    on_hurry(stopper.shutdown());
    Ok(())
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
