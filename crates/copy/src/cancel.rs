//! Ending a copy on the user's request (Ctrl-C): a [`Shutdown`] the caller stops (from a signal
//! thread) and a watcher that, once it is stopped, ends the session with `Fatal` code 17
//! (Interrupted), so that the peer logs an interruption, not a violation, and tidies up (keeps
//! resumable chunks, gives directories their modes) as for any abort. The watcher waits on the
//! stop and on its own end at once: nothing polls.

use crossbeam_channel::{select, Sender};
use linerate_model::shutdown::{Never, Shutdown};
use std::thread::JoinHandle;

/// The message sent to the peer with code 17.
pub const INTERRUPTED: &str = "the client's user interrupted the copy";

/// Runs `on_cancel` once when `cancel` is stopped, until dropped.
pub struct Watch {
    /// Dropped to end the watcher.
    done: Option<Sender<Never>>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Watch `cancel`; `on_cancel` runs on the watcher's thread.
    pub fn new(cancel: Shutdown, on_cancel: impl FnOnce() + Send + 'static) -> Watch {
        let (done, ended) = crossbeam_channel::bounded::<Never>(0);
        let thread = std::thread::Builder::new()
            .name("linerate-cancel".into())
            .spawn(move || {
                select! {
                    recv(cancel.stopped()) -> _ => on_cancel(),
                    recv(ended) -> _ => {}
                }
            })
            .ok();
        Watch { done: Some(done), thread }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_model::shutdown::Stopper;

    #[test]
    fn runs_once_when_stopped_and_never_after_drop() {
        let stop = Stopper::new();
        let (tx, rx) = crossbeam_channel::unbounded();
        let w = Watch::new(stop.shutdown(), move || tx.send(()).unwrap());
        stop.stop();
        rx.recv().expect("called on the stop");
        drop(w);
        assert!(rx.try_recv().is_err(), "called once");
        let (tx, rx) = crossbeam_channel::unbounded();
        let stop = Stopper::new();
        drop(Watch::new(stop.shutdown(), move || tx.send(()).unwrap()));
        stop.stop();
        assert!(rx.recv().is_err(), "dropped before any stop: never called, and the sender is gone");
    }
}
