"""Unit tests of the cohort_job SDK in plain CPython (outside a build, where
the host functions are local): run by `tests/languages.rs`, or by hand with
`python3 -m unittest discover -s guest-sdk/python/tests`
and `guest-sdk/python` on PYTHONPATH."""

import itertools
import sys
import types
import unittest

import cohort_job
from cohort_job import JobError, call, checkpoint_json, job, resume_json

_modules = itertools.count()


def make_job(fn, **forms):
    """Marks `fn` as the job of a fresh module (a module holds one job)."""
    name = f"_cohort_job_test_{next(_modules)}"
    sys.modules[name] = types.ModuleType(name)
    fn.__module__ = name
    return job(**forms)(fn) if forms else job(fn)


class Forms(unittest.TestCase):
    def test_bytes_in_bytes_out(self):
        run = make_job(lambda data: data[::-1])
        self.assertEqual(call(run, b"abc"), b"cba")
        self.assertTrue(hasattr(sys.modules[run.__module__], "WitWorld"))

    def test_text_and_json(self):
        upper = make_job(lambda text: text.upper(), input="text", output="text")
        self.assertEqual(call(upper, "straße".encode()), "STRASSE".encode())
        total = make_job(lambda r: {"sum": sum(r["n"]), "é": True}, input="json", output="json")
        self.assertEqual(call(total, b'{"n": [1, 2]}'), '{"sum":3,"é":true}'.encode())

    def test_malformed_input_is_bad_input(self):
        text = make_job(lambda t: t, input="text", output="text")
        with self.assertRaises(JobError) as caught:
            call(text, b"caf\xe9")
        self.assertEqual(caught.exception.code, "bad_input")
        parsed = make_job(lambda v: v, input="json", output="json")
        for bad in (b"{", b"NaN", b""):
            with self.assertRaises(JobError) as caught:
                call(parsed, bad)
            self.assertEqual(caught.exception.code, "bad_input", bad)

    def test_a_result_of_the_wrong_type_is_bad_output(self):
        wrong = make_job(lambda data: "not bytes")
        with self.assertRaises(JobError) as caught:
            call(wrong, b"")
        self.assertEqual(caught.exception.code, "bad_output")
        self.assertIn("str", caught.exception.message)

    def test_unknown_forms_and_second_jobs_are_refused(self):
        with self.assertRaises(ValueError):
            job(input="xml")
        first = make_job(lambda d: d)
        second = lambda d: d  # noqa: E731
        second.__module__ = first.__module__
        with self.assertRaises(RuntimeError) as caught:
            job(second)
        self.assertIn("one job", str(caught.exception))


class Errors(unittest.TestCase):
    def test_job_errors_keep_their_code(self):
        def fail(data):
            raise JobError("too_big", "the input is too big")

        with self.assertRaises(JobError) as caught:
            call(make_job(fail), b"")
        self.assertEqual((caught.exception.code, caught.exception.message),
                         ("too_big", "the input is too big"))

    def test_any_other_exception_is_uncaught_exception_with_its_traceback(self):
        def crash(data):
            raise ValueError("asked to raise")

        with self.assertRaises(JobError) as caught:
            call(make_job(crash), b"")
        self.assertEqual(caught.exception.code, "uncaught_exception")
        self.assertTrue(caught.exception.message.startswith("ValueError: asked to raise"))
        self.assertIn("Traceback", caught.exception.message)
        self.assertLessEqual(len(caught.exception.message), cohort_job.TRACEBACK_LIMIT + 200)

    def test_even_system_exit_does_not_escape(self):
        def leave(data):
            sys.exit(3)

        with self.assertRaises(JobError) as caught:
            call(make_job(leave), b"")
        self.assertEqual(caught.exception.code, "uncaught_exception")


class Host(unittest.TestCase):
    def test_checkpoints_round_trip_locally(self):
        checkpoint_json({"next": 7, "count": 4})
        self.assertEqual(resume_json(), {"next": 7, "count": 4})

    def test_a_secret_is_what_the_local_host_holds_or_none(self):
        self.assertIsNone(cohort_job.secret("SMTP"))
        cohort_job._local_host.secrets["SMTP"] = "hunter2"
        try:
            self.assertEqual(cohort_job.secret("SMTP"), "hunter2")
        finally:
            cohort_job._local_host.secrets.clear()

    def test_log_levels_are_checked(self):
        cohort_job.info("fine")
        with self.assertRaises(ValueError):
            cohort_job.log("loud", "no such level")


if __name__ == "__main__":
    unittest.main()
