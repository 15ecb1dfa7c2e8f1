"""``write_arrow`` then ``read_arrow`` of one Arrow table, twice, on a new topic of a running cluster:
records/s and MB/s of each call (the second round's write lands on a warm broker; its read takes both
rounds' records).

    python scripts/bench/tables.py [--records 400000] [--record-size 1024] [--partitions 1] [--data-dir D]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import numpy as np
import pyarrow as pa

from shared.client import Admin, read_arrow, write_arrow
from shared.client.discovery import brokers_from_data_dir


def table_of(records: int, record_size: int) -> pa.Table:
    """``records`` values of ``record_size`` random bytes (256 distinct, in turn), no keys."""
    distinct = np.frombuffer(os.urandom(256 * record_size), np.uint8).reshape(256, record_size)
    data = distinct[np.arange(records) % 256].tobytes()
    offsets = np.arange(records + 1, dtype=np.int64) * record_size
    return pa.table({"value": pa.Array.from_buffers(pa.large_binary(), records,
                                                    [None, pa.py_buffer(offsets), pa.py_buffer(data)])})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--data-dir", default=None, help="the cluster's data directory (default: TIDELOG_DATA_DIR or .tidelog)")
    args = ap.parse_args()
    bootstrap = brokers_from_data_dir(args.data_dir)
    table = table_of(args.records, args.record_size)
    topic = f"bench-tables-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=args.partitions, configs={"max.message.bytes": str(8 << 20)})
    mb = args.record_size / 1e6
    for r in range(2):
        t0 = time.perf_counter()
        write_arrow(bootstrap, topic, table, acks=1)
        w = time.perf_counter() - t0
        t0 = time.perf_counter()
        n = read_arrow(bootstrap, topic).num_rows
        rd = time.perf_counter() - t0
        print(f"round {r + 1}: write_arrow {args.records / w:,.0f} records/s ({args.records * mb / w:,.0f} MB/s); "
              f"read_arrow of {n} {n / rd:,.0f} records/s ({n * mb / rd:,.0f} MB/s)", flush=True)
    with Admin(bootstrap) as admin:
        admin.delete_topic(topic)


if __name__ == "__main__":
    main()
