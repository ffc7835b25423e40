//! `cp --exclude/--include/--exclude-from` beside rsync doing the same: each case copies one tree
//! with both tools and the same rules, and the two results must be identical (`diff -r`); the
//! push walks locally, the pull has the server walk, and `--delete` keeps excluded names.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_linerate"));
    c.env("LINERATE_DB", std::env::temp_dir().join("linerate-e2e-filter-unused.sqlite"));
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A tree with what people exclude: build output, dependencies, temporaries.
fn tree(root: &Path) {
    for f in [
        "a.c",
        "a.o",
        "lib/b.o",
        "lib/keep.o",
        "web/app.js",
        "web/node_modules/pkg/x.js",
        "web/node_modules/.bin/tool",
        "build/out.bin",
        "sub/build/in.txt",
        "doc/x.tmp",
        "doc/deep/y.tmp",
        "doc/readme",
        "{a,b}",
    ] {
        let p = root.join(f);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, f.as_bytes()).unwrap();
    }
    fs::create_dir_all(root.join("node_modules")).unwrap(); // a directory that holds nothing
    fs::write(root.join("sub/node_modules"), b"a file, not a directory").unwrap();
}

/// `rsync -rlt ARGS`, failing loudly when rsync is missing (`.ci/run` installs it).
fn rsync(args: &[&str], src: &Path, dest: &Path) {
    let out = Command::new("rsync")
        .arg("-rlt")
        .args(args)
        .arg(src)
        .arg(dest)
        .output()
        .unwrap_or_else(|e| panic!("rsync is needed to compare with (apt-get install rsync): {e}"));
    assert!(out.status.success(), "rsync {args:?}: {}", text(&out));
}

/// Whether two trees hold the same names and contents (`diff -r`, which also compares symlinks).
fn diff(a: &Path, b: &Path) {
    let out = Command::new("diff").arg("-r").arg(a).arg(b).output().unwrap();
    assert!(out.status.success(), "the trees differ:\n{}", text(&out));
}

fn files(root: &Path) -> Vec<String> {
    let mut v = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            v.push(p.strip_prefix(root).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    v.sort();
    v
}

fn cp(args: &[&str], src: &Path, dest: &Path) -> Output {
    bin().args(["cp", "--no-save", "-q"]).args(args).arg(src).arg(dest).output().unwrap()
}

#[test]
fn a_push_excludes_what_rsync_excludes_with_the_same_rules() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    tree(&src);
    fs::write(t.path().join("rules"), "# build output\n; and temporaries\n\n- *.o\n*.tmp\n").unwrap();
    let from = t.path().join("rules").display().to_string();
    let cases: &[(&[&str], bool)] = &[
        (&["--include", "keep.o", "--exclude", "node_modules/", "--exclude", "*.o"], false),
        (&["--exclude", "*.o", "--include", "keep.o"], false),
        (&["--exclude", "/src/build"], false),
        (&["--exclude", "/build", "--exclude", "doc/*.tmp"], true),
        // Not the top of the copied tree, which is src: nothing excluded, in both.
        (&["--exclude", "/build"], false),
        (&["--exclude", "build/"], true),
        (&["--exclude", "/doc/**"], true),
        (&["--exclude", "doc/***", "--exclude", "{a,b}"], true),
        (&["--exclude", "/src/**/in.txt", "--exclude", "?.c"], false),
        (&["--include", "*/", "--include", "*.c", "--exclude", "*"], false),
        (&["--exclude-from", &from, "--include", "keep.o"], true),
        (&["--include", "keep.o", "--exclude-from", &from], true),
    ];
    for (i, (args, contents)) in cases.iter().enumerate() {
        let (ours, theirs) = (t.path().join(format!("lr{i}")), t.path().join(format!("rs{i}")));
        let source = if *contents { src.join("") } else { src.clone() };
        let out = cp(args, &source, &ours);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
        rsync(args, &source, &theirs);
        diff(&ours, &theirs);
        let excluded = files(&ours).len() < files(&src).len() + usize::from(!contents);
        assert_eq!(excluded, *args != ["--exclude", "/build"] || *contents, "{args:?}");
    }
    // Excluded files are neither sent nor counted.
    let out = bin()
        .args(["cp", "--no-save", "--json", "--exclude", "*.o", "--exclude", "node_modules/"])
        .arg(&src)
        .arg(t.path().join("counted"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 13 files less a.o, lib/b.o, lib/keep.o and the two in web/node_modules; sub/node_modules
    // is a file, so "node_modules/" keeps it.
    assert_eq!((v["files"].as_u64(), v["errors"]["local"].as_u64()), (Some(9), Some(0)), "{v}");
}

#[test]
fn an_excluded_directory_is_not_walked() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    tree(&src);
    // Without -D the walk counts a FIFO it meets as skipped, and says so once: a run without
    // that note proves it never looked inside node_modules.
    let fifo = src.join("web/node_modules/pkg/pipe");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // Not quiet (-q would hide the note).
    let cp_noted =
        |args: &[&str], dest: &Path| bin().args(["cp", "--no-save"]).args(args).arg(&src).arg(dest).output().unwrap();
    let out = cp_noted(&[], &t.path().join("all"));
    assert!(
        text(&out).contains("skipped 1 non-regular file"),
        "the control: unfiltered, the walk meets the FIFO: {}",
        text(&out)
    );
    let out = cp_noted(&["-v", "--exclude", "node_modules/"], &t.path().join("d"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("non-regular") && !text(&out).contains("web/node_modules"), "{}", text(&out));
    assert!(!t.path().join("d/src/web/node_modules").exists());
    assert!(t.path().join("d/src/sub/node_modules").is_file(), "a file named like the directory rule stays");
}

#[test]
fn delete_keeps_excluded_names_unless_delete_excluded() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    tree(&src);
    let stale = |d: &Path| {
        for f in ["old.txt", "cache.o", "lib/gone.o", "web/node_modules/left/over.js", "web/stale.js"] {
            let p = d.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, b"stale").unwrap();
        }
    };
    for extra in [&[][..], &["--delete-excluded"][..]] {
        let (ours, theirs) = (t.path().join("lr"), t.path().join("rs"));
        let _ = (fs::remove_dir_all(&ours), fs::remove_dir_all(&theirs));
        stale(&ours);
        stale(&theirs);
        let mut args = vec!["--delete", "--exclude", "*.o", "--exclude", "node_modules/"];
        args.extend(extra);
        let out = cp(&args, &src.join(""), &ours);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        rsync(&args, &src.join(""), &theirs);
        diff(&ours, &theirs);
        assert!(!ours.join("old.txt").exists() && !ours.join("web/stale.js").exists());
        let kept = ours.join("cache.o").exists() && ours.join("web/node_modules/left/over.js").exists();
        assert_eq!(kept, extra.is_empty(), "{extra:?}: excluded names kept only without --delete-excluded");
    }
}

/// A `linerate serve` with a key, on loopback; killed when dropped.
struct Serve(Child, String);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(root: &Path, key: &Path) -> Serve {
    let out = bin().arg("keygen").arg(key).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mut child = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--announce", "--quiet", "--root"])
        .arg(root)
        .arg("--key-file")
        .arg(key)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    Serve(child, addr)
}

#[test]
fn a_pull_has_the_server_walk_skip_what_the_rules_exclude() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    tree(&root.join("tree"));
    let key = t.path().join("key");
    let srv = serve(&root, &key);
    let cases: &[(&[&str], &str)] = &[
        (&["--include", "keep.o", "--exclude", "node_modules/", "--exclude", "*.o"], "tree"),
        (&["--exclude", "/tree/build", "--exclude", "doc/"], "tree"),
        (&["--exclude", "/build", "--exclude", "**/*.tmp"], "tree/"),
    ];
    for (i, (args, from)) in cases.iter().enumerate() {
        let (ours, theirs) = (t.path().join(format!("lr{i}")), t.path().join(format!("rs{i}")));
        let out = bin()
            .args(["cp", "--no-save", "-q", "--key-file"])
            .arg(&key)
            .args(*args)
            .arg(format!("{}:{from}", srv.1))
            .arg(&ours)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
        rsync(args, &root.join(from), &theirs);
        diff(&ours, &theirs);
    }
    // --delete in a pull: the client's receiver keeps the local names the rules exclude.
    let local = t.path().join("lr0");
    fs::write(local.join("tree/extra"), b"x").unwrap();
    fs::write(local.join("tree/mine.o"), b"x").unwrap();
    let out = bin()
        .args(["cp", "--no-save", "-q", "--delete", "--exclude", "*.o", "--key-file"])
        .arg(&key)
        .arg(format!("{}:tree", srv.1))
        .arg(&local)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!local.join("tree/extra").exists() && local.join("tree/mine.o").exists());
}

#[test]
fn a_bad_pattern_or_rules_file_is_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    tree(&src);
    let out = cp(&["--exclude", "[a"], &src, &t.path().join("d"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("'[a'"), "{}", text(&out));
    let out = cp(&["--exclude-from", "/nonexistent/rules"], &src, &t.path().join("d"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(!t.path().join("d").exists(), "nothing was copied");
}
