//! Counts words in a UTF-8 text.
//!
//! Input: the text itself, or, when the job was given an input blob
//! (`input_blob`), that blob's text (the inline input is then ignored).
//! Output: JSON
//! `{"words": W, "unique": U, "top": [{"word": "the", "count": 42}, ...]}`
//! with the 10 most frequent words (ties broken alphabetically, so the output
//! is deterministic). A word is a run of alphanumeric characters or
//! apostrophes, trimmed of apostrophes and compared case-insensitively.
//!
//! An input blob is streamed: read and decoded 64 KiB at a time, so
//! memory holds the distinct words (and the word being read), not the text,
//! whatever its size. For the same text the JSON is the same either way. A
//! job given a blob also writes the output blob `counts.tsv`: every
//! distinct word and its count, one `word\tcount\n` line each, by count
//! descending then word ascending.
//!
//! The counting itself ([`count_reader`], [`write_counts`]) is plain Rust
//! with no cohort dependency, so the host's benchmark links it natively to
//! compare the streaming job against the same code over a file.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};

/// How many bytes of an input blob are read and counted at once.
pub const READ_BYTES: usize = 64 << 10;

/// Why a text could not be counted.
#[derive(Debug)]
pub enum CountError {
    /// Reading the text failed.
    Io(std::io::Error),
    /// The text is not UTF-8.
    NotUtf8(Utf8Error),
}

impl std::fmt::Display for CountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CountError::Io(error) => write!(f, "reading the text failed: {error}"),
            CountError::NotUtf8(error) => write!(f, "input is not UTF-8: {error}"),
        }
    }
}

impl std::error::Error for CountError {}

/// Counts the words of the UTF-8 text `reader` gives, [`READ_BYTES`] at a
/// time, as the job counts an input blob: the number of words, and every
/// distinct word with its count, by count descending then word ascending.
pub fn count_reader(reader: impl std::io::Read) -> Result<(u64, Vec<(String, u64)>), CountError> {
    let mut reader = BufReader::with_capacity(READ_BYTES, reader);
    let mut counter = WordCounter::default();
    let mut decoder = Utf8Decoder::default();
    loop {
        let bytes = reader.fill_buf().map_err(CountError::Io)?;
        if bytes.is_empty() {
            break;
        }
        decoder
            .decode(bytes, |text| counter.feed(text))
            .map_err(CountError::NotUtf8)?;
        let read = bytes.len();
        reader.consume(read);
    }
    decoder.finish().map_err(CountError::NotUtf8)?;
    Ok(counter.finish())
}

/// Writes `counts.tsv` to `out`: `word\tcount\n` for each of `ranked`, in
/// its order (unbuffered: give it a buffered writer).
pub fn write_counts(mut out: impl Write, ranked: &[(String, u64)]) -> std::io::Result<()> {
    for (word, count) in ranked {
        // Words hold neither tabs nor newlines: both are separators.
        writeln!(out, "{word}\t{count}")?;
    }
    Ok(())
}

#[cfg(target_arch = "wasm32")]
mod job {
    use super::*;
    use cohort_guest::{FromInput, JobError, Json, blobs, job};
    use serde::Serialize;
    use std::io::BufWriter;

    /// How many of the most frequent words the output lists.
    const TOP_LEN: usize = 10;

    /// The output blob listing every word's count, written when the input
    /// is a blob.
    const COUNTS_BLOB: &str = "counts.tsv";

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
    fn run(input: Vec<u8>) -> Result<Json<Counts>, JobError> {
        let blob = blobs::input(blobs::INPUT);
        let (words, ranked) = match &blob {
            Some(blob) => {
                cohort_guest::info!("counting the input blob ({} bytes)", blob.size);
                count_reader(blobs::open(blobs::INPUT)?).map_err(|error| match error {
                    CountError::Io(error) => JobError::from(error),
                    CountError::NotUtf8(error) => {
                        JobError::bad_input(format!("input is not UTF-8: {error}"))
                    }
                })?
            }
            None => {
                // Decoded as a `String` input always was: same errors.
                let mut counter = WordCounter::default();
                counter.feed(&String::from_input(input)?);
                counter.finish()
            }
        };
        cohort_guest::info!("counted {words} words, {} distinct", ranked.len());
        if blob.is_some() {
            let mut out = BufWriter::with_capacity(READ_BYTES, blobs::create(COUNTS_BLOB)?);
            write_counts(&mut out, &ranked)?;
            out.flush()?;
        }
        let unique = ranked.len() as u64;
        let top = ranked
            .into_iter()
            .take(TOP_LEN)
            .map(|(word, count)| WordCount { word, count })
            .collect();
        Ok(Json(Counts { words, unique, top }))
    }
}

/// Whether `c` separates words: it is neither alphanumeric nor an
/// apostrophe.
fn is_separator(c: char) -> bool {
    !(c.is_alphanumeric() || c == '\'')
}

/// Counts the words of a text given in pieces cut anywhere between
/// characters: a word cut in two is counted once, whole.
#[derive(Debug, Default)]
struct WordCounter {
    /// Occurrences of each word, lowercased.
    counts: HashMap<String, u64>,
    /// Words counted.
    words: u64,
    /// The start of a word that the last piece ended in, if it did.
    partial: String,
}

impl WordCounter {
    /// Counts the words of the next piece of text.
    fn feed(&mut self, text: &str) {
        // What follows the last separator may go on in the next piece.
        let Some(last) = text.rfind(is_separator) else {
            self.partial.push_str(text);
            return;
        };
        let separator_len = text[last..].chars().next().map_or(1, char::len_utf8);
        let (complete, rest) = (&text[..last], &text[last + separator_len..]);
        let mut tokens = complete.split(is_separator);
        if let Some(first) = tokens.next() {
            if self.partial.is_empty() {
                self.count(first);
            } else {
                let mut word = std::mem::take(&mut self.partial);
                word.push_str(first);
                self.count(&word);
            }
        }
        for token in tokens {
            self.count(token);
        }
        self.partial.clear();
        self.partial.push_str(rest);
    }

    /// Counts `token`, a run between separators, if it holds a word.
    fn count(&mut self, token: &str) {
        let word = token.trim_matches('\'');
        if word.is_empty() {
            return;
        }
        self.words += 1;
        *self.counts.entry(word.to_lowercase()).or_default() += 1;
    }

    /// The number of words, and every distinct word with its count, by
    /// count descending then word ascending.
    fn finish(mut self) -> (u64, Vec<(String, u64)>) {
        let last = std::mem::take(&mut self.partial);
        self.count(&last);
        let mut ranked: Vec<(String, u64)> = self.counts.into_iter().collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        (self.words, ranked)
    }
}

/// Decodes UTF-8 given in pieces cut anywhere, even inside a character:
/// the bytes of a character cut in two wait for the next piece.
#[derive(Debug, Default)]
struct Utf8Decoder {
    /// The first bytes of a character the last piece ended in.
    pending: Vec<u8>,
    /// Bytes decoded before `pending`: where in the text it starts.
    offset: u64,
}

/// Bytes that are not UTF-8, described as [`std::str::Utf8Error`] describes
/// them, at their offset in the whole text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utf8Error {
    /// Where the bad sequence starts.
    offset: u64,
    /// Its length; `None`: the text ends inside a character.
    len: Option<usize>,
}

impl std::fmt::Display for Utf8Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.len {
            Some(len) => write!(
                f,
                "invalid utf-8 sequence of {len} bytes from index {}",
                self.offset
            ),
            None => write!(
                f,
                "incomplete utf-8 byte sequence from index {}",
                self.offset
            ),
        }
    }
}

impl Utf8Decoder {
    /// Decodes the next piece of `bytes`, handing each run of text to
    /// `text` (a character cut at the piece's end comes with the next).
    fn decode(&mut self, mut bytes: &[u8], mut text: impl FnMut(&str)) -> Result<(), Utf8Error> {
        if !self.pending.is_empty() {
            // Complete the cut character first, from as few bytes as it
            // needs (its length is in its first byte).
            let needed = utf8_len(self.pending[0]) - self.pending.len();
            let taken = needed.min(bytes.len());
            self.pending.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
            match std::str::from_utf8(&self.pending) {
                Ok(character) => {
                    text(character);
                    self.offset += self.pending.len() as u64;
                    self.pending.clear();
                }
                Err(error) => match error.error_len() {
                    None => return Ok(()),
                    Some(len) => return Err(self.error(0, Some(len))),
                },
            }
        }
        let valid = match std::str::from_utf8(bytes) {
            Ok(valid) => valid,
            Err(error) => {
                if let Some(len) = error.error_len() {
                    return Err(self.error(error.valid_up_to(), Some(len)));
                }
                let (valid, cut) = bytes.split_at(error.valid_up_to());
                self.pending.extend_from_slice(cut);
                std::str::from_utf8(valid).expect("valid up to here")
            }
        };
        if !valid.is_empty() {
            text(valid);
        }
        self.offset += valid.len() as u64;
        Ok(())
    }

    /// Ends the text: an error if it ends inside a character.
    fn finish(self) -> Result<(), Utf8Error> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            Err(self.error(0, None))
        }
    }

    fn error(&self, at: usize, len: Option<usize>) -> Utf8Error {
        Utf8Error {
            offset: self.offset + at as u64,
            len,
        }
    }
}

/// The length of the UTF-8 sequence that `first` begins, for a byte that
/// begins one (the decoder keeps no other).
fn utf8_len(first: u8) -> usize {
    match first {
        0xf0.. => 4,
        0xe0.. => 3,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts `text` whole.
    fn whole(text: &str) -> (u64, Vec<(String, u64)>) {
        let mut counter = WordCounter::default();
        counter.feed(text);
        counter.finish()
    }

    /// Counts `bytes` decoded and fed in pieces of `piece` bytes.
    fn in_pieces(bytes: &[u8], piece: usize) -> Result<(u64, Vec<(String, u64)>), Utf8Error> {
        let mut counter = WordCounter::default();
        let mut decoder = Utf8Decoder::default();
        for chunk in bytes.chunks(piece) {
            decoder.decode(chunk, |text| counter.feed(text))?;
        }
        decoder.finish()?;
        Ok(counter.finish())
    }

    const TEXT: &str = "The cat's hat, the CAT and 'the' hat!\n\
        Ünïcödé wörds: straße STRASSE ΟΔΟΣ οδος 🦀crab🦀 crab 日本語 'tis o'clock\t\
        ''' ' x'y ΣΑΣ ςσ 42 4x2 naïve";

    #[test]
    fn words_are_counted_as_before() {
        let (words, ranked) = whole("the cat and the hat");
        assert_eq!(words, 5);
        assert_eq!(
            ranked,
            [("the", 2), ("and", 1), ("cat", 1), ("hat", 1)].map(|(w, c)| (w.to_string(), c))
        );
        // The same counts as splitting the whole text at once (the
        // algorithm before streaming).
        let mut expected: HashMap<String, u64> = HashMap::new();
        let mut expected_words = 0;
        for word in TEXT
            .split(is_separator)
            .map(|w| w.trim_matches('\''))
            .filter(|w| !w.is_empty())
        {
            expected_words += 1;
            *expected.entry(word.to_lowercase()).or_default() += 1;
        }
        let (words, ranked) = whole(TEXT);
        assert_eq!(words, expected_words);
        assert_eq!(ranked.into_iter().collect::<HashMap<_, _>>(), expected);
    }

    #[test]
    fn pieces_cut_anywhere_count_the_same_as_the_whole() {
        let expected = whole(TEXT);
        for piece in 1..=TEXT.len() + 1 {
            assert_eq!(
                in_pieces(TEXT.as_bytes(), piece).unwrap(),
                expected,
                "pieces of {piece} bytes"
            );
        }
    }

    #[test]
    fn a_word_across_many_pieces_is_one_word() {
        let text = format!("{} end", "ab".repeat(1000));
        let (words, ranked) = in_pieces(text.as_bytes(), 7).unwrap();
        assert_eq!(words, 2);
        assert_eq!(ranked[0].0.len(), 2000);
        // A final sigma depends on the whole word: cut before it, it still
        // lowercases as the word's end.
        let (_, ranked) = in_pieces("ΟΔΟΣ".as_bytes(), 6).unwrap();
        assert_eq!(ranked, [("οδος".to_string(), 1)]);
    }

    #[test]
    fn ranking_is_by_count_then_word() {
        let (_, ranked) = whole("b a c b a d b é z");
        let order: Vec<_> = ranked.iter().map(|(w, c)| (w.as_str(), *c)).collect();
        assert_eq!(
            order,
            [("b", 3), ("a", 2), ("c", 1), ("d", 1), ("z", 1), ("é", 1)]
        );
    }

    #[test]
    fn invalid_utf8_is_reported_as_for_a_whole_text() {
        for bytes in [
            &b"ok \xff more"[..],
            b"caf\xc3",
            b"caf\xc3 x",
            b"\xe2\x82",
            b"\xe2\x82\x41",
            b"ab\xf0\x9f\xa6",
            b"\xed\xa0\x80", // a surrogate
            b"x\xc0\xaf",    // overlong
        ] {
            let whole_error = std::str::from_utf8(bytes).unwrap_err();
            for piece in 1..=bytes.len() {
                let error = in_pieces(bytes, piece).unwrap_err();
                assert_eq!(
                    error.to_string(),
                    whole_error.to_string(),
                    "{bytes:?} in pieces of {piece}"
                );
            }
        }
    }
}
