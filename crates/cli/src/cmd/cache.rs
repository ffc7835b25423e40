//! `linerate cache`: list or remove the copies of linerate that `cp` uploaded to a user's cache
//! (`${XDG_CACHE_HOME:-~/.cache}/linerate/<version>-<build id>/linerate`), on this host or on
//! remote hosts through ssh. One script does it on both ([`linerate_remote::script::clean_command`]).

use crate::error::{Error, Kind, Result, ResultExt};
use crate::ssh::SshArgs;
use anyhow::Context;
use clap::{Args, Subcommand};
use linerate_model::units::format_size;
use linerate_proto::name::escape;
use std::process::{Command, Stdio};

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
        let (script, mode) = linerate_remote::script::clean_command(remove);
        let mut c = Command::new("/bin/sh");
        c.args(["-c", &script, "linerate-cache", &mode]);
        return show(run(c, "this host").session()?, None, verb);
    }
    let ssh = SshArgs { rsh: target.rsh.clone(), ..SshArgs::default() };
    let mut failed = false;
    for h in &target.hosts {
        let login = h.strip_suffix(':').unwrap_or(h);
        if login.is_empty() || login.starts_with('-') || login.contains(['/', ':', ' ']) {
            return Err(Error::usage(format!("'{}': give a host as [user@]host", escape(h.as_bytes()))));
        }
        let mut c = crate::ssh::ssh_command(&ssh).usage()?;
        c.args(["-T", "--", login, &linerate_remote::script::clean_remote_command(remove)]);
        match run(c, login) {
            Ok(out) => show(out, Some(login), verb)?,
            Err(e) => {
                errln!("linerate cache: {e:#}")?;
                failed = true;
            }
        }
    }
    if failed {
        return Err(Error::reported(Kind::Session));
    }
    Ok(())
}

/// Run the script; its output, or why it failed.
fn run(mut c: Command, on: &str) -> anyhow::Result<String> {
    let o = c
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running the cache script on {}", escape(on.as_bytes())))?;
    if !o.status.success() {
        anyhow::bail!("the cache script on {} failed ({})", escape(on.as_bytes()), o.status);
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Print the script's report: one line per entry, then a total.
fn show(out: String, host: Option<&str>, verb: &str) -> Result {
    let prefix = host.map(|h| format!("{}:", escape(h.as_bytes()))).unwrap_or_default();
    let (mut n, mut total) = (0u64, 0u64);
    for line in out.lines().take(10_000) {
        if let Some(rest) = line.strip_prefix("LINERATE-CACHE ") {
            let (size, path) = rest.split_once(' ').unwrap_or(("0", rest));
            let size: u64 = size.parse().unwrap_or(0);
            outln!(
                "{verb}{}{:>10}  {prefix}{}",
                if verb.is_empty() { "" } else { " " },
                format_size(size as f64),
                escape(path.as_bytes())
            )?;
            n += 1;
            total += size;
        } else if let Some(why) = line.strip_prefix("LINERATE-CACHE-SKIP ") {
            errln!("linerate cache: left alone: {prefix}{}", escape(why.as_bytes()))?;
        }
    }
    let place = host.map_or_else(|| "this host".to_string(), |h| escape(h.as_bytes()));
    if n == 0 {
        outln!("no uploaded linerate on {place}")?;
    } else {
        outln!("{} {}, {} on {place}", n, if n == 1 { "copy" } else { "copies" }, format_size(total as f64))?;
    }
    Ok(())
}
