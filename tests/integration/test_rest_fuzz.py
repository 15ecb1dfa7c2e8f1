"""The REST admin API under schemathesis (generated from its own /openapi.json) against a real
one-broker cluster: no 5xx, no status code the document does not declare, bodies as declared.
Bounded: a few dozen examples per operation."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import TEST_ENV, Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.etcd_probe import offsets_owner_count

MAX_FUZZ_PARTITIONS = 20  # generated topics stay small: the broker really creates them
ENV = {"TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"}


@pytest.fixture(scope="module")
def rest_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # One coordinator: the /v1/groups routes answer from a real one (without it, __consumer_offsets is never
    # created and a group cannot be looked up). Wait until it owns every __consumer_offsets partition.
    c = start_cluster(str(tmp_path_factory.mktemp("rest-fuzz")), controllers=1, brokers=1, coordinators=1,
                      cleaners=0, quotas=0, extra_env=ENV)
    r = httpx.post(f"{c.rest}/v1/topics", json={"name": "fuzz", "partitions": 2}, timeout=30)
    assert r.status_code == 201, r.text
    partitions = int(TEST_ENV["TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS"])
    wait_for(lambda: offsets_owner_count(c.info["etcd"], c.info["cluster"]) == partitions, 60,
             what="the coordinator owning every __consumer_offsets partition")
    wait_for(lambda: httpx.get(f"{c.rest}/v1/groups/fuzz-probe", timeout=30).status_code == 404, 30,
             what="the coordinator answering DescribeGroups")
    yield c
    kill_cluster(c)


@pytest.fixture(scope="module")
def rest_schema(rest_cluster: Cluster) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{rest_cluster.rest}/openapi.json")


schema = schemathesis.pytest.from_fixture("rest_schema")


def _keep_small(case: schemathesis.Case) -> None:
    body = case.body if isinstance(case.body, dict) else None
    if body and isinstance(body.get("partitions"), int) and not isinstance(body["partitions"], bool):
        body["partitions"] = min(body["partitions"], MAX_FUZZ_PARTITIONS)


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_rest_api_answers_only_documented_codes_and_never_5xx(case: schemathesis.Case, rest_cluster: Cluster) -> None:
    _keep_small(case)
    response = case.call_and_validate(checks=[not_a_server_error, status_code_conformance,
                                              content_type_conformance, response_schema_conformance])
    if case.method.upper() == "POST" and case.path == "/v1/topics" and response.status_code == 201:
        httpx.delete(f"{rest_cluster.rest}/v1/topics/{case.body['name']}", timeout=30)
