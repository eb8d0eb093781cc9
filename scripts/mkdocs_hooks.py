"""MkDocs hooks for the XTC site (``hooks:`` in mkdocs.yml).

A page may link to a file of the repository outside ``docs/`` (``../xtc/daemon/config.py``); the
site has no such page, so the link becomes the file's repository path in code type, and only if
the file exists: a link to a file that does not exist stays a link, and ``mkdocs build --strict``
fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

_LINK = re.compile(r"\[([^\]\n]*)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    here = posixpath.dirname(page.file.src_uri)

    def fix(m: re.Match[str]) -> str:
        label, target = m.group(1), m.group(2)
        if "://" in target or target.startswith(("mailto:", "/")):
            return m.group(0)
        inside = posixpath.normpath(posixpath.join(here, target))
        if not inside.startswith("../"):
            return m.group(0)
        repo_path = posixpath.normpath(posixpath.join("docs", inside))
        if repo_path.startswith("../") or not (root / repo_path).exists():
            return m.group(0)
        return f"`{repo_path}`" if label.strip("`") == repo_path else f"{label} (`{repo_path}`)"

    return _LINK.sub(fix, markdown)
