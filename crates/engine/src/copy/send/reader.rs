//! The sending side's control reader: the receiver's wants, notes and per-entry errors as they
//! come on the control stream, then its summary or a fatal error, which ends the session.

use super::*;
use crate::net::conn::{RecvHalf, Secured};
use linerate_proto::copy::SenderEvent;
use linerate_proto::frame::{FLAG_DRY_RUN, NOTE_WOULD_DELETE};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// What the control reader ends with: the receiver's summary, or why the session failed.
pub(super) type Outcome = Result<Summary, EngineError>;

/// Start the control reader, whose outcome comes on the returned channel; an error also aborts
/// the queue and shuts the data sockets.
pub(super) fn spawn_control_reader(
    mut crx: RecvHalf,
    data: &[Secured],
    ctx: &Arc<Ctx>,
    offers: &Arc<Offers>,
    o: &SendOpts,
) -> (JoinHandle<()>, mpsc::Receiver<Outcome>) {
    let (done_tx, done_rx) = mpsc::channel::<Outcome>();
    let data_socks: Vec<TcpStream> = data.iter().filter_map(|s| s.rx.socket()).collect();
    let (ctx, offers, list) = (ctx.clone(), offers.clone(), o.list.clone());
    let dry = o.has(FLAG_DRY_RUN);
    let reader = std::thread::spawn(move || {
        let result = read_control(&mut crx, &ctx, &offers, dry, &list);
        if result.is_err() {
            ctx.queue.abort();
            offers.changed.notify_all();
            for s in &data_socks {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        let _ = done_tx.send(result);
    });
    (reader, done_rx)
}

/// Read control records until one ends the session (or the stream ends or breaks).
fn read_control(crx: &mut RecvHalf, ctx: &Ctx, offers: &Offers, dry: bool, list: &Option<ListSink>) -> Outcome {
    loop {
        let plain = match crx.recv() {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(EngineError::net("reading from the peer", std::io::ErrorKind::UnexpectedEof.into()))
            }
            Err(e) => return Err(e),
        };
        if let Some(end) = read_record(plain, ctx, offers, dry, list) {
            return end;
        }
    }
}

/// Handle one record's frames in order; the outcome if one of them ends the session.
fn read_record(plain: &[u8], ctx: &Ctx, offers: &Offers, dry: bool, list: &Option<ListSink>) -> Option<Outcome> {
    for f in frame::frames(plain) {
        let f = match f {
            Ok(f) => f,
            Err(e) => return Some(Err(e.into())),
        };
        // The protocol's rules decide what this frame may be (crates/proto `copy`).
        let mut st = offers.lock();
        match st.ctl.handle_frame(f, Instant::now()) {
            Err(e) => return Some(Err(e.into())),
            Ok(SenderEvent::Want { file, verdict, held }) => on_want(ctx, offers, st, file, verdict, held, dry, list),
            Ok(event) => {
                drop(st);
                if let Some(end) = on_event(ctx, event, list) {
                    return Some(end);
                }
            }
        }
    }
    None
}

/// Any event but `Want` (handled under the offers' lock): report a remote error, list a
/// deletion, or end the session with the summary or the receiver's fatal error.
fn on_event(ctx: &Ctx, event: SenderEvent<'_>, list: &Option<ListSink>) -> Option<Outcome> {
    match event {
        SenderEvent::Error(e) => (ctx.on_error)(format!(
            "{}: {}: {} ({})",
            ctx.peer,
            name::escape(e.path),
            name::escape(e.message),
            ErrorCode::from_u16(e.code).describe()
        )),
        SenderEvent::Note(n) => {
            ctx.totals.deleted.fetch_add(1, Relaxed);
            let what = if n.kind == NOTE_WOULD_DELETE { "would delete" } else { "deleted" };
            ListSink::say(list, &format!("{what} {}", name::escape(n.path)));
        }
        SenderEvent::Summary(s) => return Some(Ok(s)),
        SenderEvent::Fatal(f) => return Some(Err(remote(f.code, f.message))),
        SenderEvent::Want { .. } => {}
    }
    None
}
