"""The controller: elected in etcd; owns topic/partition metadata writes; serves the REST admin API."""
