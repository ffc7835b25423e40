//! Fail once, clearly (issue 31): a destination that cannot take the copy is one message, not
//! one per entry; a full or read-only file system ends the copy at its first refusal, naming the
//! file system; what is refused up front is refused before anything is sent; a dry run creates
//! nothing; a failed run never lands in the run store with a rate. Every test uses its own run
//! store (LINERATE_DB). The mount tests run in a private mount namespace (`unshare`), so nothing
//! stays mounted even if a test fails; they and `chattr` need root, and fail loudly without it.

use crate::support::{noise, require_root};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A scratch directory with its own run store.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { dir: tempfile::tempdir().unwrap() }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn db(&self) -> PathBuf {
        self.path().join("runs.sqlite")
    }

    /// `linerate ARGS` with this scratch's run store.
    fn run(&self, args: &[&std::ffi::OsStr]) -> Output {
        bin().env("LINERATE_DB", self.db()).args(args).output().unwrap()
    }

    /// `linerate ARGS` in a private mount namespace, after `setup` (shell, `$D` is `dest`).
    fn run_mounted(&self, setup: &str, dest: &Path, args: &[&std::ffi::OsStr]) -> Output {
        let script = format!("set -e; D=\"$1\"; shift; {setup}; exec \"$@\"");
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script, "sh"])
            .arg(dest)
            .arg(env!("CARGO_BIN_EXE_linerate"))
            .args(args)
            .env("LINERATE_DB", self.db())
            .output()
            .unwrap()
    }

    /// The titles of the runs saved in this scratch's store.
    fn saved_runs(&self) -> String {
        let out = self.run(&["report".as_ref(), "list".as_ref()]);
        text(&out)
    }

    /// `t1/` with 50 small files and `t1/sub/x`.
    fn small_tree(&self) -> PathBuf {
        let t1 = self.path().join("t1");
        fs::create_dir_all(t1.join("sub")).unwrap();
        for i in 1..=50 {
            fs::write(t1.join(format!("f{i}")), format!("{i}\n")).unwrap();
        }
        fs::write(t1.join("sub/x"), b"x\n").unwrap();
        t1
    }
}

/// The lines of `linerate`'s own messages on stderr that name an entry or a file system (not
/// the summary, not the closing "N entries failed" line).
fn error_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with("linerate: ") && !l.contains("entries failed"))
        .map(str::to_string)
        .collect()
}

/// Bytes in a size as the summaries print it ("31.5 MB", "20 MiB", "512 B").
fn parse_size(s: &str) -> f64 {
    let (n, unit) = s.trim().split_once(' ').unwrap();
    let n: f64 = n.parse().unwrap();
    n * match unit {
        "B" => 1.0,
        "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        u => panic!("unit {u}"),
    }
}

#[test]
#[ignore = "needs root"]
fn a_read_only_destination_is_one_message_naming_the_mount_and_exit_3_and_nothing_saved() {
    require_root("a read-only bind mount");
    let s = Scratch::new();
    let t1 = s.small_tree();
    let ro = s.path().join("ro");
    fs::create_dir(&ro).unwrap();
    let out = s.run_mounted(
        "mount --bind \"$D\" \"$D\" && mount -o remount,ro,bind \"$D\"",
        &ro,
        &["cp".as_ref(), "-q".as_ref(), t1.as_os_str(), ro.as_os_str()],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let errors = error_lines(&out);
    assert_eq!(errors.len(), 1, "one message, not one per entry: {errors:#?}");
    let want = format!("the file system at {} (", ro.display());
    assert!(errors[0].contains(&want) && errors[0].contains("read-only"), "{}", errors[0]);
    assert!(fs::read_dir(&ro).unwrap().next().is_none(), "nothing was written");
    assert!(!s.saved_runs().contains("cp:"), "a failed copy is not saved: {}", s.saved_runs());
}

#[test]
#[ignore = "needs root"]
fn a_full_destination_stops_at_the_first_enospc_with_one_message_and_exit_3() {
    require_root("a 20 MiB tmpfs");
    let s = Scratch::new();
    let src = s.path().join("big");
    fs::create_dir(&src).unwrap();
    for i in 0..10 {
        noise(&src.join(format!("f{i}")), 10 << 20);
    }
    let small = s.path().join("small");
    fs::create_dir(&small).unwrap();
    let out = s.run_mounted(
        "mount -t tmpfs -o size=20m tmpfs \"$D\"",
        &small,
        &["cp".as_ref(), "-q".as_ref(), src.as_os_str(), small.as_os_str()],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let errors = error_lines(&out);
    assert_eq!(errors.len(), 1, "one message: {errors:#?}");
    let e = &errors[0];
    assert!(e.contains(&format!("the file system at {} (tmpfs) filled up", small.display())), "{e}");
    // "...; 31.5 MB of 105 MB had been sent": the sender stopped at the first ENOSPC instead of
    // sending the rest (before: all 105 MB). What was in flight by then (records queued and in
    // socket buffers: 20 to 45 MB seen, by load) is not the decision; stopping well short is.
    let (sent, rest) = e.split_once("; ").and_then(|(_, r)| r.split_once(" of ")).unwrap();
    let total = rest.split_once(" had been sent").unwrap().0;
    assert!(parse_size(sent) < 0.75 * parse_size(total), "{sent} of {total} sent into a 20 MiB file system: {e}");
    assert!((parse_size(total) - (100 << 20) as f64).abs() < 1e6, "{total}: {e}");
    assert!(!s.saved_runs().contains("cp:"), "a failed copy is not saved: {}", s.saved_runs());
}

#[test]
#[ignore = "needs root"]
fn a_destination_out_of_inodes_stops_with_one_message_and_exit_3() {
    require_root("a tmpfs of 64 inodes");
    let s = Scratch::new();
    // Small files in directories the copy creates: each is created by the data stream that
    // brings its chunk, after the control stream answered for it, so the failure is found there.
    let src = s.path().join("many");
    for d in 0..3 {
        let dir = src.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for i in 0..100 {
            fs::write(dir.join(format!("f{i}")), vec![b'x'; 1000]).unwrap();
        }
    }
    let few = s.path().join("few");
    fs::create_dir(&few).unwrap();
    let out = s.run_mounted(
        "mount -t tmpfs -o size=20m,nr_inodes=64 tmpfs \"$D\"",
        &few,
        &["cp".as_ref(), "-q".as_ref(), src.as_os_str(), few.as_os_str()],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let errors = error_lines(&out);
    assert_eq!(errors.len(), 1, "one message, not one per file: {errors:#?}");
    assert!(errors[0].contains(&format!("the file system at {} (tmpfs) filled up", few.display())), "{}", errors[0]);
    assert!(!s.saved_runs().contains("cp:"), "a failed copy is not saved: {}", s.saved_runs());
}

/// `chattr +i` on a directory (root ignores modes, not the immutable flag), undone on drop so
/// the scratch directory can be removed.
struct Immutable(PathBuf);

impl Immutable {
    fn set(p: &Path) -> Immutable {
        let out = Command::new("chattr").arg("+i").arg(p).output().unwrap();
        assert!(out.status.success(), "chattr +i {} failed here: {}", p.display(), text(&out));
        Immutable(p.to_path_buf())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
#[ignore = "needs root"]
fn an_unwritable_directory_is_one_error_its_subtree_skipped_and_the_run_kept_without_a_rate() {
    require_root("chattr +i");
    let s = Scratch::new();
    let t1 = s.small_tree();
    let dest = s.path().join("dest");
    // The destination itself, and a directory of the tree already there: both refuse new entries.
    fs::create_dir_all(dest.join("t1")).unwrap();
    let second = s.path().join("dest2");
    fs::create_dir(&second).unwrap();
    for (target, at) in [(&dest, dest.join("t1")), (&second, second.clone())] {
        let _guard = Immutable::set(&at);
        let out = s.run(&["cp".as_ref(), t1.as_os_str(), target.as_os_str()]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let errors = error_lines(&out);
        assert_eq!(errors.len(), 1, "one error, not one per entry: {errors:#?}");
        assert!(errors[0].contains("nothing more is copied into"), "{}", errors[0]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("; 51 not copied (see above)"), "the summary counts what was skipped: {stderr}");
    }
    let runs = s.saved_runs();
    assert_eq!(runs.matches("INCOMPLETE").count(), 2, "kept as incomplete: {runs}");
    let out = s.run(&["report".as_ref(), "list".as_ref(), "--json".as_ref()]);
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(list.lines().count(), 2, "{list}");
    for line in list.lines() {
        assert!(line.contains("\"headline\":null"), "no rate kept for an incomplete copy: {line}");
    }
}

#[test]
fn a_file_as_destination_is_refused_before_anything_is_sent() {
    let s = Scratch::new();
    let t1 = s.small_tree();
    let afile = s.path().join("afile");
    fs::write(&afile, b"mine").unwrap();
    let contents = PathBuf::from(format!("{}/", t1.display()));
    for src in [&contents, &t1] {
        let out = s.run(&["cp".as_ref(), "-q".as_ref(), src.as_os_str(), afile.as_os_str()]);
        assert_eq!(out.status.code(), Some(2), "{}: {}", src.display(), text(&out));
        let errors = error_lines(&out);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(errors[0].contains("not a directory"), "{}", errors[0]);
    }
    assert_eq!(fs::read(&afile).unwrap(), b"mine");
    assert!(!s.saved_runs().contains("cp:"), "nothing was sent, nothing saved");
}

#[test]
fn a_dry_run_creates_no_destination() {
    let s = Scratch::new();
    let t1 = s.small_tree();
    let contents = PathBuf::from(format!("{}/", t1.display()));
    for (src, dest) in [(&t1, "newdest"), (&contents, "newdest2"), (&t1, "newdest3/")] {
        let dest = s.path().join(dest);
        let out = s.run(&["cp".as_ref(), "-n".as_ref(), src.as_os_str(), dest.as_os_str()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("would send"), "{}", text(&out));
        assert!(text(&out).contains("would send 51 files"), "{}", text(&out));
        assert!(!dest.exists(), "a dry run created {}", dest.display());
    }
}

#[test]
fn a_tree_deeper_than_1024_levels_is_copied_but_for_the_part_below_with_one_message_and_exit_1() {
    let s = Scratch::new();
    let deep = s.path().join("deep");
    let mut p = deep.clone();
    for _ in 0..1100 {
        p.push("d");
    }
    fs::create_dir_all(&p).unwrap();
    fs::write(p.join("lost"), b"too deep").unwrap();
    fs::write(deep.join("top"), b"kept").unwrap();
    let mut at_limit = deep.clone();
    for _ in 0..1023 {
        at_limit.push("d");
    }
    fs::write(at_limit.join("last"), b"at the limit").unwrap();
    let dest = s.path().join("out");
    fs::create_dir(&dest).unwrap();
    let out = s.run(&["cp".as_ref(), "-q".as_ref(), deep.as_os_str(), dest.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let errors = error_lines(&out);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("deeper than 1024 levels"), "{}", errors[0]);
    assert_eq!(fs::read(dest.join("deep/top")).unwrap(), b"kept");
    let copied = dest.join(at_limit.strip_prefix(s.path()).unwrap());
    assert_eq!(fs::read(copied.join("last")).unwrap(), b"at the limit", "the 1024th level is copied");
    assert!(!copied.join("d").exists(), "the 1025th level is not");
}
