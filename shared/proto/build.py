"""Regenerate the committed protobuf/gRPC stubs: ``python -m shared.proto.build``.

The stubs are committed so a fresh clone runs after ``pip install`` with no
code generation; ``tests/unit/test_protos.py`` fails if they are stale.
"""

from __future__ import annotations

import os
import sys

from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTOS = ["shared/proto/tidelog.proto", "shared/proto/cleaner.proto", "shared/proto/coordinator.proto",
          "shared/proto/quota.proto", "shared/proto/transactions.proto", "shared/proto/security.proto"]


def generate(out_dir: str = ROOT) -> None:
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    for proto in PROTOS:
        rc = protoc.main(
            ["grpc_tools.protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out_dir}",
             f"--grpc_python_out={out_dir}", f"--pyi_out={out_dir}", os.path.join(ROOT, proto)]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed on {proto}")


if __name__ == "__main__":
    generate(sys.argv[1] if len(sys.argv) > 1 else ROOT)
