"""Every exception class of collective and spark_hvd survives pickling with its fields (issue 34): a caller
that runs spark_hvd.run inside a process pool, joblib or Ray gets the rank's error, not a failed unpickle.

The classes are found by reading the packages' sources, so a new exception class without pickling support
fails here until it has it (and, when it cannot be built from a message alone, a sample below)."""

from __future__ import annotations

import ast
import builtins
import concurrent.futures
import importlib
import io
import multiprocessing
import pickle
from pathlib import Path
from typing import Any, Callable

import pytest

import spark_hvd
from collective import _native
from rank_functions import fail_on_rank

pytestmark = [pytest.mark.timeout(300)]

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = ("collective", "spark_hvd")
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Interrupt", "Warning", "Exit")


def _samples() -> dict[str, Callable[[], BaseException]]:
    """Instances with every field set, for the classes whose constructor takes more than a message."""
    from collective.elastic.errors import HostsUpdatedInterrupt
    from spark_hvd.errors import NotEnoughSlotsError, RankFailure, RunError
    from spark_hvd.launch.driver.elastic_runner import _Grow

    def run_error() -> BaseException:
        root = RankFailure(rank=1, summary="ValueError: boom", traceback="Traceback ...\nValueError: boom\n",
                           exit_code=1)
        other = RankFailure(rank=0, summary="PeerFailureError: rank 1 left", peer_failure=True, blamed_rank=1)
        return RunError(root, ["last line"], [other])

    def peer_failure() -> BaseException:
        error = _native.PeerFailureError("rank 2 vanished")
        error.rank = 2  # as the binding sets it
        return error

    return {
        "spark_hvd.errors.RunError": run_error,
        "spark_hvd.errors.NotEnoughSlotsError":
            lambda: NotEnoughSlotsError("needs 4 task slots", num_proc=4, slots=2),
        "collective.elastic.errors.HostsUpdatedInterrupt": lambda: HostsUpdatedInterrupt(skip_sync=True),
        "spark_hvd.launch.driver.elastic_runner._Grow": lambda: _Grow(3),
        "collective._native.PeerFailureError": peer_failure,
    }


def _base_names(node: ast.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def _is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def _exception_classes() -> list[type[BaseException]]:
    """Every exception class the packages' sources define (and the extension's), imported."""
    defined: list[tuple[str, ast.ClassDef]] = []
    for package in _PACKAGES:
        for path in sorted((_ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(_ROOT).with_suffix("").parts).removesuffix(".__init__")
            tree = ast.parse(path.read_text(encoding="utf-8"))
            defined += [(module, node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    # A class is an exception when a base is one: found by name, to a fixed point across modules.
    exceptions: set[str] = set()
    while True:
        found = {node.name for _, node in defined if node.name.endswith(_EXCEPTION_SUFFIXES) or any(
            base in exceptions or base.endswith(_EXCEPTION_SUFFIXES) or _is_builtin_exception(base)
            for base in _base_names(node))}
        if found <= exceptions:
            break
        exceptions |= found
    classes = [getattr(importlib.import_module(module), node.name)
               for module, node in defined if node.name in exceptions]
    classes += [value for value in vars(_native).values()
                if isinstance(value, type) and issubclass(value, BaseException)]
    return [cls for cls in classes if isinstance(cls, type) and issubclass(cls, BaseException)]


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _instance(cls: type[BaseException]) -> BaseException:
    sample = _samples().get(_qualified(cls))
    if sample is not None:
        return sample()
    try:
        return cls("a message")
    except TypeError as e:
        pytest.fail(f"{_qualified(cls)} cannot be built from a message ({e}): add a sample with its fields")


def _fields(error: BaseException) -> dict[str, Any]:
    return {"type": type(error), "args": error.args, "str": str(error), "vars": vars(error)}


def test_the_scan_finds_the_exceptions_that_carry_fields() -> None:
    found = {_qualified(cls) for cls in _exception_classes()}
    assert set(_samples()) <= found, set(_samples()) - found
    assert {"spark_hvd.errors.LaunchError", "collective.errors.NotInitializedError",
            "collective.bootstrap.rendezvous.RendezvousError", "spark_hvd.store.StoreError"} <= found


@pytest.mark.parametrize("cls", _exception_classes(), ids=_qualified)
def test_every_exception_survives_pickling_with_its_fields(cls: type[BaseException]) -> None:
    error = _instance(cls)
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        assert _fields(pickle.loads(pickle.dumps(error, protocol))) == _fields(error)


def _raise(error: BaseException) -> None:
    raise error


@pytest.mark.spark
def test_a_run_error_crosses_a_process_pool(local_spark) -> None:
    """The issue's case: spark_hvd.run's RunError, raised in a pool's worker, arrives whole in its caller."""
    with pytest.raises(spark_hvd.RunError) as caught:
        spark_hvd.run(fail_on_rank, args=("raise", 1), num_proc=2, stdout=io.StringIO(), stderr=io.StringIO())
    error = caught.value
    # A fresh interpreter unpickles the error it is given, raises it, and the pool pickles it back.
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(spark_hvd.RunError) as returned:
            pool.submit(_raise, error).result(timeout=120)
    assert returned.value.rank == 1
    assert returned.value.failure == error.failure
    assert returned.value.other_failures == error.other_failures
    assert returned.value.last_lines == error.last_lines
    assert str(returned.value) == str(error)
