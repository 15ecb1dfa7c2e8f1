"""``FrameStream`` (the Kafka listener's connection protocol) over real loopback sockets, plaintext and TLS:
size-prefixed frames of every size class arrive intact and in order (small ones pipelined many to a read,
large ones read in place, a burst larger than the receive buffer held back by flow control), a peer that
closes mid-frame ends the read with ``IncompleteReadError``, and large replies drain."""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import socket
import ssl
import struct
import threading
from collections.abc import Iterator

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from services.broker.kafka.frames import DIRECT_FRAME_BYTES, RECEIVE_BUFFER_BYTES, FrameStream

SIZES = [1, 4, 100, 4096, DIRECT_FRAME_BYTES - 1, DIRECT_FRAME_BYTES, DIRECT_FRAME_BYTES + 1, 300_000, 1 << 20, 7]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1)).sign(key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("frames-tls")
    certfile, keyfile = str(d / "c.pem"), str(d / "k.pem")
    with open(certfile, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(keyfile, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return certfile, keyfile


def frame(i: int, size: int) -> bytes:
    body = (i.to_bytes(4, "big") + os.urandom(16)) * (size // 20 + 1)
    return body[:size]


class Server:
    """A loop in a thread serving FrameStream; each connection reads frames and answers each with its size
    and a reply of ``reply_bytes``; what it read and how it ended are recorded."""

    def __init__(self, context: ssl.SSLContext | None, reply_bytes: int = 8, pieces: bool = False) -> None:
        self.context = context
        self.reply_bytes = reply_bytes
        self.pieces = pieces  # answer with ``write_pieces(reply_pieces(i))`` instead
        self.frames: list[bytes] = []
        self.ended: list[BaseException | None] = []
        self.done = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(self.loop.create_server(
            lambda: FrameStream(self._serve, paused=self.context is not None), "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, stream: FrameStream) -> None:
        try:
            if self.context is not None:
                await stream.start_tls(self.context, ssl_handshake_timeout=10)
            while True:
                size = struct.unpack(">i", await stream.readexactly(4))[0]
                self.frames.append(await stream.readexactly(size))
                if self.pieces:
                    stream.write_pieces(reply_pieces(len(self.frames)))
                else:
                    stream.write(struct.pack(">i", size) + bytes(self.reply_bytes - 4))
                await stream.drain()
        except BaseException as exc:  # noqa: BLE001 - recorded for the test
            self.ended.append(exc)
        finally:
            stream.close()
            self.done.set()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(params=["plaintext", "tls"])
def server(request: pytest.FixtureRequest, tls_files: tuple[str, str]) -> Iterator[Server]:
    context = None
    if request.param == "tls":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls_files)
    s = Server(context)
    yield s
    s.stop()


def connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    if server.context is None:
        return sock
    client = ssl.create_default_context()
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    return client.wrap_socket(sock)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the server closed"
        out += chunk
    return bytes(out)


def reply_pieces(i: int) -> list[bytes | memoryview]:
    """Reply ``i`` as pieces: small and large ones, an empty one, a memoryview, 10 MiB in all (more than the
    socket takes at once, so ``writev`` writes part and the transport the rest)."""
    big = random.Random(i).randbytes(10 << 20)
    return [b"", i.to_bytes(4, "big"), big[:5], memoryview(big)[5:1 << 20], b"", big[1 << 20:], b"end"]


def test_replies_in_pieces_arrive_whole_and_in_order(server: Server) -> None:
    s = Server(server.context, pieces=True)  # the fixture's server answers with write(); this one in pieces
    try:
        with connect(s) as sock:
            for i in range(1, 4):  # one at a time over TLS (an SSL socket is not for two threads at once)
                sock.sendall(struct.pack(">i", 4) + b"ping")
                want = b"".join(bytes(p) for p in reply_pieces(i))
                assert recv_exactly(sock, len(want)) == want
            # plaintext: requests pipelined, so a reply may find the previous one still being sent
            if server.context is None:
                sock.sendall((struct.pack(">i", 4) + b"ping") * 3)
                for i in range(4, 7):
                    want = b"".join(bytes(p) for p in reply_pieces(i))
                    assert recv_exactly(sock, len(want)) == want
        assert s.done.wait(10)
    finally:
        s.stop()


def test_frames_of_every_size_arrive_intact_in_order(server: Server) -> None:
    sent = [frame(i, size) for i, size in enumerate(SIZES * 3)]
    with connect(server) as sock:  # one thread: an SSL socket is not for two at once; the replies are small
        sock.sendall(b"".join(struct.pack(">i", len(f)) + f for f in sent))  # all pipelined at once
        recv_exactly(sock, 8 * len(sent))
    assert server.done.wait(10)
    assert [len(f) for f in server.frames] == [len(f) for f in sent], server.ended
    assert server.frames == sent
    assert isinstance(server.ended[0], asyncio.IncompleteReadError)  # a clean close between frames
    assert server.ended[0].partial == b""


def test_a_burst_larger_than_the_receive_buffer_is_held_back_and_read_in_full(server: Server) -> None:
    small = [frame(i, 1000) for i in range(3 * RECEIVE_BUFFER_BYTES // 1000)]
    with connect(server) as sock:
        sock.sendall(b"".join(struct.pack(">i", len(f)) + f for f in small))
        recv_exactly(sock, 8 * len(small))
    assert server.done.wait(10)
    assert server.frames == small


@pytest.mark.parametrize("size", [100, 300_000])
def test_a_peer_closing_mid_frame_ends_the_read(server: Server, size: int) -> None:
    with connect(server) as sock:
        sock.sendall(struct.pack(">i", size) + b"x" * (size // 2))
    assert server.done.wait(10)
    assert server.frames == []
    exc = server.ended[0]
    assert isinstance(exc, (asyncio.IncompleteReadError, ConnectionError)), exc
    if isinstance(exc, asyncio.IncompleteReadError):
        assert exc.expected == size and len(exc.partial) <= size // 2


def test_large_replies_drain_to_a_slow_reader(tls_files: tuple[str, str]) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls_files)
    for ctx in (None, context):
        s = Server(ctx, reply_bytes=4 << 20)
        try:
            with connect(s) as sock:
                for i in range(3):
                    f = frame(i, 10)
                    sock.sendall(struct.pack(">i", len(f)) + f)
                    assert len(recv_exactly(sock, 4 << 20)) == 4 << 20
            assert s.done.wait(10)
            assert len(s.frames) == 3
        finally:
            s.stop()
