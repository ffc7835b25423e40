//! `linerate cp` and `linerate serve`: flags, destination parsing, the local server process for
//! local destinations, and the final report.

use crate::error::{Error, Kind, Result as Done};
use crate::plan::{CopyPlan, Route};
use crate::progress::Show;
use crate::transfer::{save_cp_run, summary_json};
use clap::Args;
use linerate_copy::options::{self, parse_chunk_size, parse_modify_window, parse_streams, settings, MetaFlags};
use linerate_copy::run::summary::{self, summary_line};
use linerate_copy::send;
use linerate_model::units::{parse_duration, RateUnit};
use linerate_net::conn;
use linerate_proto::hello::Suite;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const CP_AFTER_HELP: &str = "\
DESTINATION:
  [user@]HOST:PATH over ssh: cp runs `linerate serve --once --ssh` on HOST through the
                   system ssh (~/.ssh/config, agent, ProxyJump and keys apply; -e to
                   replace ssh), which announces a port and a one-time key; the streams
                   then connect to HOST directly (--via-ssh: through the ssh connection).
                   PATH is relative to the remote home unless absolute, as for scp, and
                   never passes through a remote shell. IPv6: [user@][ADDR]:PATH.
                   Nothing to install there: without a linerate of this protocol
                   version on HOST, cp uploads itself once into the remote user's
                   ~/.cache/linerate/ (checked by SHA-256 before it runs) and reuses it;
                   --no-upload or LINERATE_NO_UPLOAD=1 refuses, `linerate cache clean
                   HOST` removes it.
  HOST:PORT:PATH   a running `linerate serve`; PATH is relative to its --root.
                   IPv6: [ADDR]:PORT:PATH. Needs --key-file with the server's shared
                   key, or for a daemon with --authorized-keys an ed25519 identity
                   (--identity FILE, default ~/.config/linerate/id_ed25519 from
                   `linerate keygen --type ed25519`); the server's host key is added to
                   ~/.config/linerate/known_hosts on first contact and checked after.
  PATH             a local path: cp starts its own server process on loopback and hands
                   it a fresh one-time key through a pipe. Prefix a local path that
                   contains ':' with ./

  An operand with a ':' before any '/' is remote: a numeric PORT between two colons (and
  no user@) means a running daemon, anything else ssh.

  Pull: `linerate cp HOST:PORT:PATH LOCAL` copies PATH from a running server;
  `linerate cp [user@]HOST:PATH LOCAL` copies it over ssh.

  Kept always: modes, mtimes, symlinks (never followed). -a (rsync's -rlptgoD) adds
  groups, owners when run as root (by name; --numeric-ids), devices, FIFOs and sockets;
  a daemon allows owners and devices only with serve --keep-owners/--allow-devices.
  Without -D, devices, FIFOs and sockets are skipped with one note (exit 0). -X/-A
  (xattrs, ACLs) are accepted and not kept.

  Files already at the destination with the same size and mtime are skipped
  (--checksum: same BLAKE3); an interrupted large file resumes from the chunks
  already received when the same command runs again (they wait in a hidden
  .linerate-work-* directory at the destination, which a completed copy removes
  along with the chunks of files whose source is gone; `linerate clean DEST`
  lists and removes what is left). No name is reserved.

  WHERE IT LANDS (rsync's rule: the same command run again lands in the same place):
    cp dir DEST      DEST/dir (DEST is created if absent)
    cp dir/ DEST     DEST holds what dir holds (a trailing '/' means the contents)
    cp a b DEST      DEST/a and DEST/b
    cp file DEST     DEST/file if DEST is a directory or ends in '/', else the file DEST
  A pull places the remote source by the same rule.

FILTER RULES (--exclude, --include, --exclude-from, --include-from: rsync's rules):
  Rules are checked in the order given and the first match wins; a name no rule
  matches is copied. An excluded directory is not entered at all.
    *.o            no '/': the last name, at any depth
    /dir/build     a leading '/': anchored at the transfer root; for `cp dir DEST` paths
                   begin with dir's own name (/dir/build), for `cp dir/ DEST` below it (/build)
    cache/         a trailing '/': directories only
    doc/*.tmp      a '/' inside: the end of the path below the top of the copied tree
    *  ?  [a-z]    stop at '/';   **  crosses '/';   dir/***  dir and all it holds
  --include 'keep.o' --exclude '*.o' copies keep.o and no other .o file. With
  --delete, names excluded are not deleted at the destination (--delete-excluded:
  they are). Example: --exclude node_modules/ --exclude '*.o' --exclude-from .cpignore

EXIT STATUS:
  0  everything was copied
  1  the session completed but some entries failed, each reported once on stderr: a
     directory that cannot be created is one error and nothing beneath it is copied (as
     rsync); a tree nested deeper than 1024 levels is copied but for the part below that.
     Saved in the run store as incomplete, without a rate
  2  bad usage or configuration (flags, key file, a destination refused before anything
     is sent: a file where a directory must be, as in `cp dir/ file`)
  3  the session failed: connection, authentication, protocol or a fatal server error;
     over ssh, the remote side not started: ssh failed, or the remote printed nothing
     within --ssh-timeout or did not announce itself within --ssh-start-timeout;
     also the destination's file system full (ENOSPC), over quota (EDQUOT) or read-only
     (EROFS): the copy stops at the first such write with one message naming the file
     system and what was written. Not saved in the run store
  130  interrupted (Ctrl-C, SIGTERM): what arrived is kept; run the same command to resume
  141  standard output or error closed early (| head): the copy stops as for Ctrl-C,
       quietly (128 + SIGPIPE, as a shell shows for a program killed by a closed pipe)

  A dry run (-n) changes nothing at the destination, not even a directory to copy into.";

/// `linerate cp` flags.
#[derive(Args, Debug)]
// `-h` is rsync's `--human-readable` here (`cp -avh src/ dst/` is rsync's everyday line), so
// clap's `-h` for help is off and help is `--help` alone (issue 42: `-avh` printed the help and
// exited 0 having copied nothing).
#[command(after_help = CP_AFTER_HELP, override_usage = "linerate cp [OPTIONS] SRC... DEST", disable_help_flag = true)]
pub struct CpArgs {
    /// Sources (SRC...), then the destination (DEST).
    #[arg(required = true, num_args = 2.., value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Parallel TCP streams [default: the number of CPU cores, 2 to 8; more, up to 16, on a path
    /// with a round trip of 2 ms or more: enough for 2.5 Gbit/s with the kernel's TCP window].
    #[arg(long, short = 'P', value_name = "N", value_parser = parse_streams)]
    streams: Option<u16>,
    /// Accepted and ignored, for scp and cp habits: cp always copies whole trees.
    #[arg(short = 'r', hide = true)]
    recursive: bool,
    /// Archive mode, as rsync's -rlptgoD: modes, times and symlinks (always kept), groups (-g),
    /// owners when run as root (-o), devices, FIFOs and sockets (-D). A daemon keeps owners and
    /// creates devices only when its operator allows it (serve --keep-owners, --allow-devices).
    #[arg(short = 'a', long)]
    archive: bool,
    /// Keep owners (rsync -o): applied by a receiver running as root; mapped by user name unless
    /// --numeric-ids.
    #[arg(short = 'o', long)]
    owner: bool,
    /// Keep groups (rsync -g): applied by a receiver running as root, or where its user is a
    /// member of the group; mapped by group name unless --numeric-ids.
    #[arg(short = 'g', long)]
    group: bool,
    /// Owners and groups by number, not by name (rsync --numeric-ids).
    #[arg(long)]
    numeric_ids: bool,
    /// Copy devices, FIFOs and sockets (rsync -D, --devices --specials); devices need a receiver
    /// running as root. Without it they are skipped, with one note.
    #[arg(short = 'D')]
    devices_and_specials: bool,
    /// Copy character and block devices (part of -D).
    #[arg(long)]
    devices: bool,
    /// Copy FIFOs and sockets (part of -D).
    #[arg(long)]
    specials: bool,
    /// Do not keep owners (turns off the -o of -a).
    #[arg(long, visible_alias = "no-o")]
    no_owner: bool,
    /// Do not keep groups (turns off the -g of -a).
    #[arg(long, visible_alias = "no-g")]
    no_group: bool,
    /// Do not copy devices, FIFOs and sockets (turns off the -D of -a).
    #[arg(long = "no-D", visible_alias = "no-devices")]
    no_devices: bool,
    /// Extended attributes (rsync -X): not kept; accepted with a warning.
    #[arg(short = 'X', long)]
    xattrs: bool,
    /// ACLs (rsync -A): not kept; accepted with a warning.
    #[arg(short = 'A', long)]
    acls: bool,
    #[command(flatten)]
    keys: crate::keys::ClientKeyArgs,
    /// Hash every file with BLAKE3 while reading; the receiver checks the written file before
    /// renaming it into place.
    #[arg(long)]
    verify: bool,
    /// fsync every file and directory on the receiver before reporting success.
    #[arg(long)]
    fsync: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    /// Most bit/s over all streams: a rate (500M, 1gbit, 50MB/s, 50MiB/s), at least 100k.
    #[arg(long, value_name = "RATE", value_parser = linerate_net::limit::parse_limit)]
    bwlimit: Option<u64>,
    /// List each file on stderr as it has been sent (names escaped).
    #[arg(long, short)]
    verbose: bool,
    /// Show progress even when stderr is not a terminal: a plain line every second.
    #[arg(long, conflicts_with = "quiet")]
    progress: bool,
    /// Rates in bytes per second (MB/s), progress and summary alike.
    #[arg(long, conflicts_with = "bits")]
    bytes: bool,
    /// Rates in bits per second (Mbit/s, Gbit/s), progress and summary alike: the default, as
    /// iperf3 and `linerate bench` show them.
    #[arg(long)]
    bits: bool,
    /// Accepted for rsync habits (rsync's -h, --human-readable): sizes and rates are always shown
    /// for people (`1.2 GB`, `899 Mbit/s`); --json gives exact numbers.
    #[arg(short = 'h', long, action = clap::ArgAction::Count)]
    human_readable: u8,
    /// Chunk size for large files: a size, a power of two from 64K to 8M (K, M: ×1024).
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_chunk_size)]
    chunk_size: u32,
    /// AEAD: auto picks AES-256-GCM where the CPU accelerates AES, else ChaCha20-Poly1305.
    #[arg(long, value_enum, default_value_t = Cipher::Auto)]
    cipher: Cipher,
    /// Time allowed to connect and authenticate: a duration (15s, 1m); a bare number is
    /// seconds. At least 1 s.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    timeout: Duration,
    /// Time a stream may make no progress sending before the copy fails (a cut link, a stalled
    /// server); over ssh, also the self-upload's bound when ssh takes no byte. A duration (300s,
    /// 5m); a bare number is seconds. At least 1 s.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    stall_timeout: Duration,
    /// Run store to save this run in (a SQLite file or a postgres:// URL) [default: $LINERATE_DB, else the user's data directory].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Do not save this run in the run store.
    #[arg(long)]
    no_save: bool,
    #[command(flatten)]
    ssh: crate::ssh::SshArgs,
    /// A file is up to date when its BLAKE3 matches, not merely its size and modification time
    /// (both sides read every file of the same size).
    #[arg(long, short = 'c')]
    checksum: bool,
    /// Delete entries in the copied directories at the destination that the source does not have
    /// (never anything outside them).
    #[arg(long)]
    delete: bool,
    /// Change nothing: list what would be sent (and deleted), on standard output.
    #[arg(long, short = 'n')]
    dry_run: bool,
    #[command(flatten)]
    filter: crate::filter::FilterArgs,
    /// Keep hard links (as rsync -H): a file with several names in the copied tree is sent once
    /// and its other names are linked to it at the destination. Without -H each name arrives as
    /// a file of its own.
    #[arg(long, short = 'H')]
    hard_links: bool,
    /// Keep sparse files sparse (as rsync -S): holes found with SEEK_DATA/SEEK_HOLE are not
    /// sent, and holes and blocks of zeros are left unwritten at the destination. Without -S
    /// files arrive dense.
    #[arg(long, short = 'S')]
    sparse: bool,
    /// Modification times within N seconds count as equal when deciding whether a file is up to
    /// date (as rsync's --modify-window; 0, the default, compares to the nanosecond; 1 or 2 for
    /// FAT or SMB destinations, 3601 across a daylight-saving shift). At most 31622400.
    #[arg(long, value_name = "N", default_value_t = 0, allow_negative_numbers = true, value_parser = parse_modify_window)]
    modify_window: u32,
    /// Print help (`-h` is --human-readable, as in rsync).
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
}

/// `--cipher`: the AEAD of the handshake and records.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Cipher {
    // AES-256-GCM where the CPU accelerates AES, else ChaCha20-Poly1305.
    Auto,
    // AES-256-GCM.
    #[value(name = "aes-256-gcm")]
    Aes256Gcm,
    // ChaCha20-Poly1305.
    #[value(name = "chacha20-poly1305")]
    ChaCha20Poly1305,
}

impl Cipher {
    /// The suite it names; `auto` asks the CPU.
    fn suite(self) -> Suite {
        match self {
            Cipher::Auto => conn::preferred_suite(),
            Cipher::Aes256Gcm => Suite::Aes256Gcm,
            Cipher::ChaCha20Poly1305 => Suite::ChaCha20Poly1305,
        }
    }
}

/// Resolve `linerate cp`'s arguments into one plan: the session's settings from the flags, and
/// the route its operands name, checked.
fn plan(a: &CpArgs, sources: Vec<PathBuf>, dest: &std::path::Path) -> Done<CopyPlan> {
    let filter = a.filter.filter().map_err(|e| Error::new(Kind::Usage, e))?;
    let mut c = settings();
    match a.streams {
        Some(s) => c.streams = s,
        // The default may grow with the path's round trip (docs/USER_GUIDE.md, `-P`).
        None => c.auto_streams = true,
    }
    c.chunk_size = a.chunk_size;
    c.verify = a.verify;
    c.fsync = a.fsync;
    c.suite = a.cipher.suite();
    c.timeout = a.timeout.max(Duration::from_secs(1));
    c.stall_timeout = a.stall_timeout.max(Duration::from_secs(1));
    c.checksum = a.checksum;
    // --delete-excluded implies --delete, as in rsync.
    c.delete = a.delete || a.filter.delete_excluded;
    c.filter = filter;
    c.delete_excluded = a.filter.delete_excluded;
    c.dry_run = a.dry_run;
    c.hard_links = a.hard_links;
    c.sparse = a.sparse;
    c.modify_window = a.modify_window;
    // A closed pipe stops the copy (crate::out), so the result is not needed here.
    let to = if a.json { crate::out::To::Err } else { crate::out::To::Out };
    c.list = Some(send::ListSink(Arc::new(move |line: &str| {
        let _ = crate::out::line(to, format_args!("{line}"));
    })));
    c.bwlimit = a.bwlimit;
    c.numeric_ids = a.numeric_ids;
    let meta = MetaFlags {
        archive: a.archive,
        owner: a.owner,
        group: a.group,
        devices_and_specials: a.devices_and_specials,
        devices: a.devices,
        specials: a.specials,
        no_owner: a.no_owner,
        no_group: a.no_group,
        no_devices: a.no_devices,
    };
    meta.apply(rustix::process::geteuid().is_root(), &mut c);
    CopyPlan::resolve(sources, dest, &a.keys, &a.ssh, c)
}

/// Run `linerate cp`: 0 everything was copied, 1 some entries failed, else the failure's kind.
pub fn run_cp(mut a: CpArgs) -> Done {
    let mut paths = std::mem::take(&mut a.paths);
    let Some(dest) = paths.pop() else {
        return Err(Error::usage("no destination"));
    };
    let unit = if a.bytes { RateUnit::Bytes } else { RateUnit::Bits };
    let show = Show { quiet: a.quiet || a.json, force: a.progress, verbose: a.verbose, unit };
    if let Some(w) = options::unkept_warning(a.xattrs, a.acls) {
        errln!("linerate: {w}")?;
    }
    let plan = plan(&a, paths, &dest)?;
    let local = matches!(plan.route, Route::Local { .. });
    // Said once, not per file: the local receiver runs as this user.
    if let Some(note) = options::owner_note(plan.config.owner, local, rustix::process::geteuid().is_root()) {
        errln!("linerate: {note}")?;
    }
    let report = plan.run(show)?;
    if a.json {
        outln!("{}", summary_json(&report))?;
    } else if !a.quiet {
        errln!("{}", summary_line(&report, unit))?;
    }
    if let (Some(note), false) = (summary::skipped_specials(&report), a.quiet) {
        errln!("linerate: {note}")?;
    }
    // A dry run moved nothing: it is not a run to keep.
    if !a.no_save && !report.dry_run {
        save_cp_run(&report, &dest, a.db.as_deref(), a.quiet || a.json)?;
    }
    if let Some(failed) = summary::failures(&report) {
        return Err(Error::msg(Kind::Partial, failed));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use linerate_model::units::parse_buffer_memory;

    #[test]
    fn the_usage_line_reads_sources_then_the_destination() {
        use clap::CommandFactory;
        let mut cli = crate::Cli::command();
        let cp = cli.find_subcommand_mut("cp").expect("a cp subcommand");
        insta::assert_snapshot!(cp.render_usage().to_string());
        // The arguments' own line names them once, not as "<SRC... DEST> <SRC... DEST>...".
        let help = cp.render_help().to_string();
        assert!(!help.contains("<SRC... DEST>"), "{help}");
    }

    #[test]
    fn buffer_memory_is_a_size_or_a_number_of_mib() {
        assert_eq!(parse_buffer_memory("1024"), Ok(1 << 30));
        assert_eq!(parse_buffer_memory("1GiB"), Ok(1 << 30));
        assert_eq!(parse_buffer_memory("512M"), Ok(512 << 20));
        assert_eq!(parse_buffer_memory("2GB"), Ok(2_000_000_000));
        assert!(parse_buffer_memory("99999999999999999999").is_err());
        assert!(parse_buffer_memory("-1").is_err());
        assert!(parse_buffer_memory("lots").is_err());
    }
}
