"""``tidelog reassign generate|execute|verify|cancel|list`` (as ``kafka-reassign-partitions.sh``), plus
``tidelog brokers decommission ID`` and the replication-factor change of ``tidelog topics alter``.

Everything goes through the controller's REST admin API (``/v1/reassignments``); plans are Kafka's
reassignment JSON (``{"version":1,"partitions":[{"topic","partition","replicas","log_dirs"}]}``) and
the topics file is Kafka's ``{"version":1,"topics":[{"topic":"foo"}]}``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any

import click

from shared.cli.connect import cluster_options
from shared.cli.throttle import clear_reassignment_throttle, set_reassignment_throttle
from shared.cli.topics import _admin, _call
from shared.client.admin import Admin

PlanKey = tuple[str, int]


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise click.ClickException(f"cannot read {what} {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{what} {path} is not JSON: {exc}") from None


def read_plan(path: str) -> dict[str, Any]:
    """Kafka's reassignment JSON file, checked enough to name the problem before it is sent."""
    plan = _read_json(path, "reassignment file")
    parts = plan.get("partitions") if isinstance(plan, dict) else None
    if not isinstance(parts, list) or not parts:
        raise click.ClickException(f'{path}: expected {{"version":1,"partitions":[...]}} with at least one partition')
    for p in parts:
        if not isinstance(p, dict) or not isinstance(p.get("topic"), str) or not isinstance(p.get("partition"), int):
            raise click.ClickException(f"{path}: each partition needs a topic and a partition number, got {p!r}")
    return plan


def plan_targets(plan: Mapping[str, Any]) -> dict[PlanKey, list[int]]:
    return {(p["topic"], p["partition"]): list(p.get("replicas") or []) for p in plan["partitions"]}


def _name(key: PlanKey) -> str:
    return f"{key[0]}-{key[1]}"


# -- REST calls (the admin client's transport: discovery of the active controller, retries on 503) ------

def _rest(admin: Admin, method: str, path: str, body: Any = None) -> Any:
    kw = {"json": body} if body is not None else {}
    return _call(lambda: admin._call(method, path, **kw))


def ongoing(admin: Admin) -> dict[PlanKey, dict[str, Any]]:
    got = _rest(admin, "GET", "/v1/reassignments")["reassignments"]
    return {(r["topic"], r["partition"]): r for r in got}


def current_replicas(admin: Admin, topics: set[str]) -> dict[PlanKey, dict[str, Any]]:
    """(topic, partition) -> the describe row (replicas, leader, isr) of each named topic."""
    out: dict[PlanKey, dict[str, Any]] = {}
    for t in sorted(topics):
        for p in _call(admin.describe_topic, t)["partitions"]:
            out[(t, p["partition"])] = p
    return out


def _plan_file(assignment: Mapping[PlanKey, list[int]]) -> dict[str, Any]:
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for (t, p), r in sorted(assignment.items())]}


# -- throttle hooks: the lead connects these to the replication-throttle configs -----------------------------

def apply_throttle(admin: Admin, rate: int, moving: Mapping[PlanKey, tuple[list[int], list[int]]]) -> bool:
    """Set the replication throttles (``leader/follower.replication.throttled.rate`` on the brokers taking
    part, ``leader/follower.replication.throttled.replicas`` on the topics) for the partitions ``moving``
    ((topic, partition) -> (replicas being added, existing replicas)) at ``rate`` bytes/s. Returns whether
    a throttle was set."""
    set_reassignment_throttle(admin, rate, moving)
    return True


def clear_throttle(admin: Admin, brokers: set[int], topics: set[str]) -> bool:
    """Remove the throttles ``apply_throttle`` set, once the plan is done (``verify``). Returns whether
    anything was removed."""
    if not brokers and not topics:
        return False
    clear_reassignment_throttle(admin, brokers, topics)
    return True


# -- commands ------------------------------------------------------------------------------------------------

@click.group()
def reassign() -> None:
    """Move partition replicas between brokers (kafka-reassign-partitions.sh)."""


@reassign.command("generate")
@click.option("--topics-to-move-json-file", "topics_file", required=True, type=click.Path(dir_okay=False),
              help='{"version":1,"topics":[{"topic":"foo"}]}')
@click.option("--broker-list", required=True, help="brokers to spread the topics over, e.g. 1,2,3")
@cluster_options
def generate(topics_file: str, broker_list: str, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Propose an assignment of whole topics over a list of brokers (nothing is moved)."""
    doc = _read_json(topics_file, "topics file")
    entries = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) and isinstance(e.get("topic"), str)
                                                               for e in entries):
        raise click.ClickException(f'{topics_file}: expected {{"version":1,"topics":[{{"topic":"foo"}}]}}')
    try:
        brokers = [int(b) for b in broker_list.split(",") if b.strip()]
    except ValueError:
        raise click.BadParameter(f"expected broker ids like 1,2,3, got {broker_list!r}",
                                 param_hint="--broker-list") from None
    admin = _admin(bootstrap, rest, data_dir)
    got = _rest(admin, "POST", "/v1/reassignments/generate",
                {"topics": [e["topic"] for e in entries], "broker_list": brokers})
    click.echo("Current partition replica assignment")
    click.echo(_compact(got["current"]))
    click.echo()
    click.echo("Proposed partition reassignment configuration")
    click.echo(_compact(got["proposed"]))


def execute_plan(admin: Admin, plan: dict[str, Any], throttle: int | None) -> None:
    """Print the rollback assignment, start the reassignments and set the throttle (when asked)."""
    targets = plan_targets(plan)
    current = current_replicas(admin, {t for t, _ in targets})
    if missing := sorted(k for k in targets if k not in current):
        raise click.ClickException(f"unknown partitions: {', '.join(map(_name, missing[:10]))}")
    click.echo("Current partition replica assignment")
    click.echo()
    click.echo(_compact(_plan_file({k: current[k]["replicas"] for k in targets})))
    click.echo()
    click.echo("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:  # before the moves start, as Kafka's tool does, so no copy runs unthrottled
        moving = {k: ([b for b in r if b not in current[k]["replicas"]], list(current[k]["replicas"]))
                  for k, r in targets.items() if set(r) != set(current[k]["replicas"])}
        if apply_throttle(admin, throttle, moving):
            click.echo(f"The inter-broker throttle limit was set to {throttle} B/s")
        else:
            click.echo("Warning: --throttle was not applied", err=True)
    _rest(admin, "POST", "/v1/reassignments", plan)
    click.echo(f"Successfully started partition reassignment{'s' if len(targets) > 1 else ''} for "
               + ",".join(_name(k) for k in sorted(targets)))


@reassign.command("execute")
@click.option("--reassignment-json-file", "plan_file", required=True, type=click.Path(dir_okay=False))
@click.option("--throttle", type=click.IntRange(1, None), default=None, metavar="BYTES_PER_S",
              help="replication throttle for the moving replicas, bytes/s (removed by verify once done)")
@cluster_options
def execute(plan_file: str, throttle: int | None, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Start the reassignment in a plan file."""
    execute_plan(_admin(bootstrap, rest, data_dir), read_plan(plan_file), throttle)


def verify_plan(admin: Admin, plan: Mapping[str, Any]) -> tuple[list[PlanKey], list[str]]:
    """The partitions of ``plan`` not done yet, and one status line per partition (Kafka's wording)."""
    targets = plan_targets(plan)
    running = ongoing(admin)
    current = current_replicas(admin, {t for t, _ in targets})
    pending: list[PlanKey] = []
    lines = []
    for k, target in sorted(targets.items()):
        if k in running:
            pending.append(k)
            lines.append(f"Reassignment of partition {_name(k)} is still in progress.")
        elif k in current and current[k]["replicas"] == target:
            lines.append(f"Reassignment of partition {_name(k)} is completed.")
        else:
            pending.append(k)
            now = current[k]["replicas"] if k in current else "unknown"
            lines.append(f"There is no active reassignment of partition {_name(k)}, but replica set is "
                         f"{now} rather than {target}.")
    return pending, lines


@reassign.command("verify")
@click.option("--reassignment-json-file", "plan_file", required=True, type=click.Path(dir_okay=False))
@cluster_options
def verify(plan_file: str, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Exit 0 once every partition of the plan is done; else exit 1 naming those in progress."""
    plan = read_plan(plan_file)
    admin = _admin(bootstrap, rest, data_dir)
    click.echo("Status of partition reassignment:")
    pending, lines = verify_plan(admin, plan)
    for line in lines:
        click.echo(line)
    if pending:
        click.echo(f"Still in progress: {','.join(_name(k) for k in pending)}")
        sys.exit(1)
    targets = plan_targets(plan)
    every_broker = {int(b["id"]) for b in _call(admin.cluster)["brokers"]}  # Kafka clears them all
    if clear_throttle(admin, every_broker, {t for t, _ in targets}):
        click.echo("Clearing broker-level and topic-level throttles.")


@reassign.command("cancel")
@click.option("--reassignment-json-file", "plan_file", required=True, type=click.Path(dir_okay=False))
@cluster_options
def cancel(plan_file: str, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Cancel the plan's reassignments still in progress: they return to their original replicas."""
    plan = read_plan(plan_file)
    admin = _admin(bootstrap, rest, data_dir)
    running = ongoing(admin)
    todo = sorted(k for k in plan_targets(plan) if k in running)
    if not todo:
        click.echo("None of the specified partition reassignments are active.")
        return
    _rest(admin, "DELETE", "/v1/reassignments", {"partitions": [{"topic": t, "partition": p} for t, p in todo]})
    click.echo(f"Successfully cancelled partition reassignments for: {','.join(map(_name, todo))}")


@reassign.command("list")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def list_(as_json: bool, bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Reassignments in progress: replicas, adding and removing."""
    got = sorted(ongoing(_admin(bootstrap, rest, data_dir)).values(), key=lambda r: (r["topic"], r["partition"]))
    if as_json:
        click.echo(json.dumps(got, indent=2))
        return
    if not got:
        click.echo("No partition reassignment in progress.")
    for r in got:
        click.echo(f"{r['topic']}-{r['partition']}: replicas={r['replicas']} adding={r['adding_replicas']} "
                   f"removing={r['removing_replicas']}")


# -- decommission and replication factor (registered on the brokers and topics groups) ---------------------

def _wait(what: str, done: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.5)
    click.echo(f"Timed out after {timeout:.0f}s waiting for {what}.", err=True)
    return False


def broker_load(admin: Admin, broker: int) -> tuple[int, int]:
    """(replicas, leaderships) ``broker`` holds across every topic."""
    replicas = leaders = 0
    for t in _call(admin.list_topics):
        for p in _call(admin.describe_topic, t)["partitions"]:
            replicas += broker in p["replicas"]
            leaders += p["leader"] == broker
    return replicas, leaders


@click.command("decommission")
@click.argument("broker_id", type=click.IntRange(0, None))
@click.option("--throttle", type=click.IntRange(1, None), default=None, metavar="BYTES_PER_S",
              help="replication throttle for the moves, bytes/s")
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until the broker is empty")
@click.option("--timeout", default=600.0, show_default=True, help="seconds to wait")
@cluster_options
def decommission(broker_id: int, throttle: int | None, wait: bool, timeout: float, bootstrap: str | None,
                 rest: str | None, data_dir: str) -> None:
    """Move every replica and leadership off broker BROKER_ID, then say when it is safe to stop."""
    admin = _admin(bootstrap, rest, data_dir)
    # Marked first, so the balancer neither refills the broker nor places moves on it.
    _rest(admin, "POST", f"/v1/balancer/decommissioning/{broker_id}")
    got = _rest(admin, "POST", "/v1/reassignments/decommission-plan", {"broker": broker_id})
    plan = got["proposed"]
    if plan["partitions"]:
        click.echo(f"Moving {len(plan['partitions'])} replicas off broker {broker_id}.")
        execute_plan(admin, plan, throttle)
    if not wait:
        click.echo(f"Follow it with `tidelog reassign list`; broker {broker_id} is safe to stop once it holds "
                   f"no replicas.")
        return
    if not _wait(f"broker {broker_id} to hold no replicas", lambda: broker_load(admin, broker_id) == (0, 0), timeout):
        replicas, leaders = broker_load(admin, broker_id)
        raise click.ClickException(f"broker {broker_id} still holds {replicas} replicas and leads {leaders} "
                                   f"partitions: not safe to stop yet")
    click.echo(f"Broker {broker_id} holds no replicas and leads no partitions: it is safe to stop.")


def change_replication_factor(admin: Admin, topic: str, replication_factor: int, wait: bool = True,
                              timeout: float = 600.0) -> None:
    """``tidelog topics alter NAME --replication-factor N``: plan, execute, and (by default) wait."""
    got = _rest(admin, "POST", "/v1/reassignments/replication-factor-plan",
                {"topic": topic, "replication_factor": replication_factor})
    plan = got["proposed"]
    if not plan["partitions"]:
        click.echo(f"Topic {topic} already has replication factor {replication_factor}.")
        return
    _rest(admin, "POST", "/v1/reassignments", plan)
    click.echo(f"Reassigning {len(plan['partitions'])} partitions of {topic} to replication factor "
               f"{replication_factor}.")
    if wait and not _wait("the reassignment", lambda: not verify_plan(admin, plan)[0], timeout):
        raise click.ClickException("the reassignment is still in progress (see `tidelog reassign list`)")
