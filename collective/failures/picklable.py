"""Every process: exceptions whose constructor differs from their ``args`` still cross a pickle.

Python rebuilds an unpickled exception by calling its class with ``args``. An exception whose
``__init__`` takes other arguments than it hands to ``super().__init__`` (keyword-only fields, a
record it formats into the message) then fails to unpickle, so a caller running a job inside a
process pool, joblib or Ray would get a TypeError or AttributeError instead of the job's error.

This module must stay importable without the C++ extension.
"""

from __future__ import annotations

from typing import Any


class PicklableError:
    """Mixin for an exception class (list it before the builtin base): pickles it by its ``args`` and its
    fields, and rebuilds it without calling ``__init__`` again."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))  # type: ignore[attr-defined]


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], fields: dict[str, Any]) -> BaseException:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(fields)
    return error
