//! Counts words in a UTF-8 text.
//!
//! Input: the text itself. Output: JSON
//! `{"words": W, "unique": U, "top": [{"word": "the", "count": 42}, ...]}`
//! with the 10 most frequent words (ties broken alphabetically, so the output
//! is deterministic). A word is a run of alphanumeric characters or
//! apostrophes, compared case-insensitively.

use cohort_guest::{JobError, Json, job};
use serde::Serialize;
use std::collections::HashMap;

/// How many of the most frequent words the output lists.
const TOP_LEN: usize = 10;

#[derive(Serialize)]
struct Counts {
    words: u64,
    unique: u64,
    top: Vec<WordCount>,
}

#[derive(Serialize)]
struct WordCount {
    word: String,
    count: u64,
}

#[job]
fn run(text: String) -> Result<Json<Counts>, JobError> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut words = 0;
    for word in text
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
    {
        words += 1;
        *counts.entry(word.to_lowercase()).or_default() += 1;
    }
    cohort_guest::info!("counted {words} words, {} distinct", counts.len());
    let unique = counts.len() as u64;
    let mut top: Vec<WordCount> = counts
        .into_iter()
        .map(|(word, count)| WordCount { word, count })
        .collect();
    top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.word.cmp(&b.word)));
    top.truncate(TOP_LEN);
    Ok(Json(Counts { words, unique, top }))
}
