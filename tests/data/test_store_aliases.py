"""Horovod's store import path and constructors build the same Store."""

from __future__ import annotations

from spark_hvd.store import Store


def test_horovod_store_names_build_stores(tmp_path):
    from spark_hvd.common.store import DBFSLocalStore, HDFSStore, LocalStore

    local = LocalStore(str(tmp_path))
    assert isinstance(local, Store) and local == Store.create(str(tmp_path))
    assert local.get_checkpoint_path("r1") == Store.create(str(tmp_path)).get_checkpoint_path("r1")
    assert HDFSStore("/user/hvd").prefix_path == Store.create("hdfs:///user/hvd").prefix_path
    assert HDFSStore("hdfs://nn:8020/x").prefix_path == "hdfs://nn:8020/x"
    assert DBFSLocalStore("dbfs:/ml/hvd").prefix_path == "/dbfs/ml/hvd"
