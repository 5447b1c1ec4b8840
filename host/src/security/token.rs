//! API tokens: `cohort_<id>_<secret>`, bearer tokens with scopes.
//!
//! * The **id** (12 hex digits) names the token: it is how it is listed and
//!   revoked, and how a node finds its record without comparing secrets.
//! * The **secret** (64 hex digits, 256 random bits) is shown once, when
//!   the token is made. The master journals only its SHA-256 (a fast hash
//!   suffices: the secret is random, not a password), and a node compares
//!   hashes in constant time (`subtle`).
//! * **Scopes**: `read` (every `GET` of the API and `/metrics`), `submit`
//!   (submit jobs), `admin` (everything: upload modules, cancel, make the
//!   node leave, manage tokens). `admin` implies the others.
//! * **Namespace**: a token may be confined to one namespace (`cohort token
//!   create --namespace NAME`): it then reaches that namespace's jobs only,
//!   whatever its scopes, and no cluster-wide route (see `api::routes`
//!   and `cohort_master::namespaces`). A token without one is
//!   cluster-wide.
//!
//! Every node keeps a [`TokenTable`], a copy of the master's records. It is
//! refreshed every [`TOKEN_REFRESH_EVERY`] and whenever a request names an id it
//! does not know: such requests wait for one refresh that began after they
//! arrived (concurrent ones share it), and refreshes for misses are at
//! least [`TOKEN_MISS_REFRESH_MIN`] apart, so unknown ids cannot flood the
//! master. A new token works everywhere at once; a revoked one stops
//! working everywhere within [`TOKEN_REFRESH_EVERY`] (at once on the node that
//! revoked it).
//!
//! [`TOKEN_REFRESH_EVERY`]: crate::limits::TOKEN_REFRESH_EVERY
//! [`TOKEN_MISS_REFRESH_MIN`]: crate::limits::TOKEN_MISS_REFRESH_MIN

use crate::limits::TOKEN_MISS_REFRESH_MIN;
use cohort_master::TokenRecord;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Instant;
use subtle::ConstantTimeEq;

/// What every token starts with.
const PREFIX: &str = "cohort_";
/// Hex digits of a token id.
const ID_HEX: usize = 12;
/// Hex digits of a token secret.
const SECRET_HEX: usize = 64;

/// A scope a token may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Read jobs, results, modules, the cluster and metrics.
    Read,
    /// Submit jobs.
    Submit,
    /// Everything, including module uploads, cancels, leave and tokens.
    Admin,
}

impl Scope {
    /// The scope's name.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Submit => "submit",
            Scope::Admin => "admin",
        }
    }

    /// Parses [`name`](Self::name).
    pub fn parse(name: &str) -> Option<Self> {
        [Scope::Read, Scope::Submit, Scope::Admin]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// The scopes a token holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scopes {
    read: bool,
    submit: bool,
    admin: bool,
}

impl Scopes {
    /// Scopes from names; unknown names are ignored (the master refuses
    /// them when a token is made).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Self {
        let mut scopes = Scopes::default();
        for scope in names.iter().filter_map(|n| Scope::parse(n.as_ref())) {
            match scope {
                Scope::Read => scopes.read = true,
                Scope::Submit => scopes.submit = true,
                Scope::Admin => scopes.admin = true,
            }
        }
        scopes
    }

    /// The names of every scope these allow (`admin` allows all).
    pub fn names(self) -> Vec<&'static str> {
        [Scope::Read, Scope::Submit, Scope::Admin]
            .into_iter()
            .filter(|&s| self.allow(s))
            .map(Scope::name)
            .collect()
    }

    /// Whether these scopes allow what `needed` guards.
    pub fn allow(self, needed: Scope) -> bool {
        self.admin
            || match needed {
                Scope::Read => self.read,
                Scope::Submit => self.submit,
                Scope::Admin => false,
            }
    }
}

/// What a checked token holds: its scopes and the namespace it is
/// confined to (`None`: cluster-wide).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    /// What it may do.
    pub scopes: Scopes,
    /// Where (`None`: everywhere).
    pub namespace: Option<String>,
}

/// A token just made: the text to give the user once, and the record for
/// the master.
#[derive(Debug)]
pub struct Minted {
    /// `cohort_<id>_<secret>`.
    pub token: String,
    /// What the master keeps.
    pub record: TokenRecord,
}

/// Makes a new token with `scopes` and `name`, confined to `namespace` if
/// one is given.
pub fn mint(name: &str, scopes: &[Scope], namespace: Option<&str>) -> Minted {
    let mut id = [0u8; ID_HEX / 2];
    let mut secret = [0u8; SECRET_HEX / 2];
    super::random(&mut id);
    super::random(&mut secret);
    let id = super::key::encode_hex(&id);
    let secret = super::key::encode_hex(&secret);
    Minted {
        token: format!("{PREFIX}{id}_{secret}"),
        record: TokenRecord {
            id,
            name: name.into(),
            scopes: scopes.iter().map(|s| s.name().to_string()).collect(),
            hash: hash(&secret),
            created_at: 0,
            namespace: namespace.map(str::to_owned),
        },
    }
}

fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Splits a token into id and secret, if it has the shape of one.
/// A well-formed token's id (its public part).
pub fn token_id(token: &str) -> Option<&str> {
    split(token).map(|(id, _)| id)
}

fn split(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix(PREFIX)?.split_once('_')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id, ID_HEX) && hex(secret, SECRET_HEX)).then_some((id, secret))
}

/// Why a request's token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Bearer` header.
    Missing,
    /// Not the shape of a cohort token.
    Malformed,
    /// No such token (never made, or revoked).
    Unknown,
    /// The id exists but the secret does not match.
    WrongSecret,
}

impl Refusal {
    /// Stable name, for metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed => "malformed",
            Refusal::Unknown => "unknown_or_revoked",
            Refusal::WrongSecret => "wrong_secret",
        }
    }

    /// What the client is told.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Missing => {
                "this node requires a token: send `Authorization: Bearer <token>` (CLI: --token or COHORT_TOKEN)"
            }
            Refusal::Malformed => "that is not a cohort token (cohort_<id>_<secret>)",
            Refusal::Unknown => "unknown or revoked token",
            Refusal::WrongSecret => "the token does not match",
        }
    }
}

/// The token in an `Authorization` header value.
pub fn bearer(header: Option<&str>) -> Result<&str, Refusal> {
    let value = header.ok_or(Refusal::Missing)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(Refusal::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Refusal::Malformed);
    }
    Ok(token.trim())
}

#[derive(Debug, Clone)]
struct Entry {
    hash: [u8; 32],
    holder: Holder,
}

impl Entry {
    fn of(record: &TokenRecord) -> Self {
        Entry {
            hash: record.hash,
            holder: Holder {
                scopes: Scopes::from_names(&record.scopes),
                namespace: record.namespace.clone(),
            },
        }
    }
}

/// A node's copy of the tokens.
#[derive(Debug)]
pub struct TokenTable {
    entries: RwLock<HashMap<String, Entry>>,
    /// When the last refresh a miss caused began; held while one runs, so
    /// concurrent misses share it.
    miss_refresh: tokio::sync::Mutex<Option<Instant>>,
}

impl Default for TokenTable {
    fn default() -> Self {
        Self {
            entries: RwLock::new(HashMap::new()),
            miss_refresh: tokio::sync::Mutex::new(None),
        }
    }
}

impl TokenTable {
    /// Replaces the copy with the master's records.
    pub fn replace(&self, records: &[TokenRecord]) {
        let entries = (records.iter())
            .map(|r| (r.id.clone(), Entry::of(r)))
            .collect();
        *self.entries.write().unwrap_or_else(|e| e.into_inner()) = entries;
    }

    /// Adds one record (a token this node just made).
    pub fn insert(&self, record: &TokenRecord) {
        self.entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.id.clone(), Entry::of(record));
    }

    /// Forgets one token (revoked here).
    pub fn remove(&self, id: &str) {
        self.entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// The scopes and namespace of `token`.
    pub fn check(&self, token: &str) -> Result<Holder, Refusal> {
        let (id, secret) = split(token).ok_or(Refusal::Malformed)?;
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get(id).ok_or(Refusal::Unknown)?;
        if bool::from(hash(secret).ct_eq(&entry.hash)) {
            Ok(entry.holder.clone())
        } else {
            Err(Refusal::WrongSecret)
        }
    }

    /// After a miss at `arrived`: runs `refresh` unless a refresh began
    /// after `arrived` already, paced [`TOKEN_MISS_REFRESH_MIN`] apart.
    pub async fn refresh_after_miss<F: std::future::Future<Output = ()>>(
        &self,
        arrived: Instant,
        refresh: F,
    ) {
        let mut last = self.miss_refresh.lock().await;
        if let Some(began) = *last {
            if began > arrived {
                return;
            }
            tokio::time::sleep_until(tokio::time::Instant::from_std(
                began + TOKEN_MISS_REFRESH_MIN,
            ))
            .await;
        }
        *last = Some(Instant::now());
        refresh.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_check_with_their_scopes_and_nothing_else_does() {
        let table = TokenTable::default();
        let reader = mint("dashboard", &[Scope::Read], None);
        let admin = mint("ops", &[Scope::Admin], None);
        table.replace(&[reader.record.clone(), admin.record.clone()]);
        let scopes = table.check(&reader.token).unwrap().scopes;
        assert!(scopes.allow(Scope::Read));
        assert!(!scopes.allow(Scope::Submit));
        assert!(!scopes.allow(Scope::Admin));
        let scopes = table.check(&admin.token).unwrap().scopes;
        assert!(
            scopes.allow(Scope::Read) && scopes.allow(Scope::Submit) && scopes.allow(Scope::Admin)
        );
        // Same id, another secret.
        let (id, _) = split(&reader.token).unwrap();
        let forged = format!("cohort_{id}_{}", "0".repeat(SECRET_HEX));
        assert_eq!(table.check(&forged).unwrap_err(), Refusal::WrongSecret);
        // Not minted, or revoked.
        assert_eq!(
            table
                .check(&mint("x", &[Scope::Read], None).token)
                .unwrap_err(),
            Refusal::Unknown
        );
        table.remove(&reader.record.id);
        assert_eq!(table.check(&reader.token).unwrap_err(), Refusal::Unknown);
        for bad in [
            "",
            "cohort_",
            "cohort_abc_def",
            "bearer",
            &reader.token[1..],
        ] {
            assert_eq!(table.check(bad).unwrap_err(), Refusal::Malformed, "{bad}");
        }
    }

    #[test]
    fn bearer_headers() {
        assert_eq!(bearer(None).unwrap_err(), Refusal::Missing);
        assert_eq!(bearer(Some("Bearer abc")).unwrap(), "abc");
        assert_eq!(bearer(Some("bearer  abc ")).unwrap(), "abc");
        assert_eq!(bearer(Some("Basic abc")).unwrap_err(), Refusal::Malformed);
        assert_eq!(bearer(Some("abc")).unwrap_err(), Refusal::Malformed);
    }

    #[tokio::test(start_paused = true)]
    async fn misses_share_refreshes_and_are_paced() {
        let table = TokenTable::default();
        let count = std::sync::atomic::AtomicU32::new(0);
        let refresh = || async {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        };
        let first = Instant::now();
        table.refresh_after_miss(first, refresh()).await;
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A miss that arrived before that refresh began shares it.
        table.refresh_after_miss(first, refresh()).await;
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A later miss refreshes again, but not sooner than the pace.
        let started = tokio::time::Instant::now();
        table.refresh_after_miss(Instant::now(), refresh()).await;
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(started.elapsed() >= TOKEN_MISS_REFRESH_MIN);
    }
}
