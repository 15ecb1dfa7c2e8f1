"""No log call passes an ``extra`` key that a ``LogRecord`` already has: ``logging`` raises ``KeyError`` for
those (``"message"`` made every finished cleaning job fail its worker's round, and the worker then waited
``log.cleaner.backoff.ms`` before the next job). Checked on the AST of every file of the code."""

from __future__ import annotations

import ast
import logging

from tests.unit.test_layering import _python_files

RESERVED = set(logging.LogRecord("n", logging.INFO, "p", 0, "m", None, None).__dict__) | {"message", "asctime"}


def test_no_log_extra_overwrites_a_log_record_attribute() -> None:
    clashes = []
    for package in ("services", "shared", "pipelines"):
        for path in _python_files(package):
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
            for node in ast.walk(tree):
                if isinstance(node, ast.keyword) and node.arg == "extra" and isinstance(node.value, ast.Dict):
                    clashes += [f"{path}:{node.lineno}: {k.value}" for k in node.value.keys
                                if isinstance(k, ast.Constant) and k.value in RESERVED]
    assert not clashes
    assert "message" in RESERVED and "msg" in RESERVED
