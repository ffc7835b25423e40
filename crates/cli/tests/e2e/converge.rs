//! An existing destination entry converges as `rsync -a` makes it (issue 42, findings 4 and 6):
//! a mode changed on an up-to-date file is applied on the next run, listed by `-n` and counted;
//! a file that became a directory, a directory that became a file, a symlink or a FIFO (and
//! back) is replaced — without `--delete` only where rsync replaces it (a non-directory by a
//! directory, an empty directory by anything), with `--delete` always — never following a
//! symlink and never touching anything outside the destination. Each case runs `rsync -a` on an
//! identical tree in the same test and compares the results: types, modes, contents, exit codes.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"));
    c.env("LINERATE_DB", "/nonexistent/linerate-converge-test.sqlite");
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `linerate cp --no-save ARGS`.
fn cp(args: &[&str]) -> Output {
    bin().args(["cp", "--no-save"]).args(args).output().unwrap()
}

/// `rsync ARGS`, failing loudly when rsync is missing (`.ci/run` installs it).
fn rsync(args: &[&str]) -> Output {
    Command::new("rsync")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("rsync is needed to compare with (apt-get install rsync): {e}"))
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o7777
}

fn chmod(p: &Path, m: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
}

/// Every entry beneath `root`, sorted: its path, type, permission bits, and its content (a file)
/// or target (a symlink) — what rsync -a and linerate must agree on.
fn snapshot(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let t = m.file_type();
            let what = if t.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if t.is_symlink() {
                format!("link -> {}", fs::read_link(&p).unwrap().display())
            } else if t.is_file() {
                format!("file {:?}", String::from_utf8_lossy(&fs::read(&p).unwrap()))
            } else {
                format!("special {:o}", m.mode() & 0o170000)
            };
            out.push(format!("{rel}: {what} {:o}", m.mode() & 0o7777));
        }
    }
    out.sort();
    out
}

/// A `linerate serve` daemon on loopback that keeps owners and devices (as `-a` asks), with its
/// key; killed when dropped.
struct Served {
    daemon: crate::support::Daemon,
    key: PathBuf,
}

impl Served {
    fn start(root: &Path, key: &Path) -> Served {
        let out = bin().arg("keygen").arg(key).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let mut c = bin();
        c.args(["serve", "--listen", "127.0.0.1:0", "--announce", "--keep-owners", "--allow-devices", "--root"]);
        c.arg(root).arg("--key-file").arg(key);
        Served { daemon: crate::support::Daemon::start(c), key: key.to_path_buf() }
    }

    /// `linerate cp ARGS FROM TO` with this daemon's key.
    fn cp(&self, args: &[&str], from: &str, to: &str) -> Output {
        let mut all = vec!["--key-file", s(&self.key)];
        all.extend_from_slice(args);
        all.extend_from_slice(&[from, to]);
        cp(&all)
    }

    fn at(&self, path: &str) -> String {
        format!("{}:{path}", self.daemon.addr)
    }
}

/// The source tree of the mode test: a small file, a file of several 64 KiB chunks (the size
/// where linerate resumes), and one whose content stays but whose time is changed for `-c`.
fn mode_tree(src: &Path) {
    fs::create_dir_all(src.join("etc")).unwrap();
    fs::write(src.join("etc/issue"), b"Welcome\n").unwrap();
    crate::support::noise(&src.join("big"), 300 << 10);
    fs::write(src.join("etc/motd"), b"hello\n").unwrap();
    for f in ["etc/issue", "big", "etc/motd"] {
        chmod(&src.join(f), 0o644);
    }
}

#[test]
fn a_mode_changed_on_an_up_to_date_file_is_applied_listed_and_counted_pushed_and_pulled() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("root/src");
    mode_tree(&src);
    let served = Served::start(&t.path().join("root"), &t.path().join("key"));
    let theirs = t.path().join("rsync");
    let (local, pulled) = (t.path().join("local"), t.path().join("pulled"));
    let pushed = t.path().join("root/pushed");
    let args = ["-aH", "--delete", "--chunk-size", "64K"];
    // Each of the three ways: a local copy, a push to the daemon, a pull from it.
    let run = |extra: &[&str], way: usize| -> Output {
        let mut a: Vec<&str> = args.to_vec();
        a.extend_from_slice(extra);
        match way {
            0 => cp(&[&a[..], &[&format!("{}/", s(&src)), s(&local)]].concat()),
            1 => served.cp(&a, &format!("{}/", s(&src)), &served.at("pushed")),
            _ => served.cp(&a, &served.at("src/"), s(&pulled)),
        }
    };
    let dests = [&local, &pushed, &pulled];
    for way in 0..3 {
        assert_eq!(counts(&run(&["--json"], way)), (3, 0), "way {way}");
    }
    let r = rsync(&["-aH", "--delete", &format!("{}/", s(&src)), s(&theirs)]);
    assert!(r.status.success(), "{}", text(&r));

    // The finding: chmod 600 on an up-to-date file (and 640 on a large one).
    chmod(&src.join("etc/issue"), 0o600);
    chmod(&src.join("big"), 0o640);
    for (way, dest) in dests.iter().enumerate() {
        // -n lists both, changes nothing.
        let out = run(&["-n"], way);
        assert_eq!(out.status.code(), Some(0), "way {way}: {}", text(&out));
        let listed = String::from_utf8_lossy(&out.stdout).to_string();
        for f in ["etc/issue", "big"] {
            assert!(
                listed.lines().any(|l| l.starts_with("would ") && l.contains(f)),
                "way {way}: -n does not list {f}:\n{listed}"
            );
        }
        assert!(!listed.contains("etc/motd"), "way {way}: an unchanged file listed:\n{listed}");
        assert_eq!(mode(&dest.join("etc/issue")), 0o644, "way {way}: a dry run changed a mode");
        // The run applies both, and -v lists them.
        let out = run(&["-v"], way);
        assert_eq!(out.status.code(), Some(0), "way {way}: {}", text(&out));
        let said = text(&out);
        for f in ["etc/issue", "big"] {
            assert!(said.lines().any(|l| l.ends_with(f)), "way {way}: -v does not list {f}:\n{said}");
        }
        assert!(!said.lines().any(|l| l.ends_with("etc/motd")), "way {way}: an unchanged file listed:\n{said}");
        assert_eq!(mode(&dest.join("etc/issue")), 0o600, "way {way}: {}", text(&out));
        assert_eq!(mode(&dest.join("big")), 0o640, "way {way}: {}", text(&out));
        assert_eq!(fs::read(dest.join("big")).unwrap(), fs::read(src.join("big")).unwrap(), "way {way}");
        // Converged: the next run has nothing to do.
        let (files, skipped) = counts(&run(&["--json"], way));
        assert_eq!((files, skipped), (0, 3), "way {way}");
    }
    let r = rsync(&["-aH", "--delete", &format!("{}/", s(&src)), s(&theirs)]);
    assert!(r.status.success(), "{}", text(&r));
    for dest in dests {
        assert_eq!(snapshot(dest), snapshot(&theirs), "{}", dest.display());
    }

    // Counted: a mode change is a file the run changed, not one "up to date". With -c, also a
    // time changed without the content (rsync -c sets it too).
    chmod(&src.join("etc/issue"), 0o604);
    chmod(&src.join("big"), 0o604);
    let motd = fs::File::options().write(true).open(src.join("etc/motd")).unwrap();
    motd.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000)).unwrap();
    drop(motd);
    for (way, dest) in dests.iter().enumerate() {
        let out = run(&["-c", "--json"], way);
        let (files, skipped) = counts(&out);
        assert_eq!((files, skipped), (3, 0), "way {way}: three files changed");
        // The large file's data was not sent again: the receiver held all of it.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["resumed_bytes"].as_u64(), Some(300 << 10), "way {way}: {v}");
        assert_eq!((mode(&dest.join("etc/issue")), mode(&dest.join("big"))), (0o604, 0o604), "way {way}");
        let m = fs::metadata(dest.join("etc/motd")).unwrap();
        assert_eq!(m.mtime(), 1_000_000_000, "way {way}: -c left the time of an up-to-date file");
        assert_eq!(counts(&run(&["-c", "--json"], way)), (0, 3), "way {way}: converged");
    }
}

/// `(files, skipped files)` of a `--json` run that succeeded.
fn counts(out: &Output) -> (u64, u64) {
    assert_eq!(out.status.code(), Some(0), "{}", text(out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)));
    (v["files"].as_u64().unwrap(), v["skipped"]["files"].as_u64().unwrap())
}

/// What the destination holds before the copy, per top-level name: each case a type change
/// rsync handles its own way. `outside` (beside the destinations) must survive every run.
fn old_dest(d: &Path, outside: &Path) {
    fs::create_dir_all(d).unwrap();
    // A file that became a directory.
    fs::write(d.join("f2d"), b"old file").unwrap();
    // A directory (not empty, holding a symlink to something outside) that became a file.
    fs::create_dir_all(d.join("d2f/sub")).unwrap();
    fs::write(d.join("d2f/sub/x"), b"x").unwrap();
    symlink(outside, d.join("d2f/out")).unwrap();
    // An empty directory that became a file.
    fs::create_dir(d.join("e2f")).unwrap();
    // A file that became a symlink.
    fs::write(d.join("f2l"), b"old file").unwrap();
    // A symlink (to a directory outside) that became a directory.
    symlink(outside, d.join("l2d")).unwrap();
    // A directory that became a symlink, one that became a FIFO, and one that became a file of
    // several chunks (received through the working directory).
    for n in ["d2l", "d2p", "d2big"] {
        fs::create_dir(d.join(n)).unwrap();
        fs::write(d.join(n).join("y"), b"y").unwrap();
    }
    // A directory that became a file, in a subdirectory.
    fs::create_dir_all(d.join("sub/d2f/deep")).unwrap();
}

fn new_src(src: &Path) {
    fs::create_dir_all(src.join("f2d")).unwrap();
    fs::write(src.join("f2d/inside"), b"now a directory").unwrap();
    fs::write(src.join("d2f"), b"now a file").unwrap();
    fs::write(src.join("e2f"), b"now a file too").unwrap();
    symlink("f2d/inside", src.join("f2l")).unwrap();
    fs::create_dir(src.join("l2d")).unwrap();
    fs::write(src.join("l2d/real"), b"a real directory").unwrap();
    symlink("target", src.join("d2l")).unwrap();
    let fifo = Command::new("mkfifo").arg(src.join("d2p")).output().unwrap();
    assert!(fifo.status.success(), "{}", text(&fifo));
    crate::support::noise(&src.join("d2big"), 200 << 10);
    fs::create_dir(src.join("sub")).unwrap();
    fs::write(src.join("sub/d2f"), b"deeper file").unwrap();
    for p in ["f2d", "l2d", "sub"] {
        chmod(&src.join(p), 0o750);
    }
    chmod(&src.join("d2f"), 0o600);
}

#[test]
fn a_type_change_converges_as_rsync_does_with_and_without_delete_pushed_and_pulled() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let src = root.join("src");
    new_src(&src);
    let outside = t.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("precious"), b"never touched").unwrap();
    let served = Served::start(&root, &t.path().join("key"));
    let from = format!("{}/", s(&src));
    for delete in [false, true] {
        let mut args = vec!["-a", "--chunk-size", "64K"];
        if delete {
            args.push("--delete");
        }
        let tag = if delete { "delete" } else { "plain" };
        let theirs = t.path().join(format!("rsync-{tag}"));
        old_dest(&theirs, &outside);
        let r = rsync(&[&args[..1], &args[3..], &[&from, s(&theirs)]].concat());
        // rsync: with --delete everything is replaced (0); without, the directories that hold
        // something stay and are reported (23: "could not make way ...").
        let want = if delete { 0 } else { 23 };
        assert_eq!(r.status.code(), Some(want), "rsync {args:?}: {}", text(&r));
        let expected = snapshot(&theirs);
        let ours = [
            (t.path().join(format!("local-{tag}")), 0),
            (root.join(format!("pushed-{tag}")), 1),
            (t.path().join(format!("pulled-{tag}")), 2),
        ];
        for (dest, way) in &ours {
            old_dest(dest, &outside);
            let out = match way {
                0 => cp(&[&args[..], &["-q", &from, s(dest)]].concat()),
                1 => served.cp(&[&args[..], &["-q"]].concat(), &from, &served.at(&format!("pushed-{tag}"))),
                _ => served.cp(&[&args[..], &["-q"]].concat(), &served.at("src/"), s(dest)),
            };
            // linerate: 0, or 1 (some entries not copied, each reported) where rsync says 23.
            let want = if delete { 0 } else { 1 };
            assert_eq!(out.status.code(), Some(want), "{tag}, way {way}: {}", text(&out));
            assert_eq!(snapshot(dest), expected, "{tag}, way {way}: not what rsync made\n{}", text(&out));
            if !delete {
                let said = text(&out);
                for n in ["d2f", "d2l", "d2p", "d2big"] {
                    let reported = said.lines().any(|l| l.contains(n) && l.contains("not empty"));
                    assert!(reported, "{tag}, way {way}: {n} not reported\n{said}");
                }
            }
            // Converged: a second run changes nothing more (and fails the same way without --delete).
            let again = match way {
                0 => cp(&[&args[..], &["-q", &from, s(dest)]].concat()),
                1 => served.cp(&[&args[..], &["-q"]].concat(), &from, &served.at(&format!("pushed-{tag}"))),
                _ => served.cp(&[&args[..], &["-q"]].concat(), &served.at("src/"), s(dest)),
            };
            assert_eq!(again.status.code(), Some(want), "{tag}, way {way}, again: {}", text(&again));
            assert_eq!(snapshot(dest), expected, "{tag}, way {way}, again");
        }
        assert_eq!(fs::read(outside.join("precious")).unwrap(), b"never touched");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1, "{tag}: something was made outside");
    }
}
