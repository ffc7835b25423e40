//! `cp -H` (hard links), `cp -S` (sparse files) and `--modify-window`, each beside the behaviour
//! without the flag (rsync's defaults: names copied apart, files dense, mtimes compared exactly).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use crate::support::noise;

fn cp(db: &Path, args: &[&str], src: &Path, dst: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .env("LINERATE_DB", db)
        .arg("cp")
        .args(args)
        .arg(src)
        .arg(dst)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "cp {args:?}: {text}");
    out
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `src/a/first`, `src/a/same-dir` and `src/b/other-dir`: one small file with three names;
/// `src/big` and `src/b/big-again`: one 3 MiB file (several chunks) with two; `src/single`.
fn linked_tree(src: &Path) {
    fs::create_dir_all(src.join("a")).unwrap();
    fs::create_dir_all(src.join("b")).unwrap();
    fs::write(src.join("a/first"), b"one inode, three names").unwrap();
    fs::hard_link(src.join("a/first"), src.join("a/same-dir")).unwrap();
    fs::hard_link(src.join("a/first"), src.join("b/other-dir")).unwrap();
    noise(&src.join("big"), 3 * 1024 * 1024 + 17);
    fs::hard_link(src.join("big"), src.join("b/big-again")).unwrap();
    fs::write(src.join("single"), b"alone").unwrap();
}

/// A scratch directory holding [`linked_tree`] at `src`, and a run store.
fn linked() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (src, db) = (t.path().join("src"), t.path().join("runs.sqlite"));
    linked_tree(&src);
    (t, src, db)
}

fn inode(p: &Path) -> (u64, u64) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.ino(), m.nlink())
}

fn assert_linked(dst: &Path) {
    let (first, n) = inode(&dst.join("a/first"));
    assert_eq!(n, 3, "a/first has {n} names");
    assert_eq!(inode(&dst.join("a/same-dir")), (first, 3));
    assert_eq!(inode(&dst.join("b/other-dir")), (first, 3), "a link whose first name is in another directory");
    let (big, n) = inode(&dst.join("big"));
    assert_eq!((n, inode(&dst.join("b/big-again"))), (2, (big, 2)));
    assert_eq!(fs::read(dst.join("b/other-dir")).unwrap(), b"one inode, three names");
    assert_eq!(inode(&dst.join("single")).1, 1);
}

#[test]
fn hard_links_arrive_as_one_inode_with_h_and_as_separate_files_without() {
    let (t, src, db) = linked();
    let dst = t.path().join("dst");
    let out = cp(&db, &["-H", "--json"], &src.join(""), &dst);
    assert_linked(&dst);
    assert_eq!(fs::read(dst.join("b/big-again")).unwrap(), fs::read(src.join("big")).unwrap());
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["files"], 3, "further names are not counted as files copied (as rsync): {j}");
    // Run again: everything is up to date, and the links stay.
    let again = cp(&db, &["-H"], &src.join(""), &dst);
    assert!(text(&again).contains("3 up to date"), "{}", text(&again));
    assert_linked(&dst);
    // A name that became a file of its own at the destination is linked again.
    fs::remove_file(dst.join("b/other-dir")).unwrap();
    fs::write(dst.join("b/other-dir"), b"one inode, three names").unwrap();
    cp(&db, &["-H"], &src.join(""), &dst);
    assert_linked(&dst);
    // Without -H every name is a file of its own, as rsync -a does.
    let apart = t.path().join("apart");
    cp(&db, &[], &src.join(""), &apart);
    for name in ["a/first", "a/same-dir", "b/other-dir", "big", "b/big-again"] {
        assert_eq!(inode(&apart.join(name)).1, 1, "{name}");
    }
    assert_ne!(inode(&apart.join("a/first")).0, inode(&apart.join("b/other-dir")).0);
    assert_eq!(fs::read(apart.join("b/big-again")).unwrap(), fs::read(src.join("big")).unwrap());
}

#[test]
fn a_new_name_of_a_file_found_up_to_date_is_linked_to_it() {
    let (t, src, db) = linked();
    let dst = t.path().join("dst");
    cp(&db, &["-H"], &src.join(""), &dst);
    fs::hard_link(src.join("single"), src.join("b/single-too")).unwrap();
    let out = cp(&db, &["-H"], &src.join(""), &dst);
    assert!(text(&out).contains("up to date"), "{}", text(&out));
    let (single, n) = inode(&dst.join("single"));
    assert_eq!((n, inode(&dst.join("b/single-too"))), (2, (single, 2)), "linked to a first name found up to date");
}

/// A 2 GiB file with a few KB of data at its start, middle and end, and holes elsewhere.
fn sparse_file(p: &Path, len: u64) {
    use std::os::unix::fs::FileExt;
    let f = fs::File::create(p).unwrap();
    f.set_len(len).unwrap();
    for (at, what) in [(0, &b"start"[..]), (len / 2, b"middle"), (len - 4003, b"end")] {
        f.write_all_at(&[what, &[0xa5; 4000][..]].concat(), at).unwrap();
    }
}

fn same_content(a: &Path, b: &Path) {
    let st = Command::new("cmp").arg(a).arg(b).status().expect("cmp (diffutils) is installed");
    assert!(st.success(), "{} and {} differ", a.display(), b.display());
}

#[test]
fn a_sparse_file_arrives_with_its_holes_with_s_and_dense_without() {
    // On disk, not in /dev/shm: the dense copy takes its full size.
    let t = tempfile::tempdir().unwrap();
    let db = t.path().join("runs.sqlite");
    let src = t.path().join("sparse");
    sparse_file(&src, 2 << 30);
    let used = fs::metadata(&src).unwrap().blocks() * 512;
    assert!(used <= 256 * 1024, "the test's own file is not sparse here ({used} bytes used)");
    let dst = t.path().join("dst");
    cp(&db, &["-S"], &src, &dst.join(""));
    let got = dst.join("sparse");
    let m = fs::metadata(&got).unwrap();
    assert_eq!(m.len(), 2 << 30);
    assert!(m.blocks() * 512 <= 256 * 1024, "-S: {} bytes used for {used} at the source", m.blocks() * 512);
    same_content(&src, &got);
    // Without -S: dense, as rsync without -S (a smaller file, to spare the disk).
    let small = t.path().join("small");
    sparse_file(&small, 32 << 20);
    let dense = t.path().join("dense");
    cp(&db, &[], &small, &dense.join(""));
    let m = fs::metadata(dense.join("small")).unwrap();
    assert!(m.blocks() * 512 >= 32 << 20, "without -S: {} bytes used", m.blocks() * 512);
    same_content(&small, &dense.join("small"));
    // -S again over the dense copy: up to date, nothing sent.
    let out = cp(&db, &["-S"], &small, &dense.join(""));
    assert!(text(&out).contains("1 up to date"), "{}", text(&out));
}

fn set_mtime(p: &Path, t: SystemTime) {
    fs::File::options().write(true).open(p).unwrap().set_modified(t).unwrap();
}

#[test]
fn modify_window_skips_a_file_whose_mtime_is_within_it_and_without_it_resends() {
    let t = tempfile::tempdir().unwrap();
    let db = t.path().join("runs.sqlite");
    let (src, dst) = (t.path().join("f"), t.path().join("dst"));
    fs::create_dir(&dst).unwrap();
    fs::write(&src, b"source bytes").unwrap();
    fs::write(dst.join("f"), b"other  bytes").unwrap();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    set_mtime(&src, when);
    set_mtime(&dst.join("f"), when + Duration::from_secs(1));
    let out = cp(&db, &["--modify-window=2"], &src, &dst.join(""));
    assert!(text(&out).contains("1 up to date"), "{}", text(&out));
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"other  bytes", "within the window: skipped");
    // A window smaller than the difference, or none: sent again.
    set_mtime(&dst.join("f"), when + Duration::from_secs(3));
    cp(&db, &["--modify-window", "2"], &src, &dst.join(""));
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"source bytes");
    fs::write(dst.join("f"), b"other  bytes").unwrap();
    set_mtime(&dst.join("f"), when + Duration::from_secs(1));
    cp(&db, &[], &src, &dst.join(""));
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"source bytes", "no window: re-sent");
    assert_eq!(fs::metadata(dst.join("f")).unwrap().modified().unwrap(), when);
}

#[test]
fn modify_window_refuses_negative_and_oversized_values() {
    for bad in ["-1", "31622401", "x"] {
        let out = Command::new(env!("CARGO_BIN_EXE_linerate"))
            .args(["cp", "--modify-window", bad, "a", "b"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out));
        assert!(text(&out).contains("--modify-window"), "{}", text(&out));
    }
}

#[test]
fn cp_help_names_the_rsync_flags_for_links_holes_and_times() {
    let out = Command::new(env!("CARGO_BIN_EXE_linerate")).args(["cp", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["-H, --hard-links", "-S, --sparse", "--modify-window <N>"] {
        assert!(help.contains(flag), "{flag} missing from cp --help");
    }
}
