"""Spark session and cluster helpers shared by the pipeline jobs."""

from __future__ import annotations

import os
from typing import Any

from shared.client.discovery import brokers_from_data_dir, cluster_data_dir, no_cluster_message


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
    """Broker addresses from ``--bootstrap-server`` or a local cluster's cluster.json (``--data-dir`` or
    ``TIDELOG_DATA_DIR``, else ``.tidelog``)."""
    if bootstrap:
        return bootstrap
    servers = brokers_from_data_dir(data_dir)
    if servers is None:
        raise SystemExit(no_cluster_message(cluster_data_dir(data_dir), "--bootstrap-server"))
    return servers
