"""Store: URL routing, layout, and file operations on the local disk and on a real S3 server (moto)."""

from __future__ import annotations

import importlib.util
import os
import pickle

import fsspec
import pytest

from spark_hvd.store import MissingFilesystemError, Store, StoreError


def test_plain_path_file_url_and_dbfs_are_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Store.create("relative/dir").prefix_path == str(tmp_path / "relative" / "dir")
    assert Store.create(f"file://{tmp_path}/a/").prefix_path == f"{tmp_path}/a"
    dbfs = Store.create("dbfs:/ml/hvd")
    assert (dbfs.prefix_path, dbfs.protocol) == ("/dbfs/ml/hvd", "file")
    assert Store.create("dbfs:/").prefix_path == "/dbfs"


def test_layout_follows_horovod(tmp_path):
    store = Store.create(str(tmp_path))
    assert store.get_train_data_path("k1") == f"{tmp_path}/intermediate_data/k1/train"
    assert store.get_val_data_path("k1") == f"{tmp_path}/intermediate_data/k1/val"
    assert store.get_run_path("r7") == f"{tmp_path}/runs/r7"
    assert store.get_checkpoint_path("r7") == f"{tmp_path}/runs/r7/checkpoints"
    assert store.get_logs_path("r7") == f"{tmp_path}/runs/r7/logs"
    assert store.get_metrics_path("r7") == f"{tmp_path}/runs/r7/metrics"
    with pytest.raises(StoreError, match="run_id"):
        store.get_run_path("a/b")


def test_object_store_urls_route_to_their_fsspec_filesystems():
    s3 = Store.create("s3://bucket/hvd", anon=True)
    assert (s3.protocol, s3.prefix_path) == ("s3", "s3://bucket/hvd")
    assert type(s3.filesystem()).__name__ == "S3FileSystem"
    assert s3.to_fs_path(s3.get_train_data_path("k")) == "bucket/hvd/intermediate_data/k/train"
    assert Store.create("s3a://bucket/x").protocol == "s3"
    hdfs = Store.create("hdfs://namenode:8020/user/me/hvd")
    assert hdfs.protocol == "hdfs"
    assert fsspec.get_filesystem_class(hdfs.protocol).__name__ == "HadoopFileSystem"
    assert hdfs.filesystem_options() == {"host": "namenode", "port": 8020}


def test_unreachable_hdfs_says_what_it_needs():
    store = Store.create("hdfs://127.0.0.1:1/hvd")            # no namenode there (nor, here, libhdfs)
    with pytest.raises(StoreError, match=r"'hdfs://127.0.0.1:1/hvd': HDFS could not be reached .*HADOOP_HOME"):
        store.filesystem()


@pytest.mark.parametrize("prefix, package, extra, class_name", [
    ("gs://bucket/hvd", "gcsfs", "gcs", "GCSFileSystem"),
    ("abfs://container/hvd", "adlfs", "azure", "AzureBlobFileSystem"),
])
def test_gcs_and_azure_need_their_packages(prefix, package, extra, class_name):
    if importlib.util.find_spec(package) is not None:
        assert fsspec.get_filesystem_class(Store.create(prefix).protocol).__name__ == class_name
        return
    with pytest.raises(MissingFilesystemError, match=rf"pip install 'spark-hvd\[{extra}\]'") as raised:
        Store.create(prefix)
    assert isinstance(raised.value, ImportError) and prefix in str(raised.value)


@pytest.mark.parametrize("prefix", ["ftp2://host/x", "", "   "])
def test_bad_prefixes_are_refused_clearly(prefix):
    with pytest.raises(StoreError, match="unknown scheme|non-empty"):
        Store.create(prefix)


def test_local_file_operations(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    path = store.join("runs", "r1", "logs", "a.txt")
    assert not store.exists(path)
    store.write_bytes(path, b"hello")
    store.write_bytes(store.join("runs", "r1", "logs", "b.txt"), b"")
    assert store.exists(path) and store.read_bytes(path) == b"hello"
    assert store.list(store.get_logs_path("r1")) == [f"{store.get_logs_path('r1')}/a.txt",
                                                      f"{store.get_logs_path('r1')}/b.txt"]
    assert store.list(store.join("missing")) == []
    store.delete(store.get_run_path("r1"))
    assert not store.exists(path) and store.list(store.get_runs_path()) == []
    store.delete(store.join("missing"))           # no error


def test_local_write_is_atomic(tmp_path, monkeypatch):
    """While the new content is being written, the target still holds the old one; then all of the new."""
    store = Store.create(str(tmp_path))
    path = store.join("checkpoints", "model.pt")
    store.write_bytes(path, b"old")
    fs = store.filesystem()
    seen_during_write = []
    original_pipe = fs.pipe_file

    def pipe_and_look(target, data, **kwargs):
        original_pipe(target, data, **kwargs)
        assert target != path and os.path.dirname(target) == os.path.dirname(path)
        seen_during_write.append(store.read_bytes(path))

    monkeypatch.setattr(fs, "pipe_file", pipe_and_look)
    store.write_bytes(path, b"new" * 1000)
    assert seen_during_write == [b"old"]
    assert store.read_bytes(path) == b"new" * 1000
    assert os.listdir(tmp_path / "checkpoints") == ["model.pt"]


def test_failed_local_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    store = Store.create(str(tmp_path))
    path = store.join("model.pt")
    store.write_bytes(path, b"old")

    def broken_rename(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(store.filesystem(), "mv", broken_rename)
    with pytest.raises(OSError, match="disk gone"):
        store.write_bytes(path, b"new")
    assert store.read_bytes(path) == b"old"
    assert os.listdir(tmp_path) == ["model.pt"]


def test_store_pickles_without_its_filesystem(tmp_path):
    store = Store.create(str(tmp_path))
    store.write_bytes(store.join("f"), b"1")              # creates the filesystem object
    copy = pickle.loads(pickle.dumps(store))
    assert copy == store and copy._fs is None
    assert copy.read_bytes(copy.join("f")) == b"1"


def test_arrow_filesystem_for_local_and_object_stores(tmp_path):
    import pyarrow.fs as pafs

    local_fs, local_path = Store.create(str(tmp_path)).arrow_filesystem()
    assert isinstance(local_fs, pafs.LocalFileSystem) and local_path == str(tmp_path)
    s3_fs, s3_path = Store.create("s3://bucket/hvd", anon=True).arrow_filesystem()
    assert isinstance(s3_fs, pafs.PyFileSystem) and s3_path == "bucket/hvd"


# -- S3, on a real S3-protocol server -------------------------------------------------------------------------

def test_s3_file_operations(s3_endpoint):
    store = Store.create("s3://spark-hvd-tests/ops", **s3_endpoint)
    path = store.join("runs", "r1", "metrics", "epoch-0.json")
    assert not store.exists(path)
    store.write_bytes(path, b'{"loss": 1}')
    store.write_bytes(store.join("runs", "r1", "metrics", "epoch-1.json"), b'{"loss": 0.5}')
    assert store.exists(path) and store.read_bytes(path) == b'{"loss": 1}'
    assert store.list(store.get_metrics_path("r1")) == ["s3://spark-hvd-tests/ops/runs/r1/metrics/epoch-0.json",
                                                        "s3://spark-hvd-tests/ops/runs/r1/metrics/epoch-1.json"]
    store.write_bytes(path, b'{"loss": 2}')
    assert store.read_bytes(path) == b'{"loss": 2}'
    copy = pickle.loads(pickle.dumps(store))
    assert copy.read_bytes(path) == b'{"loss": 2}'
    store.delete(store.get_run_path("r1"))
    assert not store.exists(path) and store.list(store.get_metrics_path("r1")) == []


def test_s3_write_is_one_put(s3_endpoint, monkeypatch):
    store = Store.create("s3://spark-hvd-tests/put", **s3_endpoint)
    fs = store.filesystem()
    calls = []
    original_pipe = fs.pipe_file
    monkeypatch.setattr(fs, "pipe_file",
                        lambda target, data, **kw: (calls.append(target), original_pipe(target, data, **kw))[1])
    monkeypatch.setattr(fs, "mv", None)    # a rename on an object store is a copy: must not be used
    store.write_bytes(store.join("model.pt"), b"x" * 100)
    assert calls == [store.join("model.pt")]
    assert store.read_bytes(store.join("model.pt")) == b"x" * 100
