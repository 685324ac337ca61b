"""Rank child: the process that runs fn, ``python -m spark_hvd.launch.child_main LAUNCH_FD RESULT_FD``.

User code runs here rather than in Spark's Python worker, so a crash, ``os._exit`` or a leaked
thread in ``fn`` cannot take the worker down. The task (our parent) sends two frames on LAUNCH_FD:

1. ``{"kind": "payload"}`` + cloudpickle((fn, args, kwargs)), right after spawning us, so that
   unpickling (which imports the user's modules, maybe torch) overlaps the ranks' allGather;
2. ``{"kind": "job", "env": {...}, "context": {...}}`` once the ranks have met.

While fn runs we may send ``{"kind": "event", "data": {...}}`` frames on RESULT_FD
(``spark_hvd.emit_event``); we end with one report frame: ``{"ok": true}`` + cloudpickle(fn's
return value), or ``{"ok": false, "summary", "traceback", "peer_failure", "stage"}``.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, BinaryIO

import cloudpickle

import collective
from spark_hvd.launch import init_shim, rank_events
from spark_hvd.launch.framing import read_frame, write_frame
from spark_hvd.launch.peer_failures import is_peer_failure
from spark_hvd.launch.rank_context import RankContext, set_rank_context

_SUMMARY_LIMIT = 1000


def main(argv: list[str]) -> int:
    launch = os.fdopen(int(argv[1]), "rb")
    results = os.fdopen(int(argv[2]), "wb")
    # Before fn's modules are imported, so that they bind the tolerant init too.
    init_for_fn = init_shim.install()
    stage = "receiving fn"
    try:
        fn, args, kwargs = cloudpickle.loads(_expect(launch, "payload")[1])
        stage = "receiving the job"
        job = _expect(launch, "job")[0]
        launch.close()
        # collective reads its configuration from these (and so does a plain init() in fn).
        os.environ.update(job["env"])
        set_rank_context(RankContext.from_json(job["context"]))
        stage = "collective.init()"
        init_for_fn()
        stage = "fn"
        rank_events.attach(results)
        value = fn(*args, **kwargs)
        stage = "pickling fn's return value"
        blob = cloudpickle.dumps(value)
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt in fn are failures too
        rank_events.detach()
        _flush_stdio()
        write_frame(results, {
            "ok": False,
            "stage": stage,
            "summary": _summary(e, stage),
            "traceback": _traceback_text(e, skip_own_frame=stage == "fn"),
            "peer_failure": is_peer_failure(e),
        })
        results.close()
        return 1
    # Leave the mesh before reporting success, so peers see a goodbye, never a vanished rank.
    collective.shutdown()
    rank_events.detach()
    _flush_stdio()
    write_frame(results, {"ok": True}, blob)
    results.close()
    return 0


def _expect(stream: BinaryIO, kind: str) -> tuple[dict[str, Any], bytes]:
    frame = read_frame(stream)
    if frame is None or frame[0].get("kind") != kind:
        raise ConnectionError(f"the task sent {frame[0] if frame else 'nothing'} instead of the {kind}")
    return frame


def _summary(error: BaseException, stage: str) -> str:
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if stage != "fn":
        text = f"{text} (while {stage})"
    return text if len(text) <= _SUMMARY_LIMIT else text[:_SUMMARY_LIMIT] + "..."


def _traceback_text(error: BaseException, skip_own_frame: bool) -> str:
    # The user wants to see their fn's frames, not this module's call into it.
    tb = error.__traceback__
    if skip_own_frame and tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
