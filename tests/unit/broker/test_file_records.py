"""Fetched records sent from the segment file (``FileRecords``, ``sendfile``): a read asked for as file
records names exactly the bytes the copying read returns (whole batches, below the limit, the first batch
whole), its descriptor is its own and is closed, and the Kafka listener's reply writer sends such ranges
between the response's other bytes over real loopback sockets, plaintext and TLS; a range whose file
shrank before it was sent ends the reply with ``ShortFileRecords``."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.broker.kafka.frames import FrameStream
from services.broker.kafka.listener import _write_reply
from services.broker.log import PartitionLog
from services.broker.log import partition_log as partition_log_module
from services.broker.log.file_records import ZERO_COPY_MIN_BYTES, FileRecords, ShortFileRecords
from shared.config import LogConfig
from shared.records.builder import encode_batch
from tests.unit.broker.test_kafka_frames import connect, recv_exactly, tls_files  # noqa: F401 - a fixture


def _batch(n: int, size: int, tag: int) -> bytes:
    return encode_batch([(1_700_000_000_000 + i, None, bytes([tag % 251]) * size, None) for i in range(n)])


def _as_bytes(records: object) -> bytes:
    if isinstance(records, FileRecords):
        try:
            return records.read()
        finally:
            records.close()
            assert records.fd == -1
    return bytes(records)  # type: ignore[call-overload]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 300)), min_size=1, max_size=30),
       segment_bytes=st.integers(2500, 8000), index_interval=st.integers(1, 2000),
       reads=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 4000), st.integers(0, 200), st.booleans()),
                      min_size=1, max_size=12))
def test_file_records_are_the_bytes_the_copying_read_returns(tmp_path_factory, monkeypatch, batches, segment_bytes,
                                                             index_interval, reads) -> None:
    monkeypatch.setattr(partition_log_module, "ZERO_COPY_MIN_BYTES", 1)  # every read a range, to compare
    log = PartitionLog(str(tmp_path_factory.mktemp("fr") / "t-0"),
                       LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval))
    for i, (n, size) in enumerate(batches):
        log.append_as_leader(_batch(n, size, i))
    leo = log.log_end_offset
    for offset, max_bytes, limit, min_one in reads:
        offset %= leo + 1
        limit = min(limit, leo)
        copied = log.read(offset, max_bytes, limit, min_one_batch=min_one)
        ranged = log.read(offset, max_bytes, limit, min_one_batch=min_one, file_records=True)
        want = bytes(copied.records)
        assert isinstance(ranged.records, FileRecords) or want == b""
        assert len(ranged.records) == len(want)
        assert _as_bytes(ranged.records) == want
        assert (ranged.log_start_offset, ranged.log_end_offset) == (copied.log_start_offset, copied.log_end_offset)
    log.close()


def test_small_reads_are_copied_and_large_ones_outlive_their_segment(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=1 << 20))
    log.append_as_leader(_batch(10, 100, 0))
    small = log.read(0, 1 << 20, file_records=True).records
    assert isinstance(small, bytes) and len(small) < ZERO_COPY_MIN_BYTES
    for i in range(1, 8):
        log.append_as_leader(_batch(64, 1024, i))
    big = log.read(10, 1 << 20, file_records=True).records
    assert isinstance(big, FileRecords) and len(big) >= ZERO_COPY_MIN_BYTES
    want = bytes(log.read(10, 1 << 20).records)
    # The segment rolls and is deleted (retention) before the range is sent: its own descriptor keeps the file.
    log.config = LogConfig(segment_bytes=1 << 20, retention_bytes=0)
    log.roll()
    log.append_as_leader(_batch(1, 10, 9))
    assert log.apply_retention() >= 1 and log.log_start_offset > 10
    assert big.read() == want
    fd = big.fd
    del big  # collected without close(): its descriptor goes with it
    with pytest.raises(OSError):
        os.fstat(fd)
    log.close()


class ReplyServer:
    """A loop in a thread: each connection gets ``reply`` (chunks, written by ``_write_reply``) and is closed;
    how each reply ended is recorded."""

    def __init__(self, reply: list[object], context: ssl.SSLContext | None) -> None:
        self.reply, self.context = reply, context
        self.ended: list[BaseException | None] = []
        self.done = threading.Event()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            server = self.loop.run_until_complete(self.loop.create_server(
                lambda: FrameStream(self._serve, paused=context is not None), "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    async def _serve(self, stream: FrameStream) -> None:
        try:
            if self.context is not None:
                await stream.start_tls(self.context, ssl_handshake_timeout=10)
            await _write_reply(stream, self.reply)  # type: ignore[arg-type]
            await stream.drain()
            self.ended.append(None)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test
            self.ended.append(exc)
        finally:
            stream.close()
            self.done.set()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def segment_file(tmp_path) -> Iterator[tuple[str, bytes]]:
    data = os.urandom(5 << 20)
    path = str(tmp_path / "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(data)
    yield path, data


def _context(kind: str, files: tuple[str, str]) -> ssl.SSLContext | None:
    if kind == "plaintext":
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*files)
    return context


@pytest.mark.parametrize("kind", ["plaintext", "tls"])
def test_reply_with_file_ranges_arrives_as_one_stream_of_bytes(segment_file, tls_files, kind) -> None:  # noqa: F811
    path, data = segment_file
    fd = os.open(path, os.O_RDONLY | os.O_APPEND)
    ranges = [FileRecords(os.dup(fd), 100, 4 << 20), FileRecords(os.dup(fd), 7, 70_000)]
    reply: list[object] = [b"head", ranges[0], b"mid", b"dle", ranges[1], b"tail"]
    server = ReplyServer(reply, _context(kind, tls_files))
    try:
        sock = connect(server)  # type: ignore[arg-type]
        want = b"head" + data[100:100 + (4 << 20)] + b"middle" + data[7:70_007] + b"tail"
        assert recv_exactly(sock, len(want)) == want
        assert sock.recv(1) == b""  # closed after the reply, nothing more
        sock.close()
        assert server.done.wait(10) and server.ended == [None]
        assert all(r.fd == -1 for r in ranges)  # closed once sent
    finally:
        server.stop()
        os.close(fd)


def test_a_range_whose_file_shrank_ends_the_reply(segment_file) -> None:
    path, data = segment_file
    fd = os.open(path, os.O_RDONLY)
    short = FileRecords(os.dup(fd), 1 << 20, 3 << 20)
    later = FileRecords(os.dup(fd), 0, 100)
    os.truncate(path, 2 << 20)  # a truncation (a leader becoming a follower) after the read
    server = ReplyServer([b"head", short, later, b"tail"], None)
    try:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        got = bytearray()
        while chunk := sock.recv(1 << 20):
            got += chunk
        sock.close()
        assert server.done.wait(10)
        assert isinstance(server.ended[0], ShortFileRecords)
        assert bytes(got) == b"head" + data[1 << 20:2 << 20]  # what the file still held, then the end
        assert short.fd == -1 and later.fd == -1  # every range of the reply closed, sent or not
    finally:
        server.stop()
        os.close(fd)
