"""Layers point one way: ``shared/`` imports neither ``services/`` nor ``pipelines/`` (not even inside a
function), and ``pipelines/`` finds clusters through the client (``shared.client.discovery``), never
through the CLI's process launcher. Checked on the AST of every file, so lazy imports count too."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python_files(package: str) -> list[str]:
    out = []
    for root, _dirs, files in os.walk(os.path.join(REPO, package)):
        out += [os.path.join(root, f) for f in files if f.endswith(".py")]
    return sorted(out)


def _imports(path: str) -> Iterator[tuple[int, str]]:
    """Every module an ``import``/``from ... import`` names, anywhere in the file (absolute names)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:  # `from shared.cli import launcher`
                yield node.lineno, f"{node.module}.{alias.name}"


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in _python_files(package):
        for line, module in _imports(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                bad.append(f"{os.path.relpath(path, REPO)}:{line} imports {module}")
    return bad


def test_every_package_is_scanned() -> None:
    assert len(_python_files("shared")) > 30 and len(_python_files("pipelines")) > 5


def test_shared_imports_neither_services_nor_pipelines() -> None:
    assert _violations("shared", ("services", "pipelines")) == []


def test_pipelines_do_not_use_the_cli_launcher() -> None:
    assert _violations("pipelines", ("shared.cli.launcher",)) == []


@pytest.mark.parametrize("source, expected", [
    ("import services.broker\n", ["services.broker"]),
    ("def f():\n    from pipelines.bench import x\n", ["pipelines.bench", "pipelines.bench.x"]),
    ("from shared.cli import launcher\n", ["shared.cli", "shared.cli.launcher"]),
])
def test_the_scan_sees_lazy_and_from_imports(tmp_path: object, source: str, expected: list[str]) -> None:
    path = os.path.join(str(tmp_path), "m.py")
    with open(path, "w") as f:
        f.write(source)
    assert [m for _, m in _imports(path)] == expected
