//! One module per subcommand: its flags (clap `Args`) and its `run`, which turns them into
//! engine, lab or report calls and returns `Ok(())` or an [`crate::error::Error`] with its kind
//! (`main` alone maps the kind to an exit code). Shared pieces live beside `cmd/`: key flags
//! (`keys`), the copy runner (`transfer`), ssh sessions (`ssh`), the progress bar (`progress`)
//! and the error type (`error`).

pub mod bench;
pub mod cache;
pub mod clean;
pub mod cp;
pub mod demo;
pub mod doctor;
pub mod generate;
pub mod keygen;
pub mod lab;
pub mod mesh;
pub mod mktree;
pub mod report;
pub mod serve;
