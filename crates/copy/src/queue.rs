//! The sender's one global work queue. The walker pushes entries; every stream pulls from the
//! same queue, so no stream idles while another has a backlog. A large file becomes a run of
//! chunks that all streams claim from, in order, once the stream that opened it has declared it;
//! that order (declaration before any of its chunks is claimable) is what lets the receiver wait
//! for a declaration without ever deadlocking.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Something split into chunks that streams claim one at a time.
pub trait Chunked {
    /// Number of chunks.
    fn chunks(&self) -> u64;
}

/// What a stream should do next.
#[derive(Debug)]
pub enum Work<I, B> {
    /// An entry from the walker. If it is a large file the stream must open it, declare it,
    /// and call [`Queue::publish`] (even if opening failed).
    Item(I),
    /// Chunk `n` of a published large file.
    Chunk(B, u64),
}

/// What waiting for work gave.
#[derive(Debug)]
pub enum Waited<W> {
    /// Something to do.
    Work(W),
    /// Nothing yet, within the time limit.
    Idle,
    /// Everything is done (or aborted).
    Done,
}

struct State<I, B> {
    items: VecDeque<I>,
    active: VecDeque<(B, u64)>,
    walker_done: bool,
    opening: usize,
    aborted: bool,
    /// Threads waiting on `changed`: a change wakes them only if there are any (waking nobody
    /// still costs a futex system call, and a small file is one take and one push).
    waiters: usize,
}

/// The queue. `I` is the walker's item, `B` a shared handle to a large file.
pub struct Queue<I, B> {
    state: Mutex<State<I, B>>,
    changed: Condvar,
    cap: usize,
}

impl<I, B: Chunked + Clone> Queue<I, B> {
    /// A queue holding at most `cap` walker items (back-pressure on the walker).
    pub fn new(cap: usize) -> Self {
        Queue {
            state: Mutex::new(State {
                items: VecDeque::new(),
                active: VecDeque::new(),
                walker_done: false,
                opening: 0,
                aborted: false,
                waiters: 0,
            }),
            changed: Condvar::new(),
            cap: cap.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<I, B>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Walker: add an item, waiting while the queue is full. False if the copy was aborted.
    pub fn push(&self, item: I) -> bool {
        let mut s = self.lock();
        while s.items.len() >= self.cap && !s.aborted {
            s.waiters += 1;
            s = self.changed.wait(s).unwrap_or_else(PoisonError::into_inner);
            s.waiters -= 1;
        }
        if s.aborted {
            return false;
        }
        s.items.push_back(item);
        Self::wake(&s, &self.changed);
        true
    }

    /// Add an item that is ready now (a file the receiver asked for), without waiting for room:
    /// its producer bounds how many it adds. False if the copy was aborted.
    pub fn push_ready(&self, item: I) -> bool {
        let mut s = self.lock();
        if s.aborted {
            return false;
        }
        s.items.push_back(item);
        Self::wake(&s, &self.changed);
        true
    }

    /// Walker: nothing more will be pushed.
    pub fn walker_done(&self) {
        let mut s = self.lock();
        s.walker_done = true;
        Self::wake(&s, &self.changed);
    }

    /// Stop everything: pending and future calls return None / false.
    pub fn abort(&self) {
        let mut s = self.lock();
        s.aborted = true;
        Self::wake(&s, &self.changed);
    }

    /// Whether [`Queue::abort`] was called.
    pub fn is_aborted(&self) -> bool {
        self.lock().aborted
    }

    /// Take the next work item without waiting; `is_big` says whether an item is a large file
    /// that the caller will open and publish.
    pub fn try_next(&self, is_big: impl Fn(&I) -> bool) -> Option<Work<I, B>> {
        let mut s = self.lock();
        Self::take(&mut s, &is_big, &self.changed)
    }

    /// Take the next work item, waiting for one. None when everything is done (or aborted).
    pub fn next(&self, is_big: impl Fn(&I) -> bool) -> Option<Work<I, B>> {
        loop {
            match self.next_within(&is_big, Duration::from_secs(3600)) {
                Waited::Work(w) => return Some(w),
                Waited::Done => return None,
                Waited::Idle => {}
            }
        }
    }

    /// Like [`Queue::next`], but gives up after `limit` with [`Waited::Idle`], so an idle stream
    /// can send a keepalive.
    pub fn next_within(&self, is_big: impl Fn(&I) -> bool, limit: Duration) -> Waited<Work<I, B>> {
        let deadline = Instant::now() + limit;
        let mut s = self.lock();
        loop {
            if s.aborted {
                return Waited::Done;
            }
            if let Some(w) = Self::take(&mut s, &is_big, &self.changed) {
                return Waited::Work(w);
            }
            if s.walker_done && s.opening == 0 {
                return Waited::Done;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Waited::Idle;
            }
            s.waiters += 1;
            s = self.changed.wait_timeout(s, left).unwrap_or_else(PoisonError::into_inner).0;
            s.waiters -= 1;
        }
    }

    /// Wake the waiters, if any, after a change made under the lock `s`.
    fn wake(s: &State<I, B>, changed: &Condvar) {
        if s.waiters > 0 {
            changed.notify_all();
        }
    }

    fn take(s: &mut State<I, B>, is_big: &impl Fn(&I) -> bool, changed: &Condvar) -> Option<Work<I, B>> {
        if s.aborted {
            return None;
        }
        if let Some((b, next)) = s.active.front_mut() {
            let n = *next;
            *next += 1;
            let b = b.clone();
            if n + 1 >= b.chunks() {
                s.active.pop_front();
            }
            return Some(Work::Chunk(b, n));
        }
        let item = s.items.pop_front()?;
        if is_big(&item) {
            s.opening += 1;
        }
        Self::wake(s, changed); // room for the walker
        Some(Work::Item(item))
    }

    /// A stream opened (and declared) a large file and took chunk 0 itself: make chunks 1.. claimable.
    /// Pass None if opening failed.
    pub fn publish(&self, big: Option<B>) {
        let mut s = self.lock();
        s.opening = s.opening.saturating_sub(1);
        if let Some(b) = big {
            if b.chunks() > 1 {
                s.active.push_back((b, 1));
            }
        }
        Self::wake(&s, &self.changed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Clone, Debug, PartialEq)]
    struct Big(u64, u64); // id, chunks
    impl Chunked for Big {
        fn chunks(&self) -> u64 {
            self.1
        }
    }

    fn is_big(i: &(u64, u64)) -> bool {
        i.1 > 1
    }

    #[test]
    fn large_file_chunks_are_claimed_once_each_in_order() {
        let q: Queue<(u64, u64), Big> = Queue::new(8);
        q.push((1, 3));
        q.push((2, 1));
        q.walker_done();
        let Some(Work::Item((1, 3))) = q.next(is_big) else { panic!("expected the big file") };
        // Until it is published, its chunks are not claimable; the small file comes first.
        let Some(Work::Item((2, 1))) = q.next(is_big) else { panic!("expected the small file") };
        assert!(q.try_next(is_big).is_none());
        q.publish(Some(Big(1, 3)));
        let mut got = Vec::new();
        while let Some(w) = q.next(is_big) {
            match w {
                Work::Chunk(b, n) => got.push((b.0, n)),
                Work::Item(i) => panic!("unexpected {i:?}"),
            }
        }
        assert_eq!(got, vec![(1, 1), (1, 2)]);
    }

    #[test]
    fn next_waits_for_a_pending_publish_instead_of_finishing_early() {
        let q: Arc<Queue<(u64, u64), Big>> = Arc::new(Queue::new(8));
        q.push((1, 2));
        q.walker_done();
        let Some(Work::Item(_)) = q.next(is_big) else { panic!() };
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.next(is_big).map(|w| matches!(w, Work::Chunk(_, 1))));
        std::thread::sleep(std::time::Duration::from_millis(50));
        q.publish(Some(Big(1, 2)));
        assert_eq!(t.join().unwrap(), Some(true));
        assert!(q.next(is_big).is_none());
    }

    #[test]
    fn an_idle_wait_ends_after_its_limit() {
        let q: Queue<(u64, u64), Big> = Queue::new(1);
        let t = std::time::Instant::now();
        assert!(matches!(q.next_within(is_big, Duration::from_millis(50)), Waited::Idle));
        assert!(t.elapsed() >= Duration::from_millis(50));
        q.walker_done();
        assert!(matches!(q.next_within(is_big, Duration::from_millis(50)), Waited::Done));
    }

    #[test]
    fn push_blocks_when_full_and_abort_releases_everyone() {
        let q: Arc<Queue<(u64, u64), Big>> = Arc::new(Queue::new(1));
        assert!(q.push((1, 1)));
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.push((2, 1)));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!t.is_finished(), "push must wait for room");
        q.abort();
        assert!(!t.join().unwrap());
        assert!(q.next(is_big).is_none());
    }

    #[test]
    fn many_streams_drain_everything_exactly_once() {
        let q: Arc<Queue<(u64, u64), Big>> = Arc::new(Queue::new(4));
        let producer = {
            let q = q.clone();
            std::thread::spawn(move || {
                for id in 0..200u64 {
                    q.push((id, 1 + id % 5));
                }
                q.walker_done();
            })
        };
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut done = Vec::new();
                    while let Some(w) = q.next(is_big) {
                        match w {
                            Work::Item((id, n)) => {
                                done.push((id, 0));
                                if n > 1 {
                                    q.publish(Some(Big(id, n)));
                                }
                            }
                            Work::Chunk(b, c) => done.push((b.0, c)),
                        }
                    }
                    done
                })
            })
            .collect();
        producer.join().unwrap();
        let mut all: Vec<(u64, u64)> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
        all.sort();
        let expect: Vec<(u64, u64)> = (0..200u64).flat_map(|id| (0..1 + id % 5).map(move |c| (id, c))).collect();
        assert_eq!(all, expect);
    }
}
