//! Ending a copy on the user's request (Ctrl-C): a flag the caller sets (from a signal handler)
//! and a watcher that, once it is set, ends the session with `Fatal` code 17 (Interrupted), so
//! that the peer logs an interruption, not a violation, and tidies up (keeps resumable chunks,
//! gives directories their modes) as for any abort.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the watcher looks at the flag: well under a human's patience.
const POLL: Duration = Duration::from_millis(50);

/// The message sent to the peer with code 17.
pub const INTERRUPTED: &str = "the client's user interrupted the copy";

/// Runs `on_cancel` once when `cancel` is set, until dropped.
pub struct Watch {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Watch `cancel`; `on_cancel` runs on the watcher's thread.
    pub fn new(cancel: Arc<AtomicBool>, on_cancel: impl FnOnce() + Send + 'static) -> Watch {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let thread = std::thread::Builder::new()
            .name("linerate-cancel".into())
            .spawn(move || {
                while !d.load(Relaxed) {
                    if cancel.load(Relaxed) {
                        on_cancel();
                        return;
                    }
                    std::thread::sleep(POLL);
                }
            })
            .ok();
        Watch { done, thread }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn runs_once_when_set_and_never_after_drop() {
        let (cancel, calls) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let c = calls.clone();
        let w = Watch::new(cancel.clone(), move || {
            c.fetch_add(1, Relaxed);
        });
        cancel.store(true, Relaxed);
        let t = std::time::Instant::now();
        while calls.load(Relaxed) == 0 && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(w);
        assert_eq!(calls.load(Relaxed), 1);
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        drop(Watch::new(Arc::new(AtomicBool::new(false)), move || {
            c.fetch_add(1, Relaxed);
        }));
        assert_eq!(calls.load(Relaxed), 0, "dropped before any cancel: never called");
    }
}
