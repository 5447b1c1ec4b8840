//! API tokens: journaled state like any other, so every node checks
//! requests against the same set.
//!
//! The master holds each token's record (id, name, scopes, the hash the
//! host checks against, creation time); it never sees a secret. Created
//! and revoked by events, kept in snapshots (from version 2 on; an older
//! snapshot restores with none).
//!
//! Invariants: at most [`TOKENS_MAX`] tokens; ids are unique; a token's
//! creation time is the master's decision time, not the caller's. This
//! module does not authenticate anything: the host does, with these
//! records.

use crate::limits::TOKENS_MAX;
use crate::master::{Master, decided, reject};
use crate::protocol::*;
use crate::validation::validate_token;

/// The scopes a token may carry.
pub const TOKEN_SCOPES: [&str; 3] = ["read", "submit", "admin"];

impl Master {
    pub(crate) fn decide_create_token(
        &self,
        now: Millis,
        record: &TokenRecord,
    ) -> Result<Decision, Rejection> {
        validate_token(record)?;
        if let Some(name) = &record.namespace {
            crate::namespaces::check_name(name)
                .or_else(|why| reject(codes::INVALID_NAMESPACE, why))?;
        }
        if self.tokens.contains_key(&record.id) {
            return reject(
                codes::TOKEN_EXISTS,
                format!("a token with id {} exists", record.id),
            );
        }
        if self.tokens.len() >= TOKENS_MAX {
            return reject(
                codes::INVALID_TOKEN,
                format!("at most {TOKENS_MAX} tokens; revoke some first"),
            );
        }
        decided(
            now,
            vec![EventKind::TokenCreated(TokenRecord {
                created_at: now,
                ..record.clone()
            })],
        )
    }

    pub(crate) fn decide_revoke_token(&self, now: Millis, id: &str) -> Result<Decision, Rejection> {
        if !self.tokens.contains_key(id) {
            return reject(codes::TOKEN_NOT_FOUND, format!("no token with id {id}"));
        }
        decided(now, vec![EventKind::TokenRevoked { id: id.to_owned() }])
    }

    pub(crate) fn apply_token_created(&mut self, record: &TokenRecord) {
        self.tokens.insert(record.id.clone(), record.clone());
    }

    pub(crate) fn apply_token_revoked(&mut self, id: &str) {
        self.tokens.remove(id);
    }

    /// Answers [`Query::Tokens`].
    pub(crate) fn token_list(&self) -> Vec<TokenRecord> {
        self.tokens.values().cloned().collect()
    }
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod token_tests;
