//! Entry-name rules: which names a receiver accepts, how destination paths split, and how names
//! are shown to people without letting control characters through (scp CVE-2019-6109).

use crate::caps::{MAX_NAME, MAX_PATH};
use crate::ProtoError;

/// Accept one path component sent by a peer: non-empty, at most [`MAX_NAME`] bytes, not `.` or
/// `..`, and free of `/` and NUL. Anything else could address a place outside the entry's parent.
pub fn validate(name: &[u8]) -> Result<(), ProtoError> {
    if name.is_empty() {
        return Err(ProtoError::BadName("empty name"));
    }
    if name.len() > MAX_NAME {
        return Err(ProtoError::BadName("name longer than 255 bytes"));
    }
    if name == b"." || name == b".." {
        return Err(ProtoError::BadName("'.' or '..' as a name"));
    }
    if name.contains(&b'/') {
        return Err(ProtoError::BadName("name contains '/'"));
    }
    if name.contains(&0) {
        return Err(ProtoError::BadName("name contains NUL"));
    }
    Ok(())
}

/// How the receiver's working directory is named: this, then 32 lowercase hex digits (128
/// random bits), at the destination directory of a session. It holds resumable partial files and
/// their journals; no user's name is taken (a name of exactly this form is the only one a
/// receiver declines to write, see [`is_work_dir_name`]).
pub const WORK_DIR_PREFIX: &[u8] = b".linerate-work-";

/// Whether `name` has the form of a receiver's working directory: [`WORK_DIR_PREFIX`] and 32
/// lowercase hex digits. A receiver never writes an entry of that name for a peer (it reports the
/// entry and goes on), so a peer can neither write into a working directory nor plant one.
pub fn is_work_dir_name(name: &[u8]) -> bool {
    name.strip_prefix(WORK_DIR_PREFIX)
        .is_some_and(|hex| hex.len() == 32 && hex.iter().all(|&b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// Accept the name of an entry a peer declares in the tree: [`validate`]. No name is reserved:
/// the receiver's working files are unnamed or live in its working directory.
pub fn validate_entry(name: &[u8]) -> Result<(), ProtoError> {
    validate(name)
}

/// Accept a symlink target: non-empty, at most [`MAX_PATH`] bytes, no NUL. The target is stored
/// verbatim and never followed by the receiver.
pub fn validate_link_target(target: &[u8]) -> Result<(), ProtoError> {
    if target.is_empty() {
        return Err(ProtoError::BadName("empty symlink target"));
    }
    if target.len() > MAX_PATH {
        return Err(ProtoError::BadName("symlink target longer than 4096 bytes"));
    }
    if target.contains(&0) {
        return Err(ProtoError::BadName("symlink target contains NUL"));
    }
    Ok(())
}

/// Accept a user or group name a peer sent in an `IdName` frame: non-empty, at most
/// [`crate::caps::MAX_ID_NAME`] bytes, printable ASCII without `/`, `:` or a space (what
/// `useradd`/`groupadd` and NSS accept), not starting with `-`, and not all digits (a name that
/// looks like a number would be read as one by tools). The name is only looked up, never used as
/// a path.
pub fn validate_id_name(name: &[u8]) -> Result<(), ProtoError> {
    if name.is_empty() {
        return Err(ProtoError::BadName("empty user or group name"));
    }
    if name.len() > crate::caps::MAX_ID_NAME {
        return Err(ProtoError::BadName("user or group name longer than 255 bytes"));
    }
    if name.iter().any(|&b| !b.is_ascii_graphic() || b == b'/' || b == b':') {
        return Err(ProtoError::BadName("user or group name with a character other than printable ASCII"));
    }
    if name[0] == b'-' || name.iter().all(u8::is_ascii_digit) {
        return Err(ProtoError::BadName("user or group name starting with '-' or all digits"));
    }
    Ok(())
}

/// Split a destination path (relative to the server's root) into validated components. Empty
/// components and `.` are skipped, so `a//b/./c/` is `[a, b, c]` and `/` or `` is the root itself;
/// `..` anywhere is refused.
pub fn split_dest(path: &[u8]) -> Result<Vec<&[u8]>, ProtoError> {
    if path.len() > MAX_PATH {
        return Err(ProtoError::BadName("destination path longer than 4096 bytes"));
    }
    let mut parts = Vec::new();
    for part in path.split(|&b| b == b'/') {
        if part.is_empty() || part == b"." {
            continue;
        }
        validate(part)?;
        parts.push(part);
    }
    Ok(parts)
}

/// Render bytes for a terminal or log: valid UTF-8 is kept, control characters and invalid bytes
/// become `\xNN` escapes, and backslashes are doubled, so a name can never move the cursor, change
/// colours or forge a line of output.
pub fn escape(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for n in [&b"a"[..], b"file.txt", b"..hidden", b"...", "été".as_bytes(), &[0xff, 0xfe]] {
            assert_eq!(validate(n), Ok(()), "{n:?}");
        }
        assert_eq!(validate(&[b'x'; 255]), Ok(()));
    }

    #[test]
    fn rejects_dotdot_dot_empty_slash_nul_and_long_names() {
        for n in [&b""[..], b".", b"..", b"a/b", b"/etc", b"a\0b", &[b'x'; 256]] {
            assert!(matches!(validate(n), Err(ProtoError::BadName(_))), "{n:?}");
        }
    }

    #[test]
    fn splits_destination_paths_and_refuses_dotdot() {
        assert_eq!(split_dest(b"a//b/./c/").unwrap(), vec![&b"a"[..], b"b", b"c"]);
        assert!(split_dest(b"/").unwrap().is_empty());
        assert!(split_dest(b"").unwrap().is_empty());
        assert!(split_dest(b"a/../../x").is_err());
        assert!(split_dest(b"..").is_err());
        assert!(split_dest(&[b'a'; 4097]).is_err());
    }

    #[test]
    fn no_name_is_reserved_and_only_the_exact_working_directory_form_is_recognised() {
        for n in [&b".linerate-settings"[..], b".linerate-resume-0011223344556677.part", b".linerate-work-"] {
            assert_eq!(validate_entry(n), Ok(()), "{n:?}");
            assert!(!is_work_dir_name(n), "{n:?}");
        }
        assert!(is_work_dir_name(b".linerate-work-0123456789abcdef0123456789abcdef"));
        assert!(!is_work_dir_name(b".linerate-work-0123456789ABCDEF0123456789abcdef"), "upper case");
        assert!(!is_work_dir_name(b".linerate-work-0123456789abcdef0123456789abcde"), "31 digits");
        assert!(!is_work_dir_name(b".linerate-work-0123456789abcdef0123456789abcdef0"), "33 digits");
    }

    #[test]
    fn link_targets_may_not_hold_nul_or_be_empty() {
        assert!(validate_link_target(b"../x/y").is_ok());
        assert!(validate_link_target(b"").is_err());
        assert!(validate_link_target(b"a\0").is_err());
        assert!(validate_link_target(&[b'a'; 4097]).is_err());
    }

    #[test]
    fn escape_neutralises_terminal_sequences() {
        assert_eq!(escape(b"plain"), "plain");
        assert_eq!(escape(b"a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape(b"line\nnext"), "line\\x0anext");
        assert_eq!(escape(b"back\\slash"), "back\\\\slash");
        assert_eq!(escape(&[b'o', 0xff]), "o\\xff");
        assert_eq!(escape("\u{9b}".as_bytes()), "\\xc2\\x9b");
    }
}
