//! Copying trees: the sending side ([`send`]: walk, queue, streams, offers), the receiving side
//! ([`recv`]: checked by the protocol's tracker, written beneath the destination by directory
//! handle), a pull's client ([`pull`]), and what they share — the walk ([`walk`]), confined
//! filesystem operations ([`confined`]), reading into record buffers ([`fill`]), resume journals ([`journal`]) in the receiver's working directory ([`workdir`]), chunked BLAKE3 ([`digest`]),
//! the file system a destination is on ([`mounts`]), rsync's include/exclude rules ([`filter`]),
//! the work queue ([`queue`]), the counters both ends keep (`tally`) — plus tree comparison ([`diff`]), sample trees ([`sample`]) and the cleaning of
//! partial files interrupted copies left ([`clean`]); and [`ssh`], starting a copy's remote side
//! through ssh.

pub mod cancel;
pub mod clean;
pub mod confined;
pub mod diff;
pub mod digest;
pub mod fill;
pub mod filter;
pub mod ids;
pub mod journal;
pub mod mounts;
pub mod pull;
pub mod queue;
pub mod recv;
pub mod sample;
pub mod send;
pub mod ssh;
mod tally;
pub mod walk;
pub mod workdir;
