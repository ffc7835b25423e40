//! Who may do what: shared secrets ([`secret`]), daemon mode's ed25519 identities and known hosts
//! ([`keys`]), and the server's authorized keys with their per-key root, access and rate
//! ([`authorized`]), and which of them the flags name ([`credentials`]).

pub mod authorized;
pub mod credentials;
pub mod keys;
pub mod secret;

use crate::EngineError;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Refuse a file holding a secret (`what`: "key file", "private key file") that group or others
/// may read, as ssh does.
fn check_private(path: &Path, what: &str) -> Result<(), EngineError> {
    check_private_mode(path, what, false)
}

/// [`check_private`], except that with `own_group` a file its group may read (not write) is
/// accepted when that group is this process's effective group: how Kubernetes mounts a Secret
/// for a pod with `fsGroup` (root:fsGroup, mode 0440).
fn check_private_mode(path: &Path, what: &str, own_group: bool) -> Result<(), EngineError> {
    let meta = std::fs::metadata(path).map_err(|e| EngineError::file(path, e))?;
    let ours = own_group && meta.gid() == rustix::process::getegid().as_raw();
    let forbidden = if ours { 0o037 } else { 0o077 };
    if meta.mode() & forbidden != 0 {
        return Err(EngineError::Secret(format!(
            "{}: {what} is accessible by group or others (mode {:o}); run `chmod 600 {}`",
            path.display(),
            meta.mode() & 0o777,
            path.display()
        )));
    }
    Ok(())
}
