//! `linerate cache`: list or remove the copies of linerate that `cp` uploaded to a user's cache
//! (`${XDG_CACHE_HOME:-~/.cache}/linerate/<version>-<build id>/linerate`), on this host or on
//! remote hosts through ssh. One script does it on both ([`linerate_remote::script::clean_command`]).

use crate::error::{Error, Kind, Result, ResultExt};
use crate::ssh::SshArgs;
use clap::{Args, Subcommand};
use linerate_proto::name::escape;
use linerate_remote::cache;

const CACHE_AFTER_HELP: &str = "\
`linerate cp` to [user@]host:PATH uploads itself when the remote host has no usable linerate,
once, into the remote user's ${XDG_CACHE_HOME:-~/.cache}/linerate/<version>-<build id>/ (made
0700, checked by SHA-256 before it runs), and runs that copy on later runs. These commands list
or remove such copies: on this host without HOST, else on each HOST through ssh (with -e as for
cp). Only entries linerate made are touched.";

/// `linerate cache` flags.
#[derive(Args, Debug)]
#[command(after_help = CACHE_AFTER_HELP)]
pub struct CacheArgs {
    #[command(subcommand)]
    what: CacheCmd,
}

#[derive(Subcommand, Debug)]
enum CacheCmd {
    /// List the uploaded copies of linerate and their sizes.
    List(CacheTarget),
    /// Remove the uploaded copies of linerate (and the cache directory when empty).
    Clean(CacheClean),
}

#[derive(Args, Debug)]
struct CacheTarget {
    /// Hosts to look at through ssh (`[user@]host`); this host when none.
    #[arg(value_name = "HOST")]
    hosts: Vec<String>,
    /// Program that starts ssh, split as for `cp -e`.
    #[arg(short = 'e', long = "rsh", value_name = "COMMAND")]
    rsh: Option<String>,
}

#[derive(Args, Debug)]
struct CacheClean {
    #[command(flatten)]
    target: CacheTarget,
    /// List what would be removed; remove nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,
}

/// Run `linerate cache`.
pub fn run_cache(a: CacheArgs) -> Result {
    let (target, remove, verb) = match a.what {
        CacheCmd::List(t) => (t, false, ""),
        CacheCmd::Clean(c) if c.dry_run => (c.target, false, "would remove"),
        CacheCmd::Clean(c) => (c.target, true, "removed"),
    };
    if target.hosts.is_empty() {
        return show(cache::run(cache::here(remove), "this host").session()?, None, verb);
    }
    let ssh = SshArgs { rsh: target.rsh.clone(), ..SshArgs::default() };
    let mut failed = false;
    for h in &target.hosts {
        let login = cache::login(h).usage()?;
        let c = cache::through(crate::ssh::ssh_command(&ssh).usage()?, login, remove);
        match cache::run(c, &escape(login.as_bytes())) {
            Ok(out) => show(out, Some(login), verb)?,
            Err(e) => {
                errln!("linerate cache: {:#}", anyhow::Error::new(e))?;
                failed = true;
            }
        }
    }
    if failed {
        return Err(Error::reported(Kind::Session));
    }
    Ok(())
}

/// Print the script's report: one line per entry, then a total.
fn show(out: String, host: Option<&str>, verb: &str) -> Result {
    for line in cache::render(&out, host, verb) {
        match line {
            cache::Shown::Out(l) => outln!("{l}")?,
            cache::Shown::Err(l) => errln!("{l}")?,
        }
    }
    Ok(())
}
