//! `linerate cache`: the copies of linerate that `cp` uploaded to a user's cache, listed or
//! removed by the cache script ([`script::clean_command`](crate::script::clean_command)) run on
//! this host or through ssh, and its report read into entries and rendered as the lines the
//! command shows.

use crate::script::{clean_command, clean_remote_command};
use linerate_model::units::format_size;
use linerate_proto::name::escape;
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
    /// A HOST operand is not `[user@]host` (escaped).
    #[error("'{0}': give a host as [user@]host")]
    Host(String),
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

/// The login of a HOST operand, `[user@]host` with an optional `:` after it (as `cp` takes it).
pub fn login(h: &str) -> Result<&str, CacheError> {
    let login = h.strip_suffix(':').unwrap_or(h);
    if login.is_empty() || login.starts_with('-') || login.contains(['/', ':', ' ']) {
        return Err(CacheError::Host(escape(h.as_bytes())));
    }
    Ok(login)
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

/// A line `linerate cache` shows.
#[derive(Debug, PartialEq, Eq)]
pub enum Shown {
    /// On standard output.
    Out(String),
    /// On standard error.
    Err(String),
}

/// What `linerate cache` shows of the report `out` of `host` (`None`: this host): each entry
/// after `verb` (empty, `would remove`, `removed`), what was left alone, and the count.
pub fn render(out: &str, host: Option<&str>, verb: &str) -> Vec<Shown> {
    let prefix = host.map(|h| format!("{}:", escape(h.as_bytes()))).unwrap_or_default();
    let (mut n, mut total, mut shown) = (0u64, 0u64, Vec::new());
    for line in report(out) {
        shown.push(match line {
            Line::Entry { size, path } => {
                n += 1;
                total += size;
                let (sep, size, path) =
                    (if verb.is_empty() { "" } else { " " }, format_size(size as f64), escape(path.as_bytes()));
                Shown::Out(format!("{verb}{sep}{size:>10}  {prefix}{path}"))
            }
            Line::Skipped(why) => Shown::Err(format!("linerate cache: left alone: {prefix}{}", escape(why.as_bytes()))),
        });
    }
    let place = host.map_or_else(|| "this host".to_string(), |h| escape(h.as_bytes()));
    shown.push(Shown::Out(match n {
        0 => format!("no uploaded linerate on {place}"),
        _ => format!("{} {}, {} on {place}", n, if n == 1 { "copy" } else { "copies" }, format_size(total as f64)),
    }));
    shown
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

    #[test]
    fn the_report_renders_entries_notes_and_the_count() {
        let out = "LINERATE-CACHE 2000 /c/linerate/v1/linerate\nLINERATE-CACHE-SKIP /c/x: not ours\n";
        let shown = render(out, Some("me@h"), "removed");
        assert_eq!(
            shown,
            [
                Shown::Out("removed       2 kB  me@h:/c/linerate/v1/linerate".into()),
                Shown::Err("linerate cache: left alone: me@h:/c/x: not ours".into()),
                Shown::Out("1 copy, 2 kB on me@h".into()),
            ]
        );
        assert_eq!(render("", None, ""), [Shown::Out("no uploaded linerate on this host".into())]);
    }

    #[test]
    fn a_host_is_a_login_without_a_path() {
        assert_eq!(login("me@h:").unwrap(), "me@h");
        for bad in ["", ":", "-oProxyCommand=x", "h:/p", "a b", "h/x"] {
            assert!(matches!(login(bad), Err(CacheError::Host(_))), "{bad}");
        }
    }
}
