"""Repair the relative links that the move of the dated logs to docs/results/ broke.

    python scripts/fix_moved_doc_links.py [DOCS_DIR]     # default: docs/ of this checkout
    python scripts/fix_moved_doc_links.py --mentions FILE_OR_DIR...   # code comments, configs

For the merge of branches written before the move: a page that came to docs/results/ with links
written for its old place, or a page that still links to an old path.  Only a link whose target does
not exist is touched, and only when the old location it was written for maps to a file that exists
now; anything else is left for ``mkdocs build --strict`` to report.  Prints each page it changes.

``--mentions`` rewrites the plain mentions of a moved path (``docs/xco.md``, ``docs/lab/x.md``) in
the files given (``*.py``, ``*.toml``, ``*.service``, ``*.md`` under a directory), e.g. the code's
comments that point a reader at a log.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

#: Where each moved file or directory went (paths relative to docs/).
MOVES = {
    "policer.md": "results/2026-11-26-policer/policer.md",
    "xco.md": "results/2026-11-26-xco/xco.md",
    "xco-testbed.md": "results/2026-11-26-xco-testbed/xco-testbed.md",
    "control-settling.md": "results/2026-11-26-control-settling/control-settling.md",
    "bench-daemon.md": "results/2026-11-26-bench-daemon/bench-daemon.md",
    "code-shape.md": "results/2026-11-24-code-shape/code-shape.md",
    "lab.md": "results/2026-11-26-lab/README.md",
    "lab": "results/2026-11-26-lab",
    "results/bench-control": "results/2026-11-25-bench-control",
    "results/fine-band-descent": "results/2026-11-23-fine-band-descent",
    "results/lag-variants": "results/2026-11-23-lag-variants",
    "results/simulate-fixedcap": "results/2026-11-22-simulate-fixedcap",
    "results/simulate-sixvr": "results/2026-11-22-simulate-sixvr",
    "results/simulate-sweep": "results/2026-11-22-simulate-sweep",
    "results/simulate-tcpudp": "results/2026-11-22-simulate-tcpudp",
    "results/xco-simulate": "results/2026-11-25-xco-simulate",
}

_LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?\))")


def moved(path: str) -> str:
    """The new path of an old one (relative to docs/; may climb out of it with ``../``)."""
    for old in sorted(MOVES, key=len, reverse=True):
        if path == old:
            return MOVES[old]
        if path.startswith(old + "/"):
            return MOVES[old] + path[len(old):]
    return path


def old_place(page: str) -> str:
    """Where a page now at ``page`` was before the move."""
    for old, new in sorted(MOVES.items(), key=lambda kv: len(kv[1]), reverse=True):
        if page == new:
            return old
        if page.startswith(new + "/"):
            return old + page[len(new):]
    return page


def fix_page(docs: Path, page: str, text: str) -> str:
    here = posixpath.dirname(page)

    def fix(m: re.Match[str]) -> str:
        target = m.group(2)
        if "://" in target or target.startswith(("mailto:", "/")):
            return m.group(0)
        if (docs / here / target).exists():
            return m.group(0)
        for base_page in (page, old_place(page)):
            old_target = posixpath.normpath(posixpath.join(posixpath.dirname(base_page), target))
            new_target = moved(old_target)
            if (docs / new_target).exists():
                rel = posixpath.relpath(new_target, here or ".")
                return m.group(1) + rel + (("/" if target.endswith("/") and not rel.endswith("/") else "")) + m.group(3)
        return m.group(0)

    return _LINK.sub(fix, text)


_MENTION = re.compile(r"(?<![\w/.-])docs/(" + "|".join(re.escape(k) for k in sorted(MOVES, key=len, reverse=True))
                      + r")(?=[/\s\"'`),:;.]|$)")


def fix_mentions(text: str) -> str:
    return _MENTION.sub(lambda m: "docs/" + MOVES[m.group(1)], text)


def _mentions(paths: list[str]) -> int:
    for arg in paths:
        p = Path(arg)
        files = [p] if p.is_file() else [f for f in sorted(p.rglob("*"))
                                         if f.suffix in (".py", ".toml", ".service", ".md") and f.is_file()]
        for f in files:
            text = f.read_text()
            new = fix_mentions(text)
            if new != text:
                f.write_text(new)
                print(f"fixed mentions in {f}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--mentions"]:
        return _mentions(argv[1:])
    docs = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "docs"
    for path in sorted(docs.rglob("*.md")):
        page = path.relative_to(docs).as_posix()
        text = path.read_text()
        new = fix_page(docs, page, text)
        if new != text:
            path.write_text(new)
            print(f"fixed links in docs/{page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
