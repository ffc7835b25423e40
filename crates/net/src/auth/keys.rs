//! ed25519 keys for daemon mode: identities (a client's key, a server's host key) kept in
//! owner-only PKCS#8 files, public keys in one-line `.pub` files, ssh-style fingerprints, the
//! user's config directory, and the client's `known_hosts` (trust on first use, like ssh's
//! `StrictHostKeyChecking=accept-new`). Keys come from `ring`; nothing here is home-made crypto.

use crate::EngineError;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine as _;
use linerate_proto::auth::{self, Signer, PUBLIC_KEY_LEN};
use linerate_proto::frame::KeyAuth;
use linerate_proto::handshake::KEY_LEN;
use ring::rand::SystemRandom;
use ring::signature::{Ed25519KeyPair, KeyPair};
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The key type word of public-key lines (`.pub`, `authorized_keys`, `known_hosts`).
pub const KEY_TYPE: &str = "linerate-ed25519";

/// Largest private-key, `.pub` or `known_hosts` file read (a key file is under 200 bytes).
const MAX_KEY_FILE: u64 = 64 * 1024;
/// Largest `known_hosts` file read.
const MAX_KNOWN_HOSTS: u64 = 4 * 1024 * 1024;

/// An ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; PUBLIC_KEY_LEN]);

impl PublicKey {
    /// `SHA256:<base64 of SHA-256 of the raw key, unpadded>`, as ssh prints fingerprints.
    pub fn fingerprint(&self) -> String {
        let d = ring::digest::digest(&ring::digest::SHA256, &self.0);
        format!("SHA256:{}", STANDARD_NO_PAD.encode(d.as_ref()))
    }

    /// The key in base64, as it appears in key lines.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }

    /// Parse the base64 field of a key line: exactly 32 bytes.
    pub fn from_base64(s: &str) -> Result<PublicKey, String> {
        if s.len() > 64 {
            return Err("the key is too long for an ed25519 key".into());
        }
        let b = STANDARD.decode(s).map_err(|_| "the key is not valid base64".to_string())?;
        let k: [u8; PUBLIC_KEY_LEN] = b.try_into().map_err(|_| "an ed25519 key is 32 bytes".to_string())?;
        Ok(PublicKey(k))
    }

    /// One `.pub` line: `linerate-ed25519 <base64> <comment>`.
    pub fn to_line(&self, comment: &str) -> String {
        let comment = clean_comment(comment);
        if comment.is_empty() {
            format!("{KEY_TYPE} {}", self.to_base64())
        } else {
            format!("{KEY_TYPE} {} {comment}", self.to_base64())
        }
    }

    /// Parse `linerate-ed25519 <base64> [comment]`; returns the key and the comment.
    pub fn parse_line(line: &str) -> Result<(PublicKey, String), String> {
        let mut it = line.trim().splitn(3, char::is_whitespace);
        match it.next() {
            Some(KEY_TYPE) => {}
            Some(other) => return Err(format!("unknown key type {:?} (expected {KEY_TYPE})", short(other))),
            None => return Err("empty line".into()),
        }
        let b64 = it.next().ok_or("the key is missing after the key type")?;
        let key = PublicKey::from_base64(b64)?;
        Ok((key, it.next().unwrap_or("").trim().to_string()))
    }

    /// Read a `.pub` file.
    pub fn load(path: &Path) -> Result<(PublicKey, String), EngineError> {
        let text = read_capped(path, MAX_KEY_FILE)?;
        let line = text.lines().find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).unwrap_or("");
        PublicKey::parse_line(line).map_err(|e| EngineError::Secret(format!("{}: {e}", path.display())))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.fingerprint())
    }
}

/// An ed25519 key pair: a client's identity or a server's host key. `Debug` shows only the
/// fingerprint.
pub struct Identity {
    pair: Ed25519KeyPair,
    public: PublicKey,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({})", self.public.fingerprint())
    }
}

impl Identity {
    /// Generate a key pair; returns it and its PKCS#8 (v2) encoding for the key file.
    pub fn generate() -> Result<(Identity, Vec<u8>), EngineError> {
        let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map_err(|_| EngineError::Secret("the system random generator failed".into()))?;
        let id = Identity::from_pkcs8(doc.as_ref())?;
        Ok((id, doc.as_ref().to_vec()))
    }

    fn from_pkcs8(der: &[u8]) -> Result<Identity, EngineError> {
        // v2 (ours, with the public key, checked) or v1 (as `openssl genpkey -algorithm ed25519`).
        let pair = Ed25519KeyPair::from_pkcs8(der)
            .or_else(|_| Ed25519KeyPair::from_pkcs8_maybe_unchecked(der))
            .map_err(|_| EngineError::Secret("not an ed25519 private key in PKCS#8 form".into()))?;
        let public = PublicKey(
            pair.public_key()
                .as_ref()
                .try_into()
                .map_err(|_| EngineError::Secret("ed25519 public key length".into()))?,
        );
        Ok(Identity { pair, public })
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        self.public
    }

    /// Sign this connection's handshake hash as `signer` (the `HostAuth` / `ClientAuth` body).
    pub fn sign(&self, signer: Signer, hash: &[u8; KEY_LEN]) -> KeyAuth {
        let sig = self.pair.sign(&auth::signed_message(signer, hash));
        let mut signature = [0u8; 64];
        signature.copy_from_slice(sig.as_ref());
        KeyAuth { key: self.public.0, signature }
    }

    /// Generate a key pair and write it: the private key to `path` (PEM PKCS#8, mode 0600) and
    /// the public key to `path.pub` (one line). Refuses to replace either file.
    pub fn write_new(path: &Path, comment: &str) -> Result<Identity, EngineError> {
        let pub_path = pub_path(path);
        if pub_path.exists() {
            return Err(EngineError::Secret(format!("{}: already exists; not replacing it", pub_path.display())));
        }
        let (id, der) = Identity::generate()?;
        let b64 = STANDARD.encode(&der);
        let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END PRIVATE KEY-----\n");
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| EngineError::file(path, e))?;
        f.write_all(pem.as_bytes()).map_err(|e| EngineError::file(path, e))?;
        let mut p = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&pub_path)
            .map_err(|e| EngineError::file(&pub_path, e))?;
        p.write_all(format!("{}\n", id.public.to_line(comment)).as_bytes())
            .map_err(|e| EngineError::file(&pub_path, e))?;
        Ok(id)
    }

    /// `linerate keygen --type ed25519`: [`Identity::write_new`] once the file's missing
    /// directory is made private ([`make_private_parent`]).
    pub fn create(path: &Path, comment: &str) -> Result<Identity, EngineError> {
        make_private_parent(path)?;
        Identity::write_new(path, comment)
    }

    /// Read a private key file, refusing one that group or others may read (as ssh does).
    pub fn load(path: &Path) -> Result<Identity, EngineError> {
        Identity::load_with(path, false)
    }

    /// [`Identity::load`]; with `own_group`, a file readable by its group is accepted when that
    /// group is this process's effective group (a Kubernetes Secret mounted with `fsGroup`).
    pub fn load_with(path: &Path, own_group: bool) -> Result<Identity, EngineError> {
        super::check_private_mode(path, "private key file", own_group)?;
        // The key's text is wiped when dropped, as the decoded key is below.
        let text = zeroize::Zeroizing::new(read_capped(path, MAX_KEY_FILE)?);
        let body = zeroize::Zeroizing::new(
            text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("-----")).collect::<String>(),
        );
        if !text.contains("-----BEGIN PRIVATE KEY-----") {
            return Err(EngineError::Secret(format!(
                "{}: not a linerate ed25519 private key (make one with `linerate keygen --type ed25519`)",
                path.display()
            )));
        }
        let mut der = STANDARD
            .decode(body.as_bytes())
            .map_err(|_| EngineError::Secret(format!("{}: the private key is not valid base64", path.display())))?;
        let id = Identity::from_pkcs8(&der).map_err(|e| EngineError::Secret(format!("{}: {e}", path.display())));
        zeroize::Zeroize::zeroize(&mut der);
        id
    }
}

/// `FILE.pub` for a private key file `FILE`.
pub fn pub_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// linerate's directory in the user's config directory: `$XDG_CONFIG_HOME/linerate`, else
/// `$HOME/.config/linerate`. `None` without either (a relative `XDG_CONFIG_HOME` is ignored, as
/// the XDG spec says).
pub fn config_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute()).map(|h| h.join(".config"))
    })?;
    Some(base.join("linerate"))
}

/// The default identity: `<config dir>/id_ed25519`.
pub fn default_identity() -> Option<PathBuf> {
    config_dir().map(|d| d.join("id_ed25519"))
}

/// The default known-hosts file: `<config dir>/known_hosts`.
pub fn default_known_hosts() -> Option<PathBuf> {
    config_dir().map(|d| d.join("known_hosts"))
}

/// Create `dir` (and its parents) for keys; a new directory gets mode 0700.
pub fn make_private_dir(dir: &Path) -> Result<(), EngineError> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| EngineError::file(dir, e))
}

/// A key file's missing directory, made private (0700) as ssh-keygen makes `~/.ssh`.
pub fn make_private_parent(file: &Path) -> Result<(), EngineError> {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => make_private_dir(dir),
        _ => Ok(()),
    }
}

/// `user@host`, the default comment of a new key.
pub fn default_comment() -> String {
    let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "linerate".into());
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    clean_comment(&format!("{user}@{host}"))
}

/// A comment stays one printable line.
fn clean_comment(c: &str) -> String {
    c.trim().chars().map(|ch| if ch.is_control() { '?' } else { ch }).take(256).collect()
}

fn short(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Read a whole text file, refusing one larger than `cap`.
pub(crate) fn read_capped(path: &Path, cap: u64) -> Result<String, EngineError> {
    let f = fs::File::open(path).map_err(|e| EngineError::file(path, e))?;
    let mut buf = Vec::new();
    f.take(cap + 1).read_to_end(&mut buf).map_err(|e| EngineError::file(path, e))?;
    if buf.len() as u64 > cap {
        return Err(EngineError::Secret(format!("{}: larger than {cap} bytes; refusing to read it", path.display())));
    }
    String::from_utf8(buf).map_err(|_| EngineError::Secret(format!("{}: not UTF-8 text", path.display())))
}

/// What [`check_known_host`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostCheck {
    /// The host's key is listed and matches.
    Known,
    /// First contact: the key was added to the file.
    Added,
}

/// Check `key` against the entries for `host` (`name:port`) in the known-hosts file `path`.
/// A listed, different key is refused loudly, naming the file and line; an unknown host is
/// refused with `strict`, else its key is appended (trust on first use).
pub fn check_known_host(path: &Path, host: &str, key: &PublicKey, strict: bool) -> Result<HostCheck, EngineError> {
    let text = match read_capped(path, MAX_KNOWN_HOSTS) {
        Ok(t) => t,
        Err(EngineError::File { io: source, .. }) if source.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut mismatch = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if name != host {
            continue;
        }
        match PublicKey::parse_line(rest) {
            Ok((k, _)) if k == *key => return Ok(HostCheck::Known),
            Ok((k, _)) => mismatch = mismatch.or(Some((i + 1, k.fingerprint()))),
            Err(e) => {
                return Err(EngineError::HostKey(format!(
                    "{} line {}: malformed entry for {host}: {e}; fix or remove that line",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    if let Some((line, old)) = mismatch {
        return Err(EngineError::HostKey(format!(
            "WARNING: THE HOST KEY OF {host} HAS CHANGED!\n\
             The server now presents {new}, but {file} line {line} lists {old}.\n\
             Someone could be intercepting this connection (man-in-the-middle), or the server's host key\n\
             was replaced. Nothing was sent. If the change is expected, remove line {line} from {file}\n\
             and connect again.",
            new = key.fingerprint(),
            file = path.display(),
        )));
    }
    if strict {
        return Err(EngineError::HostKey(format!(
            "the host key of {host} ({}) is not in {} and --strict-host-key is set; add the line \
             `{host} {KEY_TYPE} {}` after checking the fingerprint with the server's operator",
            key.fingerprint(),
            path.display(),
            key.to_base64()
        )));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        make_private_dir(dir)?;
    }
    let mut f =
        OpenOptions::new().append(true).create(true).mode(0o644).open(path).map_err(|e| EngineError::file(path, e))?;
    let sep = if text.is_empty() || text.ends_with('\n') { "" } else { "\n" };
    f.write_all(format!("{sep}{host} {KEY_TYPE} {}\n", key.to_base64()).as_bytes())
        .map_err(|e| EngineError::file(path, e))?;
    Ok(HostCheck::Added)
}

/// Where notes for the user go (a first-contact host key).
pub type NoteSink = Arc<dyn Fn(String) + Send + Sync>;

/// How a client authenticates with its key and checks the server's ([`crate::conn::connect_key`]).
#[derive(Clone)]
pub struct KeyClient {
    /// The client's key.
    pub identity: Arc<Identity>,
    /// The known-hosts file to check the server against.
    pub known_hosts: PathBuf,
    /// The server's name in known_hosts: `host:port` as the user wrote it (`[v6addr]:port`).
    pub host: String,
    /// Refuse an unknown host instead of adding it.
    pub strict: bool,
    /// Accept only the host key with this fingerprint (`SHA256:…`), without reading or writing
    /// known_hosts (a mesh inventory pins its agents' keys).
    pub pinned: Option<String>,
    /// Receives the note for the user when a host key is added on first contact (the library
    /// prints nothing: the caller shows it; dropped by default).
    pub note: NoteSink,
}

impl fmt::Debug for KeyClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyClient")
            .field("identity", &self.identity)
            .field("known_hosts", &self.known_hosts)
            .field("host", &self.host)
            .field("strict", &self.strict)
            .field("pinned", &self.pinned)
            .finish()
    }
}

impl KeyClient {
    /// A client with `identity` for server `host` (`name:port`), checked against `known_hosts`;
    /// first-contact notes go to stderr.
    pub fn new(identity: Arc<Identity>, known_hosts: PathBuf, host: String) -> KeyClient {
        KeyClient { identity, known_hosts, host, strict: false, pinned: None, note: Arc::new(|_: String| {}) }
    }

    /// A client with `identity` for server `host` that accepts only the host key whose
    /// fingerprint is `fingerprint`.
    pub fn pinned(identity: Arc<Identity>, host: String, fingerprint: String) -> KeyClient {
        KeyClient { pinned: Some(fingerprint), strict: true, ..KeyClient::new(identity, PathBuf::new(), host) }
    }

    /// Check the server's (already verified) host key against the pin, or known_hosts.
    pub fn check_host(&self, key: &PublicKey) -> Result<(), EngineError> {
        if let Some(want) = &self.pinned {
            let got = key.fingerprint();
            if got != *want {
                return Err(EngineError::HostKey(format!(
                    "the host key of {} is {got}, not the {want} it is pinned to; nothing was sent",
                    self.host
                )));
            }
            return Ok(());
        }
        if check_known_host(&self.known_hosts, &self.host, key, self.strict)? == HostCheck::Added {
            (self.note)(format!(
                "first contact with {}: its host key {} was added to {} (compare it with the fingerprint \
                 `linerate serve` prints)",
                self.host,
                key.fingerprint(),
                self.known_hosts.display()
            ));
        }
        Ok(())
    }
}

/// The known-hosts name of a server: `host:port`, or `[host]:port` when the host contains ':'
/// (IPv6), lowercased.
pub fn host_name(host: &str, port: u16) -> String {
    let h = host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    if h.contains(':') {
        format!("[{h}]:{port}")
    } else {
        format!("{h}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn key_files_round_trip_and_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("id");
        let id = Identity::write_new(&p, "me@here").unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(Identity::load(&p).unwrap().public(), id.public());
        let (pk, comment) = PublicKey::load(&pub_path(&p)).unwrap();
        assert_eq!((pk, comment.as_str()), (id.public(), "me@here"));
        assert!(Identity::write_new(&p, "").is_err(), "must not overwrite");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        let err = Identity::load(&p).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        assert_eq!(format!("{id:?}"), format!("Identity({})", id.public().fingerprint()));
    }

    #[test]
    fn a_group_readable_key_is_accepted_only_when_asked_and_the_group_is_ours() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("id");
        let id = Identity::write_new(&p, "").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o440)).unwrap();
        assert!(Identity::load(&p).is_err(), "strict by default");
        // the file's group is ours (we made it): accepted when asked
        assert_eq!(Identity::load_with(&p, true).unwrap().public(), id.public());
        for mode in [0o460, 0o444, 0o640 | 0o004] {
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            assert!(Identity::load_with(&p, true).is_err(), "mode {mode:o}: group-writable or world-readable");
        }
        if rustix::process::geteuid().is_root() {
            // another group than ours: refused even when asked
            std::os::unix::fs::chown(&p, None, Some(rustix::process::getegid().as_raw() + 4242)).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o440)).unwrap();
            assert!(Identity::load_with(&p, true).is_err(), "someone else's group");
        }
    }

    #[test]
    fn refuses_garbage_and_oversize_key_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        for body in [&b"hello"[..], b"-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n"] {
            let _ = fs::remove_file(&p);
            fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&p).unwrap().write_all(body).unwrap();
            assert!(Identity::load(&p).is_err());
        }
        let _ = fs::remove_file(&p);
        let big = vec![b'A'; MAX_KEY_FILE as usize + 10];
        fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&p).unwrap().write_all(&big).unwrap();
        assert!(Identity::load(&p).unwrap_err().to_string().contains("larger than"));
    }

    #[test]
    fn fingerprint_is_sha256_base64_unpadded_like_ssh() {
        // SHA-256 of 32 zero bytes is 66687aad...; its unpadded base64 starts "Zmh6rfhivXdsj8GLjp+OIAiX".
        let fp = PublicKey([0; 32]).fingerprint();
        assert_eq!(fp, "SHA256:Zmh6rfhivXdsj8GLjp+OIAiXFIVu4jOzkCpZHQ1fKSU");
    }

    #[test]
    fn public_key_lines_parse_strictly() {
        let k = PublicKey([9; 32]);
        assert_eq!(PublicKey::parse_line(&k.to_line("a b")).unwrap(), (k, "a b".into()));
        assert_eq!(PublicKey::parse_line(&k.to_line("")).unwrap(), (k, String::new()));
        assert!(PublicKey::parse_line("ssh-ed25519 AAAA").is_err());
        assert!(PublicKey::parse_line(KEY_TYPE).is_err());
        assert!(PublicKey::parse_line(&format!("{KEY_TYPE} {}", STANDARD.encode([1u8; 31]))).is_err());
        assert!(PublicKey::parse_line(&format!("{KEY_TYPE} {}", STANDARD.encode([1u8; 33]))).is_err());
        assert!(PublicKey::parse_line(&format!("{KEY_TYPE} {}", "A".repeat(5000))).is_err());
        assert_eq!(k.to_line("evil\x1b[2Jname").split(' ').nth(2), Some("evil?[2Jname"));
    }

    #[test]
    fn known_hosts_accepts_new_then_matches_and_refuses_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let kh = dir.path().join("sub/known_hosts");
        let (a, b) = (PublicKey([1; 32]), PublicKey([2; 32]));
        assert!(check_known_host(&kh, "h:1", &a, true).unwrap_err().to_string().contains("--strict-host-key"));
        assert!(!kh.exists(), "strict mode writes nothing");
        assert_eq!(check_known_host(&kh, "h:1", &a, false).unwrap(), HostCheck::Added);
        assert_eq!(check_known_host(&kh, "h:1", &a, true).unwrap(), HostCheck::Known);
        assert_eq!(check_known_host(&kh, "h:2", &b, false).unwrap(), HostCheck::Added, "port is part of the name");
        let err = check_known_host(&kh, "h:1", &b, false).unwrap_err().to_string();
        assert!(err.contains("HAS CHANGED") && err.contains("line 1") && err.contains(&kh.display().to_string()));
        assert!(err.contains(&b.fingerprint()) && err.contains(&a.fingerprint()), "{err}");
        assert_eq!(fs::read_to_string(&kh).unwrap().lines().count(), 2, "a changed key is not added");
        fs::write(&kh, "h:3 linerate-ed25519 @@@\n").unwrap();
        assert!(check_known_host(&kh, "h:3", &a, false).unwrap_err().to_string().contains("line 1"));
    }

    #[test]
    fn host_names_bracket_ipv6() {
        assert_eq!(host_name("Example.COM", 7878), "example.com:7878");
        assert_eq!(host_name("::1", 1), "[::1]:1");
        assert_eq!(host_name("[::1]", 1), "[::1]:1");
    }

    #[test]
    fn signatures_verify_with_the_protocol_check() {
        let (id, _) = Identity::generate().unwrap();
        let a = id.sign(Signer::Client, &[3; 32]);
        assert_eq!(a.key, id.public().0);
        assert!(auth::verify(Signer::Client, &a.key, &a.signature, &[3; 32]).is_ok());
        assert!(auth::verify(Signer::Host, &a.key, &a.signature, &[3; 32]).is_err());
    }
}
