"""The ``tidelog`` PySpark data source. ``register(spark)`` makes ``format("tidelog")`` available."""

from __future__ import annotations

from typing import Any

from pipelines.tidelog_source.source import TidelogDataSource


def register(spark: Any) -> None:
    spark.dataSource.register(TidelogDataSource)


__all__ = ["TidelogDataSource", "register"]
