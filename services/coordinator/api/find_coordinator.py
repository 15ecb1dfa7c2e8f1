"""FindCoordinator: which coordinator instance owns each key's partition: a group's
``__consumer_offsets`` partition (key_type 0), a transactional id's ``__transaction_state`` one
(key_type 1). Asking for a transactional id while ``__transaction_state`` does not exist asks the
controller to create it, as Kafka creates the topic on the first such FindCoordinator. When security
is on (``authz``), as Kafka: a key the principal may not DESCRIBE (GROUP, TRANSACTIONAL_ID) answers
GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.authz import DENIED, Op, Res, allowed, denied_message
from shared.coordinator_lookup import COORDINATOR_TOPICS, find_coordinators, unknown_key_type
from shared.proto import tidelog_pb2 as pb
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.security.transport import client_facing


async def find_coordinator(c: CoordinatorApi, ctx: RequestContext,
                           request: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
    topic = COORDINATOR_TOPICS.get(request.key_type)
    if topic is None:
        return unknown_key_type(request.group_ids, request.key_type)
    rt, view = c.runtime, c.runtime.view
    partitions = view.partitions_of(topic)
    if not partitions:
        for kind in rt.kinds.values():
            if kind.topic == topic:
                rt.request_topic(kind)
    owners = view.owners_of(topic)
    if not ctx.cert_subject:  # a client on the client port (secure clusters): the owners' TLS client ports
        owners = {p: {**o, "address": client_facing(o)} if o.get("client_address") else o for p, o in owners.items()}
    access = access_of(c)
    if access is None:
        return find_coordinators(request.group_ids, partitions, owners, topic)
    rtype = Res.GROUP if request.key_type == 0 else Res.TRANSACTIONAL_ID
    keys = list(request.group_ids)
    ok = [k for k in keys if allowed(access, ctx, Op.DESCRIBE, rtype, k)]
    found = {n.group_id: n for n in find_coordinators(ok, partitions, owners, topic).coordinators}
    resp = pb.FindCoordinatorResponse()
    for k in keys:
        if k in found:
            resp.coordinators.append(found[k])
        else:
            resp.coordinators.add(group_id=k, error_code=DENIED[rtype], partition=-1,
                                  error_message=denied_message(Op.DESCRIBE, rtype, k))
    return resp
