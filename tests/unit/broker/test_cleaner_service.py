"""The LogCleaner gRPC service in process (port 0): a worker's round trip through it, a tampered
result refused over the wire with the log untouched, and leases enforced on every call."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest

from services.broker.cleaner_jobs import LeaseError
from services.broker.cleaner_service import CleanerJobs, CleanerServicer, add_cleaner_servicer
from services.broker.log import PartitionLog
from services.broker.partition import Partition
from services.cleaner.throttle import Throttler
from services.cleaner.worker import ReceiveBuffer, job_from, read_segments, result_chunks, result_sender, run_job
from shared.compaction.cleaning import CleanResult, clean
from shared.compaction.codec import encode_retained, read_batches
from shared.config import LogConfig
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from shared.records.builder import encode_batch
from shared.types import TopicPartition

T0 = 1_700_000_000_000


def clock() -> int:
    return T0


@dataclass
class Replicas:
    """The part of the ReplicaManager the cleaner service reads: the open partitions."""

    partitions: dict[TopicPartition, Partition] = field(default_factory=dict)


def open_partition(path: str) -> Partition:
    cfg = LogConfig.from_topic_configs({"segment.bytes": "400", "cleanup.policy": "compact",
                                        "file.delete.delay.ms": "0"})
    part = Partition(TopicPartition("t", 0), PartitionLog(path, cfg, clock), 1, clock)
    part.update_state(1, 0, [1], [1], 0, 1)
    for i in range(40):
        part.append_as_leader(encode_batch([(T0, b"k%d" % (i % 4), b"value-%d" % i, None)]), acks=1)
    part.log.wait_for_rolled_flush()
    return part


def files(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


async def serve(jobs: CleanerJobs) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    add_cleaner_servicer(CleanerServicer(jobs, 1), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_worker_round_trip_and_a_tampered_result_refused_over_grpc(tmp_path) -> None:
    part = open_partition(str(tmp_path / "t-0"))
    jobs = CleanerJobs(Replicas({TopicPartition("t", 0): part}), clock, lease_ms=60_000)  # type: ignore[arg-type]

    async def main() -> None:
        server, address = await serve(jobs)
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stub = cgrpc.LogCleanerStub(ch)
                resp = await stub.AcquireJob(cpb.AcquireJobRequest(worker_id="evil"))
                assert resp.found and resp.log == "t-0"
                assert not (await stub.AcquireJob(cpb.AcquireJobRequest(worker_id="other"))).found  # one per log
                renew = await stub.RenewLease(cpb.RenewLeaseRequest(job_id=resp.job_id, worker_id="other"))
                assert renew.error_code != 0
                segments = await read_segments(ch, resp, "evil", Throttler(), ReceiveBuffer())
                result = clean(job_from(resp, segments))
                i, seg = next((i, s) for i, s in enumerate(result.segments) if s.data)
                pos, h, recs = next(read_batches(seg.data))
                recs[0].value = b"forged"
                forged = list(result.segments)
                forged[i] = type(seg)(seg.base_offset, seg.replaces, encode_retained(h, recs, None)
                                      + seg.data[pos + h.size :])
                before = files(part.log.directory)
                answer = await result_sender(ch)(result_chunks(resp.job_id, "evil", CleanResult(forged, result.map_end),
                                                              Throttler()))
                assert answer.error_code != 0 and "differ" in answer.message
                assert files(part.log.directory) == before
                status = await stub.CleanerStatus(cpb.CleanerStatusRequest())
                assert status.jobs_refused == 1 and not status.jobs
                assert status.logs[0].last_cleaned_ms == -1  # a refused result is no cleaning
                good = await stub.AcquireJob(cpb.AcquireJobRequest(worker_id="good"))
                assert good.found and good.hash_seed != resp.hash_seed  # a secret key-hash seed per job
                assert job_from(good, []).hash_seed == good.hash_seed
                ok, message = await run_job(ch, good, "good")
                assert ok, message
                status = await stub.CleanerStatus(cpb.CleanerStatusRequest())
                assert status.jobs_done == 1 and status.workers[0].worker_id == "good"
                assert status.logs[0].dirty_ratio == 0.0 and status.logs[0].last_cleaned_ms == T0
        finally:
            await server.stop(None)

    asyncio.run(main())
    latest = {}
    for _, _, recs in read_batches(b"".join(s.read_at(0, s.size) for s in part.log.segments)):
        latest.update({r.key: r.value for r in recs})
    assert latest == {b"k%d" % k: b"value-%d" % (36 + k) for k in range(4)}


def test_a_worker_paused_past_its_lease_is_refused_while_the_next_holder_swaps_its_own_result(tmp_path) -> None:
    """A worker stalls (SIGSTOP, GC) while streaming its result, its lease runs out and a second worker takes
    the log: both results arrive interleaved. The second is checked and swapped from its own files; the
    first is refused when it ends and its files go; no ``.cleaned`` file is left and the log holds exactly
    the second result."""
    now = [T0]
    part = open_partition(str(tmp_path / "t-0"))
    jobs = CleanerJobs(Replicas({TopicPartition("t", 0): part}), lambda: now[0], lease_ms=1_000)  # type: ignore[arg-type]
    late = jobs.acquire("late")
    assert late is not None
    job = late.payload.offered
    result = clean(job.read())
    pieces = [(s.base_offset, s.replaces, s.data[i : i + 50]) for s in result.segments
              for i in range(0, max(len(s.data), 1), 50)]
    resumed = asyncio.Event()

    async def stalled() -> AsyncIterator[tuple[int, tuple[int, ...], bytes]]:
        yield pieces[0]
        await resumed.wait()  # paused past its lease
        for p in pieces[1:]:
            yield p

    async def stream() -> AsyncIterator[tuple[int, tuple[int, ...], bytes]]:
        for p in pieces:
            yield p

    async def main() -> None:
        first = asyncio.create_task(jobs.complete(late.job_id, "late", stalled(), result.map_end))
        await asyncio.sleep(0.01)
        now[0] += 1_001
        jobs.housekeeping()  # the lease runs out
        current = jobs.acquire("current")
        assert current is not None and current.log == late.log
        await jobs.complete(current.job_id, "current", stream(), result.map_end)
        resumed.set()
        with pytest.raises(LeaseError):
            await first

    asyncio.run(main())
    assert jobs.jobs_done == 1
    assert not [n for n in os.listdir(part.log.directory) if n.endswith(".cleaned")]
    assert b"".join(s.read_at(0, s.size) for s in part.log.segments[: len(result.segments)]) == b"".join(
        s.data for s in result.segments)
