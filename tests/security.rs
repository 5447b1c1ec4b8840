//! Security, tried against real `cohort node` processes on loopback: only
//! holders of the cluster key join, gossip and reach internal routes;
//! forged, replayed and stale datagrams are dropped and counted; each token
//! scope allows exactly what the README says; TLS serves HTTP/1.1 and
//! HTTP/2 and refuses plain HTTP and garbage; a node refuses to listen
//! beyond loopback without a key (and one without a key says it checks no
//! token it makes); the key rotates under load with no
//! acknowledged job lost; and the bad inputs a user would try get JSON
//! errors with stable codes.

mod support;

use cohort::client::{ClientError, Node as Api};
use cohort::security::key::{Purpose, generate};
use cohort::security::{Keyring, Sealer};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::faults::{Burst, check_jobs, check_journals, exclusive};
use support::{
    Node, OBSERVE, converge_via, eventually, eventually_async, live, metric, runtime, start_with,
    upload,
};

/// Writes a key file holding `keys` (texts from `generate`) as `name`.
fn key_file(dir: &Path, name: &str, keys: &[&str]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, keys.concat()).unwrap();
    path
}

fn secure(dir: &tempfile::TempDir, name: &str, key: &Path, seed: Option<&Node>) -> Node {
    start_with(
        dir,
        name,
        "back-end,worker,front-end",
        seed,
        &["--cluster-key", key.to_str().unwrap()],
    )
}

/// A token with `scopes` made through `node` by proving the cluster key
/// (retried while the master comes up).
fn token(node: &Node, key: &Path, scopes: &str) -> String {
    support::token_at(&node.url, key, scopes)
}

fn client(node: &Node, token: &str) -> Api {
    Api::with_options(&node.url, Some(token), None).unwrap()
}

fn refused(what: &str, reason: &str) -> String {
    format!("cohort_security_refused_total{{what=\"{what}\",reason=\"{reason}\"}}")
}

/// Waits (bounded) until `series` reaches `at_least`.
async fn wait_metric(client: &Api, series: &str, at_least: u64) {
    let what = format!("{series} to reach {at_least}");
    eventually_async(&what, OBSERVE, async || {
        match metric(client, series).await {
            value if value >= at_least => Ok(()),
            value => Err(format!("it stayed at {value}")),
        }
    })
    .await
}

fn status_code(result: Result<(hyper::StatusCode, bytes::Bytes), ClientError>) -> (u16, String) {
    match result {
        Ok((status, _)) => (status.as_u16(), String::new()),
        Err(ClientError::Api { status, code, .. }) => (status, code),
        Err(other) => panic!("{other}"),
    }
}

const INTERNAL_ROUTES: [&str; 5] = [
    "/internal/v1/master",
    "/internal/v1/replication",
    "/internal/v1/modules",
    "/internal/v1/modules/fetch",
    "/internal/v1/tokens",
];

#[test]
fn only_holders_of_the_key_join_and_reach_internal_routes() {
    let _turn = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let k1 = key_file(dir.path(), "k1", &[&generate()]);
    let k2 = key_file(dir.path(), "k2", &[&generate()]);
    let n1 = secure(&dir, "n1", &k1, None);
    let n2 = secure(&dir, "n2", &k1, Some(&n1));
    let admin = token(&n1, &k1, "admin");
    let c1 = client(&n1, &admin);
    rt.block_on(converge_via(&c1, "n1 and n2 live", |c| live(c).len() == 2));
    // Another key, and none: both gossip at n1 and are dropped.
    // Each starts a cluster of its own (--bootstrap): the one they reach
    // is not theirs to join.
    let n3 = start_with(
        &dir,
        "n3",
        "back-end,worker,front-end",
        Some(&n1),
        &["--cluster-key", k2.to_str().unwrap(), "--bootstrap"],
    );
    let n4 = start_with(
        &dir,
        "n4",
        "back-end,worker,front-end",
        Some(&n1),
        &["--bootstrap"],
    );
    rt.block_on(async {
        // n3's datagrams carry another key id; n4's are not sealed at all.
        wait_metric(&c1, &refused("gossip", "unknown_key"), 5).await;
        wait_metric(&c1, &refused("gossip", "malformed"), 5).await;
        let cluster = c1.cluster().await.unwrap();
        let ids: Vec<&str> = cluster.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            ids,
            ["n1", "n2"],
            "only key holders are members: {cluster:?}"
        );
        assert!(cluster.security.cluster_key && cluster.security.tokens);
        assert!(!cluster.security.insecure);
        // n3 and n4 see only themselves.
        let a3 = token(&n3, &k2, "read");
        let c3 = client(&n3, &a3).cluster().await.unwrap();
        assert_eq!(live(&c3), ["n3"]);
        let c4 = Api::new(&n4.url).cluster().await.unwrap();
        assert_eq!(live(&c4), ["n4"]);
        assert!(!c4.security.cluster_key && !c4.security.insecure);

        // Every internal route: 401 unsealed, 401 with another key, 405 for GET.
        let stranger = cohort::peer::Peer::node(Some(std::sync::Arc::new(Sealer::new(
            Keyring::load(&k2).unwrap(),
            "cohort",
        ))));
        let plain = Api::new(&n1.url);
        for route in INTERNAL_ROUTES {
            let (status, code) = status_code(
                plain
                    .call(
                        hyper::Method::POST,
                        route,
                        "application/octet-stream",
                        "x".into(),
                    )
                    .await,
            );
            assert_eq!((status, code.as_str()), (401, "unauthorized"), "{route}");
            let error = stranger
                .post_internal(&format!("{}{route}", n1.url), "x".into(), OBSERVE)
                .await
                .unwrap_err();
            assert!(
                error.message.contains("refused this node's cluster key"),
                "{route}: {}",
                error.message
            );
            assert!(error.not_acted_on);
            let (status, code) = status_code(
                plain
                    .call(hyper::Method::GET, route, "", Default::default())
                    .await,
            );
            assert_eq!(
                (status, code.as_str()),
                (405, "method_not_allowed"),
                "{route}"
            );
        }
        wait_metric(&c1, &refused("internal_request", "unknown_key"), 5).await;
        wait_metric(&c1, &refused("internal_request", "unsealed"), 5).await;

        // A sealed request works once; the same bytes again are refused.
        let sealer = Sealer::new(Keyring::load(&k1).unwrap(), "cohort");
        let op = cohort::api::auth::TokenOp::List;
        let context = cohort::peer::request_context(b"POST", b"/internal/v1/tokens");
        let (sealed, _) = sealer.seal(Purpose::Http, &context, &cohort_master::encode(&op));
        let raw = cohort::peer::Peer::default();
        let url = format!("{}/internal/v1/tokens", n1.url);
        for expected in [200, 401] {
            let (status, _) = raw
                .exchange(
                    hyper::Method::POST,
                    &url,
                    cohort::peer::SEALED_CONTENT_TYPE,
                    sealed.clone().into(),
                    OBSERVE,
                )
                .await
                .unwrap();
            assert_eq!(status.as_u16(), expected);
        }
        wait_metric(&c1, &refused("internal_request", "replayed"), 1).await;
        // A token revoked on n1 is refused by n2 within its refresh period.
        let reader = token(&n1, &k1, "read");
        let on_n2 = client(&n2, &reader);
        on_n2.cluster().await.unwrap();
        let id = reader.split('_').nth(1).unwrap().to_string();
        let out = n1.cli(&["token", "revoke", &id, "--token", &admin], b"");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eventually_async(
            "n2 to refuse the revoked token",
            OBSERVE,
            async || match on_n2.cluster().await {
                Ok(_) => Err("n2 still takes it"),
                Err(_) => Ok(()),
            },
        )
        .await;
        // The members still work together.
        let echo = upload(&c1, "fixture_echo").await;
        let id = client(&n2, &admin)
            .submit(&support::job(&echo, "ok"))
            .await
            .unwrap()
            .id;
        support::faults::check_job(&c1, id, b"ok").await;
    });
    drop((n3, n4, n2));
}

#[test]
fn forged_replayed_and_stale_gossip_is_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let k1 = generate();
    let key = key_file(dir.path(), "k1", &[&k1]);
    let node = secure(&dir, "n1", &key, None);
    let admin = token(&node, &key, "admin");
    let c = client(&node, &admin);
    let sealer = Sealer::new(Keyring::parse(&k1).unwrap(), "cohort");
    let other = Sealer::new(Keyring::parse(&generate()).unwrap(), "cohort");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = support::gossip(&node);
    let send = |bytes: &[u8]| {
        socket.send_to(bytes, &to).unwrap();
    };
    rt.block_on(async {
        // Authentic but not gossip: opened, then refused by the decoder.
        let (datagram, _) = sealer.seal(Purpose::Gossip, &[], b"not a chitchat message");
        send(&datagram);
        wait_metric(&c, &refused("gossip", "undecodable"), 1).await;
        // The same datagram again.
        send(&datagram);
        wait_metric(&c, &refused("gossip", "replayed"), 1).await;
        // Tampered with.
        let (mut forged, _) = sealer.seal(Purpose::Gossip, &[], b"x");
        let last = forged.len() - 1;
        forged[last] ^= 1;
        send(&forged);
        wait_metric(&c, &refused("gossip", "forged"), 1).await;
        // Sealed a minute ago.
        let old = cohort::limits::SEAL_WINDOW_MS * 2;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let (stale, _) = sealer.seal_at(Purpose::Gossip, &[], now - old, b"x");
        send(&stale);
        wait_metric(&c, &refused("gossip", "stale"), 1).await;
        // Another cluster's key, and garbage.
        send(&other.seal(Purpose::Gossip, &[], b"x").0);
        wait_metric(&c, &refused("gossip", "unknown_key"), 1).await;
        send(b"hello");
        wait_metric(&c, &refused("gossip", "malformed"), 1).await;
        // Still serving.
        assert_eq!(live(&c.cluster().await.unwrap()), ["n1"]);
    });
}

#[test]
fn each_scope_allows_exactly_what_the_readme_says() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let key = key_file(dir.path(), "k", &[&generate()]);
    let node = secure(&dir, "n1", &key, None);
    let admin = token(&node, &key, "admin");
    let read = token(&node, &key, "read");
    let submit = token(&node, &key, "submit");
    let both = token(&node, &key, "submit,read");
    rt.block_on(async {
        let admin_client = client(&node, &admin);
        let echo = upload(&admin_client, "fixture_echo").await;
        let id = admin_client
            .submit(&support::job(&echo, "x"))
            .await
            .unwrap()
            .id;
        support::settle(&admin_client, id).await;
        let job = format!(r#"{{"module":"{echo}","input":"y"}}"#);
        let batch = format!(r#"{{"jobs":[{job}]}}"#);
        let wasm = std::fs::read(support::guest("fixture_echo")).unwrap();
        // (method, path, body, needed scope or "" for open)
        let routes: Vec<(hyper::Method, String, Vec<u8>, &str)> = vec![
            (hyper::Method::GET, "/healthz".into(), vec![], ""),
            (hyper::Method::GET, "/metrics".into(), vec![], "read"),
            (hyper::Method::GET, "/v1/cluster".into(), vec![], "read"),
            (hyper::Method::GET, "/v1/jobs".into(), vec![], "read"),
            (hyper::Method::GET, format!("/v1/jobs/{id}"), vec![], "read"),
            (
                hyper::Method::GET,
                format!("/v1/jobs/{id}/result"),
                vec![],
                "read",
            ),
            (hyper::Method::GET, "/v1/modules".into(), vec![], "read"),
            (
                hyper::Method::GET,
                format!("/v1/modules/{echo}"),
                vec![],
                "read",
            ),
            (
                hyper::Method::POST,
                "/v1/jobs".into(),
                job.clone().into_bytes(),
                "submit",
            ),
            (
                hyper::Method::POST,
                "/v1/jobs/batch".into(),
                batch.into_bytes(),
                "submit",
            ),
            (hyper::Method::POST, "/v1/modules".into(), wasm, "admin"),
            (
                hyper::Method::DELETE,
                format!("/v1/jobs/{id}"),
                vec![],
                "admin",
            ),
            (hyper::Method::GET, "/v1/tokens".into(), vec![], "admin"),
            // Grants are an admin's, as deploying is (the name is not
            // deployed: an admin is told so, anyone else is refused first).
            (
                hyper::Method::POST,
                "/v1/deployments/payments/grants".into(),
                br#"{"http": [{"url": "https://api.example.com/v1/"}]}"#.to_vec(),
                "admin",
            ),
            (
                hyper::Method::DELETE,
                "/v1/deployments/payments/grants".into(),
                vec![],
                "admin",
            ),
        ];
        let holders = [
            ("", None),
            ("garbage", Some("cohort_nonsense".to_string())),
            ("read", Some(read.clone())),
            ("submit", Some(submit.clone())),
            ("submit,read", Some(both.clone())),
            ("admin", Some(admin.clone())),
        ];
        for (method, path, body, needed) in &routes {
            for (holder, token) in &holders {
                let c = Api::with_options(&node.url, token.as_deref(), None).unwrap();
                let (status, code) = status_code(
                    c.call(
                        method.clone(),
                        path,
                        "application/json",
                        body.clone().into(),
                    )
                    .await,
                );
                let allowed = needed.is_empty()
                    || *holder == "admin"
                    || holder.split(',').any(|h| h == *needed);
                let expected = if allowed {
                    None
                } else if token.is_none() || *holder == "garbage" {
                    Some((401, "unauthorized"))
                } else {
                    Some((403, "forbidden"))
                };
                match expected {
                    None => assert!(
                        status < 400 || code == "job_finished" || code == "module_name_not_found",
                        "{holder} on {method} {path}: {status} {code}"
                    ),
                    Some((s, c)) => assert_eq!(
                        (status, code.as_str()),
                        (s, c),
                        "{holder} on {method} {path}"
                    ),
                }
            }
        }
        // Revoked: refused at once on the node that revoked it.
        let id = both.split('_').nth(1).unwrap().to_string();
        let out = node.cli(&["token", "revoke", &id, "--token", &admin], b"");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (status, code) = status_code(
            client(&node, &both)
                .call(hyper::Method::GET, "/v1/jobs", "", Default::default())
                .await,
        );
        assert_eq!((status, code.as_str()), (401, "unauthorized"));
        // The CLI reads COHORT_TOKEN-style flags and says what is missing.
        let out = node.cli(&["jobs"], b"");
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("requires a token"));
        let out = node.cli(&["jobs", "--token", &read], b"");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_metric(&admin_client, &refused("token", "scope"), 1).await;
        wait_metric(&admin_client, &refused("token", "missing"), 1).await;
    });
}

/// A self-signed CA and a certificate for 127.0.0.1 signed by it, as PEM
/// files: (ca, cert, key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca_cert.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

/// One `GET path` over TLS with only `alpn` offered; the HTTP version and
/// status of the answer.
async fn tls_get(
    ca: &Path,
    addr: &str,
    alpn: &[u8],
    path: &str,
    token: &str,
) -> (hyper::Version, u16) {
    use http_body_util::Empty;
    let mut config = cohort::security::tls::client_config(Some(ca)).unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(tls);
    let request = hyper::Request::get(format!("https://{addr}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = if alpn == b"h2" {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(connection);
        sender.send_request(request).await.unwrap()
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(connection);
        sender.send_request(request).await.unwrap()
    };
    (response.version(), response.status().as_u16())
}

#[test]
fn tls_serves_http1_and_http2_and_refuses_plain_http_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let key = key_file(dir.path(), "k", &[&generate()]);
    let (ca, cert, tls_key) = certificates(dir.path());
    let node = start_with(
        &dir,
        "n1",
        "back-end,worker,front-end",
        None,
        &[
            "--cluster-key",
            key.to_str().unwrap(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            tls_key.to_str().unwrap(),
        ],
    );
    let addr = node.url.trim_start_matches("http://").to_string();
    let https = format!("https://{addr}");
    // The first token through the sealed internal route (plain HTTP, an
    // https:// URL is rewritten).
    let admin = support::token_at(&https, &key, "admin");
    // The CLI over TLS, trusting the CA.
    let out = support::cohort(
        &[
            "cluster",
            "--server",
            &https,
            "--token",
            &admin,
            "--ca-cert",
            ca.to_str().unwrap(),
            "--json",
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cluster: cohort::api::types::ClusterResponse = serde_json::from_slice(&out.stdout).unwrap();
    assert!(cluster.security.tls);
    // Without the CA: refused by the client, naming the certificate.
    let out = support::cohort(&["cluster", "--server", &https, "--token", &admin], b"");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .to_lowercase()
            .contains("certificate")
    );
    rt.block_on(async {
        assert_eq!(
            tls_get(&ca, &addr, b"h2", "/v1/cluster", &admin).await,
            (hyper::Version::HTTP_2, 200)
        );
        assert_eq!(
            tls_get(&ca, &addr, b"http/1.1", "/v1/cluster", &admin).await,
            (hyper::Version::HTTP_11, 200)
        );
        // Plain HTTP to the TLS port: a JSON error that says why.
        let (status, code) = status_code(
            Api::new(&node.url)
                .call(hyper::Method::GET, "/v1/cluster", "", Default::default())
                .await,
        );
        assert_eq!((status, code.as_str()), (400, "tls_required"));
        // A handshake of garbage: the connection is dropped and counted;
        // the node keeps serving.
        let mut garbage = std::net::TcpStream::connect(&addr).unwrap();
        garbage
            .write_all(&[0x16, 3, 1, 0, 5, 1, 2, 3, 4, 5])
            .unwrap();
        let mut rest = Vec::new();
        let _ = garbage.read_to_end(&mut rest);
        let c = Api::with_options(&https, Some(&admin), Some(&ca)).unwrap();
        wait_metric(&c, &refused("connection", "tls_handshake"), 1).await;
        wait_metric(&c, &refused("connection", "plain_http_on_tls"), 1).await;
        // Jobs run over TLS.
        let echo = upload(&c, "fixture_echo").await;
        let id = c.submit(&support::job(&echo, "tls")).await.unwrap().id;
        support::faults::check_job(&c, id, b"tls").await;
    });
}

#[test]
fn beyond_loopback_a_node_needs_a_key_or_says_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let refuse = |data: &str, args: &[&str]| {
        let path = dir.path().join(data);
        let mut all = vec!["node", "--data-dir", path.to_str().unwrap()];
        all.extend(args);
        let out = support::cohort(&all, b"");
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = refuse("a", &["--listen", "0.0.0.0:0"]);
    for needle in [
        "refusing to listen on 0.0.0.0",
        "cohort keygen",
        "--cluster-key",
        "--insecure",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    // A gossip address beyond loopback counts too.
    let stderr = refuse("b", &["--listen", "127.0.0.1:0", "--gossip", "0.0.0.0:0"]);
    assert!(stderr.contains("refusing to listen"), "{stderr}");
    // A bad key file is refused with its reason.
    let bad = key_file(dir.path(), "bad", &["not a key\n"]);
    match Node::try_start(
        &dir.path().join("c"),
        &["--cluster-key", bad.to_str().unwrap()],
    ) {
        Ok(_) => panic!("a node started with a bad key file"),
        Err(stderr) => assert!(stderr.contains("not a cohort cluster key"), "{stderr}"),
    }
    // --insecure is the explicit way round, and says so.
    let node = Node::start(
        &dir.path().join("d"),
        &["--gossip", "0.0.0.0:0", "--insecure"],
    );
    node.wait_stderr("--insecure");
    let cluster = runtime().block_on(Api::new(&node.url).cluster()).unwrap();
    assert!(cluster.security.insecure && !cluster.security.cluster_key);
    // A token made on a node without a key is kept, but that node checks
    // none, and says so.
    let out = eventually("a token", support::EVENT_WAIT, || {
        let out = node.cli(&["token", "create", "--scope", "read"], b"");
        match out.status.success() {
            true => Ok(out),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    });
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("cohort_"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("has no cluster key and checks no token"),
        "{stderr}"
    );
    let out = node.cli(&["token", "create", "--scope", "read", "--json"], b"");
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["checked"], false, "{created}");
}

/// Sends `head` and `body_part`, then idles; the raw answer.
fn raw_exchange(url: &str, head: &str, body_part: &[u8]) -> String {
    let mut stream = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body_part).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn bad_input_gets_json_errors_with_stable_codes() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("n"), &[]);
    // A slow body: answered 408 within the body deadline, connection closed.
    let started = Instant::now();
    let answer = raw_exchange(
        &node.url,
        "POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n",
        b"0123456789",
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":"request_timeout""#), "{answer}");
    assert!(started.elapsed() < cohort::api::body_deadline(1000) + Duration::from_secs(5));
    // A known route with the wrong method: 405 and Allow.
    let answer = raw_exchange(
        &node.url,
        "GET /v1/node/leave HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        b"",
    );
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.to_lowercase().contains("allow: post"), "{answer}");
    assert!(
        answer.contains(r#""code":"method_not_allowed""#),
        "{answer}"
    );
    // A module over 64 MiB: module_too_large, decided from the length.
    let too_big = cohort::limits::MODULE_BYTES_MAX + 1;
    let answer = raw_exchange(
        &node.url,
        &format!(
            "POST /v1/modules HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {too_big}\r\n\r\n"
        ),
        b"",
    );
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains(r#""code":"module_too_large""#), "{answer}");
    // The node is fine.
    let cluster = runtime().block_on(Api::new(&node.url).cluster()).unwrap();
    assert_eq!(live(&cluster).len(), 1);
}

/// Restarts `node` (SIGTERM, then the same data directory) with `key`,
/// joining through the gossip address `seed`.
fn restart(dir: &tempfile::TempDir, node: &mut Node, name: &str, key: &Path, seed: &str) {
    assert!(node.terminate().success(), "{name} did not stop cleanly");
    *node = start_with(
        dir,
        name,
        "back-end,worker,front-end",
        None,
        &["--cluster-key", key.to_str().unwrap(), "--seed", seed],
    );
}

#[test]
fn the_cluster_key_rotates_under_load_without_losing_a_job() {
    let _turn = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let (old, new) = (generate(), generate());
    let phases: [(&str, Vec<&str>); 3] = [
        ("both, old seals", vec![&old, &new]),
        ("both, new seals", vec![&new, &old]),
        ("new only", vec![&new]),
    ];
    let start_key = key_file(dir.path(), "start.key", &[&old]);
    let mut nodes = vec![secure(&dir, "n1", &start_key, None)];
    let admin = token(&nodes[0], &start_key, "admin");
    nodes.push(secure(&dir, "n2", &start_key, Some(&nodes[0])));
    nodes.push(secure(&dir, "n3", &start_key, Some(&nodes[0])));
    let names = ["n1", "n2", "n3"];
    let all_live = |nodes: &[Node]| {
        rt.block_on(async {
            for node in nodes {
                let c = client(node, &admin);
                converge_via(&c, "three live nodes", |c| live(c).len() == 3).await;
            }
        })
    };
    all_live(&nodes);
    let echo = rt.block_on(upload(&client(&nodes[0], &admin), "fixture_echo"));
    let targets: support::faults::Targets = std::sync::Arc::new(std::sync::Mutex::new(
        nodes.iter().map(|n| client(n, &admin)).collect(),
    ));
    let burst = Burst::start(&rt, &targets, &echo, 4);
    for (phase, keys) in &phases {
        let key = key_file(dir.path(), &format!("{phase}.key"), keys);
        for i in 0..nodes.len() {
            let before = burst.ledger.len();
            let seed = support::gossip(&nodes[(i + 1) % nodes.len()]);
            restart(&dir, &mut nodes[i], names[i], &key, &seed);
            targets.lock().unwrap()[i] = client(&nodes[i], &admin);
            all_live(&nodes);
            // Submissions go on after each restart.
            let what = format!("{phase}: progress after restarting {}", names[i]);
            wait_acks(&burst.ledger, before + 20, &what);
        }
    }
    let ledger = burst.ledger.clone();
    burst.finish(&rt);
    let burst = ledger;
    let failed = burst.failed.load(std::sync::atomic::Ordering::Relaxed);
    rt.block_on(async {
        let c = client(&nodes[0], &admin);
        check_jobs(&c, &burst).await;
        // The old key is out: a node holding only it never joins.
        let c = client(&nodes[0], &admin);
        let before = metric(&c, &refused("gossip", "unknown_key")).await;
        let stale = secure(&dir, "old", &start_key, Some(&nodes[0]));
        wait_metric(&c, &refused("gossip", "unknown_key"), before + 5).await;
        assert_eq!(live(&c.cluster().await.unwrap()).len(), 3);
        drop(stale);
    });
    let refs: Vec<&Node> = nodes.iter().collect();
    check_journals(&refs);
    eprintln!(
        "rotation: {} jobs acknowledged, {failed} requests refused during restarts",
        burst.len()
    );
}

#[test]
fn one_client_address_holds_a_bounded_number_of_connections() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&dir.path().join("n"), &[]);
    let addr: std::net::SocketAddr = node.url.trim_start_matches("http://").parse().unwrap();
    // The node's own address (127.0.0.1) belongs to the cluster and is not
    // counted; another loopback address is an ordinary client.
    let connect = || {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket
            .bind(&std::net::SocketAddr::from(([127, 0, 0, 2], 0)).into())
            .unwrap();
        socket.connect(&addr.into()).unwrap();
        std::net::TcpStream::from(socket)
    };
    let mut held: Vec<std::net::TcpStream> = (0..cohort::limits::CONNECTIONS_PER_CLIENT_MAX)
        .map(|_| connect())
        .collect();
    // Each of those is served: the last one answers a request.
    let last = held.last_mut().unwrap();
    last.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut answer = [0u8; 12];
    last.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    // One more is refused with a JSON 429.
    let mut extra = connect();
    extra.set_read_timeout(Some(OBSERVE)).unwrap();
    let mut refused = String::new();
    let _ = extra.read_to_string(&mut refused);
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert!(
        refused.contains(r#""code":"too_many_connections""#),
        "{refused}"
    );
    // Closing one makes room again.
    held.truncate(held.len() - 1);
    eventually("room after a close", OBSERVE, || {
        let mut again = connect();
        again.set_read_timeout(Some(OBSERVE)).unwrap();
        again
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = again.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 200") {
            Ok(())
        } else {
            Err(answer)
        }
    });
    // The node's own address is not counted.
    let cluster = runtime().block_on(Api::new(&node.url).cluster()).unwrap();
    assert_eq!(live(&cluster).len(), 1);
}

/// Waits (bounded) until `ledger` holds `count` acknowledgements.
fn wait_acks(ledger: &support::faults::Ledger, count: usize, what: &str) {
    let what = format!("{what}: {count} acknowledged");
    eventually(&what, OBSERVE, || match ledger.len() {
        len if len >= count => Ok(()),
        len => Err(format!("{len} are")),
    });
}

#[test]
fn a_sealed_cluster_takes_over_from_a_killed_master_without_losing_a_job() {
    let _turn = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let key = key_file(dir.path(), "k", &[&generate()]);
    let mut n1 = secure(&dir, "n1", &key, None);
    let admin = token(&n1, &key, "admin");
    let n2 = secure(&dir, "n2", &key, Some(&n1));
    let n3 = secure(&dir, "n3", &key, Some(&n1));
    let c2 = client(&n2, &admin);
    rt.block_on(converge_via(&c2, "three workers", |c| c.workers.len() == 3));
    let echo = rt.block_on(upload(&c2, "fixture_echo"));
    let targets: support::faults::Targets = std::sync::Arc::new(std::sync::Mutex::new(vec![
        client(&n2, &admin),
        client(&n3, &admin),
    ]));
    let burst = Burst::start(&rt, &targets, &echo, 4);
    let ledger = burst.ledger.clone();
    wait_acks(&ledger, 50, "before the crash");
    let killed = Instant::now();
    n1.kill();
    rt.block_on(converge_via(&c2, "the master on n2", |c| {
        c.master_node == "n2" && c.master_epoch == 2
    }));
    let after = ledger.len();
    wait_acks(&ledger, after + 50, "after the take-over");
    burst.finish(&rt);
    assert!(ledger.first_ack_after(killed).is_some());
    rt.block_on(check_jobs(&c2, &ledger));
    // The crashed node comes back with the key, as the youngest, and its
    // journal lines up with the new master's.
    let n1 = secure(&dir, "n1", &key, Some(&n2));
    rt.block_on(converge_via(&c2, "n1 back as the youngest", |c| {
        live(c) == ["n2", "n3", "n1"] && c.master_node == "n2"
    }));
    check_journals(&[&n1, &n2, &n3]);
}
