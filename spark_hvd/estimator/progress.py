"""What the driver shows during a fit: a status line per phase before training (with its time), then a
progress bar over epochs and steps with the loss rank 0 streams (``spark_hvd.emit_event``), a line per
epoch with its metrics, and a closing line whose rate counts training only (not the ranks winding down).

Rank 0 sends ``{"type": "start", "first_epoch"}``, ``{"type": "step", "epoch", "step", "loss"}`` now and
then, and ``{"type": "epoch", "epoch", "metrics", "times"}`` after each epoch's validation, where ``times``
is where the epoch's training time went, over every rank (spark_hvd/recipe/epoch_times.py); a line under
the epoch's shows it as shares, e.g. ``  input 12%, compute 70%, comm 18% (slowest: rank 1)``.

Where it draws: in a terminal, a text bar sized to the terminal (readable at 80 columns); in Jupyter, a
widget bar when ipywidgets is installed, else no bar at all (the epoch lines only), so a notebook never shows
tqdm's ``IProgress not found`` warning or a stream of carriage returns. Lines start by clearing the
terminal's current line, so a Spark console progress bar (``[Stage N:>...]``) left on it does not garble them.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Callable, Mapping

from spark_hvd.recipe.epoch_times import shares
from spark_hvd.recipe.rank_progress import EVENT_EPOCH, EVENT_START, EVENT_STEP  # noqa: F401 - also the driver's names
_PREFIX = "spark-hvd: "
# Erase the terminal line the cursor is on (whatever Spark's console bar left there) before writing.
_CLEAR_LINE = "\r\x1b[K"
# desc, percentage, bar, steps, elapsed<remaining, the loss; the bar takes what is left of the width (about
# 30 columns of 80). The rate is in the closing line, where it counts training only.
_BAR_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    ip = shell.get_ipython() if hasattr(shell, "get_ipython") else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def _has_widgets() -> bool:
    import importlib.util

    return importlib.util.find_spec("ipywidgets") is not None


class _Display:
    """Where the lines and the bar go: ``stream`` (stderr by default), as a terminal or as plain text."""

    def __init__(self, stream: IO[str] | None = None, notebook: bool | None = None) -> None:
        self.notebook = _in_notebook() if notebook is None else notebook
        # A notebook shows stderr as an error-coloured block: progress is not an error there.
        self.stream = stream if stream is not None else (sys.stdout if self.notebook else sys.stderr)
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = not self.notebook and bool(isatty and isatty())
        self.bar: Any = None

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)   # tqdm clears its bar, writes, redraws
            return
        self.stream.write(f"{_CLEAR_LINE if self.terminal else ''}{text}\n")
        self.stream.flush()

    def open_bar(self, total: int, initial: int, desc: str) -> None:
        if self.notebook:
            if not _has_widgets():
                return
            from tqdm.notebook import tqdm as widget_tqdm

            self.bar = widget_tqdm(total=total, initial=initial, unit="step", desc=desc)
            return
        from tqdm.std import tqdm as text_tqdm

        if self.terminal:
            self.stream.write(_CLEAR_LINE)
        self.bar = text_tqdm(total=total, initial=initial, unit="step", file=self.stream, dynamic_ncols=True,
                             mininterval=0.5, desc=desc, bar_format=_BAR_FORMAT,
                             # Not a terminal (a log file, a pipe): one bar line now and then, not hundreds.
                             miniters=None if self.terminal else max(1, total // 10))

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class FitStatus:
    """The status lines before training: ``phase("materialising ...")`` starts one, ``done("...")`` ends it
    with its time. The fit's launch is set up before its FitProgress exists (which needs the data's size), so
    the ranks' events come here (``on_event``) and go on to the FitProgress made with this status."""

    def __init__(self, enabled: bool = True, display: _Display | None = None, label: str | None = None) -> None:
        self.enabled = enabled
        # A tuner's fits run side by side on one console: each line says whose it is.
        self.label = label
        self.prefix = _PREFIX if label is None else f"spark-hvd [{label}]: "
        self.display = display if display is not None else (_Display() if enabled else None)
        self._phase_started: float | None = None
        self.progress: FitProgress | None = None

    def on_event(self, rank: int, data: Mapping[str, Any]) -> None:
        """A rank's event, for the fit's progress (none before it exists)."""
        if self.progress is not None:
            self.progress.on_event(rank, data)

    def phase(self, doing: str) -> None:
        self._phase_started = time.monotonic()
        if self.enabled:
            self.display.line(f"{self.prefix}{doing} ...")

    def done(self, what: str) -> None:
        elapsed = 0.0 if self._phase_started is None else time.monotonic() - self._phase_started
        self._phase_started = None
        if self.enabled:
            self.display.line(f"{self.prefix}{what} ({_seconds(elapsed)})")


class FitProgress:
    def __init__(self, epochs: int, steps_per_epoch: int, enabled: bool = True,
                 on_epoch: Callable[[int, dict[str, float]], None] | None = None,
                 status: FitStatus | None = None, num_proc: int | None = None,
                 display: _Display | None = None) -> None:
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.history: list[dict[str, float]] = []
        self.epoch_times: list[dict[str, Any]] = []   # rank 0's epoch events' time splits, as they came
        self._on_epoch = on_epoch
        self._enabled = enabled
        self._display = display if display is not None else (
            status.display if status is not None and status.display is not None else
            (_Display() if enabled else None))
        self._status = status
        label = status.label if status is not None else None
        self._tag = "" if label is None else f"[{label}] "
        self._prefix = _PREFIX if status is None else status.prefix
        if status is not None:
            status.progress = self
        self._num_proc = num_proc
        self._done_steps = 0
        self._first_epoch = 0
        self._epoch_started: float | None = None
        # time.monotonic() when rank 0 started training and when it finished its last epoch.
        self.started_at: float | None = None
        self.finished_at: float | None = None

    def on_event(self, rank: int, data: Mapping[str, Any]) -> None:
        if rank != 0:
            return
        kind = data.get("type")
        if kind == EVENT_START:
            now = time.monotonic()
            if self.started_at is not None:
                self.close()   # an elastic fit's next stage: its rank 0 starts again; training began before
            else:
                self.started_at = now
            self._epoch_started = now
            self._start(int(data.get("first_epoch", 0)))
        elif kind == EVENT_STEP:
            self._step(int(data["epoch"]), int(data["step"]), data.get("loss"))
        elif kind == EVENT_EPOCH:
            metrics = {str(k): float(v) for k, v in dict(data.get("metrics", {})).items()}
            self.history.append({"epoch": int(data["epoch"]), **metrics})
            times = data.get("times")
            if isinstance(times, Mapping):
                self.epoch_times.append(dict(times))
            self.finished_at = time.monotonic()
            self._epoch_done(int(data["epoch"]), metrics, times if isinstance(times, Mapping) else None)

    def close(self) -> None:
        if self._display is not None:
            self._display.close_bar()

    def _start(self, first_epoch: int) -> None:
        self._first_epoch = first_epoch
        self._done_steps = first_epoch * self.steps_per_epoch
        if self._status is not None:
            ranks = f"{self._num_proc} ranks" if self._num_proc is not None else "the ranks"
            resumed = f", resuming after epoch {first_epoch}" if first_epoch else ""
            self._status.done(f"{ranks} launched{resumed}")
        if self._enabled and first_epoch < self.epochs:
            self._display.open_bar(self.epochs * self.steps_per_epoch, self._done_steps,
                                   self._description(first_epoch))

    def _step(self, epoch: int, step: int, loss: Any) -> None:
        target = epoch * self.steps_per_epoch + step
        bar = self._display.bar if self._display is not None else None
        if bar is not None and target > self._done_steps:
            bar.update(target - self._done_steps)
            bar.set_description_str(self._description(epoch), refresh=False)
            if loss is not None:
                bar.set_postfix_str(f"loss={float(loss):.4g}", refresh=False)
        self._done_steps = max(self._done_steps, target)

    def _epoch_done(self, epoch: int, metrics: dict[str, float], times: Mapping[str, Any] | None = None) -> None:
        # Step events are throttled, so a fast epoch may send none: the bar's loss would be the last one
        # sent (the first step's, in a short fit). The epoch's own loss replaces it.
        self._step(epoch, self.steps_per_epoch, metrics.get("loss"))
        now = time.monotonic()
        took = now - (self._epoch_started if self._epoch_started is not None else now)
        self._epoch_started = now
        if self._enabled:
            values = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
            self._display.line(f"{self._tag}epoch {epoch + 1}/{self.epochs}: {values} ({_seconds(took)})")
            split = _time_split(times)
            if split:
                self._display.line(self._tag + split)
            if epoch + 1 >= self.epochs:
                self._finish()
        if self._on_epoch is not None:
            self._on_epoch(epoch, metrics)

    def _finish(self) -> None:
        # The bar closes at the last epoch, so its rate (and ours) leaves out the ranks winding down.
        self._display.close_bar()
        if self.started_at is None or self.finished_at is None:
            return
        trained = self.finished_at - self.started_at
        steps = (self.epochs - self._first_epoch) * self.steps_per_epoch
        rate = f"{steps / trained:.3g} steps/s" if trained > 0 else "-"
        self._display.line(f"{self._prefix}trained {self.epochs - self._first_epoch} epoch(s), {steps} steps in "
                           f"{_seconds(trained)} ({rate})")

    def _description(self, epoch: int) -> str:
        return f"{self._tag}epoch {min(epoch + 1, self.epochs)}/{self.epochs}"


def _time_split(times: Mapping[str, Any] | None) -> str:
    """Driver: the line under an epoch's, "  input 12%, compute 70%, comm 18% (slowest: rank 1)" (ASCII, so
    any console encodes it), or "" without times."""
    split = shares(dict(times)) if times is not None else None
    if split is None:
        return ""
    slowest = times.get("slowest_rank")
    named = f" (slowest: rank {int(slowest)})" if slowest is not None and int(times.get("ranks", 2)) > 1 else ""
    return "  input {:.0%}, compute {:.0%}, comm {:.0%}{}".format(*split, named)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 120 else f"{int(value // 60)} min {value % 60:.0f} s"
