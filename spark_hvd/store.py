"""Store: one prefix on a filesystem for materialised data, checkpoints, logs and metrics.

Layout under the prefix (the same as horovod.spark.common.store):

    <prefix>/intermediate_data/<key>/train, .../val     Parquet written by spark_hvd.data.materialize
    <prefix>/runs/<run_id>/checkpoints, logs, metrics   what a training run leaves behind

Every filesystem is reached through fsspec (s3fs, gcsfs, adlfs, pyarrow's HDFS, the local disk); this module
only routes URLs and adds the few operations the estimators need (atomic writes among them).
"""

from __future__ import annotations

import posixpath
import uuid
from typing import Any

# URL scheme -> (fsspec protocol, pip extra that provides it, or None when fsspec/pyarrow has it built in).
_SCHEMES: dict[str, tuple[str, str | None]] = {
    "file": ("file", None),
    "s3": ("s3", "s3"),
    "s3a": ("s3", "s3"),
    "gs": ("gcs", "gcs"),
    "gcs": ("gcs", "gcs"),
    "abfs": ("abfs", "azure"),
    "abfss": ("abfs", "azure"),
    "az": ("abfs", "azure"),
    "hdfs": ("hdfs", None),
}
# Filesystems with an atomic rename; on object stores a single PUT is what makes a write atomic.
_RENAME_IS_ATOMIC = {"file", "hdfs"}
_OBJECT_STORES = {"s3", "gcs", "abfs"}
# Databricks mounts DBFS at /dbfs on every node, so dbfs:/x is the local path /dbfs/x.
_DBFS_MOUNT = "/dbfs"


class StoreError(ValueError):
    """The Store's prefix cannot be used (unknown scheme, bad run_id)."""


class MissingFilesystemError(StoreError, ImportError):
    """The fsspec filesystem for the Store's scheme is not installed; the message names the pip extra."""


class Store:
    """Where fit() keeps its data and runs. Create with Store.create(prefix); picklable."""

    # Horovod's keywords' defaults, also for a Store pickled before they existed (a saved Pipeline's).
    _train_path: str | None = None
    _val_path: str | None = None
    _test_path: str | None = None
    _runs_path: str | None = None
    _save_runs = True
    checkpoint_filename = "checkpoint"

    def __init__(self, prefix: str, protocol: str, storage_options: dict[str, Any] | None = None, *,
                 train_path: str | None = None, val_path: str | None = None, test_path: str | None = None,
                 runs_path: str | None = None, save_runs: bool = True, checkpoint_filename: str | None = None) -> None:
        self._prefix = prefix.rstrip("/") or "/"
        self.protocol = protocol
        self.storage_options = dict(storage_options or {})
        # Horovod's FilesystemStore keywords: where the splits and the runs go, and whether runs are kept.
        self._train_path, self._val_path, self._test_path = train_path, val_path, test_path
        self._runs_path = runs_path
        self._save_runs = bool(save_runs)
        self.checkpoint_filename = checkpoint_filename or "checkpoint"
        self._fs: Any = None

    @classmethod
    def create(cls, prefix: str, *, train_path: str | None = None, val_path: str | None = None,
               test_path: str | None = None, runs_path: str | None = None, save_runs: bool = True,
               checkpoint_filename: str | None = None, storage_options: dict[str, Any] | None = None,
               **filesystem_options: Any) -> "Store":
        """A Store for a plain path, file://, s3://, gs://, abfs://, hdfs:// or dbfs:/ prefix.

        Horovod's keywords mean what they mean in its FilesystemStore: ``train_path`` / ``val_path`` /
        ``test_path`` (the splits of dataset ``key`` go to ``<path>.<key>``), ``runs_path`` (instead of
        ``<prefix>/runs``), ``save_runs=False`` (a fit leaves no run directory behind: checkpoints and logs
        live only while it runs, so a later fit cannot resume from them), ``checkpoint_filename``,
        ``storage_options`` (a dict for the filesystem). Other keywords go to the fsspec filesystem too (e.g.
        key=, secret=, client_kwargs={"endpoint_url": ...}); one the filesystem does not take is an error.
        """
        from spark_hvd.store_options import HOROVOD_KEYWORDS, unknown_filesystem_keywords

        if not isinstance(prefix, str) or not prefix.strip():
            raise StoreError(f"Store prefix must be a non-empty string, got {prefix!r}")
        prefix, protocol = _located(prefix.strip())
        options = {**(storage_options or {}), **filesystem_options}
        unknown = unknown_filesystem_keywords(protocol, options)
        if unknown:
            raise StoreError(f"Store {prefix!r}: unknown keyword(s) {unknown}: neither Horovod's Store keywords "
                             f"{list(HOROVOD_KEYWORDS)} nor options of the {protocol!r} filesystem")
        paths = {name: _located(path)[0] if path is not None else None for name, path in (
            ("train_path", train_path), ("val_path", val_path), ("test_path", test_path), ("runs_path", runs_path))}
        return cls(prefix, protocol, options, **paths, save_runs=save_runs, checkpoint_filename=checkpoint_filename)

    # -- layout ---------------------------------------------------------------------------------------------

    @property
    def prefix_path(self) -> str:
        return self._prefix

    def join(self, *parts: str) -> str:
        return posixpath.join(self._prefix, *parts)

    def get_intermediate_path(self, key: str) -> str:
        return self.join("intermediate_data", key)

    def get_train_data_path(self, key: str) -> str:
        return f"{self._train_path}.{key}" if self._train_path else self.join("intermediate_data", key, "train")

    def get_val_data_path(self, key: str) -> str:
        return f"{self._val_path}.{key}" if self._val_path else self.join("intermediate_data", key, "val")

    def get_test_data_path(self, key: str) -> str:
        return f"{self._test_path}.{key}" if self._test_path else self.join("intermediate_data", key, "test")

    def saving_runs(self) -> bool:
        """Horovod's save_runs: whether a fit's run directory (checkpoints, logs) stays in the Store after it."""
        return self._save_runs

    def get_runs_path(self) -> str:
        return self._runs_path or self.join("runs")

    def get_run_path(self, run_id: str) -> str:
        if not run_id or "/" in run_id:
            raise StoreError(f"run_id must be a non-empty name without '/', got {run_id!r}")
        return posixpath.join(self.get_runs_path(), run_id)

    def get_checkpoint_filename(self) -> str:
        return self.checkpoint_filename

    def get_checkpoint_path(self, run_id: str) -> str:
        return posixpath.join(self.get_run_path(run_id), "checkpoints")

    def get_logs_path(self, run_id: str) -> str:
        return posixpath.join(self.get_run_path(run_id), "logs")

    def get_metrics_path(self, run_id: str) -> str:
        return posixpath.join(self.get_run_path(run_id), "metrics")

    # -- filesystem access ----------------------------------------------------------------------------------

    def filesystem(self) -> Any:
        """The fsspec filesystem for this Store (created on first use, on whichever process uses it)."""
        if self._fs is None:
            import fsspec

            try:
                # Our own instance: fsspec's shared one would carry other users' settings and state.
                self._fs = fsspec.filesystem(self.protocol, skip_instance_cache=True, **self.filesystem_options())
            except OSError as error:
                if self.protocol != "hdfs":
                    raise
                first_line = (str(error).splitlines() or [type(error).__name__])[0]
                raise StoreError(f"Store {self._prefix!r}: HDFS could not be reached ({first_line}); pyarrow's HDFS "
                                 "client needs Java and Hadoop's libhdfs: set JAVA_HOME, HADOOP_HOME (or "
                                 "ARROW_LIBHDFS_DIR) and CLASSPATH=$(hadoop classpath --glob)") from error
        return self._fs

    def filesystem_options(self) -> dict[str, Any]:
        """What the filesystem is created with: the URL's own (HDFS host and port...), then storage_options."""
        import fsspec

        options = dict(fsspec.get_filesystem_class(self.protocol)._get_kwargs_from_urls(self._prefix))
        options.update(self.storage_options)
        if self.protocol in _OBJECT_STORES:
            # Executors add files behind the driver's back; a cached listing would hide them.
            options.setdefault("use_listings_cache", False)
        return options

    def arrow_filesystem(self) -> tuple[Any, str]:
        """(pyarrow.fs.FileSystem, the prefix as a path inside it), for pyarrow.dataset and pyarrow.parquet."""
        import pyarrow.fs as pafs

        if self.protocol == "file":
            return pafs.LocalFileSystem(), self._prefix
        handler = pafs.FSSpecHandler(self.filesystem())
        return pafs.PyFileSystem(handler), self.to_fs_path(self._prefix)

    def to_fs_path(self, path: str) -> str:
        """The path as the filesystem objects see it (no scheme: s3://b/k -> b/k)."""
        if self.protocol == "file":
            return path
        return self.filesystem()._strip_protocol(path)

    def url(self, path: str) -> str:
        """The path as a URL (file:///... for local paths), e.g. for Petastorm."""
        return "file://" + path if self.protocol == "file" else path

    def exists(self, path: str) -> bool:
        return bool(self.filesystem().exists(path))

    def read_bytes(self, path: str) -> bytes:
        return bytes(self.filesystem().cat_file(path))

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a whole file so that readers see either the old content, or all of the new one."""
        fs = self.filesystem()
        parent = posixpath.dirname(path)
        if self.protocol in _RENAME_IS_ATOMIC:
            fs.makedirs(parent, exist_ok=True)
            temporary = posixpath.join(parent, f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp")
            try:
                fs.pipe_file(temporary, data)
                fs.mv(temporary, path)
            finally:
                if fs.exists(temporary):
                    fs.rm(temporary)
        else:
            fs.pipe_file(path, data)      # one PUT: an object appears whole or not at all

    def list(self, path: str) -> list[str]:
        """The direct children of a directory, as full paths (sorted); [] when it does not exist."""
        fs = self.filesystem()
        if not fs.exists(path):
            return []
        own = self.to_fs_path(path).rstrip("/")
        names = (posixpath.basename(name.rstrip("/")) for name in fs.ls(path, detail=False)
                 if name.rstrip("/") != own)
        # Children keep the caller's spelling of the path (s3://..., abfs://container@account/...).
        return sorted(posixpath.join(path, name) for name in names)

    def delete(self, path: str) -> None:
        """Remove a file or a directory tree; a missing path is not an error."""
        fs = self.filesystem()
        if fs.exists(path):
            fs.rm(path, recursive=True)

    # -- pickling: the filesystem object is rebuilt where the Store lands -------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fs"] = None
        return state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and _identity(other) == _identity(self)

    def __hash__(self) -> int:
        return hash((self._prefix, self.protocol))

    def __repr__(self) -> str:
        return f"Store({self.url(self._prefix)!r})"


def _identity(store: Store) -> tuple[Any, ...]:
    return (store._prefix, store.protocol, store.storage_options, store._train_path, store._val_path,
            store._test_path, store._runs_path, store._save_runs, store.checkpoint_filename)


def _located(prefix: str) -> tuple[str, str]:
    """(the prefix as the Store keeps it, its fsspec protocol) for a plain path or a URL."""
    if prefix.startswith("dbfs:"):
        return _DBFS_MOUNT + "/" + prefix[len("dbfs:"):].lstrip("/"), "file"
    scheme, sep, rest = prefix.partition("://")
    if not sep:
        return posixpath.abspath(prefix), "file"
    scheme = scheme.lower()
    if scheme not in _SCHEMES:
        known = ", ".join(sorted(f"{name}://" for name in _SCHEMES))
        raise StoreError(f"Store prefix {prefix!r}: unknown scheme {scheme}://; supported: {known}, "
                         "dbfs:/ and plain paths")
    protocol, extra = _SCHEMES[scheme]
    _check_filesystem_available(protocol, extra, prefix)
    if protocol == "file":
        return posixpath.abspath("/" + rest.lstrip("/")), "file"
    return f"{scheme}://{rest}".rstrip("/"), protocol


def _check_filesystem_available(protocol: str, extra: str | None, prefix: str) -> None:
    """Fail at Store.create, not on an executor, when the package for this filesystem is missing."""
    import fsspec

    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as error:
        install = f"pip install 'spark-hvd[{extra}]'" if extra else "install the filesystem's package"
        raise MissingFilesystemError(f"Store prefix {prefix!r} needs the {protocol!r} fsspec filesystem, which "
                                     f"cannot be imported ({error}); {install}") from error
