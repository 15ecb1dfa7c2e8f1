"""Code shared by every Tidelog service: codec, protos, metadata layout, client, CLI."""

import os as _os

# numpy (used by the record decoders) starts OpenBLAS worker threads on import, which then spin
# and take CPU from the services and clients; nothing in Tidelog uses BLAS. Set before any
# module of this package can import numpy. (No effect if the application imported numpy first.)
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
