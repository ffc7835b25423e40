//! Session secrets: 256-bit keys kept in files readable only by their owner, or passed to a child
//! process through an inherited pipe. Never on a command line, never in the environment or a log.

use crate::EngineError;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A 32-byte shared secret. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub [u8; 32]);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl Secret {
    /// A fresh random secret from the operating system's generator.
    pub fn generate() -> Result<Secret, EngineError> {
        let mut b = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
            .map_err(|_| EngineError::Secret("the system random generator failed".into()))?;
        Ok(Secret(b))
    }

    /// The secret as 64 lowercase hex digits (the key-file format).
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parse 64 hex digits, ignoring surrounding whitespace.
    pub fn from_hex(s: &str) -> Result<Secret, EngineError> {
        let s = s.trim();
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(EngineError::Secret(
                "a key must be 64 hex digits (make one with `linerate keygen FILE`)".into(),
            ));
        }
        let mut b = [0u8; 32];
        hex::decode_to_slice(s, &mut b).map_err(|_| EngineError::Secret("a key must be 64 hex digits".into()))?;
        Ok(Secret(b))
    }

    /// Read a key file, refusing one that group or others may read (as ssh does for private keys).
    pub fn load(path: &Path) -> Result<Secret, EngineError> {
        super::check_private(path, "key file")?;
        let text = fs::read_to_string(path).map_err(|e| EngineError::file(path, e))?;
        Secret::from_hex(&text).map_err(|e| EngineError::Secret(format!("{}: {e}", path.display())))
    }

    /// Read a secret from a pipe (one hex line), as a parent process passes it to a child.
    pub fn read_from(mut r: impl Read) -> Result<Secret, EngineError> {
        let mut buf = [0u8; 65];
        let mut n = 0;
        while n < buf.len() {
            match r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) => return Err(EngineError::Secret(format!("reading the key from the pipe: {e}"))),
            }
        }
        let text =
            std::str::from_utf8(&buf[..n]).map_err(|_| EngineError::Secret("key on the pipe is not text".into()))?;
        let s = Secret::from_hex(text);
        zeroize::Zeroize::zeroize(&mut buf);
        s
    }

    /// `linerate keygen`: a new key written to `path` ([`Secret::write_new`]) once the file's
    /// missing directory is made private.
    pub fn create(path: &Path) -> Result<(), EngineError> {
        super::keys::make_private_parent(path)?;
        Secret::generate()?.write_new(path)
    }

    /// Write a new key file with mode 0600; refuses to replace an existing file.
    pub fn write_new(&self, path: &Path) -> Result<(), EngineError> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| EngineError::file(path, e))?;
        f.write_all(format!("{}\n", self.to_hex()).as_bytes()).map_err(|e| EngineError::file(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_created_key_gets_a_private_directory_and_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys").join("k");
        Secret::create(&file).unwrap();
        assert_eq!(fs::metadata(dir.path().join("keys")).unwrap().mode() & 0o777, 0o700);
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
        match Secret::create(&file) {
            Err(EngineError::File { io, .. }) => assert_eq!(io.kind(), std::io::ErrorKind::AlreadyExists),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hex_round_trip_and_debug_hides_the_key() {
        let s = Secret::generate().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        assert_eq!(format!("{s:?}"), "Secret(..)");
        assert!(Secret::from_hex("abc").is_err());
        assert!(Secret::from_hex(&"g".repeat(64)).is_err());
    }

    #[test]
    fn key_files_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        let s = Secret::generate().unwrap();
        s.write_new(&p).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(Secret::load(&p).unwrap(), s);
        assert!(s.write_new(&p).is_err(), "must not overwrite");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        let err = Secret::load(&p).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }

    #[test]
    fn reads_a_key_from_a_pipe() {
        let s = Secret::generate().unwrap();
        let line = format!("{}\n", s.to_hex());
        assert_eq!(Secret::read_from(line.as_bytes()).unwrap(), s);
        assert!(Secret::read_from(&b"short"[..]).is_err());
    }
}
