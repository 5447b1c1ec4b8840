//! Secrets at rest: a value `cohort secret set` gives is sealed by the
//! node that receives it, with a key derived from the cluster key for this
//! purpose alone, before it is sent to the master. The master journals,
//! replicates and snapshots only the sealed bytes, so a journal, a
//! snapshot or a replica copied off a disk reveals nothing without the key
//! file. A worker's node opens the secrets an attempt's grants name, when
//! the attempt starts, and hands the plaintext to the runtime, which adds
//! it to the granted requests' headers and masks it in the job's log.
//!
//! The associated data binds a sealed value to its cluster and its name,
//! so a value cannot be moved to another secret. Sealed values carry the
//! id of the key that sealed them: after a key rotation, a secret sealed
//! with a key the node no longer holds cannot be opened (set it again).
//! A node without a cluster key refuses secrets: nothing would protect
//! them on disk.

use super::key::Purpose;
use super::seal::{Freshness, SealError, Sealer};

// A sealed secret (its value and the seal's overhead) fits the master's
// bound of a sealed secret.
const _: () = assert!(
    crate::limits::SECRET_VALUE_BYTES_MAX + super::seal::OVERHEAD
        <= cohort_master::limits::SECRET_SEALED_BYTES_MAX
);

/// The associated data of secret `name`.
fn context(name: &str) -> [&[u8]; 2] {
    [b"secret", name.as_bytes()]
}

/// Secret `name`'s `value`, sealed.
pub fn seal(sealer: &Sealer, name: &str, value: &[u8]) -> Vec<u8> {
    sealer.seal(Purpose::Secrets, &context(name), value).0
}

/// Secret `name`'s value, opened from `sealed`.
pub fn open(sealer: &Sealer, name: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
    let opened = sealer.open(Purpose::Secrets, &context(name), sealed, Freshness::Stored)?;
    Ok(opened.plaintext)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::key::Keyring;

    fn sealer(cluster: &str) -> Sealer {
        Sealer::new(Keyring::from_secrets(&[[7u8; 32]]).unwrap(), cluster)
    }

    #[test]
    fn a_secret_opens_under_its_name_and_cluster_only() {
        let ours = sealer("c1");
        let sealed = seal(&ours, "STRIPE", b"sk_live_1");
        assert!(!sealed.windows(9).any(|w| w == b"sk_live_1"));
        assert_eq!(open(&ours, "STRIPE", &sealed).unwrap(), b"sk_live_1");
        // Opened again much later: stored values have no window.
        assert_eq!(open(&ours, "STRIPE", &sealed).unwrap(), b"sk_live_1");
        assert_eq!(open(&ours, "OTHER", &sealed), Err(SealError::Forged));
        assert_eq!(
            open(&sealer("c2"), "STRIPE", &sealed),
            Err(SealError::Forged)
        );
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(open(&ours, "STRIPE", &tampered), Err(SealError::Forged));
        // Not an HTTP body either: each purpose has its own key.
        let as_http = ours.open(Purpose::Http, &context("STRIPE"), &sealed, Freshness::Bound);
        assert_eq!(as_http.unwrap_err(), SealError::Forged);
    }
}
