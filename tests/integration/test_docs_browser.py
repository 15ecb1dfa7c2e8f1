"""The REST API's /docs (Swagger UI) and /redoc work offline: a real headless browser (Debian's chromium,
driven by Playwright) renders them from assets the controller's app serves itself, and nothing the pages
ask for leaves the server (ReDoc's footer logo, hard-coded to a CDN, is blocked by the page's CSP).

A component test: the controller's FastAPI app in-process (uvicorn on 127.0.0.1, port 0); the pages and
the OpenAPI document need no cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, Page, sync_playwright

from services.controller.rest.app import create_app

CHROMIUM = "/usr/bin/chromium"  # Debian's package, installed by scripts/setup.sh


@pytest.fixture(scope="module")
def rest() -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(create_app(controller=None), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the REST app did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


def _open(browser: Browser, url: str, selector: str) -> tuple[Page, list[str], list[tuple[str, Any]]]:
    """Open ``url``, wait for ``selector``; the URLs that got a response, and the requests that failed."""
    page = browser.new_page()
    answered: list[str] = []
    failed: list[tuple[str, Any]] = []
    page.on("response", lambda r: answered.append(r.url))
    page.on("requestfailed", lambda r: failed.append((r.url, r.failure)))
    page.goto(url, wait_until="load", timeout=30_000)
    page.wait_for_selector(selector, timeout=30_000)
    return page, answered, failed


def _origin(url: str) -> str:
    parts = urlsplit(url.removeprefix("blob:"))
    return f"{parts.scheme}://{parts.netloc}"


def test_swagger_ui_lists_every_route_from_local_assets(rest: str, browser: Browser) -> None:
    spec = httpx.get(f"{rest}/openapi.json", timeout=10).json()
    expected = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    page, answered, failed = _open(browser, f"{rest}/docs", ".opblock")
    shown = set()
    for block in page.query_selector_all(".opblock"):
        method = block.query_selector(".opblock-summary-method").inner_text().strip()
        path = block.query_selector(".opblock-summary-path").get_attribute("data-path")
        shown.add((method, path))
    assert shown == expected
    assert {"/v1/topics", "/v1/topics/{name}", "/v1/cluster"} <= {p for _, p in shown}
    assert f"{rest}/static-offline-docs/swagger-ui-bundle.js" in answered
    assert {_origin(u) for u in answered} == {rest} and failed == []


def test_redoc_renders_from_local_assets_and_reaches_nothing_else(rest: str, browser: Browser) -> None:
    page, answered, failed = _open(browser, f"{rest}/redoc", "h1")
    assert "Tidelog admin API" in page.inner_text("h1")
    assert "/v1/topics" in page.content()
    assert {_origin(u) for u in answered} == {rest}
    assert all(failure == "csp" for _, failure in failed), failed  # blocked in the browser, never sent
