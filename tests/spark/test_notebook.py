"""The quick-start notebook runs top to bottom (executed by nbclient in a fresh kernel)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from spark_conf import QUICK_JVM_OPTIONS

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_executes(spark_environment, tmp_path, monkeypatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # The kernel inherits this: its session's JVM starts with the test JVMs' options (spark_conf.py),
    # which the notebook, written for users, does not name.
    option = shlex.quote(f"spark.driver.extraJavaOptions={QUICK_JVM_OPTIONS}")
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", f"--conf {option} pyspark-shell")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=540, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    assert "validation accuracy after 8 epochs" in outputs
    assert "reloaded model predicts identically" in outputs
    # The fit's cell: timed phase lines and one line per epoch as plain text, the bar as a widget
    # (ipywidgets is installed), no tqdm fallback warning and no carriage-return redraws.
    (fit_cell,) = [cell for cell in notebook.cells if "estimator.fit(" in cell.source]
    texts = [o.get("text", "") for o in fit_cell.outputs if o.get("output_type") == "stream"]
    fit_text = "".join(texts)
    assert "spark-hvd: 2 ranks launched (" in fit_text, fit_text
    assert [f"epoch {e}/8:" in fit_text for e in range(1, 9)] == [True] * 8, fit_text
    assert "\r" not in fit_text and "IProgress" not in fit_text and "TqdmWarning" not in fit_text, fit_text
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in fit_cell.outputs)
    images = [o for cell in notebook.cells for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the loss/accuracy plot was not drawn"
