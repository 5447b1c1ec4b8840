//! How a client trusts `https://` servers.

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use std::path::Path;
use std::sync::Arc;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A configuration trusting the CA certificates in `ca` (PEM), or the
/// system's roots.
pub fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let unreadable = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
            for cert in CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            {
                let cert = cert.map_err(|e| unreadable(&e))?;
                roots.add(cert).map_err(|e| unreadable(&e))?;
            }
            if roots.is_empty() {
                return Err(format!("{} holds no PEM certificate", path.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A system root rustls cannot parse is skipped, as browsers do.
                let _ = roots.add(cert);
            }
        }
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A configuration that trusts no server: for a client that only talks
/// plain HTTP (a node's client of other nodes, whose bodies are sealed).
pub fn trusting_nothing() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}
