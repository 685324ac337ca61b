"""What a user sees during a fit: in a real terminal (tmux, 80 columns, Spark's console progress on) and in
a notebook without ipywidgets (plain lines, no bar, no warning)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).resolve().parent / "terminal" / "fit_in_terminal.py"


def run_in_tmux(command: list[str], columns: int, timeout_s: float) -> str:
    """Runs ``command`` in a detached tmux pane of ``columns`` columns; returns the screen and its scrollback,
    wrapped lines joined (-J)."""
    if shutil.which("tmux") is None:
        pytest.fail("the terminal test needs tmux (apt-get install tmux; .ci/run installs it)")
    socket, channel = f"shvd-{uuid.uuid4().hex[:8]}", f"done-{uuid.uuid4().hex[:8]}"
    shell = " ".join(f"'{part}'" for part in command) + f"; tmux -L {socket} wait-for -S {channel}"
    tmux = ["tmux", "-L", socket]
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "fit", "-x", str(columns), "-y", "50", shell, ";",
                        "set-option", "-t", "fit", "remain-on-exit", "on", ";",
                        "set-option", "-t", "fit", "history-limit", "5000"], check=True, timeout=30)
        subprocess.run([*tmux, "wait-for", channel], check=True, timeout=timeout_s)
        return subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", "fit"], check=True, timeout=30,
                              capture_output=True, text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], timeout=30, capture_output=True)


def test_a_terminal_shows_phases_a_readable_bar_and_epoch_lines(spark_environment, tmp_path) -> None:
    screen = run_in_tmux([sys.executable, str(SCRIPT), str(tmp_path / "store")], columns=80, timeout_s=480)
    lines = [line.rstrip() for line in screen.splitlines()]
    assert "FIT RETURNED" in lines, screen
    ours = [line for line in lines if line.startswith(("spark-hvd: ", "epoch "))]
    # Spark's [Stage N:>...] bar never shares a line with ours.
    assert not [line for line in ours if "[Stage" in line], screen
    timed = re.compile(r"\(\d+\.\d s\)$")
    for phase in ("spark-hvd: input checked: features, label", "spark-hvd: materialised 9",
                  "spark-hvd: 2 ranks launched"):
        assert any(line.startswith(phase) and timed.search(line) for line in ours), (phase, screen)
    for epoch in (1, 2, 3):
        assert any(re.match(rf"epoch {epoch}/3: loss=[\d.e-]+, accuracy=.*val_loss=.*\(\d+\.\d s\)$", line)
                   for line in ours), (epoch, screen)
    # Under each epoch's line, where its training time went (2 ranks: the slowest named).
    splits = [line for line in lines
              if re.match(r"  input \d+%, compute \d+%, comm \d+% \(slowest: rank [01]\)$", line)]
    assert len(splits) == 3, screen
    # The bar as it was left: whole at 80 columns, with a bar of real width.
    bars = [line for line in lines if re.match(r"epoch 3/3 100%\|", line)]
    assert bars, screen
    assert len(bars[-1]) <= 80 and bars[-1].count("█") >= 20, bars[-1]
    assert re.search(r"\d+/\d+ \[", bars[-1]), bars[-1]
    (summary,) = [line for line in ours if line.startswith("spark-hvd: trained ")]
    assert re.match(r"spark-hvd: trained 3 epoch\(s\), \d+ steps in \d+\.\d s \([\d.]+ steps/s\)$", summary)


def test_a_notebook_without_ipywidgets_gets_plain_lines_and_no_warning(monkeypatch, recwarn) -> None:
    from spark_hvd.estimator.progress import FitProgress, FitStatus, _Display

    monkeypatch.setitem(sys.modules, "ipywidgets", None)   # as if it were not installed
    out = io.StringIO()
    display = _Display(stream=out, notebook=True)
    status = FitStatus(display=display)
    status.phase("launching 2 ranks")
    progress = FitProgress(epochs=2, steps_per_epoch=4, status=status, num_proc=2, display=display)
    progress.on_event(0, {"type": "start", "first_epoch": 0})
    for epoch in range(2):
        for step in range(4):
            progress.on_event(0, {"type": "step", "epoch": epoch, "step": step, "loss": 0.5})
        progress.on_event(0, {"type": "epoch", "epoch": epoch, "metrics": {"loss": 0.5, "val_loss": 0.6}})
    progress.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text and "%|" not in text, text
    assert [line.split(":")[0] for line in text.splitlines()] == [
        "spark-hvd", "spark-hvd", "epoch 1/2", "epoch 2/2", "spark-hvd"], text
    assert not recwarn.list


def test_the_bar_shows_each_epochs_loss_when_no_step_event_came_in_the_epoch() -> None:
    from spark_hvd.estimator.progress import FitProgress, _Display

    display = _Display(stream=io.StringIO(), notebook=False)
    progress = FitProgress(epochs=3, steps_per_epoch=4, display=display)
    progress.on_event(0, {"type": "start", "first_epoch": 0})
    # Rank 0 throttles its step events: in a fast fit, the first step's is the only one.
    progress.on_event(0, {"type": "step", "epoch": 0, "step": 0, "loss": 2.302})
    seen = []
    for epoch, loss in enumerate((1.68, 0.55)):
        progress.on_event(0, {"type": "epoch", "epoch": epoch, "metrics": {"loss": loss, "val_loss": 0.9}})
        seen.append(display.bar.postfix)
    assert seen == ["loss=1.68", "loss=0.55"]
    progress.close()
