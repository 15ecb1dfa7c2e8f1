"""The broker's LogCleaner gRPC service: offers compaction jobs to workers and swaps results in.

``CleanerJobs`` holds the decisions (which log, the lease board, checks and swap) and runs
on the broker's event loop, which also serialises it with appends; the servicer only
translates protobuf messages. A result is verified in a child process (``cleaner_check``: pure
code over the job's bytes, off the event loop and its interpreter lock), then the log is checked
unchanged and the swap applied on the loop.

ACLs (secure clusters): every method passes ``shared.request_context``'s guard with the caller's principal.
The job and segment streams (AcquireJob, ReadSegments, RenewLease, CompleteJob, FailJob) are served only to
a cleaner's service certificate (``CN=cleaner-<id>,OU=tidelog-service``) with CLUSTER_ACTION, so nobody
else can lease a job to read a log (or its hash seed) or hold leases to stall compaction; CleanerStatus
needs DESCRIBE on the cluster. A refusal is PERMISSION_DENIED with ``CLUSTER_AUTHORIZATION_FAILED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import grpc

from services.broker.cleaner_check import CheckProcessDied, ResultChecker
from services.broker.cleaner_jobs import JobBoard, Lease, LeaseError
from services.broker.log.compaction import (
    LogChangedError,
    OfferedJob,
    apply_files,
    check_unchanged,
    log_state,
    make_job,
)
from services.broker.log.replace import remove_expired_deletes
from services.broker.log.segment_swap import CleanedFiles
from services.broker.partition import Partition
from services.broker.replica_manager import ReplicaManager
from shared.compaction.offset_map import DEFAULT_BUFFER_BYTES
from shared.compaction.selection import assess, choose_filthiest
from shared.compaction.verify import CleanVerificationError
from shared.errors import ErrorCode
from shared.grpc_codecs import Handlers, RewrittenHandlers
from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from shared.proto.cleaner_wire import encode_segment_chunk
from shared.proto.wire import pass_bytes
from shared.request_context import NotAuthorized, RequestContext, authorized_handlers
from shared.security.access import CLUSTER, DESCRIBE, DISABLED, Access, AuthorizationFailed
from shared.types import TopicPartition

log = logging.getLogger(__name__)

CHUNK = 1 << 20


def log_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


@dataclass(slots=True)
class JobPayload:
    tp: TopicPartition
    partition: Partition
    offered: OfferedJob


class CleanerJobs:
    def __init__(self, replicas: ReplicaManager, clock: Callable[[], int], lease_ms: int = 30_000,
                 dedupe_buffer_bytes: int = DEFAULT_BUFFER_BYTES, max_failures: int = 3,
                 checker: ResultChecker | None = None) -> None:
        self.replicas = replicas
        self.checker = checker or ResultChecker(in_process=True)
        self.clock = clock
        self.board: JobBoard[JobPayload] = JobBoard(lease_ms=lease_ms, max_failures=max_failures)
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.cleaned_bytes = 0
        self.jobs_done = 0
        self.jobs_refused = 0
        self.workers: dict[str, list[int]] = {}  # worker -> [bytes cleaned, jobs, busy ms]
        # log -> (the partition it was, wall-clock ms of its last swapped-in cleaning); in memory only, and
        # forgotten when the partition is deleted or reopened, so a recreated topic starts as never cleaned
        self.last_cleaned: dict[TopicPartition, tuple[Partition, int]] = {}
        #: ACL decisions for the LogCleaner service (the broker sets it from ``service.security`` at start)
        self.access: Access = DISABLED

    def compacted(self) -> dict[str, tuple[TopicPartition, Partition]]:
        return {log_name(tp): (tp, p) for tp, p in self.replicas.partitions.items()
                if "compact" in p.log.config.cleanup_policy.split(",")}

    def acquire(self, worker: str) -> Lease[JobPayload] | None:
        now = self.clock()
        logs = self.compacted()
        states = [log_state(p.log, name, p.high_watermark, p.last_stable_offset) for name, (_, p) in logs.items()]
        chosen = choose_filthiest(states, now, self.board.busy(now))
        if chosen is None:
            return None
        tp, part = logs[chosen.name]
        last = {e.batches[-1].last_offset for e in part.producers.producers.values() if e.batches}
        offered = make_job(part.log, chosen, now, last, self.dedupe_buffer_bytes, secrets.randbits(64))
        lease = self.board.lease(chosen.name, worker, JobPayload(tp, part, offered), now)
        self.checker.warm_up()
        return lease

    async def complete(self, job_id: str, worker: str, chunks: AsyncIterator[tuple[int, Sequence[int], bytes]],
                       map_end: int) -> None:
        """Take a worker's result as it streams in (``(base offset, replaced bases, bytes)`` pieces, written
        straight to ``.cleaned`` files), check it in the check process while the files are fsynced, then
        swap it in; or refuse it (``CleanVerificationError``) and remove the files."""
        lease = self.board.get(job_id, worker, self.clock())
        payload = lease.payload
        offered = payload.offered
        files = CleanedFiles(payload.partition.log.directory, [s.base_offset for s in offered.segments],
                             2 * offered.total_bytes + (1 << 20))  # recompression may grow a batch a little
        t0 = time.monotonic()
        try:
            try:
                async for base, replaces, data in chunks:
                    files.add(base, replaces, data)
            except ValueError as exc:
                raise CleanVerificationError(str(exc)) from exc
            except OSError as exc:  # the log's directory went (deleted meanwhile)
                raise LogChangedError(f"cannot write the result into {files.directory}: {exc}") from exc
            t1 = time.monotonic()
            synced = asyncio.create_task(asyncio.to_thread(files.sync))
            try:
                await self.checker.check_files(offered, files.entries(), map_end)
            except CheckProcessDied:
                check_unchanged(payload.partition.log, offered)  # a segment truncated under the check kills it
                raise
            finally:
                await synced
            t2 = time.monotonic()
            lease = self.board.get(job_id, worker, self.clock())  # still ours after the check
            if self.replicas.partitions.get(payload.tp) is not payload.partition:
                raise LogChangedError(f"{lease.log} was deleted or reopened while it was being cleaned")
            apply_files(payload.partition.log, offered, files, map_end)
        except CleanVerificationError as exc:
            files.discard()
            self.jobs_refused += 1
            self.board.finish(job_id, worker, self.clock(), error=f"refused: {exc}",
                              log_at_fault=not isinstance(exc, LogChangedError))
            log.warning("cleaning result refused", extra={"log": lease.log, "worker": worker, "error": str(exc)})
            raise
        except BaseException:
            files.discard()
            raise
        done = self.board.finish(job_id, worker, self.clock())
        self.last_cleaned[payload.tp] = (payload.partition, self.clock())
        cleaned = offered.total_bytes
        self.jobs_done += 1
        self.cleaned_bytes += cleaned
        w = self.workers.setdefault(worker, [0, 0, 0])
        w[0] += cleaned
        w[1] += 1
        w[2] += max(self.clock() - done.started_ms, 1)
        log.info("log cleaned", extra={"log": lease.log, "worker": worker, "map_end": map_end,
                                       "receive_s": round(t1 - t0, 3), "check_s": round(t2 - t1, 3),
                                       "swap_s": round(time.monotonic() - t2, 3)})

    def forget_gone_logs(self) -> None:
        for tp, (part, _) in list(self.last_cleaned.items()):
            if self.replicas.partitions.get(tp) is not part:
                del self.last_cleaned[tp]

    def housekeeping(self) -> None:
        now = self.clock()
        self.board.expire(now)
        self.forget_gone_logs()
        want_checker = not self.checker.running
        for _, part in self.replicas.partitions.items():
            if part.log.pending_deletes:
                remove_expired_deletes(part.log, now)
            if want_checker and len(part.log.segments) > 1 and "compact" in part.log.config.cleanup_policy:
                self.checker.warm_up()  # a compacted log has segments to clean: have the check process ready
                want_checker = False

    def status(self, broker_id: int) -> cpb.CleanerStatusResponse:
        now = self.clock()
        resp = cpb.CleanerStatusResponse(broker_id=broker_id, cleaned_bytes=self.cleaned_bytes,
                                         jobs_done=self.jobs_done, jobs_refused=self.jobs_refused)
        for lease in self.board.leases.values():
            resp.jobs.add(job_id=lease.job_id, log=lease.log, worker_id=lease.worker, progress=lease.progress,
                          started_ms=lease.started_ms, lease_deadline_ms=lease.deadline_ms)
        self.forget_gone_logs()
        for name, (tp, p) in sorted(self.compacted().items(), key=lambda item: (item[1][0].topic, item[1][0].partition)):
            c = assess(log_state(p.log, name, p.high_watermark, p.last_stable_offset), now)
            last = self.last_cleaned.get(tp)
            resp.logs.add(log=name, dirty_ratio=c.dirty_ratio, compaction_delay_ms=c.compaction_delay_ms,
                          first_dirty=c.first_dirty, first_uncleanable=c.first_uncleanable, size_bytes=p.log.size,
                          last_cleaned_ms=last[1] if last is not None else -1)
        for name, reason in sorted(self.board.quarantined.items()):
            resp.quarantined.add(log=name, reason=reason)
        for worker, (cleaned, jobs, busy) in sorted(self.workers.items()):
            resp.workers.add(worker_id=worker, cleaned_bytes=cleaned, jobs_done=jobs, busy_ms=busy)
        return resp


class CleanerServicer(cgrpc.LogCleanerServicer):
    def __init__(self, jobs: CleanerJobs, broker_id: int) -> None:
        self.jobs = jobs
        self.broker_id = broker_id

    async def AcquireJob(self, request: cpb.AcquireJobRequest, context: grpc.aio.ServicerContext
                         ) -> cpb.AcquireJobResponse:
        lease = self.jobs.acquire(request.worker_id)
        if lease is None:
            return cpb.AcquireJobResponse(found=False)
        job = lease.payload.offered
        return cpb.AcquireJobResponse(
            found=True, job_id=lease.job_id, log=lease.log, first_dirty=job.first_dirty, end=job.end,
            now_ms=job.now_ms, delete_retention_ms=job.delete_retention_ms, segment_bytes=job.segment_bytes,
            dedupe_buffer_bytes=job.dedupe_buffer_bytes, producer_last_offsets=sorted(job.producer_last_offsets),
            segment_bases=[s.base_offset for s in job.segments], lease_deadline_ms=lease.deadline_ms,
            lease_ms=self.jobs.board.lease_ms, total_bytes=job.total_bytes, hash_seed=job.hash_seed,
            aborted_txns=[cpb.AbortedTxnRange(producer_id=a.producer_id, first_offset=a.first_offset,
                                              last_offset=a.last_offset) for a in job.aborted_txns])

    async def ReadSegments(self, request: cpb.ReadSegmentsRequest, context: grpc.aio.ServicerContext
                           ) -> AsyncIterator[bytes]:
        try:
            lease = self.jobs.board.get(request.job_id, request.worker_id, self.jobs.clock())
        except LeaseError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            return
        try:
            for base, data in lease.payload.offered.chunks(CHUNK):
                yield encode_segment_chunk(base, data)  # serialized by hand: see cleaner_wire
        except LogChangedError as exc:
            with contextlib.suppress(LeaseError):
                self.jobs.board.finish(request.job_id, request.worker_id, self.jobs.clock(), error=str(exc),
                                       log_at_fault=False)
            await context.abort(grpc.StatusCode.ABORTED, str(exc))

    async def RenewLease(self, request: cpb.RenewLeaseRequest, context: grpc.aio.ServicerContext
                         ) -> cpb.RenewLeaseResponse:
        try:
            lease = self.jobs.board.renew(request.job_id, request.worker_id, self.jobs.clock(), request.progress)
        except LeaseError as exc:
            return cpb.RenewLeaseResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, message=str(exc))
        return cpb.RenewLeaseResponse(lease_deadline_ms=lease.deadline_ms)

    async def CompleteJob(self, request_iterator: AsyncIterator[cpb.CleanedChunk],
                          context: grpc.aio.ServicerContext) -> cpb.CompleteJobResponse:
        stream = aiter(request_iterator)
        first = await anext(stream, None)
        if first is None:
            return cpb.CompleteJobResponse(error_code=ErrorCode.INVALID_REQUEST, message="an empty result stream")

        async def pieces() -> AsyncIterator[tuple[int, Sequence[int], bytes]]:
            yield first.base_offset, first.replaces, first.data
            async for chunk in stream:
                yield chunk.base_offset, chunk.replaces, chunk.data

        try:
            await self.jobs.complete(first.job_id, first.worker_id, pieces(), first.map_end)
        except LeaseError as exc:
            return cpb.CompleteJobResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, message=str(exc))
        except CleanVerificationError as exc:
            return cpb.CompleteJobResponse(error_code=ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        return cpb.CompleteJobResponse()

    async def FailJob(self, request: cpb.FailJobRequest, context: grpc.aio.ServicerContext) -> cpb.FailJobResponse:
        try:
            self.jobs.board.finish(request.job_id, request.worker_id, self.jobs.clock(),
                                   error=request.message or "the worker gave up")
        except LeaseError:
            return cpb.FailJobResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        return cpb.FailJobResponse()

    async def CleanerStatus(self, request: cpb.CleanerStatusRequest, context: grpc.aio.ServicerContext
                            ) -> cpb.CleanerStatusResponse:
        return self.jobs.status(self.broker_id)


def _segments_as_bytes(handlers: Handlers) -> Handlers:
    """ReadSegments answers with ``encode_segment_chunk``'s bytes, which pass through its serializer."""
    handlers["ReadSegments"] = handlers["ReadSegments"]._replace(response_serializer=pass_bytes)  # type: ignore[attr-defined]
    return handlers


#: methods any principal with CLUSTER DESCRIBE may call; every other one is a cleaner's
_STATUS_METHODS = frozenset({"CleanerStatus"})


def cleaner_authorizer(jobs: CleanerJobs) -> Callable[[RequestContext], bool]:
    """The LogCleaner service's guard (``jobs.access`` read per call: it is set once security is up)."""

    def authorize(ctx: RequestContext) -> bool:
        access = jobs.access
        if not access.enabled:
            return True
        try:
            if ctx.api in _STATUS_METHODS:
                access.require(ctx, DESCRIBE, CLUSTER)
            else:
                access.require_service(ctx, "cleaner")
        except AuthorizationFailed as exc:
            raise NotAuthorized(f"{exc.name}: {exc.message}") from None
        return True

    return authorize


def add_cleaner_servicer(servicer: CleanerServicer, server: grpc.aio.Server) -> None:
    guard = authorized_handlers(cleaner_authorizer(servicer.jobs))

    def rewrite(handlers: Handlers) -> Handlers:
        return guard(_segments_as_bytes(handlers))

    cgrpc.add_LogCleanerServicer_to_server(servicer, RewrittenHandlers(server, rewrite))
