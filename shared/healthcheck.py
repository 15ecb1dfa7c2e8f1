"""``python -m shared.healthcheck HOST:PORT``: exit 0 if the gRPC health service says SERVING.

Used by compose health checks; the local launcher uses the same check.
"""

from __future__ import annotations

import sys

from shared.cli.launcher import grpc_healthy


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m shared.healthcheck HOST:PORT", file=sys.stderr)
        return 2
    ok = grpc_healthy(args[0], timeout=2.0)
    print("SERVING" if ok else "NOT SERVING")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
