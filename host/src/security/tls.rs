//! TLS for the public API (rustls, ring provider): the server side from a
//! PEM certificate chain and key; the client side (trusting a given CA or
//! the system's roots) is `cohort_client::tls`.
//!
//! The server offers HTTP/2 and HTTP/1.1 by ALPN. Node-to-node requests
//! keep their own sealing ([`super::seal`]) and go to a node's port in plain
//! HTTP: the listener tells the two apart by the first byte (a TLS
//! handshake starts with 0x16), and a plain request to a public route of a
//! TLS node gets `400 tls_required`, so a client that forgot `https://`
//! learns why rather than reading garbage.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

/// First byte of a TLS record carrying a handshake.
pub const HANDSHAKE_BYTE: u8 = 0x16;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration from PEM files.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("cannot read the TLS certificate {}: {e}", cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "{} holds no PEM certificate",
        cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("cannot read the TLS key {}: {e}", key.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| anyhow::anyhow!("the TLS certificate and key do not fit together: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The client side lives with the clients: `cohort_client::tls`.
pub use cohort_client::tls::{client_config, trusting_nothing};
