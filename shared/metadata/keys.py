"""The etcd key layout. The only module that knows how keys are spelled.

    /tidelog/<cluster>/id                       cluster id, created once
    /tidelog/<cluster>/controller               active controller {id, address, rest} on its lease;
                                                its create_revision is the controller epoch
    /tidelog/<cluster>/heartbeats/controller    fenced write the active controller makes every tick
    /tidelog/<cluster>/brokers/<id>             {address, rack, incarnation} on the broker's lease
    /tidelog/<cluster>/controlled-shutdowns/<id>  {incarnation} of a broker in controlled shutdown (KIP-841:
                                                no leadership, no ISR until it restarts); the active
                                                controller writes it and deletes it once that incarnation is gone
    /tidelog/<cluster>/broker-configs/<id>      dynamic broker configs {name: value}; <id> is a broker id
                                                or <default> (every broker), persistent
    /tidelog/<cluster>/topics/<name>            {topic id, replica assignment, configs}
    /tidelog/<cluster>/partitions/<name>/<p>    {leader, leader_epoch, isr, partition_epoch}
    /tidelog/<cluster>/reassignments/<name>/<p> an ongoing reassignment (KIP-455) {target, adding, removing};
                                                the topic record then lists the union replica set
    /tidelog/<cluster>/quotas/<entity>          quota values {key: value}; <entity> is users/<u>[/clients/<c>]
                                                or clients/<c> (names percent-encoded, see shared.quota.entities)
    /tidelog/<cluster>/quota-leader             the active quota instance {id, address} on its lease
    /tidelog/<cluster>/services/<role>/<id>     coordinators, cleaners, quota instances on leases
    /tidelog/<cluster>/offsets-owners/<p>       owner of __consumer_offsets partition p, on its lease
    /tidelog/<cluster>/offsets-producers/<p>    {producer_id, producer_epoch} its owners write with
                                                (bumped on every takeover; persistent)
    /tidelog/<cluster>/txn-owners/<p>           owner of __transaction_state partition p, on its lease
    /tidelog/<cluster>/txn-producers/<p>        {producer_id, producer_epoch} of its owners (as offsets-producers)
    /tidelog/<cluster>/txn-coordinator-epochs/<p>  the coordinator epoch counter, bumped by each new owner
    /tidelog/<cluster>/internal-topic-requests/<name>
                                                an internal topic created on first use (__transaction_state):
                                                the active controller creates it once this key exists
    /tidelog/<cluster>/producer-ids             next free block of producer ids
    /tidelog/<cluster>/acls/<TYPE>/<PATTERN>/<name>/<principal>/<host>/<OPERATION>/<PERMISSION>
                                                one ACL binding per key (names percent-encoded), see SecurityKeys
    /tidelog/<cluster>/users/<name>/<MECHANISM> a user's SCRAM credential (salt, iterations, StoredKey, ServerKey)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from shared.security.acl import AclBinding
    from shared.security.scram import ScramMechanism

SERVICE_ROLES = ("coordinator", "cleaner", "quota")


@dataclass(frozen=True)
class Keys:
    cluster: str

    @property
    def root(self) -> str:
        return f"/tidelog/{self.cluster}/"

    def cluster_id(self) -> bytes:
        return f"{self.root}id".encode()

    def controller(self) -> bytes:
        return f"{self.root}controller".encode()

    def controller_heartbeat(self) -> bytes:
        return f"{self.root}heartbeats/controller".encode()

    def brokers_prefix(self) -> bytes:
        return f"{self.root}brokers/".encode()

    def broker(self, broker_id: int) -> bytes:
        return f"{self.root}brokers/{broker_id}".encode()

    def controlled_shutdowns_prefix(self) -> bytes:
        return f"{self.root}controlled-shutdowns/".encode()

    def controlled_shutdown(self, broker_id: int) -> bytes:
        return f"{self.root}controlled-shutdowns/{broker_id}".encode()

    def broker_configs_prefix(self) -> bytes:
        return f"{self.root}broker-configs/".encode()

    def broker_config(self, broker: int | str) -> bytes:
        """A broker's dynamic configs; ``broker`` is its id or ``"<default>"``."""
        return f"{self.root}broker-configs/{broker}".encode()

    def topics_prefix(self) -> bytes:
        return f"{self.root}topics/".encode()

    def topic(self, name: str) -> bytes:
        return f"{self.root}topics/{name}".encode()

    def partitions_prefix(self, topic: str | None = None) -> bytes:
        return f"{self.root}partitions/{topic + '/' if topic else ''}".encode()

    def partition(self, topic: str, partition: int) -> bytes:
        return f"{self.root}partitions/{topic}/{partition}".encode()

    def reassignments_prefix(self, topic: str | None = None) -> bytes:
        return f"{self.root}reassignments/{topic + '/' if topic else ''}".encode()

    def reassignment(self, topic: str, partition: int) -> bytes:
        return f"{self.root}reassignments/{topic}/{partition}".encode()

    def quotas_prefix(self) -> bytes:
        return f"{self.root}quotas/".encode()

    def quota(self, entity_path: str) -> bytes:
        return f"{self.root}quotas/{entity_path}".encode()

    def quota_leader(self) -> bytes:
        return f"{self.root}quota-leader".encode()

    def services_prefix(self, role: str | None = None) -> bytes:
        return f"{self.root}services/{role + '/' if role else ''}".encode()

    def service(self, role: str, instance: str | int) -> bytes:
        return f"{self.root}services/{role}/{instance}".encode()

    def offsets_owner(self, partition: int) -> bytes:
        return f"{self.root}offsets-owners/{partition}".encode()

    def offsets_owners_prefix(self) -> bytes:
        return f"{self.root}offsets-owners/".encode()

    def offsets_producer(self, partition: int) -> bytes:
        return f"{self.root}offsets-producers/{partition}".encode()

    def txn_owner(self, partition: int) -> bytes:
        return f"{self.root}txn-owners/{partition}".encode()

    def txn_owners_prefix(self) -> bytes:
        return f"{self.root}txn-owners/".encode()

    def txn_producer(self, partition: int) -> bytes:
        return f"{self.root}txn-producers/{partition}".encode()

    def txn_coordinator_epoch(self, partition: int) -> bytes:
        return f"{self.root}txn-coordinator-epochs/{partition}".encode()

    def internal_topic_request(self, topic: str) -> bytes:
        return f"{self.root}internal-topic-requests/{topic}".encode()

    def producer_ids(self) -> bytes:
        return f"{self.root}producer-ids".encode()

    @staticmethod
    def last_segment(key: bytes) -> str:
        return key.decode().rsplit("/", 1)[-1]


def prefix_end(prefix: bytes) -> bytes:
    """The exclusive range end covering every key that starts with ``prefix``."""
    b = bytearray(prefix)
    b[-1] += 1
    return bytes(b)


def _q(text: str) -> str:
    return quote(text, safe="")


@dataclass(frozen=True)
class SecurityKeys:
    root: str  # "/tidelog/<cluster>/"

    def acls_prefix(self) -> bytes:
        return f"{self.root}acls/".encode()

    def acl(self, b: AclBinding) -> bytes:
        p, e = b.pattern, b.entry
        return (f"{self.root}acls/{p.resource_type.name}/{p.pattern_type.name}/{_q(p.name)}/"
                f"{_q(e.principal)}/{_q(e.host)}/{e.operation.name}/{e.permission_type.name}").encode()

    def users_prefix(self) -> bytes:
        return f"{self.root}users/".encode()

    def user_prefix(self, name: str) -> bytes:
        return f"{self.root}users/{_q(name)}/".encode()

    def user(self, name: str, mech: ScramMechanism) -> bytes:
        return f"{self.root}users/{_q(name)}/{mech.name}".encode()

    def parse_user(self, key: bytes) -> tuple[str, str] | None:
        """``(user name, mechanism name)`` of a user key, None if the key is not one."""
        prefix = self.users_prefix()
        if not key.startswith(prefix):
            return None
        rest = key[len(prefix):].decode()
        name, sep, mech = rest.partition("/")
        return (unquote(name), mech) if sep and name and mech and "/" not in mech else None
