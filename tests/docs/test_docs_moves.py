"""scripts/fix_moved_doc_links.py: links written for a page's old place, or to a moved page, repaired."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fix_moved_doc_links", ROOT / "scripts" / "fix_moved_doc_links.py")
fix = importlib.util.module_from_spec(_spec)
sys.modules["fix_moved_doc_links"] = fix
_spec.loader.exec_module(fix)


def _touch(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_links_of_a_moved_page_and_to_a_moved_page_are_repaired(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    _touch(tmp_path / "packaging" / "grafana" / "xtc.json")
    _touch(docs / "guide" / "monitoring.md")
    _touch(docs / "results" / "2026-11-26-lab" / "tracking.md")
    moved = docs / "results" / "2026-11-26-policer" / "policer.md"
    _touch(moved, "[m](guide/monitoring.md) [g](../packaging/grafana/xtc.json) [t](lab/tracking.md#a) "
                  "[gone](nowhere.md) [web](https://example.org/x.md)\n")
    _touch(docs / "guide" / "other.md", "[p](../policer.md) [ok](monitoring.md)\n")
    assert fix.main([str(docs)]) == 0
    assert moved.read_text() == ("[m](../../guide/monitoring.md) [g](../../../packaging/grafana/xtc.json) "
                                 "[t](../2026-11-26-lab/tracking.md#a) [gone](nowhere.md) "
                                 "[web](https://example.org/x.md)\n")
    assert (docs / "guide" / "other.md").read_text() == \
        "[p](../results/2026-11-26-policer/policer.md) [ok](monitoring.md)\n"
    # run again: nothing left to change
    before = moved.read_text()
    fix.main([str(docs)])
    assert moved.read_text() == before


def test_mentions_of_moved_paths_in_code_are_rewritten() -> None:
    text = ('# see docs/results/2026-11-26-xco/xco.md, "Agent"; docs/results/2026-11-26-lab/multihop.md; (docs/results/2026-11-26-control-settling/control-settling.md) '
            'docs/policer-openapi.json docs/results/xco/fig22.md docs/results/2026-11-26-lab/README.md. docs/results/2026-11-26-xco/xco.md.\n')
    assert fix.fix_mentions(text) == (
        '# see docs/results/2026-11-26-xco/xco.md, "Agent"; docs/results/2026-11-26-lab/multihop.md; '
        '(docs/results/2026-11-26-control-settling/control-settling.md) docs/policer-openapi.json '
        'docs/results/xco/fig22.md docs/results/2026-11-26-lab/README.md. '
        'docs/results/2026-11-26-xco/xco.md.\n')
