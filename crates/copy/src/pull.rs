//! The client side of a pull: ask the server for a tree and receive it here, through the same
//! [`RecvSession`] that a server uses for a push, so everything the server sends is checked and
//! written exactly as a push's receiver would (confined beneath the local destination, renamed
//! into place only when complete, resumable).

use crate::confined::{self, Destination};
use crate::recv::{Outcome, PullOf, RecvSession, SessionParams};
use crate::send::{self, CopyConfig, CopyReport, ErrorSink, Progress};
use linerate_net::conn;
use linerate_net::rate::SessionRate;
use linerate_net::resources;
use linerate_net::{EngineError, UsageError};
use linerate_proto::frame::{self, Frame, Pull, FLAG_PULL};
use linerate_proto::name;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The name a pull asks the server for (`Pull.name`): the remote path's last component.
fn asked_name(from: &[u8]) -> Result<Vec<u8>, EngineError> {
    let mut trimmed = from;
    while let Some(t) = trimmed.strip_suffix(b"/").or_else(|| trimmed.strip_suffix(b"/.")) {
        trimmed = t;
    }
    let base = trimmed.rsplit(|&b| b == b'/').next().unwrap_or_default().to_vec();
    if name::validate(&base).is_err() || base == b"~" {
        return Err(UsageError::Sources(format!(
            "remote path '{}' has no last name to pull: name a file or directory beneath it",
            name::escape(from)
        ))
        .into());
    }
    Ok(base)
}

/// Where a pulled tree lands, by the rsync rule for sources (as a push's [`send::placement`]),
/// once the server has said whether the source is a directory (`is_dir`): a directory named
/// without a trailing `/` goes into `into` (created when absent) under its own name; with a
/// trailing `/`, `into` becomes the copy; a file goes into `into` if that is a directory or ends
/// in `/`, else takes the name `into`. Returns the target and the local name of the tree.
/// A dry run (`dry_run`) creates nothing: a destination directory that would be made is
/// returned [`Destination::absent`], as its parent.
pub fn local_destination(
    into: &Path,
    from: &[u8],
    is_dir: bool,
    dry_run: bool,
) -> Result<(Destination, Vec<u8>), EngineError> {
    let shown = linerate_net::error::shown(into);
    let contents = is_dir && (from.ends_with(b"/") || from.ends_with(b"/."));
    let into_slash = into.as_os_str().as_bytes().ends_with(b"/");
    let go_into = !contents && (is_dir || into.is_dir() || into_slash);
    if contents && std::fs::symlink_metadata(into).is_ok_and(|m| !m.is_dir()) {
        return Err(EngineError::Usage(UsageError::Destination(format!(
            "destination {shown} exists and is not a directory; a directory's contents (a source ending in '/') need a directory"
        ))));
    }
    if go_into {
        let base = asked_name(from)?;
        if !into.is_dir() && dry_run {
            let parent = match into.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let dir = confined::open_root(parent)
                .map_err(|e| EngineError::Usage(UsageError::Destination(format!("{shown}: {e}"))))?;
            return Ok((Destination { dir, into_dir: true, absent: true }, base));
        }
        if !into.is_dir() {
            std::fs::create_dir(into).map_err(|e| {
                EngineError::Usage(UsageError::Destination(format!(
                    "creating destination directory {shown}: {e} (its parent must exist)"
                )))
            })?;
        }
        let dir = confined::open_root(into)
            .map_err(|e| EngineError::Usage(UsageError::Destination(format!("{shown}: {e}"))))?;
        return Ok((Destination { dir, into_dir: true, absent: false }, base));
    }
    // `into` itself is the copy: name it in its parent.
    let full = if into.is_dir() { into.canonicalize().unwrap_or_else(|_| into.to_path_buf()) } else { into.into() };
    let last = full
        .file_name()
        .ok_or_else(|| EngineError::Usage(UsageError::Destination(format!("{shown}: destination has no file name"))))?
        .as_bytes()
        .to_vec();
    let parent = match full.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = confined::open_root(parent).map_err(|e| {
        EngineError::Usage(UsageError::Destination(format!(
            "destination directory {}: {e}",
            linerate_net::error::shown(parent)
        )))
    })?;
    Ok((Destination { dir, into_dir: false, absent: false }, last))
}

/// Check before connecting what can be checked of a pull's local destination: the directory it
/// lands in must exist.
fn check_local(into: &Path) -> Result<(), EngineError> {
    if into.is_dir() {
        return Ok(());
    }
    let parent = match into.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(EngineError::Usage(UsageError::Destination(format!(
            "destination directory {}: no such directory",
            linerate_net::error::shown(parent)
        ))));
    }
    if into.as_os_str().as_bytes().ends_with(b"/") && into.exists() {
        return Err(EngineError::Usage(UsageError::Destination(format!(
            "{}: not a directory",
            linerate_net::error::shown(into)
        ))));
    }
    Ok(())
}

/// Pull `from` (a path beneath the server's root) into local `into`. `cfg.sources` and
/// `cfg.dest` are not used; everything else is as for a push.
pub fn pull(
    cfg: &CopyConfig,
    from: &[u8],
    into: &Path,
    progress: Arc<Progress>,
    on_error: ErrorSink,
) -> Result<CopyReport, EngineError> {
    let asked = asked_name(from)?;
    check_local(into)?;
    let start = Instant::now();
    let cpu0 = resources::process();
    let mut control = conn::connect_control(cfg.addr, cfg.suite, &cfg.secret, cfg.key_auth.as_ref(), cfg.timeout)?;
    let streams = send::streams_for(cfg, control.rx.socket());
    let flags = cfg.flags() | FLAG_PULL;
    // The server's walk skips what the rules exclude; a source named with a trailing '/' is the
    // transfer root itself, as for a push.
    let contents = from.ends_with(b"/") || from.ends_with(b"/.");
    let tree_filter = cfg.tree_filter(!contents);
    let mut rules = Vec::new();
    let mut frames = vec![
        Frame::Begin(frame::Begin {
            dest: b"",
            sources: 1,
            chunk_size: cfg.chunk_size,
            flags,
            streams,
            modify_window: cfg.modify_window,
        }),
        Frame::Pull(Pull { path: from, name: &asked }),
    ];
    if let Some(t) = &tree_filter {
        let flags = t.frame_flags(cfg.delete_excluded);
        frames.push(Frame::Filter(frame::FilterRules { flags, rules: t.filter.encode(&mut rules) }));
    }
    control.tx.send_frames(&frames)?;
    let is_dir = send::await_target(&mut control, cfg.timeout)?;
    let (dest, local) = local_destination(into, from, is_dir, cfg.dry_run)?;
    let data = send::connect_data(cfg, &control, streams)?;
    let tag = hex::encode(&control.session[..6]);
    // The server is the sender here: it is as untrusted as any client of a server.
    // Only the one tree asked for may arrive: its name in the target, everything else beneath it.
    let params = SessionParams {
        flags,
        chunk_size: cfg.chunk_size,
        streams,
        tag,
        idle_timeout: cfg.stall_timeout,
        pull_of: Some(PullOf { asked, local }),
        keep: tree_filter.filter(|_| !cfg.delete_excluded),
        modify_window: cfg.modify_window,
    };
    let session = RecvSession::with_display(
        params,
        dest,
        control.tx,
        Some(progress.clone()),
        cfg.list.clone(),
        Some(on_error.clone()),
    );
    session.pace_with(if cfg.pace.is_limited() { cfg.pace.clone() } else { SessionRate::fixed(cfg.bwlimit) });
    if let Some(s) = control.rx.socket() {
        session.add_socket(s);
    }
    // Every stream is attached before any runs: one that fails the session at once must not make
    // a later attach look like a local fault.
    for (i, s) in data.iter().enumerate() {
        if !session.attach(i as u16 + 1, s.rx.socket()) {
            return Err(EngineError::Internal("a data stream was refused by the local session".into()));
        }
    }
    let mut threads = Vec::new();
    for s in data {
        let session = session.clone();
        let rx = s.rx;
        let tx = s.tx; // kept open until the stream ends: closing it would look like a reset
        threads.push(std::thread::spawn(move || {
            session.run_data(rx);
            drop(tx);
        }));
    }
    let watch = {
        let session = session.clone();
        crate::cancel::Watch::new(progress.cancel.clone(), move || {
            let message = crate::cancel::INTERRUPTED.to_string();
            let code = linerate_proto::ErrorCode::Interrupted;
            session.abort(crate::recv::Abort { interrupted: true, ..crate::recv::Abort::new(code, message) });
        })
    };
    let outcome = session.run_control(control.rx);
    for t in threads {
        let _ = t.join();
    }
    drop(watch);
    if progress.cancel.is_stopped() {
        return Err(EngineError::Interrupted);
    }
    progress.walk_done.store(1, std::sync::atomic::Ordering::Relaxed);
    match outcome {
        Outcome::Done(summary) => {
            let fin = session.finish_totals();
            let counts = session.sync_counts();
            Ok(CopyReport {
                bytes: fin.bytes,
                files: fin.files,
                dirs: fin.dirs,
                links: fin.links,
                seconds: start.elapsed().as_secs_f64(),
                streams,
                cipher: cfg.suite.name(),
                local_errors: 0,
                server: summary,
                client_cpu: resources::process().since(cpu0),
                client_peak_rss: resources::peak_rss(),
                skipped_files: counts.skipped_files,
                skipped_bytes: counts.skipped_bytes,
                resumed_bytes: counts.resumed_bytes,
                deleted: counts.deleted,
                pulled: true,
                dry_run: flags & linerate_proto::frame::FLAG_DRY_RUN != 0,
                would_send: counts.would_send,
                phases: None,
                timeline: None,
                refused_files: counts.refused,
                // The server walked: what it skipped without -D is not reported back.
                skipped_specials: 0,
                page_cache_bytes: None,
            })
        }
        Outcome::Aborted(a) => Err(match a.message.strip_prefix(crate::recv::SENDER_ENDED) {
            Some(m) => EngineError::Remote { code: a.code, message: m.to_string() },
            None => EngineError::Aborted { code: a.code, message: a.message },
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_pull_refuses_a_file_for_contents_and_a_dry_run_creates_nothing() {
        let t = tempfile::tempdir().unwrap();
        let afile = t.path().join("afile");
        std::fs::write(&afile, b"mine").unwrap();
        let e = local_destination(&afile, b"tree/", true, false).unwrap_err();
        assert!(matches!(&e, EngineError::Usage(UsageError::Destination(m)) if m.contains("not a directory")), "{e}");
        assert_eq!(std::fs::read(&afile).unwrap(), b"mine");
        let new = t.path().join("new");
        let (d, name) = local_destination(&new, b"tree", true, true).unwrap();
        assert!(d.absent && d.into_dir && name == b"tree" && !new.exists(), "a dry run made {}", new.display());
        let (d, _) = local_destination(&new, b"tree", true, false).unwrap();
        assert!(!d.absent && new.is_dir(), "a real run makes it");
    }
}
