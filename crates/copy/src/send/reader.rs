//! The sending side's control reader: it only moves bytes, handing every record the receiver
//! sends on the control stream to the session's driver, and how the stream ended.

use super::*;
use crossbeam_channel::Sender as Chan;
use linerate_net::conn::RecvHalf;
use std::thread::JoinHandle;

/// What the driver is woken with.
pub(super) enum Input {
    /// A record from the receiver's control stream (its plaintext).
    Record(Vec<u8>),
    /// The control stream ended (EOF) or broke.
    ReaderEnded(EngineError),
    /// A data stream's thread ended.
    StreamEnded(StreamEnd),
    /// The user asked to stop (Ctrl-C).
    Cancel,
    /// Writing to the control stream failed.
    ControlFailed(EngineError),
}

/// A stream's result when its thread ends.
pub(super) type StreamEnd = Result<(), EngineError>;

/// Start the control reader; it stops at the end of the stream or once the driver is gone.
pub(super) fn spawn_control_reader(mut crx: RecvHalf, to: Chan<Input>) -> JoinHandle<()> {
    std::thread::spawn(move || loop {
        let input = match crx.recv() {
            Ok(Some(p)) => Input::Record(p.to_vec()),
            Ok(None) => {
                Input::ReaderEnded(EngineError::net("reading from the peer", std::io::ErrorKind::UnexpectedEof.into()))
            }
            Err(e) => Input::ReaderEnded(e),
        };
        let last = matches!(input, Input::ReaderEnded(_));
        if to.send(input).is_err() || last {
            return;
        }
    })
}
