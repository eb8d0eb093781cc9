"""The training notebooks run top to bottom (executed in memory; the stored files stay without outputs)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize("name", ["training-walkthrough.ipynb", "controller-design.ipynb"])
def test_notebook_runs(name: str) -> None:
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.parametrize("name", ["training-walkthrough.ipynb", "controller-design.ipynb"])
def test_notebook_is_stored_without_outputs(name: str) -> None:
    doc = json.loads((NOTEBOOKS / name).read_text())
    for c in doc["cells"]:
        if c["cell_type"] == "code":
            assert c["outputs"] == [] and c["execution_count"] is None
