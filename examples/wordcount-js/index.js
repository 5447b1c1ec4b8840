// Counts words in a UTF-8 text: the JavaScript twin of examples/wordcount,
// with byte-for-byte the same output on any input.
//
// Input: the text itself, or, when the job was given an input blob, that
// blob (read as a stream, so a text of any size is counted in memory
// bounded by its distinct words). Output: JSON
// `{"words": W, "unique": U, "top": [{"word": "the", "count": 42}, ...]}`
// with the 10 most frequent words (ties broken by code point order, so the
// output is deterministic). A word is a run of alphanumeric characters (in
// Rust's sense: alnum.js is generated from char::is_alphanumeric) or
// apostrophes, trimmed of apostrophes, compared case-insensitively
// (lowercased like Rust's str::to_lowercase). From an input blob it also
// writes the output blob `counts.tsv`: every distinct word and its count,
// `word\tcount\n`, in the order of the top list.
//
// The engine interprets JavaScript (no JIT), so the hot path is built-ins
// that loop natively: replaceAll turns each kind of separator into spaces
// and split(" ") cuts the words (half the time of a RegExp split, whose
// per-match work is interpreted), a Map counts the distinct spellings, and
// only those are trimmed and lowercased.

import { JobError, blobs, info, job } from "cohort-job";
import { RANGES } from "./alnum.js";
import { CASED, CASE_IGNORABLE } from "./casing.js";

/** How many of the most frequent words the output lists. */
const TOP_LEN = 10;

/**
 * The text is split a chunk of about this many UTF-16 units at a time: the
 * splitting makes copies of the text and a string per word, and in chunks
 * that garbage stays small however long the text.
 */
const CHUNK_LEN = 1 << 17;

/** The output blob that lists every word, written when the input is a blob. */
const COUNTS_BLOB = "counts.tsv";

/**
 * Lines of counts.tsv are written to the blob about this many UTF-16 units
 * at a time: one write per line would cost a call into the SDK each.
 */
const WRITE_BATCH_LEN = 1 << 14;

/**
 * Runs of characters that are neither alphanumeric nor apostrophes: the
 * exact (and slower) way to split. The engine has no \p{...} escapes, so the
 * class is spelled out from the table, at build time.
 */
const SEPARATOR_RUNS = new RegExp(`[^'${RANGES.map((r) => rangeClass(r, 0x10ffff)).join("")}]+`, "u");

/**
 * One UTF-16 unit that is not a space, an apostrophe or an alphanumeric
 * character of the Basic Multilingual Plane: a separator, or half of an
 * astral character. Without the u flag RegExp scans several times faster.
 */
const NEXT_SEPARATOR = new RegExp(
  `[^ '${RANGES.filter(([lo]) => lo <= 0xffff).map((r) => rangeClass(r, 0xffff)).join("")}]`,
  "g",
);

/**
 * The fast path gives up past this many kinds of separator (each costs a
 * pass over the text)...
 */
const MAX_SEPARATOR_KINDS = 64;
/**
 * ...or when more than this share of the text is astral alphanumeric
 * characters (each costs a RegExp call).
 */
const MAX_ASTRAL_WORD_SHARE = 1 / 32;

/**
 * A RegExp class range for `[lo, hi]` clipped to `max`.
 *
 * @param {number[]} range
 * @param {number} max
 */
function rangeClass([lo, hi], max) {
  const esc = (/** @type {number} */ cp) =>
    max > 0xffff ? `\\u{${cp.toString(16)}}` : `\\u${cp.toString(16).padStart(4, "0")}`;
  hi = Math.min(hi, max);
  return lo === hi ? esc(lo) : `${esc(lo)}-${esc(hi)}`;
}

export const run = job.text((text) => {
  // Count each spelling first: there are far fewer spellings than words.
  /** @type {Map<string, number>} */
  const spellings = new Map();
  const fromBlob = blobs.input(blobs.INPUT) !== undefined;
  if (fromBlob) {
    countBlob(blobs.INPUT, spellings);
  } else {
    for (let start = 0, end; start < text.length; start = end) {
      end = chunkEnd(text, start);
      countTokens(text.slice(start, end), spellings);
    }
  }
  /** @type {Map<string, number>} */
  const counts = new Map();
  let words = 0;
  spellings.forEach((n, token) => {
    const word = trimApostrophes(token);
    if (word !== "") {
      words += n;
      const key = toLowerCase(word);
      counts.set(key, (counts.get(key) ?? 0) + n);
    }
  });
  info(`counted ${words} words, ${counts.size} distinct`);
  if (fromBlob) {
    writeCounts(counts);
  }
  return JSON.stringify({ words, unique: counts.size, top: topWords(counts, TOP_LEN) });
});

/**
 * Adds the spellings of `text`'s words to `spellings`.
 *
 * @param {string} text
 * @param {Map<string, number>} spellings
 */
function countTokens(text, spellings) {
  const tokens = splitAtSeparators(text);
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i];
    spellings.set(token, (spellings.get(token) ?? 0) + 1);
  }
}

/**
 * Adds the spellings of the words of input blob `name` to `spellings`,
 * reading it a chunk at a time. The decoded text is counted about CHUNK_LEN
 * units at a time, up to its last separator: the word it may end in, cut
 * by the chunk, waits for the rest of its characters.
 *
 * @param {string} name
 * @param {Map<string, number>} spellings
 */
function countBlob(name, spellings) {
  const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  let pending = "";
  let read = 0;
  for (const chunk of blobs.open(name)) {
    pending += decodeChunk(decoder, chunk, read);
    read += chunk.length;
    if (pending.length >= CHUNK_LEN) {
      const cut = wordTailStart(pending);
      countTokens(pending.slice(0, cut), spellings);
      pending = pending.slice(cut);
    }
  }
  pending += decodeChunk(decoder, undefined, read);
  countTokens(pending, spellings);
}

/**
 * The text of the next `chunk` of the blob (undefined: its end), which
 * starts at byte `offset`; bytes that are not UTF-8 fail the job with
 * `bad_input`, like an inline input that is not.
 *
 * @param {TextDecoder} decoder
 * @param {Uint8Array | undefined} chunk
 * @param {number} offset
 */
function decodeChunk(decoder, chunk, offset) {
  try {
    return chunk === undefined ? decoder.decode() : decoder.decode(chunk, { stream: true });
  } catch {
    // The decoder may hold the first bytes (at most 3) of a character the
    // chunk was to finish.
    const where =
      chunk === undefined
        ? `it ends inside a character (byte ${offset})`
        : `invalid byte sequence in bytes ${Math.max(0, offset - 3)} to ${offset + chunk.length}`;
    throw new JobError("bad_input", `the input blob is not UTF-8: ${where}`);
  }
}

/**
 * Where the word `text` may end in starts: after its last character that
 * is neither alphanumeric nor an apostrophe (0 if there is none).
 *
 * @param {string} text
 */
function wordTailStart(text) {
  let i = text.length;
  while (i > 0) {
    let cp = text.charCodeAt(i - 1);
    let len = 1;
    if (cp >= 0xdc00 && cp <= 0xdfff && i >= 2) {
      const high = text.charCodeAt(i - 2);
      if (high >= 0xd800 && high <= 0xdbff) {
        cp = /** @type {number} */ (text.codePointAt(i - 2));
        len = 2;
      }
    }
    if (cp !== 0x27 && !inRanges(RANGES, cp)) {
      return i;
    }
    i -= len;
  }
  return 0;
}

/**
 * Writes every word and its count to the output blob COUNTS_BLOB, a
 * `word\tcount\n` line each, by count descending then word ascending (code
 * point order), as the top list is sorted.
 *
 * @param {Map<string, number>} counts
 */
function writeCounts(counts) {
  const sorted = [...counts].sort(([a, m], [b, n]) => n - m || compareCodePoints(a, b));
  const out = blobs.create(COUNTS_BLOB);
  let batch = "";
  for (let i = 0; i < sorted.length; i++) {
    batch += `${sorted[i][0]}\t${sorted[i][1]}\n`;
    if (batch.length >= WRITE_BATCH_LEN) {
      out.write(batch);
      batch = "";
    }
  }
  out.write(batch);
  out.close();
}

/**
 * Where the chunk of `text` from `start` ends: at a space or line break (both
 * separators) near CHUNK_LEN units on, or at the end of the text.
 *
 * @param {string} text
 * @param {number} start
 */
function chunkEnd(text, start) {
  const limit = start + CHUNK_LEN;
  if (limit >= text.length) {
    return text.length;
  }
  const before = Math.max(text.lastIndexOf(" ", limit), text.lastIndexOf("\n", limit));
  if (before > start) {
    return before;
  }
  const after = [text.indexOf(" ", limit), text.indexOf("\n", limit)].filter((i) => i !== -1);
  return after.length > 0 ? Math.min(...after) : text.length;
}

/**
 * The runs of alphanumeric characters and apostrophes in `text`, possibly
 * with empty strings among them.
 *
 * The fast path finds each kind of separator once and replaces all of it
 * with spaces (one native replaceAll per kind), then splits at spaces. Text
 * with unusually many kinds of separator, or many astral letters, takes the
 * exact RegExp split instead.
 *
 * @param {string} text
 * @returns {string[]}
 */
function splitAtSeparators(text) {
  let kinds = 0;
  let astralWordChars = 0;
  const maxAstralWordChars = text.length * MAX_ASTRAL_WORD_SHARE;
  NEXT_SEPARATOR.lastIndex = 0;
  for (let m; (m = NEXT_SEPARATOR.exec(text)) !== null; ) {
    let separator = m[0];
    const unit = separator.charCodeAt(0);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      // An astral character (the input was UTF-8, so the pair is whole).
      separator = text.slice(m.index, m.index + 2);
      if (inRanges(RANGES, /** @type {number} */ (separator.codePointAt(0)))) {
        if (++astralWordChars > maxAstralWordChars) {
          return text.split(SEPARATOR_RUNS);
        }
        NEXT_SEPARATOR.lastIndex = m.index + 2;
        continue;
      }
    }
    if (++kinds > MAX_SEPARATOR_KINDS) {
      return text.split(SEPARATOR_RUNS);
    }
    // Same length, so the search goes on from here.
    text = text.replaceAll(separator, separator.length === 1 ? " " : "  ");
    NEXT_SEPARATOR.lastIndex = m.index;
  }
  while (text.includes("  ")) {
    text = text.replaceAll("  ", " ");
  }
  return text.split(" ");
}

/** `word` without leading and trailing apostrophes. @param {string} word */
function trimApostrophes(word) {
  let start = 0;
  let end = word.length;
  while (start < end && word.charCodeAt(start) === 0x27) start++;
  while (end > start && word.charCodeAt(end - 1) === 0x27) end--;
  return start === 0 && end === word.length ? word : word.slice(start, end);
}

/**
 * Lowercases like Rust's str::to_lowercase. The engine's toLowerCase has the
 * same mappings except that it ignores the Greek final sigma rule, so words
 * with a capital sigma are lowercased code point by code point.
 *
 * @param {string} word
 */
function toLowerCase(word) {
  if (!word.includes("Σ")) {
    return word.toLowerCase();
  }
  const chars = Array.from(word);
  return chars
    .map((c, i) => (c === "Σ" ? (isFinalSigma(chars, i) ? "ς" : "σ") : c.toLowerCase()))
    .join("");
}

/**
 * Unicode's Final_Sigma condition as Rust applies it: the sigma follows a
 * cased letter and precedes none, skipping case-ignorable characters.
 *
 * @param {string[]} chars
 * @param {number} i
 */
function isFinalSigma(chars, i) {
  return casedAfterIgnorables(chars, i - 1, -1) && !casedAfterIgnorables(chars, i + 1, 1);
}

/**
 * Whether, from index `i` in direction `step`, the first character that is
 * not case-ignorable is cased.
 *
 * @param {string[]} chars
 * @param {number} i
 * @param {number} step
 */
function casedAfterIgnorables(chars, i, step) {
  for (; i >= 0 && i < chars.length; i += step) {
    const cp = /** @type {number} */ (chars[i].codePointAt(0));
    if (!inRanges(CASE_IGNORABLE, cp)) {
      return inRanges(CASED, cp);
    }
  }
  return false;
}

/**
 * Whether `cp` lies in one of the sorted, disjoint `ranges`.
 *
 * @param {number[][]} ranges
 * @param {number} cp
 */
function inRanges(ranges, cp) {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < ranges[mid][0]) hi = mid - 1;
    else if (cp > ranges[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

/**
 * The `n` most frequent words, by count descending then word ascending.
 *
 * @param {Map<string, number>} counts
 * @param {number} n
 */
function topWords(counts, n) {
  /** @type {{word: string, count: number}[]} */
  const top = [];
  counts.forEach((count, word) => {
    if (top.length === n && (count < top[n - 1].count || !before(count, word, top[n - 1]))) {
      return;
    }
    let i = top.length === n ? n - 1 : top.length;
    while (i > 0 && before(count, word, top[i - 1])) {
      top[i] = top[i - 1];
      i--;
    }
    top[i] = { word, count };
  });
  return top;
}

/**
 * Whether (count, word) sorts before `other`.
 *
 * @param {number} count
 * @param {string} word
 * @param {{word: string, count: number}} other
 */
function before(count, word, other) {
  return count !== other.count ? count > other.count : compareCodePoints(word, other.word) < 0;
}

/**
 * Compares strings by code point, like Rust's str ordering (UTF-8 bytes).
 * `<` compares UTF-16 units, which puts astral characters (surrogates,
 * 0xD800-0xDFFF) before 0xE000-0xFFFF; this corrects that.
 *
 * @param {string} a
 * @param {string} b
 */
function compareCodePoints(a, b) {
  const len = Math.min(a.length, b.length);
  for (let i = 0; i < len; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800 && y >= 0xd800) {
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      }
      return x - y;
    }
  }
  return a.length - b.length;
}
