"""The docs site builds with ``mkdocs build --strict`` and renders offline in a real headless Chromium.

The built site is served over real HTTP on loopback; Chromium's proxy is a local recorder that answers
nothing, and loopback requests bypass it, so anything it records would have left the machine (a web
font, a CDN script): the test fails on any, except Chromium's own services.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from browser import dump_dom

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-4000:]
    return out


def test_the_site_builds_strictly(site: Path) -> None:
    for page in ("index.html", "guide/troubleshooting.html", "reference/config-daemon.html",
                 "design/log-cap-law.html", "evaluation/xtc-paper.html", "results/index.html"):
        assert (site / page).is_file(), page
    html = (site / "reference" / "config-daemon.html").read_text()
    assert "control_period_s" in html and "fonts.googleapis.com" not in html


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *a, **k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("page, content", [
    ("index.html", "Guide"),
    ("reference/config-daemon.html", "control_period_s"),
    ("guide/troubleshooting.html", "Troubleshooting"),
])
def test_pages_render_offline_with_the_navigation(served: str, tmp_path: Path, page: str, content: str) -> None:
    dom, left = dump_dom(f"{served}/{page}", tmp_path, virtual_time_ms=5000)
    assert not left, f"requests that would have left the machine: {left}"
    # the navigation, rendered: every top-level section of the nav is a link in the page
    for section in ("Guide", "Reference", "Design", "Evaluation", "Results"):
        assert re.search(r'class="md-nav__(?:link|item)[^"]*"[^>]*>\s*(?:<[^>]+>\s*)*' + section + r"\s*<", dom), section
    assert content in dom
    # the theme's script ran (Material marks the search as ready by giving it a form)
    assert 'data-md-component="search' in dom


def _mini_site(tmp: Path, page: str) -> subprocess.CompletedProcess[str]:
    """A repository of one source file and a site of one page, built strictly with the project's hook."""
    src = tmp / "xtc" / "daemon" / "config.py"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("# a source file\n")
    docs = tmp / "docs"
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir()
    (docs / "index.md").write_text(page)
    (tmp / "mkdocs.yml").write_text(
        f"site_name: t\ndocs_dir: docs\nsite_dir: site\nstrict: true\nuse_directory_urls: false\n"
        f"hooks:\n  - {ROOT / 'scripts' / 'mkdocs_hooks.py'}\n")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=tmp, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_a_link_to_a_source_file_becomes_its_path_and_a_broken_one_fails(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    ok = _mini_site(tmp_path, "See [the daemon's config](../xtc/daemon/config.py).\n")
    assert ok.returncode == 0, ok.stderr[-2000:]
    html = (tmp_path / "site" / "index.html").read_text()
    assert "<code>xtc/daemon/config.py</code>" in html and 'href="../xtc' not in html
    bad = _mini_site(tmp_path, "See [nothing](../xtc/daemon/no-such-file.py).\n")
    assert bad.returncode != 0 and "no-such-file.py" in bad.stderr
