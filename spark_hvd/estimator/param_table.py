"""Spark ML Params declared from a table, with Horovod's names and camel-case getters and setters.

``declare_params(cls, SPECS)`` adds, for every ``ParamSpec("batch_size", ...)``, a class-level
``Param`` named ``batch_size`` plus ``getBatchSize()`` and ``setBatchSize(value)``, which is what
Spark ML users expect of a stage (``explainParams()``, ``copy()``, ``extractParamMap()`` all work).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from pyspark.ml.param import Param, Params, TypeConverters

_NO_DEFAULT = object()


@dataclass(frozen=True)
class ParamSpec:
    name: str
    doc: str
    default: Any = _NO_DEFAULT
    converter: Callable[[Any], Any] | None = None


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def declare_params(cls: type, specs: Sequence[ParamSpec]) -> type:
    """Adds the Params, getters and setters of ``specs`` to ``cls`` (a Params subclass)."""
    for spec in specs:
        setattr(cls, spec.name, Param(Params._dummy(), spec.name, spec.doc, typeConverter=spec.converter))
        getter_name, setter_name = "get" + camel(spec.name), "set" + camel(spec.name)
        if getter_name not in cls.__dict__:
            setattr(cls, getter_name, _getter(spec.name))
        if setter_name not in cls.__dict__:
            setattr(cls, setter_name, _setter(spec.name))
    return cls


def set_defaults(instance: Params, specs: Sequence[ParamSpec]) -> None:
    # Each stage gets its own copy of a list or dict default, so one stage's edit cannot reach another's.
    instance._setDefault(**{s.name: copy.copy(s.default) for s in specs if s.default is not _NO_DEFAULT})


def _getter(name: str) -> Callable[[Params], Any]:
    def get(self: Params) -> Any:
        return self.getOrDefault(getattr(self, name))

    get.__name__ = "get" + camel(name)
    get.__doc__ = f"Gets the value of ``{name}`` or its default."
    return get


def _setter(name: str) -> Callable[[Params, Any], Params]:
    def set_(self: Params, value: Any) -> Params:
        return self._set(**{name: value})

    set_.__name__ = "set" + camel(name)
    set_.__doc__ = f"Sets ``{name}``; returns the stage, so calls chain."
    return set_


def to_str_list(value: Any) -> list[str]:
    """A column name or a list of them."""
    if isinstance(value, str):
        return [value]
    return TypeConverters.toListString(value)


def to_optional(converter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        return None if value is None else converter(value)

    return convert


def to_positive_int(value: Any) -> int:
    number = TypeConverters.toInt(value)
    if number < 1:
        raise TypeError(f"expected a positive integer, got {value!r}")
    return number


def to_non_negative_int(value: Any) -> int:
    number = TypeConverters.toInt(value)
    if number < 0:
        raise TypeError(f"expected an integer >= 0, got {value!r}")
    return number
