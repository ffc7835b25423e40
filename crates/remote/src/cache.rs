//! `linerate cache`: the copies of linerate that `cp` uploaded to a user's cache, listed or
//! removed by the cache script ([`script::clean_command`](crate::script::clean_command)) run on
//! this host or through ssh, and its report read into entries.

use crate::script::{clean_command, clean_remote_command};
use std::process::{Command, Stdio};

/// Why the cache script gave no report.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// It could not be run (`on`: the host, escaped).
    #[error("running the cache script on {on}")]
    Run {
        /// Where.
        on: String,
        /// Why.
        #[source]
        io: std::io::Error,
    },
    /// It failed.
    #[error("the cache script on {on} failed ({status})")]
    Failed {
        /// Where.
        on: String,
        /// How it ended.
        status: std::process::ExitStatus,
    },
}

/// The command that runs the script on this host (`remove`: remove, else list).
pub fn here(remove: bool) -> Command {
    let (script, mode) = clean_command(remove);
    let mut c = Command::new("/bin/sh");
    c.args(["-c", &script, "linerate-cache", &mode]);
    c
}

/// Add to `ssh` (a command without a destination) what runs the script on `login`.
pub fn through(mut ssh: Command, login: &str, remove: bool) -> Command {
    ssh.args(["-T", "--", login, &clean_remote_command(remove)]);
    ssh
}

/// Run the script `c` (`on`: where, escaped, for messages); its output.
pub fn run(mut c: Command, on: &str) -> Result<String, CacheError> {
    let o = c
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|io| CacheError::Run { on: on.to_string(), io })?;
    if !o.status.success() {
        return Err(CacheError::Failed { on: on.to_string(), status: o.status });
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// One line of the script's report.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// An uploaded copy: its size in bytes and its path.
    Entry {
        /// Bytes.
        size: u64,
        /// Where it is.
        path: &'a str,
    },
    /// Something the script left alone, and why.
    Skipped(&'a str),
}

/// The report's lines that say something (at most the first 10,000 lines are read).
pub fn report(out: &str) -> impl Iterator<Item = Line<'_>> {
    out.lines().take(10_000).filter_map(|line| {
        if let Some(rest) = line.strip_prefix("LINERATE-CACHE ") {
            let (size, path) = rest.split_once(' ').unwrap_or(("0", rest));
            Some(Line::Entry { size: size.parse().unwrap_or(0), path })
        } else {
            line.strip_prefix("LINERATE-CACHE-SKIP ").map(Line::Skipped)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_reads_entries_and_skips_and_nothing_else() {
        let out = "noise\nLINERATE-CACHE 42 /c/linerate/v1/linerate\nLINERATE-CACHE-SKIP /c/x: not ours\n\
                   LINERATE-CACHE x /odd\nLINERATE-CACHE /bare\n";
        let lines: Vec<_> = report(out).collect();
        assert_eq!(
            lines,
            [
                Line::Entry { size: 42, path: "/c/linerate/v1/linerate" },
                Line::Skipped("/c/x: not ours"),
                Line::Entry { size: 0, path: "/odd" },
                Line::Entry { size: 0, path: "/bare" },
            ]
        );
    }
}
