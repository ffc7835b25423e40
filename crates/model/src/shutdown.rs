//! One way to stop (issue 30): a [`Stopper`] that whoever decides to stop holds (a signal
//! thread, a server's handle, a test), and [`Shutdown`]s that every loop holds and waits on —
//! a crossbeam channel that closes when the stop comes, so a loop selects on it beside its own
//! work instead of polling a flag. A stop has two stages, as a server's does: the first ends
//! new work and lets running work finish; the second (a second signal) says "now".
//! [`Tasks`] waits for running work the way tokio's mini-redis does: each piece holds a
//! [`TaskGuard`] (a channel sender), and the wait ends when the last is dropped.
//!
//! The process's signals reach these stops through [`crate::signals`] (feature `signals`).
//! Nothing here does I/O.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What no message is: the channels here only ever close.
#[derive(Debug)]
pub enum Never {}

/// A hook run once at the first stage of a stop (e.g. waking an event loop).
type Hook = Box<dyn FnOnce() + Send>;

struct Inner {
    /// The senders of the two stages; a stage happens when its sender is dropped.
    stages: Mutex<[Option<Sender<Never>>; 2]>,
    /// The stage reached (0, 1, 2), set before its channel closes: a cheap read for loops
    /// that look at the stop between pieces of work.
    stage: AtomicU8,
    hooks: Mutex<Vec<Hook>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

/// Triggers a stop; clones trigger the same one.
#[derive(Debug, Clone)]
pub struct Stopper {
    inner: Arc<Inner>,
    watch: Shutdown,
}

/// Tells a loop that a stop was asked for; clones see the same one. Dropping every
/// [`Stopper`] does not stop: only [`Stopper::stop`] does.
#[derive(Debug, Clone)]
pub struct Shutdown {
    /// Keeps the senders alive while any observer lives, so that nothing but `stop` closes them.
    inner: Arc<Inner>,
    stop: Receiver<Never>,
    hurry: Receiver<Never>,
}

/// The stage a stop is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Not stopped.
    Running,
    /// Stopping: no new work; running work may finish.
    Stopping,
    /// Stopping now: running work is to be cut short.
    Hurrying,
}

impl Stopper {
    /// A new stop, not triggered.
    pub fn new() -> Stopper {
        let (stop_tx, stop) = crossbeam_channel::bounded(0);
        let (hurry_tx, hurry) = crossbeam_channel::bounded(0);
        let inner = Arc::new(Inner {
            stages: Mutex::new([Some(stop_tx), Some(hurry_tx)]),
            stage: AtomicU8::new(0),
            hooks: Mutex::default(),
        });
        Stopper { watch: Shutdown { inner: inner.clone(), stop, hurry }, inner }
    }

    /// What loops hold to see this stop.
    pub fn shutdown(&self) -> Shutdown {
        self.watch.clone()
    }

    /// Advance one stage: the first call stops, the second hurries, later ones change nothing.
    /// The stage reached.
    pub fn stop(&self) -> Stage {
        let mut stages = self.inner.stages.lock().unwrap_or_else(PoisonError::into_inner);
        let stage = if stages[0].is_some() {
            self.inner.stage.store(1, Ordering::SeqCst);
            stages[0] = None;
            Stage::Stopping
        } else {
            self.inner.stage.store(2, Ordering::SeqCst);
            stages[1] = None;
            Stage::Hurrying
        };
        drop(stages);
        if stage == Stage::Stopping {
            let hooks = std::mem::take(&mut *self.inner.hooks.lock().unwrap_or_else(PoisonError::into_inner));
            for h in hooks {
                h();
            }
        }
        stage
    }

    /// Stop and hurry at once.
    pub fn stop_now(&self) {
        self.stop();
        self.stop();
    }
}

impl Default for Stopper {
    fn default() -> Self {
        Stopper::new()
    }
}

impl Shutdown {
    /// A shutdown nothing can trigger (for callers that never stop early).
    pub fn never() -> Shutdown {
        Stopper::new().shutdown()
    }

    /// The stage now.
    pub fn stage(&self) -> Stage {
        match self.inner.stage.load(Ordering::SeqCst) {
            0 => Stage::Running,
            1 => Stage::Stopping,
            _ => Stage::Hurrying,
        }
    }

    /// Whether a stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.stage() >= Stage::Stopping
    }

    /// Whether the stop is to cut running work short.
    pub fn is_hurried(&self) -> bool {
        self.stage() == Stage::Hurrying
    }

    /// A channel that is ready (closed) once a stop was asked for: `select!` on it beside other
    /// work. It never carries a message.
    pub fn stopped(&self) -> &Receiver<Never> {
        &self.stop
    }

    /// A channel that is ready (closed) once the stop hurries.
    pub fn hurried(&self) -> &Receiver<Never> {
        &self.hurry
    }

    /// Block until a stop is asked for.
    pub fn wait(&self) {
        let _ = self.stop.recv();
    }

    /// Block until a stop is asked for or `deadline` passes; whether it was stopped.
    pub fn wait_deadline(&self, deadline: Instant) -> bool {
        !matches!(self.stop.recv_deadline(deadline), Err(RecvTimeoutError::Timeout))
    }

    /// Block until a stop is asked for or `timeout` passes; whether it was stopped.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        !matches!(self.stop.recv_timeout(timeout), Err(RecvTimeoutError::Timeout))
    }

    /// Run `hook` once when the stop comes (on the stopping thread), or now if it has come:
    /// how an event loop that waits on something else (mio, a socket) is woken. The hook is
    /// dropped once it has run: what it wakes (a `mio::Waker`) must be held by the loop too.
    pub fn on_stop(&self, hook: impl FnOnce() + Send + 'static) {
        // Under the stages' lock, so that a stop cannot come between the check and the push.
        let stages = self.inner.stages.lock().unwrap_or_else(PoisonError::into_inner);
        if stages[0].is_some() {
            self.inner.hooks.lock().unwrap_or_else(PoisonError::into_inner).push(Box::new(hook));
        } else {
            drop(stages);
            hook();
        }
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::never()
    }
}

/// Running work to wait for: each piece holds a [`TaskGuard`]; [`Tasks::wait_deadline`] ends
/// when every guard has been dropped.
#[derive(Debug)]
pub struct Tasks {
    tx: Option<Sender<Never>>,
    rx: Receiver<Never>,
}

/// One piece of running work, counted until dropped.
#[derive(Debug, Clone)]
#[must_use = "the work counts as running only while its guard lives"]
pub struct TaskGuard {
    _tx: Option<Sender<Never>>,
}

impl Tasks {
    /// None running.
    pub fn new() -> Tasks {
        let (tx, rx) = crossbeam_channel::bounded(0);
        Tasks { tx: Some(tx), rx }
    }

    /// Count one more piece of work until the guard drops. After a wait has begun, new work is
    /// not counted.
    pub fn enter(&self) -> TaskGuard {
        TaskGuard { _tx: self.tx.clone() }
    }

    /// Stop taking new work and block until every guard is dropped or `deadline` passes;
    /// whether all ended.
    pub fn wait_deadline(&mut self, deadline: Instant) -> bool {
        self.tx = None;
        !matches!(self.rx.recv_deadline(deadline), Err(RecvTimeoutError::Timeout))
    }

    /// Stop taking new work; then a channel that is ready (closed) once every guard is
    /// dropped, to `select!` on beside a [`Shutdown`].
    pub fn closing(&mut self) -> &Receiver<Never> {
        self.tx = None;
        &self.rx
    }
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::select;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    #[test]
    fn a_stop_closes_every_clone_in_two_stages_and_dropping_stoppers_does_not_stop() {
        let s = Stopper::new();
        let (a, b) = (s.shutdown(), s.shutdown().clone());
        drop(s.clone());
        assert_eq!(a.stage(), Stage::Running);
        assert!(!a.wait_timeout(Duration::ZERO));
        assert_eq!(s.stop(), Stage::Stopping);
        assert!(a.is_stopped() && b.is_stopped() && !b.is_hurried());
        assert!(b.wait_deadline(Instant::now()));
        b.wait();
        assert_eq!(s.stop(), Stage::Hurrying);
        assert_eq!(a.stage(), Stage::Hurrying);
        assert_eq!(s.stop(), Stage::Hurrying);
        let lone = Shutdown::never();
        assert_eq!(lone.stage(), Stage::Running, "no stopper left, yet not stopped");
    }

    #[test]
    fn a_select_wakes_on_the_stop_from_another_thread() {
        let s = Stopper::new();
        let sd = s.shutdown();
        let (_work_tx, work) = crossbeam_channel::unbounded::<u32>();
        let t = std::thread::spawn(move || {
            select! {
                recv(work) -> _ => "work",
                recv(sd.stopped()) -> _ => "stopped",
            }
        });
        s.stop();
        assert_eq!(t.join().unwrap(), "stopped");
    }

    #[test]
    fn hooks_run_once_at_the_first_stage_or_at_once_when_late() {
        let s = Stopper::new();
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        s.shutdown().on_stop(move || {
            m.fetch_add(1, SeqCst);
        });
        assert_eq!(n.load(SeqCst), 0);
        s.stop();
        s.stop();
        assert_eq!(n.load(SeqCst), 1);
        let m = n.clone();
        s.shutdown().on_stop(move || {
            m.fetch_add(10, SeqCst);
        });
        assert_eq!(n.load(SeqCst), 11, "a hook after the stop runs at once");
    }

    #[test]
    fn tasks_wait_until_every_guard_is_dropped_or_the_deadline() {
        let mut tasks = Tasks::new();
        let (g1, g2) = (tasks.enter(), tasks.enter());
        assert!(!tasks.wait_deadline(Instant::now()), "two running");
        let late = tasks.enter();
        drop(late);
        drop(g1);
        let (tx, rx) = crossbeam_channel::bounded(0);
        let t = std::thread::spawn(move || {
            let _g2 = g2;
            let _ = rx.recv(); // held until the main thread says so
        });
        assert!(!tasks.wait_deadline(Instant::now()), "one running");
        tx.send(()).unwrap();
        assert!(tasks.wait_deadline(Instant::now() + Duration::from_secs(600)), "all ended");
        t.join().unwrap();
        assert!(tasks.closing().try_recv().is_err());
        assert!(Tasks::new().wait_deadline(Instant::now()), "none running");
    }
}
