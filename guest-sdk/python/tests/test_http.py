"""Unit tests of cohort_job.http in plain CPython: requests are checked and
prepared as in a built job, and go to a transport the test puts in place
(the wasi:http one is tested end to end by `tests/languages.rs`)."""

import unittest
from dataclasses import dataclass
from typing import Optional

import cohort_job
from cohort_job import JobError, call, http, job


class Recorder:
    """A transport that records requests and answers them with `response`."""

    def __init__(self, response=None, error=None):
        self.requests = []
        self.response = response or http.Response(200, [("content-type", "text/plain")], b"hello")
        self.error = error

    def __call__(self, prepared):
        self.requests.append(prepared)
        if self.error is not None:
            raise self.error
        return self.response


class WithTransport(unittest.TestCase):
    def use(self, transport):
        saved = http.transport
        http.transport = transport
        self.addCleanup(setattr, http, "transport", saved)
        return transport


class Requests(WithTransport):
    def test_json_bodies_get_their_headers(self):
        sent = self.use(Recorder())
        answer = http.post("https://api.example.com:8443/v1/charges?x=1#frag", json={"amount": 5, "é": 1},
                           headers={"Idempotency-Key": "k1"}, timeout=2.5)
        self.assertEqual(answer.text(), "hello")
        request = sent.requests[0]
        self.assertEqual((request.method, request.https, request.authority, request.path_with_query),
                         ("POST", True, "api.example.com:8443", "/v1/charges?x=1"))
        self.assertEqual(request.body, '{"amount":5,"é":1}'.encode())
        self.assertEqual(request.headers, [("Idempotency-Key", "k1"), ("Content-Type", "application/json"),
                                           ("Content-Length", str(len(request.body)))])
        self.assertEqual(request.timeout, 2.5)
        self.assertEqual(request.context, "POST https://api.example.com:8443")

    def test_bodies_and_content_length(self):
        sent = self.use(Recorder())
        http.get("http://h/path/é?q=ü")
        http.post("http://h", b"")
        http.put("http://h", "text", headers=[("X-A", "1"), ("X-A", "2"), ("Content-Type", "text/plain")])
        http.request("DELETE", "http://h", body=bytearray(b"ab"))
        get, empty_post, put, delete = sent.requests
        self.assertEqual(get.path_with_query, "/path/%C3%A9?q=%C3%BC")
        self.assertEqual((get.headers, get.body), ([], b""))
        self.assertEqual((empty_post.path_with_query, empty_post.headers), ("/", [("Content-Length", "0")]))
        self.assertEqual(put.headers[-1], ("Content-Length", "4"))
        self.assertEqual([v for n, v in put.headers if n == "X-A"], ["1", "2"])
        self.assertEqual((delete.body, delete.headers), (b"ab", [("Content-Length", "2")]))

    def test_malformed_requests_are_refused_before_any_call(self):
        sent = self.use(Recorder())
        for args, kwargs, expected in [
            (("GET", "ftp://h/"), {}, "only http and https"),
            (("GET", "http://user:pw@h/"), {}, "Authorization header"),
            (("GET", "http:// h/"), {}, "whitespace"),
            (("GET", "http://[::1/"), {}, "closing `]`"),
            (("GET", "http://::1/"), {}, "in brackets"),
            (("GET", "http://h:70000/"), {}, "not a port number"),
            (("GET", "http://hé/"), {}, "xn--"),
            (("GET", "h/x"), {}, "http:// or https://"),
            (("G T", "http://h/"), {}, "not a valid HTTP method"),
            (("GET", "http://h/"), {"headers": {"Bad Name": "x"}}, "not a valid header name"),
            (("GET", "http://h/"), {"headers": {"X": "a\r\nHost: evil"}}, "line break"),
            (("POST", "http://h/"), {"body": b"x", "json": {}}, "either body or json"),
            (("POST", "http://h/"), {"json": {"x": float("nan")}}, "cannot encode the JSON body"),
            (("POST", "http://h/"), {"body": 5}, "bytes or str"),
            (("GET", "http://h/"), {"timeout": 0}, "positive"),
        ]:
            with self.assertRaises(http.HttpError) as caught:
                http.request(*args, **kwargs)
            self.assertEqual(caught.exception.code, "http_invalid_request", args)
            self.assertIn(expected, caught.exception.message, args)
        self.assertEqual(sent.requests, [])

    def test_transport_errors_name_the_call_but_not_its_path(self):
        self.use(Recorder(error=http.HttpError("http_denied", "no grant (HTTP-request-denied)",
                                                wasi_code="HTTP-request-denied")))
        with self.assertRaises(JobError) as caught:
            http.post("https://api.example.com/v1/secret?token=t", json={})
        error = caught.exception
        self.assertIsInstance(error, http.HttpError)
        self.assertEqual(error.code, "http_denied")
        self.assertEqual(error.wasi_code, "HTTP-request-denied")
        self.assertEqual(error.message, "POST https://api.example.com: no grant (HTTP-request-denied)")
        self.assertNotIn("secret", str(error))

    def test_an_uncaught_http_error_fails_the_job_with_its_code(self):
        self.use(Recorder(error=http.HttpError("http_timeout", "too slow")))

        def fetch(data):
            return http.get("http://h/").body

        fetch.__module__ = "_cohort_http_test_job"
        import sys
        import types

        sys.modules[fetch.__module__] = types.ModuleType(fetch.__module__)
        with self.assertRaises(JobError) as caught:
            call(job(fetch), b"")
        self.assertEqual((caught.exception.code, caught.exception.message),
                         ("http_timeout", "GET http://h: too slow"))
        self.assertTrue(caught.exception.is_timeout)

    def test_without_a_node_calls_fail_clearly(self):
        with self.assertRaises(http.HttpError) as caught:
            http.get("http://h/")
        self.assertEqual(caught.exception.code, "http_error")
        self.assertIn("only in a built job", caught.exception.message)


class Responses(unittest.TestCase):
    def test_helpers(self):
        answer = http.Response(201, [("content-type", "application/json"), ("x-a", "1"), ("X-A", "2")],
                               b'{"ok": true}')
        self.assertTrue(answer.ok)
        self.assertEqual(answer.header("X-a"), "1")
        self.assertIsNone(answer.header("missing"))
        self.assertEqual(answer.json(), {"ok": True})
        self.assertIs(answer.raise_for_status(), answer)

    def test_bad_bodies_and_statuses_are_errors(self):
        with self.assertRaises(http.HttpError) as caught:
            http.Response(200, [], b"\xff").text()
        self.assertEqual(caught.exception.code, "http_bad_response")
        with self.assertRaises(http.HttpError) as caught:
            http.Response(200, [], b"{").json()
        self.assertEqual(caught.exception.code, "http_bad_response")
        with self.assertRaises(http.HttpError) as caught:
            http.Response(503, [], b"  down \n for " + b"x" * 500).raise_for_status()
        error = caught.exception
        self.assertEqual((error.code, error.status), ("http_status", 503))
        self.assertTrue(error.message.startswith("the server answered 503: down for xxx"))
        self.assertTrue(error.message.endswith("…"))


class ErrorCodes(unittest.TestCase):
    """wasi:http error codes, as the generated bindings name their cases."""

    def test_codes_become_kinds_and_readable_messages(self):
        @dataclass
        class ErrorCode_HttpRequestDenied:
            pass

        @dataclass
        class ErrorCode_ConnectionTimeout:
            pass

        @dataclass
        class DnsErrorPayload:
            rcode: Optional[str]
            info_code: Optional[int]

        @dataclass
        class ErrorCode_DnsError:
            value: DnsErrorPayload

        @dataclass
        class ErrorCode_InternalError:
            value: Optional[str]

        @dataclass
        class ErrorCode_SomethingNew:
            pass

        for code, kind, wasi, text in [
            (ErrorCode_HttpRequestDenied(), "http_denied", "HTTP-request-denied", "no HTTP grant"),
            (ErrorCode_ConnectionTimeout(), "http_timeout", "connection-timeout", "timed out"),
            (ErrorCode_DnsError(DnsErrorPayload("NXDOMAIN", None)), "http_error", "DNS-error", "NXDOMAIN"),
            (ErrorCode_InternalError("boom"), "http_error", "internal-error", "boom"),
            (ErrorCode_SomethingNew(), "http_error", "SomethingNew", "could not make"),
        ]:
            error = http._node_error(code)
            self.assertEqual((error.code, error.wasi_code), (kind, wasi))
            self.assertIn(text, error.message)
            self.assertTrue(error.message.endswith(f"({wasi})"))


class Package(unittest.TestCase):
    def test_http_is_part_of_the_package(self):
        self.assertIs(cohort_job.http, http)
        self.assertIn("http", cohort_job.__all__)
        self.assertTrue(issubclass(http.HttpError, JobError))


if __name__ == "__main__":
    unittest.main()
