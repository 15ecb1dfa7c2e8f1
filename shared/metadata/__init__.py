"""Cluster metadata in etcd: the key layout (``keys``) and the client adapter (``store``)."""
