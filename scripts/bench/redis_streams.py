"""The Redis Streams side of the speed comparison (issue 26's method): Debian's ``redis-server`` on
127.0.0.1 on a free port, AOF on with ``appendfsync everysec`` in a temporary directory; redis-py
pipelining XADDs (``--pipeline`` 1,000 per round trip) of RECORD-SIZE random values with a
KEY-SIZE-byte key as a second field, then XREAD of ``--read-count`` (1,000) entries at a time from the
start. Prints records/s for the writes and the reads (``--json``: one JSON line).

    python scripts/bench/redis_streams.py [--records 300000] [--record-size 1024] [--key-size 16]

Needs the ``bench`` extra (redis-py) and ``redis-server`` (``--redis-server PATH``). redis-py parses
replies in Python unless ``hiredis`` is installed (the output names the parser): XREAD's figure depends
on it (~70k records/s of 1 KiB with the Python parser on the 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import redis
from redis.utils import HIREDIS_AVAILABLE

STREAM = "bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(binary: str, directory: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", directory, "--appendonly", "yes",
         "--appendfsync", "everysec", "--save", "", "--protected-mode", "yes", "--daemonize", "no",
         "--logfile", os.path.join(directory, "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"redis-server did not start (see {directory}/redis.log)") from None
            time.sleep(0.05)
    client.close()
    return proc, port


def write(client: redis.Redis, records: int, record_size: int, key_size: int, pipeline: int) -> float:
    """XADD every record, ``pipeline`` per round trip; returns the seconds taken. Values are generated
    before the clock starts (one random buffer, sliced per record), as ``tidelog bench produce`` does."""
    pool = os.urandom(record_size + 4096)
    keys = os.urandom(key_size + 4096)
    values = [pool[i % 4096:i % 4096 + record_size] for i in range(min(records, 4096))]
    ks = [keys[i % 4096:i % 4096 + key_size] for i in range(min(records, 4096))]
    t0 = time.perf_counter()
    sent = 0
    while sent < records:
        pipe = client.pipeline(transaction=False)
        n = min(pipeline, records - sent)
        for i in range(sent, sent + n):
            j = i % len(values)
            pipe.xadd(STREAM, {b"k": ks[j], b"v": values[j]})
        pipe.execute()
        sent += n
    return time.perf_counter() - t0


def read(client: redis.Redis, records: int, count: int) -> float:
    """XREAD from the start, ``count`` entries a call, until ``records`` are read; returns the seconds."""
    t0 = time.perf_counter()
    last = b"0-0"
    got = 0
    while got < records:
        resp = client.xread({STREAM: last}, count=count)
        if not resp:
            break
        entries = resp[0][1]
        got += len(entries)
        last = entries[-1][0]
    elapsed = time.perf_counter() - t0
    if got < records:
        raise RuntimeError(f"read {got} of {records} entries")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--pipeline", type=int, default=1000, help="XADDs per round trip")
    ap.add_argument("--read-count", type=int, default=1000, help="entries per XREAD")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-bench-") as directory:
        proc, port = start_server(args.redis_server, directory)
        try:
            client = redis.Redis(host="127.0.0.1", port=port)
            w = write(client, args.records, args.record_size, args.key_size, args.pipeline)
            r = read(client, args.records, args.read_count)
            info = client.info("persistence")
            client.close()
        finally:
            proc.terminate()
            proc.wait(10)
    out = {"records": args.records, "record_size": args.record_size, "key_size": args.key_size,
           "xadd_records_per_s": args.records / w, "xread_records_per_s": args.records / r,
           "aof_enabled": info.get("aof_enabled"), "redis_server": args.redis_server,
           "parser": "hiredis" if HIREDIS_AVAILABLE else "python"}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"XADD  {out['xadd_records_per_s']:>10,.0f} records/s ({args.records} x {args.record_size} B, "
              f"pipelines of {args.pipeline}, AOF everysec)")
        print(f"XREAD {out['xread_records_per_s']:>10,.0f} records/s ({args.read_count} per call; "
              f"redis-py's {out['parser']} reply parser)")


if __name__ == "__main__":
    main()
