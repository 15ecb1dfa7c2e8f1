"""Regenerates the README's console screenshots (docs/console/*.png) at desktop and phone widths, from a
small cluster with demo data (not a test: run it by hand after changing the console's pages):

    python scripts/console_screenshots.py docs/console
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time

from playwright.sync_api import sync_playwright

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from shared.client import Admin, Consumer, Producer
from tests.conftest import start_cluster, wait_for  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
PAGES = [("overview", "/"), ("topics", "/topics"), ("messages", "/topics/orders/messages?partition=all&mode=end"),
         ("group", "/groups/billing"), ("quotas", "/quotas")]
SIZES = [("desktop", 1280, 860, {name for name, _ in PAGES}), ("phone", 390, 844, {"overview", "messages"})]


def _demo_data(bootstrap: str) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic("orders", partitions=3, replication_factor=3, configs={"min.insync.replicas": 2})
        admin.create_topic("customers", partitions=1, replication_factor=3, configs={"cleanup.policy": "compact"})
        admin.alter_client_quotas([{"entity": {"client-id": "billing"},
                                    "ops": [{"key": "producer_byte_rate", "value": 1048576}]}])
    with Producer(bootstrap, linger_ms=5) as p:
        for i in range(500):
            value = {"order": i, "customer": f"c{i % 40}", "amount": round((i * 37 % 1000) / 10, 2)}
            p.send("orders", json.dumps(value).encode(), key=f"c{i % 40}".encode(),
                   headers=[("trace-id", f"t-{i:05d}".encode())])
        for i in range(200):
            p.send("customers", f"name-{i}".encode(), key=f"c{i % 40}".encode())
        p.send("orders", bytes(range(64)), key=b"binary")
        p.flush(30)
    with Consumer(bootstrap, group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.subscribe(["orders"])
        seen = [0]
        wait_for(lambda: (seen.__setitem__(0, seen[0] + len(c.poll(500, max_records=50))) or seen[0] >= 300), 30,
                 what="300 records")
        c.commit()


def screenshots(out: str, tmp: str) -> None:
    c = start_cluster(os.path.join(tmp, "cluster"), cleaners=1, consoles=1,
                      extra_env={"TIDELOG_CONSOLE_METRICS_INTERVAL_MS": "2000"})
    try:
        bootstrap = ",".join(p.address for p in c.procs("broker"))
        _demo_data(bootstrap)
        stop = threading.Event()

        def traffic() -> None:  # for the overview's rates, until the screenshots are taken
            with Producer(bootstrap, linger_ms=5) as p:
                i = 0
                while not stop.is_set():
                    p.send("orders", b'{"tick": %d}' % i)
                    i += 1
                    if i % 100 == 0:
                        time.sleep(0.1 + (i // 100) % 5 * 0.05)

        feeder = threading.Thread(target=traffic, daemon=True)
        feeder.start()
        time.sleep(20)
        os.makedirs(out, exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            for tag, width, height, names in SIZES:
                ctx = browser.new_context(viewport={"width": width, "height": height})
                page = ctx.new_page()
                for name, path in PAGES:
                    if name in names:
                        page.goto(c.info["console"] + path)
                        page.wait_for_load_state("networkidle")
                        page.screenshot(path=os.path.join(out, f"{name}-{tag}.png"))
                ctx.close()
            browser.close()
        stop.set()
        feeder.join(30)
    finally:
        c.lc.stop()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/console_screenshots.py OUT_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        screenshots(sys.argv[1], tmp)
