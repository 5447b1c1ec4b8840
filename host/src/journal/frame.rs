//! Record framing for journal segment files.
//!
//! A segment is a sequence of frames:
//!
//! ```text
//! +-----------+-------------------+------------------+------------------+
//! | len: u32  | payload_crc: u32  | header_crc: u32  | payload: len     |
//! +-----------+-------------------+------------------+------------------+
//!   little-endian; CRC-32 (IEEE); header_crc covers len and payload_crc
//! ```
//!
//! The header has its own checksum so that a torn or flipped length is
//! caught before it is used, and so that telling "is a valid frame here?"
//! costs O(1) at any offset: recovery's search for valid data after a broken
//! frame is linear in the segment size, not quadratic. Decoding never trusts
//! a length beyond [`RECORD_BYTES_MAX`], so garbage cannot make recovery
//! allocate or checksum gigabytes.
//!
//! [`scan`] reads a whole segment and decides what its end means:
//!
//! * a clean end: every byte belongs to a valid frame;
//! * a **torn tail**: the segment ends in an incomplete or broken frame and no
//!   valid frame follows it. This is what a crash during a write leaves; the
//!   bytes were never acknowledged (acknowledgement waits for the fsync that
//!   covers them), so recovery cuts them off;
//! * **corruption**: a broken frame with a valid frame somewhere after it.
//!   Something damaged data that was once durable; recovery must stop and say
//!   so rather than silently drop what follows.
//!
//! Caveat: a crash in the middle of one group-commit write could in theory
//! persist a later frame of the batch but not an earlier one; scan calls that
//! corruption. It fails safe (the node refuses to start and names the
//! offset) rather than guessing.
//!
//! [`RECORD_BYTES_MAX`]: crate::limits::RECORD_BYTES_MAX

use crate::limits::RECORD_BYTES_MAX;

/// Bytes before each payload: length and the two checksums.
pub const FRAME_HEADER_BYTES: usize = 12;

/// Appends one frame to `out` whose payload is `parts` concatenated (so a
/// caller with a header and a body need not join them first).
pub fn encode(parts: &[&[u8]], out: &mut Vec<u8>) {
    let len: usize = parts.iter().map(|part| part.len()).sum();
    assert!(
        len <= RECORD_BYTES_MAX,
        "journal record of {len} bytes is over the limit"
    );
    let mut payload_crc = crc32fast::Hasher::new();
    for part in parts {
        payload_crc.update(part);
    }
    let len = (len as u32).to_le_bytes();
    let payload_crc = payload_crc.finalize().to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&payload_crc);
    out.extend_from_slice(&header_crc(&len, &payload_crc).to_le_bytes());
    for part in parts {
        out.extend_from_slice(part);
    }
}

fn header_crc(len: &[u8], payload_crc: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(len);
    crc.update(payload_crc);
    crc.finalize()
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
}

/// What lies at one offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A valid frame; the next one starts at `next`.
    Frame {
        /// The payload.
        payload: &'a [u8],
        /// Offset just past this frame.
        next: usize,
    },
    /// The bytes end before the frame does.
    Incomplete,
    /// A frame whose header or payload checksum is wrong.
    Corrupt(&'static str),
}

/// Decodes the frame starting at `at` in `buf`.
pub fn decode(buf: &[u8], at: usize) -> Decoded<'_> {
    let rest = &buf[at.min(buf.len())..];
    if rest.len() < FRAME_HEADER_BYTES {
        return Decoded::Incomplete;
    }
    if header_crc(&rest[0..4], &rest[4..8]) != le_u32(&rest[8..12]) {
        return Decoded::Corrupt("header checksum mismatch");
    }
    let len = le_u32(&rest[0..4]) as usize;
    if len > RECORD_BYTES_MAX {
        return Decoded::Corrupt("length over the record limit");
    }
    let Some(payload) = rest.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len) else {
        return Decoded::Incomplete;
    };
    if crc32fast::hash(payload) != le_u32(&rest[4..8]) {
        return Decoded::Corrupt("payload checksum mismatch");
    }
    Decoded::Frame {
        payload,
        next: at + FRAME_HEADER_BYTES + len,
    }
}

/// How a scanned segment ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Tail {
    /// Every byte is part of a valid frame.
    Clean,
    /// Bytes from `at` on are an unfinished write: safe to cut off.
    Torn {
        /// Offset of the first byte to cut.
        at: usize,
    },
    /// The frame at `at` is broken but valid data follows it.
    Corrupt {
        /// Offset of the broken frame.
        at: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The valid frames of a segment and how it ends.
#[derive(Debug)]
pub struct Scan<'a> {
    /// Payloads of the valid frames, in order, up to the first bad one.
    pub payloads: Vec<&'a [u8]>,
    /// How the segment ends after them.
    pub tail: Tail,
}

/// Reads every frame of `segment` (see the module docs for the tail rules).
pub fn scan(segment: &[u8]) -> Scan<'_> {
    let mut payloads = Vec::new();
    let mut at = 0;
    loop {
        if at == segment.len() {
            return Scan {
                payloads,
                tail: Tail::Clean,
            };
        }
        match decode(segment, at) {
            Decoded::Frame { payload, next } => {
                payloads.push(payload);
                at = next;
            }
            bad => {
                let reason = match bad {
                    Decoded::Corrupt(reason) => reason,
                    _ => "incomplete frame",
                };
                let tail = if valid_frame_after(segment, at) {
                    Tail::Corrupt { at, reason }
                } else {
                    Tail::Torn { at }
                };
                return Scan { payloads, tail };
            }
        }
    }
}

/// Whether a valid, non-empty frame starts anywhere after `bad`. Only run
/// when recovery meets a bad frame. Linear: at most offsets the header
/// checksum fails in O(1), and a payload is checksummed only behind a valid
/// header (a 1 in 2^32 chance for garbage).
fn valid_frame_after(segment: &[u8], bad: usize) -> bool {
    (bad + 1..segment.len().saturating_sub(FRAME_HEADER_BYTES)).any(
        |at| matches!(decode(segment, at), Decoded::Frame { payload, .. } if !payload.is_empty()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode(&[p], &mut out);
        }
        out
    }

    #[test]
    fn frames_round_trip() {
        let seg = segment(&[b"one", b"", b"three"]);
        let scan = scan(&seg);
        assert_eq!(scan.payloads, vec![&b"one"[..], b"", b"three"]);
        assert_eq!(scan.tail, Tail::Clean);
    }

    #[test]
    fn a_payload_in_parts_is_the_same_frame_as_joined() {
        let (mut parts, mut joined) = (Vec::new(), Vec::new());
        encode(&[b"head", b"", b"body"], &mut parts);
        encode(&[b"headbody"], &mut joined);
        assert_eq!(parts, joined);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_keeping_whole_frames() {
        let seg = segment(&[b"alpha", b"beta", b"gamma"]);
        let h = FRAME_HEADER_BYTES;
        let ends = [0, h + 5, h + 5 + h + 4];
        for cut in 0..seg.len() {
            let scan = scan(&seg[..cut]);
            let whole = ends.iter().filter(|&&e| e <= cut).count() - 1;
            assert_eq!(scan.payloads.len(), whole, "cut at {cut}");
            let expected = if ends.contains(&cut) {
                Tail::Clean
            } else {
                Tail::Torn { at: ends[whole] }
            };
            assert_eq!(scan.tail, expected, "cut at {cut}");
        }
    }

    #[test]
    fn a_flipped_bit_in_the_last_frame_is_torn() {
        let mut seg = segment(&[b"alpha", b"beta"]);
        let last = seg.len() - 1;
        seg[last] ^= 1;
        let scan = scan(&seg);
        assert_eq!(scan.payloads, vec![&b"alpha"[..]]);
        assert_eq!(
            scan.tail,
            Tail::Torn {
                at: FRAME_HEADER_BYTES + 5
            }
        );
    }

    #[test]
    fn a_flipped_bit_before_valid_frames_is_corruption() {
        for (offset, reason) in [
            (FRAME_HEADER_BYTES + 2, "payload checksum mismatch"),
            (1, "header checksum mismatch"),
        ] {
            let mut seg = segment(&[b"alpha", b"beta", b"gamma"]);
            seg[offset] ^= 0x40;
            let scan = scan(&seg);
            assert!(scan.payloads.is_empty());
            assert_eq!(
                scan.tail,
                Tail::Corrupt { at: 0, reason },
                "flip at {offset}"
            );
        }
    }

    #[test]
    fn a_garbage_header_never_allocates_or_panics() {
        let mut seg = segment(&[b"alpha"]);
        seg[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&seg, 0),
            Decoded::Corrupt("header checksum mismatch")
        );
        assert_eq!(scan(&seg).tail, Tail::Torn { at: 0 });
        assert_eq!(decode(&seg, 1000), Decoded::Incomplete);
        // Even with a consistent header, a length past the limit is refused.
        let len = (RECORD_BYTES_MAX as u32 + 1).to_le_bytes();
        let crc = 0u32.to_le_bytes();
        let mut oversized = [&len[..], &crc, &header_crc(&len, &crc).to_le_bytes()].concat();
        oversized.extend_from_slice(b"tiny");
        assert_eq!(
            decode(&oversized, 0),
            Decoded::Corrupt("length over the record limit")
        );
    }

    #[test]
    fn a_large_garbage_tail_is_scanned_in_linear_time() {
        // 8 MiB of pseudo-random bytes after one good frame: with a
        // payload-only checksum this search was quadratic; now it
        // is one pass. Correctness is asserted, not time.
        let mut seg = segment(&[b"good"]);
        let mut x: u64 = 0x9e3779b97f4a7c15;
        seg.extend((0..8 << 20).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        let scan = scan(&seg);
        assert_eq!(scan.payloads, vec![&b"good"[..]]);
        assert_eq!(
            scan.tail,
            Tail::Torn {
                at: FRAME_HEADER_BYTES + 4
            }
        );
    }
}

#[cfg(test)]
mod properties {
    //! Whatever a segment holds, `decode` and `scan` answer without a panic
    //! and without believing a length: every payload they return is one a
    //! valid frame carries, a scan stops exactly where the valid frames
    //! end, and damage to a written segment loses the damaged frame and
    //! those after it, never alters a payload. Long run:
    //! `PROPTEST_CASES=100000 cargo test -p cohort --lib journal::frame`.
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::Index;

    fn config() -> ProptestConfig {
        // `proptest!` lets PROPTEST_CASES override this.
        ProptestConfig::with_cases(256)
    }

    fn segment(payloads: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode(&[p], &mut out);
        }
        out
    }

    /// A frame header whose checksum is right for `len` and `payload_crc`:
    /// the only way past the header check.
    fn header(len: u32, payload_crc: u32) -> Vec<u8> {
        let (len, crc) = (len.to_le_bytes(), payload_crc.to_le_bytes());
        [&len[..], &crc, &header_crc(&len, &crc).to_le_bytes()].concat()
    }

    /// Segments: garbage, valid frames, and valid frames with garbage or
    /// headers claiming any length in between.
    fn segment_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            vec(any::<u8>(), 0..24),
            vec(any::<u8>(), 0..24).prop_map(|p| segment(&[p])),
            (any::<u32>(), any::<u32>()).prop_map(|(len, crc)| header(len, crc)),
        ];
        vec(piece, 0..6).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn decode_at_any_offset_is_a_frame_or_says_why_not(
            bytes in segment_bytes(),
            at in 0..64usize,
        ) {
            match decode(&bytes, at) {
                Decoded::Frame { payload, next } => {
                    prop_assert!(payload.len() <= RECORD_BYTES_MAX);
                    prop_assert_eq!(next, at + FRAME_HEADER_BYTES + payload.len());
                    prop_assert!(next <= bytes.len());
                    let mut again = Vec::new();
                    encode(&[payload], &mut again);
                    prop_assert_eq!(&again[..], &bytes[at..next]);
                }
                Decoded::Incomplete => {
                    // Only a frame running past the end is incomplete.
                    let rest = bytes.len().saturating_sub(at);
                    let claimed = bytes
                        .get(at..at + 4)
                        .map_or(0, |len| le_u32(len) as usize);
                    prop_assert!(rest < FRAME_HEADER_BYTES + claimed);
                }
                Decoded::Corrupt(reason) => prop_assert!(!reason.is_empty()),
            }
        }

        #[test]
        fn a_scan_keeps_exactly_the_valid_frames_before_the_first_bad_one(
            bytes in segment_bytes(),
        ) {
            let scan = scan(&bytes);
            let end = match scan.tail {
                Tail::Clean => bytes.len(),
                Tail::Torn { at } | Tail::Corrupt { at, .. } => at,
            };
            prop_assert!(end <= bytes.len());
            // The kept payloads re-encode to exactly the bytes before the end.
            let kept: Vec<Vec<u8>> = scan.payloads.iter().map(|p| p.to_vec()).collect();
            prop_assert_eq!(segment(&kept), bytes[..end].to_vec());
            if end < bytes.len() {
                let stops = !matches!(decode(&bytes, end), Decoded::Frame { .. });
                prop_assert!(stops, "a valid frame at {end} was not kept");
            }
        }

        #[test]
        fn damage_loses_frames_from_the_damaged_one_on_never_alters_one(
            payloads in vec(vec(any::<u8>(), 0..40), 1..8),
            at in any::<Index>(),
            how in 0..3u8,
            with in any::<u8>(),
        ) {
            let mut bytes = segment(&payloads);
            let at = at.index(bytes.len());
            match how {
                0 => bytes[at] ^= 1 << (with % 8),
                1 => bytes.truncate(at),
                _ => bytes.insert(at, with),
            }
            let scan = scan(&bytes);
            let kept: Vec<Vec<u8>> = scan.payloads.iter().map(|p| p.to_vec()).collect();
            prop_assert!(payloads.starts_with(&kept), "{kept:?} from {payloads:?}");
            // Only the frame holding the damage and those after it are gone.
            let ends: Vec<usize> = payloads
                .iter()
                .scan(0, |end, p| {
                    *end += FRAME_HEADER_BYTES + p.len();
                    Some(*end)
                })
                .collect();
            prop_assert!(kept.len() >= ends.iter().filter(|&&end| end <= at).count());
            // Only a cut between frames leaves a clean end.
            let between = at == 0 || ends.contains(&at);
            prop_assert_eq!(scan.tail == Tail::Clean, how == 1 && between);
        }
    }

    /// A 12-byte header claiming 4 GiB (every length a u32 can say past the
    /// record limit) over a few bytes: refused as corrupt, nothing read or
    /// allocated for it, and recovery calls the segment's end torn.
    #[test]
    fn a_header_claiming_4_gib_is_refused_not_read() {
        for len in [u32::MAX, 1 << 31, RECORD_BYTES_MAX as u32 + 1] {
            let mut bytes = header(len, 0);
            bytes.extend_from_slice(b"tiny");
            assert_eq!(
                decode(&bytes, 0),
                Decoded::Corrupt("length over the record limit")
            );
            assert_eq!(scan(&bytes).tail, Tail::Torn { at: 0 });
        }
        // Within the limit but past the end: incomplete, not a read past it.
        let bytes = header(RECORD_BYTES_MAX as u32, 0);
        assert_eq!(decode(&bytes, 0), Decoded::Incomplete);
    }
}
