"""Closed clients leave no grpc streaming call to be freed at interpreter exit (``shared.client.grpc_calls``).

A call freed at exit could wait forever for a lock held by a daemon thread Python had stopped: the README
snippet hung after its last line about once in 100 runs. The rule is checked directly: once a producer,
a consumer and a group consumer (its offset-commit stream) are closed, no call object is alive, with the
cyclic garbage collector off so that a reference cycle cannot hide behind a collection."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.conftest import REPO

SCRIPT = r"""
import gc, sys
gc.disable()
import grpc._channel
from shared.client import Admin, Consumer, Producer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
with Admin(bootstrap) as admin:
    admin.create_topic(topic, partitions=1)
with Producer(bootstrap, acks="all", linger_ms=0) as p:
    md = p.send(topic, b"v", key=b"k").get(30)
tp = TopicPartition(topic, 0)
with Consumer(bootstrap, auto_offset_reset="earliest") as c:
    c.assign([tp])
    c.seek(tp, md.offset)
    got = []
    while not got:
        got = list(c.poll(timeout_ms=5000))
with Consumer(bootstrap, group_id=topic, auto_offset_reset="earliest", enable_auto_commit=False) as g:
    g.subscribe([topic])
    seen = []
    while not seen:
        seen = list(g.poll(timeout_ms=5000))
    g.commit_async()
    g.commit()
live = [o for o in gc.get_objects() if isinstance(o, grpc._channel._Rendezvous)]
print("live calls:", len(live), [repr(o)[:200] for o in live])
"""


def test_closed_clients_leave_no_streaming_call_for_interpreter_exit(cluster) -> None:
    bootstrap = ",".join(p.address for p in cluster.procs("broker"))
    r = subprocess.run([sys.executable, "-c", SCRIPT, bootstrap, f"exit-{uuid.uuid4().hex[:8]}"], cwd=REPO,
                       capture_output=True, text=True, timeout=120, env={**os.environ})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "live calls: 0 []" in r.stdout, r.stdout + r.stderr[-3000:]
