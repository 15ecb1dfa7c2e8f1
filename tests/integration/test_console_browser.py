"""The web console in a real browser (Debian's chromium driven by Playwright) against one live cluster
started as `tidelog up` starts it (LocalCluster with a console): an operator's round trip through the pages
(create a topic, produce, find the record with the filter, live tail receives a record produced by the CLI,
a group's lag and an offset reset with its dry run, a quota edited, a real transaction listed Ongoing then
CompleteCommit, the topic deleted), record contents that cannot inject markup, large and binary values
shown escaped and cut, nothing loaded from another origin, and an axe-core accessibility check on every
page.

The tests of this module run in order on one module-scoped cluster (they build on each other's topic)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, expect, sync_playwright

from shared.client import Consumer, Producer
from tests.conftest import REPO, Cluster, kill_cluster, start_cluster, wait_for

CHROMIUM = "/usr/bin/chromium"  # Debian's package, installed by scripts/setup.sh
TOPIC = "console-orders"
GROUP = "console-group"
TXN = "console-txn"
ENV = {"TIDELOG_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "3000", "TIDELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "250",
       "TIDELOG_CONSOLE_METRICS_INTERVAL_MS": "500"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("console")), controllers=1, brokers=1, coordinators=1, cleaners=0,
                      quotas=0, consoles=1, extra_env=ENV)
    yield c
    kill_cluster(c)


@pytest.fixture(scope="module")
def console(cluster: Cluster) -> str:
    url = cluster.info["console"]
    assert url and url.startswith("http://127.0.0.1:")
    return url


@pytest.fixture(scope="module")
def bootstrap(cluster: Cluster) -> str:
    return ",".join(p.address for p in cluster.procs("broker"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, console: str) -> Iterator[Page]:
    """A page that records every URL it fetched and every script error."""
    p = browser.new_page()
    p.set_default_timeout(15_000)
    p.fetched = []  # type: ignore[attr-defined]
    p.errors = []  # type: ignore[attr-defined]
    p.on("request", lambda r: p.fetched.append(r.url))  # type: ignore[attr-defined]
    p.on("pageerror", lambda e: p.errors.append(str(e)))  # type: ignore[attr-defined]
    yield p
    origins = {f"{urlsplit(u).scheme}://{urlsplit(u).netloc}" for u in p.fetched if not u.startswith("data:")}  # type: ignore[attr-defined]
    assert origins <= {console}, f"the page reached another origin: {origins}"
    assert p.errors == []  # type: ignore[attr-defined]
    p.close()


def test_overview_shows_services_controller_and_partitions(page: Page, console: str, cluster: Cluster) -> None:
    page.goto(console + "/")
    view = cluster.cluster_view()
    expect(page.locator("#controller-epoch")).to_have_text(str(view["controller"]["epoch"]))
    rows = page.locator("#services tbody tr")
    expect(rows).to_have_count(1 + 1 + 1)  # controller, broker, coordinator
    expect(page.locator("#services")).to_contain_text("SERVING")
    expect(page.locator("#offline")).to_have_text("0")
    broker = cluster.procs("broker")[0].address
    expect(page.locator("#bootstrap")).to_have_text(broker)  # what to give the Python client
    assert f"{console}/static/htmx.min.js" in page.fetched  # type: ignore[attr-defined]
    api = httpx.get(console + "/api/overview", timeout=10).json()
    assert api["controller"]["epoch"] == view["controller"]["epoch"]


def test_create_topic_then_errors_by_kafka_name(page: Page, console: str) -> None:
    page.goto(console + "/topics")
    page.fill("#name", TOPIC)
    page.fill("#partitions", "2")
    page.fill("#configs", "retention.ms=3600000")
    page.click("#create-topic button[type=submit]")
    page.wait_for_url(f"{console}/topics/{TOPIC}")
    expect(page.locator("#partitions tbody tr")).to_have_count(2)
    expect(page.locator("#configs")).to_contain_text("3600000")
    # Again: the server's error by its Kafka name.
    page.goto(console + "/topics")
    page.fill("#name", TOPIC)
    page.click("#create-topic button[type=submit]")
    expect(page.locator(".error .code")).to_have_text("TOPIC_ALREADY_EXISTS")
    # Search as you type (htmx swaps the table in).
    page.fill("#q", "console-ord")
    expect(page.locator("#topic-table tbody tr")).to_have_count(1)
    page.fill("#q", "no-such-topic-at-all")
    expect(page.locator("#topic-table tbody tr")).to_have_count(0)


def test_topic_alter_configs_and_add_partitions(page: Page, console: str) -> None:
    page.goto(f"{console}/topics/{TOPIC}")
    page.fill("#set", "retention.ms=7200000")
    page.click("#alter-configs button")
    expect(page.locator("#configs")).to_contain_text("7200000")
    page.fill("#set", "retention.ms=not-a-number")
    page.click("#alter-configs button")
    expect(page.locator(".error .code")).to_have_text("INVALID_CONFIG")
    page.fill("#total", "3")
    page.click("#add-partitions button")
    expect(page.locator("#partitions tbody tr")).to_have_count(3)


def test_produce_a_record_and_find_it_with_the_filter(page: Page, console: str) -> None:
    page.goto(f"{console}/topics/{TOPIC}/messages")
    page.fill("#p-key", "user-7")
    page.fill("#p-value", '{"order": 1234, "item": "needle-in-value"}')
    page.fill("#p-headers", "trace: abc-123")
    page.fill("#p-partition", "1")
    page.click("#produce button")
    expect(page.locator(".done")).to_contain_text("produced to partition 1 at offset 0")
    expect(page.locator("#partition")).to_have_value("all")  # back to every partition: filter and tail not scoped
    expect(page.locator("#records")).to_contain_text("needle-in-value")
    page.fill("#p-value", "nowhere")
    page.fill("#p-partition", "99")
    page.click("#produce button")
    expect(page.locator(".error .code")).to_have_text("UNKNOWN_TOPIC_OR_PARTITION")
    with Producer(_bootstrap(console), linger_ms=0) as p:  # noise around it
        for i in range(30):
            p.send(TOPIC, f"other-{i}".encode(), key=f"k{i}".encode(), partition=i % 3)
        p.flush(10)
    for needle in ("needle-in-value", "abc-123", "user-7"):  # in the value, a header, the key
        page.goto(f"{console}/topics/{TOPIC}/messages")
        page.fill("#filter", needle)
        page.select_option("#mode", "start")
        page.click("#browse button")
        rows = page.locator("#records tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("user-7")
    expect(page.locator("#records .fmt-json")).to_have_count(1)  # the value's format guessed: JSON
    page.goto(f"{console}/topics/{TOPIC}/messages?partition=0&mode=end&filter=needle-in-value")  # not there
    expect(page.locator("#records tbody")).to_contain_text("No records here matching the filter")
    page.click("#search-everywhere")
    expect(page.locator("#records tbody tr")).to_have_count(1)
    expect(page.locator("#partition")).to_have_value("all")
    expect(page.locator("#tail-status")).to_contain_text("every partition, only records matching “needle-in-value”")
    page.select_option("#format", "hex")
    page.click("#browse button")
    expect(page.locator("#records tbody tr").first).to_contain_text("7b 22 6f")  # '{"o' in hex


def _bootstrap(console: str) -> str:
    return ",".join(b["address"] for b in httpx.get(console + "/api/brokers", timeout=10).json()["brokers"])


def test_pages_of_100_forward_and_back_and_download(page: Page, console: str, bootstrap: str) -> None:
    with Producer(bootstrap, linger_ms=5) as p:
        for i in range(250):
            p.send(TOPIC, f"page-{i:04d}".encode(), partition=2)
        p.flush(10)
    page.goto(f"{console}/topics/{TOPIC}/messages?partition=2&mode=start")
    rows = page.locator("#records tbody tr")
    expect(rows).to_have_count(100)
    first = rows.first.locator("td").nth(1).inner_text()
    page.click("#next")
    expect(rows).to_have_count(100)
    assert int(rows.first.locator("td").nth(1).inner_text()) == int(first) + 100
    page.click("#prev")
    expect(rows.first.locator("td").nth(1)).to_have_text(first)
    with page.expect_download() as dl:
        page.click("#download")
    lines = open(dl.value.path()).read().splitlines()
    assert len(lines) >= 100 and json.loads(lines[0])["topic"] == TOPIC


def test_traffic_disk_use_and_topic_size_from_the_brokers_metrics(page: Page, console: str) -> None:
    page.goto(console + "/")
    expect(page.locator("#bytes-in")).to_contain_text("/s")
    page.goto(console + "/brokers")
    expect(page.locator("#brokers tbody tr").first.locator("td").nth(6)).to_contain_text("KiB")
    page.goto(console + "/topics")
    row = page.locator("#topic-table tbody tr", has_text=TOPIC)
    expect(row.locator("td").nth(5)).to_contain_text("KiB")


def test_live_tail_receives_a_record_produced_by_the_cli(page: Page, console: str, bootstrap: str) -> None:
    page.goto(f"{console}/topics/{TOPIC}/messages")
    page.click("#tail-start")
    expect(page.locator("#tail-status")).to_contain_text("connected")  # its start is pinned at the log end
    env = {**os.environ, "PYTHONPATH": REPO}
    out = subprocess.run([sys.executable, "-m", "shared.cli.main", "produce", TOPIC, "--bootstrap-server", bootstrap,
                          "--key-separator", ":"], input="tail-key:from-the-cli\n", capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    expect(page.locator("#tail tbody")).to_contain_text("from-the-cli", timeout=15_000)
    expect(page.locator("#tail-status")).to_contain_text("1 records received")
    page.click("#tail-stop")


def shown_group_state(page: Page) -> str:
    """The group page's state after a reload, or what the page shows instead (an error while the coordinator
    is busy is shown to the user, who reloads: so does this)."""
    page.reload()
    states = page.locator("#group-state").all_inner_texts()  # no waiting: the element is there or it is not
    return states[0] if states else " ".join(page.locator("main").inner_text().split())[:300]


def group_is_empty(page: Page) -> bool:
    shown = shown_group_state(page)
    assert shown == "Empty", shown  # wait_for's failure message names what was shown last
    return True


def test_group_lag_dry_run_and_reset(page: Page, console: str, bootstrap: str) -> None:
    with Consumer(bootstrap, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                  heartbeat_interval_ms=250) as c:
        c.subscribe([TOPIC])
        wait_for(lambda: len(c.poll(500)) > 0, 30, what="records")
        c.commit()
    page.goto(f"{console}/groups")
    expect(page.locator("#groups")).to_contain_text(GROUP)
    page.goto(f"{console}/groups/{GROUP}")
    wait_for(lambda: group_is_empty(page), 30, what="an empty group")
    expect(page.locator("#lag tbody tr")).to_have_count(3)
    page.select_option("#r-to", "earliest")
    page.fill("#r-topic", TOPIC)
    page.click("#reset-preview")
    expect(page.locator("#plan-h")).to_have_text("Dry run: nothing changed")
    expect(page.locator("#plan tbody tr")).to_have_count(3)
    lag_before = page.locator("#total-lag").inner_text()
    page.click("#reset-execute")
    expect(page.locator("#plan-h")).to_have_text("Offsets reset")
    page.goto(f"{console}/groups/{GROUP}")
    total = sum(int(x) for x in page.locator("#lag td.lag").all_inner_texts())
    assert total > int(lag_before)
    assert total == int(page.locator("#total-lag").inner_text())
    page.wait_for_timeout(1200)  # watched: its lag is sampled every 0.5 s here
    page.reload()
    expect(page.locator("#lag svg")).to_have_count(3)  # each partition's recent lag
    # Timestamp reset with a bad value: the error by name; then to a given offset.
    page.select_option("#r-to", "timestamp")
    page.fill("#r-value", "yesterday")
    page.click("#reset-preview")
    expect(page.locator(".error .code")).to_have_text("INVALID_REQUEST")


def test_edit_a_quota(page: Page, console: str) -> None:
    page.goto(f"{console}/quotas")
    page.check("#q-client-set")
    page.fill("#q-client", "console-app")
    page.select_option("#q-key", "producer_byte_rate")
    page.fill("#q-value", "1048576")
    page.click("#edit-quota button")
    expect(page.locator("#quota-entries")).to_contain_text("client-id=console-app")
    expect(page.locator("#quota-entries")).to_contain_text("1048576")
    expect(page.locator("#quota-entries")).not_to_contain_text("1048576.0")  # a whole rate shown whole
    page.check("#q-client-set")
    page.fill("#q-client", "console-app")
    page.select_option("#q-key", "request_percentage")
    page.fill("#q-value", "-5")
    page.click("#edit-quota button")
    expect(page.locator(".error .code")).not_to_be_empty()
    page.fill("#e-client", "console-app")
    page.click("#effective button")
    expect(page.locator("#effective-table")).to_contain_text("1048576")


def test_record_contents_cannot_inject_markup(page: Page, console: str, bootstrap: str) -> None:
    script = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
    with Producer(bootstrap, linger_ms=0) as p:
        md = p.send(TOPIC, script.encode(), key=b'"\'><b id="injected-key">k</b>',
                    headers=[('<i id="injected-header">h</i>', b"<script>window.__pwned = 3</script>")],
                    partition=0).get(10)
    page.goto(f"{console}/topics/{TOPIC}/messages?partition=0&mode=offset&offset={md.offset}")
    expect(page.locator("#records tbody tr").first).to_contain_text("<script>window.__pwned = 1</script>")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#injected-key, #injected-header, #records img").count() == 0
    # Live tail draws through textContent too.
    page.click("#tail-start")
    expect(page.locator("#tail-status")).to_contain_text("connected")
    with Producer(bootstrap, linger_ms=0) as p:
        p.send(TOPIC, script.encode(), key=b'<b id="injected-tail">k</b>', partition=0).get(10)
    expect(page.locator("#tail tbody")).to_contain_text("window.__pwned = 1", timeout=15_000)
    assert page.evaluate("window.__pwned") is None and page.locator("#injected-tail, #tail img").count() == 0
    page.click("#tail-stop")
    # A topic name with quotes and angle brackets is refused by name, and shown escaped.
    page.goto(f"{console}/topics")
    page.fill("#name", 'bad"<b id="injected-topic">x</b>')
    page.click("#create-topic button[type=submit]")
    expect(page.locator(".error .code")).to_have_text("INVALID_TOPIC_EXCEPTION")
    expect(page.locator(".error")).to_contain_text('<b id="injected-topic">')
    assert page.locator("#injected-topic").count() == 0


def test_large_binary_and_invalid_utf8_values_are_cut_and_escaped(page: Page, console: str, bootstrap: str) -> None:
    big = b"A" * (1024 * 1024 - 200)
    with Producer(bootstrap, linger_ms=0, max_request_size=2 * 1024 * 1024) as p:
        offs = [p.send(TOPIC, v, partition=0).get(10).offset
                for v in (big, bytes(range(256)), b"caf\xc3 \xff\xfe ok")]
    page.goto(f"{console}/topics/{TOPIC}/messages?partition=0&mode=offset&offset={offs[0]}")
    rows = page.locator("#records tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text(f"{len(big)} bytes")
    assert len(rows.nth(0).inner_text()) < 2000  # cut, not a megabyte in the page
    expect(rows.nth(1).locator(".fmt-hex")).to_contain_text("00 01 02 03")
    expect(rows.nth(2).locator(".fmt-hex")).to_have_count(1)  # invalid UTF-8: hex
    rows.nth(0).get_by_role("link", name="expand").click()
    expect(page.locator("#record-value")).to_contain_text("AAAA")
    page.goto(f"{console}/topics/{TOPIC}/record?partition=0&offset={offs[2]}&format=text")
    expect(page.locator("#record-value")).to_contain_text("caf\\xc3 \\xff\\xfe ok")


def test_compaction_lists_a_compacted_log_with_its_dirty_ratio_and_last_cleaning(page: Page, console: str) -> None:
    page.goto(console + "/topics")
    page.fill("#name", "console-compacted")
    page.fill("#configs", "cleanup.policy=compact")
    page.click("#create-topic button[type=submit]")
    page.wait_for_url(f"{console}/topics/console-compacted")
    page.goto(console + "/compaction")
    row = page.locator("tr", has_text="console-compacted-0")
    expect(row.locator("td").nth(5)).to_have_text("never")  # no cleaner in this cluster
    expect(page.locator("th", has_text="Last cleaned")).to_have_count(1)
    (b,) = httpx.get(console + "/api/compaction", timeout=10).json()["brokers"]
    (log,) = [x for x in b["logs"] if x["log"] == "console-compacted-0"]
    assert log["last_cleaned_ms"] is None and 0 <= log["dirty_ratio"] <= 1


def test_transactions_list_a_real_transaction_ongoing_then_committed(page: Page, console: str, bootstrap: str) -> None:
    with Producer(bootstrap, transactional_id=TXN, linger_ms=0) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(TOPIC, b"in-a-transaction", partition=1).get(10)  # left open while the page looks
        page.goto(console + "/transactions")
        page.select_option("#state", "Ongoing")
        page.click("#txn-filter button")
        row = page.locator("#transactions tbody tr", has_text=TXN)
        expect(row.locator("td.state")).to_have_text("Ongoing")
        row.get_by_role("link", name=TXN).click()
        page.wait_for_url(f"{console}/transactions/{TXN}")
        expect(page.locator("#txn-state")).to_have_text("Ongoing")
        expect(page.locator("#txn-partitions tbody tr")).to_have_count(1)
        expect(page.locator("#txn-partitions tbody tr").first).to_contain_text("1")
        expect(page.locator("#txn-partitions").get_by_role("link", name=TOPIC)).to_have_attribute("href", f"/topics/{TOPIC}")
        api = httpx.get(f"{console}/api/transactions/{TXN}", timeout=10).json()["transaction"]
        assert api["state"] == "Ongoing" and api["topic_partitions"] == [f"{TOPIC}-1"]
        assert page.locator("#txn-producer-id").inner_text() == str(api["producer_id"])
        p.commit_transaction()
    page.goto(console + "/transactions")
    state = page.locator("#transactions tbody tr", has_text=TXN).locator("td.state")
    wait_for(lambda: (page.reload(), state.inner_text())[1] == "CompleteCommit", 10, what="CompleteCommit")
    listed = httpx.get(console + "/api/transactions", params={"state": "CompleteCommit"}, timeout=10).json()
    assert TXN in [t["transactional_id"] for t in listed["transactions"]]
    # Find hanging: nothing hangs on the topic; an unknown topic is refused by its Kafka name.
    page.fill("#h-topic", TOPIC)
    page.click("#find-hanging button")
    expect(page.locator("#hanging tbody")).to_contain_text(f"No hanging transaction on {TOPIC}")
    page.fill("#h-topic", "no-such-topic")
    page.click("#find-hanging button")
    expect(page.locator(".error .code")).to_have_text("UNKNOWN_TOPIC_OR_PARTITION")


def test_every_page_passes_axe_without_serious_violations(page: Page, console: str) -> None:
    axe = Axe()  # axe-playwright-python ships axe-core's axe.min.js
    problems: dict[str, Any] = {}
    for path in ("/", "/brokers", "/topics", f"/topics/{TOPIC}", f"/topics/{TOPIC}/messages?partition=0&mode=start",
                 f"/topics/{TOPIC}/record?partition=0&offset=0", "/groups", f"/groups/{GROUP}", "/quotas",
                 "/compaction", f"/transactions?topic={TOPIC}", f"/transactions/{TXN}"):
        page.goto(console + path)
        found = axe.run(page).response["violations"]
        bad = [(v["id"], v["impact"], [(n["target"], n.get("failureSummary")) for n in v["nodes"]][:5]) for v in found if v["impact"] in ("serious", "critical")]
        if bad:
            problems[path] = bad
    assert problems == {}, json.dumps(problems, indent=1)[:3000]


def test_delete_the_empty_group_then_the_topic_with_typed_confirmations(page: Page, console: str) -> None:
    page.goto(f"{console}/groups/{GROUP}")
    page.fill("#g-confirm", "not-it")
    page.click("#delete-group button")
    expect(page.locator(".error .code")).to_have_text("INVALID_REQUEST")
    page.fill("#g-confirm", GROUP)
    page.click("#delete-group button")
    page.wait_for_url(f"{console}/groups?deleted={GROUP}")
    assert GROUP not in [g["group_id"] for g in httpx.get(console + "/api/groups", timeout=10).json()["groups"]]
    page.goto(f"{console}/topics/{TOPIC}")
    page.fill("#confirm", "wrong-name")
    page.click("#delete-topic button")
    expect(page.locator(".error .code")).to_have_text("INVALID_REQUEST")
    page.fill("#confirm", TOPIC)
    page.click("#delete-topic button")
    page.wait_for_url(f"{console}/topics?deleted={TOPIC}")
    expect(page.get_by_role("link", name=TOPIC, exact=True)).to_have_count(0)
    assert TOPIC not in [t["name"] for t in httpx.get(console + "/api/topics", timeout=10).json()["topics"]]
    assert httpx.get(f"{console}/topics/{TOPIC}", timeout=10).status_code == 404


def test_tidelog_status_sees_the_console_healthy(cluster: Cluster) -> None:
    from shared.cli.launcher import cluster_status

    status = cluster_status(cluster.info)
    (console,) = [p for p in status["processes"] if p["role"] == "console"]
    assert console["healthy"]


def test_closed_live_tails_leave_no_thread_behind(cluster: Cluster, console: str) -> None:
    (proc,) = [p for p in cluster.info["processes"] if p["role"] == "console"]
    threads = lambda: len(os.listdir(f"/proc/{proc['pid']}/task"))  # noqa: E731
    before = threads()
    for _ in range(5):  # each tail runs a consumer and a thread while its browser listens
        with httpx.stream("GET", console + "/api/topics/__consumer_offsets/tail", timeout=15) as r:
            for line in r.iter_lines():
                if line.startswith("event: ready"):
                    break
            time.sleep(1)  # then the browser goes away while the console waits for records
    wait_for(lambda: threads() <= before + 2, 15, what=f"the console back to ~{before} threads (now {threads()})")
