"""Headless Chromium for the tests that look at a page: Debian's `chromium` package driven by Playwright (never
`playwright install`). Where no browser can be had, the tests that need one skip with that message.
"""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"]


@contextmanager
def headless_chromium():
    """A launched Chromium, closed on the way out; skips the test when Playwright or Chromium is missing."""
    playwright = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed (pip install '.[test]')")
    if not Path(CHROMIUM).is_file():
        pytest.skip("no Chromium to test pages in: install Debian's chromium (apt-get install -y chromium); make test does")
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_FLAGS)
        yield chromium
        chromium.close()


class OfflinePage:
    """A local file open in a fresh page that refuses (and records) every request that is not a file, and records errors."""

    def __init__(self, browser, path: Path):
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.context.route(re.compile(r"^(?!file:).*"), self.refuse)
        self.page = self.context.new_page()
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")

    def refuse(self, route):
        self.requests.append(route.request.url)
        route.abort()
