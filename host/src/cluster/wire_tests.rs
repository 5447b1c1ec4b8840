//! Node-to-node bodies are decoded before anything else looks at them, and
//! the decoders trust none of their bytes. For every postcard message a
//! node reads from another:
//!
//! | message                             | decoded by                                  |
//! |-------------------------------------|---------------------------------------------|
//! | `WireRequest`                       | `link::serve_wire` (`/internal/v1/master`)  |
//! | `Result<WireResponse, MasterError>` | `MasterLink::remote` (the proxy's answer)   |
//! | `Envelope` (replication `Message`s) | `transport::decode_envelope` (`/internal/v1/replication`) |
//!
//! arbitrary bytes and damaged valid encodings decode to a value or to a
//! rejection coded `undecodable` or `unknown_version`, never a panic; what
//! decodes is canonical (re-encoding it decodes to the same bytes); and a
//! few bytes claiming a vector of 2^62 elements are refused, not believed
//! (trusting the claim would overflow the capacity and panic). The serving
//! functions answer garbage with a refusal and change nothing. Long run:
//! `PROPTEST_CASES=100000 cargo test -p cohort --lib cluster::wire_tests`.

use super::link::{self, MasterLink, WireRequest, WireResponse};
use crate::contract::{MasterError, Poll, PollResult, ProgressReport};
use crate::membership::View;
use crate::replication::transport::{Envelope, decode_envelope};
use cohort_master::testing::{apply_damage, damage, varint};
use cohort_master::{
    Answer, Assignment, Command, FORMAT_VERSION, JobSpec, JobState, Outcome, Query, Rejection,
    Reply, RequestId, Stats, codes, decode, encode,
};
use cohort_replication::{Entry, Message, Payload, Shape, Snapshot};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn config() -> ProptestConfig {
    // `proptest!` lets PROPTEST_CASES override this.
    ProptestConfig::with_cases(256)
}

fn spec() -> JobSpec {
    JobSpec {
        module: [3; 32],
        input: b"input".to_vec(),
        timeout_ms: 1_000,
        memory_bytes: Some(1 << 20),
        max_attempts: 3,
        priority: -2,
        idempotency_key: Some("key".into()),
    }
}

fn snapshot() -> Snapshot {
    Snapshot {
        index: 9,
        epoch: 2,
        voters: vec!["node-a".into()],
        state: b"the master's state".to_vec(),
    }
}

/// One value of each variant of every message, encoded: the valid
/// encodings the damage starts from.
fn samples() -> Vec<Vec<u8>> {
    let poll = Poll {
        worker: "w1".into(),
        slots: 4,
        free: 2,
        wait_ms: 500,
        progress: vec![ProgressReport {
            id: 1,
            attempt: 1,
            fraction: 0.5,
            message: "half".into(),
        }],
        held: vec![(1, 1), (2, 3)],
        holds: vec![[1; 8], [2; 8]],
        pool: cohort_master::WorkerPool {
            labels: vec![("gpu".into(), "a100".into())],
            memory_max: Some(1 << 30),
        },
    };
    let assignment = Assignment {
        id: 1,
        attempt: 2,
        worker: "w1".into(),
        module: [4; 32],
        input: b"in".to_vec(),
        timeout_ms: 1_000,
        memory_bytes: None,
        checkpoint: Some(b"cp".to_vec()),
        egress: vec![
            cohort_master::HttpGrant::parse("https://api.example.com/v1/", &["POST".into()], false)
                .expect("a grant"),
        ],
        secrets: vec![("STRIPE".into(), b"sealed".to_vec())],
        trace: Some(cohort_master::TraceContext {
            trace_id: [6; 16],
            span_id: [7; 8],
            flags: 1,
            link: false,
        }),
        blobs: vec![cohort_master::NamedBlob {
            name: "input".into(),
            digest: [5; 32],
            size: 1 << 33,
        }],
        replay: cohort_master::Replay {
            mark: cohort_master::TapeMark { calls: 2, reads: 1 },
            calls: vec![cohort_master::RecordedCall {
                ordinal: 2,
                method: "POST".into(),
                url: "https://api.example.com/v1/charges".into(),
                body_sha256: [3; 32],
                status: 201,
                headers: vec![("content-type".into(), b"application/json".to_vec())],
                body: b"{}".to_vec(),
                reads: vec![cohort_master::Read::Clock {
                    seconds: 5,
                    nanos: 6,
                }],
            }],
            submitted_at: 9,
        },
        readable: vec!["STRIPE".into()],
        lease_grace_ms: 5_000,
    };
    let requests = [
        WireRequest::Command(Box::new(Command::Submit {
            spec: spec(),
            request: RequestId { origin: 5, seq: 6 },
            options: cohort_master::scenarios::limited("k", Some(2), Some(5)),
        })),
        WireRequest::Command(Box::new(Command::Renew {
            worker: "w1".into(),
            attempts: vec![(1, 2), (3, 1)],
        })),
        WireRequest::Command(Box::new(Command::Finish {
            id: 1,
            attempt: 1,
            worker: "w1".into(),
            outcome: Outcome::Succeeded(b"out".to_vec()),
            duration_ms: 7,
            log_tail: "log".into(),
            calls: vec![cohort_master::HttpCall {
                method: "POST".into(),
                origin: "https://api.example.com:443".into(),
                status: Some(201),
                error: None,
                sent_bytes: 12,
                received_bytes: 34,
                ms: 5,
            }],
            calls_dropped: 1,
            usage: cohort_master::Usage {
                cpu_us: 1_234,
                memory_peak_bytes: 65_536,
                egress_bytes: 46,
            },
        })),
        WireRequest::Query(Query::Jobs {
            filter: cohort_master::JobFilter {
                state: Some(JobState::Running),
                error: Some("trap".into()),
                ..Default::default()
            },
            after: Some(4),
            limit: 10,
            newest_first: true,
        }),
        WireRequest::Replicas,
        WireRequest::Poll(poll),
        WireRequest::Progress { id: 5 },
        WireRequest::Wait {
            id: 5,
            wait_ms: 1_000,
        },
    ];
    let responses: [Result<WireResponse, MasterError>; 10] = [
        Ok(WireResponse::Reply(Reply::Submitted {
            id: 1,
            existing: false,
        })),
        Ok(WireResponse::Answer(Answer::Stats(Stats::default()))),
        Ok(WireResponse::Answer(Answer::Result(b"result".to_vec()))),
        Ok(WireResponse::Poll(PollResult {
            assignments: vec![assignment],
            stops: vec![(3, 1)],
        })),
        Ok(WireResponse::Settled(true)),
        Ok(WireResponse::Progress(None)),
        Ok(WireResponse::Replicas(vec![("n2".into(), 3)])),
        Err(MasterError::Rejected(Rejection::new(
            codes::QUEUE_FULL,
            "full",
        ))),
        Err(MasterError::Moved("http://next:7000".into())),
        Err(MasterError::Unreplicated("1 of 3".into())),
    ];
    let shape = Shape {
        first: 2,
        next: 9,
        runs: vec![(2, 1), (5, 2)],
        last_epoch: 2,
        base_epoch: 1,
    };
    let messages = vec![
        Message::Claim {
            epoch: 3,
            transfer: true,
        },
        Message::Claimed {
            epoch: 3,
            shape: shape.clone(),
            voters: vec!["a".into(), "b".into()],
        },
        Message::Declined {
            epoch: 3,
            leader_epoch: 2,
        },
        Message::Append {
            epoch: 3,
            first: 7,
            prev_epoch: Some(2),
            entries: vec![
                (2, Payload::Data(b"event".to_vec())),
                (3, Payload::Noop),
                (3, Payload::Voters(vec!["a".into()])),
            ],
            commit: 6,
        },
        Message::Install {
            epoch: 3,
            snapshot: snapshot(),
        },
        Message::Appended { epoch: 3, shape },
        Message::Read {
            epoch: 3,
            from: 2,
            bytes_max: 1 << 20,
        },
        Message::Entries {
            epoch: 3,
            from: 4,
            entries: vec![Entry {
                index: 4,
                epoch: 2,
                payload: Payload::Data(b"event".to_vec()),
            }],
        },
        Message::SnapshotIs {
            epoch: 3,
            snapshot: snapshot(),
        },
        Message::Fenced {
            epoch: 3,
            promised: 4,
        },
        Message::Refused {
            epoch: 3,
            reason: "no".into(),
        },
        Message::HandOver { epoch: 3 },
    ];
    let envelope = Envelope {
        from: "node-a".into(),
        messages,
    };
    let mut out: Vec<Vec<u8>> = Vec::new();
    out.extend(requests.iter().map(encode));
    out.extend(responses.iter().map(encode));
    out.push(encode(&envelope));
    out
}

/// `bytes` decode as `T` to a value that encodes canonically, or are
/// refused with a decoding code.
fn decodes_or_refuses<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Result<(), TestCaseError> {
    match decode::<T>(bytes) {
        Ok(value) => {
            let again = encode(&value);
            let twice = encode(&decode::<T>(&again)?);
            prop_assert_eq!(
                again,
                twice,
                "{} is not canonical",
                std::any::type_name::<T>()
            );
        }
        Err(rejection) => {
            let known = [codes::UNDECODABLE, codes::UNKNOWN_VERSION];
            prop_assert!(known.contains(&rejection.code), "{rejection:?}");
        }
    }
    Ok(())
}

/// Every node-to-node decoder, on the same bytes.
fn every_decoder(bytes: &[u8]) -> Result<(), TestCaseError> {
    decodes_or_refuses::<WireRequest>(bytes)?;
    decodes_or_refuses::<Result<WireResponse, MasterError>>(bytes)?;
    decodes_or_refuses::<Envelope>(bytes)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bodies_decode_or_are_refused(
        version in prop_oneof![4 => Just(FORMAT_VERSION), 1 => any::<u8>()],
        rest in vec(any::<u8>(), 0..200),
    ) {
        every_decoder(&[&[version][..], &rest].concat())?;
    }

    #[test]
    fn damaged_bodies_decode_or_are_refused(
        sample in proptest::sample::select(samples()),
        damage in damage(),
    ) {
        every_decoder(&apply_damage(sample, &damage))?;
    }

    /// A length prefix anywhere in a short body, claiming anything.
    #[test]
    fn claimed_lengths_are_not_believed(
        head in vec(any::<u8>(), 0..24),
        claim in prop_oneof![any::<u64>(), (32..64u32).prop_map(|bits| 1u64 << bits)],
        tail in vec(any::<u8>(), 0..8),
    ) {
        every_decoder(&[&[FORMAT_VERSION][..], &head, &varint(claim), &tail].concat())?;
    }
}

/// Hand-made bodies of a few bytes whose first vector claims 2^62
/// elements, for each message that carries bulk data.
#[test]
fn a_tiny_body_claiming_a_huge_vector_is_refused() {
    let v = FORMAT_VERSION;
    let huge = varint(1 << 62);
    let with = |prefix: &[u8]| [prefix, &huge[..]].concat();
    let refused = |what: &str, result: Result<(), Rejection>| {
        let rejection = result.expect_err(what);
        assert_eq!(rejection.code, codes::UNDECODABLE, "{what}");
    };
    // Envelope { from "", messages: 2^62 }.
    refused(
        "Envelope messages",
        decode::<Envelope>(&with(&[v, 0])).map(drop),
    );
    // Envelope { from "", [Append { epoch 1, first 0, prev None, entries: 2^62 }] }.
    refused(
        "Message::Append entries",
        decode::<Envelope>(&with(&[v, 0, 1, 3, 1, 0, 0])).map(drop),
    );
    // Envelope { from "", [Install { epoch 1, snapshot { 0, 1, voters: 2^62 } }] }.
    refused(
        "Message::Install voters",
        decode::<Envelope>(&with(&[v, 0, 1, 4, 1, 0, 1])).map(drop),
    );
    // Poll { worker "", slots 0, free 0, wait 0, progress: 2^62 }.
    refused(
        "WireRequest::Poll progress",
        decode::<WireRequest>(&with(&[v, 2, 0, 0, 0, 0])).map(drop),
    );
    // Ok(Poll(PollResult { assignments: 2^62 })).
    refused(
        "WireResponse::Poll assignments",
        decode::<Result<WireResponse, MasterError>>(&with(&[v, 0, 2])).map(drop),
    );
}

/// What the routes answer to garbage: a refusal, and nothing changed.
#[tokio::test]
async fn the_serving_functions_refuse_garbage_and_change_nothing() {
    let garbage: [&[u8]; 4] = [b"", &[FORMAT_VERSION, 200, 1], &[9, 0], b"GET / HTTP/1.1"];
    let (_local_tx, local) = tokio::sync::watch::channel(None);
    let (_view_tx, view) = tokio::sync::watch::channel(View::default());
    let link = MasterLink::new(local, view, crate::peer::Peer::default());
    for body in garbage {
        match decode_envelope(body) {
            Err(rejection) => {
                let known = [codes::UNDECODABLE, codes::UNKNOWN_VERSION];
                assert!(known.contains(&rejection.code), "{rejection:?}");
            }
            Ok(envelope) => panic!("{body:?} decoded as {envelope:?}"),
        }
        let answer = link::serve_wire(&link, body).await;
        match decode::<Result<WireResponse, MasterError>>(&answer) {
            Ok(Err(MasterError::Rejected(rejection))) => {
                let known = [codes::UNDECODABLE, codes::UNKNOWN_VERSION];
                assert!(known.contains(&rejection.code), "{rejection:?}");
            }
            other => panic!("the master route answered {body:?} with {other:?}"),
        }
    }
}
