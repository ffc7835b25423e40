//! The driver of a sending session: one thread that owns the session machine
//! (`linerate_proto::copy::sender::Sender`) and feeds it what the other threads did — records from
//! the control reader, files and listings from the walker, writes in progress on every stream
//! (read from shared atomics), the data streams' ends, Ctrl-C — then hands what the machine sends to the control writer and
//! acts on its events. It sleeps on those channels until the machine's next deadline; it decides
//! nothing about timing itself, and never blocks on a socket. Also here: the data-stream and
//! control-writer threads, and the best explanation of a failure.

use super::offers::{on_want, spawn_walker, Walked, WALK_AHEAD};
use super::reader::{spawn_control_reader, Input};
use super::stall::{Watched, Writes};
use super::stream::{file_start, stream_loop};
use super::*;
use crate::walk::SrcFile;
use crossbeam_channel::{never, select, Receiver as Chan};
use linerate_net::conn::{Secured, SendHalf};
use linerate_proto::copy::sender::{Event, Sender, SenderConfig, WRITE_STALL};
use linerate_proto::copy::SenderTimeouts;
use linerate_proto::frame::{HardLink, FLAG_DRY_RUN, LINK_NAME, LINK_TARGET, NOTE_WOULD_DELETE};
use linerate_proto::record::HEADER_LEN;
use std::net::TcpStream;
use std::thread::JoinHandle;

/// Start the control writer: it sends the machine's records in order, telling the driver when
/// each write begins and ends, until the driver drops its side.
fn spawn_control_writer(
    tx: SendHalf,
    records: crossbeam_channel::Receiver<Vec<u8>>,
    to: crossbeam_channel::Sender<Input>,
    writes: Arc<Writes>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut w = Watched::new(tx, 0, writes);
        let mut buf = Vec::new();
        for rec in records {
            buf.clear();
            buf.resize(HEADER_LEN, 0);
            buf.extend_from_slice(&rec);
            if let Err(e) = w.send_buf(&mut buf) {
                let _ = to.send(Input::ControlFailed(e));
                return;
            }
        }
    })
}

/// The state every thread of the session shares: the queue and totals.
pub(super) fn shared_state(o: &SendOpts, progress: Arc<Progress>, on_error: ErrorSink) -> Arc<Ctx> {
    Arc::new(Ctx {
        queue: Queue::new(4096),
        chunk: o.chunk,
        verify: o.has(linerate_proto::frame::FLAG_VERIFY),
        sync: o.has(linerate_proto::frame::FLAG_SYNC),
        sparse: o.has(linerate_proto::frame::FLAG_SPARSE),
        keepalive: o.keepalive,
        totals: Totals::default(),
        progress,
        on_error,
        pace: o.pace.clone(),
        peer: o.peer,
        owners: owners::Owners::new(o.flags),
        kinds: if o.has(linerate_proto::frame::FLAG_DEVICES) {
            o.kinds
        } else {
            SpecialKinds { devices: false, specials: false }
        },
    })
}

/// Start one thread per data stream; a stream that fails aborts the queue. Each reports its end.
fn spawn_streams(
    data: Vec<Secured>,
    ctx: &Arc<Ctx>,
    to: &crossbeam_channel::Sender<Input>,
    writes: &Arc<Writes>,
) -> Vec<JoinHandle<()>> {
    data.into_iter()
        .zip(1u16..)
        .map(|(s, stream)| {
            let (ctx, to) = (ctx.clone(), to.clone());
            let mut tx = Watched::new(s.tx, stream, writes.clone());
            std::thread::spawn(move || {
                let r = stream_loop(&ctx, &mut tx);
                if r.is_err() {
                    ctx.queue.abort();
                }
                let _ = to.send(Input::StreamEnded(r));
            })
        })
        .collect()
}

/// How a session's drive ended.
struct Ended {
    /// The first data stream's error.
    stream_err: Option<EngineError>,
    /// The receiver answered no offer for the stall timeout.
    stalled: bool,
    /// A write made no progress for the stall timeout.
    write_stalled: bool,
    /// What the receiver (or the control stream) said last: its summary, or why it ended.
    peer: Option<Result<Summary, EngineError>>,
    /// `Finish` went out with these totals, at this time.
    fin: Option<(Finish, Instant)>,
    /// When the summary came.
    summary_at: Option<Instant>,
}

/// Everything the driver owns.
struct Driver<'a> {
    m: Sender,
    ctx: &'a Ctx,
    /// To the control writer.
    records: crossbeam_channel::Sender<Vec<u8>>,
    data_socks: Vec<TcpStream>,
    ctl_sock: Option<TcpStream>,
    /// Offered files by id, to queue when their `Want` comes.
    files: HashMap<u64, SrcFile>,
    /// Ids named on the control stream so far.
    named: owners::Named,
    dry: bool,
    list: Option<ListSink>,
    ended: Ended,
    streams_left: usize,
    walking: bool,
    settled: bool,
    cancelled: bool,
    /// The writes in progress, which the stream threads mark.
    writes: Arc<Writes>,
    /// The longest the driver sleeps without looking at [`Driver::writes`]: a quarter of the stall
    /// timeout, so a write that began meanwhile is known to the machine well before its deadline,
    /// which then wakes the driver exactly.
    look: Duration,
}

impl Driver<'_> {
    /// Hand everything the machine has queued to the control writer (in order).
    fn transmit(&mut self) {
        while let Some(rec) = self.m.poll_transmit(Instant::now()) {
            let _ = self.records.send(rec);
        }
    }

    /// Close every socket: threads blocked in a write or a read end.
    fn shut_all(&self) {
        for s in self.data_socks.iter().chain(self.ctl_sock.as_ref()) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// The control stream failed or the receiver ended the session: stop every thread.
    fn fail_peer(&mut self, e: EngineError) {
        self.ended.peer.get_or_insert(Err(e));
        self.ctx.queue.abort();
        for s in &self.data_socks {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    fn events(&mut self) {
        while let Some(ev) = self.m.poll_event() {
            match ev {
                Event::Want { file, verdict, held } => {
                    if let Some(f) = self.files.remove(&file) {
                        on_want(self.ctx, f, verdict, held, self.dry, &self.list);
                    }
                }
                Event::Settled => {
                    self.settled = true;
                    self.ctx.queue.walker_done();
                    self.ctx.progress.walk_done.store(1, Relaxed);
                }
                Event::Error { code, path, message } => (self.ctx.on_error)(format!(
                    "{}: {}: {} ({})",
                    self.ctx.peer,
                    name::escape(&path),
                    name::escape(&message),
                    ErrorCode::from_u16(code).describe()
                )),
                Event::Note { kind, path } => {
                    self.ctx.totals.tally.deleted.fetch_add(1, Relaxed);
                    let what = if kind == NOTE_WOULD_DELETE { "would delete" } else { "deleted" };
                    ListSink::say(&self.list, &format!("{what} {}", name::escape(&path)));
                }
                Event::Summary(s) => {
                    if self.ended.peer.is_none() {
                        self.ended.summary_at = Some(Instant::now());
                    }
                    self.ended.peer.get_or_insert(Ok(s));
                }
                Event::Fatal { code, message } => self.fail_peer(remote(code, &message)),
            }
        }
    }

    fn input(&mut self, input: Input) {
        let now = Instant::now();
        match input {
            Input::Record(plain) => {
                if let Err(e) = self.m.handle_record(&plain, now) {
                    self.fail_peer(e.into());
                }
            }
            Input::ReaderEnded(e) => self.fail_peer(e),
            Input::StreamEnded(r) => {
                self.streams_left -= 1;
                if let Err(e) = r {
                    self.ended.stream_err.get_or_insert(e);
                }
            }
            Input::Cancel => {
                self.cancelled = true;
                let code = ErrorCode::Interrupted as u16;
                self.m.abort(code, crate::cancel::INTERRUPTED.as_bytes());
            }
            Input::ControlFailed(e) => self.fail_peer(e),
        }
    }

    fn walked(&mut self, w: Walked) {
        let now = Instant::now();
        match w {
            Walked::Offer(f, digest) => {
                if f.link_target {
                    let _ = self.m.hard_link(HardLink { kind: LINK_TARGET, file: f.id, parent: 0, name: b"" }, now);
                }
                let m = &mut self.m;
                self.ctx.owners.name(f.owner, &mut self.named, |n| {
                    if let Frame::IdName(n) = n {
                        m.name_id(n, now);
                    }
                });
                let start = file_start(self.ctx, &f);
                if self.m.offer(start, digest, now).is_ok() {
                    self.files.insert(f.id, f);
                }
            }
            Walked::Keep(dir, names) => self.m.keep(dir, &names, now),
            Walked::HardLink(parent, name, file) => {
                // Not counted in the totals: see the receiver (`recv/links.rs`).
                let _ = self.m.hard_link(HardLink { kind: LINK_NAME, file, parent, name: &name }, now);
            }
            Walked::Done => {
                self.walking = false;
                self.m.walk_done();
            }
        }
    }

    /// Whether nothing more can happen: every stream ended, and the summary came or the peer
    /// (or the control stream) said why the session ended.
    fn over(&self) -> bool {
        self.streams_left == 0 && self.ended.peer.is_some()
    }

    fn failed(&self) -> bool {
        self.ended.stream_err.is_some()
            || self.ended.stalled
            || self.ended.write_stalled
            || self.ctx.queue.is_aborted()
            || self.cancelled
    }
}

/// Drive the session until it is over: the machine decides, this loop sends, delivers and
/// waits for the next input or the machine's deadline.
fn drive(d: &mut Driver<'_>, inputs: &Chan<Input>, walked: &Chan<Walked>) {
    // After a failure the peer's own explanation is worth waiting for, briefly.
    let mut explain_by: Option<Instant> = None;
    loop {
        d.transmit();
        d.events();
        d.transmit();
        if d.streams_left == 0 && d.ended.fin.is_none() && d.settled && !d.failed() && d.ended.peer.is_none() {
            // Every stream ended: from here the summary is due, and may claim no more than these
            // totals.
            let fin = d.ctx.totals.tally.finish();
            if d.m.finish(fin, Instant::now()).is_ok() {
                d.ended.fin = Some((fin, Instant::now()));
            }
            d.transmit();
        }
        if d.over() {
            return;
        }
        if d.streams_left == 0 && d.failed() {
            let by = *explain_by.get_or_insert_with(|| Instant::now() + Duration::from_secs(5));
            if Instant::now() >= by || d.cancelled {
                return;
            }
        }
        d.writes.report(&mut d.m);
        let look = Instant::now() + d.look;
        let deadline = [d.m.poll_timeout(), explain_by, Some(look)].into_iter().flatten().min();
        let timer = deadline.map_or_else(never, crossbeam_channel::at);
        let walk = if d.walking && d.m.can_offer() && !d.failed() { walked.clone() } else { never() };
        select! {
            recv(inputs) -> i => match i {
                Ok(i) => {
                    d.input(i);
                    // Take what else is there before deciding (writes are reported fast), each
                    // with its events: a summary must count before the close that follows it.
                    while let Ok(i) = inputs.try_recv() {
                        d.events();
                        d.input(i);
                    }
                }
                Err(_) => return,
            },
            recv(walk) -> w => match w {
                Ok(w) => d.walked(w),
                // The walker ended without saying so (it panicked).
                Err(_) => d.walked(Walked::Done),
            },
            recv(timer) -> _ => {
                d.writes.report(&mut d.m);
                if let Err(e) = d.m.handle_timeout(Instant::now()) {
                    if e.what == WRITE_STALL {
                        // A write is stuck: close everything, so that every thread ends.
                        d.ended.write_stalled = true;
                        d.ctx.queue.abort();
                        d.shut_all();
                    } else if d.ended.fin.is_some() {
                        d.fail_peer(EngineError::Timeout(e.to_string()));
                    } else {
                        d.ended.stalled = true;
                        d.ctx.queue.abort();
                    }
                }
            }
        }
    }
}

/// Why the session failed, if it did: a stream's error, else the receiver's stall on offers,
/// else the control reader's abort.
fn session_error(e: &mut Ended, ctx: &Ctx, o: &SendOpts) -> Option<EngineError> {
    if e.write_stalled {
        return Some(EngineError::Timeout(format!(
            "no progress sending to the {} for {} s (link down, or the {} stalled)",
            o.peer,
            o.stall_timeout.as_secs_f64(),
            o.peer
        )));
    }
    let mut first_err = e.stream_err.take();
    if e.stalled {
        first_err.get_or_insert(EngineError::Timeout(format!(
            "the receiver answered no offer for {} s (link down, or the receiver stalled)",
            o.stall_timeout.as_secs_f64()
        )));
    }
    if first_err.is_none() && ctx.queue.is_aborted() && e.fin.is_none() {
        // The control stream ended the session (a fatal error, a broken protocol).
        first_err = Some(EngineError::Aborted {
            code: ErrorCode::Protocol,
            message: "the session was aborted (the control stream ended it)".into(),
        });
    }
    first_err
}

/// The error to show for failure `e`: the peer's own explanation (`peer`) if it sent one, else a
/// clear word on a stall or a closed connection, else `e`.
fn explain(e: EngineError, peer: Option<Result<Summary, EngineError>>, o: &SendOpts) -> EngineError {
    match (peer, e) {
        (Some(Err(why @ (EngineError::Remote { .. } | EngineError::Proto(_)))), _) => why,
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
        (Some(Err(why)), EngineError::Aborted { .. }) => why,
        (_, e) => e,
    }
}

/// The sending side once connected: the threads started, the session driven to its end, the
/// threads joined; the summary, or the best explanation of a failure. `cancel` is the user's
/// Ctrl-C stop.
pub(super) fn send_session(
    control: Secured,
    data: Vec<Secured>,
    roots: Vec<Root>,
    o: &SendOpts,
    ctx: Arc<Ctx>,
    cancel: linerate_model::shutdown::Shutdown,
) -> Result<Sent, EngineError> {
    let (in_tx, in_rx) = crossbeam_channel::unbounded::<Input>();
    let (walk_tx, walk_rx) = crossbeam_channel::bounded::<Walked>(WALK_AHEAD);
    let data_socks: Vec<TcpStream> = data.iter().filter_map(|s| s.rx.socket()).collect();
    let ctl_sock = control.rx.socket();
    let streams_left = data.len();
    let reader = spawn_control_reader(control.rx, in_tx.clone());
    let (records, to_write) = crossbeam_channel::unbounded::<Vec<u8>>();
    let writes = Arc::new(Writes::new(data.len()));
    let writer = spawn_control_writer(control.tx, to_write, in_tx.clone(), writes.clone());
    // Ctrl-C: tell the receiver, which ends the session and closes every stream, so every
    // thread here ends on its own.
    let watch = {
        let to = in_tx.clone();
        crate::cancel::Watch::new(cancel.clone(), move || {
            let _ = to.send(Input::Cancel);
        })
    };
    let walker = spawn_walker(roots, &ctx, walk_tx, o);
    let workers = spawn_streams(data, &ctx, &in_tx, &writes);
    drop(in_tx);
    let cfg = SenderConfig {
        flags: o.flags,
        chunk_size: o.chunk as u32,
        timeouts: SenderTimeouts { stall: o.stall_timeout, summary: o.summary_wait },
        keepalive: o.keepalive,
    };
    let mut d = Driver {
        m: Sender::new(cfg, Instant::now()),
        ctx: &ctx,
        records,
        data_socks,
        ctl_sock: ctl_sock.as_ref().and_then(|s| s.try_clone().ok()),
        files: HashMap::new(),
        named: owners::Named::new(),
        dry: o.has(FLAG_DRY_RUN),
        list: o.list.clone(),
        ended: Ended {
            stream_err: None,
            stalled: false,
            write_stalled: false,
            peer: None,
            fin: None,
            summary_at: None,
        },
        streams_left,
        walking: true,
        settled: false,
        cancelled: false,
        writes,
        look: (o.stall_timeout / 4).max(Duration::from_millis(1)),
    };
    drive(&mut d, &in_rx, &walk_rx);
    drop(watch);
    // Every thread ends now: the queue is finished or aborted, the walker's channel is gone, and
    // the control socket closes under the reader and the writer (everything that mattered was
    // sent: the summary came, or the session failed).
    ctx.queue.abort();
    drop(walk_rx);
    drop(d.records);
    if let Some(s) = ctl_sock {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    let _ = writer.join();
    for w in workers {
        let _ = w.join();
    }
    let _ = walker.join();
    let _ = reader.join();
    let mut ended = d.ended;
    if d.cancelled || cancel.is_stopped() {
        return Err(EngineError::Interrupted);
    }
    if let Some(e) = session_error(&mut ended, &ctx, o) {
        return Err(explain(e, ended.peer, o));
    }
    match (ended.fin, ended.peer) {
        // the summary's time was taken when it came, which made `peer` Some(Ok)
        (Some((fin, at)), Some(Ok(summary))) => {
            Ok(ctx.totals.sent(fin, summary, at, ended.summary_at.unwrap_or_else(Instant::now)))
        }
        (_, Some(Err(e))) => Err(e),
        _ => Err(EngineError::Internal("the session ended without a summary".into())),
    }
}
