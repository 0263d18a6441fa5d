//! Native HTTPS: the listeners' rustls settings from `server.tls_cert` and
//! `server.tls_key`, swapped whole when a reload re-reads the files.
//!
//! Rule: the files are read here only, on start and on reload; a handshake
//! reads the settings swapped in last and never touches the disk. The
//! crypto provider is aws-lc-rs, the one reqwest's rustls already builds,
//! named explicitly so a second provider in the tree could never make the
//! choice ambiguous.

use crate::config::Tls;
use arc_swap::ArcSwap;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::aws_lc_rs;

/// The certificate and key every TLS listener serves; cheap to clone.
#[derive(Clone)]
pub struct Certs(Arc<ArcSwap<ServerConfig>>);

impl Certs {
    /// Reads the files; an error names the file and what is wrong with it.
    pub fn load(tls: &Tls) -> Result<Self, String> {
        Ok(Self(Arc::new(ArcSwap::new(server_config(tls)?))))
    }

    /// Serves `loaded` (files a reload read with [`server_config`]) from
    /// the next handshake on.
    pub fn store(&self, loaded: Arc<ServerConfig>) {
        self.0.store(loaded);
    }

    /// An acceptor with the settings loaded now; a connection keeps the
    /// ones its handshake started with.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.0.load_full())
    }
}

/// The rustls settings for `tls`: its chain and key, HTTP/2 and HTTP/1.1
/// offered by ALPN (the listener serves both), TLS 1.2 and 1.3.
pub fn server_config(tls: &Tls) -> Result<Arc<ServerConfig>, String> {
    let cert_file = tls.cert.display();
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("server.tls_cert `{cert_file}`: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "server.tls_cert `{cert_file}`: no CERTIFICATE block in the file"
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| format!("server.tls_key `{}`: {e}", tls.key.display()))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("server.tls_cert / server.tls_key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
