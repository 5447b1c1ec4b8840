//! The client's table of error codes is the server's: every code of the
//! node's OpenAPI document (`clients/openapi.json`, generated from the
//! node's `ErrorCode`), with the status and retryability it documents, and
//! no other. On failure, run `python3 clients/gen_error_codes.py`.

use cohort_client::{ERROR_CODES, status_of_code};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Every code of the document's error examples: its status and
/// `retryable`, each code's once (a code answered with two is a failure).
fn documented() -> BTreeMap<String, (u16, bool)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let document: Value = serde_json::from_str(&text).expect("the document is JSON");
    let mut codes = BTreeMap::new();
    let paths = document["paths"].as_object().expect("paths");
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("a path item") {
            let Some(responses) = operation["responses"].as_object() else {
                continue;
            };
            for (status, response) in responses {
                let Some(content) = response["content"].as_object() else {
                    continue;
                };
                for media in content.values() {
                    let Some(examples) = media["examples"].as_object() else {
                        continue;
                    };
                    for example in examples.values() {
                        let value = &example["value"];
                        let Some(code) = value["code"].as_str() else {
                            continue;
                        };
                        let row = (
                            status.parse().expect("a numeric status"),
                            value["retryable"].as_bool().expect("retryable"),
                        );
                        let known = codes.entry(code.to_string()).or_insert(row);
                        assert_eq!(*known, row, "{code}: {method} {path}");
                    }
                }
            }
        }
    }
    codes
}

#[test]
fn the_table_is_the_documents() {
    let documented = documented();
    assert!(
        documented.len() >= 40,
        "the document lists {} codes: not read right",
        documented.len()
    );
    let table: BTreeMap<String, (u16, bool)> = ERROR_CODES
        .iter()
        .map(|&(code, status, retryable)| (code.to_string(), (status, retryable)))
        .collect();
    assert_eq!(table.len(), ERROR_CODES.len(), "a code listed twice");
    let wrong: Vec<_> = documented
        .iter()
        .filter(|&(code, row)| table.get(code) != Some(row))
        .collect();
    let extra: Vec<_> = table
        .keys()
        .filter(|code| !documented.contains_key(*code))
        .collect();
    assert!(
        wrong.is_empty() && extra.is_empty(),
        "clients/rust/src/codes.rs is not clients/openapi.json's table (run python3 \
         clients/gen_error_codes.py): the document's rows it lacks or has otherwise: \
         {wrong:?}; codes the document lacks: {extra:?}"
    );
    for (code, (status, _)) in &documented {
        assert_eq!(status_of_code(code), *status, "{code}");
    }
}
