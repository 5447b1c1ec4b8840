//! A small HTTP/1.1 server on 127.0.0.1 for the tests of jobs' outbound
//! calls: it reads each request whole, records it, and answers with what
//! the test's `answer` function writes (over TLS when given a
//! configuration). Each connection has its own thread and a read timeout,
//! so nothing a test leaves open outlives it for long; dropping the server
//! stops its accept loop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest a connection waits for the next bytes of a request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One request as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Its method.
    pub method: String,
    /// Its path (with the query, as sent).
    pub path: String,
    /// Its `Host` header.
    pub host: String,
    /// Its other headers but `content-length`, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
}

impl Seen {
    /// The value of header `name` (lowercase), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How a server answers: it writes the whole answer to `writer` for the
/// request `seen`; `stop` turns true when the server is dropped (for an
/// answer that waits on purpose).
pub type Answer = dyn Fn(&Seen, &mut dyn Write, &AtomicBool) -> std::io::Result<()> + Send + Sync;

/// A running server.
pub struct Server {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// A plain HTTP server answering with `answer`.
    pub fn start(
        answer: impl Fn(&Seen, &mut dyn Write, &AtomicBool) -> std::io::Result<()>
        + Send
        + Sync
        + 'static,
    ) -> Server {
        Server::start_with(None, Arc::new(answer))
    }

    /// A server answering with `answer`, over TLS with `tls` when given.
    pub fn start_with(tls: Option<Arc<rustls::ServerConfig>>, answer: Arc<Answer>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (log, done) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let (log, done, tls, answer) =
                    (log.clone(), done.clone(), tls.clone(), answer.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(READ_TIMEOUT));
                    match tls {
                        None => serve(stream, &log, &done, &*answer),
                        Some(config) => {
                            let Ok(session) = rustls::ServerConnection::new(config) else {
                                return;
                            };
                            let stream = rustls::StreamOwned::new(session, stream);
                            serve(stream, &log, &done, &*answer)
                        }
                    }
                });
            }
        });
        Server { addr, seen, stop }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request it read, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Reads requests from `stream` until it ends, recording and answering
/// each; stops at the first error either way.
fn serve(stream: impl Read + Write, log: &Mutex<Vec<Seen>>, stop: &AtomicBool, answer: &Answer) {
    let mut reader = BufReader::new(stream);
    while let Some(seen) = read_request(&mut reader) {
        log.lock().unwrap().push(seen.clone());
        if answer(&seen, reader.get_mut(), stop).is_err() {
            return;
        }
    }
}

/// The next whole request on `reader`; `None` when the stream ends or
/// breaks first.
pub fn read_request(reader: &mut impl BufRead) -> Option<Seen> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let (mut host, mut length, mut headers) = (String::new(), 0usize, Vec::new());
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((header, ""));
        let (name, value) = (name.to_ascii_lowercase(), value.trim().to_owned());
        match name.as_str() {
            "host" => host = value,
            "content-length" => length = value.parse().unwrap_or(0),
            _ => headers.push((name, value)),
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        host,
        headers,
        body,
    })
}

/// Writes a whole answer: `status` (e.g. `200 OK`), `headers` and `body`.
pub fn respond(
    writer: &mut dyn Write,
    status: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())?;
    writer.write_all(body)
}
