"""The ``tidelog`` command line (click): cluster launcher, admin, produce/consume, tools, benchmarks."""
