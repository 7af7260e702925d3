//! TLS of `rediss://` servers: the settings' PEM files read and checked
//! once, when the client is made, and a failed handshake told by its
//! cause. The connections themselves are the `redis` crate's, over rustls.

use std::sync::Arc;

use redis::{ClientTlsConfig, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::settings::{Pem, TlsSettings};

/// Added to every connection error of a server whose certificate is not
/// checked: what the checks would have caught may look like anything.
pub const INSECURE_NOTE: &str = "(TLS certificate checks off: insecure)";

/// What `TlsSettings` say, read and checked: what every `rediss://`
/// connection of one client is made with.
#[derive(Clone, Debug)]
pub struct Tls {
    pub(crate) certificates: TlsCertificates,
    pub(crate) insecure: bool,
}

impl Tls {
    /// Reads and checks the PEM of `settings`; an error names the file
    /// (or the setting given as text) and what is wrong with it.
    pub fn load(settings: &TlsSettings) -> Result<Tls, String> {
        ensure_crypto_provider();
        let root_cert = match &settings.ca_cert {
            None => None,
            Some(pem) => {
                let (bytes, source) = read("CA certificate", pem)?;
                let certs = certificates(&bytes, &source)?;
                let mut roots = rustls::RootCertStore::empty();
                for (i, cert) in certs.into_iter().enumerate() {
                    roots.add(cert).map_err(|e| format!("{source}: certificate {} is not a usable CA certificate: {e}", i + 1))?;
                }
                Some(bytes)
            }
        };
        let client_tls = match (&settings.client_cert, &settings.client_key) {
            (None, None) => None,
            (Some(_), None) => return Err("a TLS client certificate needs its private key too (client key)".into()),
            (None, Some(_)) => return Err("a TLS client key needs its certificate too (client certificate)".into()),
            (Some(cert), Some(key)) => {
                let (cert_bytes, cert_source) = read("client certificate", cert)?;
                let chain = certificates(&cert_bytes, &cert_source)?;
                let (key_bytes, key_source) = read("client key", key)?;
                let private_key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| {
                    format!(
                        "{key_source}: no private key found ({e}); expected an unencrypted PEM key \
                         (BEGIN PRIVATE KEY, BEGIN RSA PRIVATE KEY or BEGIN EC PRIVATE KEY)"
                    )
                })?;
                // The certificate and the key must be a pair: checked now,
                // not at every handshake.
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| format!("TLS: {e}"))?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_client_auth_cert(chain, private_key)
                    .map_err(|e| match e.to_string().contains(V1_WORDS) {
                        true => format!("{cert_source} is an X.509 v1 certificate, which rustls does not accept ({e}): {V1_HINT}"),
                        false => format!("{cert_source} and {key_source} are not a certificate and its key: {e}"),
                    })?;
                Some(ClientTlsConfig { client_cert: cert_bytes, client_key: key_bytes })
            }
        };
        Ok(Tls { certificates: TlsCertificates { client_tls, root_cert }, insecure: settings.insecure })
    }
}

/// rustls needs a process-wide crypto provider (the `redis` crate builds
/// its configurations with the default one). With `ring` the only one
/// compiled in, rustls picks it by itself; should another dependency
/// bring aws-lc-rs too, it would pick none, so `ring`'s is installed
/// unless the program installed one of its own (which is then used).
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one meanwhile, as good as this.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The bytes of `pem` and how errors name it.
fn read(what: &str, pem: &Pem) -> Result<(Vec<u8>, String), String> {
    match pem {
        Pem::File(path) => {
            let source = format!("TLS {what} file {}", path.display());
            std::fs::read(path).map(|bytes| (bytes, source.clone())).map_err(|e| format!("{source}: cannot read it: {e}"))
        }
        Pem::Text(bytes) => Ok((bytes.clone(), format!("the TLS {what} given as text"))),
    }
}

/// Every certificate of a PEM text, at least one.
fn certificates(bytes: &[u8], source: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{source}: not a PEM certificate: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{source}: no certificate in it; expected PEM (-----BEGIN CERTIFICATE-----)"));
    }
    Ok(certs)
}

/// The rustls error under a failed connection or request, if one is.
fn rustls_error(e: &redis::RedisError) -> Option<&rustls::Error> {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(found) = err.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        // The redis crate keeps the io::Error behind an Arc; the io::Error
        // keeps rustls's error as its inner error, not as its source.
        let inner = err.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>().map(|a| &**a as &(dyn std::error::Error + 'static));
        let io = inner.unwrap_or(err).downcast_ref::<std::io::Error>();
        if let Some(found) = io.and_then(|io| io.get_ref()).and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
            return Some(found);
        }
        source = match inner {
            Some(inner) => inner.source(),
            None => err.source(),
        };
    }
    None
}

/// Why a TLS connection failed, as far as it tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    UnknownCa,
    WrongName,
    Expired,
    NotYetValid,
    CertificateRefused,
    ClientCertificateRequired,
    HandshakeRefused,
    ClientCertificateRefused,
    NotTls,
    /// The server's certificate is X.509 v1 (webpki takes v3 only).
    Version1,
    Other,
}

/// What rustls (webpki) says of an X.509 v1 certificate, which it never
/// accepts: `openssl x509 -req` makes one unless given extensions.
const V1_WORDS: &str = "UnsupportedCertVersion";

/// How to make a v3 certificate instead, for the messages.
const V1_HINT: &str = "make it a v3 certificate: openssl x509 -req ... -extfile FILE, FILE holding e.g. \
                       'basicConstraints=CA:FALSE' and 'subjectAltName=IP:127.0.0.1' (docs/client.md, TLS)";

fn cause_of(err: &rustls::Error) -> Cause {
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as E};
    match err {
        E::InvalidCertificate(Cert::UnknownIssuer) => Cause::UnknownCa,
        E::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => Cause::WrongName,
        E::InvalidCertificate(Cert::Expired | Cert::ExpiredContext { .. }) => Cause::Expired,
        E::InvalidCertificate(Cert::NotValidYet | Cert::NotValidYetContext { .. }) => Cause::NotYetValid,
        E::InvalidCertificate(cert) if format!("{cert:?}").contains(V1_WORDS) => Cause::Version1,
        E::InvalidCertificate(_) => Cause::CertificateRefused,
        E::AlertReceived(Alert::CertificateRequired) => Cause::ClientCertificateRequired,
        E::AlertReceived(Alert::HandshakeFailure) => Cause::HandshakeRefused,
        E::AlertReceived(Alert::UnknownCA | Alert::BadCertificate | Alert::CertificateUnknown | Alert::DecryptError) => {
            Cause::ClientCertificateRefused
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => Cause::NotTls,
        _ => Cause::Other,
    }
}

/// The cause in rustls's own words, for errors that keep only the text
/// (the cluster client's: "Failed to create initial connections - Io:
/// invalid peer certificate: UnknownIssuer").
fn cause_in_text(text: &str) -> Option<Cause> {
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    Some(if has(&["invalid peer certificate: UnknownIssuer"]) {
        Cause::UnknownCa
    } else if has(&["invalid peer certificate: certificate not valid for name", "invalid peer certificate: NotValidForName"]) {
        Cause::WrongName
    } else if has(&["invalid peer certificate: certificate expired", "invalid peer certificate: Expired"]) {
        Cause::Expired
    } else if has(&["invalid peer certificate: certificate not valid yet", "invalid peer certificate: NotValidYet"]) {
        Cause::NotYetValid
    } else if has(&["invalid peer certificate"]) && has(&[V1_WORDS]) {
        Cause::Version1
    } else if has(&["invalid peer certificate"]) {
        Cause::CertificateRefused
    } else if has(&["received fatal alert: CertificateRequired"]) {
        Cause::ClientCertificateRequired
    } else if has(&["received fatal alert: HandshakeFailure"]) {
        Cause::HandshakeRefused
    } else if has(&[
        "received fatal alert: UnknownCA",
        "received fatal alert: BadCertificate",
        "received fatal alert: CertificateUnknown",
        "received fatal alert: DecryptError",
    ]) {
        Cause::ClientCertificateRefused
    } else if has(&["received corrupt message", "received unexpected message", "received unexpected handshake message"]) {
        Cause::NotTls
    } else if has(&["received fatal alert", "peer is incompatible", "peer misbehaved", "peer sent no certificates"]) {
        Cause::Other
    } else {
        return None;
    })
}

/// A failed TLS handshake (or a TLS alert later), told by its cause for
/// people: `None` when `e` is no TLS failure.
pub fn failure(e: &redis::RedisError) -> Option<String> {
    let (cause, err) = match rustls_error(e) {
        Some(err) => (cause_of(err), err.to_string()),
        None => {
            let text = e.to_string();
            (cause_in_text(&text)?, text)
        }
    };
    Some(match cause {
        Cause::UnknownCa => format!(
            "the server's certificate is not signed by a CA this client trusts ({err}): \
             give the CA that signed it as the CA certificate (the system's roots are used otherwise)"
        ),
        Cause::WrongName => {
            format!("the server's certificate is not for the host name in the URL ({err}): connect by a name or address it lists")
        }
        Cause::Expired => format!("the server's certificate has expired ({err}): the server needs a new one"),
        Cause::NotYetValid => format!("the server's certificate is not valid yet ({err}): check the clocks"),
        Cause::CertificateRefused => format!("the server's certificate was refused ({err})"),
        Cause::ClientCertificateRequired => {
            format!("the server requires a client certificate (tls-auth-clients) ({err}): give one and its key")
        }
        Cause::HandshakeRefused => format!(
            "the server refused the handshake ({err}): it may require a client certificate (tls-auth-clients), \
             or share no protocol version or cipher with this client"
        ),
        Cause::ClientCertificateRefused => {
            format!("the server refused this client's certificate ({err}): is it signed by a CA the server trusts (tls-ca-cert-file)?")
        }
        Cause::NotTls => format!("the server does not speak TLS there ({err}): is it a plain port? use redis:// for it"),
        Cause::Version1 => {
            format!("the server's certificate is X.509 v1, which this client's TLS library (rustls) does not accept ({err}): {V1_HINT}")
        }
        Cause::Other => err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_are_missing_or_not_pem_are_named() {
        let dir = std::env::temp_dir().join(format!("redlock-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let missing = dir.join("missing.pem");
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, b"hello, not a certificate\n").expect("write");
        let settings = |ca: &std::path::Path| TlsSettings { ca_cert: Some(Pem::File(ca.to_path_buf())), ..TlsSettings::default() };
        let err = Tls::load(&settings(&missing)).expect_err("missing file");
        assert!(err.contains("CA certificate file") && err.contains("missing.pem") && err.contains("cannot read"), "{err}");
        let err = Tls::load(&settings(&not_pem)).expect_err("not PEM");
        assert!(err.contains("not.pem") && err.contains("no certificate"), "{err}");
        let half = TlsSettings { client_cert: Some(Pem::Text(b"x".to_vec())), ..TlsSettings::default() };
        assert!(Tls::load(&half).expect_err("no key").contains("private key"));
        let key_only = TlsSettings { client_key: Some(Pem::Text(b"x".to_vec())), ..TlsSettings::default() };
        assert!(Tls::load(&key_only).expect_err("no cert").contains("certificate"));
        let _ = std::fs::remove_dir_all(&dir);
        // Nothing set: the system's roots, no client certificate.
        let plain = Tls::load(&TlsSettings::default()).expect("defaults");
        assert!(plain.certificates.root_cert.is_none() && plain.certificates.client_tls.is_none() && !plain.insecure);
    }

    /// A v1 certificate and its key, as `openssl x509 -req` without an
    /// extension file makes them; `None` where openssl is missing.
    fn v1_pair(dir: &std::path::Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
        let (key, csr, cert) = (dir.join("v1.key"), dir.join("v1.csr"), dir.join("v1.crt"));
        let openssl = |args: &[&str]| std::process::Command::new("openssl").args(args).output().is_ok_and(|o| o.status.success());
        let (k, c, r) = (key.to_str()?, csr.to_str()?, cert.to_str()?);
        let made = openssl(&["genrsa", "-out", k, "2048"])
            && openssl(&["req", "-new", "-key", k, "-subj", "/CN=client", "-out", c])
            && openssl(&["x509", "-req", "-in", c, "-signkey", k, "-days", "2", "-out", r]);
        made.then_some((cert, key))
    }

    #[test]
    fn a_version_1_certificate_is_named_with_how_to_make_a_v3_one() {
        let dir = std::env::temp_dir().join(format!("redlock-tls-v1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let Some((cert, key)) = v1_pair(&dir) else {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("openssl could not make a v1 certificate (scripts/install-deps.sh installs openssl)");
        };
        let settings = TlsSettings { client_cert: Some(Pem::File(cert)), client_key: Some(Pem::File(key)), ..TlsSettings::default() };
        let err = Tls::load(&settings).expect_err("a v1 certificate");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(err.contains("X.509 v1") && err.contains("-extfile"), "{err}");
        let server = "Io: invalid peer certificate: Other(OtherError(UnsupportedCertVersion))";
        assert!(matches!(cause_in_text(server), Some(Cause::Version1)));
    }

    #[test]
    fn causes_are_found_in_rustls_words_too() {
        let cluster = "Failed to create initial connections - Io: invalid peer certificate: UnknownIssuer";
        assert_eq!(cause_in_text(cluster), Some(Cause::UnknownCa));
        assert_eq!(cause_in_text("x: received fatal alert: CertificateRequired"), Some(Cause::ClientCertificateRequired));
        assert_eq!(cause_in_text("received corrupt message of type InvalidContentType"), Some(Cause::NotTls));
        assert_eq!(cause_in_text("Connection reset by peer (os error 104)"), None);
        // The words agree with the typed errors they come from.
        for (typed, cause) in [
            (rustls::Error::InvalidCertificate(rustls::CertificateError::Expired), Cause::Expired),
            (rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer), Cause::UnknownCa),
            (rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA), Cause::ClientCertificateRefused),
        ] {
            assert_eq!((cause_of(&typed), cause_in_text(&typed.to_string())), (cause, Some(cause)), "{typed}");
        }
    }

    #[test]
    fn a_key_given_as_text_is_never_printed() {
        let shown = format!("{:?}", Pem::Text(b"-----BEGIN PRIVATE KEY-----secret".to_vec()));
        assert!(!shown.contains("secret"), "{shown}");
    }
}
