"""Security building blocks (issue 23): Kafka's ACL model and authorizer, SCRAM, principal mapping,
certificates and the etcd-backed ACL/credential store.

Pure library code: nothing here knows gRPC, FastAPI or a service; services wire it in at one place each.
Must not import ``services`` or ``pipelines``.
"""
