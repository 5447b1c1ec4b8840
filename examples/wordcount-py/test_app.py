"""Unit tests of the wordcount job in plain CPython, with the SDK's local
blobs standing in for a node's: a text streamed from the input blob, cut
anywhere, gives the bytes the same text gives inline, and `counts.tsv`.

    cd examples/wordcount-py
    PYTHONPATH=../../guest-sdk/python python3 -m unittest -v test_app

(`tests/languages.rs` checks the built component against the Rust job's
output.)"""

import random
import unittest

import app
from cohort_job import JobError, blobs, call

# Words of several scripts, final and non-final sigmas, apostrophes, and
# separators of every kind (ASCII, non-ASCII, zero-width, BOM, CR LF).
_ALPHABET = list("abcdeABCDE'  \t\n\r.,-") + list(
    "ΟΔΟΣσςİıéü𝒜𐐀ﬀ\u0301\u200b\u00a0\ufeff日本語"
)


def _texts():
    rng = random.Random(36)
    yield "the cat and the hat"
    yield ""
    yield "'' ' '''"
    yield "ΟΔΟΣ ΟΔΟΣ σοφίαΣ"
    yield "don't 'quoted' 'tis rock'n'roll"
    yield "word" * 20_000  # One word, longer than many pieces.
    yield "".join(rng.choice(_ALPHABET) for _ in range(30_000))


class Streamed(unittest.TestCase):
    def setUp(self):
        blobs.local.clear()
        self.addCleanup(blobs.local.clear)
        self.addCleanup(setattr, app, "PIECE_CHARS", app.PIECE_CHARS)
        self.addCleanup(setattr, app, "TOKENS_HELD_MAX", app.TOKENS_HELD_MAX)

    def streamed(self, data: bytes) -> bytes:
        """The job's output for `data` as its input blob (whose `counts.tsv`
        is then in `blobs.local.outputs`)."""
        blobs.local.clear()
        blobs.local.add_input("input", data)
        return call(app.run, b"")

    def inline(self, data: bytes) -> bytes:
        """The job's output for `data` as its inline input."""
        blobs.local.clear()
        return call(app.run, data)

    def test_the_inline_input_gives_what_it_always_gave(self):
        self.assertEqual(
            self.inline(b"the cat and the hat"),
            b'{"words":5,"unique":4,"top":[{"word":"the","count":2},{"word":"and","count":1},'
            b'{"word":"cat","count":1},{"word":"hat","count":1}]}',
        )
        self.assertEqual(blobs.local.outputs, {})

    def test_a_blob_gives_the_inline_bytes_however_the_text_is_cut(self):
        for text in _texts():
            data = text.encode()
            inline = self.inline(data)
            for piece, held in [(1, 1 << 16), (2, 1 << 16), (7, 2), (1000, 2), (1000, 1 << 16), (1 << 16, 1 << 16)]:
                # Tokens folded into the counts now and then, or all at the end.
                app.PIECE_CHARS, app.TOKENS_HELD_MAX = piece, held
                self.assertEqual(self.streamed(data), inline, (text[:30], piece, held))

    def test_counts_tsv_lists_every_word_most_frequent_first(self):
        self.streamed("The cat and THE hat; the end".encode())
        self.assertEqual(
            blobs.local.outputs["counts.tsv"],
            b"the\t3\nand\t1\ncat\t1\nend\t1\nhat\t1\n",
        )
        for text in _texts():
            self.streamed(text.encode())
            lines = blobs.local.outputs["counts.tsv"].decode().split("\n")
            self.assertEqual(lines.pop(), "")
            rows = [(word, int(count)) for word, count in (line.split("\t") for line in lines)]
            words, counts = app.count_words(text)
            self.assertEqual(rows, sorted(counts.items(), key=lambda wc: (-wc[1], wc[0])))
            self.assertEqual(sum(count for _, count in rows), words)

    def test_text_that_is_not_utf8_is_bad_input_inline_or_streamed(self):
        blobs.local.add_input("input", b"fine so far " * 10_000 + b"\xff")
        with self.assertRaises(JobError) as caught:
            call(app.run, b"")
        self.assertEqual(caught.exception.code, "bad_input")
        self.assertIn("input is not UTF-8", caught.exception.message)
        # With a blob, the inline input is not read at all.
        blobs.local.add_input("input", b"fine")
        self.assertIn(b'"words":1', call(app.run, b"\xff"))
        blobs.local.clear()
        with self.assertRaises(JobError) as caught:
            call(app.run, b"caf\xe9")
        self.assertEqual(
            (caught.exception.code, caught.exception.message),
            ("bad_input", "input is not UTF-8: 'utf-8' codec can't decode byte 0xe9 in position 3: unexpected end of data"),
        )


if __name__ == "__main__":
    unittest.main()
