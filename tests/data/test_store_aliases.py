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


def test_horovods_store_keywords_keep_their_meaning(tmp_path):
    from spark_hvd.common.store import LocalStore

    store = LocalStore(str(tmp_path), save_runs=False, train_path=str(tmp_path / "train"),
                       val_path=str(tmp_path / "val"), test_path=str(tmp_path / "test"),
                       runs_path=str(tmp_path / "elsewhere"), checkpoint_filename="ckpt")
    assert store.saving_runs() is False and store.storage_options == {}   # nothing reaches fsspec
    assert store.get_train_data_path("3") == f"{tmp_path}/train.3"          # Horovod's <train_path>.<idx>
    assert store.get_val_data_path("3") == f"{tmp_path}/val.3"
    assert store.get_test_data_path("3") == f"{tmp_path}/test.3"
    assert store.get_checkpoint_path("r1") == f"{tmp_path}/elsewhere/r1/checkpoints"
    assert store.get_checkpoint_filename() == "ckpt"
    assert LocalStore(str(tmp_path)).saving_runs() is True


def test_a_keyword_neither_horovod_nor_the_filesystem_knows_is_named(tmp_path):
    import pytest

    from spark_hvd.common.store import HDFSStore, LocalStore
    from spark_hvd.store import StoreError

    with pytest.raises(StoreError, match=r"unknown keyword\(s\) \['save_run'\].*'file' filesystem"):
        LocalStore(str(tmp_path), save_run=False)
    with pytest.raises(StoreError, match=r"\['colour'\]"):
        Store.create(str(tmp_path), storage_options={"colour": "red"})
    # The filesystem's own options pass, loose or as Horovod's storage_options dict.
    assert LocalStore(str(tmp_path), auto_mkdir=True).storage_options == {"auto_mkdir": True}
    assert Store.create(str(tmp_path), storage_options={"auto_mkdir": True}).storage_options == {"auto_mkdir": True}
    hdfs = HDFSStore("hdfs://nn:8020/x", user="hvd", kerb_ticket="/tmp/ticket", driver="libhdfs")
    assert hdfs.storage_options == {"user": "hvd", "kerb_ticket": "/tmp/ticket"}
    with pytest.raises(StoreError, match=r"\['namenode'\]"):
        HDFSStore("/x", namenode="nn")
