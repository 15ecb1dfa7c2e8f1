"""The web console on a secure cluster (issue 23 meets issue 25): HTTPS with its own certificate, a sign-in
(HTTP Basic) with a cluster user, and everything done as that user, so the cluster's ACLs apply in the
console as to the user's own clients.

One secure cluster for the module (real etcd with TLS, a controller, a broker) and one console process
started as the launcher starts it on a secure cluster (its service certificate and
``TIDELOG_SECURITY_PROTOCOL=SSL``; the REST API over HTTPS; the brokers' client ports). The admin
(cluster.json's ``security``) and a user ``mallory`` without any ACL use it with httpx (verifying the
console with the cluster's CA) and, at the end, with a real browser. The tests build on each other."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, Cluster, kill_cluster, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

TOPIC = "sec-orders"
MALLORY = ("mallory", "mallory-secret-1")
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("secure-console")), secure=True, controllers=1, brokers=1,
                      coordinators=0, cleaners=0, quotas=0,
                      extra_env={"TIDELOG_CONSOLE_METRICS_INTERVAL_MS": "500"})
    yield c
    kill_cluster(c)


@pytest.fixture(scope="module")
def console(cluster: Cluster) -> Iterator[str]:
    """The console's HTTPS URL: started by the launcher when it does so on a secure cluster, else here, as
    the launcher would (the console's service certificate, the REST API's HTTPS URL, the brokers' client
    ports)."""
    if cluster.info.get("console"):
        yield cluster.info["console"]
        return
    lc = cluster.lc
    ready = os.path.join(lc.run_dir, "console-1.json")
    argv = [sys.executable, "-m", "services.console", "--id", "1", "--port", "0", "--http-port", "0",
            "--rest", ",".join(cluster.info["rest_urls"]),
            "--bootstrap-servers", ",".join(p.info.get("client_address") or p.address for p in cluster.procs("broker")),
            "--ready-file", ready]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TIDELOG_CONSOLE_METRICS_INTERVAL_MS": "500",
           **lc.security_env("console", 1)}
    log_path = os.path.join(lc.log_dir, "console-1.log")
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT)
    try:
        def url() -> str | None:
            assert proc.poll() is None, open(log_path).read()[-3000:]
            try:
                with open(ready) as f:
                    return json.load(f)["url"]
            except (FileNotFoundError, ValueError):
                return None

        yield wait_for(url, 30, what="the console ready")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sec(cluster: Cluster) -> dict[str, Any]:
    return cluster.info["security"]


def admin_auth(cluster: Cluster) -> tuple[str, str]:
    s = sec(cluster)
    return s["admin_user"], open(s["admin_password_file"]).read().strip()


def http(cluster: Cluster, auth: tuple[str, str] | None = None) -> httpx.Client:
    """A client that trusts only the cluster's CA (the console and the REST API are verified with it)."""
    return httpx.Client(verify=ssl.create_default_context(cafile=sec(cluster)["ca"]), auth=auth, timeout=30,
                        follow_redirects=False)


def rest(cluster: Cluster, auth: tuple[str, str]) -> httpx.Client:
    return httpx.Client(base_url=cluster.info["rest"], verify=ssl.create_default_context(cafile=sec(cluster)["ca"]),
                        auth=auth, timeout=30)


def test_https_and_a_sign_in_before_anything(cluster: Cluster, console: str) -> None:
    assert console.startswith("https://127.0.0.1:")
    with http(cluster) as c:
        for path in ("/", "/topics", "/acls", "/api/overview"):
            r = c.get(console + path)
            assert r.status_code == 401, path
            assert r.headers["www-authenticate"].startswith("Basic ")
            assert "SASL_AUTHENTICATION_FAILED" in r.text
        assert c.get(console + "/static/console.css").status_code == 200  # public assets: no sign-in
        assert c.get(console + "/healthz").status_code == 200
    with http(cluster, (admin_auth(cluster)[0], "not-the-password")) as c:
        r = c.get(console + "/")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")
    with pytest.raises(httpx.ConnectError):  # a client that does not trust the cluster's CA refuses it
        httpx.get(console + "/healthz", timeout=10)


def test_the_admin_sees_the_cluster_and_works_as_itself(cluster: Cluster, console: str) -> None:
    with http(cluster, admin_auth(cluster)) as c:
        r = c.get(console + "/")
        assert r.status_code == 200, r.text[:2000]
        assert "Signed in as admin" in r.text
        r = c.post(console + "/topics", data={"name": TOPIC, "partitions": "1", "replication_factor": "1",
                                               "configs": ""})
        assert r.status_code == 303, r.text[:2000]
        r = c.post(console + f"/topics/{TOPIC}/produce", data={"key": "k1", "value": "hello-secure", "headers": "",
                                                               "partition": ""})
        assert r.status_code == 303, r.text[:2000]
        r = c.get(console + f"/api/topics/{TOPIC}/messages", params={"mode": "start"})
        assert r.status_code == 200, r.text[:2000]
        assert [rec["value"] for rec in r.json()["records"]] == ["hello-secure"]
        # the live tail: a consumer of the admin's own (SASL_SSL) receives a record produced after it started
        with c.stream("GET", console + f"/api/topics/{TOPIC}/tail") as events:
            assert events.status_code == 200
            lines = events.iter_lines()
            assert next(line for line in lines if line.startswith("event:")) == "event: ready"
            r = c.post(console + f"/topics/{TOPIC}/produce", data={"key": "", "value": "tailed-secure",
                                                                   "headers": "", "partition": ""})
            assert r.status_code == 303
            assert any("tailed-secure" in line for line in lines if line.startswith("data:"))
        # a form posted from another origin does not ride on the browser's credential
        r = c.post(console + "/acls", headers={"origin": "https://evil.example"},
                   data={"principal": "User:*", "operation": "ALL", "resource_type": "TOPIC", "resource_name": "*"})
        assert r.status_code == 403 and r.json()["error"] == "CLUSTER_AUTHORIZATION_FAILED"
        users = c.get(console + "/users")
        assert users.status_code == 200 and ">admin<" in users.text and "SCRAM-SHA-512" in users.text
        assert c.get(console + "/acls").status_code == 200
    with rest(cluster, admin_auth(cluster)) as api:  # mallory: a user without any ACL
        r = api.post("/v1/users", json={"name": MALLORY[0], "password": MALLORY[1], "mechanism": "SCRAM-SHA-256"})
        assert r.status_code == 201, r.text


def test_a_user_without_acls_is_refused_by_kafka_name(cluster: Cluster, console: str) -> None:
    with http(cluster, MALLORY) as c:
        r = c.get(console + "/topics")
        assert r.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in r.text
        assert "Signed in as mallory" in r.text
        r = c.get(console + "/api/topics")
        assert r.status_code == 403 and r.json()["error"] == "TOPIC_AUTHORIZATION_FAILED"
        r = c.get(console + "/")
        assert r.status_code == 403 and "_AUTHORIZATION_FAILED" in r.text and TOPIC not in r.text
        r = c.get(console + f"/topics/{TOPIC}/messages")
        assert r.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in r.text and "hello-secure" not in r.text
        r = c.get(console + "/acls")  # the list refused, the form still there
        assert r.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in r.text and 'id="add-acl"' in r.text
        r = c.post(console + "/acls", data={"principal": "User:mallory", "permission_type": "ALLOW",
                                             "operation": "ALL", "resource_type": "TOPIC", "resource_name": "*",
                                             "pattern_type": "LITERAL", "host": "*"})
        assert r.status_code == 403 and "CLUSTER_AUTHORIZATION_FAILED" in r.text
        assert c.get(console + "/users").status_code == 403
    with rest(cluster, admin_auth(cluster)) as api:
        assert api.get("/v1/acls", params={"principal": "User:mallory"}).json()["acls"] == []


def test_the_admin_adds_an_acl_in_the_console_and_it_applies_to_the_user_over_grpc(cluster: Cluster,
                                                                                  console: str) -> None:
    with http(cluster, admin_auth(cluster)) as c:
        r = c.post(console + "/acls", data={"principal": "mallory", "permission_type": "ALLOW",
                                             "operation": "DESCRIBE", "resource_type": "TOPIC",
                                             "resource_name": TOPIC, "pattern_type": "LITERAL", "host": "*"})
        assert r.status_code == 303, r.text[:2000]
        listed = c.get(console + "/acls", params={"principal": "User:mallory"})
        assert listed.status_code == 200 and "ACL" in listed.text and f"<td>{TOPIC}</td>" in listed.text
    binding = {"resource_type": "TOPIC", "resource_name": TOPIC, "pattern_type": "LITERAL",
               "principal": "User:mallory", "host": "*", "operation": "DESCRIBE", "permission_type": "ALLOW"}
    with rest(cluster, admin_auth(cluster)) as api:
        assert api.get("/v1/acls", params={"principal": "User:mallory"}).json()["acls"] == [binding]

    def describable() -> bool:  # every process follows ACLs by watch (within a second)
        with http(cluster, MALLORY) as c:
            return c.get(console + "/api/topics").status_code == 200
    wait_for(describable, 10, what="mallory's DESCRIBE in force")
    with http(cluster, MALLORY) as c:
        assert [t["name"] for t in c.get(console + "/api/topics").json()["topics"]] == [TOPIC]
        # DESCRIBE lets the console (as mallory, over gRPC) list the offsets; reading the records needs READ
        r = c.get(console + f"/api/topics/{TOPIC}/messages", params={"mode": "start"})
        assert r.status_code == 403 and r.json()["error"] == "TOPIC_AUTHORIZATION_FAILED", r.text
        page = c.get(console + f"/topics/{TOPIC}/messages")
        assert page.status_code == 403 and "TOPIC_AUTHORIZATION_FAILED" in page.text and "hello-secure" not in page.text
    # the admin removes it from the ACL page
    with http(cluster, admin_auth(cluster)) as c:
        r = c.post(console + "/acls/remove", data=binding)
        assert r.status_code == 303 and "removed" in r.headers["location"]
    with rest(cluster, admin_auth(cluster)) as api:
        assert api.get("/v1/acls", params={"principal": "User:mallory"}).json()["acls"] == []


def test_a_changed_password_ends_the_session(cluster: Cluster, console: str) -> None:
    with http(cluster, MALLORY) as c:
        assert c.get(console + "/acls").status_code == 403  # signed in (refused by ACL, not by password)
    with rest(cluster, admin_auth(cluster)) as api:
        r = api.post("/v1/users", json={"name": MALLORY[0], "password": "new-secret-2", "mechanism": "SCRAM-SHA-256"})
        assert r.status_code == 200, r.text
    with http(cluster, MALLORY) as c:
        r = c.get(console + "/acls")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")
    with http(cluster, (MALLORY[0], "new-secret-2")) as c:
        assert c.get(console + "/acls").status_code == 403


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_browser_signs_in_and_adds_an_acl(cluster: Cluster, console: str) -> None:
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import expect, sync_playwright

    user, password = admin_auth(cluster)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            anonymous = browser.new_context(ignore_https_errors=True)  # (chromium would show its prompt)
            refused = anonymous.request.get(console + "/acls")
            assert refused.status == 401 and refused.headers["www-authenticate"].startswith("Basic ")
            anonymous.close()
            ctx = browser.new_context(ignore_https_errors=True,
                                      http_credentials={"username": user, "password": password})
            page = ctx.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            response = page.goto(console + "/acls")
            assert response is not None and response.status == 200
            expect(page.locator("#signed-in")).to_have_text("Signed in as admin")
            page.fill("#a-principal", "User:browser-user")
            page.select_option("#a-operation", "READ")
            page.select_option("#a-type", "GROUP")
            page.fill("#a-name", "browser-")
            page.select_option("#a-pattern", "PREFIXED")
            page.click("#add-acl button[type=submit]")
            expect(page.locator("[role=status]")).to_contain_text("ACL added")
            row = page.locator("#acl-list tr", has_text="User:browser-user")
            expect(row).to_contain_text("PREFIXED")
            row.get_by_role("button", name="Remove").click()
            expect(page.locator("[role=status]")).to_contain_text("ACL removed")
            expect(page.locator("#acl-list")).not_to_contain_text("User:browser-user")
            page.goto(console + "/users")
            expect(page.locator("#users")).to_contain_text("SCRAM-SHA-512")
            axe = Axe()
            for path in ("/acls", "/users"):
                page.goto(console + path)
                found = axe.run(page).response["violations"]
                bad = [(v["id"], [n["target"] for n in v["nodes"]][:3]) for v in found if v["impact"] in ("serious", "critical")]
                assert bad == [], (path, bad)
            assert errors == []
            ctx.close()
        finally:
            browser.close()


# -- the pieces without a cluster ----------------------------------------------------------------------------

def test_basic_header_parsing_and_sessions_bounded_and_expiring() -> None:
    import base64

    from services.console.auth import Sessions, parse_basic

    def basic(text: str) -> str:
        return "Basic " + base64.b64encode(text.encode()).decode()

    assert parse_basic(basic("alice:pa:ss")) == ("alice", "pa:ss")
    for bad in (None, "", "Bearer x", "Basic !!!", basic("alice"), basic(":pw"), basic("alice:"), "Basic " + "A" * 5000):
        assert parse_basic(bad) is None, bad

    class Fake:  # a UserSession's surface the cache uses
        def __init__(self, at: float) -> None:
            self.created = self.used = at
            self.closed = False
            self.rest = type("R", (), {"revoked": False})()

        def close(self) -> None:
            self.closed = True

    s = Sessions(max_sessions=2, idle_s=10, max_age_s=100)
    k1, k2, k3 = s.key("a", "pw"), s.key("b", "pw"), s.key("c", "pw")
    assert s.key("a", "pw") == k1 and s.key("a", "other") != k1  # a wrong password never finds the session
    f1, f2, f3 = Fake(0), Fake(0), Fake(0)
    s.put(k1, f1, 0)  # type: ignore[arg-type]
    s.put(k2, f2, 0)  # type: ignore[arg-type]
    assert s.get(k1, 5) is f1
    s.put(k3, f3, 5)  # type: ignore[arg-type]  # over the bound: the least recently used (b) goes
    assert len(s) == 2 and s.get(k2, 5) is None and f2.rest.revoked
    assert s.get(k1, 14) is f1 and s.get(k3, 16) is None and f3.rest.revoked  # idle over 10 s
    f1.used = 99
    assert s.get(k1, 101) is None  # older than max_age_s, however used


def test_acl_form_to_binding_and_exact_filter() -> None:
    from services.console.acls import binding_from_form, exact_filter, list_filter

    b = binding_from_form({"principal": "alice", "operation": "read", "resource_type": "topic",
                           "resource_name": " orders ", "pattern_type": "", "host": "", "permission_type": ""})
    assert b == {"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
                 "principal": "User:alice", "host": "*", "operation": "READ", "permission_type": "ALLOW"}
    assert binding_from_form({"principal": "User:*", "operation": "ALTER", "resource_type": "CLUSTER"})[
        "resource_name"] == "kafka-cluster"
    assert exact_filter(b) == {"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
                               "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}
    assert list_filter({"principal": "bob", "resource_type": "any"}) == {"principal": "User:bob"}
    for bad in ({"principal": "", "operation": "READ", "resource_type": "TOPIC", "resource_name": "t"},
                {"principal": "a", "operation": "FLY", "resource_type": "TOPIC", "resource_name": "t"},
                {"principal": "a", "operation": "READ", "resource_type": "TOPIC", "resource_name": ""}):
        with pytest.raises(ValueError):
            binding_from_form(bad)
