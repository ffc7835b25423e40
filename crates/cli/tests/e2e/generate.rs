//! `linerate generate`: the completion scripts load in their shell and the man pages render
//! with man(1), warning-free, for every command.

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
}

fn generate(what: &[&str]) -> String {
    let out = bin().arg("generate").args(what).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `tool` on PATH, or a loud failure naming the packages that provide it: a test that cannot
/// check what it is for must not pass.
fn need(tool: &str, packages: &str) {
    let found = Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().unwrap();
    assert!(found.status.success(), "{tool} is not installed; this test needs it (apt-get install {packages})");
}

#[test]
fn the_bash_completion_loads_and_offers_the_subcommands_and_their_flags() {
    need("bash", "bash");
    let script = generate(&["complete-bash"]);
    for word in ["cp", "serve", "bench", "mesh", "report", "generate", "--bwlimit", "--log-format", "complete-zsh"] {
        assert!(script.contains(word), "{word} missing from the bash completion");
    }
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("linerate.bash");
    std::fs::write(&file, &script).unwrap();
    let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(syntax.status.success(), "bash -n: {}", String::from_utf8_lossy(&syntax.stderr));
    // Sourced, it registers a completion for linerate, and completing `linerate cp --bw` offers
    // --bwlimit.
    let probe = format!(
        "source {}; complete -p linerate >/dev/null || exit 9; COMP_WORDS=(linerate cp --bw); COMP_CWORD=2; \
         COMP_LINE='linerate cp --bw'; COMP_POINT=${{#COMP_LINE}}; _linerate linerate --bw cp; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file.display()
    );
    let out = Command::new("bash").arg("-c").arg(probe).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let offered = String::from_utf8(out.stdout).unwrap();
    assert_eq!(offered.trim(), "--bwlimit", "{offered}");
}

#[test]
fn every_shell_gets_a_script_naming_linerate() {
    for shell in ["complete-zsh", "complete-fish", "complete-powershell", "complete-elvish"] {
        let script = generate(&[shell]);
        assert!(script.contains("linerate") && script.contains("bwlimit"), "{shell}: {script}");
    }
    let out = bin().args(["generate", "complete-bash", "--dir", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "--dir without man");
}

/// Render `page` with man(1), groff's warnings on; returns the text, failing on any warning.
fn render(page: &Path) -> String {
    need("man", "man-db groff-base");
    let out: Output = Command::new("man").args(["--warnings", "-l"]).arg(page).env("MANWIDTH", "100").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.is_empty(), "man -l {}: {err}", page.display());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_man_pages_render_without_warnings_and_cover_the_subcommands() {
    let t = tempfile::tempdir().unwrap();
    let top = t.path().join("linerate.1");
    std::fs::write(&top, generate(&["man"])).unwrap();
    let text = render(&top);
    for want in ["NAME", "SYNOPSIS", "SUBCOMMANDS", "linerate-cp(1)", "linerate-serve(1)", "linerate-generate(1)"] {
        assert!(text.contains(want), "{want} missing from linerate(1):\n{text}");
    }
    // One page per command and subcommand, each rendering cleanly.
    let dir = t.path().join("man1");
    let listed = generate(&["man", "--dir", dir.to_str().unwrap()]);
    let pages: Vec<&str> = listed.lines().collect();
    for name in ["linerate.1", "linerate-cp.1", "linerate-serve.1", "linerate-lab-run.1", "linerate-report-show.1"] {
        assert!(pages.iter().any(|p| p.ends_with(&format!("/{name}"))), "{name} not written: {listed}");
    }
    for page in &pages {
        render(Path::new(page));
    }
    let serve = render(&dir.join("linerate-serve.1"));
    assert!(serve.contains("--log-format") && serve.contains("SYNOPSIS"), "{serve}");
    let cp = render(&dir.join("linerate-cp.1"));
    assert!(cp.contains("--bwlimit"), "{cp}");
}
