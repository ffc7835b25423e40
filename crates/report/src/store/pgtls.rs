//! TLS to PostgreSQL with rustls, as libpq's `sslmode` and `sslrootcert` ask for it (issue 33:
//! managed PostgreSQL services require TLS). `postgres::Config` knows only `disable`, `prefer`
//! and `require` and no `sslrootcert`, so those two options are taken out of the connection
//! string here and the rest is left to it. Nothing ever falls back to plaintext: `prefer` and
//! `allow` (libpq's modes that would) are refused, and a server without TLS fails `require`.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

/// libpq's `sslmode`, the values this build honours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext.
    Disable,
    /// TLS; the certificate is checked against a root CA only if one is given (libpq's rule).
    Require,
    /// TLS, the certificate chained to a trusted root; any host name.
    VerifyCa,
    /// TLS, the certificate chained to a trusted root and naming the host connected to.
    VerifyFull,
}

/// Why TLS to PostgreSQL cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum PgTlsError {
    /// A `sslmode` that would fall back to plaintext, or one libpq does not have.
    #[error(
        "sslmode={0}: linerate never falls back to plaintext; say sslmode=verify-full (or require, \
         verify-ca) for TLS, or sslmode=disable on a trusted network"
    )]
    Mode(String),
    /// `sslrootcert` could not be read.
    #[error("sslrootcert {path}: {why}")]
    RootCert {
        /// The file.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// No trusted root at all (no `sslrootcert`, and the system store is empty).
    #[error("sslmode={0}: no CA to check the server against: give sslrootcert=FILE (or install the system CA store)")]
    NoRoots(&'static str),
    /// The TLS handshake failed: most often a certificate that does not chain to the roots
    /// given, or that names another host (`verify-full`).
    #[error("TLS handshake failed: {}; the server's certificate was checked against {roots}", explain(cause))]
    Handshake {
        /// What the certificate was checked against.
        roots: Roots,
        /// rustls's reason.
        cause: rustls::Error,
    },
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Where the trusted roots come from, as said in messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Roots {
    /// A PEM file (`sslrootcert=FILE`, or libpq's `~/.postgresql/root.crt`).
    File(PathBuf),
    /// The system's CA store (`sslrootcert=system`, or no root given to `verify-*`).
    System,
    /// None: `require` without a root; the channel is encrypted, the server unchecked.
    Unchecked,
}

impl std::fmt::Display for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Roots::File(p) => write!(f, "the CA in {}", p.display()),
            Roots::System => f.write_str("the system CA store"),
            Roots::Unchecked => f.write_str("nothing (sslmode=require without sslrootcert)"),
        }
    }
}

/// A connection string with its TLS options taken out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// The string without `sslmode` and `sslrootcert`, for `postgres::Config`.
    pub rest: String,
    /// The `sslmode` given, if any.
    pub mode: Option<SslMode>,
    /// The `sslrootcert` given, if any.
    pub rootcert: Option<String>,
}

/// The `key=value` options of a connection string: key, value (decoded), and the text to cut
/// to remove the option. A URL's are its query parameters; a key-value string's are all of it,
/// read as libpq does (whitespace between pairs, values optionally in single quotes, backslash
/// escapes).
fn options(s: &str) -> Vec<(String, String, Range<usize>)> {
    if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        let Some(q) = s.find('?') else { return Vec::new() };
        let mut out = Vec::new();
        let mut at = q + 1;
        for part in s[q + 1..].split('&') {
            let range = at..at + part.len();
            at += part.len() + 1;
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let dec = |x: &str| percent_encoding::percent_decode_str(x).decode_utf8_lossy().into_owned();
            out.push((dec(k), dec(v), range));
        }
        return out;
    }
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            return out;
        }
        let start = i;
        while i < b.len() && b[i] != b'=' && !b[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = s[start..i].to_string();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() || b[i] != b'=' {
            return out; // malformed: postgres::Config says so
        }
        i += 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let quoted = i < b.len() && b[i] == b'\'';
        if quoted {
            i += 1;
        }
        let mut value = Vec::new();
        while i < b.len() {
            match b[i] {
                b'\\' if i + 1 < b.len() => {
                    value.push(b[i + 1]);
                    i += 2;
                    continue;
                }
                b'\'' if quoted => {
                    i += 1;
                    break;
                }
                c if !quoted && c.is_ascii_whitespace() => break,
                c => value.push(c),
            }
            i += 1;
        }
        out.push((key, String::from_utf8_lossy(&value).into_owned(), start..i));
    }
}

/// Takes `sslmode` and `sslrootcert` out of `url` (URL or key-value form). `prefer`, `allow`
/// and unknown modes are refused: each would mean plaintext behind the user's back.
pub fn split(url: &str) -> Result<TlsOptions, PgTlsError> {
    let (mut mode, mut rootcert, mut cut) = (None, None, Vec::new());
    for (k, v, range) in options(url) {
        match k.as_str() {
            "sslmode" => {
                mode = Some(match v.as_str() {
                    "disable" => SslMode::Disable,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    _ => return Err(PgTlsError::Mode(v)),
                })
            }
            "sslrootcert" => rootcert = Some(v),
            _ => continue,
        }
        cut.push(range);
    }
    let mut rest = url.to_string();
    for r in cut.iter().rev() {
        // a URL's separator goes with the option: the '&' before it, or the one after the first
        let r = match rest.as_bytes().get(r.start.wrapping_sub(1)) {
            Some(b'&') => r.start - 1..r.end,
            Some(b'?') if rest.as_bytes().get(r.end) == Some(&b'&') => r.start..r.end + 1,
            _ => r.clone(),
        };
        rest.replace_range(r, "");
    }
    if rest.ends_with('?') {
        rest.pop();
    }
    Ok(TlsOptions { rest, mode, rootcert })
}

/// The roots `mode` checks against: `sslrootcert` (`system` is the system store), else libpq's
/// `~/.postgresql/root.crt` if it exists, else the system store for `verify-*` and nothing for
/// `require` (libpq: `require` with a root CA file behaves as `verify-ca`).
pub fn roots_for(mode: SslMode, rootcert: Option<&str>) -> Roots {
    match rootcert {
        Some("system") => Roots::System,
        Some(p) => Roots::File(PathBuf::from(p)),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).map(|h| h.join(".postgresql/root.crt"));
            match (home.filter(|p| p.is_file()), mode) {
                (Some(p), _) => Roots::File(p),
                (None, SslMode::Require) => Roots::Unchecked,
                (None, _) => Roots::System,
            }
        }
    }
}

/// The rustls client configuration for `mode` against `roots` (ring as the crypto provider).
pub fn client_config(mode: SslMode, roots: &Roots) -> Result<ClientConfig, PgTlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let mut store = RootCertStore::empty();
    match roots {
        Roots::Unchecked => {
            let v = DangerLaxVerifier { chain: None, provider };
            return Ok(builder.dangerous().with_custom_certificate_verifier(Arc::new(v)).with_no_client_auth());
        }
        Roots::File(p) => {
            let err = |why: String| PgTlsError::RootCert { path: p.display().to_string(), why };
            let certs = CertificateDer::pem_file_iter(p).map_err(|e| err(e.to_string()))?;
            for c in certs {
                store.add(c.map_err(|e| err(e.to_string()))?).map_err(|e| err(e.to_string()))?;
            }
            if store.is_empty() {
                return Err(err("no certificate in it".into()));
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
        }
    }
    if store.is_empty() {
        return Err(PgTlsError::NoRoots(if mode == SslMode::VerifyCa { "verify-ca" } else { "verify-full" }));
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| PgTlsError::Rustls(rustls::Error::General(e.to_string())))?;
    Ok(match mode {
        SslMode::VerifyFull => builder.with_webpki_verifier(webpki).with_no_client_auth(),
        _ => {
            let v = DangerLaxVerifier { chain: Some(webpki), provider };
            builder.dangerous().with_custom_certificate_verifier(Arc::new(v)).with_no_client_auth()
        }
    })
}

/// The two modes weaker than `verify-full`, as libpq has them: `verify-ca` (`chain` set) wants
/// the chain to reach a trusted root but does not hold the certificate's name against the host
/// (the standard verifier checks the chain first and the name last, and only the name is
/// forgiven); `require` without a root CA (`chain` unset) encrypts without checking the
/// certificate at all, so it does not stop an active man in the middle (docs say so). Either
/// way the handshake must be signed by the certificate's key.
#[derive(Debug)]
struct DangerLaxVerifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for DangerLaxVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A handshake failure in words, where rustls names it only by its variant.
fn explain(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the server's certificate is not signed by a trusted CA (UnknownIssuer)".into()
        }
        rustls::Error::InvalidCertificate(CertificateError::BadSignature) => {
            "the server's certificate carries a bad signature".into()
        }
        e => e.to_string(),
    }
}

/// The rustls error behind a failed connection, if TLS is what failed (the chain goes through
/// the connector's `io::Error`, whose payload is reached by `get_ref`, not `source`).
pub fn rustls_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(r) = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            if let Some(r) = r.downcast_ref::<rustls::Error>() {
                return Some(r);
            }
        }
        cur = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_are_taken_out_of_urls_and_key_value_strings() {
        let s =
            split("postgres://me@db/runs?sslmode=verify-full&sslrootcert=/etc/ca%20x.pem&connect_timeout=5").unwrap();
        assert_eq!(s.mode, Some(SslMode::VerifyFull));
        assert_eq!(s.rootcert.as_deref(), Some("/etc/ca x.pem"));
        assert_eq!(s.rest, "postgres://me@db/runs?connect_timeout=5");
        let s = split("postgres://me@db/runs?connect_timeout=5&sslmode=require").unwrap();
        assert_eq!((s.rest.as_str(), s.mode), ("postgres://me@db/runs?connect_timeout=5", Some(SslMode::Require)));
        let s = split("postgres://me@db/runs?sslmode=verify-ca").unwrap();
        assert_eq!((s.rest.as_str(), s.mode), ("postgres://me@db/runs", Some(SslMode::VerifyCa)));
        let s = split("host=db sslmode = 'verify-full' sslrootcert='/a b/c\\'s.pem' user=me").unwrap();
        assert_eq!(s.mode, Some(SslMode::VerifyFull));
        assert_eq!(s.rootcert.as_deref(), Some("/a b/c's.pem"));
        assert_eq!(s.rest.split_whitespace().collect::<Vec<_>>(), ["host=db", "user=me"]);
        let s = split("postgres://me@db/runs").unwrap();
        assert_eq!((s.rest.as_str(), s.mode, s.rootcert), ("postgres://me@db/runs", None, None));
        // a password that reads like an option is a password
        let s = split("postgres://me:sslmode=x@db/runs").unwrap();
        assert_eq!((s.rest.as_str(), s.mode), ("postgres://me:sslmode=x@db/runs", None));
        for m in ["prefer", "allow", "verify_full", ""] {
            let e = split(&format!("postgres://db/runs?sslmode={m}")).unwrap_err().to_string();
            assert!(e.contains("never falls back to plaintext"), "{m}: {e}");
        }
    }

    #[test]
    fn roots_follow_libpq() {
        assert_eq!(roots_for(SslMode::VerifyFull, Some("system")), Roots::System);
        assert_eq!(roots_for(SslMode::Require, Some("/ca.pem")), Roots::File("/ca.pem".into()));
        let e = client_config(SslMode::VerifyFull, &Roots::File("/nonexistent/ca.pem".into())).unwrap_err();
        assert!(e.to_string().starts_with("sslrootcert /nonexistent/ca.pem: "), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(SslMode::VerifyCa, &Roots::File(empty)).unwrap_err().to_string();
        assert!(e.contains("no certificate in it"), "{e}");
        assert!(client_config(SslMode::Require, &Roots::Unchecked).is_ok());
    }
}
