"""Run by the fork server in tests/unit/cli/test_forkserver.py: reports what a child sees, then exits."""

import json
import os
import sys
import time

if __name__ == "__main__":
    args = sys.argv[1:]
    lifeline = int(args[args.index("--lifeline-fd") + 1]) if "--lifeline-fd" in args else None
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("PROBE"), "pid": os.getpid(),
                      "sid": os.getsid(0), "name": __name__,
                      "warmed": getattr(sys.modules.get("tests.unit.cli.forkwarm"), "WARMED", None),
                      "lifeline": os.read(lifeline, 10).decode() if lifeline is not None else None}))
    if "--sleep" in args:
        time.sleep(60)
    sys.exit(int(args[args.index("--exit") + 1]) if "--exit" in args else 0)
