//! Copying trees: the sending side ([`send`]: walk, queue, streams, offers), the receiving side
//! ([`recv`]: checked by the protocol's tracker, written beneath the destination by directory
//! handle), a pull's client ([`pull`]), and what they share — the walk ([`walk`]), confined
//! filesystem operations ([`fsx`]), reading into record buffers ([`fill`]), resume journals ([`journal`]), chunked BLAKE3 ([`digest`]),
//! the work queue ([`sched`]), rsync's include/exclude rules ([`filter`]) — plus tree comparison ([`diff`]) and sample trees ([`sample`]).

pub mod cancel;
pub mod diff;
pub mod digest;
pub mod fill;
pub mod filter;
pub mod fsx;
pub mod journal;
pub mod pull;
pub mod recv;
pub mod sample;
pub mod sched;
pub mod send;
pub mod walk;
