"""``shared.errors``: Kafka's codes (cross-checked with kio, generated independently from Kafka's
``Errors.java``), Kafka's retriable set, and the one table from a code to the class a receiver raises,
whatever else was imported."""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

from shared import errors
from shared.errors import (
    ERROR_CLASSES,
    RETRIABLE,
    ErrorCode,
    GroupError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
    TidelogError,
    error_class,
    error_for,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KIO = {k.name.upper(): k for k in KioErrorCode}
HIGHEST = 120  # ErrorCode holds every Kafka code up to here

#: Classes that other modules defined before they moved here: the old import names must keep working.
OLD_HOMES = [
    ("shared.quota.entities", "QuotaConfigError"),
    ("shared.client.futures", "KafkaTimeoutError"),
    ("services.coordinator.group", "GroupError"),
    ("services.broker.partition", "NotEnoughReplicasError"),
    ("services.broker.producer_state", "OutOfOrderSequenceError"),
    ("services.broker.producer_state", "InvalidProducerEpochError"),
    ("services.controller.rest.topics", "NotActiveError"),
    ("services.controller.assignment", "InvalidReplicationFactorError"),
    ("services.controller.assignment", "InvalidPartitionsError"),
    ("services.controller.partitions", "AlterPartitionError"),
    ("services.controller.topics", "TopicExistsError"),
    ("services.controller.election", "FencedError"),
    ("services.controller.election", "ConflictError"),
    ("pipelines.tidelog_source.data_loss", "DataLossError"),
]

#: Prints ``{number: [class name, code name, retriable]}`` for -3..130, with only shared.errors imported.
_ISOLATED = """
import json, sys
from shared.errors import error_for
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("shared", "services", "pipelines"))
assert loaded == ["shared", "shared.errors"], loaded
out = {}
for n in range(-3, 131):
    e = error_for(n, "m")
    out[n] = [type(e).__qualname__, e.code.name, e.retriable]
print(json.dumps(out))
"""


def _tidelog_classes() -> list[type[TidelogError]]:
    found: list[type[TidelogError]] = []
    todo: list[type[TidelogError]] = [TidelogError]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


# -- the codes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_every_name_and_number_is_kafkas(code: ErrorCode) -> None:
    assert code.name in KIO, f"{code.name} is not a Kafka error name"
    assert code.value == KIO[code.name].value


def test_every_kafka_code_up_to_120_is_here() -> None:
    missing = sorted((k.value, name) for name, k in KIO.items() if k.value <= HIGHEST and name not in ErrorCode.__members__)
    assert missing == []
    assert len(ErrorCode.__members__) == len(ErrorCode)  # no number under two names


def test_the_retriable_set_is_kafkas() -> None:
    kafka = {ErrorCode[name] for name, k in KIO.items() if k.retriable and name in ErrorCode.__members__}
    assert set(RETRIABLE) == kafka


# -- the table --------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", list(ERROR_CLASSES), ids=lambda c: c.name)
def test_each_class_of_the_table(code: ErrorCode) -> None:
    cls = ERROR_CLASSES[code]
    assert cls.__module__ == "shared.errors"
    assert cls.code == code
    assert cls.retriable is (code in RETRIABLE)
    err = error_for(int(code), "broker said no")
    assert type(err) is cls and error_class(int(code)) is cls
    assert (err.code, err.wire_code, err.retriable) == (code, int(code), code in RETRIABLE)
    assert str(err) == f"{code.name}: broker said no"


@pytest.mark.parametrize("code", [c for c in ErrorCode if c not in ERROR_CLASSES], ids=lambda c: c.name)
def test_a_code_without_a_class_is_a_plain_error_carrying_it(code: ErrorCode) -> None:
    err = error_for(int(code))
    assert type(err) is TidelogError and error_class(int(code)) is TidelogError
    assert (err.code, err.wire_code, err.retriable) == (code, int(code), code in RETRIABLE)
    assert str(err) == f"{code.name}: {code.name}"


@pytest.mark.parametrize("number", [-2, 121, 133, 999, 32767, -32768])
def test_an_unknown_number_is_an_unknown_server_error_keeping_the_number(number: int) -> None:
    err = error_for(number, "from a newer broker")
    assert type(err) is TidelogError and error_class(number) is TidelogError
    assert err.code == ErrorCode.UNKNOWN_SERVER_ERROR and err.wire_code == number
    assert not err.retriable  # never retried blindly, never taken as proof that a batch was not written
    assert str(err) == f"UNKNOWN_SERVER_ERROR (error code {number}): from a newer broker"
    assert str(error_for(number)) == f"UNKNOWN_SERVER_ERROR (error code {number}): error code {number} is unknown to this version"


def test_the_table_does_not_depend_on_what_else_was_imported() -> None:
    for module, _ in OLD_HOMES:  # this process has every module defining errors before; the child none
        importlib.import_module(module)
    here = {str(n): [type(e).__qualname__, e.code.name, e.retriable] for n in range(-3, 131) for e in [error_for(n, "m")]}
    run = subprocess.run([sys.executable, "-c", _ISOLATED], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == here
    assert here["41"] == ["NotControllerError", "NOT_CONTROLLER", True]  # not FencedError nor NotActiveError
    assert here["42"] == ["InvalidRequestError", "INVALID_REQUEST", False]  # not ConflictError nor QuotaConfigError
    assert here["1"] == ["OffsetOutOfRangeError", "OFFSET_OUT_OF_RANGE", False]  # not DataLossError


# -- the classes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "name"), OLD_HOMES)
def test_old_import_names_still_work(module: str, name: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_every_error_class_is_defined_here_and_under_the_class_of_its_code() -> None:
    for module, _ in OLD_HOMES:
        importlib.import_module(module)
    for cls in _tidelog_classes():
        if cls.__module__.startswith(("shared.", "services.", "pipelines.")):
            assert cls.__module__ == "shared.errors", f"{cls.__module__}.{cls.__qualname__}"
        own = ERROR_CLASSES.get(cls.code)
        if own is not None:
            assert issubclass(cls, own), f"{cls.__qualname__} ({cls.code.name}) is not under {own.__qualname__}"


def test_no_module_outside_shared_errors_subclasses_an_error() -> None:
    """On the AST of every file, so a module not imported above counts too."""
    names = {"TidelogError"} | {c.__name__ for c in _tidelog_classes() if c.__module__ == "shared.errors"}
    bad = []
    for package in ("shared", "services", "pipelines"):
        for root, _dirs, files in os.walk(os.path.join(REPO, package)):
            for f in files:
                path = os.path.join(root, f)
                if not f.endswith(".py") or os.path.relpath(path, REPO) == os.path.join("shared", "errors.py"):
                    continue
                with open(path, encoding="utf-8") as src:
                    tree = ast.parse(src.read(), filename=path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.ClassDef):
                        bases = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, ast.Name | ast.Attribute)}
                        if bases & names:
                            bad.append(f"{os.path.relpath(path, REPO)}:{node.lineno} class {node.name}")
    assert bad == []


def test_retriable_is_known_on_the_class_and_on_an_instance_with_its_own_code() -> None:
    assert NotLeaderOrFollowerError.retriable is True and InvalidRecordError.retriable is False
    assert TidelogError.retriable is False
    assert TidelogError("moved", code=ErrorCode.NOT_COORDINATOR).retriable is True
    assert GroupError("rebalance", code=ErrorCode.REBALANCE_IN_PROGRESS).retriable is False
    assert GroupError("loading", code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS).retriable is True


def test_an_error_keeps_its_message_and_cause() -> None:
    try:
        try:
            raise OSError("disk")
        except OSError as exc:
            raise errors.StorageError("segment 0 of t-0 unreadable") from exc
    except TidelogError as err:
        assert str(err) == "KAFKA_STORAGE_ERROR: segment 0 of t-0 unreadable"
        assert isinstance(err.__cause__, OSError)
