//! Outbound HTTP(S) from a job: a small blocking client.
//!
//! A job may call out over HTTP only where the operator of its cohort node
//! granted it (`cohort grant <name> --http <url-pattern>`). A request outside
//! every grant fails with an [`Error`] of kind [`ErrorKind::Denied`]; nothing
//! in the job needs to change once the grant is there.
//!
//! ```no_run
//! use cohort_guest::{JobError, http, job};
//! use std::time::Duration;
//!
//! #[job]
//! fn run(city: String) -> Result<String, JobError> {
//!     // The simple form.
//!     let page = http::get("https://example.com/")?;
//!     cohort_guest::info!("example.com answered {}", page.status);
//!
//!     // The builder: method, headers, body, timeout.
//!     let response = http::Request::new(http::Method::Post, "https://api.example.com/v1/weather")
//!         .header("Accept", "application/json")
//!         .json(&serde_json::json!({ "city": city }))
//!         .timeout(Duration::from_secs(10))
//!         .send()?
//!         .error_for_status()?;
//!     let weather: serde_json::Value = response.json()?;
//!     Ok(weather["summary"].to_string())
//! }
//! ```
//!
//! Every [`Error`] converts into a [`JobError`] (codes `http_denied`,
//! `http_timeout`, `http_error`, ... see [`Error::code`]), so `?` works in a
//! `#[job]` function.
//!
//! # Behaviour
//!
//! * Calls block until the whole response body has been read. A response
//!   body larger than [`MAX_RESPONSE_BYTES`] (64 MiB; see
//!   [`Request::max_response_bytes`]) is an error of kind
//!   [`ErrorKind::ResponseTooLarge`], and the node's memory limit for the
//!   job applies on top of that.
//! * Without [`Request::timeout`] a call waits as long as the node lets it
//!   (the job's own deadline bounds it in the end). With one, the whole
//!   call, from connecting to the last byte of the body, must fit in it.
//! * Only `http` and `https` URLs are accepted, without credentials in them
//!   (`user:pass@host`): send those in an `Authorization` header. The host
//!   and path are sent as written, not normalized; non-ASCII characters in
//!   the path or query are percent-encoded.
//! * A body of known length is sent with a `Content-Length` header (added
//!   unless the request has one). The node sets `Host` itself; headers that
//!   only the node may set (`Host`, `Connection`, `Transfer-Encoding`, ...)
//!   are refused.
//! * Redirects are not followed: a `3xx` answer is returned as it is.
//! * Error messages name the request's method and origin
//!   (`https://api.example.com`) but never its path or query, which may hold
//!   a secret (a webhook token, an API key).
//! * A job may be run more than once (see the crate docs): a call with side
//!   effects should carry an idempotency key if the server supports one.

use crate::JobError;
use serde::{Serialize, de::DeserializeOwned};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The most response body bytes a call reads into memory unless the request
/// says otherwise with [`Request::max_response_bytes`]: 64 MiB.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Sends a `GET` request to `url` and reads its response.
pub fn get(url: &str) -> Result<Response, Error> {
    Request::new(Method::Get, url).send()
}

/// Sends a `POST` request with `body` to `url` and reads its response.
pub fn post(url: &str, body: impl Into<Vec<u8>>) -> Result<Response, Error> {
    Request::new(Method::Post, url).body(body).send()
}

/// An HTTP method.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`
    Get,
    /// `HEAD`
    Head,
    /// `POST`
    Post,
    /// `PUT`
    Put,
    /// `DELETE`
    Delete,
    /// `CONNECT`
    Connect,
    /// `OPTIONS`
    Options,
    /// `TRACE`
    Trace,
    /// `PATCH`
    Patch,
    /// Any other method, spelled exactly as it is sent.
    Other(String),
}

impl Method {
    /// The method as sent on the wire, e.g. `"POST"`.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Connect => "CONNECT",
            Method::Options => "OPTIONS",
            Method::Trace => "TRACE",
            Method::Patch => "PATCH",
            Method::Other(method) => method,
        }
    }

    /// Methods whose requests carry a body by convention: these send
    /// `Content-Length: 0` when their body is empty.
    fn expects_body(&self) -> bool {
        matches!(self, Method::Post | Method::Put | Method::Patch)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = Error;

    /// Parses a method name. Methods are case-sensitive: `"GET"` is
    /// [`Method::Get`], `"get"` is `Method::Other("get")`.
    fn from_str(method: &str) -> Result<Self, Error> {
        Ok(match method {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "CONNECT" => Method::Connect,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "PATCH" => Method::Patch,
            other if is_token(other) => Method::Other(other.to_string()),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidRequest,
                    format!("`{}` is not a valid HTTP method", other.escape_debug()),
                ));
            }
        })
    }
}

/// An HTTP request being built; [`send`](Request::send) makes the call.
///
/// The builder methods never fail: a malformed URL, header or JSON body is
/// reported by `send`, as an error of kind [`ErrorKind::InvalidRequest`].
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
    max_response_bytes: usize,
    /// A builder step that failed (a body that could not be JSON-encoded),
    /// reported by `send`.
    deferred_error: Option<String>,
}

impl Request {
    /// A request with `method` to `url` (`http://` or `https://`), no
    /// headers and an empty body.
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
            max_response_bytes: MAX_RESPONSE_BYTES,
            deferred_error: None,
        }
    }

    /// Adds a header. Adding the same name twice sends both values.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the request body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, and `Content-Type:
    /// application/json` unless the request already has a content type.
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => self.body = body,
            Err(e) => self.deferred_error = Some(format!("cannot encode the JSON body: {e}")),
        }
        if !self.has_header("content-type") {
            self.headers
                .push(("Content-Type".to_string(), "application/json".to_string()));
        }
        self
    }

    /// Limits the whole call, from connecting to the last byte of the
    /// response body, to `timeout`. Past it the call fails with an error of
    /// kind [`ErrorKind::Timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Reads at most `limit` bytes of response body (default
    /// [`MAX_RESPONSE_BYTES`]); a longer body fails the call with an error
    /// of kind [`ErrorKind::ResponseTooLarge`].
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    /// Sends the request and reads the whole response.
    ///
    /// Any status is a response, `404` and `500` included: see
    /// [`Response::error_for_status`] to turn those into errors.
    pub fn send(self) -> Result<Response, Error> {
        let prepared = self.prepare()?;
        transport::send(prepared)
    }

    fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// Checks the request and puts it into the form sent to the node.
    fn prepare(self) -> Result<Prepared, Error> {
        if let Some(message) = &self.deferred_error {
            return Err(Error::new(ErrorKind::InvalidRequest, message.clone()));
        }
        if let Method::Other(method) = &self.method
            && !is_token(method)
        {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("`{}` is not a valid HTTP method", method.escape_debug()),
            ));
        }
        let url = Url::parse(&self.url)?;
        let context = format!("{} {}", self.method, url.origin());
        let mut headers = Vec::with_capacity(self.headers.len() + 1);
        for (name, value) in &self.headers {
            check_header(name, value).map_err(|e| e.context(&context))?;
            headers.push((name.clone(), value.clone()));
        }
        if !self.has_header("content-length")
            && (!self.body.is_empty() || self.method.expects_body())
        {
            headers.push(("Content-Length".to_string(), self.body.len().to_string()));
        }
        Ok(Prepared {
            method: self.method,
            url,
            headers,
            body: self.body,
            timeout: self.timeout,
            max_response_bytes: self.max_response_bytes,
            context,
        })
    }
}

/// A request checked and ready to go out.
#[derive(Debug)]
struct Prepared {
    method: Method,
    url: Url,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
    max_response_bytes: usize,
    /// `METHOD origin`, the prefix of every error message about this call.
    context: String,
}

/// The parts of an `http(s)` URL that a request is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    https: bool,
    /// `host[:port]`, as written.
    authority: String,
    /// From the first `/` (or `/` if there is none), query included, without
    /// the fragment; non-ASCII characters percent-encoded.
    path_with_query: String,
}

impl Url {
    fn parse(url: &str) -> Result<Self, Error> {
        let invalid = |why: &str| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("invalid URL `{}`: {why}", url.escape_debug()),
            )
        };
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(
                "it contains whitespace or control characters (percent-encode them)",
            ));
        }
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("it does not start with http:// or https://"))?;
        let https = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return Err(invalid("only http and https URLs are supported"));
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        if authority.contains('@') {
            return Err(invalid(
                "credentials in a URL are not supported; send them in an Authorization header",
            ));
        }
        check_authority(authority).map_err(|why| invalid(&why))?;
        let tail = tail.split_once('#').map_or(tail, |(before, _)| before);
        let mut path_with_query = String::with_capacity(tail.len() + 1);
        if !tail.starts_with('/') {
            path_with_query.push('/');
        }
        for c in tail.chars() {
            if c.is_ascii() {
                path_with_query.push(c);
            } else {
                let mut utf8 = [0; 4];
                for byte in c.encode_utf8(&mut utf8).bytes() {
                    path_with_query.push_str(&format!("%{byte:02X}"));
                }
            }
        }
        Ok(Self {
            https,
            authority: authority.to_string(),
            path_with_query,
        })
    }

    /// `scheme://authority`: what error messages show of the URL.
    fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }
}

/// Checks `host[:port]`, explaining what is wrong.
fn check_authority(authority: &str) -> Result<(), String> {
    if authority.is_empty() {
        return Err("it has no host".into());
    }
    if !authority.is_ascii() {
        return Err("the host is not ASCII; write an international name in its xn-- form".into());
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (address, after) = bracketed
            .split_once(']')
            .ok_or("an IPv6 address misses its closing `]`")?;
        if address.is_empty()
            || !address.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '%' | '-' | '_' | '~')
            })
        {
            return Err(format!("`[{address}]` is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("only a :port may follow an IPv6 address")?,
            ),
        };
        (None, port)
    } else if authority.matches(':').count() > 1 {
        return Err("an IPv6 address must be written in brackets, as in http://[::1]:8080/".into());
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(authority), None),
        }
    };
    if let Some(host) = host {
        if host.is_empty() {
            return Err("it has no host".into());
        }
        if let Some(bad) = host.chars().find(|&c| !is_host_char(c)) {
            return Err(format!("`{bad}` cannot appear in a host name"));
        }
    }
    if let Some(port) = port
        && (port.is_empty()
            || !port.bytes().all(|b| b.is_ascii_digit())
            || port.parse::<u16>().is_err())
    {
        return Err(format!("`{port}` is not a port number (0 to 65535)"));
    }
    Ok(())
}

/// Characters of a URL host (RFC 3986 `reg-name`: unreserved, sub-delims and
/// percent-encoded bytes).
fn is_host_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '-' | '.'
                | '_'
                | '~'
                | '%'
                | '!'
                | '$'
                | '&'
                | '\''
                | '('
                | ')'
                | '*'
                | '+'
                | ','
                | ';'
                | '='
        )
}

/// Whether `s` is an HTTP token (a header name or method, RFC 9110).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// Checks a header's name and value syntax (which names the node allows is
/// the node's to say).
fn check_header(name: &str, value: &str) -> Result<(), Error> {
    if !is_token(name) {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("`{}` is not a valid header name", name.escape_debug()),
        ));
    }
    // Field values: visible characters, spaces and tabs; never CR, LF or
    // other control characters, which could smuggle extra headers.
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("the value of header `{name}` contains a line break or control character"),
        ));
    }
    Ok(())
}

/// An HTTP response, its body read in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code, e.g. `200`.
    pub status: u16,
    /// The headers in the order received, names in lowercase. A value that
    /// is not UTF-8 is decoded lossily.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is `2xx`.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (any case), if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text. Bodies are read as UTF-8, whatever charset the
    /// `Content-Type` names; one that is not UTF-8 is an error of kind
    /// [`ErrorKind::Decode`].
    pub fn text(&self) -> Result<&str, Error> {
        std::str::from_utf8(&self.body).map_err(|e| {
            Error::new(
                ErrorKind::Decode,
                format!("the response body is not UTF-8 text: {e}"),
            )
        })
    }

    /// The body parsed as JSON into a `T`; a body that is not such JSON is
    /// an error of kind [`ErrorKind::Decode`].
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::new(
                ErrorKind::Decode,
                format!("the response body is not the expected JSON: {e}"),
            )
        })
    }

    /// The response itself if its status is `2xx`, else an error of kind
    /// [`ErrorKind::Status`] naming the status and the start of the body.
    pub fn error_for_status(self) -> Result<Self, Error> {
        if self.is_success() {
            return Ok(self);
        }
        let mut message = format!("the server answered {}", self.status);
        let excerpt = body_excerpt(&self.body);
        if !excerpt.is_empty() {
            message.push_str(": ");
            message.push_str(&excerpt);
        }
        Err(Error {
            kind: ErrorKind::Status,
            message,
            wasi_code: None,
            status: Some(self.status),
        })
    }
}

/// The start of `body` as one line of text, for error messages.
fn body_excerpt(body: &[u8]) -> String {
    const EXCERPT_CHARS: usize = 200;
    let text = String::from_utf8_lossy(body);
    let mut excerpt: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(EXCERPT_CHARS + 1)
        .collect();
    if excerpt.chars().count() > EXCERPT_CHARS {
        excerpt = excerpt.chars().take(EXCERPT_CHARS).collect();
        excerpt.push('…');
    }
    excerpt
}

/// What went wrong with a call, broadly; [`Error::wasi_code`] has the detail
/// the node gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is malformed (URL, method, header), or a header the node
    /// reserves for itself. JobError code `http_invalid_request`.
    InvalidRequest,
    /// The node did not allow the call (`HTTP-request-denied`): no grant of
    /// the job covers it. JobError code `http_denied`.
    Denied,
    /// The call ran out of time: the request's own timeout, or the node's
    /// while connecting or waiting for bytes. JobError code `http_timeout`.
    Timeout,
    /// The name did not resolve, the connection was refused or broke, TLS
    /// failed, or the server's answer was malformed. JobError code
    /// `http_error`.
    Transport,
    /// The response body is larger than the call allows. JobError code
    /// `http_response_too_large`.
    ResponseTooLarge,
    /// The response body is not the text or JSON expected. JobError code
    /// `http_bad_response`.
    Decode,
    /// The server answered with a status that is not `2xx`
    /// ([`Response::error_for_status`]). JobError code `http_status`.
    Status,
}

/// Why a call failed: a kind, a readable message and, when the node reported
/// one, its `wasi:http` error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    wasi_code: Option<String>,
    status: Option<u16>,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            wasi_code: None,
            status: None,
        }
    }

    /// Prefixes the message with `context` (`POST https://host`).
    fn context(mut self, context: &str) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// What went wrong, broadly.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The `wasi:http` error code the node reported, spelled as in the
    /// interface: `HTTP-request-denied`, `connection-refused`,
    /// `DNS-error`, `connection-timeout`, ... `None` when the error was
    /// found by the job itself (a malformed URL, a body too large, the
    /// request's own timeout).
    pub fn wasi_code(&self) -> Option<&str> {
        self.wasi_code.as_deref()
    }

    /// The response status, for an error of kind [`ErrorKind::Status`].
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Whether the call ran out of time.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// The [`JobError`] code this error becomes: `http_invalid_request`,
    /// `http_denied`, `http_timeout`, `http_error`,
    /// `http_response_too_large`, `http_bad_response` or `http_status`.
    pub fn code(&self) -> &'static str {
        match self.kind {
            ErrorKind::InvalidRequest => "http_invalid_request",
            ErrorKind::Denied => "http_denied",
            ErrorKind::Timeout => "http_timeout",
            ErrorKind::Transport => "http_error",
            ErrorKind::ResponseTooLarge => "http_response_too_large",
            ErrorKind::Decode => "http_bad_response",
            ErrorKind::Status => "http_status",
        }
    }

    /// The readable message, the same as [`Display`](fmt::Display) shows.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<Error> for JobError {
    fn from(error: Error) -> Self {
        JobError::new(error.code(), error.message)
    }
}

/// The call itself, over `wasi:http/outgoing-handler`.
///
/// The bindings for the WASI 0.2 interfaces come from the `wasip2` crate
/// (the Bytecode Alliance's maintained bindings, the ones the Rust standard
/// library uses on this target) rather than bindings generated here: its
/// interfaces match what cohort nodes link, and the components it yields
/// import only the functions a job really calls, so jobs that make no HTTP
/// call import nothing more. (`wasi` 0.14 is the same bindings under an
/// older name.)
mod transport {
    use super::{Error, ErrorKind, Method, Prepared, Response, byte_size};
    use std::time::Duration;
    use wasip2::clocks::monotonic_clock;
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        ErrorCode, Fields, HeaderError, IncomingBody, IncomingResponse, Method as WasiMethod,
        OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
    };
    use wasip2::io::poll::{Pollable, poll};
    use wasip2::io::streams::{InputStream, OutputStream, StreamError};

    /// The most bytes asked of a stream at once.
    const CHUNK_BYTES: u64 = 64 * 1024;

    pub(super) fn send(request: Prepared) -> Result<Response, Error> {
        let context = request.context.clone();
        send_inner(request).map_err(|e| e.context(&context))
    }

    fn send_inner(request: Prepared) -> Result<Response, Error> {
        let deadline = request.timeout.map(Deadline::after);

        let headers = Fields::new();
        for (name, value) in &request.headers {
            headers
                .append(name, value.as_bytes())
                .map_err(|e| header_error(name, e))?;
        }
        let outgoing = OutgoingRequest::new(headers);
        let unsupported = |what: &str| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("the node does not accept this request's {what}"),
            )
        };
        outgoing
            .set_method(&wasi_method(&request.method))
            .map_err(|()| unsupported("method"))?;
        let scheme = if request.url.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        outgoing
            .set_scheme(Some(&scheme))
            .map_err(|()| unsupported("scheme"))?;
        outgoing
            .set_authority(Some(&request.url.authority))
            .map_err(|()| unsupported("host"))?;
        outgoing
            .set_path_with_query(Some(&request.url.path_with_query))
            .map_err(|()| unsupported("path or query"))?;

        let options = request.timeout.map(|timeout| {
            let options = RequestOptions::new();
            let nanos = Some(timeout.as_nanos().try_into().unwrap_or(u64::MAX));
            // A node may not support each of these; the deadline kept
            // here bounds the call anyway.
            let _ = options.set_connect_timeout(nanos);
            let _ = options.set_first_byte_timeout(nanos);
            let _ = options.set_between_bytes_timeout(nanos);
            options
        });

        // The body, if any, is written after the request is handed over:
        // the node sends it as it is written, so a body larger than the
        // node's buffer never waits for a request that has not started.
        let body = if request.body.is_empty() {
            None
        } else {
            Some(outgoing.body().map_err(|()| {
                Error::new(ErrorKind::Transport, "the request body is unavailable")
            })?)
        };
        let future = outgoing_handler::handle(outgoing, options).map_err(node_error)?;
        let response_ready = future.subscribe();

        let mut write_error = None;
        if let Some(body) = body {
            match write_body(body, &request.body, &response_ready, deadline.as_ref()) {
                Ok(()) => {}
                Err(e) if e.kind == ErrorKind::Timeout => return Err(e),
                // Whatever stopped the body, the response tells how the
                // call ended: an answer the server gave early, or the
                // node's error code for the request.
                Err(e) => write_error = Some(e),
            }
        }

        let response = loop {
            match future.get() {
                None => wait(&response_ready, deadline.as_ref())?,
                Some(Ok(Ok(response))) => break response,
                Some(Ok(Err(code))) => {
                    return Err(match write_error {
                        // The body broke the request's own rules (its
                        // Content-Length, say): that is the cause.
                        Some(e) if e.kind == ErrorKind::InvalidRequest => e,
                        _ => node_error(code),
                    });
                }
                Some(Err(())) => {
                    return Err(Error::new(
                        ErrorKind::Transport,
                        "the response was already taken",
                    ));
                }
            }
        };
        drop(response_ready);
        // Answers to HEAD, and 1xx, 204 and 304 answers, have no body
        // whatever their Content-Length says.
        let status = response.status();
        let has_body = request.method != Method::Head && !matches!(status, 100..=199 | 204 | 304);
        read_response(
            &response,
            has_body,
            request.max_response_bytes,
            deadline.as_ref(),
        )
    }

    /// Streams `bytes` into `body`, then finishes it.
    fn write_body(
        body: OutgoingBody,
        bytes: &[u8],
        response_ready: &Pollable,
        deadline: Option<&Deadline>,
    ) -> Result<(), Error> {
        let stream = body
            .write()
            .map_err(|()| Error::new(ErrorKind::Transport, "the request body is unavailable"))?;
        let written = write_all(&stream, bytes, response_ready, deadline);
        // The stream is a child of the body: it goes first.
        drop(stream);
        match written {
            Ok(()) => OutgoingBody::finish(body, None).map_err(node_error),
            // Dropping the body unfinished tells the node it is incomplete.
            Err(e) => Err(e),
        }
    }

    fn write_all(
        stream: &OutputStream,
        mut bytes: &[u8],
        response_ready: &Pollable,
        deadline: Option<&Deadline>,
    ) -> Result<(), Error> {
        let writable = stream.subscribe();
        let mut flushing = false;
        loop {
            let permitted = stream.check_write().map_err(stream_error)?;
            if permitted == 0 {
                // Wait for room, unless the node answers first (an early
                // error, or a server that replies before reading it all).
                if wait_any(&[&writable, response_ready], deadline)? == 1 {
                    if bytes.is_empty() {
                        // All written; only the flush was pending.
                        return Ok(());
                    }
                    return Err(Error::new(
                        ErrorKind::Transport,
                        "the server answered before the request body was sent",
                    ));
                }
                continue;
            }
            if bytes.is_empty() {
                if flushing {
                    // Room again after the flush: everything went out.
                    return Ok(());
                }
                stream.flush().map_err(stream_error)?;
                flushing = true;
                continue;
            }
            let n = permitted.min(CHUNK_BYTES).min(bytes.len() as u64) as usize;
            stream.write(&bytes[..n]).map_err(stream_error)?;
            bytes = &bytes[n..];
        }
    }

    fn read_response(
        response: &IncomingResponse,
        has_body: bool,
        limit: usize,
        deadline: Option<&Deadline>,
    ) -> Result<Response, Error> {
        let status = response.status();
        let headers = {
            let fields = response.headers();
            let entries = fields.entries();
            drop(fields);
            entries
                .into_iter()
                .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
                .collect::<Vec<_>>()
        };
        let too_large = || {
            Error::new(
                ErrorKind::ResponseTooLarge,
                format!(
                    "the response body is larger than the {} this call reads \
                     (see Request::max_response_bytes)",
                    byte_size(limit)
                ),
            )
        };
        let declared = headers
            .iter()
            .find(|(name, _)| has_body && name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let body = response.consume().map_err(|()| {
            Error::new(ErrorKind::Transport, "the response body was already taken")
        })?;
        let bytes = read_body(&body, limit, declared, deadline, too_large);
        // Trailers, if any, are not read: dropping the body is enough.
        drop(body);
        Ok(Response {
            status,
            headers,
            body: bytes?,
        })
    }

    fn read_body(
        body: &IncomingBody,
        limit: usize,
        declared: Option<u64>,
        deadline: Option<&Deadline>,
        too_large: impl Fn() -> Error,
    ) -> Result<Vec<u8>, Error> {
        let stream: InputStream = body.stream().map_err(|()| {
            Error::new(ErrorKind::Transport, "the response body was already taken")
        })?;
        let readable = stream.subscribe();
        let mut bytes = Vec::with_capacity(declared.map_or(0, |n| n.min(limit as u64) as usize));
        let result = loop {
            // Ask for one byte past the limit, to tell "exactly the limit"
            // from "more".
            let room = ((limit - bytes.len()) as u64).saturating_add(1);
            match stream.read(room.min(CHUNK_BYTES)) {
                Ok(chunk) if chunk.is_empty() => {
                    if let Err(e) = wait(&readable, deadline) {
                        break Err(e);
                    }
                }
                Ok(chunk) => {
                    if chunk.len() > limit - bytes.len() {
                        break Err(too_large());
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => break Ok(()),
                Err(e) => break Err(stream_error(e)),
            }
        };
        drop(readable);
        drop(stream);
        result.map(|()| bytes)
    }

    /// When the call must be over, on the monotonic clock.
    struct Deadline {
        at: monotonic_clock::Instant,
        timeout: Duration,
    }

    impl Deadline {
        fn after(timeout: Duration) -> Self {
            let nanos = timeout.as_nanos().try_into().unwrap_or(u64::MAX);
            Self {
                at: monotonic_clock::now().saturating_add(nanos),
                timeout,
            }
        }

        fn passed(&self) -> bool {
            monotonic_clock::now() >= self.at
        }

        fn error(&self) -> Error {
            Error::new(
                ErrorKind::Timeout,
                format!(
                    "the call did not complete within its timeout of {:?}",
                    self.timeout
                ),
            )
        }
    }

    fn wait(pollable: &Pollable, deadline: Option<&Deadline>) -> Result<(), Error> {
        wait_any(&[pollable], deadline).map(|_| ())
    }

    /// Blocks until one of `pollables` is ready, returning its index, or
    /// fails once the deadline has passed.
    fn wait_any(pollables: &[&Pollable], deadline: Option<&Deadline>) -> Result<usize, Error> {
        let Some(deadline) = deadline else {
            return Ok(first_ready(&poll(pollables)));
        };
        // Checked first, so that a steady trickle of bytes cannot outlast
        // the deadline.
        if deadline.passed() {
            return Err(deadline.error());
        }
        let timer = monotonic_clock::subscribe_instant(deadline.at);
        let mut all = pollables.to_vec();
        all.push(&timer);
        let ready = poll(&all);
        match ready.iter().find(|&&i| (i as usize) < pollables.len()) {
            Some(&i) => Ok(i as usize),
            None => Err(deadline.error()),
        }
    }

    fn first_ready(ready: &[u32]) -> usize {
        ready.iter().copied().min().unwrap_or(0) as usize
    }

    fn wasi_method(method: &Method) -> WasiMethod {
        match method {
            Method::Get => WasiMethod::Get,
            Method::Head => WasiMethod::Head,
            Method::Post => WasiMethod::Post,
            Method::Put => WasiMethod::Put,
            Method::Delete => WasiMethod::Delete,
            Method::Connect => WasiMethod::Connect,
            Method::Options => WasiMethod::Options,
            Method::Trace => WasiMethod::Trace,
            Method::Patch => WasiMethod::Patch,
            Method::Other(other) => WasiMethod::Other(other.clone()),
        }
    }

    fn header_error(name: &str, error: HeaderError) -> Error {
        let why = match error {
            HeaderError::InvalidSyntax => "is not valid",
            HeaderError::Forbidden => "is set by the node only, not by jobs",
            HeaderError::Immutable => "cannot be changed",
        };
        Error::new(ErrorKind::InvalidRequest, format!("header `{name}` {why}"))
    }

    fn stream_error(error: StreamError) -> Error {
        match error {
            StreamError::Closed => Error::new(ErrorKind::Transport, "the connection was closed"),
            StreamError::LastOperationFailed(io) => {
                match wasip2::http::types::http_error_code(&io) {
                    Some(code) => node_error(code),
                    None => Error::new(ErrorKind::Transport, io.to_debug_string()),
                }
            }
        }
    }

    /// The error for a `wasi:http` error code.
    fn node_error(code: ErrorCode) -> Error {
        let (kind, name, description) = describe(&code);
        Error {
            kind,
            message: format!("{description} ({name})"),
            wasi_code: Some(name.to_string()),
            status: None,
        }
    }

    /// Kind, interface name and readable description of an error code.
    fn describe(code: &ErrorCode) -> (ErrorKind, &'static str, String) {
        use ErrorKind::{Denied, InvalidRequest, ResponseTooLarge, Timeout, Transport};
        let some = |n: Option<u64>| n.map(|n| format!(" ({n} bytes)")).unwrap_or_default();
        let (kind, name, description) = match code {
            ErrorCode::DnsTimeout => (
                Timeout,
                "DNS-timeout",
                "the host name lookup timed out".into(),
            ),
            ErrorCode::DnsError(payload) => (
                Transport,
                "DNS-error",
                match &payload.rcode {
                    Some(rcode) => format!("the host name did not resolve: {rcode}"),
                    None => "the host name did not resolve".into(),
                },
            ),
            ErrorCode::DestinationNotFound => (
                Transport,
                "destination-not-found",
                "the host name did not resolve".into(),
            ),
            ErrorCode::DestinationUnavailable => (
                Transport,
                "destination-unavailable",
                "the server is unavailable".into(),
            ),
            ErrorCode::DestinationIpProhibited => (
                Denied,
                "destination-IP-prohibited",
                "the node does not allow connecting to that address".into(),
            ),
            ErrorCode::DestinationIpUnroutable => (
                Transport,
                "destination-IP-unroutable",
                "the address cannot be reached".into(),
            ),
            ErrorCode::ConnectionRefused => (
                Transport,
                "connection-refused",
                "the connection was refused".into(),
            ),
            ErrorCode::ConnectionTerminated => (
                Transport,
                "connection-terminated",
                "the connection was closed unexpectedly".into(),
            ),
            ErrorCode::ConnectionTimeout => {
                (Timeout, "connection-timeout", "connecting timed out".into())
            }
            ErrorCode::ConnectionReadTimeout => (
                Timeout,
                "connection-read-timeout",
                "reading from the server timed out".into(),
            ),
            ErrorCode::ConnectionWriteTimeout => (
                Timeout,
                "connection-write-timeout",
                "writing to the server timed out".into(),
            ),
            ErrorCode::ConnectionLimitReached => (
                Transport,
                "connection-limit-reached",
                "the node's connection limit was reached".into(),
            ),
            ErrorCode::TlsProtocolError => (
                Transport,
                "TLS-protocol-error",
                "the TLS handshake failed".into(),
            ),
            ErrorCode::TlsCertificateError => (
                Transport,
                "TLS-certificate-error",
                "the server's TLS certificate was not accepted".into(),
            ),
            ErrorCode::TlsAlertReceived(payload) => (
                Transport,
                "TLS-alert-received",
                match &payload.alert_message {
                    Some(message) => format!("the server sent a TLS alert: {message}"),
                    None => "the server sent a TLS alert".into(),
                },
            ),
            ErrorCode::HttpRequestDenied => (
                Denied,
                "HTTP-request-denied",
                "the node did not allow this request: no HTTP grant of this job covers it".into(),
            ),
            ErrorCode::HttpRequestLengthRequired => (
                InvalidRequest,
                "HTTP-request-length-required",
                "the request needs a Content-Length".into(),
            ),
            ErrorCode::HttpRequestBodySize(n) => (
                InvalidRequest,
                "HTTP-request-body-size",
                match n {
                    Some(n) => {
                        format!("the request body ({n} bytes) does not match its Content-Length")
                    }
                    None => "the request body does not match its Content-Length".into(),
                },
            ),
            ErrorCode::HttpRequestMethodInvalid => (
                InvalidRequest,
                "HTTP-request-method-invalid",
                "the method is not valid".into(),
            ),
            ErrorCode::HttpRequestUriInvalid => (
                InvalidRequest,
                "HTTP-request-URI-invalid",
                "the URL is not valid".into(),
            ),
            ErrorCode::HttpRequestUriTooLong => (
                InvalidRequest,
                "HTTP-request-URI-too-long",
                "the URL is too long".into(),
            ),
            ErrorCode::HttpRequestHeaderSectionSize(_) => (
                InvalidRequest,
                "HTTP-request-header-section-size",
                "the request headers are too large".into(),
            ),
            ErrorCode::HttpRequestHeaderSize(_) => (
                InvalidRequest,
                "HTTP-request-header-size",
                "a request header is too large".into(),
            ),
            ErrorCode::HttpRequestTrailerSectionSize(_) => (
                InvalidRequest,
                "HTTP-request-trailer-section-size",
                "the request trailers are too large".into(),
            ),
            ErrorCode::HttpRequestTrailerSize(_) => (
                InvalidRequest,
                "HTTP-request-trailer-size",
                "a request trailer is too large".into(),
            ),
            ErrorCode::HttpResponseIncomplete => (
                Transport,
                "HTTP-response-incomplete",
                "the response ended early".into(),
            ),
            ErrorCode::HttpResponseHeaderSectionSize(_) => (
                Transport,
                "HTTP-response-header-section-size",
                "the response headers are too large".into(),
            ),
            ErrorCode::HttpResponseHeaderSize(_) => (
                Transport,
                "HTTP-response-header-size",
                "a response header is too large".into(),
            ),
            ErrorCode::HttpResponseBodySize(n) => (
                ResponseTooLarge,
                "HTTP-response-body-size",
                format!("the response body is too large{}", some(*n)),
            ),
            ErrorCode::HttpResponseTrailerSectionSize(_) => (
                Transport,
                "HTTP-response-trailer-section-size",
                "the response trailers are too large".into(),
            ),
            ErrorCode::HttpResponseTrailerSize(_) => (
                Transport,
                "HTTP-response-trailer-size",
                "a response trailer is too large".into(),
            ),
            ErrorCode::HttpResponseTransferCoding(coding) => (
                Transport,
                "HTTP-response-transfer-coding",
                match coding {
                    Some(coding) => {
                        format!("the response's transfer coding `{coding}` is not supported")
                    }
                    None => "the response's transfer coding is not supported".into(),
                },
            ),
            ErrorCode::HttpResponseContentCoding(coding) => (
                Transport,
                "HTTP-response-content-coding",
                match coding {
                    Some(coding) => {
                        format!("the response's content coding `{coding}` is not supported")
                    }
                    None => "the response's content coding is not supported".into(),
                },
            ),
            ErrorCode::HttpResponseTimeout => (
                Timeout,
                "HTTP-response-timeout",
                "the server did not answer in time".into(),
            ),
            ErrorCode::HttpUpgradeFailed => (
                Transport,
                "HTTP-upgrade-failed",
                "the protocol upgrade failed".into(),
            ),
            ErrorCode::HttpProtocolError => (
                Transport,
                "HTTP-protocol-error",
                "the server's answer broke the HTTP protocol".into(),
            ),
            ErrorCode::LoopDetected => (
                Transport,
                "loop-detected",
                "a request loop was detected".into(),
            ),
            ErrorCode::ConfigurationError => (
                Transport,
                "configuration-error",
                "the node's HTTP configuration refused the request".into(),
            ),
            ErrorCode::InternalError(detail) => (
                Transport,
                "internal-error",
                match detail {
                    Some(detail) => format!("the node failed to make the request: {detail}"),
                    None => "the node failed to make the request".into(),
                },
            ),
        };
        (kind, name, description)
    }
}

/// `1048576` as `1 MiB`, for messages.
fn byte_size(bytes: usize) -> String {
    const MIB: usize = 1 << 20;
    const KIB: usize = 1 << 10;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn url_error(s: &str) -> String {
        let error = Url::parse(s).expect_err(s);
        assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{s}");
        assert_eq!(error.code(), "http_invalid_request");
        error.to_string()
    }

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        let u = url("https://api.example.com/v1/items?page=2#top");
        assert!(u.https);
        assert_eq!(u.authority, "api.example.com");
        assert_eq!(u.path_with_query, "/v1/items?page=2");
        assert_eq!(u.origin(), "https://api.example.com");

        let u = url("HTTP://127.0.0.1:8080");
        assert!(!u.https);
        assert_eq!(u.authority, "127.0.0.1:8080");
        assert_eq!(u.path_with_query, "/");

        assert_eq!(url("http://h?q=1").path_with_query, "/?q=1");
        assert_eq!(url("http://h#frag").path_with_query, "/");
        assert_eq!(url("http://[::1]:9000/x").authority, "[::1]:9000");
        assert_eq!(
            url("http://[fe80::1%25eth0]/").authority,
            "[fe80::1%25eth0]"
        );
    }

    #[test]
    fn hosts_and_paths_are_sent_as_written() {
        // The node, not the SDK, decides what these mean and whether a
        // grant covers them.
        for (input, authority, path) in [
            ("http://0x7f.1/", "0x7f.1", "/"),
            ("http://2130706433/", "2130706433", "/"),
            ("http://LOCALHOST.:80/", "LOCALHOST.:80", "/"),
            ("http://a%2eb/", "a%2eb", "/"),
            ("http://h/v1/../admin", "h", "/v1/../admin"),
            ("http://h/a%2F..%2Fb", "h", "/a%2F..%2Fb"),
        ] {
            let u = url(input);
            assert_eq!(
                (u.authority.as_str(), u.path_with_query.as_str()),
                (authority, path)
            );
        }
    }

    #[test]
    fn non_ascii_paths_are_percent_encoded() {
        assert_eq!(
            url("http://h/café?q=ü").path_with_query,
            "/caf%C3%A9?q=%C3%BC"
        );
    }

    #[test]
    fn malformed_urls_are_explained() {
        assert!(url_error("example.com/x").contains("http:// or https://"));
        assert!(url_error("ftp://example.com/").contains("only http and https"));
        assert!(url_error("http:///path").contains("no host"));
        assert!(url_error("http://:80/").contains("no host"));
        assert!(url_error("http://user:pw@host/").contains("Authorization header"));
        assert!(url_error("http://host:99999/").contains("port"));
        assert!(url_error("http://host:/").contains("port"));
        assert!(url_error("http://host:8o/").contains("port"));
        assert!(url_error("http://::1/").contains("brackets"));
        assert!(url_error("http://[::1/").contains("`]`"));
        assert!(url_error("http://[::1]x/").contains(":port"));
        assert!(url_error("http://exa mple.com/").contains("whitespace"));
        assert!(url_error("http://host/a\r\nX: y").contains("control"));
        assert!(url_error("http://bücher.de/").contains("xn--"));
        assert!(url_error("http://ho<st/").contains("`<`"));
        // Messages quote the URL escaped, on one line.
        assert!(!url_error("http://h\n/").contains('\n'));
    }

    #[test]
    fn header_names_and_values_are_checked() {
        let prepare = |name: &str, value: &str| {
            Request::new(Method::Get, "http://h/")
                .header(name, value)
                .prepare()
        };
        assert!(prepare("X-Trace-Id", "abc 123\tdef").is_ok());
        assert!(prepare("Host", "other.example").is_ok(), "the node decides");
        for (name, value) in [
            ("", "v"),
            ("Bad Name", "v"),
            ("Bad:Name", "v"),
            ("X-Ok", "a\r\nInjected: yes"),
            ("X-Ok", "a\nb"),
            ("X-Ok", "nul\0"),
        ] {
            let error = prepare(name, value).expect_err(name);
            assert_eq!(error.kind(), ErrorKind::InvalidRequest);
            assert!(error.message().starts_with("GET http://h: "), "{error}");
        }
    }

    #[test]
    fn content_length_is_added_for_bodies() {
        let length = |request: Request| {
            let prepared = request.prepare().unwrap();
            prepared
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.clone())
        };
        assert_eq!(length(Request::new(Method::Get, "http://h/")), None);
        assert_eq!(
            length(Request::new(Method::Post, "http://h/")),
            Some("0".into())
        );
        assert_eq!(
            length(Request::new(Method::Put, "http://h/").body("hello")),
            Some("5".into())
        );
        assert_eq!(
            length(
                Request::new(Method::Post, "http://h/")
                    .header("content-length", "5")
                    .body("hello")
            ),
            Some("5".into())
        );
    }

    #[test]
    fn json_bodies_set_the_content_type_once() {
        let prepared = Request::new(Method::Post, "http://h/")
            .json(&serde_json::json!({"a": 1}))
            .prepare()
            .unwrap();
        assert_eq!(prepared.body, br#"{"a":1}"#);
        let types: Vec<_> = prepared
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            .collect();
        assert_eq!(types.len(), 1);
        assert_eq!(types[0].1, "application/json");

        let prepared = Request::new(Method::Post, "http://h/")
            .header("content-type", "application/vnd.api+json")
            .json(&[1, 2])
            .prepare()
            .unwrap();
        let types: Vec<_> = prepared
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(types, ["application/vnd.api+json"]);
    }

    #[test]
    fn unencodable_json_fails_at_send() {
        let mut map = std::collections::HashMap::new();
        map.insert(vec![1u8], 1);
        let error = Request::new(Method::Post, "http://h/")
            .json(&map)
            .prepare()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidRequest);
        assert!(error.message().contains("JSON"), "{error}");
    }

    #[test]
    fn methods_parse_and_print() {
        assert_eq!("POST".parse::<Method>().unwrap(), Method::Post);
        assert_eq!(
            "PROPFIND".parse::<Method>().unwrap(),
            Method::Other("PROPFIND".into())
        );
        assert_eq!(
            "get".parse::<Method>().unwrap(),
            Method::Other("get".into())
        );
        assert!("BAD METHOD".parse::<Method>().is_err());
        assert!("".parse::<Method>().is_err());
        assert_eq!(Method::Delete.to_string(), "DELETE");
        let error = Request::new(Method::Other("NO PE".into()), "http://h/")
            .prepare()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidRequest);
    }

    fn response(status: u16, body: &[u8]) -> Response {
        Response {
            status,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-multi".into(), "1".into()),
                ("x-multi".into(), "2".into()),
            ],
            body: body.to_vec(),
        }
    }

    #[test]
    fn response_helpers() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Thing {
            id: u32,
        }
        let ok = response(201, br#"{"id": 7}"#);
        assert!(ok.is_success());
        assert_eq!(ok.header("Content-Type"), Some("application/json"));
        assert_eq!(ok.header("x-multi"), Some("1"));
        assert_eq!(ok.header("missing"), None);
        assert_eq!(ok.text().unwrap(), r#"{"id": 7}"#);
        assert_eq!(ok.json::<Thing>().unwrap(), Thing { id: 7 });
        assert_eq!(ok.clone().error_for_status().unwrap(), ok);

        let not_json = response(200, b"<html>");
        let error = not_json.json::<Thing>().unwrap_err();
        assert_eq!(
            (error.kind(), error.code()),
            (ErrorKind::Decode, "http_bad_response")
        );
        let error = response(200, &[0xff, 0xfe]).text().unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Decode);
    }

    #[test]
    fn error_for_status_names_status_and_body() {
        let error = response(503, b"  upstream\n  down  ")
            .error_for_status()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Status);
        assert_eq!(error.status(), Some(503));
        assert_eq!(error.to_string(), "the server answered 503: upstream down");
        assert!(!response(302, b"").is_success());

        let long = response(500, &[b'x'; 1000]).error_for_status().unwrap_err();
        assert!(long.message().ends_with('…'));
        assert!(long.message().len() < 300);
    }

    #[test]
    fn errors_become_job_errors() {
        let job_error: JobError = Error::new(ErrorKind::Denied, "no grant").into();
        assert_eq!(job_error, JobError::new("http_denied", "no grant"));
        let codes: Vec<_> = [
            ErrorKind::InvalidRequest,
            ErrorKind::Denied,
            ErrorKind::Timeout,
            ErrorKind::Transport,
            ErrorKind::ResponseTooLarge,
            ErrorKind::Decode,
            ErrorKind::Status,
        ]
        .into_iter()
        .map(|kind| Error::new(kind, "").code())
        .collect();
        assert!(codes.iter().all(|c| c.starts_with("http_")));
        let unique: std::collections::HashSet<_> = codes.iter().collect();
        assert_eq!(unique.len(), codes.len());

        fn job() -> Result<(), JobError> {
            Err(Error::new(ErrorKind::Timeout, "slow"))?;
            Ok(())
        }
        assert_eq!(job().unwrap_err().code, "http_timeout");
    }

    #[test]
    fn byte_sizes_read_well() {
        assert_eq!(byte_size(MAX_RESPONSE_BYTES), "64 MiB");
        assert_eq!(byte_size(2048), "2 KiB");
        assert_eq!(byte_size(1000), "1000 bytes");
    }
}
