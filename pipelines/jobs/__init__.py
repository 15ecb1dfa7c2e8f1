"""Example pipeline jobs; each runs with ``python -m pipelines.jobs.<name> --help``."""
