//! Egress grants: what a deployment's jobs may reach over HTTP, and the
//! record of each call they made.
//!
//! A grant is written as a URL pattern, `scheme://host[:port][/path]`:
//!
//! * `scheme` is `http` or `https`;
//! * `host` is a DNS name (`api.example.com`), a name under a suffix
//!   (`*.example.com`: one or more labels before `.example.com`, never the
//!   suffix itself), an IPv4 address in its one dotted-decimal form
//!   (`10.0.0.5`) or an IPv6 address in brackets (`[fd00::5]`). A name
//!   whose last label is a number is neither (URL parsers read
//!   `2130706433` or `0x7f.1` as IPv4), so it is refused;
//! * `port` is a number, `*` for any, or the scheme's own (80, 443);
//! * `path` is a prefix of the request path (`/v1/` allows `/v1/charges`;
//!   `/v1` allows `/v1` and `/v1/...`, not `/v1x`), `/` when absent. A
//!   request path with a dot segment (`/v1/../admin`, also percent-encoded)
//!   is refused under any prefix but `/`: the server, not the host, would
//!   decide what it means.
//!
//! With the pattern come the methods it allows (none listed: any) and
//! whether names may resolve to private addresses (`private`): loopback,
//! private, link-local, unique-local and shared addresses are refused for
//! a name unless its grant says `private`; a grant whose host is an address
//! allows that address whatever its range. Checking the address a request
//! really connects to is the host's part (`cohort::runtime::egress`); the
//! master keeps grants and checks their syntax, deterministically.
//!
//! Grants attach to deployment names ([`crate::deployments`]): a job
//! submitted by name runs with its name's grants as they are when it is
//! assigned; a job submitted by digest has none.
//!
//! A grant may carry headers the host adds to every request it allows
//! (`Authorization: Bearer {secret:STRIPE}`): a value is text with
//! `{secret:NAME}` placeholders, filled in by the node that sends the
//! request from the cluster's sealed secrets, so the job never holds the
//! plaintext. Only the operator's grants carry headers; a job narrowing
//! its grants names none ([`HttpGrant::covers`]).

use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::limits::{
    GRANT_HEADER_BYTES_MAX, GRANT_HEADER_NAME_BYTES_MAX, GRANT_HEADERS_MAX, GRANT_METHOD_BYTES_MAX,
    GRANT_METHODS_MAX, GRANT_URL_BYTES_MAX, SECRET_NAME_BYTES_MAX,
};

/// What a grant allows a job to reach.
///
/// Its `Deserialize` is written by hand: grants in bytes of formats before
/// 7 (and snapshots before version 8) have no `record`, and decode with
/// `record: None` ([`crate::protocol`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct HttpGrant {
    /// `http` or `https`.
    pub scheme: String,
    /// Lowercase DNS name, `*.` and a suffix, an IPv4 address, or an IPv6
    /// address without brackets.
    pub host: String,
    /// The port (`None`: any).
    pub port: Option<u16>,
    /// The path prefix, from `/`.
    pub path: String,
    /// Uppercase methods allowed (empty: any).
    pub methods: Vec<String>,
    /// Whether a name may resolve to a private address.
    pub private: bool,
    /// Headers the host sets on every request this grant allows, by
    /// lowercase name, their values templates with `{secret:NAME}`
    /// placeholders ([`HttpGrant::with_headers`]).
    pub headers: Vec<(String, String)>,
    /// Whether the calls it allows are recorded, so that a later attempt
    /// of the job gets a call's recorded response instead of sending it
    /// again (see [`crate::tapes`]); `None`: those whose method is not
    /// `GET`, `HEAD` or `OPTIONS` ([`HttpGrant::records`]).
    pub record: Option<bool>,
}

/// The hand-written `Deserialize` of [`HttpGrant`]: its seven first
/// fields, then `record` if the bytes being decoded have it
/// ([`crate::protocol::legacy::grants_record`]). Postcard lets a struct's
/// visitor stop before its last field.
mod grant_serde {
    use super::HttpGrant;
    use serde::Deserialize;
    use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

    const FIELDS: &[&str] = &[
        "scheme", "host", "port", "path", "methods", "private", "headers", "record",
    ];

    #[derive(Deserialize)]
    #[serde(field_identifier, rename_all = "lowercase")]
    enum Field {
        Scheme,
        Host,
        Port,
        Path,
        Methods,
        Private,
        Headers,
        Record,
        #[serde(other)]
        Other,
    }

    struct GrantVisitor;

    impl<'de> Visitor<'de> for GrantVisitor {
        type Value = HttpGrant;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("struct HttpGrant")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HttpGrant, A::Error> {
            macro_rules! next {
                ($index:expr) => {
                    seq.next_element()?
                        .ok_or_else(|| de::Error::invalid_length($index, &self))?
                };
            }
            let scheme = next!(0);
            let host = next!(1);
            let port = next!(2);
            let path = next!(3);
            let methods = next!(4);
            let private = next!(5);
            let headers = next!(6);
            let record = match crate::protocol::legacy::grants_record() {
                true => next!(7),
                false => None,
            };
            Ok(HttpGrant {
                scheme,
                host,
                port,
                path,
                methods,
                private,
                headers,
                record,
            })
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HttpGrant, A::Error> {
            let mut grant = HttpGrant {
                scheme: String::new(),
                host: String::new(),
                port: None,
                path: String::new(),
                methods: Vec::new(),
                private: false,
                headers: Vec::new(),
                record: None,
            };
            let mut seen = [false; 2];
            while let Some(field) = map.next_key()? {
                match field {
                    Field::Scheme => (grant.scheme, seen[0]) = (map.next_value()?, true),
                    Field::Host => (grant.host, seen[1]) = (map.next_value()?, true),
                    Field::Port => grant.port = map.next_value()?,
                    Field::Path => grant.path = map.next_value()?,
                    Field::Methods => grant.methods = map.next_value()?,
                    Field::Private => grant.private = map.next_value()?,
                    Field::Headers => grant.headers = map.next_value()?,
                    Field::Record => grant.record = map.next_value()?,
                    Field::Other => {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
            }
            match seen {
                [true, true] => Ok(grant),
                [false, _] => Err(de::Error::missing_field("scheme")),
                [_, false] => Err(de::Error::missing_field("host")),
            }
        }
    }

    impl<'de> Deserialize<'de> for HttpGrant {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_struct("HttpGrant", FIELDS, GrantVisitor)
        }
    }
}

/// Header names a grant may not set: the host sets them, or they change
/// how the message is framed.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
];

/// Whether `name` may name a secret: 1 to [`SECRET_NAME_BYTES_MAX`] bytes
/// of `A-Z 0-9 _`, not starting with a digit (as an environment
/// variable's).
pub fn valid_secret_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=SECRET_NAME_BYTES_MAX).contains(&bytes.len())
        && !bytes[0].is_ascii_digit()
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
}

/// `Ok` if `name` may name a secret ([`valid_secret_name`]), else why not,
/// for the one who wrote it.
pub fn check_secret_name(name: &str) -> Result<(), String> {
    match valid_secret_name(name) {
        true => Ok(()),
        false => Err(format!(
            "{name:?} is no secret name (1 to {SECRET_NAME_BYTES_MAX} of A-Z 0-9 _, not starting with a digit)"
        )),
    }
}

/// One piece of a header template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text as it is.
    Text(&'a str),
    /// The value of the secret so named.
    Secret(&'a str),
}

/// The pieces of the header template `value`, or why it is none: text and
/// `{secret:NAME}` placeholders; a `{` that opens no placeholder is text.
pub fn template(value: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find("{secret:") {
        if at > 0 {
            pieces.push(Piece::Text(&rest[..at]));
        }
        let after = &rest[at + "{secret:".len()..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("{value:?}: a {{secret:NAME}} placeholder is not closed"))?;
        let name = &after[..end];
        check_secret_name(name)?;
        pieces.push(Piece::Secret(name));
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

/// One outbound call of an attempt, as recorded: never a body, a query
/// string, a path or a header (any may hold a credential).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpCall {
    /// The request's method.
    pub method: String,
    /// `scheme://host:port` it went to.
    pub origin: String,
    /// The response's status, if one came.
    pub status: Option<u16>,
    /// Why it failed, if it did: a stable code (`egress_denied`,
    /// `egress_timeout`, `egress_response_too_large`, ...).
    pub error: Option<String>,
    /// Request body bytes sent.
    pub sent_bytes: u64,
    /// Response body bytes received.
    pub received_bytes: u64,
    /// From the request to the end of its response (or the failure).
    pub ms: u64,
}

/// A grant's host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantHost<'a> {
    /// One name.
    Name(&'a str),
    /// Any name ending in `.suffix` (the suffix without its dot).
    Suffix(&'a str),
    /// One IPv4 address.
    V4(Ipv4Addr),
    /// One IPv6 address.
    V6(Ipv6Addr),
}

impl HttpGrant {
    /// Parses the pattern `url` with `methods` (any case) and `private`;
    /// the error says what is wrong, for the one who wrote it.
    pub fn parse(url: &str, methods: &[String], private: bool) -> Result<Self, String> {
        if url.len() > GRANT_URL_BYTES_MAX {
            return Err(format!(
                "a grant's URL is at most {GRANT_URL_BYTES_MAX} bytes"
            ));
        }
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?}: a grant is scheme://host[:port][/path]"))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!("{url:?}: the scheme is http or https"));
        }
        if rest.contains(['?', '#', '@', '\\']) || rest.chars().any(|c| c.is_control() || c == ' ')
        {
            return Err(format!(
                "{url:?}: a grant has no user, query, fragment, backslash or space"
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, "/"),
        };
        if path.split('/').any(is_dot_segment) {
            return Err(format!("{url:?}: a grant's path has no . or .. segment"));
        }
        let (host, port) = split_port(authority)
            .ok_or_else(|| format!("{url:?}: the port is a number from 1 to 65535, or *"))?;
        let port = match port {
            Some("*") => None,
            Some(port) => Some(
                port.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0 && port.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| {
                        format!("{url:?}: the port is a number from 1 to 65535, or *")
                    })?,
            ),
            None => Some(if scheme == "https" { 443 } else { 80 }),
        };
        let host = grant_host(host).map_err(|why| format!("{url:?}: {why}"))?;
        if methods.len() > GRANT_METHODS_MAX {
            return Err(format!("a grant lists at most {GRANT_METHODS_MAX} methods"));
        }
        let mut upper = Vec::with_capacity(methods.len());
        for method in methods {
            let method = method.to_ascii_uppercase();
            if method.is_empty()
                || method.len() > GRANT_METHOD_BYTES_MAX
                || !method.bytes().all(|b| b.is_ascii_uppercase())
            {
                return Err(format!(
                    "{method:?} is no HTTP method (1 to {GRANT_METHOD_BYTES_MAX} letters, e.g. GET, POST)"
                ));
            }
            upper.push(method);
        }
        upper.sort();
        upper.dedup();
        Ok(Self {
            scheme,
            host,
            port,
            path: path.to_owned(),
            methods: upper,
            private,
            headers: Vec::new(),
            record: None,
        })
    }

    /// This grant recording the calls it allows (`Some(true)`), never
    /// (`Some(false)`), or by their method (`None`, see
    /// [`records`](Self::records)).
    pub fn with_record(mut self, record: Option<bool>) -> Self {
        self.record = record;
        self
    }

    /// Whether a call with `method` this grant allows is recorded: as its
    /// `record` says, else unless the method is `GET`, `HEAD` or `OPTIONS`
    /// (methods that change nothing, by HTTP's rules).
    pub fn records(&self, method: &str) -> bool {
        self.record
            .unwrap_or(!matches!(method, "GET" | "HEAD" | "OPTIONS"))
    }

    /// This grant setting `headers` (`name`, template) on the requests it
    /// allows; the error says what is wrong. Names are lowercased and
    /// sorted; a name may appear once, and may not be one the host sets
    /// (`host`, `content-length`, ...).
    pub fn with_headers(mut self, headers: &[(String, String)]) -> Result<Self, String> {
        if headers.len() > GRANT_HEADERS_MAX {
            return Err(format!("a grant sets at most {GRANT_HEADERS_MAX} headers"));
        }
        let mut checked = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if name.is_empty()
                || name.len() > GRANT_HEADER_NAME_BYTES_MAX
                || !name.bytes().all(token)
            {
                return Err(format!("{name:?} is no header name"));
            }
            if RESERVED_HEADERS.contains(&name.as_str()) {
                return Err(format!("{name} is set by the host, not by a grant"));
            }
            if value.len() > GRANT_HEADER_BYTES_MAX
                || value.bytes().any(|b| b.is_ascii_control() && b != b'\t')
            {
                return Err(format!(
                    "the value of {name} is at most {GRANT_HEADER_BYTES_MAX} bytes, without control characters"
                ));
            }
            template(value)?;
            checked.push((name, value.clone()));
        }
        checked.sort();
        if checked.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return Err("a grant sets each header once".into());
        }
        self.headers = checked;
        Ok(self)
    }

    /// Whether `other` allows exactly what this grant allows (its headers
    /// aside).
    pub fn same_pattern(&self, other: &HttpGrant) -> bool {
        (
            &self.scheme,
            &self.host,
            self.port,
            &self.path,
            &self.methods,
            self.private,
        ) == (
            &other.scheme,
            &other.host,
            other.port,
            &other.path,
            &other.methods,
            other.private,
        )
    }

    /// The secrets its headers name.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        (self.headers.iter()).flat_map(|(_, value)| {
            template(value)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|piece| match piece {
                    Piece::Secret(name) => Some(name),
                    Piece::Text(_) => None,
                })
        })
    }

    /// The pattern as written back: `scheme://host:port/path`.
    pub fn url(&self) -> String {
        let host = match self.host.contains(':') {
            true => format!("[{}]", self.host),
            false => self.host.clone(),
        };
        let port = self.port.map_or("*".to_owned(), |p| p.to_string());
        format!("{}://{host}:{port}{}", self.scheme, self.path)
    }

    /// The grant's host, told apart.
    pub fn host(&self) -> GrantHost<'_> {
        if let Some(suffix) = self.host.strip_prefix("*.") {
            return GrantHost::Suffix(suffix);
        }
        if let Ok(v4) = self.host.parse() {
            return GrantHost::V4(v4);
        }
        if let Ok(v6) = self.host.parse() {
            return GrantHost::V6(v6);
        }
        GrantHost::Name(&self.host)
    }

    /// Whether a request to `scheme://host:port` with `method` and `path`
    /// (the path without its query) is allowed. `host` is compared as the
    /// request names it (lowercased, without a trailing dot; an IPv6
    /// address without brackets); the address it resolves to is checked
    /// apart (see the module's note).
    pub fn allows(&self, scheme: &str, host: &str, port: u16, method: &str, path: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let host_matches = match self.host() {
            GrantHost::Name(name) => host == name,
            GrantHost::Suffix(suffix) => host
                .strip_suffix(suffix)
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty()),
            GrantHost::V4(v4) => host.parse::<Ipv4Addr>() == Ok(v4),
            GrantHost::V6(v6) => host.parse::<Ipv6Addr>() == Ok(v6),
        };
        host_matches
            && scheme.eq_ignore_ascii_case(&self.scheme)
            && self.port.is_none_or(|p| p == port)
            && (self.methods.is_empty() || self.methods.iter().any(|m| m == method))
            && self.path_allows(path)
    }

    /// Whether everything `narrower` allows, this grant allows too: the
    /// same scheme; its host this host, or a name under this suffix (a
    /// suffix under it); its port this port (any, if this is any); its
    /// path under this path; its methods among these (any, if these are
    /// any); `private` only if this grant has it. A narrower grant sets no
    /// headers and makes no recording choice: the job gets those of the
    /// grants that cover it.
    pub fn covers(&self, narrower: &HttpGrant) -> bool {
        let host = match (self.host(), narrower.host()) {
            (GrantHost::Suffix(wide), GrantHost::Suffix(narrow)) => narrow
                .strip_suffix(wide)
                .is_some_and(|head| head.is_empty() || head.ends_with('.')),
            (GrantHost::Suffix(wide), GrantHost::Name(name)) => name
                .strip_suffix(wide)
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty()),
            (_, _) => self.host == narrower.host,
        };
        let port = self.port.is_none() || self.port == narrower.port;
        let methods = self.methods.is_empty()
            || (!narrower.methods.is_empty()
                && narrower.methods.iter().all(|m| self.methods.contains(m)));
        host && port
            && methods
            && narrower.headers.is_empty()
            && narrower.record.is_none()
            && self.scheme == narrower.scheme
            && (self.private || !narrower.private)
            && self.path_covers(&narrower.path)
    }

    /// Whether every path under the prefix `narrower` is under this one.
    fn path_covers(&self, narrower: &str) -> bool {
        match narrower.strip_prefix(self.path.as_str()) {
            Some(rest) => self.path.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }

    fn path_allows(&self, path: &str) -> bool {
        if self.path == "/" {
            return true;
        }
        if path.split('/').any(|segment| {
            is_dot_segment(segment)
                || is_dot_segment(&segment.to_ascii_lowercase().replace("%2e", "."))
        }) {
            return false;
        }
        match path.strip_prefix(self.path.as_str()) {
            Some(rest) => self.path.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

fn is_dot_segment(segment: &str) -> bool {
    segment == "." || segment == ".."
}

/// `host[:port]` split (brackets kept off an IPv6 host); `None` if the
/// brackets do not close.
fn split_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    Some(match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

/// The grant host of `host` as written (an IPv6 address without its
/// brackets), normalized; or why it is none.
fn grant_host(host: &str) -> Result<String, &'static str> {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.contains(':') {
        let v6: Ipv6Addr = host.parse().map_err(|_| "not an IPv6 address")?;
        if v6.is_unspecified() || v6.is_multicast() {
            return Err("an unspecified or multicast address is never reachable");
        }
        return Ok(v6.to_string());
    }
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(suffix) => (true, suffix),
        None => (false, host.as_str()),
    };
    let labels: Vec<&str> = name.split('.').collect();
    let numeric = |label: &str| {
        label.bytes().all(|b| b.is_ascii_digit())
            || label.starts_with("0x") && label[2..].bytes().all(|b| b.is_ascii_hexdigit())
    };
    if labels.last().is_some_and(|last| numeric(last)) {
        if wildcard {
            return Err("a wildcard is for names, not addresses");
        }
        let v4 = strict_ipv4(name).ok_or(
            "an IPv4 address is four decimal numbers from 0 to 255, without leading zeros",
        )?;
        if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() {
            return Err("an unspecified, broadcast or multicast address is never reachable");
        }
        return Ok(v4.to_string());
    }
    let label_ok = |label: &&str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !labels.iter().all(label_ok) {
        return Err("the host is a DNS name, *.name, an IPv4 address or [an IPv6 address]");
    }
    if wildcard && labels.len() < 2 {
        return Err("a wildcard covers names under a domain of two labels or more (*.example.com)");
    }
    Ok(host)
}

/// `host` as an IPv4 address in its one dotted-decimal form: four numbers
/// from 0 to 255 without leading zeros (no octal, hex or fewer parts).
pub fn strict_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (octet, part) in octets.iter_mut().zip(&parts) {
        let canonical = !part.is_empty()
            && part.len() <= 3
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part.len() == 1 || !part.starts_with('0'));
        *octet = part.parse().ok().filter(|_| canonical)?;
    }
    Some(Ipv4Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(url: &str) -> HttpGrant {
        HttpGrant::parse(url, &[], false).unwrap()
    }

    #[test]
    fn patterns_parse_to_their_parts() {
        let g = HttpGrant::parse("HTTPS://API.Example.com/v1/", &["post".into()], false).unwrap();
        assert_eq!(
            (g.scheme.as_str(), g.host.as_str(), g.port, g.path.as_str()),
            ("https", "api.example.com", Some(443), "/v1/")
        );
        assert_eq!(g.methods, ["POST"]);
        assert_eq!(g.url(), "https://api.example.com:443/v1/");
        assert_eq!(grant("http://10.0.0.5:8080").port, Some(8080));
        assert_eq!(grant("http://10.0.0.5:*").port, None);
        assert_eq!(grant("http://[FD00::5]:81/").host, "fd00::5");
        assert_eq!(grant("http://[fd00::5]").url(), "http://[fd00::5]:80/");
        assert_eq!(
            grant("https://*.example.com").host(),
            GrantHost::Suffix("example.com")
        );
    }

    #[test]
    fn odd_patterns_are_refused_with_a_reason() {
        for bad in [
            "api.example.com",
            "ftp://example.com",
            "http://",
            "http://2130706433",
            "http://0x7f000001",
            "http://0177.0.0.1",
            "http://127.1",
            "http://127.0.0.01",
            "http://0.0.0.0",
            "http://255.255.255.255",
            "http://[::]",
            "http://[::1",
            "http://*.com",
            "http://*.10.0.0.1",
            "http://a.example.com:0",
            "http://a.example.com:65536",
            "http://a.example.com:+80",
            "http://user@a.example.com",
            "http://a.example.com/?q",
            "http://a.example.com/v1/../admin",
            "http://a b.example.com",
            "http://-a.example.com",
        ] {
            assert!(
                HttpGrant::parse(bad, &[], false).is_err(),
                "{bad} was accepted"
            );
        }
        assert!(HttpGrant::parse("http://a.example.com", &["GE T".into()], false).is_err());
    }

    #[test]
    fn a_grant_allows_its_host_port_method_and_path_only() {
        let g = HttpGrant::parse("https://api.example.com/v1", &["POST".into()], false).unwrap();
        assert!(g.allows("https", "api.example.com", 443, "POST", "/v1"));
        assert!(g.allows("https", "API.example.com.", 443, "POST", "/v1/charges"));
        assert!(!g.allows("https", "api.example.com", 443, "GET", "/v1"));
        assert!(!g.allows("http", "api.example.com", 443, "POST", "/v1"));
        assert!(!g.allows("https", "api.example.com", 8443, "POST", "/v1"));
        assert!(!g.allows("https", "api.example.com.evil.net", 443, "POST", "/v1"));
        assert!(!g.allows("https", "api.example.com", 443, "POST", "/v1x"));
        assert!(!g.allows("https", "api.example.com", 443, "POST", "/v1/../admin"));
        assert!(!g.allows("https", "api.example.com", 443, "POST", "/v1/%2E%2e/admin"));
        let wild = grant("https://*.example.com");
        assert!(wild.allows("https", "a.b.example.com", 443, "GET", "/"));
        assert!(!wild.allows("https", "example.com", 443, "GET", "/"));
        assert!(!wild.allows("https", "badexample.com", 443, "GET", "/"));
        let any_port = grant("http://127.0.0.1:*");
        assert!(any_port.allows("http", "127.0.0.1", 9, "DELETE", "/x"));
        assert!(!any_port.allows("http", "127.0.0.2", 9, "DELETE", "/x"));
        assert!(!any_port.allows("http", "2130706433", 9, "GET", "/"));
        let v6 = grant("http://[::1]:8080");
        assert!(v6.allows("http", "::1", 8080, "GET", "/"));
        assert!(v6.allows("http", "0:0::1", 8080, "GET", "/"));
    }

    #[test]
    fn a_grant_covers_what_allows_no_more_than_it() {
        let methods = |url: &str, methods: &[&str]| {
            let methods: Vec<String> = methods.iter().map(|m| (*m).to_owned()).collect();
            HttpGrant::parse(url, &methods, false).unwrap()
        };
        let wide = grant("https://*.example.com:*/v1/");
        for narrower in [
            "https://api.example.com/v1/charges",
            "https://api.example.com:8443/v1/",
            "https://*.eu.example.com/v1/x/",
        ] {
            assert!(wide.covers(&grant(narrower)), "{narrower}");
        }
        for wider in [
            "http://api.example.com/v1/",
            "https://example.com/v1/",
            "https://api.example.com/",
            "https://api.example.com/v10",
            "https://*.org.example.net/v1/",
            "https://api.example.org/v1/",
        ] {
            assert!(!wide.covers(&grant(wider)), "{wider}");
        }
        let post = methods("https://api.example.com", &["POST", "PUT"]);
        assert!(post.covers(&methods("https://api.example.com/x", &["POST"])));
        assert!(!post.covers(&methods("https://api.example.com/x", &[])));
        assert!(!post.covers(&methods("https://api.example.com/x", &["GET"])));
        assert!(!grant("http://10.0.0.1:80").covers(&grant("http://10.0.0.1:*")));
        let public = grant("http://svc.internal");
        let private = HttpGrant::parse("http://svc.internal", &[], true).unwrap();
        assert!(private.covers(&public));
        assert!(!public.covers(&private));
    }

    #[test]
    fn only_the_dotted_decimal_form_is_an_ipv4_address() {
        assert_eq!(strict_ipv4("10.0.0.5"), Some(Ipv4Addr::new(10, 0, 0, 5)));
        for odd in [
            "010.0.0.5",
            "10.0.5",
            "0xa.0.0.5",
            "10.0.0.256",
            "10.0.0.5.",
            "",
        ] {
            assert_eq!(strict_ipv4(odd), None, "{odd}");
        }
    }
}
