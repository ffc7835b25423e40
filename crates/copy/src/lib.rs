//! Copying trees: `cp`'s sending side, the receiving side a server or a pull runs, and what
//! they share. Connections, keys and pacing come from `linerate-net`; the protocol's rules from
//! `linerate-proto`.
//!
//! | module | what |
//! |---|---|
//! | [`send`] | the sending side: walk, queue, streams, offers; a copy's configuration and report |
//! | [`recv`] | the receiving side: checked by the protocol's tracker, written beneath the destination by directory handle |
//! | [`pull`] | a pull's client: asks for a tree and receives it through [`recv`] |
//! | [`run`] | running a copy as a command shows it: the local receiver, an observer of its progress, its failures as the user is told them, its summary |
//! | [`ssh`] | `cp --via-ssh`: the copy's streams through channels of an ssh connection (the start-up and its announce line are `linerate-remote`'s) |
//! | [`options`] | the rules of `cp`'s options: the settings before the flags, what `-a` keeps, the ranges of `-P`, `--chunk-size`, `--modify-window` |
//! | [`dest`] | a copy's operands: the destination's form, a local destination's root, every source there, no directory into itself |
//! | [`walk`] | the source walk: depth-first, no symlink followed, each directory before its contents |
//! | [`filter`] | rsync's include/exclude rules |
//! | [`queue`] | the sender's one work queue, large files as runs of chunks every stream claims from |
//! | [`fill`] | reading a file onto the end of a record buffer |
//! | [`digest`] | a file's BLAKE3 from chunks hashed apart |
//! | [`ids`] | user and group names for `-o`/`-g` |
//! | [`confined`] | file-system operations confined beneath a directory handle: no name or symlink steers a write out |
//! | [`workdir`] | the receiver's working directory beside the destination: partial files and their journals |
//! | [`journal`] | resume journals: the chunks of a partial file known written |
//! | [`mounts`] | the file system a destination is on, named when it is full or read-only |
//! | [`cancel`] | ending a copy on Ctrl-C, the peer told |
//! | `tally` | the counters both ends keep (files, bytes, failures, skips) |
//! | [`clean`] | `linerate clean`: listing and removing what interrupted copies left |
//! | [`diff`], [`sample`] | comparing two trees, and deterministic sample trees (`linerate demo`, `mktree`, the tests) |

pub mod cancel;
pub mod clean;
pub mod confined;
pub mod dest;
pub mod diff;
pub mod digest;
pub mod fill;
pub mod filter;
pub mod ids;
pub mod journal;
pub mod mounts;
pub mod options;
pub mod pull;
pub mod queue;
pub mod recv;
pub mod run;
pub mod sample;
pub mod send;
pub mod ssh;
mod tally;
pub mod walk;
pub mod workdir;
