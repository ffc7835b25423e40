//! The far side of `linerate cp [user@]host:PATH`, started through the system `ssh` (issue 5,
//! issue 32): what runs there, how it is found or sent, and how it announces itself.
//!
//! - [`bootstrap`]: the start-up dialogue with the remote as a machine without I/O — probe,
//!   decide (a cached or installed linerate, an upload, or a refusal), upload (SHA-256 checked
//!   there), announce — fed bytes and time, answering with actions, a deadline and typed errors;
//! - [`announce`]: the `LINERATE <version> PORT <port> SECRET <key> ...` line the remote server
//!   prints, and its one-time key (a `linerate_net` `Secret`);
//! - [`probe`]: the boot script's report of the remote and the decision on it;
//! - [`script`]: the boot and cache scripts, and the remote command lines;
//! - [`cache`]: `linerate cache`: the cache script run here or through ssh, its report read;
//! - [`exe`]: this executable as an upload (size, build id, glibc needs, SHA-256);
//! - [`target`]: the `[user@]host:PATH` operands and which way the copy goes;
//! - `route` (feature `session`): which way any copy goes from `cp`'s operands (local, a
//!   running server, ssh), checked and set into its configuration;
//! - [`spawn`]: the process adapter: spawns ssh (`-e`, `--via-ssh`), drives [`bootstrap`] with
//!   its pipes and the clock, and keeps the session until the copy ends;
//! - `copy` (feature `session`, on by default): the copy over ssh once the far side has started,
//!   run through `linerate-copy`;
//! - `serve` (feature `session`): the far side's own start (`serve --once --ssh`): a key, a
//!   listener, the announce line to print.
//!
//! The start-up knows nothing of the copy: it gives an address (or a command to forward through)
//! and a key, and `copy` runs the session with them; the fuzz targets build it without `session`.
//! The wire and line formats are specified in `docs/PROTOCOL.md` ("Starting a session over ssh",
//! "The boot script").
#![forbid(unsafe_code)]

pub mod announce;
pub mod bootstrap;
pub mod cache;
#[cfg(feature = "session")]
pub mod copy;
pub mod exe;
pub mod probe;
#[cfg(feature = "session")]
pub mod route;
pub mod script;
#[cfg(feature = "session")]
pub mod serve;
pub mod spawn;
pub mod target;

pub use announce::{Announce, AnnounceError};
pub use bootstrap::{Action, BootConfig, BootError, Bootstrap, Mode, Offer, Started};
