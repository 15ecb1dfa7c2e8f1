"""Code shared by every Tidelog service: codec, protos, metadata layout, client, CLI."""

import os as _os

# numpy (used by the record decoders) starts OpenBLAS worker threads on import, which then spin
# and take CPU from the services and clients; nothing in Tidelog uses BLAS. Set before any
# module of this package can import numpy. (No effect if the application imported numpy first.)
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# gRPC's fork handlers restart its pollers in a forked child. When another thread is inside a gRPC
# call at that moment they are skipped and the child can abort before it execs: this broke Spark's
# JVM launch (PySpark's Popen uses preexec_fn, which forces fork) in ~1 of 10 tries while a producer
# or consumer was active (grpc/grpc#43055). Tidelog never uses gRPC in a forked child, so the
# handlers are off; it must be set before grpc is first imported.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
