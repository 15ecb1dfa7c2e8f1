"""connection_creation_rate (issue 23, item 6) on both client doors of a real broker (real etcd, a
controller, one broker, plaintext) started with 5 new connections per second per host (burst 5):

- gRPC: an established channel keeps working while new connections from the same host, opened faster
  than the rate, are refused RESOURCE_EXHAUSTED naming the setting; once tokens are back a new one works;
- Kafka listener: a connection over the rate is accepted, never answered and closed (Kafka's delayed
  close of a throttled connection), while an established connection keeps being served; later a new
  connection is served again; one WARNING line names the setting.

Every connection is a new TCP connection (gRPC channels with a local subchannel pool: channels of one
process share connections otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.kafka_util import (
    API_VERSIONS,
    KafkaWire,
    grpc_bootstrap,
    kafka_bootstrap,
    log_mark,
    log_records,
)

RATE = 5
#: a host opening connections back to back goes over 5/s (burst 5) well within this many
ATTEMPTS = 200
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("connection-rate")), controllers=1, brokers=1, coordinators=0,
                      cleaners=0, quotas=0, extra_env={"TIDELOG_CONNECTION_CREATION_RATE": str(RATE),
                                                       "TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"})
    yield c
    kill_cluster(c)


def _metadata(channel: grpc.Channel) -> grpc.StatusCode:
    try:
        pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(client_id="rate-test"), timeout=10)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined, no-any-return]
    return grpc.StatusCode.OK


def _new_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=OWN_CONNECTION)


def test_grpc_new_connections_over_the_rate_are_refused(cluster: Cluster) -> None:
    address = grpc_bootstrap(cluster).split(",")[0]
    established = _new_channel(address)
    opened: list[grpc.Channel] = []
    try:
        wait_for(lambda: _metadata(established) == grpc.StatusCode.OK, 20, 0.3, "an established gRPC connection")
        refusal: grpc.RpcError | None = None
        for _ in range(ATTEMPTS):
            ch = _new_channel(address)
            opened.append(ch)
            try:
                pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(client_id="rate-test"), timeout=10)
            except grpc.RpcError as exc:
                refusal = exc
                break
        assert refusal is not None, f"{ATTEMPTS} new connections back to back, none refused"
        assert refusal.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert "connection_creation_rate" in (refusal.details() or "")  # type: ignore[attr-defined]
        assert _metadata(established) == grpc.StatusCode.OK  # the established connection is not affected
        # once the host's bucket has a token again, a new connection is admitted
        wait_for(lambda: _metadata(_keep(opened, _new_channel(address))) == grpc.StatusCode.OK, 10, 0.3,
                 "a new gRPC connection admitted again")
    finally:
        for ch in [established, *opened]:
            ch.close()


def _keep(opened: list[grpc.Channel], ch: grpc.Channel) -> grpc.Channel:
    opened.append(ch)
    return ch


def _answered(address: str) -> bool:
    """A new Kafka connection answers ApiVersions (False: closed without an answer, as a throttled one)."""
    with KafkaWire(address) as w:
        w.send(_api_versions_frame())
        return w.read_frame() is not None


def _api_versions_frame() -> bytes:
    from tests.integration.kafka_util import encode_request

    return encode_request(API_VERSIONS, 3, {"client_software_name": "rate-test", "client_software_version": "1"})


def test_kafka_connections_over_the_rate_are_closed_unanswered(cluster: Cluster) -> None:
    address = kafka_bootstrap(cluster).split(",")[0]
    broker_log = cluster.proc("broker", 1).log_path
    mark = log_mark(broker_log)
    with KafkaWire(address) as established:
        wait_for(lambda: established.request(API_VERSIONS, 3, {"client_software_name": "rate-test",
                                                               "client_software_version": "1"}).error_code == 0,
                 10, 0.3, "an established Kafka connection")
        throttled = False
        for _ in range(ATTEMPTS):
            if not _answered(address):
                throttled = True
                break
        assert throttled, f"{ATTEMPTS} new Kafka connections back to back, none throttled"
        resp = established.request(API_VERSIONS, 3, {"client_software_name": "rate-test",
                                                     "client_software_version": "1"})
        assert resp.error_code == 0  # the established connection is still served
    wait_for(lambda: _answered(address), 10, 0.3, "a new Kafka connection served again")
    warnings = [r for r in log_records(broker_log, mark)
                if r.get("level") == "WARNING" and "connection_creation_rate" in r.get("msg", "")
                and r.get("logger", "").startswith("services.broker.kafka")]
    assert len(warnings) == 1, warnings  # one line per host per 10 s


def test_grpc_refusals_log_no_traceback(cluster: Cluster) -> None:
    """Runs after the gRPC test: the broker refused calls, and logged no ERROR for them."""
    records = log_records(cluster.proc("broker", 1).log_path)
    assert any("connection_creation_rate" in r.get("msg", "") for r in records)
    assert not [r for r in records if "ConnectionThrottled" in r.get("msg", "")]
