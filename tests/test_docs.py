"""The documentation site builds with `mkdocs build --strict` (every link and anchor resolves, every page is in the
navigation), says what the code says (the command-line reference and the API are made from the parser and the
docstrings at build time), fetches nothing from the network, and opens in a browser from its files alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.browser import OfflinePage, headless_chromium

ROOT = Path(__file__).resolve().parents[1]
for package in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
    pytest.importorskip(package, reason=f"{package} is not installed: the docs extra (pip install '.[docs]', part of '.[test]')")

sys.path.insert(0, str(ROOT / "docs"))
from site_pages import subcommands  # noqa: E402

# Elements whose URL a browser loads by itself when it shows the page (a link the reader clicks is not one).
LOADING = {"script": "src", "link": "href", "img": "src", "iframe": "src", "source": "src", "video": "src", "audio": "src",
           "embed": "src", "object": "data"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return out


class LoadedURLs(HTMLParser):
    """The URLs an HTML page makes the browser load: scripts, styles, fonts, images, frames."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        attribute = LOADING.get(tag)
        self.urls += [value for name, value in attrs if name == attribute and value]


def test_the_cli_reference_has_every_command_with_its_help(site):
    from lincorr.cli import build_parser

    page = (site / "cli.html").read_text(encoding="utf-8")
    commands = subcommands(build_parser())
    assert len(commands) > 25  # the top-level commands and the groups' subcommands (cache, extractive)
    for prog, parser in commands:
        assert f"<code>{prog}</code>" in page, prog
        assert _text(parser.description or "") in _text(page), prog


def test_the_api_page_documents_every_exported_name(site):
    import lincorr

    page = (site / "api.html").read_text(encoding="utf-8")
    for name in lincorr.__all__:
        assert re.search(rf'id="[\w.]*\b{re.escape(name)}"', page), name
    first_line = lincorr.LinearMap.__doc__.strip().splitlines()[0]
    assert _text(first_line) in _text(page)


def test_the_site_loads_nothing_from_the_network(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 15
    for path in pages:
        parser = LoadedURLs()
        parser.feed(path.read_text(encoding="utf-8"))
        assert not [url for url in parser.urls if re.match(r"(https?:)?//", url)], path
    for path in sorted(site.rglob("*.css")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(@import|url\()\s*['\"]?(https?:)?//", text), path
    everything = "".join(path.read_text(encoding="utf-8", errors="replace") for path in [*pages, *site.rglob("*.css")])
    assert "fonts.googleapis" not in everything and "fonts.gstatic" not in everything


@pytest.mark.browser
def test_the_index_and_an_api_page_open_offline_in_a_browser(site, tmp_path):
    with headless_chromium() as browser:
        index = OfflinePage(browser, site / "index.html")
        assert index.page.title().startswith("lincorr")
        assert index.page.locator("nav").get_by_text("Python API").count() > 0
        index.page.screenshot(path=tmp_path / "index.png")
        api = OfflinePage(browser, site / "api.html")
        entry = api.page.locator("[id='lincorr.linear.LinearMap']")
        assert entry.is_visible()
        api.page.screenshot(path=tmp_path / "api.png")
        for opened in (index, api):
            assert opened.requests == [] and opened.errors == []


def _text(html: str) -> str:
    """Words only: tags, entities and line breaks dropped, so help text matches however it was wrapped and escaped."""
    import html as entities

    return " ".join(entities.unescape(re.sub(r"<[^>]+>", " ", html)).split())
