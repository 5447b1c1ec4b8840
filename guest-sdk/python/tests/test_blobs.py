"""Unit tests of cohort_job.blobs in plain CPython.

Two kinds: a job's blob code against `blobs.local` (the in-memory blobs a
unit test of a job uses), and the module as a built job runs it, loaded
afresh with fakes of the bindings componentize-py generates
(`componentize_py_types`, `wit_world.imports.blobs` and `.streams`), whose
streams answer as wasi:io's do: short reads, empty reads, `closed` at the
end, `last-operation-failed` with an error resource. The real node behind
them is tested end to end by `tests/languages.rs`."""

import importlib.util
import io
import itertools
import sys
import types
import unittest
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import cohort_job
from cohort_job import JobError, blobs, call, job

_modules = itertools.count()


def make_job(fn, **forms):
    """Marks `fn` as the job of a fresh module (a module holds one job)."""
    name = f"_cohort_blobs_test_{next(_modules)}"
    sys.modules[name] = types.ModuleType(name)
    fn.__module__ = name
    return job(**forms)(fn) if forms else job(fn)


class WithLocalBlobs(unittest.TestCase):
    def setUp(self):
        blobs.local.clear()
        self.addCleanup(blobs.local.clear)


class Reading(WithLocalBlobs):
    def test_inputs_are_listed_input_first_with_digest_and_size(self):
        blobs.local.add_input("parent/out", b"")
        blobs.local.add_input("input", b"abc")
        self.assertEqual(
            blobs.inputs(),
            [
                blobs.Blob(
                    "input",
                    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                    3,
                ),
                blobs.Blob(
                    "parent/out",
                    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                    0,
                ),
            ],
        )

    def test_a_blob_reads_whole_in_pieces_and_from_an_offset(self):
        data = bytes(range(256)) * 1000
        blobs.local.add_input("input", data)
        with blobs.open("input") as f:
            self.assertIsInstance(f, io.BufferedReader)
            self.assertEqual(f.name, "input")
            self.assertEqual(f.read(10), data[:10])
            self.assertEqual(f.tell(), 10)
            self.assertEqual(f.read(), data[10:])
            self.assertEqual(f.read(), b"")
            self.assertEqual(f.tell(), len(data))
        self.assertTrue(f.closed)
        with blobs.open("input", offset=200_000) as f:
            self.assertEqual(f.read(5), data[200_000:200_005])
            self.assertEqual(f.tell(), 200_005)
        with blobs.open("input", len(data)) as f:
            self.assertEqual(f.read(), b"")

    def test_text_is_read_through_a_text_wrapper(self):
        text = "ΟΔΟΣ straße 日本 🙂\r\n" * 3000  # Multi-byte characters cut by the buffers.
        blobs.local.add_input("input", text.encode())
        with io.TextIOWrapper(blobs.open("input"), encoding="utf-8", newline="") as f:
            pieces = iter(lambda: f.read(1000), "")
            self.assertEqual("".join(pieces), text)

    def test_refusals_are_blob_open_failed(self):
        blobs.local.add_input("input", b"abc")
        for name, offset, expected in [
            ("nope", 0, "no input blob named 'nope' (it has: input)"),
            ("input", 4, "offset 4 is past the end"),
        ]:
            with self.assertRaises(blobs.BlobError) as caught:
                blobs.open(name, offset)
            error = caught.exception
            self.assertIsInstance(error, JobError)
            self.assertEqual((error.code, error.name), ("blob_open_failed", name))
            self.assertIn(expected, error.message)
            self.assertTrue(error.message.startswith(f"cannot open the input blob {name!r}: "))
        with self.assertRaises(ValueError):
            blobs.open("input", -1)
        with self.assertRaises(TypeError):
            blobs.open(b"input")


class Writing(WithLocalBlobs):
    def test_an_output_gets_every_byte_written(self):
        data = bytes(range(256)) * 1000
        with blobs.create("out.bin") as f:
            self.assertIsInstance(f, io.BufferedWriter)
            f.write(data[:3])
            f.write(memoryview(data)[3:])
        self.assertEqual(blobs.local.outputs, {"out.bin": data})
        with io.TextIOWrapper(blobs.create("notes.txt"), encoding="utf-8") as f:
            f.write("straße\n")
        self.assertEqual(blobs.local.outputs["notes.txt"], "straße\n".encode())

    def test_bad_names_and_too_many_outputs_are_refused(self):
        for name in ["", "a/b", "x" * 129, "é"]:
            with self.assertRaises(blobs.BlobError) as caught:
                blobs.create(name)
            self.assertEqual(caught.exception.code, "blob_create_failed", name)
            self.assertIn("output names are 1 to 128 bytes", caught.exception.message)
        for i in range(64):
            blobs.create(f"out-{i}").close()
        blobs.create("out-0").close()  # Created again: not one more.
        with self.assertRaises(blobs.BlobError) as caught:
            blobs.create("one-too-many")
        self.assertIn("at most 64 outputs", caught.exception.message)

    def test_creating_again_starts_over_and_the_old_file_fails(self):
        old = blobs.create("out")
        old.write(b"first")
        old.flush()
        new = blobs.create("out")
        new.write(b"second")
        new.close()
        self.assertEqual(blobs.local.outputs["out"], b"second")
        old.write(b"more")
        with self.assertRaises(blobs.BlobError) as caught:
            old.flush()
        self.assertEqual(caught.exception.code, "io_error")
        self.assertIn("'out' is closed", caught.exception.message)
        self.assertEqual(blobs.local.outputs["out"], b"second")


class InAJob(WithLocalBlobs):
    def test_an_output_created_again_while_its_first_writer_is_open_succeeds(self):
        kept = []

        def run(data):
            first = blobs.create("out")
            first.write(b"first")  # Still buffered when the job ends.
            second = blobs.create("out")
            second.write(data)
            kept.append(first)
            return b"done"

        self.assertEqual(call(make_job(run), b"second"), b"done")
        self.assertEqual(blobs.local.outputs["out"], b"second")

    def test_outputs_left_open_are_flushed_before_the_job_ends(self):
        kept = []

        def run(data):
            out = blobs.create("out")
            out.write(data * 3)  # Less than a buffer: still in it.
            kept.append(out)
            return b"done"

        self.assertEqual(call(make_job(run), b"ab"), b"done")
        self.assertTrue(kept[0].closed)
        self.assertEqual(blobs.local.outputs["out"], b"ababab")

    def test_an_uncaught_blob_error_fails_the_job_with_its_code(self):
        def run(data):
            return blobs.open("input").read()

        with self.assertRaises(JobError) as caught:
            call(make_job(run), b"")
        self.assertEqual(caught.exception.code, "blob_open_failed")
        self.assertIn("no input blob named 'input'", caught.exception.message)

    def test_a_failed_jobs_open_outputs_are_closed_quietly(self):
        kept = []

        def run(data):
            kept.append(blobs.create("out"))
            kept[0].write(b"x")
            blobs.create("out").close()
            raise JobError("own_failure", "the job's own")

        with self.assertRaises(JobError) as caught:
            call(make_job(run), b"")
        self.assertEqual(caught.exception.code, "own_failure")


# -- as in a built job: fakes of the generated bindings ---------------------------

E = TypeVar("E")


@dataclass(frozen=True)
class FakeErr(Generic[E], Exception):
    """componentize_py_types.Err, as componentize-py 0.25 generates it."""

    value: E


@dataclass
class StreamError_LastOperationFailed:
    value: Any


@dataclass
class StreamError_Closed:
    pass


@dataclass
class GeneratedBlob:
    """wit_world.imports.blobs.Blob."""

    name: str
    digest: str
    size: int


class Resource:
    """What every generated resource has: `__exit__` drops it."""

    def __init__(self):
        self.dropped = False

    def __enter__(self):
        return self

    def __exit__(self, *_):
        assert not self.dropped, "dropped twice"
        self.dropped = True


class Error(Resource):
    """wasi:io/error.error."""

    def __init__(self, message):
        super().__init__()
        self.message = message

    def to_debug_string(self):
        return self.message


class InputStream(Resource):
    """An input-stream answering `blocking_read` from `answers` (bytes, or
    an error to raise), then `closed`."""

    def __init__(self, answers):
        super().__init__()
        self.answers = list(answers)
        self.asked = []

    def blocking_read(self, length):
        assert not self.dropped
        self.asked.append(length)
        if not self.answers:
            raise FakeErr(StreamError_Closed())
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        assert len(answer) <= length
        return answer


class OutputStream(Resource):
    """An output-stream that takes what it is given, failing from write
    number `fail_at` with `error`."""

    def __init__(self, fail_at=None, error=None):
        super().__init__()
        self.writes = []
        self.fail_at = fail_at
        self.error = error

    def blocking_write_and_flush(self, contents):
        assert not self.dropped
        assert isinstance(contents, bytes)
        # wasi:io traps on more: the module must never ask it.
        assert len(contents) <= 4096, len(contents)
        if self.fail_at is not None and len(self.writes) >= self.fail_at:
            raise FakeErr(self.error)
        self.writes.append(contents)


class FakeNode:
    """wit_world.imports.blobs: what `inputs`, `open` and `create` answer."""

    def __init__(self):
        self.listed = []
        self.streams = {}
        self.opened = []
        self.outputs = {}
        self.refusal = None

    def inputs(self):
        return self.listed

    def open(self, name, offset):
        self.opened.append((name, offset))
        if self.refusal is not None:
            raise FakeErr(self.refusal)
        return self.streams[name]

    def create(self, name):
        if self.refusal is not None:
            raise FakeErr(self.refusal)
        return self.outputs[name]


def load_with_bindings(node):
    """A fresh copy of cohort_job.blobs, imported as a built job imports it:
    with the generated modules present (fakes, here)."""
    wit_world = types.ModuleType("wit_world")
    imports = types.ModuleType("wit_world.imports")
    streams = types.ModuleType("wit_world.imports.streams")
    streams.StreamError_Closed = StreamError_Closed
    streams.StreamError_LastOperationFailed = StreamError_LastOperationFailed
    generated = types.ModuleType("wit_world.imports.blobs")
    for name in ("inputs", "open", "create"):
        setattr(generated, name, getattr(node, name))
    wit_world.imports = imports
    imports.streams = streams
    imports.blobs = generated
    runtime_types = types.ModuleType("componentize_py_types")
    runtime_types.Err = FakeErr
    fakes = {
        "componentize_py_types": runtime_types,
        "wit_world": wit_world,
        "wit_world.imports": imports,
        "wit_world.imports.streams": streams,
        "wit_world.imports.blobs": generated,
    }
    path = Path(cohort_job.__file__).with_name("blobs.py")
    spec = importlib.util.spec_from_file_location("cohort_job._blobs_as_built", path)
    module = importlib.util.module_from_spec(spec)
    # The module itself too, while it runs: dataclasses look it up there.
    fakes[spec.name] = module
    saved = {name: sys.modules.get(name) for name in fakes}
    sys.modules.update(fakes)
    try:
        spec.loader.exec_module(module)
    finally:
        for name, before in saved.items():
            if before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = before
    return module, generated


class AsBuilt(unittest.TestCase):
    def setUp(self):
        self.node = FakeNode()
        self.blobs, self.generated = load_with_bindings(self.node)

    def test_the_generated_bindings_answer_and_there_is_no_local_stand_in(self):
        self.assertIsNone(self.blobs.local)
        self.assertIs(self.blobs._host, self.generated)
        digest = "ab" * 32
        self.node.listed = [GeneratedBlob("input", digest, 7), GeneratedBlob("p/o", digest, 0)]
        self.assertEqual(
            self.blobs.inputs(),
            [self.blobs.Blob("input", digest, 7), self.blobs.Blob("p/o", digest, 0)],
        )

    def test_reads_ask_bounded_pieces_take_short_and_empty_answers_and_end_at_closed(self):
        stream = InputStream([b"ab", b"", b"c" * 5000, b"d"])
        self.node.streams["input"] = stream
        with self.blobs.open("input", 10) as f:
            self.assertEqual(self.node.opened, [("input", 10)])
            self.assertEqual(f.read(3), b"abc")
            self.assertEqual(f.tell(), 13)
            self.assertEqual(f.read(), b"c" * 4999 + b"d")
            self.assertEqual(f.tell(), 10 + 5003)
            self.assertEqual(f.read(), b"")
        self.assertTrue(stream.dropped)
        self.assertTrue(all(0 < n <= self.blobs.READ_BYTES_MAX for n in stream.asked), stream.asked)

    def test_a_broken_read_is_an_io_error_with_the_nodes_reason(self):
        error = Error("cannot read the blob: I/O error")
        self.node.streams["input"] = InputStream(
            [b"ok", FakeErr(StreamError_LastOperationFailed(error))]
        )
        with self.blobs.open("input") as f:
            self.assertEqual(f.read(2), b"ok")
            with self.assertRaises(JobError) as caught:
                f.read(1)
        self.assertEqual(caught.exception.code, "io_error")
        self.assertEqual(
            caught.exception.message,
            "reading the input blob 'input' failed: cannot read the blob: I/O error",
        )
        self.assertTrue(error.dropped)

    def test_writes_go_out_in_pieces_of_at_most_4096_bytes(self):
        out = OutputStream()
        self.node.outputs["out"] = out
        data = bytes(range(256)) * 400  # 102,400 bytes: more than a buffer.
        with self.blobs.create("out") as f:
            f.write(b"x")
            f.write(data)
            f.write(b"y")
        self.assertEqual(b"".join(out.writes), b"x" + data + b"y")
        self.assertTrue(all(0 < len(w) <= 4096 for w in out.writes))
        self.assertTrue(out.dropped)

    def test_a_failed_write_is_an_io_error(self):
        for error, expected in [
            (
                StreamError_LastOperationFailed(Error("the job's outputs would come to 9 bytes; the limit is 8")),
                "writing the output blob 'out' failed: the job's outputs would come to 9 bytes; the limit is 8",
            ),
            (StreamError_Closed(), "the output blob 'out' is closed"),
        ]:
            self.node.outputs["out"] = OutputStream(fail_at=1, error=error)
            f = self.blobs.create("out")
            f.write(b"a" * 4096)
            f.write(b"b" * 4096)
            with self.assertRaises(JobError) as caught:
                f.close()
            self.assertEqual(caught.exception.code, "io_error")
            self.assertTrue(caught.exception.message.startswith(expected), caught.exception.message)
            self.assertTrue(f.closed)
            self.assertTrue(self.node.outputs["out"].dropped)

    def test_refusals_carry_the_nodes_reason(self):
        self.node.refusal = 'this job has no input blob named "x" (it has: none)'
        with self.assertRaises(JobError) as caught:
            self.blobs.open("x")
        self.assertEqual(caught.exception.code, "blob_open_failed")
        self.assertEqual(
            caught.exception.message,
            "cannot open the input blob 'x': this job has no input blob named \"x\" (it has: none)",
        )
        self.node.refusal = "a job may write at most 64 outputs"
        with self.assertRaises(JobError) as caught:
            self.blobs.create("y")
        self.assertEqual(caught.exception.code, "blob_create_failed")
        self.assertEqual(
            caught.exception.message, "cannot create the output blob 'y': a job may write at most 64 outputs"
        )


class Package(unittest.TestCase):
    def test_blobs_is_part_of_the_package(self):
        self.assertIs(cohort_job.blobs, blobs)
        self.assertIn("blobs", cohort_job.__all__)
        self.assertTrue(issubclass(blobs.BlobError, JobError))


if __name__ == "__main__":
    unittest.main()
