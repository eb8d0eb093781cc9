"""/docs and /redoc render offline: a real headless Chromium against a real ``xtc policer serve``.

Every asset must come from the policer itself: the test fails on any request the page would have
sent off the machine (tests/browser.py records them).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Iterator

import pytest

from browser import dump_dom
from procs import stop_process
from xtc_lab.policer_bench import start_policer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_policer(tmp_path_factory.mktemp("docs"), secrets.token_urlsafe(24))
    try:
        yield url
    finally:
        stop_process(proc)


def _operation_ids() -> list[str]:
    doc = json.loads((ROOT / "docs" / "policer-openapi.json").read_text())
    return [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]


def test_swagger_ui_renders_every_operation_offline(served: str, tmp_path: Path) -> None:
    dom, left = dump_dom(served + "/docs", tmp_path)
    assert left == [], f"requests left localhost: {left}"
    ids = _operation_ids()
    assert len(ids) >= 20
    # Swagger UI renders each operation as a block with id "operations-<tag>-<operationId>".
    missing = [i for i in ids if f"-{i}\"" not in dom]
    assert missing == [], f"operations not rendered by Swagger UI: {missing}; DOM starts {dom[:500]!r}"


def test_redoc_renders_the_operations_offline(served: str, tmp_path: Path) -> None:
    dom, left = dump_dom(served + "/redoc", tmp_path)
    assert left == [], f"requests left localhost: {left}"
    # ReDoc anchors each operation at "operation/<operationId>".
    missing = [i for i in _operation_ids() if f"operation/{i}" not in dom]
    assert missing == [], f"operations not rendered by ReDoc: {missing}; DOM starts {dom[:500]!r}"
