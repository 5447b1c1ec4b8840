"""Counts words in a UTF-8 text: the Python twin of the Rust `wordcount`.

Input: the text itself, or, for a text of any size, an input blob named
`input` (the job's `input_blob`), read as a stream a piece at a time; the
inline input is then not read. Output: JSON
`{"words": W, "unique": U, "top": [{"word": "the", "count": 42}, ...]}`
with the 10 most frequent words (ties broken alphabetically, so the output
is deterministic), the same bytes whichever way the text came. A word is a
run of alphanumeric characters or apostrophes, trimmed of apostrophes and
compared case-insensitively; for the same text the output is byte for byte
the Rust job's.

A job given the blob also writes the output blob `counts.tsv`: every
distinct word and its count, `word<TAB>count<LF>`, most frequent first, ties
alphabetically. Its memory grows with the number of distinct words, not
with the size of the text.
"""

import io
from bisect import bisect_right
from collections import Counter
from heapq import nlargest

from cohort_job import JobError, blobs, info, job

from alnum import RANGES

#: How many of the most frequent words the output lists.
TOP_LEN = 10

#: The input blob the job reads when it was given one.
INPUT_BLOB = "input"

#: The output blob of every word's count, written when the input was a blob.
COUNTS_BLOB = "counts.tsv"

#: How many characters of a streamed text are read at a time.
PIECE_CHARS = 1 << 16

#: How many distinct tokens (words as written, before they are trimmed and
#: lowercased) are held before they are folded into the counts of words.
TOKENS_HELD_MAX = 1 << 16

# Rust's `char::is_alphanumeric` as sorted, disjoint, inclusive ranges; it is
# not `str.isalnum` (which, for one, leaves out combining marks that Unicode
# counts as alphabetic).
_STARTS = [lo for lo, _ in RANGES]
_ENDS = [hi for _, hi in RANGES]


def is_word_char(c: str) -> bool:
    """Whether `c` belongs in a word: Rust-alphanumeric, or an apostrophe."""
    cp = ord(c)
    if cp < 128:
        return c.isalnum() or c == "'"
    i = bisect_right(_STARTS, cp) - 1
    return i >= 0 and cp <= _ENDS[i]


# Lowercase mappings that Rust knows (Unicode 17) and CPython 3.14's str.lower
# does not (Unicode 16): capital letters new in Unicode 17. They are simple
# one-to-one mappings between letters, so the text is mapped before it is
# split (at no extra cost: it goes through str.translate anyway). What stays
# different: CPython does not count these letters as cased, so a capital
# sigma right before one of them lowercases to final "ς" here, "σ" in Rust.
_LOWER_UNICODE_17 = {0xA7CE: 0xA7CF, 0xA7D2: 0xA7D3, 0xA7D4: 0xA7D5}  # Latin
_LOWER_UNICODE_17.update({cp: cp + 0x1B for cp in range(0x16EA0, 0x16EB9)})  # Beria Erfe

# Every ASCII separator maps to a space; other separators are added per piece.
_BASE_TABLE = {cp: " " for cp in range(128) if not is_word_char(chr(cp))}
_BASE_TABLE.update((cp, chr(lower)) for cp, lower in _LOWER_UNICODE_17.items())


class WordCounter:
    """Counts the words of a text given in pieces, cut anywhere: the counts
    are the same however the text is cut. Between pieces it holds the counts
    and the word the last piece ended in, nothing else of the text."""

    def __init__(self) -> None:
        #: How many words so far (of the tokens folded so far).
        self.words = 0
        #: How often each (lowercased) word occurs (likewise).
        self.counts: Counter = Counter()
        # Tokens not yet folded into `counts`: counting them as written is
        # C's work (Counter.update), trimming and lowercasing them Python's,
        # done once per distinct token, at most TOKENS_HELD_MAX of them.
        self._tokens: Counter = Counter()
        # The start of the word the last piece ended in, as pieces, so that
        # a word longer than many pieces is joined once, not once a piece.
        self._partial: list[str] = []

    def feed(self, piece: str) -> None:
        """Counts the words of `piece`, the text's next characters."""
        # Turn every separator into a space, then let str.split() cut the
        # words: both run in C. Only the distinct characters of the piece
        # are classified.
        table = dict(_BASE_TABLE)
        for c in set(piece):
            if ord(c) >= 128 and not is_word_char(c):
                table[ord(c)] = " "
        mapped = piece.translate(table)
        cut = mapped.rfind(" ")
        if cut < 0:  # No separator: the piece goes on a word.
            self._partial.append(mapped)
            return
        done = mapped[:cut]
        if self._partial:
            done = "".join(self._partial) + done
        self._partial = [mapped[cut + 1 :]]
        self._count(done)

    def finish(self) -> tuple[int, Counter]:
        """The number of words and how often each occurs, once the whole
        text has been fed."""
        self._count("".join(self._partial))
        self._partial = []
        self._fold()
        return self.words, self.counts

    def _count(self, mapped: str) -> None:
        self._tokens.update(mapped.split())
        if len(self._tokens) > TOKENS_HELD_MAX:
            self._fold()

    def _fold(self) -> None:
        # Trim and lowercase each distinct token once. Each word is
        # lowercased on its own, as Rust does (a final sigma depends on what
        # follows it).
        for token, n in self._tokens.items():
            word = token.strip("'")
            if word:
                self.words += n
                self.counts[word.lower()] += n
        self._tokens.clear()


def count_words(text: str) -> tuple[int, Counter]:
    """The number of words in `text` and how often each (lowercased) occurs."""
    counter = WordCounter()
    counter.feed(text)
    return counter.finish()


def count_stream(text: io.TextIOBase) -> tuple[int, Counter]:
    """`count_words` of a text read from `text`, `PIECE_CHARS` at a time."""
    counter = WordCounter()
    while piece := text.read(PIECE_CHARS):
        counter.feed(piece)
    return counter.finish()


def count_input_blob() -> tuple[int, Counter]:
    """`count_words` of the input blob, streamed."""
    # newline="": the text as it is, "\r\n" included (both are separators
    # anyway), as the inline input is decoded.
    with io.TextIOWrapper(blobs.open(INPUT_BLOB), encoding="utf-8", newline="") as text:
        try:
            return count_stream(text)
        except UnicodeDecodeError as e:
            raise JobError.bad_input(f"input is not UTF-8: {e}") from None


def top_words(counts: Counter, n: int) -> list[tuple[str, int]]:
    """The `n` most frequent words, most frequent first, ties alphabetically
    (by code point, as Rust compares strings)."""
    if len(counts) > n:
        # Sort only the words that can make the list, not all of them.
        least = nlargest(n, counts.values())[-1]
        items = [(w, c) for w, c in counts.items() if c >= least]
    else:
        items = list(counts.items())
    items.sort(key=lambda wc: (-wc[1], wc[0]))
    return items[:n]


def ranked_words(counts: Counter) -> list[tuple[str, int]]:
    """Every word, most frequent first, ties alphabetically (as `top_words`)."""
    return sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))


def write_counts(ranked: list[tuple[str, int]]) -> None:
    """Writes `COUNTS_BLOB`: a `word<TAB>count<LF>` line per word, in order."""
    with blobs.create(COUNTS_BLOB) as out:
        for word, count in ranked:
            out.write(f"{word}\t{count}\n".encode("utf-8"))


def decode(data: bytes) -> str:
    """The inline input as text, refused as `@job(input="text")` refuses it."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JobError.bad_input(f"input is not UTF-8: {e}") from None


# Bytes in, not text: the inline input is decoded only when it is the text.
@job(input="bytes", output="json")
def run(data: bytes) -> dict:
    blob = next((blob for blob in blobs.inputs() if blob.name == INPUT_BLOB), None)
    if blob is not None:
        info(f"counting the input blob ({blob.size} bytes)")
        words, counts = count_input_blob()
        info(f"counted {words} words, {len(counts)} distinct")
        ranked = ranked_words(counts)
        write_counts(ranked)
        top = ranked[:TOP_LEN]
    else:
        words, counts = count_words(decode(data))
        info(f"counted {words} words, {len(counts)} distinct")
        top = top_words(counts, TOP_LEN)
    return {
        "words": words,
        "unique": len(counts),
        "top": [{"word": w, "count": c} for w, c in top],
    }
