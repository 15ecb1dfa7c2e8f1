"""Log compaction's pure code, shared by the cleaner workers and the brokers that check their work.

``selection`` (which logs are cleanable), ``offset_map`` (key hash → last offset), ``scan``
(a segment's records as columns, keys hashed once), ``cleaning`` (Kafka's algorithm), ``txn``
(aborted transactions' data and markers: Kafka's transaction rules for the cleaner) and ``verify`` (the broker's replay of a result). Bytes and numbers in, bytes and decisions out:
no gRPC, no files, no clocks. Must not import ``services`` or ``pipelines``.
"""
