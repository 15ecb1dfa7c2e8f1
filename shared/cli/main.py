"""Entry point of the ``tidelog`` console script."""

from __future__ import annotations

import click

from shared.cli.acls import acls
from shared.cli.balancer_cmds import balancer
from shared.cli.bench import bench_consume, bench_produce
from shared.cli.bench_failover import bench_failover
from shared.cli.bench_group import bench_group
from shared.cli.bench_partitions import bench_partitions
from shared.cli.bench_quota import bench_quota
from shared.cli.bench_reassign import bench_reassign
from shared.cli.bench_txn import bench_txn
from shared.cli.brokers_cmds import brokers
from shared.cli.cleaner_cmds import bench_compact, cleaner
from shared.cli.cluster_cmds import down, status, up
from shared.cli.dump_log import dump_log
from shared.cli.groups import groups
from shared.cli.plugins import PluginGroup
from shared.cli.produce_consume import consume, produce
from shared.cli.quotas import quotas
from shared.cli.reassign import decommission, reassign
from shared.cli.top import top
from shared.cli.topics import topics
from shared.cli.transactions import transactions
from shared.cli.users import users
from shared.runtime import tune_allocator


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Tidelog: a distributed, partitioned, replicated commit log."""
    tune_allocator()


@cli.group(cls=PluginGroup, entry_point_group="tidelog.bench")
def bench() -> None:
    """Benchmarks printing records/s, MB/s and latency percentiles."""


cli.add_command(dump_log)
cli.add_command(up)
cli.add_command(down)
cli.add_command(status)
cli.add_command(topics)
cli.add_command(brokers)
brokers.add_command(decommission)
cli.add_command(reassign)
cli.add_command(balancer)
cli.add_command(top)
cli.add_command(groups)
cli.add_command(transactions)
cli.add_command(quotas)
cli.add_command(acls)
cli.add_command(users)
cli.add_command(produce)
cli.add_command(consume)
bench.add_command(bench_produce)
bench.add_command(bench_consume)
bench.add_command(bench_failover)
cli.add_command(cleaner)
bench.add_command(bench_group)
bench.add_command(bench_compact)
bench.add_command(bench_quota)
bench.add_command(bench_partitions)
bench.add_command(bench_txn)
bench.add_command(bench_reassign)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
