//! The endpoint's own TLS (`--tls-port`): its certificate and key, and
//! the CA whose certificates its clients show, read and checked once at
//! start, as redis-server's tls-cert-file, tls-key-file, tls-ca-cert-file
//! and tls-auth-clients.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio_rustls::TlsAcceptor;

/// Whether a client must show a certificate by the CA (redis-server's
/// tls-auth-clients: yes by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthClients {
    /// A certificate by the CA is required.
    #[default]
    Yes,
    /// None is asked for.
    No,
    /// Asked for, not required; one shown must be by the CA.
    Optional,
}

/// The files of the endpoint's TLS.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Needed unless `auth_clients` is `No`.
    pub ca_cert: Option<PathBuf>,
    pub auth_clients: AuthClients,
}

impl TlsFiles {
    /// The acceptor of the TLS listener; an error names the option, the
    /// file and what is wrong with it.
    pub fn acceptor(&self) -> Result<TlsAcceptor, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates("--tls-cert-file", &self.cert)?;
        let key_bytes = read("--tls-key-file", &self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| {
            format!(
                "--tls-key-file {}: no private key found ({e}); expected an unencrypted PEM key \
                 (BEGIN PRIVATE KEY, BEGIN RSA PRIVATE KEY or BEGIN EC PRIVATE KEY)",
                self.key.display()
            )
        })?;
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = match (self.auth_clients, &self.ca_cert) {
            (AuthClients::No, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err("--tls-auth-clients yes or optional needs --tls-ca-cert-file, the CA that signed the clients' \
                            certificates (or --tls-auth-clients no)"
                    .into())
            }
            (auth, Some(ca)) => {
                let mut roots = rustls::RootCertStore::empty();
                for (i, cert) in certificates("--tls-ca-cert-file", ca)?.into_iter().enumerate() {
                    roots.add(cert).map_err(|e| {
                        format!("--tls-ca-cert-file {}: certificate {} is not a usable CA certificate: {e}", ca.display(), i + 1)
                    })?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if auth == AuthClients::Optional { verifier.allow_unauthenticated() } else { verifier };
                let verifier = verifier.build().map_err(|e| format!("--tls-ca-cert-file {}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(chain, key).map_err(|e| {
            format!(
                "--tls-cert-file {} and --tls-key-file {} are not a certificate and its key: {e}",
                self.cert.display(),
                self.key.display()
            )
        })?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

fn read(option: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{option} {}: cannot read it: {e}", path.display()))
}

/// Every certificate of a PEM file, at least one.
fn certificates(option: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(option, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{option} {}: not a PEM certificate: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{option} {}: no certificate in it; expected PEM (-----BEGIN CERTIFICATE-----)", path.display()));
    }
    Ok(certs)
}
