"""``commit_async``'s ordered pipe to the group coordinator: one ``OffsetCommitStream``.

Commits are written to the stream in the order the application made them and several
are in flight at once (as Kafka's consumer keeps in-flight OffsetCommit requests on
its one coordinator connection); the coordinator queues them for writing in that order
and answers each, in order, once its records are committed (``acks=all``). Commits queued
while the stream is busy travel together in its next message, each still answered on
its own. Nothing is
retried: a retried commit could land after a later one. When the stream breaks, or the
coordinator answers that it moved, every commit still in flight fails with a retriable
error (its callback says so) and the next commit opens a new stream to wherever the
group's coordinator now is.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from shared.client.group_coordinator import REDISCOVER, GroupCoordinatorClient
from shared.client.grpc_calls import forget_traceback
from shared.errors import ErrorCode, TidelogError
from shared.proto import coordinator_pb2 as cpb

#: Commits in flight on the stream before ``send`` waits (and the most one message carries).
MAX_IN_FLIGHT = 128

Done = Callable[[cpb.OffsetCommitResponse | None, Exception | None], None]
_END: Any = object()
_READER = "tidelog-commit-stream"


def _batches(requests: queue.SimpleQueue[Any]) -> Iterator[cpb.OffsetCommitBatch]:
    """The stream's messages: each carries every commit queued by the time it is sent (at most
    ``MAX_IN_FLIGHT``), so a burst of commit_async calls costs a few messages, not one each."""
    while (first := requests.get()) is not _END:
        commits = [first]
        with contextlib.suppress(queue.Empty):
            while len(commits) < MAX_IN_FLIGHT:
                nxt = requests.get_nowait()
                if nxt is _END:
                    yield cpb.OffsetCommitBatch(commits=commits)
                    return
                commits.append(nxt)
        yield cpb.OffsetCommitBatch(commits=commits)


class _Stream:
    def __init__(self, call: Any, requests: queue.SimpleQueue[Any]) -> None:
        self.call = call
        self.requests = requests
        self.pending: deque[Done] = deque()
        self.reader: threading.Thread | None = None


class CommitStream:
    def __init__(self, coordinator: GroupCoordinatorClient) -> None:
        self.coordinator = coordinator
        self._cond = threading.Condition()
        self._stream: _Stream | None = None

    def send(self, request: cpb.OffsetCommitRequest, done: Done, timeout_s: float = 30.0) -> None:
        """Queue ``request``; ``done(response, None)`` or ``done(None, error)`` is called from the stream's
        reader thread, in the order of ``send`` calls. Waits while ``MAX_IN_FLIGHT`` are outstanding."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._stream is None or len(self._stream.pending) < MAX_IN_FLIGHT,
                                       timeout_s):
                raise TidelogError("too many offset commits in flight", code=ErrorCode.REQUEST_TIMED_OUT)
            if self._stream is None:
                self._stream = self._open()
            self._stream.pending.append(done)
            self._stream.requests.put(request)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every commit sent so far is answered; False if some still are not after ``timeout_s``
        (at once when called from a commit callback, which runs on the thread that answers them)."""
        if threading.current_thread().name == _READER:
            return False
        with self._cond:
            return self._cond.wait_for(lambda: self._stream is None or not self._stream.pending, timeout_s)

    def close(self) -> None:
        with self._cond:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.requests.put(_END)
            stream.call.cancel()
            # The reader frees the call as it ends: let it, before the interpreter may exit (see
            # shared.client.grpc_calls). Not from a commit callback, which runs on the reader.
            if stream.reader is not None and stream.reader is not threading.current_thread():
                stream.reader.join(timeout=2)

    def _open(self) -> _Stream:
        requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        call = self.coordinator.stub().OffsetCommitStream(_batches(requests))
        stream = _Stream(call, requests)
        stream.reader = threading.Thread(target=self._read, args=(stream,), name=_READER, daemon=True)
        stream.reader.start()
        return stream

    def _read(self, stream: _Stream) -> None:
        error: TidelogError | None = None
        try:
            for batch in stream.call:
                n = len(batch.responses)
                with self._cond:
                    answered = [stream.pending[i] for i in range(n)]
                for done, resp in zip(answered, batch.responses, strict=True):
                    if error is None and resp.error_code in REDISCOVER:
                        error = TidelogError(f"OffsetCommit: {ErrorCode(resp.error_code).name}: {resp.error_message}",
                                             code=resp.error_code)
                    if error is not None:
                        done(None, error)
                    else:
                        done(resp, None)
                with self._cond:  # only now: flush() returns once the callbacks have run
                    for _ in range(n):
                        stream.pending.popleft()
                    self._cond.notify_all()
                if error is not None:
                    break
        except grpc.RpcError as exc:
            forget_traceback(exc)
            if exc.code() != grpc.StatusCode.CANCELLED:  # cancelled: closed by this client
                error = TidelogError(f"OffsetCommit stream failed: {exc.code()}",
                                     code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        with self._cond:
            if self._stream is stream:
                self._stream = None
            failed = list(stream.pending)
            stream.pending.clear()
            self._cond.notify_all()
        stream.requests.put(_END)
        stream.call.cancel()
        if error is not None:
            self.coordinator.reset()  # find the coordinator again on the next commit
        for done in failed:
            done(None, error or TidelogError("offset commit stream closed", code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
