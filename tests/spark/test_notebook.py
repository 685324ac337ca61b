"""The quick-start notebook runs top to bottom (executed by nbclient in a fresh kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_executes(spark_environment, tmp_path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=540, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert "validation accuracy after 8 epochs" in outputs
    assert "reloaded model predicts identically" in outputs
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the loss/accuracy plot was not drawn"
