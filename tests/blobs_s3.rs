//! Blobs kept in an S3-compatible store (`--blob-store s3://bucket/prefix`),
//! end to end: real `cohort node` processes on loopback against a real
//! S3-protocol server, moto's server mode, installed from PyPI with hashes
//! (`tests/s3/requirements.txt`, into cargo's target/tmp) and started on
//! an ephemeral loopback port by each test, which creates its bucket.
//!
//! What is checked: an upload lands in the bucket under
//! `<prefix>/sha256/<hex>` (in parts when large) and on no other node's
//! disk; a node that never had a blob serves it from the store, digest
//! checked; a job reads its input blob from the store and its output blob
//! lands there; the node that took an upload killed (-9) after the answer
//! loses nothing; an object changed in the bucket is refused with
//! `blob_store_corrupt`, never served, and an upload repairs it; a store
//! gone gives `blob_store_unavailable` and leaves nothing half-kept; the
//! store's garbage collection deletes the objects the cluster does not keep
//! after the grace and keeps the kept ones until their retention ends; and
//! a malformed URL or a missing bucket stops a node at start.

mod support;

use cohort::client::Node as Api;
use cohort::client::types::SubmitRequest;
use object_store::ObjectStore;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use sha2::{Digest as _, Sha256};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{Node, OBSERVE, converge_via, eventually, live, pinned_venv, runtime, upload};

const ALL: &str = "back-end,worker,front-end";
const BUCKET: &str = "cohort-blobs";
/// Longest wait for moto to start serving.
const MOTO_START: Duration = Duration::from_secs(60);

// ---- The S3 server ----------------------------------------------------

/// moto's S3 server on a loopback port; killed when dropped.
struct Moto {
    child: Child,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// Installs moto (pinned, hash-checked) if needed and starts it on a
    /// port of the system's choosing, which it prints.
    fn start() -> Moto {
        let requirements =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/s3/requirements.txt");
        let venv = pinned_venv("moto", &requirements);
        let mut child = Command::new(venv.join("bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("moto_server starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads its log to the end, so it never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(address) = line.split("Running on http://127.0.0.1:").nth(1) {
                    let _ = tx.send(address.trim().parse::<u16>());
                }
            }
        });
        let mut moto = Moto { child, port: 0 };
        moto.port = eventually("moto to print its address", MOTO_START, || {
            if let Some(exited) = moto.child.try_wait().unwrap() {
                panic!("moto_server exited: {exited}");
            }
            match rx.try_recv() {
                Ok(port) => Ok(port.expect("a port number")),
                Err(_) => Err("not yet"),
            }
        });
        moto
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates `bucket` (moto takes an unsigned request).
    fn create_bucket(&self, bucket: &str) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.set_read_timeout(Some(OBSERVE)).unwrap();
        let request = format!(
            "PUT /{bucket} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            self.port
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// The `AWS_*` variables a node reaches it with.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "cohort-test".into()),
            ("AWS_SECRET_ACCESS_KEY", "cohort-test-secret".into()),
        ]
    }

    /// A client of the bucket, as the test sees it.
    fn client(&self) -> AmazonS3 {
        AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("cohort-test")
            .with_secret_access_key("cohort-test-secret")
            .with_bucket_name(BUCKET)
            .build()
            .unwrap()
    }
}

fn key(prefix: &str, digest: &str) -> ObjectPath {
    ObjectPath::from(format!("{prefix}/sha256/{digest}"))
}

/// The size of the object at `path`, if there is one.
async fn object_size(s3: &AmazonS3, path: &ObjectPath) -> Option<u64> {
    match s3.head(path).await {
        Ok(meta) => Some(meta.size),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(error) => panic!("HEAD {path}: {error}"),
    }
}

// ---- Nodes ------------------------------------------------------------

/// A node of all roles with the store at `s3://BUCKET/prefix`.
fn start(
    dir: &tempfile::TempDir,
    name: &str,
    seed: Option<&Node>,
    moto: &Moto,
    extra: &[&str],
) -> Node {
    let store = format!("s3://{BUCKET}/{}", prefix_of(dir));
    let seed = seed.map(support::gossip);
    let mut args = vec![
        "--node-id",
        name,
        "--roles",
        ALL,
        "--slots",
        "4",
        "--blob-store",
        &store,
    ];
    if let Some(seed) = &seed {
        args.extend(["--seed", seed]);
    }
    args.extend(extra);
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    match Node::try_start_env(&dir.path().join(name), &args, &env) {
        Ok(node) => node,
        Err(stderr) => panic!("{name} did not start:\n{stderr}"),
    }
}

/// Each test's objects under a prefix of their own.
fn prefix_of(dir: &tempfile::TempDir) -> String {
    let name = dir.path().file_name().unwrap().to_string_lossy();
    format!("tests/{}", name.trim_start_matches('.'))
}

fn holds(node: &Node, digest: &str) -> bool {
    node.data_dir.join("blobs").join(digest).is_file()
}

fn partial_is_empty(node: &Node) -> bool {
    match std::fs::read_dir(node.data_dir.join("blobs/partial")) {
        Ok(entries) => entries.count() == 0,
        Err(_) => true,
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `len` bytes that differ with `seed`.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Downloads blob `digest` through `client` into a file (the client checks
/// the digest) and returns its bytes.
async fn download(client: &Api, digest: &str, dir: &Path) -> Vec<u8> {
    let file: PathBuf = dir.join(format!("download-{digest}"));
    let info = client.get_blob_to_file(digest, &file).await.unwrap();
    assert_eq!(info.digest, digest);
    let got = std::fs::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    got
}

// ---- Tests ------------------------------------------------------------

/// Three nodes keep their blobs in the store: uploads, downloads from a
/// node that never had the blob, a job's input and output, the uploading
/// node killed after the answer, a corrupted object, the store gone.
#[test]
fn three_nodes_keep_their_blobs_in_the_s3_store() {
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let s3 = moto.client();
    let dir = tempfile::tempdir().unwrap();
    let prefix = prefix_of(&dir);
    let n1 = start(&dir, "n1", None, &moto, &[]);
    let n2 = start(&dir, "n2", Some(&n1), &moto, &[]);
    let n3 = start(&dir, "n3", Some(&n1), &moto, &[]);
    let mut n1 = Some(n1);
    let (c1, c2, c3) = (
        Api::new(&n1.as_ref().unwrap().url),
        Api::new(&n2.url),
        Api::new(&n3.url),
    );
    let rt = runtime();
    rt.block_on(converge_via(&c1, "3 live nodes and 3 voters", |c| {
        live(c).len() == 3 && c.voters.len() == 3
    }));

    // A 20 MiB upload (three parts): in the bucket whole, on no other
    // node's disk.
    let big = bytes(1, 20 << 20);
    let big_digest = hex_sha256(&big);
    let info = rt.block_on(c1.put_blob(big.clone().into())).unwrap();
    assert_eq!(
        (info.digest.as_str(), info.bytes),
        (big_digest.as_str(), big.len() as u64)
    );
    let big_key = key(&prefix, &big_digest);
    assert_eq!(
        rt.block_on(object_size(&s3, &big_key)),
        Some(big.len() as u64)
    );
    assert!(
        !holds(&n2, &big_digest) && !holds(&n3, &big_digest),
        "copied to other nodes"
    );

    // n2 never had it: fetched from the store, checked, served whole.
    assert_eq!(rt.block_on(download(&c2, &big_digest, dir.path())), big);
    assert!(
        holds(&n2, &big_digest),
        "n2 keeps what it fetched as a cache"
    );
    // A HEAD on n3 answers from the store without copying.
    let head = rt.block_on(c3.head_blob(&big_digest)).unwrap().unwrap();
    assert_eq!(head.bytes, big.len() as u64);
    assert!(!holds(&n3, &big_digest));

    // A job reads its input blob and writes an output blob, both in the
    // store.
    let job = rt.block_on(async {
        let wordcount = upload(&c1, "wordcount").await;
        let text = support::text::sample(256 << 10);
        let input = c1.put_blob(text.into()).await.unwrap();
        let submit = SubmitRequest::new(&wordcount).input_blob(&input.digest);
        let id = c1.submit(&submit).await.unwrap().id;
        support::settle(&c1, id).await
    });
    assert_eq!(job.state, "succeeded", "{job:#?}");
    assert_eq!(job.outputs.len(), 1, "{job:#?}");
    let output = &job.outputs[0];
    let output_key = key(&prefix, &output.digest);
    assert_eq!(
        rt.block_on(object_size(&s3, &output_key)),
        Some(output.bytes)
    );
    let read = rt.block_on(download(&c3, &output.digest, dir.path()));
    assert_eq!(read.len() as u64, output.bytes);

    // n1, which took the upload, killed (-9) after the answer: nothing is
    // lost, n3 (which never had it) serves it.
    n1.as_mut().unwrap().kill();
    assert!(!holds(&n3, &big_digest));
    assert_eq!(rt.block_on(download(&c3, &big_digest, dir.path())), big);
    eventually("n2 or n3 to host the master", OBSERVE, || {
        match [&n2, &n3].iter().any(|n| !n.events("hosting").is_empty()) {
            true => Ok(()),
            false => Err("none yet"),
        }
    });

    // An object changed in the bucket: refused, never served, nothing of
    // it kept; an upload of the blob repairs it.
    let small = bytes(2, 1 << 20);
    let small_digest = hex_sha256(&small);
    rt.block_on(c2.put_blob(small.clone().into())).unwrap();
    let small_key = key(&prefix, &small_digest);
    let forged = bytes(3, 1 << 20);
    rt.block_on(s3.put(&small_key, forged.into())).unwrap();
    let refused = rt
        .block_on(c3.get_blob_to_file(&small_digest, &dir.path().join("forged")))
        .unwrap_err();
    assert_eq!(refused.code(), "blob_store_corrupt", "{refused}");
    assert!(!holds(&n3, &small_digest));
    eventually("n3's partial/ to be empty", OBSERVE, || {
        partial_is_empty(&n3).then_some(()).ok_or("files left")
    });
    let again = rt.block_on(c2.put_blob(small.clone().into())).unwrap();
    assert_eq!(again.digest, small_digest);
    assert_eq!(rt.block_on(download(&c3, &small_digest, dir.path())), small);

    // The store gone: an upload is refused as retryable, and nothing of
    // it stays on the node, listed or on disk.
    drop(moto);
    let lost = bytes(4, 100_000);
    let lost_digest = hex_sha256(&lost);
    let refused = rt.block_on(c2.put_blob(lost.into())).unwrap_err();
    assert_eq!(refused.code(), "blob_store_unavailable", "{refused}");
    assert!(refused.retryable(), "{refused}");
    assert!(!holds(&n2, &lost_digest));
    let listed = rt.block_on(c2.list_blobs()).unwrap();
    assert!(listed.iter().all(|b| b.digest != lost_digest), "{listed:?}");
    // What n2 holds it still serves.
    assert_eq!(rt.block_on(download(&c2, &big_digest, dir.path())), big);
}

/// The store's garbage collection, by the node hosting the master: an
/// object the cluster never kept and a blob deleted through the API go
/// after the grace (10 s); a blob kept for its retention (30 s) stays
/// until then, and then goes too; a key that names no blob is left alone.
#[test]
fn the_store_loses_what_the_cluster_does_not_keep_after_the_grace() {
    let moto = Moto::start();
    moto.create_bucket(BUCKET);
    let s3 = moto.client();
    let dir = tempfile::tempdir().unwrap();
    let prefix = prefix_of(&dir);
    let node = start(
        &dir,
        "n1",
        None,
        &moto,
        &["--retention", "30s", "--blob-grace", "10s"],
    );
    node.wait_event("hosting", &[]);
    let client = Api::new(&node.url);
    let rt = runtime();

    let orphan = bytes(10, 4096);
    let orphan_key = key(&prefix, &hex_sha256(&orphan));
    let stray = ObjectPath::from(format!("{prefix}/sha256/README"));
    let (dropped_key, kept_key) = rt.block_on(async {
        s3.put(&orphan_key, orphan.into()).await.unwrap();
        s3.put(&stray, b"not a blob".to_vec().into()).await.unwrap();
        let kept = client.put_blob(bytes(11, 4096).into()).await.unwrap();
        let dropped = client.put_blob(bytes(12, 4096).into()).await.unwrap();
        let deleted = client.delete_blob(&dropped.digest).await.unwrap();
        assert!(deleted.deleted, "{deleted:?}");
        (key(&prefix, &dropped.digest), key(&prefix, &kept.digest))
    });
    for gone in [&orphan_key, &dropped_key] {
        eventually(&format!("{gone} deleted"), OBSERVE, || {
            match rt.block_on(object_size(&s3, gone)) {
                None => Ok(()),
                Some(_) => Err("still there"),
            }
        });
    }
    // The kept blob's retention runs 30 s from its upload: still there.
    assert!(
        rt.block_on(object_size(&s3, &kept_key)).is_some(),
        "kept blob deleted early"
    );
    eventually(
        "the kept blob deleted after its retention",
        OBSERVE,
        || match rt.block_on(object_size(&s3, &kept_key)) {
            None => Ok(()),
            Some(_) => Err("still there"),
        },
    );
    assert!(
        rt.block_on(object_size(&s3, &stray)).is_some(),
        "a stray key was deleted"
    );
}

/// A node refuses to start with a malformed `--blob-store`, or a bucket
/// that is not there, saying which.
#[test]
fn a_malformed_store_or_a_missing_bucket_stops_the_node() {
    let moto = Moto::start();
    let dir = tempfile::tempdir().unwrap();
    let env = moto.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for (name, url, says) in [
        ("bad", "s3://Not_A_Bucket/x", "is not s3://bucket/prefix"),
        (
            "missing",
            "s3://no-such-bucket/x",
            "s3://no-such-bucket/x cannot be listed",
        ),
    ] {
        let started = Node::try_start_env(&dir.path().join(name), &["--blob-store", url], &env);
        match started {
            Ok(_) => panic!("{url}: the node started"),
            Err(stderr) => assert!(stderr.contains(says), "{url}: {stderr}"),
        }
    }
}
