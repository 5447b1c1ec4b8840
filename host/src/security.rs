//! Security: who may join the cluster, who may use it, and what crosses
//! the network in the clear.
//!
//! Two secrets, two audiences:
//!
//! * **The cluster key** ([`key`]) is shared by the nodes. Everything between
//!   nodes is sealed with it ([`seal`]): every gossip datagram
//!   ([`gossip`]) and the body of every node-to-node HTTP request and its
//!   answer (`/internal/v1/...`, sealed by [`crate::peer`], opened by the
//!   API). Sealing is XChaCha20-Poly1305 (RustCrypto's HChaCha20, ring's
//!   ChaCha20-Poly1305) with a key derived per
//!   purpose by HKDF-SHA256 and the cluster id as associated data, so it
//!   authenticates *and* hides; a timestamp window and a replay guard refuse
//!   old or repeated messages. A node without the key cannot gossip its way
//!   into the membership, cannot be a replica or a worker, and cannot fence
//!   or feed anyone. A key file may hold several keys: the first seals, all
//!   open, which is how a running cluster rotates its key with rolling
//!   restarts.
//! * **Tokens** ([`token`]) are for users of the public API: bearer tokens
//!   with scopes (`read`, `submit`, `admin`). Only a hash is kept, in the
//!   master's journal, so creating or revoking one reaches every node without
//!   a restart. Whoever holds the cluster key can mint tokens.
//!
//! The public API can also be served over TLS ([`tls`]); node-to-node bodies
//! are sealed whether or not TLS is on.
//!
//! **Safe by default**: a node with no cluster key listens only on
//! loopback; anything else needs the key (and so tokens), or an explicit
//! `--insecure`. Everything refused is counted ([`counters`]) for
//! `/metrics`.

pub mod counters;
pub mod gossip;
pub mod key;
pub mod seal;
pub mod secrets;
pub mod tls;
pub mod token;

pub use key::{KeyError, Keyring};
pub use seal::{SealError, Sealer};

/// Fills `buf` from the operating system's random source.
pub(crate) fn random(buf: &mut [u8]) {
    // Without an OS random source no key, nonce or token can be made
    // safely: stopping is the only sound answer.
    getrandom::fill(buf).expect("the operating system's random source failed");
}
