"""Compaction status of a cluster, read from every broker's LogCleaner service (CLI and REST).

Blocking gRPC calls; callers on an event loop run ``cleaner_status`` in a thread. A client (the CLI) passes
its ``ClientSecurity``; without one the channels are the process's (``shared.security.transport``: TLS with
the service's certificate in a secure service, plaintext otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from shared.proto import cleaner_pb2 as cpb
from shared.proto import cleaner_pb2_grpc as cgrpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from shared.client.security import ClientSecurity


def _channel(address: str, security: ClientSecurity | None) -> grpc.Channel:
    if security is not None:
        return security.channel(address)
    from shared.security import transport  # the process's TLS files, if any

    return transport.sync_channel(address)


def broker_addresses(bootstrap: str, security: ClientSecurity | None = None) -> list[str]:
    """Every broker the cluster's metadata lists (the bootstrap ones if none answers)."""
    seeds = [a.strip() for a in bootstrap.split(",") if a.strip()]
    for seed in seeds:
        try:
            with _channel(seed, security) as ch:
                md = pb_grpc.BrokerStub(ch).Metadata(pb.MetadataRequest(client_id="tidelog-cli"), timeout=5)
            return sorted({b.address for b in md.brokers if b.address}) or seeds
        except grpc.RpcError:
            continue
    return seeds


def cleaner_status(addresses: list[str], security: ClientSecurity | None = None) -> list[dict[str, object]]:
    out = []
    for address in addresses:
        try:
            with _channel(address, security) as ch:
                st = cgrpc.LogCleanerStub(ch).CleanerStatus(cpb.CleanerStatusRequest(), timeout=5)
        except grpc.RpcError as exc:
            out.append({"broker": address, "error": str(exc.code())})
            continue
        out.append({
            "broker": address, "broker_id": st.broker_id, "cleaned_bytes": st.cleaned_bytes,
            "jobs_done": st.jobs_done, "jobs_refused": st.jobs_refused,
            "jobs": [{"job": j.job_id, "log": j.log, "worker": j.worker_id, "progress": j.progress,
                      "lease_deadline_ms": j.lease_deadline_ms} for j in st.jobs],
            "logs": [{"log": s.log, "dirty_ratio": round(s.dirty_ratio, 4), "compaction_delay_ms": s.compaction_delay_ms,
                      "first_dirty": s.first_dirty, "first_uncleanable": s.first_uncleanable,
                      "size_bytes": s.size_bytes,
                      "last_cleaned_ms": s.last_cleaned_ms if s.last_cleaned_ms > 0 else None} for s in st.logs],
            "quarantined": [{"log": q.log, "reason": q.reason} for q in st.quarantined],
            "workers": [{"worker": w.worker_id, "cleaned_bytes": w.cleaned_bytes, "jobs_done": w.jobs_done,
                         "mb_per_s": round(w.cleaned_bytes / 1000 / max(w.busy_ms, 1), 3)} for w in st.workers],
        })
    return out
