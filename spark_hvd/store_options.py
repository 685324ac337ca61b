"""Driver: the keywords of ``Store.create`` told apart: Horovod's Store keywords, and the fsspec filesystem's options.

Horovod's ``FilesystemStore`` takes ``train_path``, ``val_path``, ``test_path``, ``runs_path``, ``save_runs``,
``checkpoint_filename`` and ``storage_options`` (a dict for the filesystem); those keep Horovod's meaning. Any
other keyword is a filesystem option, so it must be one the filesystem's class takes: a name in the ``__init__``
of the class or of a class it inherits from (fsspec filesystems forward ``**kwargs`` to their parents), or one of
the options every fsspec filesystem reads (listings cache, instance cache, async loop). A keyword that neither
Horovod nor the filesystem knows is an error that names it, rather than an option the filesystem never reads.
"""

from __future__ import annotations

import inspect
from typing import Any

HOROVOD_KEYWORDS = ("train_path", "val_path", "test_path", "runs_path", "save_runs", "checkpoint_filename",
                    "storage_options")
# Read by fsspec's AbstractFileSystem and its instance cache, whatever the filesystem.
_EVERY_FILESYSTEM = {"skip_instance_cache", "asynchronous", "loop"}


def filesystem_keywords(protocol: str) -> set[str]:
    """The keyword options the fsspec filesystem for ``protocol`` reads."""
    import fsspec
    from fsspec.dircache import DirCache

    names = set(_EVERY_FILESYSTEM) | _named(DirCache.__init__)
    for cls in fsspec.get_filesystem_class(protocol).__mro__:
        if "__init__" in cls.__dict__ and cls is not object:
            names |= _named(cls.__dict__["__init__"])
    return names


def unknown_filesystem_keywords(protocol: str, options: dict[str, Any]) -> list[str]:
    """The keywords of ``options`` the filesystem would not read, sorted."""
    known = filesystem_keywords(protocol)
    return sorted(name for name in options if name not in known)


def _named(function: Any) -> set[str]:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in parameters if p.name != "self" and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
