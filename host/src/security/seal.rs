//! Sealed messages: authenticated encryption with the cluster key.
//!
//! ```text
//! version u8 = 1 | key id [4] | sent at (ms, u64 BE) | nonce [24] | ciphertext | tag [16]
//! ```
//!
//! The cipher is XChaCha20-Poly1305 (the HChaCha20 subkey by RustCrypto's
//! `chacha20`, the ChaCha20-Poly1305 under it by `ring`, a test pins the
//! bytes to RustCrypto's `XChaCha20Poly1305`).
//!
//! The associated data is the header itself, the cluster id and a
//! *context* the caller gives (for HTTP: method and path of a request, or
//! the request's nonce and the status of its answer), so a sealed body
//! cannot be moved to another route, another cluster or another answer.
//! Nonces are 24 bytes (XChaCha20): 16 random bytes drawn once per
//! [`Sealer`] and a 64-bit counter, so no two messages share one (the
//! chance that two processes draw the same prefix is 2^-128) and sealing
//! makes no system call.
//!
//! **Freshness.** A message whose sending time is more than [`SEAL_WINDOW_MS`]
//! away from the receiver's clock is refused (nodes' clocks must agree
//! within that). Inside the window, a [`ReplayGuard`] remembers every
//! nonce it accepted until the message could no longer pass the window, so
//! each message is accepted at most once. Answers need no guard: each is
//! bound to the nonce of the request it answers, which the caller made.
//!
//! Everything is checked in this order: shape, key id, tag, window,
//! replay. Only authenticated messages ever reach the guard, so someone
//! without the key cannot fill it.
//!
//! [`SEAL_WINDOW_MS`]: crate::limits::SEAL_WINDOW_MS

use super::key::{KEY_BYTES, Keyring, Purpose};
use crate::limits::{SEAL_REPLAY_ENTRIES_MAX, SEAL_WINDOW_MS};
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

/// Format version of a sealed message.
pub const VERSION: u8 = 1;
/// Bytes before the ciphertext.
pub const HEADER_BYTES: usize = 1 + 4 + 8 + 24;
/// Bytes of the authentication tag.
pub const TAG_BYTES: usize = 16;
/// Bytes sealing adds to a message.
pub const OVERHEAD: usize = HEADER_BYTES + TAG_BYTES;

/// Why a sealed message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Too short, or not this format.
    #[error("not a sealed cohort message")]
    Malformed,
    /// Sealed with a key this node does not hold.
    #[error("sealed with a cluster key this node does not hold")]
    UnknownKey,
    /// The tag does not match: tampered with, or the wrong cluster or route.
    #[error("the seal does not verify (wrong key, cluster or route, or tampered with)")]
    Forged,
    /// Sent too long ago or too far in the future.
    #[error(
        "sent outside the {SEAL_WINDOW_MS} ms freshness window (clocks apart, or replayed late)"
    )]
    Stale,
    /// Accepted once already.
    #[error("replayed: this message was accepted before")]
    Replayed,
    /// The replay guard is full.
    #[error("too many sealed messages in the freshness window")]
    GuardFull,
}

impl SealError {
    /// Stable name, for metrics.
    pub fn reason(self) -> &'static str {
        match self {
            SealError::Malformed => "malformed",
            SealError::UnknownKey => "unknown_key",
            SealError::Forged => "forged",
            SealError::Stale => "stale",
            SealError::Replayed => "replayed",
            SealError::GuardFull => "guard_full",
        }
    }
}

/// Whether an opened message must be new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Check the window and remember the nonce (requests, datagrams).
    Once,
    /// Answers, bound to a request nonce by their context.
    Bound,
    /// Values kept at rest (secrets in the master's state), opened any
    /// number of times, long after they were sealed: no window, no guard.
    Stored,
}

/// An opened message.
#[derive(Debug)]
pub struct Opened {
    /// What was sealed.
    pub plaintext: Vec<u8>,
    /// Its nonce (an answer is bound to it).
    pub nonce: [u8; 24],
}

/// Seals and opens messages for one cluster.
pub struct Sealer {
    keyring: Keyring,
    cluster_id: String,
    nonce_prefix: [u8; 16],
    nonce_counter: std::sync::atomic::AtomicU64,
    gossip_guard: ReplayGuard,
    http_guard: ReplayGuard,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("keys", &self.keyring)
            .field("cluster_id", &self.cluster_id)
            .finish()
    }
}

impl Sealer {
    /// A sealer for `cluster_id` with `keyring`.
    pub fn new(keyring: Keyring, cluster_id: &str) -> Self {
        let mut nonce_prefix = [0u8; 16];
        super::random(&mut nonce_prefix);
        Self {
            keyring,
            cluster_id: cluster_id.into(),
            nonce_prefix,
            nonce_counter: std::sync::atomic::AtomicU64::new(0),
            gossip_guard: ReplayGuard::new(SEAL_REPLAY_ENTRIES_MAX),
            http_guard: ReplayGuard::new(SEAL_REPLAY_ENTRIES_MAX),
        }
    }

    /// The keys.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// Seals `plaintext` now; returns the message and its nonce.
    pub fn seal(
        &self,
        purpose: Purpose,
        context: &[&[u8]],
        plaintext: &[u8],
    ) -> (Vec<u8>, [u8; 24]) {
        self.seal_at(purpose, context, crate::contract::now_ms(), plaintext)
    }

    /// [`seal`](Self::seal) at a given time.
    pub fn seal_at(
        &self,
        purpose: Purpose,
        context: &[&[u8]],
        now_ms: u64,
        plaintext: &[u8],
    ) -> (Vec<u8>, [u8; 24]) {
        let key = self.keyring.sealing();
        let mut nonce = [0u8; 24];
        nonce[..16].copy_from_slice(&self.nonce_prefix);
        let count = self
            .nonce_counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        nonce[16..].copy_from_slice(&count.to_be_bytes());
        let mut out = Vec::with_capacity(OVERHEAD + plaintext.len());
        out.push(VERSION);
        out.extend_from_slice(&key.id());
        out.extend_from_slice(&now_ms.to_be_bytes());
        out.extend_from_slice(&nonce);
        let aad = self.aad(&out, context);
        out.extend_from_slice(plaintext);
        let tag = xchacha(key.subkey(purpose), &nonce)
            .seal_in_place_separate_tag(
                ring_nonce(&nonce),
                ring::aead::Aad::from(&aad),
                &mut out[HEADER_BYTES..],
            )
            .expect("ChaCha20-Poly1305 seals any message under 256 GiB");
        out.extend_from_slice(tag.as_ref());
        (out, nonce)
    }

    /// Opens `message` now.
    pub fn open(
        &self,
        purpose: Purpose,
        context: &[&[u8]],
        message: &[u8],
        freshness: Freshness,
    ) -> Result<Opened, SealError> {
        self.open_at(
            purpose,
            context,
            crate::contract::now_ms(),
            message,
            freshness,
        )
    }

    /// [`open`](Self::open) at a given time.
    pub fn open_at(
        &self,
        purpose: Purpose,
        context: &[&[u8]],
        now_ms: u64,
        message: &[u8],
        freshness: Freshness,
    ) -> Result<Opened, SealError> {
        if message.len() < OVERHEAD || message[0] != VERSION {
            return Err(SealError::Malformed);
        }
        let header = &message[..HEADER_BYTES];
        let key_id: [u8; 4] = header[1..5].try_into().expect("4 bytes");
        let sent_ms = u64::from_be_bytes(header[5..13].try_into().expect("8 bytes"));
        let nonce: [u8; 24] = header[13..37].try_into().expect("24 bytes");
        let key = self.keyring.find(key_id).ok_or(SealError::UnknownKey)?;
        let aad = self.aad(header, context);
        let mut plaintext = message[HEADER_BYTES..].to_vec();
        let opened = xchacha(key.subkey(purpose), &nonce)
            .open_in_place(
                ring_nonce(&nonce),
                ring::aead::Aad::from(&aad),
                &mut plaintext,
            )
            .map_err(|_| SealError::Forged)?
            .len();
        plaintext.truncate(opened);
        if freshness == Freshness::Once {
            if sent_ms.abs_diff(now_ms) > SEAL_WINDOW_MS {
                return Err(SealError::Stale);
            }
            let guard = match purpose {
                Purpose::Gossip => &self.gossip_guard,
                Purpose::Http => &self.http_guard,
                // A stored secret is opened many times, never once: asked
                // to, it is not a message of this kind.
                Purpose::Secrets => return Err(SealError::Malformed),
            };
            guard.admit(sent_ms, &nonce, now_ms)?;
        }
        Ok(Opened { plaintext, nonce })
    }

    fn aad(&self, header: &[u8], context: &[&[u8]]) -> Vec<u8> {
        let mut aad = Vec::with_capacity(64 + context.iter().map(|c| c.len() + 4).sum::<usize>());
        aad.extend_from_slice(header);
        for part in std::iter::once(self.cluster_id.as_bytes()).chain(context.iter().copied()) {
            // Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
            aad.extend_from_slice(&(part.len() as u32).to_be_bytes());
            aad.extend_from_slice(part);
        }
        aad
    }
}

/// XChaCha20-Poly1305 for `nonce`: ChaCha20-Poly1305 under the HChaCha20
/// subkey of its first 16 bytes (ring does the ChaCha20-Poly1305).
fn xchacha(key: &[u8; KEY_BYTES], nonce: &[u8; 24]) -> ring::aead::LessSafeKey {
    use chacha20::cipher::consts::U10;
    use chacha20::cipher::generic_array::GenericArray;
    let subkey = chacha20::hchacha::<U10>(
        GenericArray::from_slice(key),
        GenericArray::from_slice(&nonce[..16]),
    );
    let unbound = ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, &subkey)
        .expect("a 32-byte ChaCha20-Poly1305 key");
    ring::aead::LessSafeKey::new(unbound)
}

/// The ChaCha20-Poly1305 nonce of an XChaCha20 `nonce`: four zero bytes and
/// its last eight.
fn ring_nonce(nonce: &[u8; 24]) -> ring::aead::Nonce {
    let mut short = [0u8; 12];
    short[4..].copy_from_slice(&nonce[16..]);
    ring::aead::Nonce::assume_unique_for_key(short)
}

/// Nonces accepted within the freshness window.
#[derive(Debug)]
pub struct ReplayGuard {
    entries_max: usize,
    inner: Mutex<GuardInner>,
}

#[derive(Debug, Default)]
struct GuardInner {
    seen: HashSet<[u8; 24]>,
    /// In order of acceptance, with the sending time: the front is pruned
    /// once it could no longer pass the window.
    order: VecDeque<(u64, [u8; 24])>,
}

impl ReplayGuard {
    /// A guard remembering at most `entries_max` nonces.
    pub fn new(entries_max: usize) -> Self {
        Self {
            entries_max,
            inner: Mutex::default(),
        }
    }

    /// Accepts `nonce` (sent at `sent_ms`) once.
    fn admit(&self, sent_ms: u64, nonce: &[u8; 24], now_ms: u64) -> Result<(), SealError> {
        let nonce = *nonce;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(&(sent, old)) = inner.order.front() {
            // Entries behind the front may be older still; they stay a
            // little longer, which costs memory, never safety.
            if sent.saturating_add(SEAL_WINDOW_MS) >= now_ms {
                break;
            }
            inner.order.pop_front();
            inner.seen.remove(&old);
        }
        if inner.seen.contains(&nonce) {
            return Err(SealError::Replayed);
        }
        if inner.seen.len() >= self.entries_max {
            return Err(SealError::GuardFull);
        }
        inner.seen.insert(nonce);
        inner.order.push_back((sent_ms, nonce));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::key::generate;
    use proptest::prelude::*;

    fn sealer(text: &str, cluster: &str) -> Sealer {
        Sealer::new(Keyring::parse(text).unwrap(), cluster)
    }

    const NOW: u64 = 1_800_000_000_000;
    const CTX: &[&[u8]] = &[b"POST", b"/internal/v1/master"];

    #[test]
    fn round_trip_and_each_check() {
        let key = generate();
        let a = sealer(&key, "c1");
        let (message, nonce) = a.seal_at(Purpose::Http, CTX, NOW, b"hello");
        assert!(
            !message.windows(5).any(|w| w == b"hello"),
            "sealed means hidden"
        );
        let opened = a
            .open_at(Purpose::Http, CTX, NOW, &message, Freshness::Once)
            .unwrap();
        assert_eq!(opened.plaintext, b"hello");
        assert_eq!(opened.nonce, nonce);
        // The same message again: replayed.
        let again = a.open_at(Purpose::Http, CTX, NOW + 1, &message, Freshness::Once);
        assert_eq!(again.unwrap_err(), SealError::Replayed);
        // Another route, purpose, cluster or key: forged or unknown.
        let (message, _) = a.seal_at(Purpose::Http, CTX, NOW, b"x");
        let other_route: &[&[u8]] = &[b"POST", b"/internal/v1/replication"];
        assert_eq!(
            a.open_at(Purpose::Http, other_route, NOW, &message, Freshness::Once)
                .unwrap_err(),
            SealError::Forged
        );
        assert_eq!(
            a.open_at(Purpose::Gossip, CTX, NOW, &message, Freshness::Once)
                .unwrap_err(),
            SealError::Forged
        );
        let other_cluster = sealer(&key, "c2");
        assert_eq!(
            other_cluster
                .open_at(Purpose::Http, CTX, NOW, &message, Freshness::Once)
                .unwrap_err(),
            SealError::Forged
        );
        let stranger = sealer(&generate(), "c1");
        assert_eq!(
            stranger
                .open_at(Purpose::Http, CTX, NOW, &message, Freshness::Once)
                .unwrap_err(),
            SealError::UnknownKey
        );
        // Too old, too new.
        for at in [NOW + SEAL_WINDOW_MS + 1, NOW - SEAL_WINDOW_MS - 1] {
            let (message, _) = a.seal_at(Purpose::Http, CTX, NOW, b"x");
            assert_eq!(
                a.open_at(Purpose::Http, CTX, at, &message, Freshness::Once)
                    .unwrap_err(),
                SealError::Stale
            );
        }
        // Too short or another version.
        assert_eq!(
            a.open_at(Purpose::Http, CTX, NOW, &[1; OVERHEAD - 1], Freshness::Once)
                .unwrap_err(),
            SealError::Malformed
        );
        let (mut message, _) = a.seal_at(Purpose::Http, CTX, NOW, b"x");
        message[0] = 2;
        assert_eq!(
            a.open_at(Purpose::Http, CTX, NOW, &message, Freshness::Once)
                .unwrap_err(),
            SealError::Malformed
        );
    }

    #[test]
    fn a_ring_with_the_new_key_second_opens_both_and_seals_with_the_first() {
        let old = generate();
        let new = generate();
        let before = sealer(&old, "c");
        let during = sealer(&format!("{old}{new}"), "c");
        let after = sealer(&format!("{new}{old}"), "c");
        let only_new = sealer(&new, "c");
        let (m, _) = before.seal_at(Purpose::Gossip, &[], NOW, b"1");
        assert!(
            during
                .open_at(Purpose::Gossip, &[], NOW, &m, Freshness::Once)
                .is_ok()
        );
        assert!(
            after
                .open_at(Purpose::Gossip, &[], NOW, &m, Freshness::Once)
                .is_ok()
        );
        let (m, _) = after.seal_at(Purpose::Gossip, &[], NOW, b"2");
        assert!(
            during
                .open_at(Purpose::Gossip, &[], NOW, &m, Freshness::Once)
                .is_ok()
        );
        assert!(
            only_new
                .open_at(Purpose::Gossip, &[], NOW, &m, Freshness::Once)
                .is_ok()
        );
        assert_eq!(
            before
                .open_at(Purpose::Gossip, &[], NOW, &m, Freshness::Once)
                .unwrap_err(),
            SealError::UnknownKey
        );
    }

    #[test]
    fn answers_bound_to_a_request_need_no_guard_but_must_match() {
        let a = sealer(&generate(), "c");
        let (m, _) = a.seal_at(Purpose::Http, &[b"answer", b"nonce-1", b"200"], NOW, b"ok");
        for _ in 0..2 {
            let opened = a.open_at(
                Purpose::Http,
                &[b"answer", b"nonce-1", b"200"],
                NOW,
                &m,
                Freshness::Bound,
            );
            assert_eq!(opened.unwrap().plaintext, b"ok");
        }
        let wrong = a.open_at(
            Purpose::Http,
            &[b"answer", b"nonce-2", b"200"],
            NOW,
            &m,
            Freshness::Bound,
        );
        assert_eq!(wrong.unwrap_err(), SealError::Forged);
        let wrong = a.open_at(
            Purpose::Http,
            &[b"answer", b"nonce-1", b"500"],
            NOW,
            &m,
            Freshness::Bound,
        );
        assert_eq!(wrong.unwrap_err(), SealError::Forged);
    }

    #[test]
    fn nonces_never_repeat_within_or_across_sealers() {
        let key = generate();
        let (a, b) = (sealer(&key, "c"), sealer(&key, "c"));
        let mut seen = HashSet::new();
        for _ in 0..1000 {
            assert!(seen.insert(a.seal_at(Purpose::Gossip, &[], NOW, b"x").1));
            assert!(seen.insert(b.seal_at(Purpose::Gossip, &[], NOW, b"x").1));
        }
    }

    #[test]
    fn the_guard_forgets_only_what_the_window_refuses_and_is_bounded() {
        let guard = ReplayGuard::new(3);
        let nonce = |n: u8| [n; 24];
        guard.admit(NOW, &nonce(1), NOW).unwrap();
        guard.admit(NOW, &nonce(2), NOW).unwrap();
        guard.admit(NOW, &nonce(3), NOW).unwrap();
        assert_eq!(
            guard.admit(NOW, &nonce(4), NOW).unwrap_err(),
            SealError::GuardFull
        );
        // Still inside the window: remembered.
        assert_eq!(
            guard
                .admit(NOW, &nonce(1), NOW + SEAL_WINDOW_MS)
                .unwrap_err(),
            SealError::Replayed
        );
        // Past it, the window alone refuses them, so they are forgotten.
        guard
            .admit(
                NOW + SEAL_WINDOW_MS + 1,
                &nonce(4),
                NOW + SEAL_WINDOW_MS + 1,
            )
            .unwrap();
        let remembered = guard.inner.lock().unwrap().seen.len();
        assert_eq!(remembered, 1);
    }

    /// The construction is XChaCha20-Poly1305 to the byte: RustCrypto's
    /// implementation opens what this seals and seals the same bytes.
    #[test]
    fn sealing_is_xchacha20_poly1305() {
        use chacha20poly1305::aead::{Aead, KeyInit, Payload};
        let ring = Keyring::parse(&generate()).unwrap();
        let a = Sealer::new(ring, "c");
        let key = a.keyring().sealing();
        let reference = chacha20poly1305::XChaCha20Poly1305::new(key.subkey(Purpose::Http).into());
        for len in [0usize, 1, 63, 64, 65, 1000] {
            let plaintext: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let (sealed, nonce) = a.seal_at(Purpose::Http, CTX, NOW, &plaintext);
            let aad = a.aad(&sealed[..HEADER_BYTES], CTX);
            let expected = reference
                .encrypt(
                    chacha20poly1305::XNonce::from_slice(&nonce),
                    Payload {
                        msg: &plaintext,
                        aad: &aad,
                    },
                )
                .unwrap();
            assert_eq!(&sealed[HEADER_BYTES..], &expected[..], "{len} bytes");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever bytes arrive, opening never panics and never accepts a
        /// message that was not sealed with the key.
        #[test]
        fn arbitrary_bytes_never_open(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let a = sealer(&generate(), "c");
            prop_assert!(a.open_at(Purpose::Gossip, &[], NOW, &bytes, Freshness::Once).is_err());
        }

        /// Flipping any bit of a sealed message makes it refused.
        #[test]
        fn any_flipped_bit_is_refused(
            plaintext in proptest::collection::vec(any::<u8>(), 0..256),
            bit in any::<usize>(),
        ) {
            let a = sealer(&generate(), "c");
            let (mut message, _) = a.seal_at(Purpose::Gossip, &[], NOW, &plaintext);
            let bit = bit % (message.len() * 8);
            message[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(a.open_at(Purpose::Gossip, &[], NOW, &message, Freshness::Once).is_err());
        }
    }
}
