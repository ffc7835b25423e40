//! The receiving side of a pull of `tree` on whatever a server sends: the input is a stream of
//! frames, decoded with `frame::frames` and handed to `Tracker::for_pull(65536, b"tree")` as the
//! engine's receiver does (see `src/pull_receiver.rs`). Checked against the tracker model, and:
//! nothing is ever accepted outside the requested tree, at most one entry lands in the target,
//! no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_fuzz::pull_receiver::Receiver;

fuzz_target!(|data: &[u8]| {
    Receiver::run(data);
});
