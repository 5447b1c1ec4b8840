//! `PUT /v1/blobs`, `GET /v1/blobs`, `GET|HEAD /v1/blobs/{digest}` and
//! their node-to-node halves: blobs streamed in and out, never read whole
//! (`crate::blobs`, `crate::cluster::blob_transfer`).
//!
//! An upload is refused before its first byte when it declares a length
//! over the ceiling, and as soon as it passes the ceiling otherwise; it must
//! keep sending (a gap of [`BLOB_IDLE_TIMEOUT`] is `request_timeout`) at an
//! average of [`BODY_RATE_MIN`] after [`BODY_READ_BASE`], like every body.
//! It is answered once the blob is durable on a majority of the back-end
//! nodes (or in the S3-compatible store, `crate::cluster::blob_s3`) and the
//! master keeps it ([`Command::KeepBlob`]: for the retention
//! time at least, and while a job or schedule names it; see
//! `crate::cluster::blob_gc`). `DELETE` stops the cluster keeping a blob
//! nothing names. A download is served from this node's copy, fetched from a
//! back-end node (or the store) first, digest checked, when this node has none, with one
//! `Range` of bytes honoured.
//!
//! [`BODY_RATE_MIN`]: crate::limits::BODY_RATE_MIN
//! [`BODY_READ_BASE`]: crate::limits::BODY_READ_BASE

use super::error::{ApiError, ErrorCode};
use super::http::{Body, Reply200, body_deadline, error_response, json, parse_digest};
use super::internal::{Internal, seal_answer};
use super::routes::Route;
use super::types::{BlobDeleted, BlobEntry, BlobInfo as BlobBody, BlobList, BlobPurged};
use crate::blobs::{BlobError, BlobInfo, ChannelBody, Relay, Unsatisfiable, parse_range};
use crate::cluster::blob_s3::S3Error;
use crate::cluster::blob_transfer::{
    self, BlobTransfer, Expect, FrameReader, FrameWriter, Refused, SIZE_ONLY, TransferError,
    VOTERS, push_context,
};
use crate::cluster::link::MasterLink;
use crate::limits::{BLOB_IDLE_TIMEOUT, BLOB_STREAMS_MAX, BLOB_WRITE_BYTES};
use crate::peer::{FRAMES_CONTENT_TYPE, answer_context};
use crate::runtime::Digest;
use crate::security::Sealer;
use crate::security::counters::{self, what};
use crate::security::seal::Freshness;
use bytes::Bytes;
use cohort_master::limits::BLOBS_ASKED_MAX;
use cohort_master::{Command, Reply};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{
    ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, ETAG, HeaderMap, HeaderValue, RANGE,
};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use std::sync::Arc;
use std::time::Instant;

use cohort_client::SHA256_HEADER;

impl From<BlobError> for ApiError {
    fn from(error: BlobError) -> Self {
        let code = match &error {
            BlobError::TooLarge { .. } => ErrorCode::BlobTooLarge,
            BlobError::DigestMismatch { .. } => ErrorCode::BlobDigestMismatch,
            BlobError::Full(_) => ErrorCode::BlobStoreFull,
            BlobError::NotFound(_) => ErrorCode::BlobNotFound,
            BlobError::Io(_) => ErrorCode::Internal,
        };
        ApiError::new(code, error.to_string())
    }
}

impl From<S3Error> for ApiError {
    fn from(error: S3Error) -> Self {
        match error {
            S3Error::Local(error) => error.into(),
            error @ S3Error::Unavailable { .. } => {
                ApiError::new(ErrorCode::BlobStoreUnavailable, error.to_string())
            }
            error @ S3Error::Corrupt { .. } => {
                ApiError::new(ErrorCode::BlobStoreCorrupt, error.to_string())
            }
        }
    }
}

fn body_of(info: BlobInfo) -> BlobBody {
    BlobBody {
        digest: info.digest.to_string(),
        bytes: info.bytes,
    }
}

fn busy() -> ApiError {
    ApiError::new(
        ErrorCode::BlobsBusy,
        format!("this node serves {BLOB_STREAMS_MAX} blob streams at once; retry shortly"),
    )
}

fn blob_not_found(digest: &str) -> ApiError {
    ApiError::new(
        ErrorCode::BlobNotFound,
        format!("no blob {digest} is stored in the cluster; upload it with PUT /v1/blobs"),
    )
}

/// The blob a submission names as its `input_blob`, checked to be stored
/// in the cluster (its size from this node's copy or a back-end node's;
/// nothing is copied): `404 blob_not_found` if no live back-end node holds
/// it.
pub(super) async fn input_blob(
    blobs: &BlobTransfer,
    text: &str,
) -> Result<cohort_master::Blob, ApiError> {
    let digest: Digest = text.trim().parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidJob,
            "input_blob must be a blob's sha256: 64 hex digits, optionally written sha256:<64 hex>",
        )
    })?;
    let located = match blobs.remote() {
        Some(remote) => remote.locate(blobs.store(), &digest).await?,
        None => (blobs.locate(&digest).await)
            .map_err(|error| ApiError::new(ErrorCode::ReplicationFailed, error))?,
    };
    match located {
        Some(size) => Ok(cohort_master::Blob {
            digest: digest.to_bytes(),
            size,
        }),
        None => Err(blob_not_found(&digest.to_string())),
    }
}

/// `PUT /v1/blobs`: streams the body into the store, makes it durable on
/// a majority of the back-end nodes (`voters`: the replication voters,
/// when this node knows them), then has the master keep it.
pub(super) async fn put(
    blobs: &BlobTransfer,
    master: &MasterLink,
    voters: Option<usize>,
    headers: &HeaderMap,
    mut body: Incoming,
) -> Result<Reply200, ApiError> {
    let store = blobs.store();
    let ceiling = store.ceiling();
    let too_large = || ApiError::from(BlobError::TooLarge { ceiling });
    let _place = blobs.admit_incoming().ok_or_else(busy)?;
    let declared = (headers.get(CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > ceiling) {
        return Err(too_large());
    }
    let mut expected = named_digest(headers, "header")?;
    let mut upload = store.upload()?;
    let started = Instant::now();
    loop {
        let frame = tokio::time::timeout(BLOB_IDLE_TIMEOUT, body.frame()).await;
        let slow = |taken: u64| {
            counters::refused(what::CONNECTION, "slow_body");
            ApiError::new(
                ErrorCode::RequestTimeout,
                format!("the upload stopped or slowed below the least rate after {taken} bytes"),
            )
        };
        let Ok(frame) = frame else {
            return Err(slow(upload.bytes()));
        };
        match frame {
            None => break,
            Some(Err(error)) => {
                return Err(ApiError::new(
                    ErrorCode::BadRequest,
                    format!(
                        "the upload broke off after {} bytes: {error}",
                        upload.bytes()
                    ),
                ));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => upload.write(data).await?,
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        expected = trailed_digest(expected, &trailers)?;
                    }
                }
            },
        }
        if started.elapsed() > body_deadline(upload.bytes() + BLOB_WRITE_BYTES as u64) {
            return Err(slow(upload.bytes()));
        }
    }
    if declared.is_some_and(|length| length != upload.bytes()) {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            "the upload ended before its declared length",
        ));
    }
    let stored = upload.finish(expected).await?;
    // Kept from this node's garbage collection until the master keeps it
    // (or the upload fails), however long its copies take.
    let pin = store.pin(stored.info.digest);
    let put = match blobs.remote() {
        // With an S3-compatible store, durable once the store has it; if
        // it cannot take it, a copy this upload stored here goes too, so
        // nothing of it stays half-registered.
        Some(remote) => match remote.put(store, stored.info).await {
            Ok(put) => Some(put),
            Err(error) => {
                drop(pin);
                if stored.new {
                    let (store, digest) = (store.clone(), stored.info.digest);
                    let _ = tokio::task::spawn_blocking(move || {
                        store.remove_idle(&digest, std::time::Duration::ZERO)
                    })
                    .await;
                }
                return Err(error.into());
            }
        },
        None => {
            (blobs.replicate(stored.info, voters).await)
                .map_err(|e| ApiError::new(ErrorCode::ReplicationFailed, e))?;
            None
        }
    };
    // Only now: a blob the master keeps is on a majority (or in the
    // store). Until the master answers, the copies are protected by the
    // nodes' grace period.
    let blob = cohort_master::Blob {
        digest: stored.info.digest.to_bytes(),
        size: stored.info.bytes,
    };
    master.command(Command::KeepBlob { blob }).await?;
    if let (Some(remote), Some(put)) = (blobs.remote(), put) {
        remote.confirm(store, put).await?;
    }
    drop(pin);
    let status = if stored.new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json(status, &body_of(stored.info)))
}

/// The digest `fields` (an upload's headers or trailers) name its bytes
/// by (`X-Cohort-Sha256`), if they name one.
fn named_digest(fields: &HeaderMap, what: &str) -> Result<Option<Digest>, ApiError> {
    let Some(value) = fields.get(SHA256_HEADER) else {
        return Ok(None);
    };
    let digest = (value.to_str().ok()).and_then(|v| v.trim().parse::<Digest>().ok());
    digest.map(Some).ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("the {SHA256_HEADER} {what} is not a sha256 (64 hex digits)"),
        )
    })
}

/// The digest an upload's bytes must have once its `trailers` came: the
/// trailer's, which must not contradict the header's (`header`).
fn trailed_digest(
    header: Option<Digest>,
    trailers: &HeaderMap,
) -> Result<Option<Digest>, ApiError> {
    match (header, named_digest(trailers, "trailer")?) {
        (Some(header), Some(trailer)) if header != trailer => Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("the {SHA256_HEADER} trailer names another digest than the header"),
        )),
        (header, trailer) => Ok(trailer.or(header)),
    }
}

/// `GET /v1/blobs`: the copies the answering node holds (`scope=node`,
/// the default), or a page of the blobs the cluster keeps
/// (`scope=cluster`: by digest, from the master's registry, `after` the
/// last digest of the page before, at most `limit`, 1 to 1,000, default
/// 100), wherever their copies are. `after` and `limit` are checked
/// either way and page the cluster's listing only.
pub(super) async fn list(
    blobs: &BlobTransfer,
    master: &MasterLink,
    params: &std::collections::HashMap<String, String>,
) -> Result<Reply200, ApiError> {
    let bad = |message: String| Err(ApiError::new(ErrorCode::BadRequest, message));
    let after = match params.get("after") {
        None => None,
        Some(text) => match parse_digest(text, ErrorCode::BadRequest) {
            Ok(digest) => Some(digest.to_bytes()),
            Err(_) => {
                return bad(format!(
                    "after: a blob's sha256 (64 hex digits), got {text:?}"
                ));
            }
        },
    };
    let limit = super::number::<u32>(params, "limit")?;
    let max = cohort_master::limits::LIST_LIMIT_MAX;
    if limit.is_some_and(|limit| !(1..=max).contains(&limit)) {
        return bad(format!("limit: 1 to {max}"));
    }
    match params.get("scope").map(String::as_str) {
        // A node's listing is whole: `after` and `limit`, checked, page
        // nothing.
        None | Some("node") => Ok(node_list(blobs, master).await),
        Some("cluster") => {
            let limit = limit.unwrap_or(KEPT_PAGE_DEFAULT);
            let (kept, next) = master.kept_blobs(after, limit).await?;
            let blobs = (kept.into_iter())
                .map(|kept| BlobEntry {
                    digest: Digest::from(kept.status.digest).to_string(),
                    bytes: kept.size,
                    kept: Some(true),
                    refs: Some(kept.status.refs),
                    collect_at: kept.status.collect_at,
                })
                .collect();
            let next = next.map(|digest| Digest::from(digest).to_string());
            Ok(json(StatusCode::OK, &BlobList { blobs, next }))
        }
        Some(other) => bad(format!(
            "scope: node (the default) or cluster, not {other:?}"
        )),
    }
}

/// How many kept blobs a page lists when the request does not say.
const KEPT_PAGE_DEFAULT: u32 = 100;

/// The copies the answering node holds, each with what the master says
/// of it (left out when the master cannot answer: the listing is this
/// node's, and answers without it).
async fn node_list(blobs: &BlobTransfer, master: &MasterLink) -> Reply200 {
    let stored = blobs.store().list();
    let mut entries = Vec::with_capacity(stored.len());
    for chunk in stored.chunks(BLOBS_ASKED_MAX) {
        let digests = chunk.iter().map(|info| info.digest.to_bytes()).collect();
        let status = master.blobs(digests).await.ok();
        for (at, info) in chunk.iter().enumerate() {
            let status = (status.as_ref())
                .and_then(|status| status.get(at))
                .filter(|status| status.digest == info.digest.to_bytes());
            entries.push(BlobEntry {
                digest: info.digest.to_string(),
                bytes: info.bytes,
                kept: status.map(|s| s.kept),
                refs: status.map(|s| s.refs),
                collect_at: status.and_then(|s| s.collect_at),
            });
        }
    }
    json(
        StatusCode::OK,
        &BlobList {
            blobs: entries,
            next: None,
        },
    )
}

/// `DELETE /v1/blobs/{digest}`: the cluster stops keeping the blob (refused
/// while a held job or schedule names it); every node deletes its copy
/// after its grace period.
pub(super) async fn delete(master: &MasterLink, param: &str) -> Result<Reply200, ApiError> {
    let digest = parse_digest(param, ErrorCode::BlobNotFound).map_err(|_| blob_not_found(param))?;
    let command = Command::DropBlob {
        digest: digest.to_bytes(),
    };
    master.command(command).await?;
    let body = BlobDeleted {
        digest: digest.to_string(),
        deleted: true,
    };
    Ok(json(StatusCode::OK, &body))
}

/// `POST /v1/blobs/{digest}/purge`: the cluster stops keeping the blob
/// even though finished jobs name it (refused while an unfinished job or a
/// schedule does; see `cohort_master::blobs`).
pub(super) async fn purge(master: &MasterLink, param: &str) -> Result<Reply200, ApiError> {
    let digest = parse_digest(param, ErrorCode::BlobNotFound).map_err(|_| blob_not_found(param))?;
    let command = Command::PurgeBlob {
        digest: digest.to_bytes(),
    };
    let Reply::Bulk { changed } = master.command(command).await? else {
        return Err(ApiError::new(ErrorCode::Internal, "unexpected reply"));
    };
    let body = BlobPurged {
        digest: digest.to_string(),
        purged: true,
        jobs: changed,
    };
    Ok(json(StatusCode::OK, &body))
}

/// `GET|HEAD /v1/blobs/{digest}`: the blob (or one range of it). A node
/// with no copy fetches one from a back-end node (or the S3-compatible
/// store) for a `GET`, and serves it as the copy is made
/// ([`crate::blobs::Relay`]); a `HEAD` copies nothing.
pub(super) async fn get(
    blobs: &BlobTransfer,
    param: &str,
    headers: &HeaderMap,
    head_only: bool,
) -> Result<Response<Body>, ApiError> {
    let digest = parse_digest(param, ErrorCode::BlobNotFound).map_err(|_| blob_not_found(param))?;
    let place = if head_only {
        None
    } else {
        Some(blobs.admit_outgoing().ok_or_else(busy)?)
    };
    let found = match (blobs.store().size(&digest), place) {
        (Some(size), place) => Some((size, Source::Store(place))),
        (None, None) => match blobs.remote() {
            Some(remote) => remote.locate(blobs.store(), &digest).await?,
            None => blobs.locate(&digest).await.map_err(replication_failed)?,
        }
        .map(|size| (size, Source::Store(None))),
        (None, Some(place)) => relayed(blobs, digest, place).await?,
    };
    let Some((size, source)) = found else {
        return Err(blob_not_found(param));
    };
    // A HEAD ignores Range (RFC 9110 §14.2: it is defined for GET).
    let range_header = (headers.get(RANGE))
        .filter(|_| !head_only)
        .and_then(|v| v.to_str().ok());
    let range = match parse_range(range_header, size) {
        Ok(range) => range,
        Err(Unsatisfiable { size }) => {
            let mut response = error_response(ApiError::new(
                ErrorCode::RangeNotSatisfiable,
                format!(
                    "the range {:?} starts past the blob's {size} bytes",
                    range_header.unwrap_or_default()
                ),
            ));
            response.headers_mut().insert(
                CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).expect("digits"),
            );
            return Ok(response.map(BodyExt::boxed));
        }
    };
    let length = range.map_or(size, |(start, end)| end + 1 - start);
    let body = match source {
        Source::Store(None) => Full::new(Bytes::new()).boxed(),
        Source::Store(Some(place)) => {
            let chunks = blobs.store().reader(&digest, range, Some(place))?;
            ChannelBody::new(chunks, Some(length)).boxed()
        }
        Source::Relay(chunks) => match range {
            Some(range) => match ChannelBody::window(chunks, range).await {
                Some(body) => body.boxed(),
                None => {
                    return Err(replication_failed(format!(
                        "the copy of blob {digest} broke off before the range asked"
                    )));
                }
            },
            None => ChannelBody::new(chunks, Some(size)).boxed(),
        },
    };
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let quoted = format!("\"{digest}\"");
    headers.insert(ETAG, HeaderValue::from_str(&quoted).expect("hex"));
    if let Some((start, end)) = range {
        let value = format!("bytes {start}-{end}/{size}");
        headers.insert(
            CONTENT_RANGE,
            HeaderValue::from_str(&value).expect("digits"),
        );
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    Ok(response)
}

/// Where a download's bytes come from.
enum Source {
    /// This node's copy (read with the download's place; none for a HEAD).
    Store(Option<tokio::sync::OwnedSemaphorePermit>),
    /// A copy being made ([`crate::blobs::Relay`]).
    Relay(tokio::sync::mpsc::Receiver<Bytes>),
}

fn replication_failed(error: String) -> ApiError {
    ApiError::new(ErrorCode::ReplicationFailed, error)
}

/// Copies blob `digest`, which this node lacks, from a back-end node (or
/// the S3-compatible store) in a task of its own that holds `place`, and
/// answers its size and its chunks as soon as the copy starts; or its
/// size once the copy is stored, when none started that could be relayed
/// (another download copied it meanwhile, or the node that answered first
/// broke off and another was asked), to be read from the store with
/// `place` again. `Ok(None)`: nowhere is it stored. The task goes on when
/// the download goes, so the node keeps its copy.
async fn relayed(
    blobs: &BlobTransfer,
    digest: Digest,
    place: tokio::sync::OwnedSemaphorePermit,
) -> Result<Option<(u64, Source)>, ApiError> {
    let (relay, size, chunks) = Relay::new();
    let transfer = blobs.clone();
    let copying = tokio::spawn(async move {
        let copied = match transfer.remote() {
            Some(remote) => (remote.ensure_relayed(transfer.store(), &digest, Some(relay)))
                .await
                .map_err(ApiError::from),
            None => {
                (transfer.ensure_relayed(&digest, Some(relay)).await).map_err(replication_failed)
            }
        };
        if let Err(error) = &copied {
            let error = &error.body().message;
            tracing::warn!(%digest, error, "a blob this node lacks could not be copied for a download");
        }
        (copied, place)
    });
    match size.await {
        Ok(size) => Ok(Some((size, Source::Relay(chunks)))),
        Err(_) => match copying.await {
            Ok((copied, place)) => Ok(copied?.map(|size| (size, Source::Store(Some(place))))),
            Err(error) => Err(ApiError::new(
                ErrorCode::Internal,
                format!("the copy of blob {digest} stopped: {error}"),
            )),
        },
    }
}

/// `POST /internal/v1/blobs`: a blob pushed by the node that took its
/// upload, as frames; the answer is sealed to the head's nonce.
pub async fn receive_push(
    blobs: &BlobTransfer,
    sealer: Option<&Arc<Sealer>>,
    parts: &Parts,
    body: Incoming,
) -> Reply200 {
    let framed = (parts.headers.get(CONTENT_TYPE))
        .is_some_and(|v| v.as_bytes() == FRAMES_CONTENT_TYPE.as_bytes());
    if !framed {
        counters::refused(what::INTERNAL, "unsealed");
        return error_response(ApiError::new(
            ErrorCode::Unauthorized,
            "a pushed blob is a framed stream",
        ));
    }
    let me = blobs.me();
    let context = push_context(&me);
    let expect = Expect {
        context: &context,
        freshness: Freshness::Once,
        digest: None,
        admit: &|| blobs.admit_incoming(),
        relay: None,
    };
    let reader = FrameReader::new(sealer.cloned());
    let received = blob_transfer::receive(body, reader, blobs.store(), expect).await;
    let (answer, nonce) = match received {
        Ok((stored, nonce)) => (Ok(json(StatusCode::OK, &body_of(stored.info))), Some(nonce)),
        Err(Refused { error, nonce }) => {
            let error = match error {
                TransferError::Forged(message) => {
                    counters::refused(what::INTERNAL, "forged_blob");
                    ApiError::new(ErrorCode::Unauthorized, message)
                }
                TransferError::Store(error) => error.into(),
                TransferError::Busy => busy(),
                error @ TransferError::Idle => {
                    ApiError::new(ErrorCode::RequestTimeout, error.to_string())
                }
                error @ TransferError::Malformed(_) => {
                    ApiError::new(ErrorCode::BadRequest, error.to_string())
                }
            };
            (Err(error), nonce)
        }
    };
    let answer = answer.unwrap_or_else(error_response);
    match (sealer, nonce) {
        // An answer the pusher can verify exists only for a head this node
        // opened (whatever happened after); a refused head is answered
        // plain, as a refused seal is.
        (Some(sealer), Some(nonce)) => seal_answer(sealer, &nonce, answer).await,
        _ => answer,
    }
}

/// `POST /internal/v1/blobs/fetch` (body: a digest, sealed as any
/// node-to-node body): the blob as frames, its head bound to the request.
///
/// The body `voters` asks for the number of replication voters instead
/// (`voters`: this node's count, if it is a back-end node; asked only
/// then).
pub async fn serve_fetch(
    blobs: &BlobTransfer,
    internal: &Internal,
    route: &Route,
    voters: impl FnOnce() -> Option<usize>,
    parts: &Parts,
    body: Incoming,
) -> Response<Body> {
    let whole = |r: Reply200| r.map(BodyExt::boxed);
    let sealer = internal.sealer.as_ref();
    let (digest, nonce) = match internal.open_request(route, parts, body).await {
        Ok((digest, nonce)) => (digest, nonce.unwrap_or([0; 24])),
        Err(refused) => return whole(refused),
    };
    let text = String::from_utf8_lossy(&digest);
    let (text, size_only) = match text.strip_suffix(SIZE_ONLY) {
        Some(digest) => (digest, true),
        None => (text.as_ref(), false),
    };
    let answer = match parse_digest(text.trim(), ErrorCode::BlobNotFound) {
        _ if text == VOTERS => match voters() {
            Some(voters) => Ok(json(
                StatusCode::OK,
                &serde_json::json!({ "voters": voters }),
            )),
            None => Err(ApiError::new(ErrorCode::BadRequest, "not a back-end node")),
        },
        Ok(digest) => match blobs.store().size(&digest) {
            Some(bytes) if size_only => {
                Ok(json(StatusCode::OK, &body_of(BlobInfo { digest, bytes })))
            }
            Some(bytes) => match blobs.admit_outgoing() {
                None => Err(busy()),
                Some(place) => {
                    let info = BlobInfo { digest, bytes };
                    let code = StatusCode::OK.as_u16().to_be_bytes();
                    let context = answer_context(&nonce, &code);
                    let writer = FrameWriter::new(sealer.cloned());
                    match blob_transfer::send(blobs.store(), info, writer, &context, Some(place)) {
                        Ok((body, _)) => {
                            let mut response = Response::new(body.boxed());
                            response.headers_mut().insert(
                                CONTENT_TYPE,
                                HeaderValue::from_static(FRAMES_CONTENT_TYPE),
                            );
                            return response;
                        }
                        Err(error) => Err(ApiError::from(error)),
                    }
                }
            },
            None => Err(blob_not_found(&digest.to_string())),
        },
        Err(_) => Err(blob_not_found(text)),
    };
    let answer = answer.unwrap_or_else(error_response);
    match sealer {
        Some(sealer) => whole(seal_answer(sealer, &nonce, answer).await),
        None => whole(answer),
    }
}
