//! Egress: the outbound HTTP(S) calls a job makes through `wasi:http`, and
//! the check that lets through only what its operator granted.
//!
//! # Where the check happens, and on what
//!
//! Every `wasi:http` request of a job reaches `JobEgress`, the attempt's
//! `WasiHttpHooks`. A request is sent only if one of the job's grants
//! ([`HttpGrant`], kept by the master with the deployment name) allows its
//! scheme, host, port, method and path, *and* the address the host really
//! connects to passes the grant's address rule:
//!
//! 1. the URI is taken apart: scheme (`http`/`https`), host (lowercase,
//!    trailing dot stripped, IPv6 without brackets), port (explicit or the
//!    scheme's), method, path without the query;
//! 2. a grant must [`allow`](HttpGrant::allows) it, else `egress_denied`;
//! 3. the headers of the grants that allow it are rendered from the
//!    attempt's secrets (see below); one naming a secret the attempt was
//!    not given, or rendering to no valid header value, refuses the call:
//!    `egress_secret_unavailable`;
//! 4. a name is resolved with the host's resolver (an address literal is
//!    used as written), and **each resolved address is classified**
//!    ([`classify`]): public addresses pass; unspecified, broadcast and
//!    multicast never do; a cloud metadata address only for a grant whose
//!    host is exactly that address; other non-public addresses (loopback,
//!    private, link-local, shared, unique-local, reserved, documentation)
//!    only for a grant marked `private` or whose host is exactly that
//!    address ([`permits`]). IPv4-mapped, IPv4-compatible, NAT64 and 6to4
//!    addresses are classified by the IPv4 address inside. None passes:
//!    `egress_address_refused`;
//! 5. the host connects to a passing address itself (the first, in the
//!    resolver's order, that accepts) and sends the request there, with
//!    the `Host` header rewritten from the URI's authority and the headers
//!    of the grants that allow the request and permit that address.
//!
//! The address, not the name, is what is checked, because the name is not
//! what the packets go to: a granted name may resolve (or be re-pointed)
//! to `127.0.0.1` or a metadata service, a header the job wrote may name
//! another host than the one connected to (Spin's CVE-2024-32980), and
//! URL parsers read `2130706433`, `0177.0.0.1` or `0x7f000001` as
//! loopback. Resolving once and connecting to the very address that was
//! checked leaves no second lookup to race.
//!
//! TLS (`https`) uses rustls with the system's roots plus the operator's
//! CA file ([`RuntimeConfig::egress_ca`](super::RuntimeConfig)); the
//! server name is the request's host. Only HTTP/1.1 is spoken. Redirects
//! are never followed here: a job that follows one makes a new request,
//! checked like any other.
//!
//! # Headers a grant sets, and secrets
//!
//! A grant may set headers on the requests it allows
//! ([`HttpGrant::headers`]), their values templates whose
//! `{secret:NAME}` placeholders are filled from the attempt's
//! [`Secrets`]: the plaintext the worker opened for the secrets the
//! attempt's grants name. So a job calls an API with a key it never holds.
//! A grant's header replaces any header of that name the job sent; when two
//! grants allowing one request set the same header, the first (in the
//! job's order of grants) wins. A grant's headers go only on requests it
//! allows, to an address it permits: a secret reaches no other host than
//! its grant's, and since redirects are not followed, not even through
//! one. A secret missing from the attempt (it did not open on this node,
//! say) refuses every call that needs it, and only those, with
//! `egress_secret_unavailable`; so does a value that is no valid header
//! value once rendered (a secret holding a line break). Its log line names
//! the secret (or the header) and the origin, never a value. Rendered
//! values are marked sensitive, and the attempt masks every secret's value
//! in its log, progress and failure (see [`super::job_log`]).
//!
//! # Trace context
//!
//! When the job carries a trace context (its submission's, see
//! [`crate::telemetry`]) and this node exports spans, every request sent
//! carries a W3C `traceparent` with the job's trace id naming the
//! attempt's span (`cohort.attempt`) as its parent, with that span's
//! sampled flag: the called service joins the job's trace under the
//! attempt that called it. A trace sampled out may have no attempt span
//! (see [`crate::telemetry::wanted`]); then its calls carry the job's
//! context as it is, flagged `-00`, so the service samples them out too
//! instead of starting traces of its own for them (and its logs still
//! name the job's trace id). The worker decides
//! ([`telemetry::outbound_context`](crate::telemetry::outbound_context))
//! and hands the context to the attempt
//! ([`JobRequest::trace`](super::JobRequest)), so a job in a sandbox
//! process carries it too. The rules:
//!
//! - **The host's context wins.** A `traceparent` the job set itself is
//!   replaced, and a `tracestate` it set is dropped with it (a
//!   `tracestate` belongs to the `traceparent` it came with; cohort keeps
//!   none: a job's context is the 26 bytes of [`cohort_master::TraceContext`]).
//!   The job cannot know its attempt's span, so its own header could only
//!   split the call off the job's trace; an operator who turned tracing
//!   on wants every call in it. Without a context to send (below), the
//!   job's own headers go out as it wrote them.
//! - **No context, no header.** A job submitted without one (through a
//!   node not tracing, from a client sending none), or an attempt on a
//!   node with tracing off, sends nothing of its own: the job's requests
//!   are exactly what it wrote.
//! - **Not the grant's business.** The header needs no grant and counts
//!   against nothing a grant bounds: the byte bounds are of bodies, and a
//!   recorded call is matched by method, URL and body digest, never by
//!   headers, so the new span of a retried attempt neither diverges from
//!   its record nor changes its idempotency key. A header a grant sets
//!   under the same name is the operator's, and replaces the host's.
//!
//! # Bounds
//!
//! [`EgressLimits`] (defaults in [`crate::limits`], "Runtime: egress"):
//! calls per attempt (`egress_calls_exhausted` past it), body bytes each
//! way per attempt (`egress_bytes_exhausted`), request and response body
//! size per call (`egress_request_too_large`, `egress_response_too_large`),
//! the connection (name lookup, TCP and TLS), the first byte of the
//! response and the gap between two of its bytes (each the shorter of the
//! job's `request-options` and the limit; `egress_timeout`), and the whole
//! call from the request to the end of its response body, so a server that
//! trickles a byte a second cannot hold an attempt. Hop-by-hop headers of
//! the job's request are dropped.
//!
//! # What is recorded, and what never is
//!
//! Every call, sent or refused, becomes one [`HttpCall`] when its response
//! body ends or fails, when the job drops it, or when it is refused:
//! method, origin (`scheme://host:port`), status, error code, body bytes
//! each way and duration. An attempt keeps the first
//! [`CALLS_RECORDED_MAX`] in the order they were made and counts the rest
//! (`calls_dropped`); a call still running when the attempt ends (its
//! timeout, a trap) is recorded as `egress_unfinished`. A refused or
//! failed call also writes one line to the job's log, naming the code,
//! method and origin. Paths, query strings, headers and bodies are never
//! recorded or logged: any of them may hold a credential.

use super::job::{Secrets, truncate_utf8};
use super::job_log::SharedLog;
use super::tape::{Replayed, Tape, Unrecorded};
use crate::limits::{
    EGRESS_ADDRESSES_LOGGED_MAX, EGRESS_ADDRESSES_MAX, EGRESS_BETWEEN_BYTES_TIMEOUT,
    EGRESS_BYTES_PER_ATTEMPT_MAX, EGRESS_CALL_TIMEOUT, EGRESS_CALLS_AT_ONCE_MAX,
    EGRESS_CALLS_PER_ATTEMPT_MAX, EGRESS_CONNECT_TIMEOUT, EGRESS_FIRST_BYTE_TIMEOUT,
    EGRESS_METHOD_BYTES_MAX, EGRESS_ORIGIN_BYTES_MAX, EGRESS_REQUEST_BYTES_MAX,
    EGRESS_RESPONSE_BYTES_MAX, EGRESS_RESPONSE_HEAD_BYTES_MAX, ERROR_CODE_BYTES_MAX,
};
use bytes::Bytes;
use cohort_master::RecordedCall;
use cohort_master::limits::{CALLS_RECORDED_MAX, RECORD_BODY_BYTES_MAX, RECORD_URL_BYTES_MAX};
use cohort_master::{GrantHost, Piece, TraceContext, strict_ipv4, template};
pub use cohort_master::{HttpCall, HttpGrant};
use http::header::{self, HeaderName, HeaderValue};
use http::{Uri, Version};
use http_body_util::BodyExt;
use http_body_util::Full;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{Instant as Deadline, Sleep};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// The bounds of a job's outbound calls; [`Default`] is the node's, from
/// [`crate::limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressLimits {
    /// Calls one attempt may make, refused ones included.
    pub calls_per_attempt: u32,
    /// Calls of one attempt in flight at once; more wait for one to end.
    pub calls_at_once: u32,
    /// Request and response body bytes of one attempt, all calls together.
    pub bytes_per_attempt: u64,
    /// Largest request body of one call.
    pub request_bytes: u64,
    /// Largest response body of one call.
    pub response_bytes: u64,
    /// Longest name lookup, TCP connection and TLS handshake, together.
    pub connect_timeout: Duration,
    /// Longest wait from the request to the response's head.
    pub first_byte_timeout: Duration,
    /// Longest wait between two chunks of the response body.
    pub between_bytes_timeout: Duration,
    /// Longest call, from the request to the end of its response body.
    pub call_timeout: Duration,
}

impl Default for EgressLimits {
    fn default() -> Self {
        Self {
            calls_per_attempt: EGRESS_CALLS_PER_ATTEMPT_MAX,
            calls_at_once: EGRESS_CALLS_AT_ONCE_MAX,
            bytes_per_attempt: EGRESS_BYTES_PER_ATTEMPT_MAX,
            request_bytes: EGRESS_REQUEST_BYTES_MAX,
            response_bytes: EGRESS_RESPONSE_BYTES_MAX,
            connect_timeout: EGRESS_CONNECT_TIMEOUT,
            first_byte_timeout: EGRESS_FIRST_BYTE_TIMEOUT,
            between_bytes_timeout: EGRESS_BETWEEN_BYTES_TIMEOUT,
            call_timeout: EGRESS_CALL_TIMEOUT,
        }
    }
}

/// Why a call was refused or failed: the stable code of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// The URI has no host, or a scheme other than `http`/`https`.
    InvalidUri,
    /// No grant of the job allows the request.
    Denied,
    /// A header of a grant that allows the request names a secret the
    /// attempt was not given, or renders to no valid header value.
    SecretUnavailable,
    /// The attempt made more calls than it may.
    CallsExhausted,
    /// The attempt's body bytes (both ways, all calls) ran out.
    BytesExhausted,
    /// The request body is larger than a call may send.
    RequestTooLarge,
    /// The response body is larger than a call may receive.
    ResponseTooLarge,
    /// The host's name did not resolve.
    DnsFailed,
    /// The host resolves only to addresses the job's grants do not permit.
    AddressRefused,
    /// No permitted address accepted a connection.
    ConnectFailed,
    /// The TLS handshake failed (an untrusted certificate, say).
    TlsFailed,
    /// A phase of the call ran past its time limit.
    Timeout,
    /// The server broke HTTP/1.1, or the connection ended mid-exchange.
    HttpFailed,
    /// The attempt ended (timeout, trap, return) with the call still running.
    Unfinished,
    /// A call its grant records is over what a record keeps (its URL, its
    /// response's headers or body, or the job's record is full).
    RecordTooLarge,
    /// A recorded call was sent but its response could not be made
    /// durable: the attempt fails, and the next one sends it again.
    RecordFailed,
}

impl CallError {
    /// Every failure, in the order of the documentation's table.
    pub const ALL: &[CallError] = &[
        CallError::InvalidUri,
        CallError::Denied,
        CallError::SecretUnavailable,
        CallError::CallsExhausted,
        CallError::BytesExhausted,
        CallError::RequestTooLarge,
        CallError::ResponseTooLarge,
        CallError::DnsFailed,
        CallError::AddressRefused,
        CallError::ConnectFailed,
        CallError::TlsFailed,
        CallError::Timeout,
        CallError::HttpFailed,
        CallError::Unfinished,
        CallError::RecordTooLarge,
        CallError::RecordFailed,
    ];

    /// The stable, machine-readable code recorded for this failure.
    pub fn code(self) -> &'static str {
        match self {
            CallError::InvalidUri => "egress_invalid_uri",
            CallError::Denied => "egress_denied",
            CallError::SecretUnavailable => "egress_secret_unavailable",
            CallError::CallsExhausted => "egress_calls_exhausted",
            CallError::BytesExhausted => "egress_bytes_exhausted",
            CallError::RequestTooLarge => "egress_request_too_large",
            CallError::ResponseTooLarge => "egress_response_too_large",
            CallError::DnsFailed => "egress_dns_failed",
            CallError::AddressRefused => "egress_address_refused",
            CallError::ConnectFailed => "egress_connect_failed",
            CallError::TlsFailed => "egress_tls_failed",
            CallError::Timeout => "egress_timeout",
            CallError::HttpFailed => "egress_http_failed",
            CallError::Unfinished => "egress_unfinished",
            CallError::RecordTooLarge => "egress_record_too_large",
            CallError::RecordFailed => "egress_record_failed",
        }
    }

    /// What the job is told when nothing more precise is at hand.
    fn guest(self) -> HttpError {
        match self {
            CallError::InvalidUri => HttpError::HttpRequestUriInvalid,
            CallError::Denied | CallError::SecretUnavailable => HttpError::HttpRequestDenied,
            CallError::CallsExhausted => HttpError::ConnectionLimitReached,
            CallError::BytesExhausted | CallError::RequestTooLarge => {
                HttpError::HttpRequestBodySize(None)
            }
            CallError::ResponseTooLarge => HttpError::HttpResponseBodySize(None),
            CallError::DnsFailed => HttpError::DnsError {
                rcode: None,
                info_code: None,
            },
            CallError::AddressRefused => HttpError::DestinationIpProhibited,
            CallError::ConnectFailed => HttpError::ConnectionRefused,
            CallError::TlsFailed => HttpError::TlsProtocolError,
            CallError::Timeout => HttpError::HttpResponseTimeout,
            CallError::HttpFailed => HttpError::HttpProtocolError,
            CallError::Unfinished => HttpError::ConnectionTerminated,
            CallError::RecordTooLarge => HttpError::HttpResponseBodySize(None),
            CallError::RecordFailed => HttpError::InternalError(None),
        }
    }
}

/// Whether `call` is a record [`JobEgress`] could have made: what a sandbox
/// process may relay.
pub(crate) fn is_bounded(call: &HttpCall) -> bool {
    call.method.len() <= EGRESS_METHOD_BYTES_MAX
        && call.origin.len() <= EGRESS_ORIGIN_BYTES_MAX
        && call.error.as_ref().is_none_or(|code| {
            code.len() <= ERROR_CODE_BYTES_MAX
                && CallError::ALL.iter().any(|known| known.code() == code)
        })
}

// ---- Addresses

/// What an address is, as far as a job's calls go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// Globally reachable unicast.
    Public,
    /// `0.0.0.0`, `::`: never reachable.
    Unspecified,
    /// `255.255.255.255`: never reachable.
    Broadcast,
    /// `224.0.0.0/4`, `ff00::/8`: never reachable.
    Multicast,
    /// A cloud's instance metadata service (`169.254.169.254`,
    /// `fd00:ec2::254`, `100.100.100.200`).
    Metadata,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`, and IPv6 site-local `fec0::/10`.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `100.64/10`, shared by carrier-grade NAT.
    Shared,
    /// `fc00::/7`.
    UniqueLocal,
    /// `0/8`, `192.0.0/24`, `192.88.99/24`, `198.18/15`, `240/4`, and IPv6
    /// outside global unicast or set aside for protocols.
    Reserved,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`,
    /// `3fff::/20`.
    Documentation,
}

/// Who may reach an address of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Anyone,
    Nobody,
    /// Only a grant whose host is exactly this address.
    ExactGrant,
    /// A grant marked `private`, or whose host is exactly this address.
    PrivateGrant,
}

impl AddressKind {
    /// How the kind is named in a job's log.
    pub fn name(self) -> &'static str {
        match self {
            AddressKind::Public => "public",
            AddressKind::Unspecified => "unspecified",
            AddressKind::Broadcast => "broadcast",
            AddressKind::Multicast => "multicast",
            AddressKind::Metadata => "cloud metadata",
            AddressKind::Loopback => "loopback",
            AddressKind::Private => "private",
            AddressKind::LinkLocal => "link-local",
            AddressKind::Shared => "shared (carrier-grade NAT)",
            AddressKind::UniqueLocal => "unique-local",
            AddressKind::Reserved => "reserved",
            AddressKind::Documentation => "documentation",
        }
    }

    fn reach(self) -> Reach {
        match self {
            AddressKind::Public => Reach::Anyone,
            AddressKind::Unspecified | AddressKind::Broadcast | AddressKind::Multicast => {
                Reach::Nobody
            }
            AddressKind::Metadata => Reach::ExactGrant,
            AddressKind::Loopback
            | AddressKind::Private
            | AddressKind::LinkLocal
            | AddressKind::Shared
            | AddressKind::UniqueLocal
            | AddressKind::Reserved
            | AddressKind::Documentation => Reach::PrivateGrant,
        }
    }
}

const METADATA_V4: [Ipv4Addr; 2] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(100, 100, 100, 200),
];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// What `ip` is. An IPv6 address that carries an IPv4 one (mapped,
/// compatible, translated, NAT64, 6to4) is what that IPv4 address is.
pub fn classify(ip: IpAddr) -> AddressKind {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressKind {
    if ip.is_unspecified() {
        return AddressKind::Unspecified;
    }
    if ip.is_broadcast() {
        return AddressKind::Broadcast;
    }
    if ip.is_multicast() {
        return AddressKind::Multicast;
    }
    if METADATA_V4.contains(&ip) {
        return AddressKind::Metadata;
    }
    match ip.octets() {
        [0, ..] | [192, 0, 0, _] | [192, 88, 99, _] | [198, 18 | 19, ..] | [240..=255, ..] => {
            AddressKind::Reserved
        }
        [127, ..] => AddressKind::Loopback,
        [10, ..] | [172, 16..=31, ..] | [192, 168, ..] => AddressKind::Private,
        [169, 254, ..] => AddressKind::LinkLocal,
        [100, 64..=127, ..] => AddressKind::Shared,
        [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => AddressKind::Documentation,
        _ => AddressKind::Public,
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressKind {
    if ip.is_unspecified() {
        return AddressKind::Unspecified;
    }
    if ip.is_loopback() {
        return AddressKind::Loopback;
    }
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    if ip == METADATA_V6 {
        return AddressKind::Metadata;
    }
    let s = ip.segments();
    match s {
        [0xff00..=0xffff, ..] => AddressKind::Multicast,
        [0xfe80..=0xfebf, ..] => AddressKind::LinkLocal,
        [0xfec0..=0xfeff, ..] => AddressKind::Private,
        [0xfc00..=0xfdff, ..] => AddressKind::UniqueLocal,
        [0x2001, 0x0db8, ..] | [0x3fff, 0x0000..=0x0fff, ..] => AddressKind::Documentation,
        // Discard-only (100::/64), local-use NAT64 (64:ff9b:1::/48) and the
        // IETF protocol assignments (2001::/23: Teredo, benchmarking, ...).
        [0x0100, 0, 0, 0, ..] | [0x0064, 0xff9b, 0x0001, ..] | [0x2001, 0x0000..=0x01ff, ..] => {
            AddressKind::Reserved
        }
        // Global unicast is 2000::/3; the rest is not assigned to hosts.
        [0x2000..=0x3fff, ..] => AddressKind::Public,
        _ => AddressKind::Reserved,
    }
}

/// The IPv4 address an IPv6 one stands for, if it carries one: mapped
/// (`::ffff:a.b.c.d`), translated (`::ffff:0:a.b.c.d`), compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo]
        | [0, 0, 0, 0, 0xffff, 0, hi, lo]
        | [0, 0, 0, 0, 0, 0, hi, lo]
        | [0x0064, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// Whether `grant` lets a job connect to `ip` (see the module's note).
pub fn permits(grant: &HttpGrant, ip: IpAddr) -> bool {
    let exact = match grant.host() {
        GrantHost::V4(v4) => ip == IpAddr::V4(v4),
        GrantHost::V6(v6) => ip == IpAddr::V6(v6),
        GrantHost::Name(_) | GrantHost::Suffix(_) => false,
    };
    match classify(ip).reach() {
        Reach::Anyone => true,
        Reach::Nobody => false,
        Reach::ExactGrant => exact,
        Reach::PrivateGrant => exact || grant.private,
    }
}

// ---- The runtime's side: trust roots and bounds

/// How a runtime's jobs reach the network: the TLS trust roots and the
/// bounds they share. Cheap to clone; built once per runtime.
#[derive(Debug, Clone)]
pub struct Egress {
    trust: Arc<Trust>,
    limits: EgressLimits,
}

#[derive(Debug)]
struct Trust {
    /// The operator's CA certificates, checked at start.
    operator: Vec<CertificateDer<'static>>,
    /// The client configuration (system roots and the operator's), built
    /// at the first `https` call: reading the system's roots costs
    /// milliseconds that runtimes whose jobs never call out need not pay.
    config: tokio::sync::OnceCell<Arc<rustls::ClientConfig>>,
}

impl Egress {
    /// Egress with the CA certificates of the PEM file `ca` trusted besides
    /// the system's roots. An unreadable file, or one without a
    /// certificate, is refused with why.
    pub fn new(ca: Option<&Path>, limits: EgressLimits) -> Result<Self, String> {
        let mut operator = Vec::new();
        if let Some(path) = ca {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            // Each one must be usable as a trust anchor.
            let mut check = rustls::RootCertStore::empty();
            for cert in certs {
                let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
                check.add(cert.clone()).map_err(|e| {
                    format!(
                        "{}: a certificate that cannot be a trust root: {e}",
                        path.display()
                    )
                })?;
                operator.push(cert);
            }
            if operator.is_empty() {
                return Err(format!("{} holds no PEM certificate", path.display()));
            }
        }
        Ok(Self {
            trust: Arc::new(Trust {
                operator,
                config: tokio::sync::OnceCell::new(),
            }),
            limits,
        })
    }

    /// The bounds of each attempt's calls.
    pub fn limits(&self) -> EgressLimits {
        self.limits
    }

    /// The same trust roots with other bounds (a sandbox process runs with
    /// the node's).
    pub(crate) fn with_limits(&self, limits: EgressLimits) -> Self {
        Self {
            trust: self.trust.clone(),
            limits,
        }
    }

    async fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.trust
            .config
            .get_or_try_init(|| async {
                // No system roots (a container without them) is fine: the
                // operator's CA alone is trusted then.
                let native = tokio::task::spawn_blocking(rustls_native_certs::load_native_certs)
                    .await
                    .map(|found| found.certs)
                    .unwrap_or_default();
                let mut roots = rustls::RootCertStore::empty();
                // A system root rustls cannot parse is skipped.
                let _ = roots.add_parsable_certificates(native);
                for cert in &self.trust.operator {
                    roots.add(cert.clone()).map_err(|e| e.to_string())?;
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let mut config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Ok(Arc::new(config))
            })
            .await
            .cloned()
    }
}

// ---- The attempt's side: the record

/// Told of each call as it enters the record (a sandbox process relays
/// them, so that a killed attempt keeps its record).
pub(crate) type CallSink = Arc<dyn Fn(&HttpCall) + Send + Sync>;

/// The calls of one attempt: shared by its requests, read by its report.
#[derive(Clone, Default)]
pub(crate) struct Ledger(Arc<Mutex<Book>>);

#[derive(Default)]
struct Book {
    /// Calls begun, refused ones included.
    made: u64,
    /// Body bytes sent and received, all calls together.
    bytes: u64,
    /// The first [`CALLS_RECORDED_MAX`] calls, in the order they were made.
    entries: Vec<Entry>,
    /// Set once the report took the record: later news is dropped.
    closed: bool,
    sink: Option<CallSink>,
}

struct Entry {
    call: HttpCall,
    started: Instant,
    open: bool,
}

impl Ledger {
    /// An empty record; `sink` hears of each recorded call as it ends.
    pub(crate) fn new(sink: Option<CallSink>) -> Self {
        Self(Arc::new(Mutex::new(Book {
            sink,
            ..Book::default()
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        // Every update is a few assignments: a panic cannot leave it torn.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a new call; its slot in the record (if among the first) and
    /// how many calls the attempt has made with it.
    fn begin(&self, method: &str, origin: &str, started: Instant) -> (Option<usize>, u64) {
        let mut book = self.lock();
        book.made += 1;
        let made = book.made;
        if book.closed || book.entries.len() >= CALLS_RECORDED_MAX {
            return (None, made);
        }
        book.entries.push(Entry {
            call: HttpCall {
                method: method.to_owned(),
                origin: origin.to_owned(),
                status: None,
                error: None,
                sent_bytes: 0,
                received_bytes: 0,
                ms: 0,
            },
            started,
            open: true,
        });
        (Some(book.entries.len() - 1), made)
    }

    /// Counts `n` body bytes; false once the attempt is past `max`.
    fn count_bytes(&self, n: u64, max: u64) -> bool {
        let mut book = self.lock();
        book.bytes = book.bytes.saturating_add(n);
        book.bytes <= max
    }

    /// Writes down how a call ended.
    fn finish(&self, slot: Option<usize>, ended: &CallState, started: Instant) {
        let Some(slot) = slot else { return };
        let (sink, call) = {
            let mut guard = self.lock();
            let book = &mut *guard;
            if book.closed {
                return;
            }
            let Some(entry) = book.entries.get_mut(slot) else {
                return;
            };
            if !entry.open {
                return;
            }
            entry.open = false;
            entry.call.status = ended.status;
            entry.call.error = ended.failed.map(|error| error.code().to_owned());
            entry.call.sent_bytes = ended.sent;
            entry.call.received_bytes = ended.received;
            entry.call.ms = millis(started.elapsed());
            (book.sink.clone(), entry.call.clone())
        };
        if let Some(sink) = sink {
            sink(&call);
        }
    }

    /// Body bytes the attempt's calls sent and received, all together.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The record as the report takes it: the first calls (one still
    /// running as `egress_unfinished`) and how many more were made.
    pub(crate) fn close(&self) -> (Vec<HttpCall>, u32) {
        let mut book = self.lock();
        book.closed = true;
        let made = book.made;
        let calls: Vec<HttpCall> = std::mem::take(&mut book.entries)
            .into_iter()
            .map(|mut entry| {
                if entry.open {
                    entry.call.error = Some(CallError::Unfinished.code().to_owned());
                    entry.call.ms = millis(entry.started.elapsed());
                }
                entry.call
            })
            .collect();
        let dropped = made.saturating_sub(calls.len() as u64);
        (calls, u32::try_from(dropped).unwrap_or(u32::MAX))
    }
}

fn millis(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// One call in flight: what its record will say.
struct Call {
    ledger: Ledger,
    /// Told when the call ends, so a checkpoint's mark never passes it.
    tape: Tape,
    ordinal: u32,
    slot: Option<usize>,
    started: Instant,
    method: String,
    origin: String,
    log: SharedLog,
    state: Mutex<CallState>,
    /// The call's place among the attempt's calls in flight, given back
    /// when it ends.
    in_flight: Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
}

#[derive(Debug, Default, Clone)]
struct CallState {
    sent: u64,
    received: u64,
    status: Option<u16>,
    failed: Option<CallError>,
    done: bool,
    /// A recorded call read whole: it ends once recorded (or failing), not
    /// when its body ends.
    held: bool,
}

impl Call {
    fn lock(&self) -> std::sync::MutexGuard<'_, CallState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ends the call with `error` (unless it already ended) and writes
    /// `[cohort] <code>: <method> <origin> <why>` to the job's log.
    fn fail(&self, error: CallError, why: &str) {
        if self.end(Some(error)) {
            let line = format!(
                "[cohort] {}: {} {} {why}\n",
                error.code(),
                self.method,
                self.origin
            );
            self.log.append(line.as_bytes());
        }
    }

    /// Ends the call as it stands (a response read to its end, or dropped
    /// by the job).
    fn finish(&self) {
        if !self.lock().held {
            self.end(None);
        }
    }

    /// Ends a held call as it stands.
    fn release(&self) {
        self.lock().held = false;
        self.end(None);
    }

    /// Records the call's end, with `error` if it failed; false if it had
    /// already ended.
    fn end(&self, error: Option<CallError>) -> bool {
        let ended = {
            let mut state = self.lock();
            if state.done {
                return false;
            }
            state.done = true;
            state.failed = state.failed.or(error);
            state.clone()
        };
        self.ledger.finish(self.slot, &ended, self.started);
        self.tape.ended(self.ordinal);
        self.in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        true
    }

    fn failure(&self) -> Option<CallError> {
        self.lock().failed
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // The job stopped waiting before a response came (it dropped the
        // request's future): the call never finished.
        self.end(Some(CallError::Unfinished));
    }
}

// ---- The attempt's side: the hook

/// The future `wasi:http` drives for a call's connection.
pub(crate) type IoFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;

/// One attempt's outbound HTTP: its grants and the secrets their headers
/// name, the bounds it runs under, its record and its log. `wasi:http`
/// hands every request of the job here.
#[derive(Clone)]
pub(crate) struct JobEgress {
    egress: Egress,
    grants: Arc<[HttpGrant]>,
    secrets: Arc<Secrets>,
    ledger: Ledger,
    log: SharedLog,
    /// One permit per call that may be in flight at once.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// The calls' ordinals and keys, and the recorded calls (see
    /// [`super::tape`]).
    tape: Tape,
    /// The `traceparent` every request carries, naming the attempt's
    /// span; `None`: the job's requests carry what the job wrote.
    traceparent: Option<HeaderValue>,
}

/// A request's destination, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    https: bool,
    /// Lowercase, without a trailing dot; an IPv6 address without brackets.
    host: String,
    /// The host as an address, when it is written as one.
    ip: Option<IpAddr>,
    port: u16,
    /// What the `Host` header says: the host and the port if one was given.
    authority: String,
}

impl Target {
    /// The destination of `uri`, or (for a URI that has none) the origin to
    /// record it under.
    fn of(uri: &Uri) -> Result<Self, String> {
        let raw_host = uri.host().unwrap_or_default();
        let fallback = || {
            truncate_utf8(
                format!("{}://{raw_host}", uri.scheme_str().unwrap_or_default()),
                EGRESS_ORIGIN_BYTES_MAX,
            )
        };
        let https = match uri.scheme_str() {
            Some(scheme) if scheme.eq_ignore_ascii_case("https") => true,
            Some(scheme) if scheme.eq_ignore_ascii_case("http") => false,
            _ => return Err(fallback()),
        };
        let (host, ip) = match raw_host.strip_prefix('[') {
            Some(bracketed) => {
                let v6: Ipv6Addr = bracketed
                    .strip_suffix(']')
                    .and_then(|inner| inner.parse().ok())
                    .ok_or_else(fallback)?;
                (v6.to_string(), Some(IpAddr::V6(v6)))
            }
            None => {
                let host = raw_host.to_ascii_lowercase();
                let host = host.strip_suffix('.').unwrap_or(&host).to_owned();
                let ip = strict_ipv4(&host).map(IpAddr::V4);
                (host, ip)
            }
        };
        if host.is_empty() || host.len() > EGRESS_ORIGIN_BYTES_MAX - "https://[]:65535".len() {
            return Err(fallback());
        }
        let port = match uri.port_u16() {
            Some(0) => return Err(fallback()),
            Some(port) => port,
            None if https => 443,
            None => 80,
        };
        let host_text = match ip {
            Some(IpAddr::V6(_)) => format!("[{host}]"),
            _ => host.clone(),
        };
        let authority = match uri.port_u16() {
            Some(port) => format!("{host_text}:{port}"),
            None => host_text,
        };
        Ok(Self {
            https,
            host,
            ip,
            port,
            authority,
        })
    }

    fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }

    /// `scheme://host:port`, as recorded.
    fn origin(&self) -> String {
        match self.ip {
            Some(IpAddr::V6(_)) => format!("{}://[{}]:{}", self.scheme(), self.host, self.port),
            _ => format!("{}://{}:{}", self.scheme(), self.host, self.port),
        }
    }
}

/// Why a phase of a call failed: the record's code, the job's error, and
/// the end of the log line.
struct Failure {
    error: CallError,
    guest: HttpError,
    why: String,
}

impl Failure {
    fn new(error: CallError, guest: HttpError, why: impl Into<String>) -> Self {
        Self {
            error,
            guest,
            why: why.into(),
        }
    }
}

/// The W3C trace context headers.
const TRACEPARENT: HeaderName = HeaderName::from_static(crate::contract::TRACEPARENT);
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Headers that concern one connection, not the request: never forwarded.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade" | "host"
    ) || name.as_str().starts_with("proxy-")
}

/// A connection, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

impl JobEgress {
    /// The egress of an attempt allowed `grants` (none: every call is
    /// refused), their headers filled from `secrets`, recorded in `ledger`,
    /// logging to `log`, its calls numbered, keyed, recorded and replayed
    /// by `tape`.
    pub(crate) fn new(
        egress: Egress,
        (grants, secrets): (Vec<HttpGrant>, Secrets),
        ledger: Ledger,
        log: SharedLog,
        tape: Tape,
    ) -> Self {
        let in_flight = usize::try_from(egress.limits.calls_at_once).unwrap_or(usize::MAX);
        Self {
            in_flight: Arc::new(tokio::sync::Semaphore::new(
                in_flight.min(tokio::sync::Semaphore::MAX_PERMITS),
            )),
            egress,
            grants: grants.into(),
            secrets: Arc::new(secrets),
            ledger,
            log,
            tape,
            traceparent: None,
        }
    }

    /// This egress with its requests carrying `trace` as their parent (see
    /// the module's note): the attempt's span, when the job has a trace
    /// context and the node exports spans.
    pub(crate) fn with_trace(mut self, trace: Option<&TraceContext>) -> Self {
        self.traceparent = trace.map(|context| {
            HeaderValue::from_str(&crate::contract::traceparent(context))
                .expect("a traceparent is hex digits and dashes")
        });
        self
    }

    /// Sends `request` if the job's grants allow it (see the module's
    /// note); the response, whose body is bounded and timed, and the
    /// connection's future, which the caller drives. Numbered when first
    /// polled: the tests' entry (a job's calls are numbered as it makes
    /// them, in `send_request`).
    #[cfg(test)]
    pub(crate) async fn send<B>(
        &self,
        request: http::Request<B>,
        options: Option<RequestOptions>,
    ) -> Result<(http::Response<WasiBody>, IoFuture), HttpError>
    where
        B: Body<Data = Bytes, Error = HttpError> + Send + 'static,
    {
        self.send_as(self.tape.ordinal(), request, options).await
    }

    /// [`send`](Self::send) for call `ordinal`, taken when the job made
    /// the call.
    async fn send_as<B>(
        &self,
        ordinal: u32,
        request: http::Request<B>,
        options: Option<RequestOptions>,
    ) -> Result<(http::Response<WasiBody>, IoFuture), HttpError>
    where
        B: Body<Data = Bytes, Error = HttpError> + Send + 'static,
    {
        let started = Instant::now();
        let limits = self.egress.limits;
        let deadline = Deadline::now() + limits.call_timeout;
        let method = truncate_utf8(request.method().to_string(), EGRESS_METHOD_BYTES_MAX);
        let target = Target::of(request.uri());
        let origin = match &target {
            Ok(target) => target.origin(),
            Err(origin) => origin.clone(),
        };
        let (slot, made) = self.ledger.begin(&method, &origin, started);
        let call = Arc::new(Call {
            ledger: self.ledger.clone(),
            tape: self.tape.clone(),
            ordinal,
            slot,
            started,
            method,
            origin,
            log: self.log.clone(),
            state: Mutex::default(),
            in_flight: Mutex::default(),
        });
        let fail = |failure: Failure| {
            call.fail(failure.error, &failure.why);
            failure.guest
        };

        if made > u64::from(limits.calls_per_attempt) {
            // Logged once: a job calling in a loop fills no log with it.
            if made == u64::from(limits.calls_per_attempt) + 1 {
                call.fail(
                    CallError::CallsExhausted,
                    &format!(
                        "is past this attempt's {} calls; this and later calls are refused",
                        limits.calls_per_attempt
                    ),
                );
            } else {
                call.end(Some(CallError::CallsExhausted));
            }
            return Err(HttpError::ConnectionLimitReached);
        }
        let target = match target {
            Ok(target) => target,
            Err(_) => {
                return Err(fail(Failure::new(
                    CallError::InvalidUri,
                    HttpError::HttpRequestUriInvalid,
                    "is not an http or https URL with a host",
                )));
            }
        };
        let path = request.uri().path();
        let granted: Vec<&HttpGrant> = self
            .grants
            .iter()
            .filter(|grant| {
                grant.allows(
                    target.scheme(),
                    &target.host,
                    target.port,
                    request.method().as_str(),
                    path,
                )
            })
            .collect();
        if granted.is_empty() {
            return Err(fail(Failure::new(
                CallError::Denied,
                HttpError::HttpRequestDenied,
                "is not granted to this job",
            )));
        }
        if let Some(length) = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok())
            && length > limits.request_bytes
        {
            return Err(fail(Failure::new(
                CallError::RequestTooLarge,
                HttpError::HttpRequestBodySize(Some(length)),
                format!(
                    "has a {length}-byte body; a call sends at most {} bytes",
                    limits.request_bytes
                ),
            )));
        }

        let rendered = (granted.iter())
            .map(|grant| Ok((*grant, grant_headers(grant, &self.secrets)?)))
            .collect::<Result<Vec<_>, Failure>>()
            .map_err(fail)?;

        // Each call in flight holds sockets (and, resolving, a thread; a
        // recorded one, its request body): a job sending many at once waits
        // for its earlier ones to end.
        let permit = tokio::time::timeout_at(deadline, self.in_flight.clone().acquire_owned());
        match permit.await {
            Ok(Ok(permit)) => {
                *call
                    .in_flight
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(permit)
            }
            Ok(Err(_)) | Err(_) => {
                return Err(fail(Failure::new(
                    CallError::Timeout,
                    HttpError::ConnectionLimitReached,
                    format!(
                        "waited its whole time for one of this attempt's {} calls in flight to end",
                        limits.calls_at_once
                    ),
                )));
            }
        }

        // A call a grant records: its request is read whole (for its
        // digest), and answered from the record if it is the call recorded
        // at its ordinal.
        let record = self.tape.records()
            && granted
                .iter()
                .any(|grant| grant.records(request.method().as_str()));
        let request = request.map(|body| body.boxed_unsync());
        let (request, recording) = match record {
            false => (request, None),
            true => {
                let (parts, body) = request.into_parts();
                let bytes = read_request(body, limits.request_bytes, deadline)
                    .await
                    .map_err(fail)?;
                let url = parts.uri.to_string();
                if url.len() > RECORD_URL_BYTES_MAX {
                    return Err(fail(Failure::new(
                        CallError::RecordTooLarge,
                        HttpError::HttpRequestUriTooLong,
                        format!(
                            "has a URL over {RECORD_URL_BYTES_MAX} bytes, more than a recorded call keeps"
                        ),
                    )));
                }
                let body_sha256: [u8; 32] = Sha256::digest(&bytes).into();
                match self
                    .tape
                    .replayed(ordinal, parts.method.as_str(), &url, &body_sha256)
                {
                    Replayed::Found(found) => return self.replay(&call, ordinal, *found),
                    Replayed::Live { diverged: true } => {
                        let line = format!(
                            "[cohort] not replayed: {} {} (call {ordinal}) is not the call recorded \
                             there; it is sent and recorded anew\n",
                            call.method, call.origin
                        );
                        self.log.append(line.as_bytes());
                    }
                    Replayed::Live { diverged: false } => {}
                }
                let body = Full::new(bytes)
                    .map_err(|never| match never {})
                    .boxed_unsync();
                (
                    http::Request::from_parts(parts, body),
                    Some((url, body_sha256)),
                )
            }
        };

        let connect_by = deadline.min(
            Deadline::now()
                + shorter(
                    options.and_then(|o| o.connect_timeout),
                    limits.connect_timeout,
                ),
        );
        let (stream, ip) = self
            .connect(&target, &granted, connect_by, &call.in_flight)
            .await
            .map_err(fail)?;
        // The headers of the grants that permit the address connected to,
        // the first grant's where two set one name.
        let mut set: Vec<(HeaderName, HeaderValue)> = Vec::new();
        for (grant, headers) in rendered {
            if permits(grant, ip) {
                for (name, value) in headers {
                    if !set.iter().any(|(seen, _)| *seen == name) {
                        set.push((name, value));
                    }
                }
            }
        }

        let key = HeaderValue::from_str(&self.tape.idempotency_key(ordinal))
            .expect("hex digits are a header value");
        let (parts, body) = request.into_parts();
        let headers = Added {
            trace: self.traceparent.clone(),
            grants: set,
            idempotency_key: key,
        };
        let outgoing = outgoing(parts, &target, body, headers, &call, limits).map_err(fail)?;
        let mut builder = hyper::client::conn::http1::Builder::new();
        builder.max_header_size(EGRESS_RESPONSE_HEAD_BYTES_MAX);
        let (mut sender, connection) = builder
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| {
                fail(Failure::new(
                    CallError::HttpFailed,
                    HttpError::HttpProtocolError,
                    format!("failed: {e}"),
                ))
            })?;

        // Drive the connection while waiting for the response's head.
        let first_byte_by = deadline.min(
            Deadline::now()
                + shorter(
                    options.and_then(|o| o.first_byte_timeout),
                    limits.first_byte_timeout,
                ),
        );
        let mut connection = Some(Box::pin(connection));
        let mut connection_error = None;
        let head = {
            let mut response = std::pin::pin!(sender.send_request(outgoing));
            let exchange = std::future::poll_fn(|cx| {
                if let Poll::Ready(result) = response.as_mut().poll(cx) {
                    return Poll::Ready(result);
                }
                if let Some(running) = connection.as_mut()
                    && let Poll::Ready(ended) = running.as_mut().poll(cx)
                {
                    connection = None;
                    connection_error = ended.err();
                    // The response (or why there is none) follows.
                    return response.as_mut().poll(cx);
                }
                Poll::Pending
            });
            tokio::time::timeout_at(first_byte_by, exchange).await
        };
        let failed = match head {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => {
                let error = connection_error.unwrap_or(error);
                Err(Failure::new(
                    CallError::HttpFailed,
                    guest_error(&error),
                    format!("failed: {error}"),
                ))
            }
            Err(_elapsed) => Err(Failure::new(
                CallError::Timeout,
                HttpError::ConnectionReadTimeout,
                "got no response in time",
            )),
        };
        let response = match failed {
            Ok(response) => response,
            // A bound the request body crossed says more than hyper does.
            Err(failure) => match call.failure() {
                Some(error) => return Err(error.guest()),
                None => return Err(fail(failure)),
            },
        };
        drop(sender);
        {
            let mut state = call.lock();
            state.status = Some(response.status().as_u16());
            state.held = recording.is_some();
        }

        let between = shorter(
            options.and_then(|o| o.between_bytes_timeout),
            limits.between_bytes_timeout,
        );
        let body_call = call.clone();
        let response = response.map(move |incoming| {
            ResponseBody {
                incoming,
                call: body_call,
                limits,
                between,
                idle: Box::pin(tokio::time::sleep(between)),
                waiting: false,
                deadline: Box::pin(tokio::time::sleep_until(deadline)),
                ended: false,
            }
            .boxed_unsync()
        });
        let io_call = call.clone();
        let io = Box::pin(async move {
            let Some(connection) = connection else {
                return Ok(());
            };
            match tokio::time::timeout_at(deadline, connection).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(guest_error(&error)),
                Err(_elapsed) => {
                    io_call.fail(CallError::Timeout, "ran past the call's time limit");
                    Err(HttpError::HttpResponseTimeout)
                }
            }
        });
        match recording {
            None => Ok((response, Box::new(io))),
            Some((url, body_sha256)) => {
                let call_ref = &call;
                self.record(call_ref, (ordinal, url, body_sha256), response, io)
                    .await
                    .map_err(|failure| {
                        call.fail(failure.error, &failure.why);
                        failure.guest
                    })
            }
        }
    }

    /// Reads a recorded call's whole response (driving its connection),
    /// has the recorder make it durable, and only then hands it to the job.
    async fn record(
        &self,
        call: &Arc<Call>,
        (ordinal, url, body_sha256): (u32, String, [u8; 32]),
        response: http::Response<WasiBody>,
        mut io: Pin<Box<dyn Future<Output = Result<(), HttpError>> + Send>>,
    ) -> Result<(http::Response<WasiBody>, IoFuture), Failure> {
        let (parts, body) = response.into_parts();
        let mut io_ended = None;
        let mut read = std::pin::pin!(read_response(body));
        let read = std::future::poll_fn(|cx| {
            if io_ended.is_none()
                && let Poll::Ready(ended) = io.as_mut().poll(cx)
            {
                io_ended = Some(ended);
            }
            read.as_mut().poll(cx)
        })
        .await;
        let body = read?;
        let io: IoFuture = match io_ended {
            Some(_) => Box::new(async { Ok(()) }),
            None => Box::new(io),
        };
        let reads = self.tape.pending_reads();
        let taken = reads.len();
        let headers: Vec<(String, Vec<u8>)> = (parts.headers.iter())
            .filter(|(name, _)| !is_hop_by_hop(name))
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect();
        let recorded = RecordedCall {
            ordinal,
            method: call.method.clone(),
            url,
            body_sha256,
            status: parts.status.as_u16(),
            headers,
            body: body.to_vec(),
            reads,
        };
        cohort_master::check_call(&recorded).map_err(|why| {
            Failure::new(
                CallError::RecordTooLarge,
                HttpError::HttpResponseBodySize(None),
                format!("was sent, but its response is more than a record keeps: {why}"),
            )
        })?;
        let Some(recorder) = self.tape.recorder() else {
            unreachable!("only a tape with a recorder records");
        };
        match recorder.record(recorded).await {
            Ok(()) => {}
            Err(Unrecorded::TooLarge(why)) => {
                return Err(Failure::new(
                    CallError::RecordTooLarge,
                    HttpError::HttpResponseBodySize(None),
                    format!("was sent, but the job's record has no room for it: {why}"),
                ));
            }
            Err(Unrecorded::Failed(why)) => {
                self.tape.fail(why.clone());
                return Err(Failure::new(
                    CallError::RecordFailed,
                    HttpError::InternalError(Some("the response could not be recorded".into())),
                    format!(
                        "was sent, but its response could not be recorded ({why}): the attempt \
                         fails, and the next one sends it again with the same Idempotency-Key"
                    ),
                ));
            }
        }
        self.tape.recorded(ordinal, taken);
        call.release();
        let body = Full::new(body)
            .map_err(|never| match never {})
            .boxed_unsync();
        Ok((http::Response::from_parts(parts, body), io))
    }

    /// Answers call `ordinal` with the response an earlier attempt
    /// recorded, sending nothing.
    fn replay(
        &self,
        call: &Arc<Call>,
        ordinal: u32,
        found: RecordedCall,
    ) -> Result<(http::Response<WasiBody>, IoFuture), HttpError> {
        let mut response = http::Response::new(
            Full::new(Bytes::from(found.body))
                .map_err(|never| match never {})
                .boxed_unsync(),
        );
        *response.status_mut() =
            http::StatusCode::from_u16(found.status).map_err(|_| HttpError::HttpProtocolError)?;
        for (name, value) in found.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(&value),
            ) {
                response.headers_mut().append(name, value);
            }
        }
        {
            let mut state = call.lock();
            state.status = Some(found.status);
        }
        call.finish();
        let line = format!(
            "[cohort] replayed: {} {} (call {ordinal}) answered {} as an earlier attempt \
             recorded it; not sent again\n",
            call.method, call.origin, found.status
        );
        self.log.append(line.as_bytes());
        Ok((response, Box::new(async { Ok(()) })))
    }

    /// Resolves the target's host, keeps the addresses a grant permits and
    /// connects to the first that accepts (TLS on top for `https`); the
    /// connection and the address it reached. `slot` holds the call's
    /// place among the attempt's calls in flight, which the name lookup
    /// keeps while it runs.
    async fn connect(
        &self,
        target: &Target,
        granted: &[&HttpGrant],
        by: Deadline,
        slot: &Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
    ) -> Result<(Box<dyn Io>, IpAddr), Failure> {
        let addresses = match target.ip {
            Some(ip) => vec![ip],
            None => resolve(&target.host, target.port, by, slot).await?,
        };
        let (passing, refused): (Vec<IpAddr>, Vec<IpAddr>) = addresses
            .into_iter()
            .partition(|ip| granted.iter().any(|grant| permits(grant, *ip)));
        if passing.is_empty() {
            return Err(refused_addresses(target, &refused));
        }
        let mut last_error = None;
        let mut tcp = None;
        for ip in passing {
            match tokio::time::timeout_at(by, TcpStream::connect(SocketAddr::new(ip, target.port)))
                .await
            {
                Ok(Ok(stream)) => {
                    tcp = Some((stream, ip));
                    break;
                }
                Ok(Err(error)) => last_error = Some(error),
                Err(_elapsed) => {
                    return Err(Failure::new(
                        CallError::Timeout,
                        HttpError::ConnectionTimeout,
                        "did not connect in time",
                    ));
                }
            }
        }
        let Some((tcp, ip)) = tcp else {
            let guest = match last_error.as_ref().map(std::io::Error::kind) {
                Some(std::io::ErrorKind::ConnectionRefused) => HttpError::ConnectionRefused,
                _ => HttpError::DestinationUnavailable,
            };
            let why = last_error.map_or_else(|| "no address".to_owned(), |e| e.to_string());
            return Err(Failure::new(
                CallError::ConnectFailed,
                guest,
                format!("cannot be connected to: {why}"),
            ));
        };
        let _ = tcp.set_nodelay(true);
        if !target.https {
            return Ok((Box::new(tcp), ip));
        }
        let tls_failed = |guest: HttpError, why: String| {
            Failure::new(CallError::TlsFailed, guest, format!("failed TLS: {why}"))
        };
        let config = self
            .egress
            .tls_config()
            .await
            .map_err(|why| tls_failed(HttpError::TlsProtocolError, why))?;
        let name = match target.ip {
            Some(ip) => ServerName::from(ip),
            None => ServerName::try_from(target.host.clone())
                .map_err(|e| tls_failed(HttpError::TlsProtocolError, e.to_string()))?,
        };
        let connector = tokio_rustls::TlsConnector::from(config);
        match tokio::time::timeout_at(by, connector.connect(name, tcp)).await {
            Ok(Ok(stream)) => Ok((Box::new(stream), ip)),
            Ok(Err(error)) => Err(tls_failed(tls_guest_error(&error), error.to_string())),
            Err(_elapsed) => Err(Failure::new(
                CallError::Timeout,
                HttpError::ConnectionTimeout,
                "did not finish its TLS handshake in time",
            )),
        }
    }
}

impl WasiHttpHooks for JobEgress {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_errors: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), HttpError>> + Send>
    {
        let this = self.clone();
        let limits = self.egress.limits;
        let request = request.map(|body| DrainOnDrop {
            body: Some(body),
            bytes_max: limits.request_bytes,
            within: limits.call_timeout,
        });
        // Numbered now, as the job makes the call: the future runs in a
        // task of its own, which a job's later call may overtake.
        let ordinal = self.tape.ordinal();
        // Ends the call's place among the open ones even if its task is
        // dropped before it first runs (the job dropped the request).
        let open = OpenCall(self.tape.clone(), ordinal);
        Box::new(async move {
            let sent = this.send_as(ordinal, request, options).await;
            drop(open);
            sent
        })
    }
}

/// A call's place among its attempt's open calls, given back when the
/// call's future ends or is dropped.
struct OpenCall(Tape, u32);

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.ended(self.1);
    }
}

/// A job's request body that, dropped before its end (the call refused or
/// failed before the body was sent), is read to its end in the background
/// and thrown away, within the call's bounds. The job writes its body while
/// the host decides; a runtime whose body stream vanished under it (as
/// StarlingMonkey's `fetch` does) would trap instead of seeing the refusal.
struct DrainOnDrop {
    body: Option<WasiBody>,
    bytes_max: u64,
    within: Duration,
}

impl Body for DrainOnDrop {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(Pin::new(body).poll_frame(cx));
        if frame.is_none() {
            self.body = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|body| body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |body| body.size_hint())
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(mut body) = self.body.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (bytes_max, within) = (self.bytes_max, self.within);
        runtime.spawn(async move {
            let drain = async {
                let mut read = 0u64;
                while let Some(Ok(frame)) = body.frame().await {
                    read += frame.data_ref().map_or(0, |data| data.len() as u64);
                    if read > bytes_max {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(within, drain).await;
        });
    }
}

/// The job's timeout if it set one and it is shorter than the limit.
fn shorter(asked: Option<Duration>, limit: Duration) -> Duration {
    asked.map_or(limit, |asked| asked.min(limit))
}

/// The addresses `host` resolves to, in the resolver's order, without
/// repeats, at most [`EGRESS_ADDRESSES_MAX`].
///
/// The system resolver blocks a thread until it answers, past any
/// deadline of ours; the lookup takes the call's place in flight from
/// `slot` and gives it back only when it returns, so an attempt's stuck
/// lookups hold at most its calls in flight, not a thread per call.
async fn resolve(
    host: &str,
    port: u16,
    by: Deadline,
    slot: &Mutex<Option<tokio::sync::OwnedSemaphorePermit>>,
) -> Result<Vec<IpAddr>, Failure> {
    let held = slot
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    let name = host.to_owned();
    let lookup = tokio::task::spawn_blocking(move || {
        let found = std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port));
        (found.map(Iterator::collect::<Vec<_>>), held)
    });
    let found = match tokio::time::timeout_at(by, lookup).await {
        Ok(Ok((found, held))) => {
            *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = held;
            Ok(found)
        }
        Ok(Err(join)) => Ok(Err(std::io::Error::other(join.to_string()))),
        Err(elapsed) => Err(elapsed),
    };
    let found = match found {
        Err(_elapsed) => {
            return Err(Failure::new(
                CallError::Timeout,
                HttpError::DnsTimeout,
                "was not resolved in time",
            ));
        }
        Ok(Err(error)) => {
            return Err(Failure::new(
                CallError::DnsFailed,
                HttpError::DnsError {
                    rcode: Some("name not resolved".to_owned()),
                    info_code: None,
                },
                format!("does not resolve: {error}"),
            ));
        }
        Ok(Ok(found)) => found,
    };
    let mut addresses = Vec::new();
    for address in found {
        if !addresses.contains(&address.ip()) {
            addresses.push(address.ip());
            if addresses.len() == EGRESS_ADDRESSES_MAX {
                break;
            }
        }
    }
    if addresses.is_empty() {
        return Err(Failure::new(
            CallError::DnsFailed,
            HttpError::DnsError {
                rcode: Some("no address".to_owned()),
                info_code: None,
            },
            "resolves to no address",
        ));
    }
    Ok(addresses)
}

/// The failure of a host none of whose addresses passed, naming their
/// kinds. The addresses themselves go to the node's log only: a job has no
/// name lookups, and the private addresses a granted name resolves to are
/// the node's network, not the job's business.
fn refused_addresses(target: &Target, refused: &[IpAddr]) -> Failure {
    let mut kinds: Vec<&str> = Vec::new();
    for ip in refused {
        let kind = classify(*ip).name();
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let mut shown: Vec<String> = refused
        .iter()
        .take(EGRESS_ADDRESSES_LOGGED_MAX)
        .map(IpAddr::to_string)
        .collect();
    if refused.len() > EGRESS_ADDRESSES_LOGGED_MAX {
        shown.push("...".to_owned());
    }
    let why = match target.ip {
        Some(_) => format!("is a {} address", kinds.join(" and ")),
        None => {
            tracing::debug!(
                host = %target.host,
                addresses = %shown.join(", "),
                "a job's call refused: its host resolves only to addresses its grants do not allow"
            );
            format!("resolves only to {} addresses", kinds.join(" and "))
        }
    };
    Failure::new(
        CallError::AddressRefused,
        HttpError::DestinationIpProhibited,
        why,
    )
}

/// The headers `grant` sets, their templates filled from `secrets` and
/// marked sensitive; or the failure of a call that needs them, naming the
/// secret or the header, never a value.
fn grant_headers(
    grant: &HttpGrant,
    secrets: &Secrets,
) -> Result<Vec<(HeaderName, HeaderValue)>, Failure> {
    let unavailable = |why: String| {
        Failure::new(
            CallError::SecretUnavailable,
            HttpError::HttpRequestDenied,
            why,
        )
    };
    let mut headers = Vec::with_capacity(grant.headers.len());
    for (name, value) in &grant.headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            unavailable(format!(
                "is allowed by a grant whose header {name:?} is no header name"
            ))
        })?;
        let pieces = template(value).map_err(|_| {
            unavailable(format!(
                "is allowed by a grant whose header {header} is no valid template"
            ))
        })?;
        let mut rendered = String::new();
        let mut named = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Text(text) => rendered.push_str(text),
                Piece::Secret(secret) => {
                    let plaintext = secrets.get(secret).ok_or_else(|| {
                        unavailable(format!(
                            "needs the secret {secret} (header {header}), which this attempt was not given"
                        ))
                    })?;
                    rendered.push_str(plaintext);
                    named.push(secret);
                }
            }
        }
        let mut value = HeaderValue::from_str(&rendered).map_err(|_| {
            let from = match named.is_empty() {
                true => String::new(),
                false => format!(" (filled from the secret {})", named.join(", ")),
            };
            unavailable(format!(
                "would carry no valid value in its header {header}{from}: a line break or another control character"
            ))
        })?;
        value.set_sensitive(true);
        headers.push((header, value));
    }
    Ok(headers)
}

/// The headers the host adds to a job's request, each replacing the
/// job's of its name (the idempotency key only where the job set none).
struct Added {
    /// The attempt's `traceparent`, if it carries one.
    trace: Option<HeaderValue>,
    /// The headers of the grants that permit the address, rendered.
    grants: Vec<(HeaderName, HeaderValue)>,
    idempotency_key: HeaderValue,
}

/// The request as it goes on the wire: the path and query as its target,
/// the `Host` header from the URI's authority, no hop-by-hop header, the
/// attempt's `traceparent` in place of the job's trace context headers,
/// the grants' headers in place of the job's (and the host's) of those
/// names, the body counted and bounded.
fn outgoing<B>(
    parts: http::request::Parts,
    target: &Target,
    body: B,
    added: Added,
    call: &Arc<Call>,
    limits: EgressLimits,
) -> Result<http::Request<RequestBody>, Failure>
where
    B: Body<Data = Bytes, Error = HttpError> + Send + 'static,
{
    let invalid = || {
        Failure::new(
            CallError::InvalidUri,
            HttpError::HttpRequestUriInvalid,
            "is not an http or https URL with a host",
        )
    };
    let path = match parts.uri.query() {
        Some(query) => format!("{}?{query}", parts.uri.path()),
        None => parts.uri.path().to_owned(),
    };
    let uri: Uri = path.parse().map_err(|_| invalid())?;
    let host = HeaderValue::from_str(&target.authority).map_err(|_| invalid())?;
    // Names the job's `Connection` header lists are hop-by-hop too.
    let listed: Vec<String> = parts
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .collect();
    let mut request = http::Request::new(RequestBody {
        inner: body.boxed_unsync(),
        call: call.clone(),
        limits,
    });
    *request.method_mut() = parts.method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    let headers = request.headers_mut();
    for (name, value) in &parts.headers {
        if !is_hop_by_hop(name) && !listed.iter().any(|listed| listed == name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Some(traceparent) = added.trace {
        // The job's `tracestate` went with its `traceparent`; the job's
        // context keeps none to send.
        headers.remove(TRACESTATE);
        headers.insert(TRACEPARENT, traceparent);
    }
    for (name, value) in added.grants {
        headers.insert(name, value);
    }
    let key = HeaderName::from_static("idempotency-key");
    if !headers.contains_key(&key) {
        headers.insert(key, added.idempotency_key);
    }
    headers.insert(header::HOST, host);
    Ok(request)
}

/// A recorded call's request body, read whole within the call's bounds.
async fn read_request(
    mut body: UnsyncBoxBody<Bytes, HttpError>,
    bytes_max: u64,
    by: Deadline,
) -> Result<Bytes, Failure> {
    let mut read = Vec::new();
    loop {
        match tokio::time::timeout_at(by, body.frame()).await {
            Err(_elapsed) => {
                return Err(Failure::new(
                    CallError::Timeout,
                    HttpError::HttpRequestBodySize(None),
                    "did not finish its request body in time",
                ));
            }
            Ok(None) => return Ok(read.into()),
            Ok(Some(Err(error))) => {
                return Err(Failure::new(
                    CallError::HttpFailed,
                    error,
                    "failed writing its request body",
                ));
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if (read.len() + data.len()) as u64 > bytes_max {
                        return Err(Failure::new(
                            CallError::RequestTooLarge,
                            HttpError::HttpRequestBodySize(None),
                            format!("has a body over {bytes_max} bytes, the most a call sends"),
                        ));
                    }
                    read.extend_from_slice(&data);
                }
            }
        }
    }
}

/// A recorded call's response body, read whole: its own bounds and times
/// apply (see [`ResponseBody`]), and a record's.
async fn read_response(mut body: WasiBody) -> Result<Bytes, Failure> {
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|guest| {
            // The body recorded why it failed, in the log and the record.
            Failure::new(CallError::HttpFailed, guest, "failed")
        })?;
        if let Ok(data) = frame.into_data() {
            if read.len() + data.len() > RECORD_BODY_BYTES_MAX {
                return Err(Failure::new(
                    CallError::RecordTooLarge,
                    HttpError::HttpResponseBodySize(None),
                    format!(
                        "was sent, but answered with a body over {RECORD_BODY_BYTES_MAX} bytes, \
                         more than a recorded call keeps"
                    ),
                ));
            }
            read.extend_from_slice(&data);
        }
    }
    Ok(read.into())
}

/// The job's error for a connection or response that hyper gave up on.
fn guest_error(error: &hyper::Error) -> HttpError {
    if error.is_timeout() {
        HttpError::HttpResponseTimeout
    } else if error.is_incomplete_message() {
        HttpError::HttpResponseIncomplete
    } else if error.is_closed() || error.is_canceled() {
        HttpError::ConnectionTerminated
    } else if error.is_parse_too_large() {
        HttpError::HttpResponseHeaderSectionSize(None)
    } else {
        HttpError::HttpProtocolError
    }
}

/// The job's error for a failed TLS handshake.
fn tls_guest_error(error: &std::io::Error) -> HttpError {
    match error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_)) => HttpError::TlsCertificateError,
        Some(rustls::Error::AlertReceived(alert)) => HttpError::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => HttpError::TlsProtocolError,
    }
}

/// The job's request body, counted against the call's and the attempt's
/// bounds as it is sent.
struct RequestBody {
    inner: WasiBody,
    call: Arc<Call>,
    limits: EgressLimits,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
        {
            let n = data.len() as u64;
            let sent = {
                let mut state = self.call.lock();
                state.sent = state.sent.saturating_add(n);
                state.sent
            };
            if sent > self.limits.request_bytes {
                self.call.fail(
                    CallError::RequestTooLarge,
                    &format!(
                        "has a body over {} bytes, the most a call sends",
                        self.limits.request_bytes
                    ),
                );
                return Poll::Ready(Some(Err(HttpError::HttpRequestBodySize(Some(sent)))));
            }
            if !self
                .call
                .ledger
                .count_bytes(n, self.limits.bytes_per_attempt)
            {
                self.call.fail(
                    CallError::BytesExhausted,
                    &format!(
                        "is past this attempt's {} bytes of calls",
                        self.limits.bytes_per_attempt
                    ),
                );
                return Poll::Ready(Some(Err(HttpError::HttpRequestBodySize(None))));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body as the job reads it: bounded in size and time, and
/// recorded when it ends, fails or is dropped.
struct ResponseBody {
    incoming: Incoming,
    call: Arc<Call>,
    limits: EgressLimits,
    between: Duration,
    /// The wait for the next chunk.
    idle: Pin<Box<Sleep>>,
    /// The end of the call's time.
    deadline: Pin<Box<Sleep>>,
    ended: bool,
    /// Whether the last poll found nothing: the gap between chunks is
    /// timed from the poll that starts a wait, not from the last chunk, so
    /// a job that reads slowly is not taken for a server that stalls.
    waiting: bool,
}

impl ResponseBody {
    fn fail(
        &mut self,
        error: CallError,
        guest: HttpError,
        why: &str,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        self.ended = true;
        self.call.fail(error, why);
        Poll::Ready(Some(Err(guest)))
    }

    fn timed_out(&mut self) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let timeout = self.limits.call_timeout;
        self.fail(
            CallError::Timeout,
            HttpError::HttpResponseTimeout,
            &format!("ran past the call's {} ms time limit", timeout.as_millis()),
        )
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if self.deadline.is_elapsed() {
            return self.timed_out();
        }
        if !self.waiting {
            let next = Deadline::now() + self.between;
            self.idle.as_mut().reset(next);
        }
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    let received = {
                        let mut state = self.call.lock();
                        state.received = state.received.saturating_add(n);
                        state.received
                    };
                    if received > self.limits.response_bytes {
                        let limit = self.limits.response_bytes;
                        return self.fail(
                            CallError::ResponseTooLarge,
                            HttpError::HttpResponseBodySize(Some(received)),
                            &format!(
                                "answered with a body over {limit} bytes, the most a call receives"
                            ),
                        );
                    }
                    if !self
                        .call
                        .ledger
                        .count_bytes(n, self.limits.bytes_per_attempt)
                    {
                        let limit = self.limits.bytes_per_attempt;
                        return self.fail(
                            CallError::BytesExhausted,
                            HttpError::HttpResponseBodySize(None),
                            &format!("is past this attempt's {limit} bytes of calls"),
                        );
                    }
                }
                self.waiting = false;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => {
                if let Some(failed) = self.call.failure() {
                    self.ended = true;
                    return Poll::Ready(Some(Err(failed.guest())));
                }
                let guest = match error.is_timeout() {
                    true => HttpError::HttpResponseTimeout,
                    false => guest_error(&error),
                };
                self.fail(CallError::HttpFailed, guest, &format!("failed: {error}"))
            }
            Poll::Ready(None) => {
                self.ended = true;
                // The connection may have been cut at the call's deadline.
                if let Some(failed) = self.call.failure() {
                    return Poll::Ready(Some(Err(failed.guest())));
                }
                self.call.finish();
                Poll::Ready(None)
            }
            Poll::Pending => {
                if self.deadline.as_mut().poll(cx).is_ready() {
                    return self.timed_out();
                }
                if self.idle.as_mut().poll(cx).is_ready() {
                    let between = self.between;
                    return self.fail(
                        CallError::Timeout,
                        HttpError::ConnectionReadTimeout,
                        &format!(
                            "sent nothing for {} ms in its response body",
                            between.as_millis()
                        ),
                    );
                }
                self.waiting = true;
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // Read to its end, failed, or dropped by the job: the call is over.
        self.call.finish();
    }
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
