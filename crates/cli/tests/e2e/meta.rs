//! rsync -a's promises beyond modes and times (issue 31): owners and groups (`-a`, `-o`, `-g`,
//! `--numeric-ids`, mapped by name), devices, FIFOs and sockets (`-D`, skipped quietly without
//! it), a daemon that refuses them without its operator's opt-in, and `-X`/`-A` said to be not
//! kept. Owners and devices need root: these tests are `#[ignore = "needs root"]` and fail without it (see `support::require_root`).

use std::fs;
use std::os::unix::fs::{chown, lchown, symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{require_root, Daemon};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"));
    c.arg("cp").arg("--no-save").env("LINERATE_DB", "/nonexistent/linerate-meta-test.sqlite");
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `linerate cp ARGS` (no run saved).
fn cp(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `(uid, gid)` of `p` itself (a symlink is not followed).
fn owner(p: &Path) -> (u32, u32) {
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid())
}

/// A tree with other owners: `f` 65534:65534 set-user-ID, `d` 1:2 holding `g` 3:4, symlink `l`
/// 5:6.
fn owned_tree(root: &Path) -> PathBuf {
    let src = root.join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("f"), b"nobody's").unwrap();
    fs::write(src.join("d/g"), b"g").unwrap();
    symlink("f", src.join("l")).unwrap();
    chown(src.join("f"), Some(65534), Some(65534)).unwrap();
    fs::set_permissions(src.join("f"), fs::Permissions::from_mode(0o4755)).unwrap();
    chown(src.join("d"), Some(1), Some(2)).unwrap();
    chown(src.join("d/g"), Some(3), Some(4)).unwrap();
    lchown(src.join("l"), Some(5), Some(6)).unwrap();
    src
}

#[test]
#[ignore = "needs root"]
fn archive_keeps_the_owners_of_files_directories_and_symlinks_as_root() {
    require_root("keeping owners (chown)");
    let t = tempfile::tempdir().unwrap();
    let src = owned_tree(t.path());
    let a = t.path().join("a");
    let out = cp(&["-q", "-a", s(&src), s(&a)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(owner(&a.join("src/f")), (65534, 65534));
    assert_eq!(owner(&a.join("src/d")), (1, 2));
    assert_eq!(owner(&a.join("src/d/g")), (3, 4));
    assert_eq!(owner(&a.join("src/l")), (5, 6), "the symlink itself (lchown)");
    assert_eq!(owner(&a.join("src")), (0, 0), "the source root's own owner");
    let mode = fs::metadata(a.join("src/f")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o4755, "set-user-ID kept with its owner, as rsync -a as root");

    // A rerun with nothing to send still fixes an owner changed since (as rsync -a).
    chown(src.join("d/g"), Some(30), Some(40)).unwrap();
    let out = cp(&["-q", "-a", s(&src), s(&a)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(owner(&a.join("src/d/g")), (30, 40), "an up-to-date file's owner");
    assert_eq!(fs::read(a.join("src/d/g")).unwrap(), b"g");

    // Without -a/-o/-g: everything belongs to the receiving user, and no set-user-ID bit.
    let plain = t.path().join("plain");
    let out = cp(&["-q", s(&src), s(&plain)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for e in ["src/f", "src/d", "src/d/g", "src/l"] {
        assert_eq!(owner(&plain.join(e)), (0, 0), "{e}");
    }
    let mode = fs::metadata(plain.join("src/f")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "set-user-ID never taken without the owner");

    // -o alone keeps owners, not groups; -g alone groups, not owners; and set-user-ID bits
    // only with both.
    let o = t.path().join("o");
    let out = cp(&["-q", "-o", s(&src), s(&o)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(owner(&o.join("src/f")), (65534, 0));
    assert_eq!(owner(&o.join("src/l")), (5, 0));
    assert_eq!(fs::metadata(o.join("src/f")).unwrap().permissions().mode() & 0o7777, 0o755);
    let g = t.path().join("g");
    let out = cp(&["-q", "-g", s(&src), s(&g)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(owner(&g.join("src/d")), (0, 2));
    assert_eq!(owner(&g.join("src/d/g")), (0, 40));

    // --no-owner takes -a's -o back.
    let n = t.path().join("n");
    let out = cp(&["-q", "-a", "--no-owner", s(&src), s(&n)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(owner(&n.join("src/f")), (0, 65534));
}

/// A user and group created for one test and removed when dropped, even when the test fails.
struct Throwaway {
    name: String,
}

impl Throwaway {
    fn new(id: u32) -> Throwaway {
        let name = format!("lrt{}x{}", std::process::id(), id);
        let ok = |c: &mut Command| {
            let o = c.output().unwrap();
            assert!(o.status.success(), "{c:?}: {}", text(&o));
        };
        ok(Command::new("groupadd").args(["-g", &id.to_string(), &name]));
        let t = Throwaway { name };
        ok(Command::new("useradd").args(["-M", "-N", "-u", &id.to_string(), "-g", &id.to_string(), &t.name]));
        t
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
        let _ = Command::new("groupdel").arg(&self.name).output();
    }
}

/// `/etc/passwd` and `/etc/group` as they are, with `name`'s ids replaced by `id` (the receiver's
/// view of the same user), written into `dir`.
fn remapped_ids(dir: &Path, name: &str, id: u32) -> (PathBuf, PathBuf) {
    let remap = |file: &str, out: PathBuf| {
        let text: String = fs::read_to_string(file)
            .unwrap()
            .lines()
            .map(|l| {
                let mut f: Vec<String> = l.split(':').map(str::to_string).collect();
                if f.first().is_some_and(|n| n == name) {
                    f[2] = id.to_string();
                    if file.ends_with("passwd") {
                        f[3] = id.to_string();
                    }
                }
                f.join(":") + "\n"
            })
            .collect();
        fs::write(&out, text).unwrap();
        out
    };
    (remap("/etc/passwd", dir.join("passwd")), remap("/etc/group", dir.join("group")))
}

#[test]
#[ignore = "needs root"]
fn owners_map_by_name_unless_numeric_ids() {
    require_root("mapping owners by name (useradd, a mount namespace)");
    let t = tempfile::tempdir().unwrap();
    // The sender's user has one id; the receiver (a daemon in a mount namespace whose
    // /etc/passwd and /etc/group say otherwise) knows the same name under another id.
    let sender_id = 47000 + std::process::id() % 1000;
    let receiver_id = sender_id + 1000;
    let who = Throwaway::new(sender_id);
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("named"), b"n").unwrap();
    chown(src.join("named"), Some(sender_id), Some(sender_id)).unwrap();
    fs::write(src.join("unnamed"), b"u").unwrap();
    chown(src.join("unnamed"), Some(64999), Some(64998)).unwrap();
    let (passwd, group) = remapped_ids(t.path(), &who.name, receiver_id);
    let key = t.path().join("key");
    let k = Command::new(env!("CARGO_BIN_EXE_linerate")).arg("keygen").arg(&key).output().unwrap();
    assert!(k.status.success(), "{}", text(&k));
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    let script = format!(
        "mount --bind {} /etc/passwd && mount --bind {} /etc/group && exec {} serve --listen 127.0.0.1:0 \
         --key-file {} --root {} --announce --keep-owners",
        s(&passwd),
        s(&group),
        env!("CARGO_BIN_EXE_linerate"),
        s(&key),
        s(&root)
    );
    let mut server = Command::new("unshare");
    server.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let daemon = Daemon::start(server);
    let run = |extra: &[&str], dest: &str| {
        let mut args = vec!["-q", "--key-file", s(&key)];
        args.extend_from_slice(extra);
        let d = format!("{}:{dest}", daemon.addr);
        args.extend_from_slice(&[s(&src), &d]);
        cp(&args)
    };
    let by_name = run(&["-o", "-g"], "names");
    let numeric = run(&["-o", "-g", "--numeric-ids"], "numbers");
    drop(daemon);
    assert_eq!(by_name.status.code(), Some(0), "{}", text(&by_name));
    assert_eq!(numeric.status.code(), Some(0), "{}", text(&numeric));
    assert_eq!(owner(&root.join("names/src/named")), (receiver_id, receiver_id), "mapped by name");
    assert_eq!(owner(&root.join("names/src/unnamed")), (64999, 64998), "no name: the number");
    assert_eq!(owner(&root.join("numbers/src/named")), (sender_id, sender_id), "--numeric-ids: the number");
    assert_eq!(owner(&root.join("numbers/src/unnamed")), (64999, 64998));
}

/// `stat`'s file type and device number of `p`: (S_IFMT bits, rdev).
fn kind(p: &Path) -> (u32, u64) {
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.mode() & 0o170000, m.rdev())
}

#[test]
#[ignore = "needs root"]
fn fifos_and_devices_arrive_with_d_as_root_and_are_skipped_with_one_note_without() {
    require_root("creating device nodes (mknod)");
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("regular"), b"r").unwrap();
    let null = fs::metadata("/dev/null").unwrap();
    let mk = |args: &[&str]| {
        let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    };
    let (major, minor) = ((null.rdev() >> 8) & 0xfff, (null.rdev() & 0xff) | ((null.rdev() >> 12) & !0xff));
    mk(&["mknod", s(&src.join("null")), "c", &major.to_string(), &minor.to_string()]);
    mk(&["mkfifo", "-m", "0640", s(&src.join("fifo"))]);
    chown(src.join("fifo"), Some(7), Some(8)).unwrap();

    let with = t.path().join("with");
    let out = cp(&["-q", "-a", s(&src), s(&with)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(kind(&with.join("src/null")), (0o020000, null.rdev()), "a character device, /dev/null's number");
    assert_eq!(kind(&with.join("src/fifo")).0, 0o010000, "a FIFO");
    assert_eq!(owner(&with.join("src/fifo")), (7, 8));
    assert_eq!(fs::symlink_metadata(with.join("src/fifo")).unwrap().mode() & 0o7777, 0o640);
    let d = t.path().join("d");
    let out = cp(&["-q", "-D", s(&src), s(&d)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(kind(&d.join("src/null")).0, 0o020000);

    // Without -D: skipped, exit 0 (as rsync), one note for both, no line per file.
    let without = t.path().join("without");
    let out = bin().args([s(&src), s(&without)]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("non-regular")).collect();
    assert_eq!(notes, ["linerate: skipped 2 non-regular files (device, FIFO or socket): -D copies them"], "{err}");
    assert!(!err.contains("fifo") && !err.contains("null"), "a line per file: {err}");
    assert!(without.join("src/regular").exists());
    assert!(fs::symlink_metadata(without.join("src/fifo")).is_err());
    assert!(fs::symlink_metadata(without.join("src/null")).is_err());
    // --specials alone: the FIFO, not the device.
    let sp = t.path().join("sp");
    let out = cp(&["-q", "--specials", s(&src), s(&sp)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(kind(&sp.join("src/fifo")).0, 0o010000);
    assert!(fs::symlink_metadata(sp.join("src/null")).is_err());
}

/// A scratch directory holding `src/f`.
fn one_file_tree() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"f").unwrap();
    (t, src)
}

#[test]
fn a_daemon_refuses_owners_and_devices_without_its_operators_opt_in() {
    let (t, src) = one_file_tree();
    let key = t.path().join("key");
    let k = Command::new(env!("CARGO_BIN_EXE_linerate")).arg("keygen").arg(&key).output().unwrap();
    assert!(k.status.success(), "{}", text(&k));
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    let daemon = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"));
        c.args(["serve", "--listen", "127.0.0.1:0", "--key-file", s(&key), "--root", s(&root), "--announce"]);
        c.args(extra);
        Daemon::start(c)
    };
    let plain = daemon(&[]);
    let to = |d: &Daemon, flag: &str, dest: &str| {
        cp(&["-q", "--key-file", s(&key), flag, s(&src), &format!("{}:{dest}", d.addr)])
    };
    let owners = to(&plain, "-o", "o");
    let groups = to(&plain, "-g", "g");
    let devices = to(&plain, "-D", "d");
    let neither = to(&plain, "-r", "r");
    drop(plain);
    for (o, flag) in [(&owners, "--keep-owners"), (&groups, "--keep-owners"), (&devices, "--allow-devices")] {
        assert_eq!(o.status.code(), Some(2), "{}", text(o));
        let msg = text(o);
        assert!(msg.contains("this server does not") && msg.contains(flag), "{msg}");
    }
    assert!(!root.join("o").exists() && !root.join("d").exists(), "refused before anything was written");
    assert_eq!(neither.status.code(), Some(0), "{}", text(&neither));

    let open = daemon(&["--keep-owners", "--allow-devices"]);
    let owners = to(&open, "-o", "o");
    let devices = to(&open, "-D", "d");
    drop(open);
    assert_eq!(owners.status.code(), Some(0), "{}", text(&owners));
    assert_eq!(devices.status.code(), Some(0), "{}", text(&devices));
}

#[test]
fn xattrs_and_acls_are_said_to_be_not_kept() {
    let (t, src) = one_file_tree();
    let out = cp(&["-q", "-X", "-A", s(&src), s(&t.path().join("dst"))]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("-X and -A") && err.contains("not kept"), "{err}");
    assert!(t.path().join("dst/src/f").exists());
}
