"""Real cohort nodes for the tests: started from ``$COHORT_BIN``, killed at teardown.

The tests read four variables and fail (never skip) without them:
``COHORT_BIN`` (the cohort binary), ``COHORT_ECHO_WASM`` (a job that returns
its input), ``COHORT_TRAP_WASM`` (a job that always traps) and
``COHORT_WORDCOUNT_WASM`` (the ``wordcount`` example, which streams its
input blob and writes the output blob ``counts.tsv``; only the test of
blobs given to jobs needs it).
"""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Callable, Iterator, List, Optional, Sequence

import httpx
import pytest

START_TIMEOUT_S = 30.0
POLL_S = 0.05
_LISTENING = re.compile(r"gossiping on (\S+), listening on (http://\S+)")


def required_env(name: str) -> str:
    """A variable the tests need; fails the test clearly when it is not set."""
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            f"{name} is not set: the tests need COHORT_BIN (the cohort binary), "
            "COHORT_ECHO_WASM, COHORT_TRAP_WASM and COHORT_WORDCOUNT_WASM (job components)",
            pytrace=False,
        )
    if not Path(value).is_file():
        pytest.fail(f"{name}={value} is not a file", pytrace=False)
    return value


class Node:
    """A running ``cohort node`` process."""

    def __init__(self, process: "subprocess.Popen[str]", node_id: str, url: str, gossip: str, log: Path) -> None:
        self.process = process
        self.node_id = node_id
        self.url = url
        self.gossip = gossip
        self.log = log

    def kill(self) -> None:
        """SIGKILL the node and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


def _lines(stream: IO[str], into: "queue.Queue[Optional[str]]") -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _start(binary: str, data_dir: Path, node_id: str, args: Sequence[str]) -> Node:
    log = data_dir.parent / f"{node_id}.stderr"
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            [binary, "node", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), "--node-id", node_id, *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    lines: "queue.Queue[Optional[str]]" = queue.Queue()
    threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            process.kill()
            pytest.fail(f"node {node_id} did not say where it listens within {START_TIMEOUT_S} s; see {log}")
        if line is None:
            pytest.fail(f"node {node_id} exited ({process.wait()}) before listening; see {log}")
        found = _LISTENING.search(line)
        if found:
            return Node(process, node_id, found.group(2), found.group(1), log)


def _await_cluster(node: Node, need_workers: bool, token: Optional[str] = None) -> None:
    """Until the node's ``GET /v1/cluster`` names a master (and a worker)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last = "no answer"
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    with httpx.Client(timeout=5.0, headers=headers) as http:
        while time.monotonic() < deadline:
            try:
                cluster = http.get(f"{node.url}/v1/cluster").json()
                if cluster.get("master_node") and (cluster.get("workers") or not need_workers):
                    return
                last = str(cluster)
            except (httpx.HTTPError, ValueError) as error:
                last = repr(error)
            time.sleep(POLL_S)
    node.kill()
    pytest.fail(f"node {node.node_id} has no master/worker after {START_TIMEOUT_S} s: {last}; see {node.log}")


StartNode = Callable[..., Node]


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[StartNode]:
    """Start cohort nodes: ``start_node("p1", seed=None, roles=None, slots=None,
    extra=(), ready=True)``.

    Each returns once the node serves and, when ``ready``, its cluster has a
    master and, unless ``slots=0``, a worker (a node with a cluster key
    answers that only to a token: see `keyed_node`). Every node is killed at
    teardown.
    """
    binary = required_env("COHORT_BIN")
    nodes: List[Node] = []

    def start(
        node_id: str,
        seed: Optional[Node] = None,
        roles: Optional[str] = None,
        slots: Optional[int] = None,
        extra: Sequence[str] = (),
        ready: bool = True,
    ) -> Node:
        args: List[str] = list(extra)
        if seed is not None:
            args += ["--seed", seed.gossip]
        if roles is not None:
            args += ["--roles", roles]
        if slots is not None:
            args += ["--slots", str(slots)]
        data_dir = tmp_path / node_id
        data_dir.mkdir()
        node = _start(binary, data_dir, node_id, args)
        nodes.append(node)
        if ready:
            _await_cluster(node, need_workers=slots != 0)
        return node

    yield start
    for node in nodes:
        node.kill()


def cohort(*args: str) -> str:
    """Runs ``cohort ARGS``; its stdout (fails the test with its stderr)."""
    done = subprocess.run(
        [required_env("COHORT_BIN"), *args], capture_output=True, text=True, timeout=START_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(f"cohort {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done.stdout


class KeyedNode:
    """A node started with a cluster key, and tokens made with it."""

    def __init__(self, node: Node, key: Path) -> None:
        self.node = node
        self.url = node.url
        self.key = key

    def token(self, scopes: str, namespace: Optional[str] = None) -> str:
        """A token with ``scopes``, confined to ``namespace`` if given; tried
        again while the master comes up."""
        args = ["token", "create", "--server", self.url, "--cluster-key", str(self.key), "--scope", scopes]
        if namespace is not None:
            args += ["--namespace", namespace]
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                return cohort(*args).strip()
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(POLL_S)


@pytest.fixture
def keyed_node(start_node: StartNode, tmp_path: Path) -> KeyedNode:
    """One node with every role and a cluster key: tokens are checked."""
    key = tmp_path / "cluster.key"
    cohort("keygen", str(key))
    node = start_node("k1", extra=["--cluster-key", str(key)], ready=False)
    keyed = KeyedNode(node, key)
    _await_cluster(node, need_workers=True, token=keyed.token("read"))
    return keyed


@pytest.fixture
def node(start_node: StartNode) -> Node:
    """One node with every role."""
    return start_node("p1")


@pytest.fixture
def echo_wasm() -> str:
    """Path of a job component that returns its input unchanged."""
    return required_env("COHORT_ECHO_WASM")


@pytest.fixture
def trap_wasm() -> str:
    """Path of a job component that always traps."""
    return required_env("COHORT_TRAP_WASM")


@pytest.fixture
def wordcount_wasm() -> str:
    """Path of the ``wordcount`` example: given an input blob, it streams it
    and writes the output blob ``counts.tsv`` (a ``word<TAB>count`` line a word)."""
    return required_env("COHORT_WORDCOUNT_WASM")


@pytest.fixture
def dead_url() -> str:
    """The URL of a loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def all_job_ids(url: str) -> List[int]:
    """Every job the cluster knows, through ``GET /v1/jobs`` page by page."""
    ids: List[int] = []
    cursor: Optional[str] = None
    with httpx.Client(timeout=30.0) as http:
        while True:
            params = {"limit": "1000"} if cursor is None else {"limit": "1000", "cursor": cursor}
            page = http.get(f"{url}/v1/jobs", params=params).raise_for_status().json()
            ids += [job["id"] for job in page["jobs"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                return ids
