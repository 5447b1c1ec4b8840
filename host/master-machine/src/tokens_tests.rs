//! Tokens are journaled state: created and revoked by events, kept in
//! snapshots, and the first snapshot format (no tokens) still restores.

use super::*;
use crate::limits::{TOKEN_ID_BYTES_MAX, TOKEN_NAME_BYTES_MAX};
use crate::master::*;
use crate::scenarios::token;

fn run(master: &mut Master, now: Millis, command: Command) -> Result<(), Rejection> {
    crate::testing::run(master, now, command).map(|_| ())
}

fn tokens(master: &Master) -> Vec<TokenRecord> {
    match master.query(0, &Query::Tokens).unwrap() {
        Answer::Tokens(tokens) => tokens,
        other => panic!("{other:?}"),
    }
}

#[test]
fn create_revoke_and_snapshot() {
    let mut master = Master::new();
    run(&mut master, 5, Command::CreateToken(token("a", &["read"]))).unwrap();
    run(
        &mut master,
        6,
        Command::CreateToken(token("b", &["admin", "submit"])),
    )
    .unwrap();
    let exists = run(&mut master, 7, Command::CreateToken(token("a", &["read"])));
    assert_eq!(exists.unwrap_err().code, codes::TOKEN_EXISTS);
    let listed = tokens(&master);
    assert_eq!(listed.len(), 2);
    assert_eq!(
        listed[0].created_at, 5,
        "the master's decision time, not the caller's"
    );
    let restored = Master::restore(&master.snapshot()).unwrap();
    assert_eq!(tokens(&restored), listed);
    run(&mut master, 8, Command::RevokeToken { id: "a".into() }).unwrap();
    assert_eq!(tokens(&master).len(), 1);
    let gone = run(&mut master, 9, Command::RevokeToken { id: "a".into() });
    assert_eq!(gone.unwrap_err().code, codes::TOKEN_NOT_FOUND);
}

#[test]
fn invalid_tokens_are_refused_with_a_reason() {
    let master = Master::new();
    for record in [
        token("", &["read"]),
        token("has space", &["read"]),
        token(&"x".repeat(TOKEN_ID_BYTES_MAX + 1), &["read"]),
        token("a", &[]),
        token("a", &["read", "read"]),
        token("a", &["root"]),
        TokenRecord {
            name: "n".repeat(TOKEN_NAME_BYTES_MAX + 1),
            ..token("a", &["read"])
        },
    ] {
        let error = master
            .decide(0, &Command::CreateToken(record.clone()))
            .unwrap_err();
        assert_eq!(error.code, codes::INVALID_TOKEN, "{record:?}");
    }
}

#[test]
fn first_format_snapshots_still_restore_without_tokens() {
    let mut master = Master::new();
    let submit = crate::scenarios::submit(1, crate::scenarios::spec(1, b"x"));
    run(&mut master, 1, submit).unwrap();
    // Version 1 was `encode(&master)` when that wrote format byte 1.
    let old_format = master.encode_state_v10(vec![1]);
    let restored = Master::restore(&old_format).unwrap();
    assert_eq!(restored.stats(), master.stats());
    assert!(tokens(&restored).is_empty());
    let mut trailing = master.snapshot();
    trailing.push(0);
    assert_eq!(
        Master::restore(&trailing).unwrap_err().code,
        codes::UNDECODABLE
    );
    assert_eq!(
        Master::restore(&[SNAPSHOT_VERSION + 1]).unwrap_err().code,
        codes::UNKNOWN_VERSION
    );
}
