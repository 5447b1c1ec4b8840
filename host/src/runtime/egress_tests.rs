//! Tests of [`super`]: the address rules as a pure function, and the hook's
//! send path against servers on 127.0.0.1 (plain and TLS) that answer,
//! stay silent, trickle or answer too much; the headers grants fill from
//! secrets, and a job whose log is masked. Every test is bounded in time.

use super::super::job_log::{JobLog, Mask};
use super::super::tape::{Recorder, Recording};
use super::*;
use http_body_util::Full;
use std::convert::Infallible;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The longest any test here may take.
const TEST_TIME: Duration = Duration::from_secs(20);

async fn in_time<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(TEST_TIME, test)
        .await
        .expect("the test finished in time")
}

/// Bounds short enough for tests.
fn quick() -> EgressLimits {
    EgressLimits {
        connect_timeout: Duration::from_secs(2),
        first_byte_timeout: Duration::from_millis(400),
        between_bytes_timeout: Duration::from_millis(400),
        call_timeout: Duration::from_millis(1200),
        response_bytes: 1000,
        ..EgressLimits::default()
    }
}

fn grant(url: &str) -> HttpGrant {
    HttpGrant::parse(url, &[], false).unwrap()
}

fn private(url: &str) -> HttpGrant {
    HttpGrant::parse(url, &[], true).unwrap()
}

/// `grant` setting `headers` (name, template).
fn setting(grant: HttpGrant, headers: &[(&str, &str)]) -> HttpGrant {
    let headers: Vec<(String, String)> = (headers.iter())
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    grant.with_headers(&headers).unwrap()
}

fn secrets(pairs: &[(&str, &str)]) -> Secrets {
    (pairs.iter())
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

/// The secret the tests fill an `authorization` header with.
const API_KEY: &str = "s3cr3t-value";

/// One attempt's egress, its record and its log.
struct Attempt {
    egress: JobEgress,
    ledger: Ledger,
    log: SharedLog,
}

impl Attempt {
    fn new(grants: Vec<HttpGrant>, limits: EgressLimits) -> Self {
        Self::trusting(grants, limits, None)
    }

    fn trusting(grants: Vec<HttpGrant>, limits: EgressLimits, ca: Option<&Path>) -> Self {
        Self::build(grants, limits, ca, Secrets::default(), Recording::default())
    }

    fn with_secrets(grants: Vec<HttpGrant>, limits: EgressLimits, secrets: Secrets) -> Self {
        Self::build(grants, limits, None, secrets, Recording::default())
    }

    fn build(
        grants: Vec<HttpGrant>,
        limits: EgressLimits,
        ca: Option<&Path>,
        secrets: Secrets,
        recording: Recording,
    ) -> Self {
        let ledger = Ledger::new(None);
        let log = SharedLog::new(JobLog::new(1 << 16, None).masking(Mask::new(&secrets)));
        let egress = Egress::new(ca, limits).unwrap();
        let tape = Tape::new(recording);
        Self {
            egress: JobEgress::new(egress, (grants, secrets), ledger.clone(), log.clone(), tape),
            ledger,
            log,
        }
    }

    /// Sends `request` and reads its response whole: status and body.
    async fn call(&self, request: http::Request<WasiBody>) -> Result<(u16, Vec<u8>), HttpError> {
        let (response, io) = self.egress.send(request, None).await?;
        let io = tokio::spawn(Box::into_pin(io));
        let status = response.status().as_u16();
        let body = response.into_body().collect().await;
        io.abort();
        Ok((status, body?.to_bytes().to_vec()))
    }

    fn record(&self) -> (Vec<HttpCall>, u32) {
        self.ledger.close()
    }

    fn log(&self) -> String {
        String::from_utf8(self.log.take()).unwrap()
    }
}

fn request(method: &str, url: &str, body: &[u8]) -> http::Request<WasiBody> {
    http::Request::builder()
        .method(method)
        .uri(url)
        .body(body_of(body))
        .unwrap()
}

fn body_of(bytes: &[u8]) -> WasiBody {
    Full::new(Bytes::copy_from_slice(bytes))
        .map_err(|never: Infallible| -> HttpError { match never {} })
        .boxed_unsync()
}

fn get(url: &str) -> http::Request<WasiBody> {
    request("GET", url, b"")
}

/// What a test server read of one request.
#[derive(Debug)]
struct Heard {
    /// The request line and headers, header names lowercased.
    head: String,
    body: Vec<u8>,
}

/// How a test server answers.
#[derive(Debug, Clone)]
enum Answer {
    /// `200` with this body.
    Body(Vec<u8>),
    /// Nothing, keeping the connection open.
    Silent,
    /// A head promising 100,000 bytes, then one byte every 20 ms.
    Trickle,
}

/// A server on 127.0.0.1 (TLS with `tls`) answering every request with
/// `answer`; what it heard comes out of the receiver.
async fn server(
    answer: Answer,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (u16, mpsc::UnboundedReceiver<Heard>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (heard, hearing) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (answer, heard, tls) = (answer.clone(), heard.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve(stream, answer, heard).await;
                        }
                    }
                    None => serve(stream, answer, heard).await,
                }
            });
        }
    });
    (port, hearing)
}

async fn serve<S>(mut stream: S, answer: Answer, heard: mpsc::UnboundedSender<Heard>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut read = Vec::new();
    let head_end = loop {
        if let Some(at) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => read.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&read[..head_end]).into_owned();
    let head: String = head
        .lines()
        .map(|line| match line.split_once(':') {
            Some((name, value)) => format!("{}:{value}\n", name.to_ascii_lowercase()),
            None => format!("{line}\n"),
        })
        .collect();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    let mut body = read[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = heard.send(Heard { head, body });
    match answer {
        Answer::Body(body) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(&body).await;
            let _ = stream.flush().await;
            let _ = stream.shutdown().await;
        }
        Answer::Silent => std::future::pending::<()>().await,
        Answer::Trickle => {
            let head = "HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n";
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut every = tokio::time::interval(Duration::from_millis(20));
            loop {
                every.tick().await;
                if stream.write_all(b"x").await.is_err() || stream.flush().await.is_err() {
                    return;
                }
            }
        }
    }
}

fn the_call(record: &(Vec<HttpCall>, u32)) -> &HttpCall {
    assert_eq!(record.0.len(), 1, "one call recorded: {record:?}");
    &record.0[0]
}

// ---- Addresses

#[test]
fn addresses_are_classified_by_what_they_reach() {
    use AddressKind::*;
    let cases: &[(&str, AddressKind)] = &[
        ("93.184.215.14", Public),
        ("2606:4700::1111", Public),
        ("1.1.1.1", Public),
        ("0.0.0.0", Unspecified),
        ("::", Unspecified),
        ("255.255.255.255", Broadcast),
        ("224.0.0.1", Multicast),
        ("ff02::1", Multicast),
        ("169.254.169.254", Metadata),
        ("fd00:ec2::254", Metadata),
        ("100.100.100.200", Metadata),
        ("127.0.0.1", Loopback),
        ("127.255.255.254", Loopback),
        ("::1", Loopback),
        ("::ffff:127.0.0.1", Loopback),
        ("::ffff:7f00:1", Loopback),
        ("::127.0.0.1", Loopback),
        ("64:ff9b::7f00:1", Loopback),
        ("2002:7f00:1::", Loopback),
        ("::ffff:169.254.169.254", Metadata),
        ("64:ff9b::a9fe:a9fe", Metadata),
        ("64:ff9b::5db8:d70e", Public),
        ("::ffff:0.0.0.0", Unspecified),
        ("10.0.0.1", Private),
        ("172.16.0.1", Private),
        ("172.31.255.1", Private),
        ("192.168.1.1", Private),
        ("::ffff:10.1.2.3", Private),
        ("fec0::1", Private),
        ("172.32.0.1", Public),
        ("169.254.1.1", LinkLocal),
        ("fe80::1", LinkLocal),
        ("100.64.0.1", Shared),
        ("100.127.255.1", Shared),
        ("100.128.0.1", Public),
        ("fc00::1", UniqueLocal),
        ("fd12:3456::1", UniqueLocal),
        ("0.1.2.3", Reserved),
        ("192.0.0.8", Reserved),
        ("198.18.0.1", Reserved),
        ("198.19.255.1", Reserved),
        ("240.0.0.1", Reserved),
        ("2001::1", Reserved),
        ("100::1", Reserved),
        ("64:ff9b:1::1", Reserved),
        ("4000::1", Reserved),
        ("192.0.2.1", Documentation),
        ("198.51.100.1", Documentation),
        ("203.0.113.1", Documentation),
        ("2001:db8::1", Documentation),
        ("3fff::1", Documentation),
    ];
    for (text, kind) in cases {
        let ip: IpAddr = text.parse().unwrap();
        assert_eq!(classify(ip), *kind, "{text}");
    }
}

#[test]
fn a_grant_permits_public_addresses_and_others_only_as_its_rules_say() {
    let ip = |text: &str| -> IpAddr { text.parse().unwrap() };
    let name = grant("http://api.example.com");
    let named_private = private("http://api.example.com");
    let metadata = grant("http://169.254.169.254");
    let loopback = grant("http://127.0.0.1:*");

    for public in ["93.184.215.14", "2606:4700::1111"] {
        assert!(permits(&name, ip(public)), "{public}");
    }
    for never in ["0.0.0.0", "::", "255.255.255.255", "224.0.0.1", "ff02::1"] {
        for g in [&name, &named_private, &metadata, &loopback] {
            assert!(!permits(g, ip(never)), "{never} for {}", g.url());
        }
    }
    for non_public in [
        "127.0.0.1",
        "::1",
        "::ffff:127.0.0.1",
        "10.0.0.1",
        "172.31.0.1",
        "100.64.0.1",
        "fe80::1",
        "fc00::1",
        "192.0.2.1",
    ] {
        assert!(!permits(&name, ip(non_public)), "{non_public}");
        assert!(permits(&named_private, ip(non_public)), "{non_public}");
    }
    // Metadata: only a grant of exactly that address, `private` or not.
    for meta in ["169.254.169.254", "fd00:ec2::254", "100.100.100.200"] {
        assert!(!permits(&name, ip(meta)), "{meta}");
        assert!(!permits(&named_private, ip(meta)), "{meta}");
    }
    assert!(permits(&metadata, ip("169.254.169.254")));
    assert!(!permits(&metadata, ip("::ffff:169.254.169.254")));
    assert!(permits(
        &grant("http://[fd00:ec2::254]"),
        ip("fd00:ec2::254")
    ));
    // An address grant reaches its own address, not its neighbours.
    assert!(permits(&loopback, ip("127.0.0.1")));
    assert!(!permits(&loopback, ip("127.0.0.2")));
    assert!(!permits(&loopback, ip("::1")));
}

#[tokio::test]
async fn the_resolver_reads_numeric_hosts_as_the_addresses_they_are() {
    in_time(async {
        let by = Deadline::now() + Duration::from_secs(5);
        // What URL parsers and the C resolver read as 127.0.0.1.
        for host in [
            "2130706433",
            "0177.0.0.1",
            "0x7f000001",
            "127.1",
            "localhost",
        ] {
            match resolve(host, 80, by, &Mutex::default()).await {
                Ok(addresses) => {
                    assert!(!addresses.is_empty());
                    for ip in addresses {
                        assert_eq!(classify(ip), AddressKind::Loopback, "{host}: {ip}");
                        assert!(!permits(&grant("http://example.com"), ip), "{host}");
                    }
                }
                // Not resolving at all is as safe.
                Err(failure) => assert_eq!(failure.error, CallError::DnsFailed, "{host}"),
            }
        }
        let zeros = resolve("0.0.0.0", 80, by, &Mutex::default())
            .await
            .ok()
            .unwrap_or_default();
        assert!(
            zeros
                .iter()
                .all(|ip| classify(*ip) == AddressKind::Unspecified)
        );
    })
    .await;
}

#[test]
fn uris_are_taken_apart_as_grants_see_them() {
    let target = |uri: &str| Target::of(&uri.parse::<Uri>().unwrap());
    let t = target("HTTP://API.Example.COM./v1?q=1").unwrap();
    assert_eq!(
        (t.https, t.host.as_str(), t.port, t.ip, t.authority.as_str()),
        (false, "api.example.com", 80, None, "api.example.com")
    );
    assert_eq!(t.origin(), "http://api.example.com:80");
    let t = target("https://user:secret@[::1]:8443/").unwrap();
    assert_eq!(
        (t.host.as_str(), t.port, t.authority.as_str()),
        ("::1", 8443, "[::1]:8443")
    );
    assert_eq!(t.ip, Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    assert_eq!(t.origin(), "https://[::1]:8443");
    let t = target("https://10.0.0.5").unwrap();
    assert_eq!(
        (t.port, t.ip),
        (443, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5))))
    );
    // Only the dotted-decimal form is an address; the rest are names,
    // which are resolved and checked.
    assert_eq!(target("http://0177.0.0.1").unwrap().ip, None);
    assert_eq!(target("http://2130706433").unwrap().ip, None);
    for bad in [
        "ftp://example.com/",
        "/just/a/path",
        "http://example.com:0/",
    ] {
        let origin = target(bad).unwrap_err();
        assert!(!origin.contains("secret"), "{origin}");
    }
}

// ---- Sending

#[tokio::test]
async fn an_allowed_get_and_post_return_status_and_body_and_are_recorded() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(b"hello".to_vec()), None).await;
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], quick());

        let url = format!("http://127.0.0.1:{port}/v1/items?token=secret");
        let got = attempt.call(get(&url)).await.unwrap();
        assert_eq!(got, (200, b"hello".to_vec()));
        let first = heard.recv().await.unwrap();
        assert!(
            first
                .head
                .starts_with("GET /v1/items?token=secret HTTP/1.1\n"),
            "the request line is origin-form: {}",
            first.head
        );

        let url = format!("http://127.0.0.1:{port}/v1/items");
        let got = attempt
            .call(request("POST", &url, b"payload"))
            .await
            .unwrap();
        assert_eq!(got, (200, b"hello".to_vec()));
        let second = heard.recv().await.unwrap();
        assert!(second.head.starts_with("POST /v1/items HTTP/1.1\n"));
        assert_eq!(second.body, b"payload");

        let log = attempt.log();
        let (calls, dropped) = attempt.record();
        assert_eq!(dropped, 0);
        let origin = format!("http://127.0.0.1:{port}");
        assert_eq!(calls.len(), 2);
        for (call, (method, sent)) in calls.iter().zip([("GET", 0), ("POST", 7)]) {
            assert_eq!(call.method, method);
            assert_eq!(call.origin, origin);
            assert_eq!(call.status, Some(200));
            assert_eq!(call.error, None);
            assert_eq!(call.sent_bytes, sent);
            assert_eq!(call.received_bytes, 5);
        }
        assert!(
            log.is_empty(),
            "nothing to say about calls that went well: {log}"
        );
    })
    .await;
}

#[tokio::test]
async fn ungranted_requests_are_refused_recorded_and_logged() {
    in_time(async {
        let g = HttpGrant::parse("http://127.0.0.1:8080/v1/", &["GET".into()], false).unwrap();
        let attempt = Attempt::new(vec![g], quick());
        for (method, url) in [
            ("GET", "http://127.0.0.2:8080/v1/x"),
            ("GET", "http://127.0.0.1:8081/v1/x"),
            ("POST", "http://127.0.0.1:8080/v1/x?key=secret"),
            ("GET", "http://127.0.0.1:8080/v2/secret-path"),
            ("GET", "https://127.0.0.1:8080/v1/x"),
            ("GET", "http://localhost:8080/v1/x"),
            ("GET", "http://2130706433:8080/v1/x"),
        ] {
            let refused = attempt.call(request(method, url, b"")).await.unwrap_err();
            assert!(
                matches!(refused, HttpError::HttpRequestDenied),
                "{url}: {refused}"
            );
        }
        let log = attempt.log();
        let (calls, _) = attempt.record();
        assert_eq!(calls.len(), 7);
        assert!(
            calls
                .iter()
                .all(|c| c.error.as_deref() == Some("egress_denied"))
        );
        assert!(
            calls
                .iter()
                .all(|c| c.status.is_none() && c.sent_bytes == 0)
        );
        assert_eq!(calls[2].method, "POST");
        assert_eq!(calls[2].origin, "http://127.0.0.1:8080");
        assert!(
            log.contains("egress_denied: POST http://127.0.0.1:8080 is not granted to this job\n"),
            "{log}"
        );
        assert_eq!(log.lines().count(), 7, "{log}");
        assert!(
            !log.contains("secret"),
            "no path or query in the log: {log}"
        );

        // No grants at all: no network, every request refused and recorded.
        let none = Attempt::new(Vec::new(), quick());
        let refused = none.call(get("https://example.com/")).await.unwrap_err();
        assert!(matches!(refused, HttpError::HttpRequestDenied));
        let record = none.record();
        assert_eq!(the_call(&record).error.as_deref(), Some("egress_denied"));
        assert_eq!(the_call(&record).origin, "https://example.com:443");
    })
    .await;
}

#[tokio::test]
async fn a_name_resolving_to_loopback_needs_a_private_grant() {
    in_time(async {
        let (port, _heard) = server(Answer::Body(b"local".to_vec()), None).await;
        let url = format!("http://localhost:{port}/");

        let public_only = Attempt::new(vec![grant(&format!("http://localhost:{port}"))], quick());
        let refused = public_only.call(get(&url)).await.unwrap_err();
        assert!(matches!(refused, HttpError::DestinationIpProhibited), "{refused}");
        let log = public_only.log();
        assert!(
            log.contains(&format!(
                "egress_address_refused: GET http://localhost:{port} resolves only to loopback addresses"
            )) && !log.contains("127.0.0.1"),
            "{log}"
        );
        let record = public_only.record();
        assert_eq!(
            the_call(&record).error.as_deref(),
            Some("egress_address_refused")
        );

        let allowed = Attempt::new(vec![private(&format!("http://localhost:{port}"))], quick());
        assert_eq!(allowed.call(get(&url)).await.unwrap(), (200, b"local".to_vec()));
        let record = allowed.record();
        assert_eq!(the_call(&record).status, Some(200));
        assert_eq!(the_call(&record).origin, format!("http://localhost:{port}"));
    })
    .await;
}

#[tokio::test]
async fn a_literal_address_grant_reaches_that_address_and_no_other_spelling() {
    in_time(async {
        let (port, _heard) = server(Answer::Body(b"ok".to_vec()), None).await;
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], quick());
        let got = attempt
            .call(get(&format!("http://127.0.0.1:{port}/")))
            .await;
        assert_eq!(got.unwrap(), (200, b"ok".to_vec()));
        for other in [
            format!("http://2130706433:{port}/"),
            format!("http://0x7f000001:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://localhost:{port}/"),
        ] {
            let refused = attempt.call(get(&other)).await.unwrap_err();
            assert!(matches!(refused, HttpError::HttpRequestDenied), "{other}");
        }
    })
    .await;
}

#[tokio::test]
async fn the_jobs_host_header_is_replaced_and_hop_by_hop_headers_are_dropped() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(Vec::new()), None).await;
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], quick());
        let mut sent = get(&format!("http://127.0.0.1:{port}/"));
        for (name, value) in [
            ("host", "metadata.internal"),
            ("x-keep", "kept"),
            ("connection", "x-listed"),
            ("x-listed", "dropped"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic c2VjcmV0"),
            ("te", "trailers"),
            ("trailer", "x-trailer"),
            ("upgrade", "websocket"),
        ] {
            sent.headers_mut().append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        assert_eq!(attempt.call(sent).await.unwrap().0, 200);
        let head = heard.recv().await.unwrap().head;
        let hosts: Vec<&str> = head.lines().filter(|l| l.starts_with("host:")).collect();
        assert_eq!(hosts, [format!("host: 127.0.0.1:{port}")], "{head}");
        assert!(head.contains("x-keep: kept\n"), "{head}");
        for gone in [
            "metadata.internal",
            "x-listed",
            "keep-alive",
            "proxy-authorization",
            "te:",
            "trailer",
            "upgrade",
        ] {
            assert!(!head.contains(gone), "{gone} was forwarded: {head}");
        }
    })
    .await;
}

#[tokio::test]
async fn a_response_over_the_bound_fails_response_too_large() {
    in_time(async {
        let (port, _heard) = server(Answer::Body(vec![b'x'; 5000]), None).await;
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], quick());
        let failed = attempt
            .call(get(&format!("http://127.0.0.1:{port}/")))
            .await
            .unwrap_err();
        assert!(
            matches!(failed, HttpError::HttpResponseBodySize(_)),
            "{failed}"
        );
        let log = attempt.log();
        assert!(log.contains("egress_response_too_large: GET"), "{log}");
        let record = attempt.record();
        let call = the_call(&record);
        assert_eq!(call.error.as_deref(), Some("egress_response_too_large"));
        assert_eq!(call.status, Some(200));
        assert!(call.received_bytes > 1000, "{call:?}");
    })
    .await;
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    in_time(async {
        let (port, _heard) = server(Answer::Silent, None).await;
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], quick());
        let started = Instant::now();
        let failed = attempt
            .call(get(&format!("http://127.0.0.1:{port}/")))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(
            matches!(failed, HttpError::ConnectionReadTimeout),
            "{failed}"
        );
        assert!(took >= quick().first_byte_timeout, "{took:?}");
        assert!(took < quick().call_timeout, "{took:?}");
        let record = attempt.record();
        assert_eq!(the_call(&record).error.as_deref(), Some("egress_timeout"));
        assert_eq!(the_call(&record).status, None);
    })
    .await;
}

#[tokio::test]
async fn the_jobs_own_shorter_timeout_is_kept() {
    in_time(async {
        let (port, _heard) = server(Answer::Silent, None).await;
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], quick());
        let options = RequestOptions {
            first_byte_timeout: Some(Duration::from_millis(50)),
            ..RequestOptions::default()
        };
        let started = Instant::now();
        let sent = attempt
            .egress
            .send(get(&format!("http://127.0.0.1:{port}/")), Some(options))
            .await;
        assert!(matches!(sent, Err(HttpError::ConnectionReadTimeout)));
        assert!(started.elapsed() < quick().first_byte_timeout);
    })
    .await;
}

#[tokio::test]
async fn a_trickling_server_is_stopped_by_the_call_timeout() {
    in_time(async {
        let (port, _heard) = server(Answer::Trickle, None).await;
        let limits = EgressLimits {
            response_bytes: 1 << 20,
            ..quick()
        };
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], limits);
        let started = Instant::now();
        let failed = attempt
            .call(get(&format!("http://127.0.0.1:{port}/")))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(matches!(failed, HttpError::HttpResponseTimeout), "{failed}");
        assert!(took >= limits.call_timeout, "{took:?}");
        assert!(took < limits.call_timeout * 3, "{took:?}");
        let record = attempt.record();
        let call = the_call(&record);
        assert_eq!(call.error.as_deref(), Some("egress_timeout"));
        assert!(call.received_bytes > 0, "{call:?}");
    })
    .await;
}

/// A CA and a certificate for 127.0.0.1 and localhost signed by it: the
/// CA's PEM file and a TLS acceptor serving the certificate.
fn certificates(dir: &Path) -> (std::path::PathBuf, tokio_rustls::TlsAcceptor) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca_cert.pem()).unwrap();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key.into())
    .unwrap();
    (ca_path, tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[tokio::test]
async fn https_works_with_the_operators_ca_and_fails_without_it() {
    in_time(async {
        let dir = tempfile::tempdir().unwrap();
        let (ca, acceptor) = certificates(dir.path());
        let (port, mut heard) = server(Answer::Body(b"secure".to_vec()), Some(acceptor)).await;
        let grants = vec![
            grant(&format!("https://127.0.0.1:{port}")),
            private(&format!("https://localhost:{port}")),
        ];

        let trusting = Attempt::trusting(grants.clone(), quick(), Some(&ca));
        for url in [
            format!("https://127.0.0.1:{port}/"),
            format!("https://localhost:{port}/"),
        ] {
            let got = trusting.call(get(&url)).await;
            assert_eq!(got.unwrap(), (200, b"secure".to_vec()), "{url}");
            assert!(
                heard
                    .recv()
                    .await
                    .unwrap()
                    .head
                    .starts_with("GET / HTTP/1.1")
            );
        }
        let (calls, _) = trusting.record();
        assert_eq!(calls.len(), 2);
        assert!(
            calls
                .iter()
                .all(|c| c.error.is_none() && c.status == Some(200))
        );

        let untrusting = Attempt::new(grants, quick());
        let failed = untrusting
            .call(get(&format!("https://127.0.0.1:{port}/")))
            .await
            .unwrap_err();
        assert!(matches!(failed, HttpError::TlsCertificateError), "{failed}");
        assert!(
            untrusting
                .log()
                .contains("egress_tls_failed: GET https://127.0.0.1:")
        );
        let record = untrusting.record();
        assert_eq!(
            the_call(&record).error.as_deref(),
            Some("egress_tls_failed")
        );
    })
    .await;
}

#[test]
fn an_unusable_ca_file_is_refused_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let error = Egress::new(Some(&missing), EgressLimits::default()).unwrap_err();
    assert!(
        error.contains("cannot read") && error.contains("missing.pem"),
        "{error}"
    );
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let error = Egress::new(Some(&empty), EgressLimits::default()).unwrap_err();
    assert!(error.contains("holds no PEM certificate"), "{error}");
    let broken = dir.path().join("broken.pem");
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    assert!(Egress::new(Some(&broken), EgressLimits::default()).is_err());
    assert!(Egress::new(None, EgressLimits::default()).is_ok());

    // A runtime refuses to start on one.
    let config = crate::runtime::RuntimeConfig {
        concurrent_jobs: 1,
        egress_ca: Some(empty),
        ..crate::runtime::RuntimeConfig::default()
    };
    match crate::runtime::Runtime::new(config) {
        Err(error @ crate::runtime::RuntimeError::EgressCa(_)) => {
            assert!(error.to_string().contains("empty.pem"), "{error}")
        }
        other => panic!("a runtime started with an unusable CA file: {other:?}"),
    }
}

#[tokio::test]
async fn calls_past_the_attempt_bound_are_refused_and_logged_once() {
    in_time(async {
        let limits = EgressLimits {
            calls_per_attempt: 3,
            ..quick()
        };
        let attempt = Attempt::new(Vec::new(), limits);
        for i in 0..6 {
            let refused = attempt.call(get("http://example.com/")).await.unwrap_err();
            match i {
                0..3 => assert!(matches!(refused, HttpError::HttpRequestDenied)),
                _ => assert!(matches!(refused, HttpError::ConnectionLimitReached)),
            }
        }
        let log = attempt.log();
        assert_eq!(log.matches("egress_calls_exhausted").count(), 1, "{log}");
        let (calls, dropped) = attempt.record();
        let codes: Vec<_> = calls.iter().map(|c| c.error.as_deref().unwrap()).collect();
        assert_eq!(
            codes,
            [
                "egress_denied",
                "egress_denied",
                "egress_denied",
                "egress_calls_exhausted",
                "egress_calls_exhausted",
                "egress_calls_exhausted"
            ]
        );
        assert_eq!(dropped, 0);
    })
    .await;
}

#[tokio::test]
async fn calls_in_flight_at_once_are_bounded_and_later_ones_wait() {
    in_time(async {
        let (port, mut heard) = server(Answer::Silent, None).await;
        let limits = EgressLimits {
            calls_at_once: 2,
            call_timeout: Duration::from_secs(10),
            ..quick()
        };
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], limits);
        let started = Instant::now();
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let egress = attempt.egress.clone();
                let url = format!("http://127.0.0.1:{port}/");
                tokio::spawn(async move { egress.send(get(&url), None).await.map(|_| ()) })
            })
            .collect();
        for _ in 0..3 {
            heard.recv().await.expect("a request reached the server");
        }
        // The third went out only once one of the first two timed out.
        assert!(started.elapsed() >= limits.first_byte_timeout);
        for call in calls {
            let sent = call.await.unwrap();
            assert!(matches!(sent, Err(HttpError::ConnectionReadTimeout)));
        }
        let (calls, _) = attempt.record();
        assert_eq!(calls.len(), 3);
        assert!(
            calls
                .iter()
                .all(|c| c.error.as_deref() == Some("egress_timeout"))
        );
    })
    .await;
}

#[tokio::test]
async fn the_record_keeps_the_first_calls_and_counts_the_rest() {
    in_time(async {
        let attempt = Attempt::new(Vec::new(), quick());
        for i in 0..CALLS_RECORDED_MAX + 6 {
            let url = format!("http://host-{i}.example.com/");
            assert!(attempt.call(get(&url)).await.is_err());
        }
        let (calls, dropped) = attempt.record();
        assert_eq!(calls.len(), CALLS_RECORDED_MAX);
        assert_eq!(dropped, 6);
        assert_eq!(calls[0].origin, "http://host-0.example.com:80");
        assert_eq!(calls[CALLS_RECORDED_MAX - 1].origin, {
            format!("http://host-{}.example.com:80", CALLS_RECORDED_MAX - 1)
        });
        assert!(calls.iter().all(is_bounded));
    })
    .await;
}

#[tokio::test]
async fn an_attempts_bytes_are_bounded_across_its_calls() {
    in_time(async {
        let (port, _heard) = server(Answer::Body(vec![b'x'; 800]), None).await;
        let limits = EgressLimits {
            bytes_per_attempt: 1500,
            ..quick()
        };
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], limits);
        let url = format!("http://127.0.0.1:{port}/");
        assert_eq!(attempt.call(get(&url)).await.unwrap().1.len(), 800);
        let failed = attempt.call(get(&url)).await.unwrap_err();
        assert!(
            matches!(failed, HttpError::HttpResponseBodySize(None)),
            "{failed}"
        );
        let (calls, _) = attempt.record();
        assert_eq!(calls[0].error, None);
        assert_eq!(calls[1].error.as_deref(), Some("egress_bytes_exhausted"));
    })
    .await;
}

#[tokio::test]
async fn a_request_body_over_the_bound_fails_request_too_large() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(Vec::new()), None).await;
        let limits = EgressLimits {
            request_bytes: 100,
            ..quick()
        };
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], limits);
        let url = format!("http://127.0.0.1:{port}/");

        // Announced: refused before any connection.
        let mut announced = request("PUT", &url, &[0; 200]);
        announced
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("200"));
        let failed = attempt.call(announced).await.unwrap_err();
        assert!(
            matches!(failed, HttpError::HttpRequestBodySize(Some(200))),
            "{failed}"
        );

        // Streamed: stopped when it crosses the bound.
        let failed = attempt
            .call(request("PUT", &url, &[0; 200]))
            .await
            .unwrap_err();
        assert!(
            matches!(failed, HttpError::HttpRequestBodySize(_)),
            "{failed}"
        );

        assert!(
            heard.try_recv().is_err(),
            "no whole request reached the server"
        );
        let (calls, _) = attempt.record();
        assert_eq!(calls.len(), 2);
        for call in &calls {
            assert_eq!(call.error.as_deref(), Some("egress_request_too_large"));
        }
    })
    .await;
}

#[tokio::test]
async fn only_http_and_https_urls_with_a_host_are_sent() {
    in_time(async {
        let attempt = Attempt::new(vec![grant("http://example.com")], quick());
        for url in ["ftp://example.com/", "/no/authority"] {
            let refused = attempt.call(get(url)).await.unwrap_err();
            assert!(matches!(refused, HttpError::HttpRequestUriInvalid), "{url}");
        }
        let (calls, _) = attempt.record();
        assert!(
            calls
                .iter()
                .all(|c| c.error.as_deref() == Some("egress_invalid_uri"))
        );
        assert_eq!(calls[0].origin, "ftp://example.com");
    })
    .await;
}

#[tokio::test]
async fn a_call_still_running_when_the_attempt_ends_is_recorded_unfinished() {
    in_time(async {
        let (port, mut heard) = server(Answer::Silent, None).await;
        let limits = EgressLimits {
            first_byte_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(40),
            ..quick()
        };
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], limits);
        let egress = attempt.egress.clone();
        let url = format!("http://127.0.0.1:{port}/");
        let running = tokio::spawn(async move { egress.send(get(&url), None).await.map(|_| ()) });
        heard.recv().await.expect("the request reached the server");
        let record = attempt.record();
        assert_eq!(
            the_call(&record).error.as_deref(),
            Some("egress_unfinished")
        );
        running.abort();
    })
    .await;
}

#[tokio::test]
async fn a_connection_refused_is_recorded_as_such() {
    in_time(async {
        // A port nothing listens on: bound, then closed.
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap().port()
        };
        let attempt = Attempt::new(vec![grant(&format!("http://127.0.0.1:{port}"))], quick());
        let failed = attempt
            .call(get(&format!("http://127.0.0.1:{port}/")))
            .await
            .unwrap_err();
        assert!(matches!(failed, HttpError::ConnectionRefused), "{failed}");
        let record = attempt.record();
        assert_eq!(
            the_call(&record).error.as_deref(),
            Some("egress_connect_failed")
        );
    })
    .await;
}

#[test]
fn codes_are_stable_and_fit_a_record() {
    let all = [
        (CallError::InvalidUri, "egress_invalid_uri"),
        (CallError::Denied, "egress_denied"),
        (CallError::SecretUnavailable, "egress_secret_unavailable"),
        (CallError::CallsExhausted, "egress_calls_exhausted"),
        (CallError::BytesExhausted, "egress_bytes_exhausted"),
        (CallError::RequestTooLarge, "egress_request_too_large"),
        (CallError::ResponseTooLarge, "egress_response_too_large"),
        (CallError::DnsFailed, "egress_dns_failed"),
        (CallError::AddressRefused, "egress_address_refused"),
        (CallError::ConnectFailed, "egress_connect_failed"),
        (CallError::TlsFailed, "egress_tls_failed"),
        (CallError::Timeout, "egress_timeout"),
        (CallError::HttpFailed, "egress_http_failed"),
        (CallError::Unfinished, "egress_unfinished"),
        (CallError::RecordTooLarge, "egress_record_too_large"),
        (CallError::RecordFailed, "egress_record_failed"),
    ];
    assert_eq!(CallError::ALL.len(), all.len());
    for (error, code) in all {
        assert!(CallError::ALL.contains(&error));
        assert_eq!(error.code(), code);
        assert!(code.len() <= ERROR_CODE_BYTES_MAX);
    }
}

// ---- Headers from secrets

/// The lines of `head` for the header `name`.
fn header_lines<'a>(head: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}:");
    head.lines().filter(|l| l.starts_with(&prefix)).collect()
}

#[tokio::test]
async fn a_grants_headers_carry_its_secrets_to_its_host_and_no_other() {
    in_time(async {
        let (a, mut heard_a) = server(Answer::Body(b"a".to_vec()), None).await;
        let (b, mut heard_b) = server(Answer::Body(b"b".to_vec()), None).await;
        let attempt = Attempt::with_secrets(
            vec![
                setting(
                    grant(&format!("http://127.0.0.1:{a}")),
                    &[
                        ("Authorization", "Bearer {secret:API_KEY}"),
                        ("x-team", "team-{secret:TEAM}-1"),
                    ],
                ),
                private(&format!("http://localhost:{b}")),
            ],
            quick(),
            secrets(&[("API_KEY", API_KEY), ("TEAM", "blue")]),
        );

        // The job's own Authorization headers give way to the grant's.
        let mut own = get(&format!("http://127.0.0.1:{a}/v1/charges"));
        let headers = own.headers_mut();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer job-own"),
        );
        headers.append(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic second"),
        );
        headers.insert("x-kept", HeaderValue::from_static("kept"));
        assert_eq!(attempt.call(own).await.unwrap(), (200, b"a".to_vec()));
        let head = heard_a.recv().await.unwrap().head;
        assert_eq!(
            header_lines(&head, "authorization"),
            [format!("authorization: Bearer {API_KEY}")],
            "{head}"
        );
        assert_eq!(header_lines(&head, "x-team"), ["x-team: team-blue-1"]);
        assert_eq!(header_lines(&head, "x-kept"), ["x-kept: kept"]);
        assert!(
            !head.contains("job-own") && !head.contains("second"),
            "{head}"
        );

        // Another granted host gets none of them.
        let other = get(&format!("http://localhost:{b}/"));
        assert_eq!(attempt.call(other).await.unwrap(), (200, b"b".to_vec()));
        let head = heard_b.recv().await.unwrap().head;
        assert!(header_lines(&head, "authorization").is_empty(), "{head}");
        assert!(header_lines(&head, "x-team").is_empty(), "{head}");
        assert!(!head.contains(API_KEY), "{head}");

        // Nothing to log; the record holds no header.
        assert_eq!(attempt.log(), "");
        let (calls, _) = attempt.record();
        assert!(calls.iter().all(|c| c.error.is_none()), "{calls:?}");
        assert!(!format!("{calls:?}").contains(API_KEY));
    })
    .await;
}

#[tokio::test]
async fn grants_allowing_one_request_each_set_their_headers_the_first_winning() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(Vec::new()), None).await;
        let narrow = setting(
            grant(&format!("http://127.0.0.1:{port}/v1")),
            &[("x-which", "narrow")],
        );
        let wide = setting(
            grant(&format!("http://127.0.0.1:{port}")),
            &[("x-which", "wide"), ("x-key", "{secret:API_KEY}")],
        );
        let attempt = Attempt::with_secrets(
            vec![narrow, wide],
            quick(),
            secrets(&[("API_KEY", API_KEY)]),
        );
        for (path, which) in [("/v1/x", "narrow"), ("/v2", "wide")] {
            let url = format!("http://127.0.0.1:{port}{path}");
            assert_eq!(attempt.call(get(&url)).await.unwrap().0, 200);
            let head = heard.recv().await.unwrap().head;
            assert_eq!(
                header_lines(&head, "x-which"),
                [format!("x-which: {which}")]
            );
            assert_eq!(header_lines(&head, "x-key"), [format!("x-key: {API_KEY}")]);
        }
    })
    .await;
}

#[tokio::test]
async fn a_call_needing_a_secret_the_attempt_lacks_is_refused_and_others_go_out() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(b"ok".to_vec()), None).await;
        let attempt = Attempt::with_secrets(
            vec![
                setting(
                    grant(&format!("http://127.0.0.1:{port}/v1")),
                    &[("authorization", "Bearer {secret:API_KEY}")],
                ),
                grant(&format!("http://127.0.0.1:{port}/open")),
            ],
            quick(),
            secrets(&[("OTHER", "other-value")]),
        );
        let refused = attempt
            .call(get(&format!("http://127.0.0.1:{port}/v1/x")))
            .await
            .unwrap_err();
        assert!(matches!(refused, HttpError::HttpRequestDenied), "{refused}");
        let open = attempt
            .call(get(&format!("http://127.0.0.1:{port}/open")))
            .await;
        assert_eq!(open.unwrap(), (200, b"ok".to_vec()));
        let only = heard.recv().await.unwrap();
        assert!(only.head.starts_with("GET /open HTTP/1.1"), "{}", only.head);
        assert!(heard.try_recv().is_err(), "the refused call reached the server");

        let log = attempt.log();
        assert_eq!(
            log,
            format!(
                "[cohort] egress_secret_unavailable: GET http://127.0.0.1:{port} needs the secret API_KEY (header authorization), which this attempt was not given\n"
            )
        );
        let (calls, _) = attempt.record();
        let codes: Vec<Option<&str>> = calls.iter().map(|c| c.error.as_deref()).collect();
        assert_eq!(codes, [Some("egress_secret_unavailable"), None]);
    })
    .await;
}

#[tokio::test]
async fn a_secret_that_makes_no_valid_header_value_refuses_the_call() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(Vec::new()), None).await;
        let attempt = Attempt::with_secrets(
            vec![setting(
                grant(&format!("http://127.0.0.1:{port}")),
                &[("authorization", "Bearer {secret:API_KEY}")],
            )],
            quick(),
            secrets(&[("API_KEY", "line\r\nx-injected: yes")]),
        );
        let refused = attempt
            .call(get(&format!("http://127.0.0.1:{port}/")))
            .await
            .unwrap_err();
        assert!(matches!(refused, HttpError::HttpRequestDenied), "{refused}");
        assert!(heard.try_recv().is_err(), "nothing reached the server");
        let log = attempt.log();
        assert!(
            log.starts_with(&format!(
                "[cohort] egress_secret_unavailable: GET http://127.0.0.1:{port} would carry no valid value in its header authorization (filled from the secret API_KEY)"
            )),
            "{log}"
        );
        assert!(!log.contains("injected"), "no value in the log: {log}");
        let record = attempt.record();
        assert_eq!(
            the_call(&record).error.as_deref(),
            Some("egress_secret_unavailable")
        );
    })
    .await;
}

#[tokio::test]
async fn a_jobs_log_masks_a_secret_its_output_keeps() {
    // A server that echoes the header back, and a job that logs the URL it
    // calls (which holds the value too) and returns what it got.
    let (port, mut heard) = server(
        Answer::Body(format!("you sent Bearer {API_KEY}").into_bytes()),
        None,
    )
    .await;
    let runtime = crate::runtime::Runtime::new(crate::runtime::RuntimeConfig {
        concurrent_jobs: 1,
        ..crate::runtime::RuntimeConfig::default()
    })
    .unwrap();
    let wasm = std::fs::read(format!("{}/fixture_http.wasm", env!("COHORT_GUESTS_DIR"))).unwrap();
    let module = runtime.load(&wasm).await.unwrap();
    let input = serde_json::json!({
        "calls": [{"url": format!("http://127.0.0.1:{port}/echo/{API_KEY}")}]
    });
    let request = crate::runtime::JobRequest {
        input: serde_json::to_vec(&input).unwrap(),
        egress: vec![setting(
            grant(&format!("http://127.0.0.1:{port}")),
            &[("authorization", "Bearer {secret:API_KEY}")],
        )],
        secrets: secrets(&[("API_KEY", API_KEY)]),
        ..crate::runtime::JobRequest::default()
    };
    let report = tokio::time::timeout(TEST_TIME, runtime.run(&module, request))
        .await
        .expect("the job ended in time");
    let head = heard.recv().await.unwrap().head;
    assert_eq!(
        header_lines(&head, "authorization"),
        [format!("authorization: Bearer {API_KEY}")]
    );
    let log = String::from_utf8(report.log).unwrap();
    assert!(!log.contains(API_KEY), "{log}");
    assert!(log.contains("/echo/[secret:API_KEY] -> 200"), "{log}");
    let output = String::from_utf8(report.outcome.unwrap()).unwrap();
    assert!(
        output.contains(&format!("you sent Bearer {API_KEY}")),
        "the output is the job's own, unmasked: {output}"
    );
}

// ---- Idempotency keys and recorded calls

/// A recorder keeping what it is given, or refusing everything.
#[derive(Debug, Default)]
struct Kept {
    calls: Mutex<Vec<RecordedCall>>,
    refuse: bool,
}

impl Recorder for Kept {
    fn record(&self, call: RecordedCall) -> super::super::tape::RecordFuture {
        let answer = match self.refuse {
            true => Err(super::super::tape::Unrecorded::Failed(
                "no master".to_owned(),
            )),
            false => {
                self.calls.lock().unwrap().push(call);
                Ok(())
            }
        };
        Box::pin(async move { answer })
    }
}

impl Attempt {
    /// An attempt of job 7 replaying `calls`, recording into `kept`.
    fn recording(grants: Vec<HttpGrant>, calls: Vec<RecordedCall>, kept: Arc<Kept>) -> Self {
        let recording = Recording {
            job: 7,
            replay: cohort_master::Replay {
                calls,
                submitted_at: 1_000,
                ..Default::default()
            },
            recorder: Some(kept),
        };
        Self::build(grants, quick(), None, Secrets::default(), recording)
    }
}

fn header_of<'a>(heard: &'a Heard, name: &str) -> Option<&'a str> {
    (heard.head.lines()).find_map(|line| line.strip_prefix(&format!("{name}: ")))
}

#[tokio::test]
async fn every_call_carries_an_idempotency_key_the_same_in_every_attempt_unless_the_job_set_one() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(b"ok".to_vec()), None).await;
        let grants = || vec![grant(&format!("http://127.0.0.1:{port}")).with_record(Some(false))];
        let url = format!("http://127.0.0.1:{port}/hook");
        let mut keys = Vec::new();
        for _attempt in 0..2 {
            let attempt = Attempt::recording(grants(), Vec::new(), Arc::default());
            attempt.call(request("POST", &url, b"a")).await.unwrap();
            attempt.call(request("POST", &url, b"a")).await.unwrap();
            for _ in 0..2 {
                let heard = heard.recv().await.unwrap();
                keys.push(header_of(&heard, "idempotency-key").unwrap().to_owned());
            }
        }
        assert_eq!(keys[0], keys[2], "call 0 has one key in every attempt");
        assert_eq!(keys[1], keys[3]);
        assert_ne!(keys[0], keys[1], "two calls, two keys");
        // The job's own key is kept.
        let attempt = Attempt::recording(grants(), Vec::new(), Arc::default());
        let mut own = request("POST", &url, b"a");
        own.headers_mut()
            .insert("idempotency-key", HeaderValue::from_static("mine"));
        attempt.call(own).await.unwrap();
        let heard = heard.recv().await.unwrap();
        assert_eq!(header_of(&heard, "idempotency-key"), Some("mine"));
    })
    .await;
}

// ---- Trace context

/// A job's context as the worker hands it to the attempt: the attempt
/// span's ids and sampled flag.
fn attempt_span(flags: u8) -> TraceContext {
    TraceContext {
        trace_id: [0x4b; 16],
        span_id: [0x5c; 8],
        flags,
        link: false,
    }
}

#[tokio::test]
async fn calls_carry_the_attempts_traceparent_in_place_of_the_jobs_and_none_without_one() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(b"ok".to_vec()), None).await;
        let url = format!("http://127.0.0.1:{port}/traced");
        let stamp = "00-77777777777777777777777777777777-00f067aa0ba902b7-01";
        let stamped = setting(
            grant(&format!("http://127.0.0.1:{port}/stamped")),
            &[("traceparent", stamp)],
        );
        let grants = || vec![stamped.clone(), grant(&format!("http://127.0.0.1:{port}"))];
        let with_own = |url: &str| {
            let mut own = get(url);
            let guest = "00-11111111111111111111111111111111-2222222222222222-01";
            own.headers_mut()
                .insert("traceparent", HeaderValue::from_str(guest).unwrap());
            own.headers_mut()
                .insert("tracestate", HeaderValue::from_static("guest=1"));
            own
        };
        let traced = |flags: u8| {
            let attempt = Attempt::new(grants(), quick());
            let egress = attempt
                .egress
                .clone()
                .with_trace(Some(&attempt_span(flags)));
            Attempt { egress, ..attempt }
        };

        // Sampled: the attempt's span is the parent; the job's own
        // traceparent and its tracestate give way.
        let attempt = traced(1);
        assert_eq!(attempt.call(with_own(&url)).await.unwrap().0, 200);
        let head = heard.recv().await.unwrap().head;
        let expected = format!("traceparent: 00-{}-{}-01", "4b".repeat(16), "5c".repeat(8));
        assert_eq!(header_lines(&head, "traceparent"), [expected], "{head}");
        assert!(header_lines(&head, "tracestate").is_empty(), "{head}");
        // Sampled out: the flag follows, so the service samples it out too.
        let attempt = traced(0);
        assert_eq!(attempt.call(get(&url)).await.unwrap().0, 200);
        let head = heard.recv().await.unwrap().head;
        let expected = format!("traceparent: 00-{}-{}-00", "4b".repeat(16), "5c".repeat(8));
        assert_eq!(header_lines(&head, "traceparent"), [expected], "{head}");
        // A grant's header of that name is the operator's, and wins.
        let stamped_url = format!("http://127.0.0.1:{port}/stamped");
        assert_eq!(attempt.call(get(&stamped_url)).await.unwrap().0, 200);
        let head = heard.recv().await.unwrap().head;
        assert_eq!(
            header_lines(&head, "traceparent"),
            [format!("traceparent: {stamp}")],
            "{head}"
        );
        // Neither counts as a body byte.
        let (calls, _) = attempt.record();
        assert!(calls.iter().all(|call| call.sent_bytes == 0), "{calls:?}");

        // Without a context: nothing added, the job's own headers go out
        // as it wrote them.
        let attempt = Attempt::new(grants(), quick());
        assert_eq!(attempt.call(get(&url)).await.unwrap().0, 200);
        let head = heard.recv().await.unwrap().head;
        assert!(header_lines(&head, "traceparent").is_empty(), "{head}");
        assert_eq!(attempt.call(with_own(&url)).await.unwrap().0, 200);
        let head = heard.recv().await.unwrap().head;
        assert_eq!(
            header_lines(&head, "traceparent"),
            ["traceparent: 00-11111111111111111111111111111111-2222222222222222-01"],
            "{head}"
        );
        assert_eq!(header_lines(&head, "tracestate"), ["tracestate: guest=1"]);
    })
    .await;
}

#[tokio::test]
async fn a_recorded_call_is_kept_before_the_job_sees_it_and_replayed_without_being_sent() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(b"charged".to_vec()), None).await;
        let grants = || vec![grant(&format!("http://127.0.0.1:{port}"))];
        let url = format!("http://127.0.0.1:{port}/charge?amount=5");
        let kept = Arc::new(Kept::default());
        let first = Attempt::recording(grants(), Vec::new(), kept.clone());
        // A GET is not recorded by default; the POST is.
        first.call(get(&url)).await.unwrap();
        let got = first.call(request("POST", &url, b"card")).await.unwrap();
        assert_eq!(got, (200, b"charged".to_vec()));
        assert_eq!(heard.recv().await.unwrap().body, b"");
        assert_eq!(heard.recv().await.unwrap().body, b"card");
        let recorded = kept.calls.lock().unwrap().clone();
        assert_eq!(recorded.len(), 1);
        let call = &recorded[0];
        assert_eq!((call.ordinal, call.method.as_str()), (1, "POST"));
        assert_eq!(call.url, url);
        assert_eq!(call.body, b"charged");
        assert_eq!(call.body_sha256, <[u8; 32]>::from(Sha256::digest(b"card")));

        // The next attempt makes the same calls: the GET goes out again,
        // the POST is answered from the record.
        let second = Attempt::recording(grants(), recorded.clone(), Arc::default());
        second.call(get(&url)).await.unwrap();
        let got = second.call(request("POST", &url, b"card")).await.unwrap();
        assert_eq!(got, (200, b"charged".to_vec()));
        assert_eq!(
            heard.recv().await.unwrap().head.lines().next(),
            Some("GET /charge?amount=5 HTTP/1.1")
        );
        let log = second.log();
        assert!(log.contains("[cohort] replayed: POST"), "{log}");
        let (calls, _) = second.record();
        assert_eq!(calls[1].status, Some(200));
        assert_eq!(calls[1].sent_bytes, 0, "nothing was sent");
        assert!(heard.try_recv().is_err(), "the POST was not sent again");

        // A third attempt posting another body is not the recorded call: it
        // is sent, and the log says why it was not replayed.
        let kept = Arc::new(Kept::default());
        let third = Attempt::recording(grants(), recorded, kept.clone());
        third.call(get(&url)).await.unwrap();
        third.call(request("POST", &url, b"other")).await.unwrap();
        heard.recv().await.unwrap();
        assert_eq!(heard.recv().await.unwrap().body, b"other");
        assert!(third.log().contains("[cohort] not replayed: POST"));
        assert_eq!(kept.calls.lock().unwrap().len(), 1, "recorded anew");
    })
    .await;
}

#[tokio::test]
async fn a_response_that_cannot_be_kept_fails_the_call_and_the_attempt() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(b"ok".to_vec()), None).await;
        let url = format!("http://127.0.0.1:{port}/charge");
        let refusing = Arc::new(Kept {
            refuse: true,
            ..Kept::default()
        });
        let attempt = Attempt::recording(
            vec![grant(&format!("http://127.0.0.1:{port}"))],
            Vec::new(),
            refusing,
        );
        let error = attempt.call(request("POST", &url, b"x")).await.unwrap_err();
        assert!(matches!(error, HttpError::InternalError(_)), "{error:?}");
        heard.recv().await.unwrap();
        assert!(attempt.egress.tape.failure().is_some(), "the attempt fails");
        let (calls, _) = attempt.record();
        assert_eq!(calls[0].error.as_deref(), Some("egress_record_failed"));
        assert!(attempt.log().contains("egress_record_failed"));
    })
    .await;
}

#[tokio::test]
async fn a_recorded_response_over_a_records_bound_fails_the_call() {
    in_time(async {
        let big = vec![b'x'; cohort_master::limits::RECORD_BODY_BYTES_MAX + 1];
        let (port, _heard) = server(Answer::Body(big), None).await;
        let url = format!("http://127.0.0.1:{port}/export");
        let kept = Arc::new(Kept::default());
        let mut attempt = Attempt::recording(
            vec![grant(&format!("http://127.0.0.1:{port}")).with_record(Some(true))],
            Vec::new(),
            kept.clone(),
        );
        attempt.egress.egress = attempt.egress.egress.with_limits(EgressLimits {
            response_bytes: 4 << 20,
            ..quick()
        });
        attempt.call(get(&url)).await.unwrap_err();
        let (calls, _) = attempt.record();
        assert_eq!(calls[0].error.as_deref(), Some("egress_record_too_large"));
        assert!(kept.calls.lock().unwrap().is_empty());
    })
    .await;
}

/// Makes recorded POSTs "a" then "b" to `url`, as a job does, and runs b's
/// task first; both must succeed.
async fn posts_a_then_b_b_first(egress: &JobEgress, url: &str) {
    let mut hooks = egress.clone();
    let mut post = |body: &'static [u8]| {
        hooks.send_request(request("POST", url, body), None, Box::new(async { Ok(()) }))
    };
    let (a, b) = (post(b"a"), post(b"b"));
    let (b, _) = Box::into_pin(b).await.unwrap();
    let (a, _) = Box::into_pin(a).await.unwrap();
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
}

#[tokio::test]
async fn concurrent_calls_are_numbered_as_the_job_makes_them_and_replay_in_any_order() {
    in_time(async {
        let (port, mut heard) = server(Answer::Body(b"charged".to_vec()), None).await;
        let grants = || vec![grant(&format!("http://127.0.0.1:{port}"))];
        let url = format!("http://127.0.0.1:{port}/charge");
        let kept = Arc::new(Kept::default());
        let first = Attempt::recording(grants(), Vec::new(), kept.clone());
        // The job makes call "a", then call "b"; the node runs b's task
        // first.
        posts_a_then_b_b_first(&first.egress, &url).await;
        let heard_b = heard.recv().await.unwrap();
        let heard_a = heard.recv().await.unwrap();
        assert_eq!(
            (heard_a.body.as_slice(), heard_b.body.as_slice()),
            (&b"a"[..], &b"b"[..])
        );
        // Their keys follow the order the job made them in.
        let key = |heard: &Heard| header_of(heard, "idempotency-key").unwrap().to_owned();
        assert_eq!(key(&heard_a), first.egress.tape.idempotency_key(0));
        assert_eq!(key(&heard_b), first.egress.tape.idempotency_key(1));
        let mut recorded = kept.calls.lock().unwrap().clone();
        recorded.sort_by_key(|call| call.ordinal);
        let digests: Vec<[u8; 32]> = recorded.iter().map(|call| call.body_sha256).collect();
        let digest = |body: &[u8]| -> [u8; 32] { Sha256::digest(body).into() };
        assert_eq!(digests, [digest(b"a"), digest(b"b")]);

        // The next attempt makes the same two calls; b's task runs first
        // again: both are answered from the record, nothing is sent.
        let second = Attempt::recording(grants(), recorded, Arc::default());
        posts_a_then_b_b_first(&second.egress, &url).await;
        assert_eq!(second.log().matches("[cohort] replayed: POST").count(), 2);
        assert!(heard.try_recv().is_err(), "nothing was sent again");
    })
    .await;
}
