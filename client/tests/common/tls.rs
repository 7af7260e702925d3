//! Certificates for the TLS tests, made by `scripts/test-certs.sh` (the
//! openssl CLI; the Python and Node suites make theirs with it too) in a
//! temporary directory removed with `Certs`: a CA, a server certificate
//! for localhost and 127.0.0.1, a client certificate by the CA, an
//! unrelated CA and a client certificate by it, a certificate for another
//! name, and an expired one.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use redlock::{Pem, Settings, TlsSettings};

use super::{Opts, TlsServer};

pub struct Certs {
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Certs {
    pub fn make() -> Certs {
        let tmp = tempfile::Builder::new().prefix("redlock-tls-test-").tempdir().expect("temp dir");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/test-certs.sh");
        let out = Command::new("bash").arg(script).arg(tmp.path()).output().expect("run scripts/test-certs.sh (needs openssl)");
        assert!(out.status.success(), "scripts/test-certs.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
        Certs { dir: tmp.path().to_path_buf(), _tmp: tmp }
    }

    /// `<dir>/<name>`, e.g. `ca.crt`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A TLS-only server presenting `<cert>.crt`, asking its clients for a
    /// certificate by the test CA.
    pub fn server(&self, cert: &str) -> Opts {
        Opts {
            tls: Some(TlsServer {
                cert: self.path(&format!("{cert}.crt")),
                key: self.path(&format!("{cert}.key")),
                ca: self.path("ca.crt"),
                auth_clients: true,
                client_cert: self.path("client.crt"),
                client_key: self.path("client.key"),
            }),
            ..Opts::default()
        }
    }

    /// The test CA, and the client certificate it signed.
    pub fn tls(&self) -> TlsSettings {
        TlsSettings {
            ca_cert: Some(Pem::File(self.path("ca.crt"))),
            client_cert: Some(Pem::File(self.path("client.crt"))),
            client_key: Some(Pem::File(self.path("client.key"))),
            insecure: false,
        }
    }

    /// `relaxed()` settings with `tls()`.
    pub fn settings(&self) -> Settings {
        Settings { tls: self.tls(), ..super::relaxed() }
    }
}
