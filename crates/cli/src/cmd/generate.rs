//! `linerate generate`: shell completions and man pages made from the clap definitions, so they
//! never drift from the flags (ripgrep's `rg --generate`). Packagers and users install them
//! from the binary they have.

use crate::error::ResultExt;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// Bash completion script.
    CompleteBash,
    /// Zsh completion script.
    CompleteZsh,
    /// Fish completion script.
    CompleteFish,
    /// PowerShell completion script.
    CompletePowershell,
    /// Elvish completion script.
    CompleteElvish,
    /// Man page of `linerate` (roff); with --dir, one page per command and subcommand.
    Man,
}

/// `linerate generate` flags.
#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// What to print on standard output.
    #[arg(value_enum)]
    what: What,
    /// With `man`: write linerate.1 and a page per subcommand (linerate-cp.1, linerate-lab-run.1,
    /// …) into DIR instead, printing their names.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Run `linerate generate` for the command line `cmd`: `--dir` without `man` is usage; a page
/// or script that cannot be written is [`crate::error::Kind::Io`].
pub fn run_generate(a: GenerateArgs, cmd: clap::Command) -> crate::error::Result {
    match (a.what.shell(), &a.dir) {
        (Some(shell), None) => completion(cmd, shell),
        (Some(_), Some(_)) => Err(crate::error::Error::usage("--dir goes with `man` only")),
        (None, None) => man_page(cmd),
        (None, Some(dir)) => man_pages(cmd, dir).io(),
    }
}

impl What {
    /// The shell a completion script is for; `None` for the man page.
    fn shell(self) -> Option<Shell> {
        match self {
            What::CompleteBash => Some(Shell::Bash),
            What::CompleteZsh => Some(Shell::Zsh),
            What::CompleteFish => Some(Shell::Fish),
            What::CompletePowershell => Some(Shell::PowerShell),
            What::CompleteElvish => Some(Shell::Elvish),
            What::Man => None,
        }
    }
}

fn completion(mut cmd: clap::Command, shell: Shell) -> crate::error::Result {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "linerate", &mut out);
    crate::out::bytes(crate::out::To::Out, &out)
}

fn man_page(cmd: clap::Command) -> crate::error::Result {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out).context("rendering the man page").io()?;
    crate::out::bytes(crate::out::To::Out, &out)
}

fn man_pages(cmd: clap::Command, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir).with_context(|| format!("writing man pages into {}", dir.display()))?;
    let mut names: Vec<_> = std::fs::read_dir(dir)?.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    names.sort();
    for n in names.iter().filter(|n| n.to_string_lossy().ends_with(".1")) {
        outln!("{}", dir.join(n).display())?;
    }
    Ok(())
}
