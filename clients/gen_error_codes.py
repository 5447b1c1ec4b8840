#!/usr/bin/env python3
"""Writes the three clients' tables of the server's error codes from the
node's OpenAPI document, clients/openapi.json.

The node generates that document from its `ErrorCode` enum
(host/src/codes.rs): every route's error responses, grouped by HTTP
status, with one example `{"code", "message", "retryable"}` per code. So
the codes a route may answer, each code's status and whether a retry may
help are all in it, and this script reads them from there:

    python3 clients/gen_error_codes.py            # rewrite the tables
    python3 clients/gen_error_codes.py --check    # exit 1 if one is stale

Nothing runs it at build time. Each client's own suite checks its table
against the document (clients/rust/tests/error_codes.rs,
clients/python/tests/test_codes.py, clients/typescript/test/codes.test.js),
so a table left stale fails its tests; this script is the fix.

Codes no route documents (today `undecodable`, `method_not_allowed`,
`checkpoint_too_large` and `record_too_large`: node-to-node, or no route's
at all) are in no client's table. An answer with one still carries its own status; a batch's
refused item never has one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List, Tuple

CLIENTS = Path(__file__).resolve().parent
DOCUMENT = CLIENTS / "openapi.json"

#: code -> (HTTP status, retryable)
Table = Dict[str, Tuple[int, bool]]


def codes_of(document: dict) -> Table:
    """Every code of the document's error examples, with its status and
    retryability; fails if a code has two."""
    table: Table = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation.get("responses", {}).items():
                for media in response.get("content", {}).values():
                    for example in media.get("examples", {}).values():
                        value = example.get("value")
                        if not isinstance(value, dict) or not isinstance(value.get("code"), str):
                            continue
                        if not isinstance(value.get("retryable"), bool):
                            raise ValueError(f"{method} {path}: an example without retryable: {value}")
                        entry = (int(status), value["retryable"])
                        known = table.setdefault(value["code"], entry)
                        if known != entry:
                            raise ValueError(f"{value['code']} is {known} and {entry} ({method} {path})")
    return table


def ordered(table: Table) -> List[Tuple[str, int, bool]]:
    """The table's rows, ``(code, status, retryable)``, by status, then code."""
    rows = [(code, status, retryable) for code, (status, retryable) in table.items()]
    return sorted(rows, key=lambda row: (row[1], row[0]))


GENERATED = "Generated from clients/openapi.json by clients/gen_error_codes.py: do not edit."


def python(table: Table) -> str:
    """clients/python/cohort_client/_codes.py."""
    rows = "".join(f'    "{code}": ({status}, {retryable}),\n' for code, status, retryable in ordered(table))
    return (
        f'"""The server\'s error codes: the HTTP status each is answered with and\n'
        f"whether a retry may help.\n\n{GENERATED}\n"
        f'tests/test_codes.py checks it against the document.\n"""\n\n'
        "from typing import Dict, Tuple\n\n"
        "#: Every code the API documents: code -> (HTTP status, retryable).\n"
        f"ERROR_CODES: Dict[str, Tuple[int, bool]] = {{\n{rows}}}\n"
    )


def typescript(table: Table) -> str:
    """clients/typescript/src/codes.ts."""
    rows = "".join(
        f'  ["{code}", {{ status: {status}, retryable: {str(retryable).lower()} }}],\n'
        for code, status, retryable in ordered(table)
    )
    return (
        "/**\n"
        " * The server's error codes: the HTTP status each is answered with and\n"
        " * whether a retry may help.\n"
        " *\n"
        f" * {GENERATED}\n"
        " * test/codes.test.js checks it against the document.\n"
        " *\n"
        " * @packageDocumentation\n"
        " */\n\n"
        "/** A code's row of the server's table. */\n"
        "export interface CodeRow {\n"
        "  /** The HTTP status the server answers the code with. */\n"
        "  readonly status: number;\n"
        "  /** Whether the same request, sent again later, may succeed. */\n"
        "  readonly retryable: boolean;\n"
        "}\n\n"
        "/** Every code the API documents, by status then code. */\n"
        f"export const ERROR_CODES: ReadonlyMap<string, CodeRow> = new Map<string, CodeRow>([\n{rows}]);\n"
    )


def rust(table: Table) -> str:
    """clients/rust/src/codes.rs (as rustfmt writes it)."""
    rows = "".join(
        f'    ("{code}", {status}, {str(retryable).lower()}),\n' for code, status, retryable in ordered(table)
    )
    return (
        "//! The server's error codes: the HTTP status each is answered with and\n"
        "//! whether a retry may help.\n"
        "//!\n"
        f"//! {GENERATED}\n"
        "//! `tests/error_codes.rs` checks it against the document.\n\n"
        "/// Every code the API documents, by status then code: `(code, HTTP\n"
        "/// status, retryable)`.\n"
        f"pub const ERROR_CODES: &[(&str, u16, bool)] = &[\n{rows}];\n"
    )


TARGETS = {
    CLIENTS / "python/cohort_client/_codes.py": python,
    CLIENTS / "typescript/src/codes.ts": typescript,
    CLIENTS / "rust/src/codes.rs": rust,
}


def main(argv: List[str]) -> int:
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print(__doc__, file=sys.stderr)
        return 2
    table = codes_of(json.loads(DOCUMENT.read_text(encoding="utf-8")))
    stale = []
    for path, render in TARGETS.items():
        text = render(table)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path.relative_to(CLIENTS))
        if not check:
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if check else 'wrote'}: clients/{path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
