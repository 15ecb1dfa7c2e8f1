"""Quota service: client quota decisions for brokers (one active instance elected in etcd)."""
