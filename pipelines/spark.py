"""Spark session and cluster helpers shared by the pipeline jobs."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from shared.client.discovery import (
    brokers_from_data_dir,
    cluster_data_dir,
    no_cluster_message,
    read_cluster_file,
)

log = logging.getLogger(__name__)


def local_session(app: str, master: str = "local[2]") -> Any:
    """A local Spark session bound to loopback, with the ``tidelog`` source registered and, when a JDK can
    build its jar, the ``tidelog-jvm`` reader and writer on the classpath (``pipelines.spark_jvm``)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # else Spark binds the external interface
    from pyspark.sql import SparkSession

    from pipelines.spark_jvm import JarBuildError, jar_path
    from pipelines.tidelog_source import register

    builder = (
        SparkSession.builder.master(master).appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.host", "127.0.0.1")
    )
    try:
        builder = builder.config("spark.jars", str(jar_path()))
    except JarBuildError as exc:  # the Python source works without it
        log.warning("format('tidelog-jvm') is not available: %s", exc)
    spark = builder.getOrCreate()
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


@dataclass(frozen=True)
class Connection:
    """Where a job's cluster is and with which credentials: ``settings`` are kafka-python's keyword arguments
    for ``Producer`` / ``Consumer`` / ``Admin`` (``{}`` for a plaintext cluster), ``options`` the ``tidelog``
    source's and sink's options (``bootstrap.servers`` and spark-sql-kafka's ``kafka.security.protocol``,
    ``kafka.sasl.*``, ``kafka.ssl.*``). Neither shows in the repr (they hold the password)."""

    servers: str
    settings: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def options(self) -> dict[str, str]:
        from pipelines.tidelog_source.security import spark_options

        return {"bootstrap.servers": self.servers, **spark_options(self.settings)}


def connection_from(data_dir: str | None, bootstrap: str | None) -> Connection:
    """``bootstrap_from``'s brokers, with the credentials the CLI would use (``shared.cli.connect``):
    ``TIDELOG_SASL_USERNAME`` / ``TIDELOG_SASL_PASSWORD`` (and ``TIDELOG_SSL_CAFILE``), else, when the cluster is
    found through its data dir (no ``--bootstrap-server``, or ``--data-dir`` given), the admin of
    cluster.json's ``security`` block. So the example jobs run on a ``tidelog up --secure`` cluster as they
    are; a plaintext cluster gets no setting at all."""
    from shared.cli.connect import settings_for

    servers = bootstrap_from(data_dir, bootstrap)
    info = read_cluster_file(cluster_data_dir(data_dir)) if (data_dir or not bootstrap) else None
    return Connection(servers, settings_for(info))
