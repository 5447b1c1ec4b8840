//! Blobs end to end, against real `cohort node` processes on loopback:
//! large uploads streamed in (declared length or chunked) and out (whole or
//! by one range), stored once per node under their sha256; refused uploads
//! and requests with their codes, leaving nothing behind; the answer to an
//! upload only once a majority of the back-end nodes holds the blob (with
//! sealed node-to-node streams, and through cuts); a front-end-only node
//! fetching what it lacks; and back-end nodes killed while uploads run.
//!
//! Blobs here are made by [`Pattern`]: any byte of one can be computed from
//! its offset, so the large ones (tens of MiB) are streamed from a
//! generator and checked against it, never held whole. What a client would not send (bad headers,
//! bodies cut short, a trickle) goes over a raw socket ([`Raw`]).

mod support;

use cohort::client::Node as Api;
use cohort::client::types::{BlobInfo, ScheduleRequest, SubmitRequest};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use support::upload;
use support::{
    CONVERGE, EVENT_WAIT, Node, OBSERVE, converge, converge_members, converge_via, cut_off,
    eventually, eventually_async, gossip, infos, live, runtime, start, start_with,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

const ALL: &str = "back-end,worker,front-end";

/// Longest a raw socket waits to write or to read the next bytes.
const IO_WAIT: Duration = Duration::from_secs(60);

/// The single-node tests share the machine; the ones with a cluster have
/// it alone, so that their nodes' failure detection measures the nodes, not
/// a machine busy hashing another test's blobs.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

// ---- Blobs made of a pattern ------------------------------------------

/// The bytes of a blob: `len` of them, byte `i` a function of `seed` and
/// `i` alone (so any range can be made again to check it).
#[derive(Debug, Clone, Copy)]
struct Pattern {
    seed: u64,
    len: u64,
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Pattern {
    fn new(seed: u64, len: u64) -> Self {
        Self { seed, len }
    }

    /// Fills `buf` with the bytes from `offset` on.
    fn fill(&self, offset: u64, buf: &mut [u8]) {
        let (mut at, mut i) = (offset, 0);
        while i < buf.len() {
            let word = splitmix(self.seed.rotate_left(32) ^ (at / 8)).to_le_bytes();
            let from = (at % 8) as usize;
            let n = (8 - from).min(buf.len() - i);
            buf[i..i + n].copy_from_slice(&word[from..from + n]);
            i += n;
            at += n as u64;
        }
    }

    /// Bytes `start..end` (a small range).
    fn bytes(&self, start: u64, end: u64) -> Vec<u8> {
        let mut out = vec![0; (end - start) as usize];
        self.fill(start, &mut out);
        out
    }

    /// All of it, for the small blobs only.
    fn all(&self) -> Vec<u8> {
        self.bytes(0, self.len)
    }

    /// Its sha256 (hex), computed by streaming it.
    fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        let mut reader = self.reader();
        let mut buf = vec![0; 1 << 20];
        loop {
            let n = Read::read(&mut reader, &mut buf).unwrap();
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        hex(&hasher.finalize())
    }

    fn info(&self) -> BlobInfo {
        BlobInfo {
            digest: self.digest(),
            bytes: self.len,
        }
    }

    fn reader(&self) -> PatternReader {
        PatternReader {
            pattern: *self,
            at: 0,
        }
    }

    /// Panics unless `got` is bytes `offset..` of the pattern.
    fn check(&self, offset: u64, got: &[u8], what: &str) {
        let mut expected = vec![0; got.len()];
        self.fill(offset, &mut expected);
        if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
            panic!(
                "{what}: byte {} is {:#04x}, not {:#04x}",
                offset + i as u64,
                got[i],
                expected[i]
            );
        }
    }

    /// Panics unless the file at `path` holds exactly the pattern.
    fn check_file(&self, path: &Path) {
        let mut file = std::fs::File::open(path).unwrap();
        assert_eq!(
            file.metadata().unwrap().len(),
            self.len,
            "{}",
            path.display()
        );
        let mut buf = vec![0; 1 << 20];
        let mut at = 0;
        loop {
            let n = file.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            self.check(at, &buf[..n], &path.display().to_string());
            at += n as u64;
        }
    }

    /// Writes it to a file in `dir`; returns the file's path.
    fn file(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        let mut file = std::fs::File::create(&path).unwrap();
        std::io::copy(&mut self.reader(), &mut file).unwrap();
        path
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A [`Pattern`] read from its start, as a file would be (blocking or
/// async).
struct PatternReader {
    pattern: Pattern,
    at: u64,
}

impl Read for PatternReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.pattern.len - self.at).min(buf.len().min(256 << 10) as u64) as usize;
        self.pattern.fill(self.at, &mut buf[..n]);
        self.at += n as u64;
        Ok(n)
    }
}

impl AsyncRead for PatternReader {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let n = Read::read(this, buf.initialize_unfilled()).unwrap();
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// Reads blob `digest` (or `range` of it) through `client` whole and
/// checks it against `pattern`; returns how many bytes came.
async fn check_download(
    client: &Api,
    pattern: &Pattern,
    digest: &str,
    range: Option<(u64, Option<u64>)>,
) -> u64 {
    let mut reader = client.get_blob(digest, range).await.unwrap();
    let served = reader.range();
    assert_eq!(reader.info().bytes, pattern.len, "{reader:?}");
    assert_eq!(reader.info().digest, digest);
    let mut buf = vec![0; 1 << 20];
    let mut at = served.start;
    loop {
        let n = reader.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        let what = format!("blob {digest} from {} ({range:?})", client.server());
        pattern.check(at, &buf[..n], &what);
        at += n as u64;
    }
    assert_eq!(at, served.end, "{range:?} of {}", client.server());
    at - served.start
}

// ---- The node's disk --------------------------------------------------

fn blobs_dir(node: &Node) -> PathBuf {
    node.data_dir.join("blobs")
}

/// The names of the blobs stored in the node's `blobs/` (all but
/// `partial/`), sorted.
fn stored_files(node: &Node) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(blobs_dir(node))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != "partial")
        .collect();
    names.sort();
    names
}

/// The files in the node's `blobs/partial/` and their sizes.
fn partial_files(node: &Node) -> Vec<(String, u64)> {
    match std::fs::read_dir(blobs_dir(node).join("partial")) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| {
                let len = e.metadata().map_or(0, |m| m.len());
                (e.file_name().to_string_lossy().into_owned(), len)
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn holds(node: &Node, digest: &str) -> bool {
    blobs_dir(node).join(digest).is_file()
}

/// Waits (bounded) until the node holds blob `digest`: after a range of
/// it was read through a node without a copy, which goes on copying.
fn wait_holds(node: &Node, digest: &str) {
    eventually(
        &format!("{} to hold {digest}", node.name()),
        EVENT_WAIT,
        || holds(node, digest).then_some(()).ok_or("not yet"),
    );
}

/// Waits (bounded) until nothing is left in the node's `blobs/partial/`.
fn wait_no_partial(node: &Node) {
    eventually(
        &format!("{}'s blobs/partial/ to be empty", node.name()),
        EVENT_WAIT,
        || match partial_files(node) {
            files if files.is_empty() => Ok(()),
            files => Err(format!("{files:?}")),
        },
    );
}

fn sorted(mut blobs: Vec<BlobInfo>) -> Vec<BlobInfo> {
    blobs.sort_by(|a, b| a.digest.cmp(&b.digest));
    blobs
}

// ---- Raw HTTP ---------------------------------------------------------

/// An answer read off a raw socket.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{self}: {e}"))
    }

    /// Asserts an error answer of `status` with `code`, in the API's JSON
    /// error shape; returns its body.
    fn assert_error(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status, status, "{self}");
        let body = self.json();
        assert_eq!(body["code"], code, "{self}");
        assert!(body["message"].is_string(), "{self}");
        assert!(body["retryable"].is_boolean(), "{self}");
        body
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} ", self.status, self.headers)?;
        match std::str::from_utf8(&self.body) {
            Ok(text) if text.len() <= 2000 => write!(f, "{text}"),
            _ => write!(f, "<{} bytes>", self.body.len()),
        }
    }
}

/// One HTTP/1.1 exchange on its own connection, written by hand.
struct Raw {
    stream: TcpStream,
}

impl Raw {
    fn connect(node: &Node) -> Raw {
        let stream = TcpStream::connect(node.url.trim_start_matches("http://")).unwrap();
        stream.set_read_timeout(Some(IO_WAIT)).unwrap();
        stream.set_write_timeout(Some(IO_WAIT)).unwrap();
        Raw { stream }
    }

    /// Writes a request head (`Connection: close` added).
    fn head(&mut self, method: &str, path: &str, headers: &[(&str, &str)]) {
        let mut text =
            format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
        for (name, value) in headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str("\r\n");
        self.stream.write_all(text.as_bytes()).unwrap();
    }

    /// Reads the answer to a request with `method`.
    fn reply(&self, method: &str) -> Reply {
        read_reply(&self.stream, method)
    }

    /// Writes the body in a thread with `write` while the answer is read
    /// here: a node may answer before the body is through (a refusal).
    /// Returns the answer and what the writer met.
    fn exchange(
        self,
        method: &str,
        write: impl FnOnce(&mut TcpStream) -> std::io::Result<()> + Send + 'static,
    ) -> (Reply, std::io::Result<()>) {
        let mut writer = self.stream.try_clone().unwrap();
        let writing = std::thread::spawn(move || write(&mut writer));
        let reply = self.reply(method);
        // Unblocks a writer the node stopped reading from.
        let _ = self.stream.shutdown(Shutdown::Both);
        (reply, writing.join().unwrap())
    }
}

fn read_reply(stream: &TcpStream, method: &str) -> Reply {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status: u16 = (line.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a status line: {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap();
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut reply = Reply {
        status,
        headers,
        body: Vec::new(),
    };
    if method == "HEAD" || status == 204 || status == 304 {
        return reply;
    }
    if reply
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap(), 16).unwrap();
            if size == 0 {
                break;
            }
            let start = reply.body.len();
            reply.body.resize(start + size, 0);
            reader.read_exact(&mut reply.body[start..]).unwrap();
            let mut crlf = [0; 2];
            reader.read_exact(&mut crlf).unwrap();
        }
    } else if let Some(length) = reply.header("content-length") {
        let length: usize = length.parse().unwrap();
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        reply.body = body;
    } else {
        reader.read_to_end(&mut reply.body).unwrap();
    }
    reply
}

/// A request with a small body (its length declared) and its answer.
fn call(node: &Node, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut raw = Raw::connect(node);
    let length = body.len().to_string();
    let mut all = headers.to_vec();
    if !body.is_empty() || method == "PUT" || method == "POST" {
        all.push(("content-length", &length));
    }
    raw.head(method, path, &all);
    let body = body.to_vec();
    raw.exchange(method, move |s| s.write_all(&body)).0
}

/// `PUT /v1/blobs` of what `reader` gives: with `length` declared, or
/// chunked (in pieces of up to 256 KiB) without.
fn put_streamed(
    node: &Node,
    mut reader: impl Read + Send + 'static,
    length: Option<u64>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut raw = Raw::connect(node);
    let declared = length.map(|n| n.to_string());
    let mut all = headers.to_vec();
    match &declared {
        Some(n) => all.push(("content-length", n)),
        None => all.push(("transfer-encoding", "chunked")),
    }
    raw.head("PUT", "/v1/blobs", &all);
    let (reply, written) = raw.exchange("PUT", move |s| {
        let mut buf = vec![0; 256 << 10];
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            if length.is_some() {
                s.write_all(&buf[..n])?;
            } else {
                s.write_all(format!("{n:x}\r\n").as_bytes())?;
                s.write_all(&buf[..n])?;
                s.write_all(b"\r\n")?;
            }
        }
        if length.is_none() {
            s.write_all(b"0\r\n\r\n")?;
        }
        s.flush()
    });
    if reply.status < 300 {
        written.unwrap();
    }
    reply
}

fn put_raw(node: &Node, bytes: &[u8], headers: &[(&str, &str)]) -> Reply {
    call(node, "PUT", "/v1/blobs", headers, bytes)
}

fn list_raw(node: &Node) -> Vec<BlobInfo> {
    let reply = call(node, "GET", "/v1/blobs", &[], b"");
    assert_eq!(reply.status, 200, "{reply}");
    let list: cohort::client::types::BlobList = serde_json::from_slice(&reply.body).unwrap();
    sorted(infos(list.blobs))
}

fn blob_path(digest: &str) -> String {
    format!("/v1/blobs/{digest}")
}

// ---- One node ---------------------------------------------------------

/// A blob of 50 MiB, streamed in twice (its length declared, then
/// chunked) and once more through the client: stored once; read back
/// whole and by each form of range; `HEAD`; and the empty blob.
#[test]
fn a_large_blob_is_stored_once_and_served_whole_and_by_ranges() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir, "n1", ALL, None);
    let rt = runtime();
    let client = Api::new(&node.url);
    let big = Pattern::new(1, 50 << 20);
    let size = big.len;
    let digest = big.digest();
    let expected = json!({"digest": digest, "bytes": size});

    // Its length declared, its digest named: new here.
    let first = put_streamed(
        &node,
        big.reader(),
        Some(size),
        &[("x-cohort-sha256", &digest)],
    );
    assert_eq!(first.status, 201, "{first}");
    assert_eq!(first.json(), expected);
    assert_eq!(stored_files(&node), std::slice::from_ref(&digest));
    // The same bytes again, chunked, no digest named: already stored.
    let again = put_streamed(&node, big.reader(), None, &[]);
    assert_eq!(again.status, 200, "{again}");
    assert_eq!(again.json(), expected);
    // And through the client, streamed from a reader.
    let info = rt.block_on(client.put_blob_stream(big.reader())).unwrap();
    assert_eq!(info, big_info(&digest, size));
    // One copy, listed once; nothing left half-written.
    assert_eq!(stored_files(&node), std::slice::from_ref(&digest));
    wait_no_partial(&node);
    assert_eq!(list_raw(&node), [big_info(&digest, size)]);
    rt.block_on(async {
        assert_eq!(
            infos(client.list_blobs().await.unwrap()),
            [big_info(&digest, size)]
        );
        assert_eq!(
            client.head_blob(&digest).await.unwrap(),
            Some(big_info(&digest, size))
        );
    });

    // Whole, into a file the client checks the digest of.
    let downloaded = dir.path().join("downloaded");
    let got = rt
        .block_on(client.get_blob_to_file(&digest, &downloaded))
        .unwrap();
    assert_eq!(got, big_info(&digest, size));
    big.check_file(&downloaded);
    std::fs::remove_file(&downloaded).unwrap();

    // Ranges through the client: the first bytes, one in the middle, one
    // running past the end (cut to it), one open-ended.
    rt.block_on(async {
        let middle = 20 << 20;
        for (range, length) in [
            ((0, Some(99)), 100),
            ((middle, Some(middle + 999_999)), 1_000_000),
            ((size - 10, Some(size + 1000)), 10),
            ((size - 300_000, None), 300_000),
            ((size - 1, None), 1),
        ] {
            assert_eq!(
                check_download(&client, &big, &digest, Some(range)).await,
                length
            );
        }
    });

    // The headers, raw: a range, a suffix (`-n`), and `HEAD`.
    let etag = format!("\"{digest}\"");
    let ranged = call(
        &node,
        "GET",
        &blob_path(&digest),
        &[("range", "bytes=1000-1999")],
        b"",
    );
    assert_eq!(ranged.status, 206, "{ranged}");
    assert_eq!(
        ranged.header("content-range"),
        Some(&*format!("bytes 1000-1999/{size}"))
    );
    assert_eq!(ranged.header("content-length"), Some("1000"));
    assert_eq!(ranged.header("etag"), Some(&*etag));
    assert_eq!(ranged.body, big.bytes(1000, 2000));
    let suffix = call(
        &node,
        "GET",
        &blob_path(&digest),
        &[("range", "bytes=-777")],
        b"",
    );
    assert_eq!(suffix.status, 206, "{suffix}");
    let suffix_range = format!("bytes {}-{}/{size}", size - 777, size - 1);
    assert_eq!(suffix.header("content-range"), Some(&*suffix_range));
    assert_eq!(suffix.body, big.bytes(size - 777, size));
    let head = call(&node, "HEAD", &blob_path(&digest), &[], b"");
    assert_eq!(head.status, 200, "{head}");
    assert_eq!(head.header("content-length"), Some(&*size.to_string()));
    assert_eq!(head.header("etag"), Some(&*etag));
    assert_eq!(head.header("accept-ranges"), Some("bytes"));
    assert_eq!(head.header("content-range"), None);

    // The empty blob is a blob: stored, listed, served.
    let empty = sha256(b"");
    let put = put_raw(&node, b"", &[]);
    assert_eq!(put.status, 201, "{put}");
    assert_eq!(put.json(), json!({"digest": empty, "bytes": 0}));
    assert_eq!(
        put_raw(&node, b"", &[("x-cohort-sha256", &empty)]).status,
        200
    );
    let whole = call(&node, "GET", &blob_path(&empty), &[], b"");
    assert_eq!(whole.status, 200, "{whole}");
    assert_eq!(whole.header("content-length"), Some("0"));
    assert_eq!(whole.header("etag"), Some(&*format!("\"{empty}\"")));
    assert!(whole.body.is_empty());
    let head = call(&node, "HEAD", &blob_path(&empty), &[], b"");
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("0"))
    );
    let past = call(
        &node,
        "GET",
        &blob_path(&empty),
        &[("range", "bytes=0-")],
        b"",
    );
    past.assert_error(416, "range_not_satisfiable");
    assert_eq!(past.header("content-range"), Some("bytes */0"));
    rt.block_on(async {
        let reader = client.get_blob(&empty, None).await.unwrap();
        assert!(reader.is_empty(), "{reader:?}");
        let listed = sorted(infos(client.list_blobs().await.unwrap()));
        let both = sorted(vec![big_info(&digest, size), big_info(&empty, 0)]);
        assert_eq!(listed, both);
    });
    let mut files = vec![digest, empty];
    files.sort();
    assert_eq!(stored_files(&node), files);
}

fn big_info(digest: &str, bytes: u64) -> BlobInfo {
    BlobInfo {
        digest: digest.to_owned(),
        bytes,
    }
}

/// Every bad upload and request on a node with a ceiling of 1 MiB, each
/// refused with its code and leaving nothing stored; the node serves
/// throughout.
#[test]
fn bad_uploads_and_requests_are_refused_and_leave_nothing_behind() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    let node = start_with(&dir, "n1", ALL, None, &["--blob-bytes-max", "1MiB"]);
    let rt = runtime();
    let client = Api::new(&node.url);
    const MIB: u64 = 1 << 20;
    let nothing_stored = |when: &str| {
        assert_eq!(list_raw(&node), [], "{when}");
        assert_eq!(stored_files(&node), Vec::<String>::new(), "{when}");
    };

    // Bytes that are not the ones the header names.
    let other = sha256(b"other bytes");
    let mismatch = put_raw(&node, b"some bytes", &[("x-cohort-sha256", &other)]);
    let body = mismatch.assert_error(422, "blob_digest_mismatch");
    assert_eq!(body["retryable"], false, "{mismatch}");
    // A header that is no digest at all: a bad request.
    let garbled = put_raw(&node, b"some bytes", &[("x-cohort-sha256", "not-hex")]);
    garbled.assert_error(400, "bad_request");
    // The same in a chunked body's trailer (as the Rust client and
    // `cohort blob put -` send a stream's digest): bytes that are not the
    // trailer's, a trailer that is no digest, a trailer that contradicts
    // the header, and a trailer section past hyper's 16 KiB.
    let mine = sha256(b"some bytes");
    let trailed = |header: Option<&str>, trailer: &str| {
        let mut raw = Raw::connect(&node);
        let mut headers = vec![
            ("transfer-encoding", "chunked"),
            ("trailer", "x-cohort-sha256"),
        ];
        headers.extend(header.map(|digest| ("x-cohort-sha256", digest)));
        raw.head("PUT", "/v1/blobs", &headers);
        let body = format!("a\r\nsome bytes\r\n0\r\nx-cohort-sha256: {trailer}\r\n\r\n");
        raw.stream.write_all(body.as_bytes()).unwrap();
        raw.reply("PUT")
    };
    let mismatch = trailed(None, &other);
    mismatch.assert_error(422, "blob_digest_mismatch");
    trailed(None, "not-hex").assert_error(400, "bad_request");
    let contradicted = trailed(Some(&mine), &other);
    let body = contradicted.assert_error(400, "bad_request");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("another digest than the header"),
        "{contradicted}"
    );
    let padded = format!("{mine}\r\nx-padding: {}", "p".repeat(20 << 10));
    trailed(None, &padded).assert_error(400, "bad_request");
    wait_no_partial(&node);
    nothing_stored("after digest mismatches");

    // A declared length over the ceiling: refused on the head alone (no
    // byte of the body is sent).
    let mut raw = Raw::connect(&node);
    let over = (MIB + 1).to_string();
    raw.head("PUT", "/v1/blobs", &[("content-length", &over)]);
    raw.reply("PUT").assert_error(413, "blob_too_large");
    // A chunked body that passes it.
    let past = put_streamed(&node, Pattern::new(2, MIB + 300_000).reader(), None, &[]);
    past.assert_error(413, "blob_too_large");
    wait_no_partial(&node);
    nothing_stored("after uploads over the ceiling");

    // Bodies cut short: the connection closes before the declared length,
    // or before a chunked body's last chunk. Each is seen in progress
    // (its file under partial/) before it is cut.
    let half = Pattern::new(3, MIB / 2).all();
    for chunked in [false, true] {
        let mut raw = Raw::connect(&node);
        let length = MIB.to_string();
        let framing = if chunked {
            ("transfer-encoding", "chunked")
        } else {
            ("content-length", length.as_str())
        };
        raw.head("PUT", "/v1/blobs", &[framing]);
        if chunked {
            raw.stream
                .write_all(format!("{:x}\r\n", half.len()).as_bytes())
                .unwrap();
            raw.stream.write_all(&half).unwrap();
            raw.stream.write_all(b"\r\n").unwrap();
        } else {
            raw.stream.write_all(&half).unwrap();
        }
        raw.stream.flush().unwrap();
        eventually(
            "the upload under way in partial/",
            EVENT_WAIT,
            || match partial_files(&node) {
                files if !files.is_empty() => Ok(()),
                files => Err(format!("{files:?}")),
            },
        );
        drop(raw);
        wait_no_partial(&node);
        nothing_stored(&format!(
            "after a cut {} upload",
            if chunked { "chunked" } else { "declared" }
        ));
    }

    // At the ceiling exactly is allowed, chunked or declared.
    let at_ceiling = Pattern::new(4, MIB);
    let ceiling_digest = at_ceiling.digest();
    let put = put_streamed(&node, at_ceiling.reader(), None, &[]);
    assert_eq!(put.status, 201, "{put}");
    let put = put_streamed(&node, at_ceiling.reader(), Some(MIB), &[]);
    assert_eq!(put.status, 200, "{put}");
    assert_eq!(put.json(), json!({"digest": ceiling_digest, "bytes": MIB}));

    // Ranges that start past the end.
    let small = Pattern::new(5, 1000);
    let small_digest = rt
        .block_on(client.put_blob(small.all().into()))
        .unwrap()
        .digest;
    for range in ["bytes=1000-", "bytes=1000-2000", "bytes=5000-6000"] {
        let reply = call(
            &node,
            "GET",
            &blob_path(&small_digest),
            &[("range", range)],
            b"",
        );
        reply.assert_error(416, "range_not_satisfiable");
        assert_eq!(
            reply.header("content-range"),
            Some("bytes */1000"),
            "{range}"
        );
    }
    let last = call(
        &node,
        "GET",
        &blob_path(&small_digest),
        &[("range", "bytes=999-")],
        b"",
    );
    assert_eq!(last.status, 206, "{last}");
    assert_eq!(last.header("content-range"), Some("bytes 999-999/1000"));
    assert_eq!(last.body, small.bytes(999, 1000));

    // Digests that are malformed, or name nothing stored.
    let unknown = sha256(b"never uploaded");
    let malformed = [
        "not-a-digest",
        &small_digest[..63],
        &format!("{small_digest}0"),
        "zz",
    ];
    for digest in malformed.iter().copied().chain([unknown.as_str()]) {
        let reply = call(&node, "GET", &blob_path(digest), &[], b"");
        let body = reply.assert_error(404, "blob_not_found");
        assert_eq!(body["retryable"], false, "{reply}");
        let head = call(&node, "HEAD", &blob_path(digest), &[], b"");
        assert_eq!(head.status, 404, "{digest}: {head}");
        assert!(head.body.is_empty());
    }
    rt.block_on(async {
        assert_eq!(client.head_blob(&unknown).await.unwrap(), None);
        let error = client.get_blob(&unknown, None).await.unwrap_err();
        assert_eq!(error.code(), "blob_not_found", "{error}");
    });

    // Methods the blob resources do not have.
    for (method, path, allow) in [
        ("PUT", blob_path(&small_digest), "GET, HEAD, DELETE"),
        ("PATCH", blob_path(&small_digest), "GET, HEAD, DELETE"),
        ("POST", "/v1/blobs".to_string(), "GET, PUT"),
    ] {
        let reply = call(&node, method, &path, &[], b"x");
        reply.assert_error(405, "method_not_allowed");
        assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
    }

    // Bytes that are their trailer's are stored.
    let good = trailed(Some(&mine), &mine);
    assert_eq!(good.status, 201, "{good}");
    assert_eq!(good.json()["digest"], mine.as_str(), "{good}");

    // The node still serves, and holds exactly what was accepted.
    assert_eq!(call(&node, "GET", "/healthz", &[], b"").status, 200);
    let mut expected = vec![
        big_info(&ceiling_digest, MIB),
        big_info(&small_digest, 1000),
        big_info(&mine, 10),
    ];
    expected = sorted(expected);
    assert_eq!(list_raw(&node), expected);
    let files: Vec<String> = expected.iter().map(|b| b.digest.clone()).collect();
    assert_eq!(stored_files(&node), files);
    wait_no_partial(&node);
    rt.block_on(async {
        check_download(&client, &small, &small_digest, None).await;
        check_download(&client, &at_ceiling, &ceiling_digest, None).await;
    });
}

/// A digest is 64 hex digits: one with a sign in it (`+0` for `00`, as
/// Rust's `u8::from_str_radix` would read it) names no blob, in a path
/// (`404 blob_not_found`) or in `X-Cohort-Sha256` (the upload is refused).
#[test]
fn a_digest_with_a_plus_sign_is_malformed() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir, "n1", ALL, None);
    let client = Api::new(&node.url);
    // A blob whose digest has a pair of digits starting with 0.
    let (blob, at) = (70..)
        .map(|seed| Pattern::new(seed, 100))
        .find_map(|p| {
            let digest = p.digest();
            let at = (0..32).map(|i| 2 * i).find(|&i| &digest[i..i + 1] == "0")?;
            Some((p, at))
        })
        .unwrap();
    let digest = blob.digest();
    let signed = format!("{}+{}", &digest[..at], &digest[at + 1..]);
    assert_eq!(signed.len(), 64);
    runtime()
        .block_on(client.put_blob(blob.all().into()))
        .unwrap();
    let mut wrong = Vec::new();
    let got = call(&node, "GET", &blob_path(&signed), &[], b"");
    if got.status != 404 {
        wrong.push(format!("GET {}: {got}", blob_path(&signed)));
    }
    let head = call(&node, "HEAD", &blob_path(&signed), &[], b"");
    if head.status != 404 {
        wrong.push(format!("HEAD {}: {head}", blob_path(&signed)));
    }
    let put = put_raw(&node, &blob.all(), &[("x-cohort-sha256", &signed)]);
    // A malformed X-Cohort-Sha256 is a bad request, not a mismatch.
    if put.status != 400 {
        wrong.push(format!("PUT with X-Cohort-Sha256: {signed}: {put}"));
    }
    assert!(
        wrong.is_empty(),
        "a malformed digest was taken for {digest}:\n{}",
        wrong.join("\n")
    );
}

/// An upload that trickles in below the least rate (1 MiB/s after 10 s)
/// is refused with `request_timeout`, and nothing is kept. (The other
/// `request_timeout`, no byte at all for 30 s, is not tried here: it
/// takes 30 s.)
#[test]
fn an_upload_trickling_below_the_least_rate_is_refused() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    let node = start(&dir, "n1", ALL, None);
    let mut raw = Raw::connect(&node);
    raw.head("PUT", "/v1/blobs", &[("content-length", "100000")]);
    // One byte every 200 ms: refused once the body is past its deadline,
    // about 11 s in. The writer stops when the answer has come (its socket
    // is shut) or after 60 s.
    let (reply, _) = raw.exchange("PUT", move |s| {
        for _ in 0..300 {
            s.write_all(b"t")?;
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    });
    let body = reply.assert_error(408, "request_timeout");
    assert_eq!(body["retryable"], true, "{reply}");
    wait_no_partial(&node);
    assert_eq!(list_raw(&node), []);
    assert_eq!(stored_files(&node), Vec::<String>::new());
}

// ---- Clusters ---------------------------------------------------------

fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("cluster.key");
    std::fs::write(&path, cohort::security::key::generate()).unwrap();
    path
}

/// Three back-end nodes (all roles) seeded by the first, `extra` flags on
/// each.
fn three(dir: &tempfile::TempDir, extra: &[&str]) -> (Node, Node, Node) {
    let n1 = start_with(dir, "n1", ALL, None, extra);
    let n2 = start_with(dir, "n2", ALL, Some(&n1), extra);
    let n3 = start_with(dir, "n3", ALL, Some(&n1), extra);
    (n1, n2, n3)
}

/// Waits until `client`'s node sees `nodes` live nodes and the three
/// back-end nodes as voters.
async fn three_voters(client: &Api, nodes: usize) {
    let what = format!("{nodes} live nodes and 3 voters");
    converge_via(client, &what, |c| {
        live(c).len() == nodes && c.voters.len() == 3
    })
    .await;
}

/// How many of `nodes` hold blob `digest` on disk.
fn holders(nodes: &[&Node], digest: &str) -> Vec<String> {
    (nodes.iter())
        .filter(|n| holds(n, digest))
        .map(|n| n.name())
        .collect()
}

/// Waits (bounded) until each of `nodes` lists blob `info`.
async fn wait_listed(clients: &[&Api], info: &BlobInfo) {
    for client in clients {
        let what = format!("{} to list {}", client.server(), info.digest);
        eventually_async(&what, OBSERVE, async || {
            let listed = client.list_blobs().await.map_err(|e| e.to_string())?;
            if infos(listed.clone()).contains(info) {
                Ok(())
            } else {
                Err(format!("{listed:?}"))
            }
        })
        .await;
    }
}

/// With the cluster key (sealed node-to-node streams, tokens): an upload
/// through n1 is answered once a majority holds it and every back-end node
/// ends up with it; a front-end-only node fetches it and pushes its own
/// uploads, sealed; a blob pushed without the key is refused; n1 killed,
/// n2 and n3 serve the blob byte for byte and still take uploads.
#[test]
fn with_the_cluster_key_an_upload_is_answered_once_a_majority_holds_it() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let keyed = ["--cluster-key", key.to_str().unwrap()];
    let (mut n1, n2, n3) = three(&dir, &keyed);
    let n4 = start_with(&dir, "n4", "front-end", Some(&n1), &keyed);
    let token = support::token_at(&n1.url, &key, "admin");
    let with_token = |node: &Node| Api::with_options(&node.url, Some(&token), None).unwrap();
    let (c1, c2, c3, c4) = (
        with_token(&n1),
        with_token(&n2),
        with_token(&n3),
        with_token(&n4),
    );
    let rt = runtime();
    rt.block_on(async {
        three_voters(&c1, 4).await;
        converge_via(&c4, "4 live nodes", |c| live(c).len() == 4).await;
    });

    let blob = Pattern::new(21, 12 << 20);
    let source = blob.file(dir.path(), "source");
    let info = rt.block_on(c1.put_blob_file(&source)).unwrap();
    assert_eq!(info, blob.info());
    // Answered: n1 and at least one other already hold it.
    let held = holders(&[&n1, &n2, &n3], &info.digest);
    assert!(
        held.len() >= 2 && held.contains(&"n1".into()),
        "held by {held:?}"
    );
    // In the end, all three.
    eventually(
        "all three nodes to hold the blob",
        OBSERVE,
        || match holders(&[&n1, &n2, &n3], &info.digest) {
            held if held.len() == 3 => Ok(()),
            held => Err(format!("held by {held:?}")),
        },
    );
    rt.block_on(wait_listed(&[&c1, &c2, &c3], &info));

    // The front-end-only n4 fetches it (a sealed stream) when asked, and
    // its own upload is pushed (sealed) to a majority before it answers.
    rt.block_on(async {
        assert!(!holds(&n4, &info.digest));
        let range = (5 << 20, Some((5 << 20) + 99_999));
        check_download(&c4, &blob, &info.digest, Some(range)).await;
        wait_holds(&n4, &info.digest);
        let up = Pattern::new(23, 2 << 20);
        let stored = c4.put_blob(up.all().into()).await.unwrap();
        assert_eq!(stored, up.info());
        let held = holders(&[&n1, &n2, &n3], &stored.digest);
        assert!(held.len() >= 2, "held by {held:?} when answered");
    });

    // Tokens: reading needs `read`, uploading `submit`; none is refused.
    let reader = support::token_at(&n1.url, &key, "read");
    let read_only = Api::with_options(&n2.url, Some(&reader), None).unwrap();
    rt.block_on(async {
        assert!(infos(read_only.list_blobs().await.unwrap()).contains(&info));
        check_download(&read_only, &blob, &info.digest, Some((0, Some(9)))).await;
        let refused = read_only.put_blob(b"not allowed".to_vec().into()).await;
        assert_eq!(refused.unwrap_err().code(), "forbidden");
        let anonymous = Api::new(&n2.url);
        let refused = anonymous.get_blob(&info.digest, None).await.unwrap_err();
        assert_eq!(refused.code(), "unauthorized");
        let refused = anonymous.put_blob(b"not allowed".to_vec().into()).await;
        assert_eq!(refused.unwrap_err().code(), "unauthorized");
    });
    assert!(!holds(&n2, &sha256(b"not allowed")));

    // A blob pushed without the key is refused, and not kept.
    let forged = b"pushed by a stranger".to_vec();
    let forged_digest = sha256(&forged);
    let mut writer = cohort::cluster::blob_transfer::FrameWriter::new(None);
    let head = cohort::cluster::blob_transfer::BlobHead {
        digest: Sha256::digest(&forged).into(),
        bytes: forged.len() as u64,
    };
    let context = cohort::peer::request_context(b"POST", b"/internal/v1/blobs");
    let mut frames = writer.head(&context, &head).to_vec();
    frames.extend_from_slice(&writer.chunk(&forged, true));
    let pushed = call(
        &n2,
        "POST",
        "/internal/v1/blobs",
        &[("content-type", cohort::peer::FRAMES_CONTENT_TYPE)],
        &frames,
    );
    assert_eq!(pushed.status, 401, "{pushed}");
    assert!(!holds(&n2, &forged_digest));
    wait_no_partial(&n2);

    // n1 dies: n2 and n3 serve the blob whole, byte for byte.
    n1.kill();
    rt.block_on(async {
        for (client, name) in [(&c2, "from-n2"), (&c3, "from-n3")] {
            let path = dir.path().join(name);
            let got = client.get_blob_to_file(&info.digest, &path).await.unwrap();
            assert_eq!(got, info);
            assert_eq!(
                std::fs::read(&path).unwrap(),
                std::fs::read(&source).unwrap()
            );
        }
        // Two of the three back-end nodes left: still a majority for a new
        // upload.
        let next = Pattern::new(22, 3 << 20);
        let stored = c2.put_blob(next.all().into()).await.unwrap();
        assert_eq!(stored, next.info());
        let held = holders(&[&n2, &n3], &stored.digest);
        assert_eq!(held, ["n2", "n3"]);
        check_download(&c3, &next, &stored.digest, None).await;
    });
}

/// Without a key, through cuts: n1 cut off from n2 still has a majority
/// with n3 (and n2 does not get the blob then, but fetches it from a
/// back-end node when asked); cut off from both, its upload is refused as
/// `replication_failed`; healed, the same bytes reach a majority.
#[test]
fn an_upload_is_answered_only_once_a_majority_of_back_ends_holds_it() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let (n1, n2, n3) = three(&dir, &[]);
    let (c1, c2, c3) = (Api::new(&n1.url), Api::new(&n2.url), Api::new(&n3.url));
    let rt = runtime();
    rt.block_on(three_voters(&c1, 3));
    let cut = |others: &[&Node]| {
        cut_off(&dir, "n1", others);
        let addresses: Vec<String> = others.iter().map(|n| gossip(n)).collect();
        eventually("n1 to apply its cut", EVENT_WAIT, || {
            let applied = (n1.events("partition").last())
                .map(|e| e["cut_off"].clone())
                .unwrap_or_default();
            let count = applied.matches("127.0.0.1:").count();
            if count == addresses.len() && addresses.iter().all(|a| applied.contains(a.as_str())) {
                Ok(())
            } else {
                Err(format!("cut off from {applied:?}"))
            }
        });
    };

    // n1 cannot reach n2: n3's copy makes the majority.
    cut(&[&n2]);
    let one = Pattern::new(31, 2 << 20);
    let info = rt.block_on(c1.put_blob(one.all().into())).unwrap();
    assert_eq!(holders(&[&n1, &n2, &n3], &info.digest), ["n1", "n3"]);
    // n2, asked for it, fetches it from a back-end node that has it.
    rt.block_on(async {
        check_download(&c2, &one, &info.digest, Some((1000, Some(1999)))).await;
        wait_holds(&n2, &info.digest);
        check_download(&c2, &one, &info.digest, None).await;
    });

    // n1 reaches neither: the upload is refused, retryable, and no other
    // node got it.
    cut(&[&n2, &n3]);
    let two = Pattern::new(32, 2 << 20);
    let two_digest = two.digest();
    let refused = rt.block_on(c1.put_blob(two.all().into())).unwrap_err();
    assert_eq!(refused.code(), "replication_failed", "{refused}");
    assert!(refused.retryable(), "{refused}");
    assert_eq!(holders(&[&n2, &n3], &two_digest), Vec::<String>::new());

    // Healed: the same bytes again reach a majority.
    cut(&[]);
    rt.block_on(async {
        converge(&n1, "n1 seeing 3 live nodes again", |c| live(c).len() == 3).await;
        let what = "the upload to be answered after healing";
        let stored = eventually_async(what, CONVERGE, async || {
            c1.put_blob(two.all().into())
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        assert_eq!(stored, two.info());
        let held = holders(&[&n1, &n2, &n3], &two_digest);
        assert!(held.len() >= 2, "held by {held:?}");
        check_download(&c3, &two, &two_digest, None).await;
    });
}

/// A front-end-only node holds no blob until asked: it fetches one from
/// the back-end node (its digest checked) and serves it as the copy is
/// made, ranges included; an upload through it lands on the back-end node
/// before it is answered.
#[test]
fn a_front_end_fetches_blobs_from_the_back_end_and_uploads_land_there() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let back = start(&dir, "back", "back-end,worker,front-end", None);
    let front = start(&dir, "front", "front-end", Some(&back));
    let (cb, cf) = (Api::new(&back.url), Api::new(&front.url));
    let rt = runtime();
    rt.block_on(converge(&front, "both nodes live", |c| live(c).len() == 2));

    // Uploaded through the back-end; the front-end has no copy yet.
    let blob = Pattern::new(41, 6 << 20);
    let info = rt
        .block_on(cb.put_blob_file(&blob.file(dir.path(), "blob")))
        .unwrap();
    assert!(!holds(&front, &info.digest));
    assert_eq!(list_raw(&front), []);
    rt.block_on(async {
        // The cluster's listing, through the node with no copy, shows it:
        // the master's registry, a page at a time.
        let kept = cf.kept_blobs(None, None).await.unwrap();
        assert_eq!(infos(kept.blobs.clone()), std::slice::from_ref(&info));
        assert_eq!(
            (kept.blobs[0].kept, kept.blobs[0].refs, kept.next),
            (Some(true), Some(0), None)
        );
        assert!(kept.blobs[0].collect_at.is_some());
        let past = cf.kept_blobs(Some(&info.digest), Some(1)).await.unwrap();
        assert!(past.blobs.is_empty() && past.next.is_none());
        for query in [
            "scope=everywhere",
            "scope=cluster&limit=0",
            "scope=cluster&after=xyz",
        ] {
            let path = format!("/v1/blobs?{query}");
            let refused = cf
                .call(hyper::Method::GET, &path, "", Default::default())
                .await;
            match refused {
                Err(cohort::client::ClientError::Api {
                    status: 400, code, ..
                }) => assert_eq!(code, "bad_request"),
                other => panic!("{query}: {other:?}"),
            }
        }
        let listed = front.cli(&["blob", "ls", "--cluster"], b"");
        let out = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.status.success() && out.contains(&info.digest),
            "{out}"
        );
        let node_only = front.cli(&["blob", "ls"], b"");
        assert_eq!(
            String::from_utf8_lossy(&node_only.stdout).trim(),
            "no blobs"
        );
        // A HEAD asks a back-end node for the size, and copies nothing.
        assert_eq!(
            cf.head_blob(&info.digest).await.unwrap(),
            Some(info.clone())
        );
        assert!(!holds(&front, &info.digest));
        // A range: served once the copy reaches it; the copy goes on.
        let middle = (3 << 20, Some((3 << 20) + 65_535));
        assert_eq!(
            check_download(&cf, &blob, &info.digest, Some(middle)).await,
            65_536
        );
        wait_holds(&front, &info.digest);
        assert_eq!(
            infos(cf.list_blobs().await.unwrap()),
            std::slice::from_ref(&info)
        );
        let path = dir.path().join("via-front");
        assert_eq!(
            cf.get_blob_to_file(&info.digest, &path).await.unwrap(),
            info
        );
        blob.check_file(&path);
        assert_eq!(
            cf.head_blob(&info.digest).await.unwrap(),
            Some(info.clone())
        );
        // What no back-end node holds is not found.
        let unknown = sha256(b"nowhere");
        let error = cf.get_blob(&unknown, None).await.unwrap_err();
        assert_eq!(error.code(), "blob_not_found", "{error}");
    });
    wait_no_partial(&front);

    // A whole blob the front-end lacks is served while it copies it. A
    // reader that took its first MiB and stops holds the copy back (it
    // waits for the download), so the copy is not done; read to its end,
    // the copy was stored before the last byte came.
    let large = Pattern::new(43, 64 << 20);
    let big = (rt.block_on(cb.put_blob_file(&large.file(dir.path(), "large")))).unwrap();
    rt.block_on(async {
        let mut reader = cf.get_blob(&big.digest, None).await.unwrap();
        let mut buf = vec![0; 1 << 20];
        let mut at = 0;
        let mut read_to = async |to: u64, at: &mut u64| {
            while *at < to {
                let n = reader.read(&mut buf).await.unwrap();
                assert!(n > 0, "the download ended at {at} of {}", large.len);
                large.check(*at, &buf[..n], "the large blob through the front-end");
                *at += n as u64;
            }
        };
        read_to(1 << 20, &mut at).await;
        assert!(
            !holds(&front, &big.digest),
            "the front-end's copy ran ahead of its download"
        );
        read_to(large.len, &mut at).await;
        assert_eq!(at, large.len);
        assert!(
            holds(&front, &big.digest),
            "stored before its last byte is served"
        );
    });

    // A copy that does not have its digest (the back-end's file damaged
    // on its disk) ends the download short of its length: the client
    // gets an error, never the whole wrong bytes, and the front-end keeps
    // nothing.
    let damaged = Pattern::new(44, 8 << 20);
    let bad = (rt.block_on(cb.put_blob_file(&damaged.file(dir.path(), "damaged")))).unwrap();
    let file = blobs_dir(&back).join(&bad.digest);
    let mut permissions = std::fs::metadata(&file).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&file, permissions).unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[5 << 20] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let got: Result<u64, String> = rt.block_on(async {
        let mut reader = cf
            .get_blob(&bad.digest, None)
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0; 1 << 20];
        let mut at = 0;
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => return Ok(at),
                Ok(n) => at += n as u64,
                Err(error) => return Err(format!("at {at}: {error}")),
            }
        }
    });
    assert!(got.is_err(), "a damaged copy was served whole: {got:?}");
    wait_no_partial(&front);
    assert!(!holds(&front, &bad.digest));

    // Uploaded through the front-end (chunked): on the back-end when
    // answered.
    let up = Pattern::new(42, 5 << 20);
    let stored = rt.block_on(cf.put_blob_stream(up.reader())).unwrap();
    assert_eq!(stored, up.info());
    assert!(
        holds(&back, &stored.digest),
        "the back-end holds it once answered"
    );
    rt.block_on(async {
        assert!(infos(cb.list_blobs().await.unwrap()).contains(&stored));
        check_download(&cb, &up, &stored.digest, None).await;
    });
}

/// Back-end nodes killed (SIGKILL) while uploads run: one receiving the
/// copy of an upload (then restarted), the one pushing copies, and the one
/// taking an upload's body. An upload is answered or not; one answered is
/// readable from the survivors, one not answered is nowhere half-kept
/// (every `partial/` empties, whatever is listed reads back whole), and
/// the blobs stored before are intact.
#[test]
fn back_ends_killed_during_uploads_lose_no_acknowledged_blob() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let (n1, n2, n3) = three(&dir, &[]);
    let (mut n1, mut n2, mut n3) = (Some(n1), Some(n2), Some(n3));
    let api = |node: &Option<Node>| Api::new(&node.as_ref().unwrap().url);
    let rt = runtime();
    rt.block_on(three_voters(&api(&n1), 3));
    let before = Pattern::new(51, 3 << 20);
    let before_info = rt.block_on(api(&n1).put_blob(before.all().into())).unwrap();
    let all_three = [
        n1.as_ref().unwrap(),
        n2.as_ref().unwrap(),
        n3.as_ref().unwrap(),
    ];
    eventually(
        "all three nodes to hold the first blob",
        OBSERVE,
        || match holders(&all_three, &before_info.digest) {
            held if held.len() == 3 => Ok(()),
            held => Err(format!("held by {held:?}")),
        },
    );
    // Blobs every survivor must serve whole, with their patterns.
    let mut kept = vec![(before, before_info.digest.clone())];

    // 1. n3 killed while n1's copy streams to it (or once it holds it, if
    // the copy was quicker than the test), then restarted.
    let first = Pattern::new(52, 24 << 20);
    let acked = upload_and_kill(&rt, &api(&n1), first, n3.as_mut().unwrap(), &[]);
    survivors_hold(&rt, &[&n1, &n2], &first, acked, &kept);
    kept.extend(acked.then(|| (first, first.digest())));
    // Restarted, n3 keeps no part of what it was receiving.
    n3 = Some(start(&dir, "n3", ALL, n1.as_ref()));
    assert_eq!(partial_files(n3.as_ref().unwrap()), []);
    rt.block_on(converge(n1.as_ref().unwrap(), "n3 back", |c| {
        live(c).len() == 3
    }));
    survivors_hold(&rt, &[&n3], &first, acked, &kept);

    // 2. n1 killed while it pushes an upload's copies to n2 and n3.
    let second = Pattern::new(53, 24 << 20);
    let receivers = [n2.as_ref().unwrap(), n3.as_ref().unwrap()];
    let acked = upload_and_kill(&rt, &api(&n1), second, n1.as_mut().unwrap(), &receivers);
    survivors_hold(&rt, &[&n2, &n3], &second, acked, &kept);
    kept.extend(acked.then(|| (second, second.digest())));

    // 3. n2 killed while it takes an upload: the body stops half way (the
    // rest waits on the test) and n2 dies with the half on its disk.
    let third = Pattern::new(54, 16 << 20);
    let (mut feed, body) = tokio::io::duplex(256 << 10);
    let release = Arc::new(tokio::sync::Notify::new());
    let writer = rt.spawn({
        let release = release.clone();
        async move {
            let (mut reader, mut buf) = (third.reader(), vec![0; 256 << 10]);
            let mut sent = 0;
            loop {
                if sent == third.len / 2 {
                    release.notified().await;
                }
                let n = Read::read(&mut reader, &mut buf)?;
                if n == 0 {
                    return feed.shutdown().await;
                }
                feed.write_all(&buf[..n]).await?;
                sent += n as u64;
            }
        }
    });
    let upload = rt.spawn({
        let c2 = api(&n2);
        async move { c2.put_blob_stream(body).await }
    });
    eventually("n2 to write the first half", OBSERVE, || {
        let partial = partial_files(n2.as_ref().unwrap());
        if partial.iter().any(|(_, len)| *len >= 4 << 20) {
            Ok(())
        } else {
            Err(format!("{partial:?}"))
        }
    });
    n2.as_mut().unwrap().kill();
    release.notify_one();
    let outcome = rt.block_on(upload).unwrap();
    assert!(outcome.is_err(), "answered by a killed node: {outcome:?}");
    // The writer ends: its reader is gone (or it finished).
    let _ = rt.block_on(writer).unwrap();
    // No copy of it left n2.
    survivors_hold(&rt, &[&n3], &third, false, &kept);
    assert!(!holds(n3.as_ref().unwrap(), &third.digest()));
}

/// Uploads `pattern` through `client` (chunked, from a reader) and kills
/// `victim` once the upload is under way: once one of `receivers` (the
/// victim itself if none) has a copy arriving in its `partial/` or
/// holding it, or the upload was answered. Returns whether it was
/// answered (and checks the answer).
fn upload_and_kill(
    rt: &tokio::runtime::Runtime,
    client: &Api,
    pattern: Pattern,
    victim: &mut Node,
    receivers: &[&Node],
) -> bool {
    let digest = pattern.digest();
    let upload = rt.spawn({
        let client = client.clone();
        async move { client.put_blob_stream(pattern.reader()).await }
    });
    let seen = eventually("a copy under way", OBSERVE, || {
        let watched: Vec<&Node> = if receivers.is_empty() {
            vec![&*victim]
        } else {
            receivers.to_vec()
        };
        for node in watched {
            let partial = partial_files(node);
            if partial.iter().any(|(_, len)| *len > 0) || holds(node, &digest) {
                return Ok(format!(
                    "{}: partial {partial:?}, holds it: {}",
                    node.name(),
                    holds(node, &digest)
                ));
            }
        }
        if upload.is_finished() {
            return Ok("the upload answered".to_string());
        }
        Err("no copy yet".to_string())
    });
    victim.kill();
    let outcome = rt.block_on(upload).unwrap();
    eprintln!(
        "{} killed when {seen}; the upload: {outcome:?}",
        victim.name()
    );
    match outcome {
        Ok(info) => {
            assert_eq!(info, big_info(&digest, pattern.len));
            true
        }
        Err(_) => false,
    }
}

/// Checks the survivors after a kill during the upload of `pattern`: no
/// part of it is left in their `partial/`; if `acked`, each serves it whole
/// (holding it or fetching it from another); whatever lists it reads it
/// back whole; and each serves the `kept` blobs whole.
fn survivors_hold(
    rt: &tokio::runtime::Runtime,
    survivors: &[&Option<Node>],
    pattern: &Pattern,
    acked: bool,
    kept: &[(Pattern, String)],
) {
    let digest = pattern.digest();
    for node in survivors {
        let node = node.as_ref().unwrap();
        wait_no_partial(node);
        let client = Api::new(&node.url);
        rt.block_on(async {
            let listed = client.list_blobs().await.unwrap();
            if acked || listed.iter().any(|b| b.digest == digest) {
                check_download(&client, pattern, &digest, None).await;
            }
            for (pattern, digest) in kept {
                check_download(&client, pattern, digest, None).await;
            }
        });
    }
}

/// The answer to an upload comes once a majority of the back-end nodes
/// holds it, also through a front-end-only node: one that sees a single
/// live back-end node of three (the two others killed) refuses the upload,
/// as a back-end node does.
#[test]
fn a_front_end_seeing_one_back_end_of_three_does_not_acknowledge_an_upload() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let (n1, mut n2, mut n3) = three(&dir, &[]);
    let front = start(&dir, "front", "front-end", Some(&n1));
    let (c1, cf) = (Api::new(&n1.url), Api::new(&front.url));
    let rt = runtime();
    rt.block_on(async {
        three_voters(&c1, 4).await;
        converge(&front, "4 live nodes", |c| live(c).len() == 4).await;
        // With all three: answered once two hold it.
        let blob = Pattern::new(61, 1 << 20);
        let stored = cf.put_blob(blob.all().into()).await.unwrap();
        let held = holders(&[&n1, &n2, &n3], &stored.digest);
        assert!(held.len() >= 2, "held by {held:?} when answered");
    });
    n2.kill();
    n3.kill();
    let late = Pattern::new(62, 1 << 20);
    rt.block_on(async {
        converge_members(&n1, "n2 and n3 gone", |c| live(c) == ["n1", "front"]).await;
        converge_members(&front, "n2 and n3 gone", |c| live(c) == ["n1", "front"]).await;
        // The membership is still told without a quorum, with the reason
        // the master can not say which workers it knows.
        let told = converge_members(&n1, "the master unable to answer", |c| {
            c.master_error.is_some()
        })
        .await;
        assert!(told.workers.is_empty(), "{told:?}");
        // A back-end node knows the three voters: it refuses.
        let refused = c1.put_blob(late.all().into()).await.unwrap_err();
        assert_eq!(refused.code(), "replication_failed", "{refused}");
    });
    rt.block_on(async {
        // So must the front-end: one back-end node of three is no majority.
        let answer = cf.put_blob(late.all().into()).await;
        let held = holders(&[&n1], &late.digest());
        match answer {
            Err(refused) => assert_eq!(refused.code(), "replication_failed", "{refused}"),
            Ok(info) => panic!(
                "the front-end acknowledged {info:?} while only {held:?} of the three back-end nodes hold it"
            ),
        }
    });
}

// ---- Which blobs the cluster keeps ------------------------------------

/// Garbage collection after retention, across a take-over: three nodes
/// keep finished jobs and idle blobs for 10 s (`--retention`), and delete
/// copies the cluster no longer keeps 10 s after they last stored them
/// (`--blob-grace`, its least). A blob a job names can not be deleted while the job
/// is held; a blob nothing names is deleted on request; the master's node
/// is killed, and its successor still collects, on every surviving node,
/// the blob nothing names (10 s after its upload) and, later, the job's
/// input and output blobs (10 s after the job is purged), not before; a
/// collected blob can no longer be named by a submission until it is
/// uploaded again.
#[test]
fn blobs_are_collected_after_retention_across_a_take_over() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let (n1, n2, n3) = three(&dir, &["--retention", "10s", "--blob-grace", "10s"]);
    let mut n1 = Some(n1);
    let rt = runtime();
    let c1 = Api::new(&n1.as_ref().unwrap().url);
    let c2 = Api::new(&n2.url);
    rt.block_on(three_voters(&c1, 3));
    n1.as_ref().unwrap().wait_event("hosting", &[]);

    let idle = Pattern::new(71, 1 << 20);
    let n1_node = n1.as_ref().unwrap();
    let (idle_info, input, job, deleted) = rt.block_on(async {
        let wordcount = upload(&c1, "wordcount").await;
        let idle_info = c1.put_blob(idle.all().into()).await.unwrap();
        let text = support::text::sample(64 << 10);
        let input = c1.put_blob(text.into()).await.unwrap();
        let submit = SubmitRequest::new(&wordcount).input_blob(&input.digest);
        let id = c1.submit(&submit).await.unwrap().id;
        let job = support::settle(&c1, id).await;
        assert_eq!(job.state, "succeeded", "{job:#?}");
        assert_eq!(job.outputs.len(), 1, "{job:#?}");

        // Named by a held job: not deleted on request.
        let error = c1.delete_blob(&input.digest).await.unwrap_err();
        assert_eq!(error.code(), "blob_in_use", "{error}");
        let error = c1.delete_blob(&job.outputs[0].digest).await.unwrap_err();
        assert_eq!(error.code(), "blob_in_use", "{error}");
        // Named by nothing: deleted on request, once.
        let other = c1
            .put_blob(Pattern::new(72, 4096).all().into())
            .await
            .unwrap();
        let gone = c1.delete_blob(&other.digest).await.unwrap();
        assert!(gone.deleted && gone.digest == other.digest, "{gone:?}");
        let error = c1.delete_blob(&other.digest).await.unwrap_err();
        assert_eq!(error.code(), "blob_not_found", "{error}");
        assert!(
            c1.delete_blob("../schedules/x").await.is_err(),
            "checked by the client"
        );
        let reply = call(n1_node, "DELETE", "/v1/blobs/not-a-digest", &[], b"");
        reply.assert_error(404, "blob_not_found");

        // The listing says what the cluster keeps.
        let listed = c1.list_blobs().await.unwrap();
        let entry = |digest: &str| listed.iter().find(|e| e.digest == digest).cloned();
        let idle_entry = entry(&idle_info.digest).expect("the idle blob is listed");
        assert_eq!((idle_entry.kept, idle_entry.refs), (Some(true), Some(0)));
        assert!(idle_entry.collect_at.is_some(), "{idle_entry:?}");
        let input_entry = entry(&input.digest).expect("the input blob is listed");
        assert_eq!((input_entry.kept, input_entry.refs), (Some(true), Some(1)));
        assert_eq!(input_entry.collect_at, None, "{input_entry:?}");
        (idle_info, input, job, other)
    });

    // The master's node dies; another takes over.
    n1.as_mut().unwrap().kill();
    let survivors = [&n2, &n3];
    eventually("another node to host the master", OBSERVE, || {
        let hosts: Vec<_> = (survivors.iter())
            .filter(|n| !n.events("hosting").is_empty())
            .map(|n| n.name())
            .collect();
        if hosts.is_empty() {
            Err("none yet")
        } else {
            Ok(())
        }
    });

    // The deleted blob and the idle one go from every survivor's disk.
    for digest in [&deleted.digest, &idle_info.digest] {
        eventually(&format!("{digest} deleted"), OBSERVE, || {
            match holders(&survivors, digest) {
                held if held.is_empty() => Ok(()),
                held => Err(format!("still held by {held:?}")),
            }
        });
    }
    // The job's blobs, named for 10 s more at least, are still there.
    for digest in [&input.digest, &job.outputs[0].digest] {
        assert_eq!(
            holders(&survivors, digest).len(),
            2,
            "{digest} kept while named"
        );
    }
    n2.wait_event("blobs_deleted", &[]);
    // Then the job is purged, and 10 s later its blobs go too.
    for digest in [&input.digest, &job.outputs[0].digest] {
        eventually(
            &format!("{digest} deleted after the job"),
            OBSERVE,
            || match holders(&survivors, digest) {
                held if held.is_empty() => Ok(()),
                held => Err(format!("still held by {held:?}")),
            },
        );
    }

    rt.block_on(async {
        // A collected blob can not be named, until it is uploaded again.
        let wordcount = upload(&c2, "wordcount").await;
        let submit = SubmitRequest::new(&wordcount).input_blob(&idle_info.digest);
        let error = c2.submit(&submit).await.unwrap_err();
        assert_eq!(error.code(), "blob_not_found", "{error}");
        let again = c2.put_blob(idle.all().into()).await.unwrap();
        assert_eq!(again, idle_info);
        let accepted = c2.submit(&submit).await.unwrap();
        assert!(!accepted.existing, "{accepted:?}");
    });
}

/// An admin purges a blob finished jobs name: refused while a schedule
/// gives it to its jobs, then the job that read it is purged, the one that
/// wrote it (itself) forgets it, and the node deletes its copy after its
/// grace; through the API and `cohort blob rm --purge`.
#[test]
fn a_blob_finished_jobs_name_is_purged_and_its_copy_deleted() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    let node = start_with(&dir, "n1", ALL, None, &["--blob-grace", "10s"]);
    let client = Api::new(&node.url);
    let rt = runtime();
    let (input, output) = rt.block_on(async {
        let wordcount = upload(&client, "wordcount").await;
        let text = support::text::sample(16 << 10);
        let input = client.put_blob(text.into()).await.unwrap();
        let submit = SubmitRequest::new(&wordcount).input_blob(&input.digest);
        let id = client.submit(&submit).await.unwrap().id;
        let job = support::settle(&client, id).await;
        assert_eq!((job.state.as_str(), job.outputs.len()), ("succeeded", 1));
        let output = job.outputs[0].digest.clone();

        // A schedule gives the input to its jobs: not purged.
        let schedule = ScheduleRequest {
            name: "nightly".into(),
            every_ms: Some(3_600_000),
            job: submit.clone(),
            ..ScheduleRequest::default()
        };
        client.create_schedule(&schedule).await.unwrap();
        let refused = client.purge_blob(&input.digest).await.unwrap_err();
        assert_eq!(refused.code(), "blob_in_use", "{refused}");
        assert!(
            refused.to_string().contains("schedule \"nightly\""),
            "{refused}"
        );
        client.delete_schedule("nightly").await.unwrap();
        // A plain delete is still refused: a held job names it.
        let refused = client.delete_blob(&input.digest).await.unwrap_err();
        assert_eq!(refused.code(), "blob_in_use", "{refused}");

        // Purged: the job that read it goes with it.
        let purged = client.purge_blob(&input.digest).await.unwrap();
        assert_eq!(
            (purged.purged, purged.jobs, purged.digest.as_str()),
            (true, 1, input.digest.as_str())
        );
        let gone = client.job(id, 0).await.unwrap_err();
        assert_eq!(gone.code(), "job_expired", "{gone}");
        let again = client.purge_blob(&input.digest).await.unwrap_err();
        assert_eq!(again.code(), "blob_not_found", "{again}");
        let resubmitted = client.submit(&submit).await.unwrap_err();
        assert_eq!(resubmitted.code(), "blob_not_found", "{resubmitted}");
        // Nothing names its output now: it is purged through the CLI.
        let out = node.cli(&["blob", "rm", "--purge", &output], b"");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{said}");
        assert!(said.contains("no longer kept; 0 finished job(s)"), "{said}");
        let out = node.cli(&["blob", "rm", "--purge", &output], b"");
        assert!(!out.status.success());
        let reply = call(&node, "POST", "/v1/blobs/not-a-digest/purge", &[], b"");
        reply.assert_error(404, "blob_not_found");
        (input.digest, output)
    });
    // The node deletes its copies once its grace has passed.
    for digest in [&input, &output] {
        eventually(&format!("{digest} deleted"), OBSERVE, || {
            if holds(&node, digest) {
                Err("still held")
            } else {
                Ok(())
            }
        });
    }
}
