"""Spark session and cluster helpers shared by the pipeline jobs."""

from __future__ import annotations

import os
from typing import Any

from shared.cli.launcher import read_cluster_file


def local_session(app: str, master: str = "local[2]") -> Any:
    """A local Spark session bound to loopback, with the ``tidelog`` source registered."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else Spark binds the external interface
    from pyspark.sql import SparkSession

    from pipelines.tidelog_source import register

    spark = (
        SparkSession.builder.master(master).appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def bootstrap_from(data_dir: str | None, bootstrap: str | None) -> str:
    """Broker addresses from ``--bootstrap-server`` or a local cluster's cluster.json."""
    if bootstrap:
        return bootstrap
    info = read_cluster_file(os.path.abspath(data_dir or os.environ.get("TIDELOG_DATA_DIR", ".tidelog")))
    if info is None:
        raise SystemExit("no cluster found: pass --bootstrap-server or start one with `tidelog up --detach`")
    return ",".join(p["address"] for p in info["processes"] if p["role"] == "broker")
