"""Counts words in a UTF-8 text: the Python twin of the Rust `wordcount`.

Input: the text itself. Output: JSON
`{"words": W, "unique": U, "top": [{"word": "the", "count": 42}, ...]}`
with the 10 most frequent words (ties broken alphabetically, so the output
is deterministic). A word is a run of alphanumeric characters or
apostrophes, trimmed of apostrophes and compared case-insensitively; for the
same text the output is byte for byte the Rust job's.
"""

from bisect import bisect_right
from collections import Counter
from heapq import nlargest

from cohort_job import info, job

from alnum import RANGES

#: How many of the most frequent words the output lists.
TOP_LEN = 10

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

# Every ASCII separator maps to a space; other separators are added per text.
_BASE_TABLE = {cp: " " for cp in range(128) if not is_word_char(chr(cp))}
_BASE_TABLE.update((cp, chr(lower)) for cp, lower in _LOWER_UNICODE_17.items())


def count_words(text: str) -> tuple[int, Counter]:
    """The number of words in `text` and how often each (lowercased) occurs."""
    # Turn every separator into a space, then let str.split() cut the words:
    # both run in C. Only the distinct characters of the text are classified.
    table = dict(_BASE_TABLE)
    for c in set(text):
        if ord(c) >= 128 and not is_word_char(c):
            table[ord(c)] = " "
    tokens = Counter(text.translate(table).split())
    # Trim and lowercase each distinct token once. Each word is lowercased on
    # its own, as Rust does (a final sigma depends on what follows it).
    counts: Counter = Counter()
    words = 0
    for token, n in tokens.items():
        word = token.strip("'")
        if word:
            words += n
            counts[word.lower()] += n
    return words, counts


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


@job(input="text", output="json")
def run(text: str) -> dict:
    words, counts = count_words(text)
    info(f"counted {words} words, {len(counts)} distinct")
    top = top_words(counts, TOP_LEN)
    return {
        "words": words,
        "unique": len(counts),
        "top": [{"word": w, "count": c} for w, c in top],
    }
