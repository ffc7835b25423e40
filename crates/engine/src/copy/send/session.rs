//! The steps of [`run_sender`](super::run_sender), in the order it takes them: socket timeouts
//! and the shared state, the walker and the data streams, the wait for the streams (with
//! keepalives on the control stream), the best explanation of a failure, and `Finish` with the
//! wait for the receiver's summary.

use super::reader::Outcome;
use super::*;
use crate::copy::walk;
use crate::net::conn::{Secured, SendHalf};
use linerate_proto::copy::{SenderControl, SenderTimeouts};
use linerate_proto::frame::{FLAG_CHECKSUM, FLAG_DELETE, FLAG_SYNC, FLAG_VERIFY};
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Condvar, PoisonError};
use std::thread::JoinHandle;

/// A send that makes no progress for the stall timeout fails (SO_SNDTIMEO) instead of waiting
/// on a dead link for the kernel's retransmission limit.
pub(super) fn set_write_timeouts(control: &Secured, data: &[Secured], stall: Duration) {
    for s in data.iter().chain(std::iter::once(control)) {
        if let Some(sock) = s.rx.socket() {
            let _ = sock.set_write_timeout(Some(stall.max(Duration::from_millis(1))));
        }
    }
}

/// The state every thread of the session shares: the queue and totals, and the offers.
pub(super) fn shared_state(o: &SendOpts, progress: Arc<Progress>, on_error: ErrorSink) -> (Arc<Ctx>, Arc<Offers>) {
    let ctx = Arc::new(Ctx {
        queue: Queue::new(4096),
        chunk: o.chunk,
        verify: o.has(FLAG_VERIFY),
        sync: o.has(FLAG_SYNC),
        stalled: AtomicBool::new(false),
        keepalive: o.keepalive,
        totals: Totals::default(),
        progress,
        on_error,
        pace: o.pace.clone(),
        peer: o.peer,
    });
    let timeouts = SenderTimeouts { stall: o.stall_timeout, summary: o.summary_wait };
    let offers = Arc::new(Offers {
        state: Mutex::new(OfferState {
            files: HashMap::new(),
            ctl: SenderControl::new(o.flags, o.chunk as u32, timeouts, Instant::now()),
        }),
        changed: Condvar::new(),
        waiters: AtomicUsize::new(0),
    });
    (ctx, offers)
}

/// Start the walker: it queues entries (or offers files, in a sync session), then waits until
/// every offer is answered before it finishes the queue.
pub(super) fn spawn_walker(
    roots: Vec<Root>,
    ctx: &Arc<Ctx>,
    offers: &Arc<Offers>,
    ctl_tx: &Arc<Mutex<SendHalf>>,
    o: &SendOpts,
) -> JoinHandle<()> {
    let (ctx, offers, ctl_tx) = (ctx.clone(), offers.clone(), ctl_tx.clone());
    let (listing, checksum) = (o.has(FLAG_DELETE), o.has(FLAG_CHECKSUM));
    std::thread::spawn(move || {
        let err = |m: String| ctx.fail(m);
        let mut out = Outbox::new(ctl_tx);
        walk::walk_listing(
            &roots,
            listing && ctx.sync,
            |item| {
                if let Item::File(f) = &item {
                    ctx.progress.found_files.fetch_add(1, Relaxed);
                    ctx.progress.found_bytes.fetch_add(f.size, Relaxed);
                }
                match item {
                    Item::File(f) if ctx.sync => offer(&ctx, &offers, &mut out, f, checksum),
                    Item::Listing { dir, names } => {
                        out.keep(dir, &names);
                        true
                    }
                    item => ctx.queue.push(item),
                }
            },
            &err,
        );
        out.flush(&ctx);
        await_answers(&ctx, &offers);
        ctx.queue.walker_done();
        ctx.progress.walk_done.store(1, Relaxed);
    })
}

/// Every offer must be answered before the streams may finish: wait for the answers, until the
/// copy is aborted or the receiver stalls.
fn await_answers(ctx: &Ctx, offers: &Offers) {
    let mut st = offers.lock();
    while !st.files.is_empty() && !ctx.queue.is_aborted() {
        st = offers.wait(st, WANT_POLL);
        if stalled(ctx, &mut st) {
            break;
        }
    }
}

/// A stream's result when its thread ends.
pub(super) type StreamEnd = Result<(), EngineError>;

/// Start one thread per data stream; a stream that fails aborts the queue. Each reports its end.
pub(super) fn spawn_streams(data: Vec<Secured>, ctx: &Arc<Ctx>) -> (Vec<JoinHandle<()>>, mpsc::Receiver<StreamEnd>) {
    let (fin_tx, fin_rx) = mpsc::channel::<StreamEnd>();
    let workers = data
        .into_iter()
        .map(|s| {
            let (ctx, fin_tx) = (ctx.clone(), fin_tx.clone());
            let mut tx = s.tx;
            std::thread::spawn(move || {
                let r = stream_loop(&ctx, &mut tx);
                if r.is_err() {
                    ctx.queue.abort();
                }
                let _ = fin_tx.send(r);
            })
        })
        .collect();
    (workers, fin_rx)
}

/// Wait for every stream, keeping the otherwise silent control stream alive, then join them;
/// the first error among them.
pub(super) fn wait_streams(
    workers: Vec<JoinHandle<()>>,
    fin_rx: mpsc::Receiver<StreamEnd>,
    ctl_tx: &Mutex<SendHalf>,
    keepalive: Duration,
) -> Option<EngineError> {
    let mut first_err = None;
    let mut finished = 0;
    while finished < workers.len() {
        match fin_rx.recv_timeout(keepalive) {
            Ok(r) => {
                finished += 1;
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = ctl_tx.lock().unwrap_or_else(PoisonError::into_inner).keepalive();
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                first_err.get_or_insert(EngineError::Internal("a sender thread panicked".into()));
                break;
            }
        }
    }
    for w in workers {
        let _ = w.join();
    }
    first_err
}

/// Close the control stream.
pub(super) fn shutdown(ctl_tx: &Mutex<SendHalf>) {
    ctl_tx.lock().unwrap_or_else(PoisonError::into_inner).shutdown();
}

/// Why the session failed, if it did: a stream's error, else the receiver's stall on offers,
/// else the control reader's abort.
pub(super) fn session_error(first_err: Option<EngineError>, ctx: &Ctx, o: &SendOpts) -> Option<EngineError> {
    let mut first_err = first_err;
    if ctx.stalled.load(Relaxed) {
        first_err.get_or_insert(EngineError::Timeout(format!(
            "the receiver answered no offer for {} s (link down, or the receiver stalled)",
            o.stall_timeout.as_secs_f64()
        )));
    }
    if first_err.is_none() && ctx.queue.is_aborted() {
        // The control reader ended the session (a fatal error, a broken protocol).
        first_err = Some(EngineError::Aborted {
            code: ErrorCode::Protocol,
            message: "the session was aborted (the control stream ended it)".into(),
        });
    }
    first_err
}

/// The error to show for failure `e`: the peer's own explanation (`peer`, the control reader's
/// outcome) if it sent one, else a clear word on a stall or a closed connection, else `e`.
pub(super) fn explain(e: EngineError, peer: Result<Outcome, mpsc::RecvTimeoutError>, o: &SendOpts) -> EngineError {
    match (peer, e) {
        (Ok(Err(why @ (EngineError::Remote { .. } | EngineError::Proto(_)))), _) => why,
        (_, e @ EngineError::Net { .. }) if e.is_timeout() => EngineError::Timeout(format!(
            "no progress sending to the {} for {} s (link down, or the {} stalled)",
            o.peer,
            o.stall_timeout.as_secs_f64(),
            o.peer
        )),
        (_, EngineError::Net { io: source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            EngineError::net(format!("the {} closed the connection mid-transfer (stopped or killed?)", o.peer), source)
        }
        (Ok(Err(why)), EngineError::Aborted { .. }) => why,
        (_, e) => e,
    }
}

/// Send `Finish` with totals `fin` and wait for the summary within the limit (crates/proto
/// `copy`), which may claim no more than `fin`: a receiver commits only what it was sent, and a
/// summary claiming more must not make an incomplete copy look complete. Joins the reader.
pub(super) fn finish_and_await_summary(
    fin: Finish,
    offers: &Offers,
    ctl_tx: &Mutex<SendHalf>,
    done_rx: &mpsc::Receiver<Outcome>,
    reader: JoinHandle<()>,
    o: &SendOpts,
) -> Result<Summary, EngineError> {
    let due = {
        let mut st = offers.lock();
        st.ctl.finish(fin, Instant::now());
        st.ctl.poll_timeout()
    };
    ctl_tx.lock().unwrap_or_else(PoisonError::into_inner).send_frames(&[Frame::Finish(fin)])?;
    let wait = due.map_or(o.summary_wait, |d| d.saturating_duration_since(Instant::now()));
    let summary = match done_rx.recv_timeout(wait) {
        Ok(s) => s,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            shutdown(ctl_tx);
            let expired = offers.lock().ctl.handle_timeout(Instant::now() + wait).err();
            let why = expired.map_or_else(|| "no summary from the receiver".into(), |e| e.to_string());
            return Err(EngineError::Timeout(why));
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            return Err(EngineError::Internal("the control reader ended without a result".into()))
        }
    };
    let _ = reader.join();
    summary
}
