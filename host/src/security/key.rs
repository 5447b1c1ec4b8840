//! Cluster keys: 256-bit secrets in a small text file, one per line.
//!
//! ```text
//! # cohort cluster key (keep secret; same file on every node)
//! cohort-cluster-key-v1:3f0c...64 hex digits
//! ```
//!
//! The first key of a file seals; every key in it opens. That is all key
//! rotation needs (`docs/security.md`, "Rotating the cluster key"): add the new key
//! second, restart node by node; move it first, restart; drop the old one,
//! restart. Each key is known on the wire by a 4-byte id derived from it
//! (not the key), so a receiver picks the right key without trying all.
//!
//! Nothing here is hand-rolled cryptography: the per-purpose keys come from
//! HKDF-SHA256 and are used by [`super::seal`] with XChaCha20-Poly1305.

use crate::limits::{KEY_FILE_BYTES_MAX, KEYS_MAX};
use hkdf::Hkdf;
use sha2::Sha256;
use std::path::Path;

/// Bytes of a cluster key.
pub const KEY_BYTES: usize = 32;
/// What every key line starts with.
const PREFIX: &str = "cohort-cluster-key-v1:";
/// HKDF salt: fixed, so the same key gives the same subkeys everywhere.
const SALT: &[u8] = b"cohort cluster key v1";

/// What a sealed message is for; each purpose has its own derived key, so
/// a gossip datagram can never be replayed as an HTTP body or the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Gossip datagrams.
    Gossip,
    /// Node-to-node HTTP bodies.
    Http,
    /// Secrets at rest in the master's state (`cohort secret set`).
    Secrets,
}

/// One key, ready to use.
pub struct Key {
    id: [u8; 4],
    gossip: [u8; KEY_BYTES],
    http: [u8; KEY_BYTES],
    secrets: [u8; KEY_BYTES],
}

impl Key {
    fn new(secret: &[u8; KEY_BYTES]) -> Self {
        let hkdf = Hkdf::<Sha256>::new(Some(SALT), secret);
        let derive = |info: &[u8]| {
            let mut out = [0u8; KEY_BYTES];
            hkdf.expand(info, &mut out)
                .expect("32 bytes is a valid HKDF-SHA256 output length");
            out
        };
        let id = derive(b"key id");
        Self {
            id: [id[0], id[1], id[2], id[3]],
            gossip: derive(b"gossip"),
            http: derive(b"http"),
            secrets: derive(b"secrets at rest"),
        }
    }

    /// The key's public id (derived from it, revealing nothing of it).
    pub fn id(&self) -> [u8; 4] {
        self.id
    }

    /// The XChaCha20-Poly1305 key for `purpose`.
    pub(crate) fn subkey(&self, purpose: Purpose) -> &[u8; KEY_BYTES] {
        match purpose {
            Purpose::Gossip => &self.gossip,
            Purpose::Http => &self.http,
            Purpose::Secrets => &self.secrets,
        }
    }
}

/// The keys a node holds: the first seals, all open.
pub struct Keyring {
    keys: Vec<Key>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Ids only: a key must never reach a log.
        f.debug_struct("Keyring").field("ids", &self.ids()).finish()
    }
}

/// Why a key file was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read the cluster key file {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// The file's contents are not a key file.
    #[error("{0}")]
    Invalid(String),
}

impl Keyring {
    /// A keyring of raw secrets (the first seals).
    pub fn from_secrets(secrets: &[[u8; KEY_BYTES]]) -> Result<Self, KeyError> {
        if secrets.is_empty() || secrets.len() > KEYS_MAX {
            return Err(KeyError::Invalid(format!(
                "a key file holds 1 to {KEYS_MAX} keys, this one has {}",
                secrets.len()
            )));
        }
        let keys: Vec<Key> = secrets.iter().map(Key::new).collect();
        for (i, key) in keys.iter().enumerate() {
            if keys[..i].iter().any(|k| k.id == key.id) {
                return Err(KeyError::Invalid("the same key is listed twice".into()));
            }
        }
        Ok(Self { keys })
    }

    /// Parses a key file's text.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let mut secrets = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let invalid = |what: &str| {
                KeyError::Invalid(format!(
                    "line {}: {what}; a key line is `{PREFIX}` and 64 hex digits (make one with `cohort keygen FILE`)",
                    number + 1
                ))
            };
            let hex = line
                .strip_prefix(PREFIX)
                .ok_or_else(|| invalid("not a cohort cluster key"))?;
            secrets.push(decode_hex(hex).ok_or_else(|| invalid("not 64 hex digits"))?);
        }
        if secrets.is_empty() {
            return Err(KeyError::Invalid(
                "the key file holds no key (make one with `cohort keygen FILE`)".into(),
            ));
        }
        Self::from_secrets(&secrets)
    }

    /// Reads and parses the key file at `path`.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let read = |error| KeyError::Read {
            path: path.display().to_string(),
            error,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, KEY_FILE_BYTES_MAX),
            &mut text,
        )
        .map_err(read)?;
        Self::parse(&text).map_err(|error| match error {
            KeyError::Invalid(message) => {
                KeyError::Invalid(format!("{}: {message}", path.display()))
            }
            other => other,
        })
    }

    /// The key that seals.
    pub fn sealing(&self) -> &Key {
        &self.keys[0]
    }

    /// The key with `id`, if this ring holds it.
    pub fn find(&self, id: [u8; 4]) -> Option<&Key> {
        self.keys.iter().find(|key| key.id == id)
    }

    /// The keys' ids in hex, sealing key first (safe to log).
    pub fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|key| encode_hex(&key.id)).collect()
    }
}

/// A fresh key file's text: one new random key.
pub fn generate() -> String {
    let mut secret = [0u8; KEY_BYTES];
    super::random(&mut secret);
    format!(
        "# cohort cluster key: keep it secret, give every node of the cluster the same file.\n{PREFIX}{}\n",
        encode_hex(&secret)
    )
}

/// Writes a new key file at `path` (owner-only permissions); never
/// overwrites an existing file.
pub fn write_new(path: &Path) -> Result<(), KeyError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let fail = |error| KeyError::Read {
        path: path.display().to_string(),
        error,
    };
    let mut file = options.open(path).map_err(fail)?;
    file.write_all(generate().as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)
}

pub(crate) fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn decode_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    let hex = hex.as_bytes();
    if hex.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_files_parse_and_differ() {
        let a = Keyring::parse(&generate()).unwrap();
        let b = Keyring::parse(&generate()).unwrap();
        assert_ne!(a.ids(), b.ids());
        assert_eq!(a.ids().len(), 1);
    }

    #[test]
    fn the_first_key_seals_and_all_are_found() {
        let text = format!("{}{}", generate(), generate());
        let ring = Keyring::parse(&text).unwrap();
        let ids = ring.ids();
        assert_eq!(ids.len(), 2);
        assert_eq!(encode_hex(&ring.sealing().id()), ids[0]);
        let second = decode_hex::<4>(&ids[1]).unwrap();
        assert!(ring.find(second).is_some());
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        for (text, needle) in [
            ("", "holds no key"),
            ("# only a comment\n", "holds no key"),
            ("hello\n", "line 1: not a cohort cluster key"),
            ("cohort-cluster-key-v1:abcd\n", "not 64 hex digits"),
            (
                &format!("{PREFIX}{}\n", "zz".repeat(32)),
                "not 64 hex digits",
            ),
        ] {
            let error = Keyring::parse(text).unwrap_err().to_string();
            assert!(error.contains(needle), "{text:?}: {error}");
        }
        let same = format!("{PREFIX}{}\n", "ab".repeat(32));
        let error = Keyring::parse(&same.repeat(2)).unwrap_err().to_string();
        assert!(error.contains("twice"), "{error}");
        let many = (0..=KEYS_MAX).map(|_| generate()).collect::<String>();
        assert!(Keyring::parse(&many).is_err());
    }

    #[test]
    fn keygen_never_overwrites_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.key");
        write_new(&path).unwrap();
        assert!(Keyring::load(&path).is_ok());
        assert!(write_new(&path).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "group/other may not read the key");
        }
    }

    #[test]
    fn debug_shows_ids_not_secrets() {
        let text = generate();
        let ring = Keyring::parse(&text).unwrap();
        let secret_hex = text.lines().nth(1).unwrap().strip_prefix(PREFIX).unwrap();
        let shown = format!("{ring:?}");
        assert!(!shown.contains(secret_hex));
        assert!(shown.contains(&ring.ids()[0]));
    }
}
