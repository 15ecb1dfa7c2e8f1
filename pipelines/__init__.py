"""Spark pipelines on Tidelog: the PySpark data source (``tidelog_source``) and example jobs (``jobs``)."""
