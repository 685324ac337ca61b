"""Rank child: a feed's decode workers, which run ``transformation_fn`` on its batches ahead of the training
loop (Horovod's ``train_reader_num_workers`` and ``val_reader_num_workers``).

- Reading stays in the rank (a ShardReader is not shareable). A feeder thread reads the epoch's raw batches
  and sends each, whole, to the least busy worker; the training loop's generator yields the transformed
  batches in the order they were read (by sequence number), so the batches are the same whatever the number
  of workers, and, with a seed, the same on every run.
- Memory is bounded: at most ``workers * batches_per_worker`` batches are read and not yet yielded (the
  in-flight slots), whatever the data size.
- A worker is a fresh interpreter running decode_worker.py, started with ``subprocess`` (spawn's semantics:
  the rank, which has torch or TensorFlow threads, is never forked, and its ``__main__`` is not imported
  again). It imports numpy and cloudpickle, and whatever the transformation imports. The transformation
  travels with cloudpickle, so a lambda or a closure works. BLAS/OpenMP threads default to 1 per worker.
- One pool per feed, started at its first epoch and reused by the next ones. An epoch left before its end
  (a failed or resumed epoch, a generator dropped, or a later epoch of the same feed begun) stops the
  workers, so no stale batch survives it; the next epoch starts new ones. ``close()`` stops them too.
- Errors. The user's exception from a worker is re-raised in the rank as itself (its type and message),
  with notes naming the split, the epoch, the batch, the row within the epoch (and the row's ``path`` where
  the batch has that column, as Spark's ``binaryFile`` source gives) and the worker's traceback. It is
  raised at the batch where it happened, after the batches before it. A worker that dies (killed, out of
  memory) is a DecodeWorkerDied naming the rank, the worker and the batch it held, within a second or so.
"""

from __future__ import annotations

import collections
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterator

from spark_hvd.data.feed import decode_worker
from spark_hvd.data.feed.decode_worker import read_message, write_message

DEFAULT_BATCHES_PER_WORKER = 2
MAX_DEFAULT_WORKERS = 4
PIPE_BYTES = 1 << 20
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class DecodeWorkerError(RuntimeError):
    """A decode worker failed other than by the user's own exception (or with one that cannot be rebuilt)."""


class DecodeWorkerDied(DecodeWorkerError):
    """A decode worker process exited (killed, out of memory) while the rank waited for its batches."""


def default_reader_workers(has_transformation: bool, ranks_on_host: int = 1, cores: int | None = None) -> int:
    """Rank child: the decode workers a feed gets when the user does not say: 0 without a transformation
    (there is nothing to decode), else the rank's share of the host's cores (the cores this process may run
    on, divided by the ranks on the host) less one for the training loop, between 0 and 4."""
    if not has_transformation:
        return 0
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    return max(0, min(MAX_DEFAULT_WORKERS, cores // max(1, ranks_on_host) - 1))


@dataclass(frozen=True)
class BatchPlace:
    """Where a batch sits in its epoch: for error messages."""

    split: str
    epoch: int
    index: int          # the batch's index in the epoch (a resumed epoch's skipped batches counted)
    first_row: int      # the epoch's row position of its first row
    rows: int

    def describe(self, row: int | None = None, path: str | None = None, path_of_row: bool = True) -> str:
        text = (f"the {self.split} split, epoch {self.epoch}, batch {self.index} of the epoch (its rows "
                f"{self.first_row}-{self.first_row + self.rows - 1})")
        if row is not None:
            text += f", row {self.first_row + row} of the epoch"
        if path is not None:
            text += f" (path {path!r})" if path_of_row else f" (its first row's path {path!r})"
        return text


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on Python 3.10 (where the note is kept but not printed)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        try:
            exc.__notes__ = [*getattr(exc, "__notes__", []), note]
        except AttributeError:
            pass


class _Worker:
    def __init__(self, index: int, proc: subprocess.Popen, task_fd: int, result_fd: int) -> None:
        self.index, self.proc, self.task_fd, self.result_fd = index, proc, task_fd, result_fd
        self.outstanding: collections.deque[int] = collections.deque()   # seqs sent, not answered
        self.sent = 0


class _Run:
    """One epoch's pass through the pool."""

    def __init__(self, run_id: int, count: int, in_flight: int) -> None:
        self.id, self.count = run_id, count
        self.slots = threading.Semaphore(in_flight)
        self.places: dict[int, BatchPlace] = {}
        self.results: dict[int, tuple[str, Any, _Worker]] = {}
        self.stopped = False
        self.error: BaseException | None = None     # the feeder's (the reader's), at batch error_seq
        self.error_seq = count
        self.send_failed: _Worker | None = None
        self.feeder: threading.Thread | None = None


class _Stopped(Exception):
    pass


class DecodePool:
    """Rank child: ``workers`` processes that run ``transformation`` (rank_feed.Transformation) on batches.

    ``imap`` gives one epoch's transformed batches in order; ``pids`` the live workers; ``close()`` stops
    them. ``rank`` and ``split`` name the feed in errors."""

    def __init__(self, transformation: Any, workers: int, *, rank: int | None, split: str,
                 batches_per_worker: int = DEFAULT_BATCHES_PER_WORKER) -> None:
        if workers < 1:
            raise ValueError(f"a decode pool needs at least 1 worker, got {workers}")
        if batches_per_worker < 1:
            raise ValueError(f"batches_per_worker must be at least 1, got {batches_per_worker}")
        self.workers, self.rank, self.split = workers, rank, split
        self.in_flight = workers * batches_per_worker
        self._payload = _job_payload(transformation)
        self._lock = threading.Lock()
        self._live: list[_Worker] = []
        self._procs: list[subprocess.Popen] = []     # shared with the finalizer, which must not hold self
        self._finalizer = weakref.finalize(self, _kill_all, self._procs)
        self._wake_r, self._wake_w = -1, -1
        self._active: _Run | None = None
        self._runs = 0
        self.closed = False

    @property
    def pids(self) -> list[int]:
        """The worker processes now running (none before the first epoch and after close)."""
        return [worker.proc.pid for worker in self._live]

    def _who(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else "this rank"

    # --- the workers -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers (the first epoch does, where they are not running)."""
        if self.closed:
            raise RuntimeError(f"{self._who()}: the {self.split} feed's decode pool is closed")
        if self._live:
            return
        env = dict(os.environ)
        for name in _THREAD_VARIABLES:
            env.setdefault(name, "1")
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        script = os.path.abspath(decode_worker.__file__)
        for index in range(self.workers):
            task_r, task_w = os.pipe()
            result_r, result_w = os.pipe()
            _widen(task_w)
            _widen(result_w)
            try:
                proc = subprocess.Popen([sys.executable, script, str(task_r), str(result_w)],
                                        pass_fds=(task_r, result_w), stdin=subprocess.DEVNULL, env=env)
            except BaseException:
                for fd in (task_w, result_r):
                    os.close(fd)
                self._stop_workers()
                raise
            finally:
                os.close(task_r)
                os.close(result_w)
            self._procs.append(proc)
            self._live.append(_Worker(index, proc, task_w, result_r))
        setup = {"sys_path": list(sys.path), "job": self._payload, "run": 0}
        for worker in self._live:
            try:
                write_message(worker.task_fd, setup)
            except OSError:
                died = self._died(worker, None)
                self._stop_workers()
                raise died from None

    def _stop_workers(self, feeder: threading.Thread | None = None) -> None:
        """Stop every worker now (their batches in flight are dropped) and reap them; the pipes close after
        ``feeder`` (which may be writing to one) has ended."""
        workers, self._live = self._live, []
        for worker in workers:
            if worker.proc.poll() is None:
                worker.proc.terminate()
        for worker in workers:
            try:
                worker.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
            if worker.proc in self._procs:
                self._procs.remove(worker.proc)
        if feeder is not None and feeder is not threading.current_thread():
            feeder.join()
        for worker in workers:
            _close(worker.task_fd)
            _close(worker.result_fd)
        for fd in (self._wake_r, self._wake_w):
            _close(fd)
        self._wake_r = self._wake_w = -1

    def close(self) -> None:
        """Stop the workers; an epoch still running ends (its generator returns)."""
        self.closed = True
        run, self._active = self._active, None
        if run is not None:
            self._halt(run)
        self._stop_workers(run.feeder if run is not None else None)
        self._finalizer.detach()

    # --- an epoch ----------------------------------------------------------------------------------------

    def imap(self, placed: Iterator[tuple[BatchPlace, dict[str, Any]]], count: int) -> Iterator[dict[str, Any]]:
        """The transformed batches of the first ``count`` of ``placed`` ((place, raw batch) pairs, read
        by a feeder thread), in their order."""
        if self._active is not None:
            # A generator of an earlier epoch still holds the workers: its batches are stale now.
            self._abandon(self._active)
        self.start()
        self._runs += 1
        run = _Run(self._runs, count, self.in_flight)
        self._active = run
        run.feeder = threading.Thread(target=self._feed, args=(run, placed), daemon=True,
                                      name=f"spark-hvd-{self.split}-feeder")
        run.feeder.start()
        finished = False
        try:
            for seq in range(count):
                kind, body, worker = self._await(run, seq)
                place = run.places.pop(seq)
                if kind == "error":
                    raise self._user_error(body, place, worker)
                run.slots.release()
                yield body
            finished = True
        except _Stopped:
            if not self.closed:
                raise RuntimeError(f"{self._who()}: this epoch of the {self.split} feed was abandoned: a later "
                                   "epoch of the same feed started before it ended") from None
        finally:
            if self._active is run:
                if finished:
                    self._active = None
                    run.feeder.join()
                else:
                    self._abandon(run)

    def _abandon(self, run: _Run) -> None:
        self._active = None
        self._halt(run)
        self._stop_workers(run.feeder)

    def _halt(self, run: _Run) -> None:
        run.stopped = True
        for _ in range(self.in_flight + 1):
            run.slots.release()        # a feeder waiting for a slot wakes, and sees the run stopped

    def _feed(self, run: _Run, placed: Iterator[tuple[BatchPlace, dict[str, Any]]]) -> None:
        """Feeder thread: read the raw batches and hand each to the least busy worker, while slots last."""
        seq = 0
        try:
            for seq in range(run.count):
                run.slots.acquire()
                if run.stopped:
                    return
                place, batch = next(placed)
                if run.stopped:
                    return
                run.places[seq] = place
                with self._lock:
                    worker = min(self._live, key=lambda w: (len(w.outstanding), w.sent))
                    worker.outstanding.append(seq)
                    worker.sent += 1
                try:
                    write_message(worker.task_fd, ("batch", run.id, seq, batch))
                except OSError:
                    if not run.stopped:
                        run.send_failed = worker
                    return
                del batch
        except BaseException as exc:  # noqa: BLE001 - re-raised by the generator, at its batch
            run.error, run.error_seq = exc, seq
        finally:
            wake = self._wake_w
            if wake >= 0:
                try:
                    os.write(wake, b"!")
                except OSError:
                    pass

    def _await(self, run: _Run, seq: int) -> tuple[str, Any, _Worker]:
        """The worker's answer for batch ``seq``, reading answers as they come (in any order)."""
        if run.stopped:
            raise _Stopped()
        poller = select.poll()
        by_fd = {}
        for worker in self._live:
            poller.register(worker.result_fd, select.POLLIN)
            by_fd[worker.result_fd] = worker
        poller.register(self._wake_r, select.POLLIN)
        while seq not in run.results:
            if run.stopped:
                raise _Stopped()
            if run.error is not None and seq >= run.error_seq:
                raise run.error
            if run.send_failed is not None:
                raise self._died(run.send_failed, run)
            events = poller.poll(500)
            for fd, _ in events:
                if fd == self._wake_r:
                    _drain(fd)
                    continue
                worker = by_fd[fd]
                if run.stopped:
                    raise _Stopped()
                try:
                    message = read_message(fd)
                except (EOFError, OSError):
                    raise self._died(worker, run) from None
                self._take(run, worker, message)
            if not events:
                for worker in self._live:
                    if worker.proc.poll() is not None:
                        raise self._died(worker, run)
        return run.results.pop(seq)

    def _take(self, run: _Run, worker: _Worker, message: tuple) -> None:
        kind, run_id, seq, body = message
        if kind == "job_error":
            raise self._job_error(body, worker)
        if run_id != run.id:
            return
        with self._lock:
            worker.outstanding.remove(seq)
        run.results[seq] = (kind, body, worker)

    # --- errors ------------------------------------------------------------------------------------------

    def _worker_name(self, worker: _Worker) -> str:
        return f"decode worker {worker.index} (pid {worker.proc.pid}) of {self._who()}'s {self.split} feed"

    def _died(self, worker: _Worker, run: _Run | None) -> DecodeWorkerDied:
        try:
            code = worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            how = "closed its pipe"
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            how = f"was killed by {name}" + (" (out of memory, or killed by hand)" if -code == signal.SIGKILL
                                              else "")
        else:
            how = f"exited with status {code}"
        held = ""
        if run is not None and worker.outstanding:
            place = run.places.get(worker.outstanding[0])
            if place is not None:
                held = f", holding {place.describe()}"
        return DecodeWorkerDied(f"{self._who()}: the {self.split} feed's decode worker {worker.index} (pid "
                                f"{worker.proc.pid}) {how}{held}; the fit cannot go on without its batches")

    def _user_error(self, report: dict[str, Any], place: BatchPlace, worker: _Worker) -> BaseException:
        exc = _rebuilt(report)
        where = place.describe(report["row"], report["path"], report.get("path_of_row", True))
        add_note(exc, f"spark_hvd: transformation_fn raised this on {where}, in {self._worker_name(worker)}")
        add_note(exc, "the decode worker's traceback:\n" + report["traceback"].rstrip())
        return exc

    def _job_error(self, report: dict[str, Any], worker: _Worker) -> BaseException:
        exc = _rebuilt(report)
        add_note(exc, f"spark_hvd: {self._worker_name(worker)} could not load transformation_fn: it must be "
                      "importable in a fresh Python process, or be pickled by value (a lambda, a closure, or "
                      "a function of __main__)")
        add_note(exc, "the decode worker's traceback:\n" + report["traceback"].rstrip())
        return exc


def _rebuilt(report: dict[str, Any]) -> BaseException:
    """The worker's exception as itself, or a DecodeWorkerError with its type and message."""
    if report.get("exception") is not None:
        try:
            exc = pickle.loads(report["exception"])
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # noqa: BLE001 - fall back to its text
            pass
    return DecodeWorkerError(f"{report['type']}: {report['message']}")


def _job_payload(transformation: Any) -> bytes:
    """The transformation as the workers load it: (function, per batch?, edit fields, removed fields)."""
    import cloudpickle

    fn = transformation.fn
    per_batch = bool(getattr(fn, "per_batch", False))
    job = (fn.fn if per_batch else fn, per_batch, transformation.edit_fields, transformation.removed_fields)
    try:
        return cloudpickle.dumps(job)
    except Exception as exc:
        raise TypeError(f"transformation_fn cannot be pickled for the decode workers ({exc}); make it "
                        "picklable, or set train_reader_num_workers/val_reader_num_workers to 0 to run it "
                        "in the training loop") from exc


def _widen(fd: int) -> None:
    """A pipe of 1 MiB where Linux allows (64 KiB by default): fewer switches between the processes per batch."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


def _close(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, OSError):
        pass


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """At garbage collection or interpreter exit: no worker outlives a pool that was not closed."""
    for proc in list(procs):
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
