"""The data path of fit(): check the DataFrame, materialise it to Parquet under a Store, read shards per rank.

    plan = check_schema(df, ["features"], ["label"], validation=0.1)        # on the driver: the schema only
    data = materialize_checked(df, store, plan, seed=1, num_proc=4)       # one pass: write and check the rows
    # on each rank:
    reader = make_reader(data, "train", rank, size, batch_size=64, shuffle=True, seed=1)
    steps = steps_per_epoch(data.train_rows, size, 64)
    for batch in itertools.islice(reader.batches(epoch), steps): ...
"""

from spark_hvd.data.columns import ColumnSpec
from spark_hvd.data.input_checks import check_input, check_schema
from spark_hvd.data.lockstep import steps_per_epoch
from spark_hvd.data.materialize import materialization_key, materialize, materialize_checked
from spark_hvd.data.materialized import DataFile, Materialized
from spark_hvd.data.read.readers import make_reader
from spark_hvd.data.read.shard_reader import ShardReader
from spark_hvd.data.feed.transformation import BatchTransformation

__all__ = [
    "BatchTransformation", "ColumnSpec", "DataFile", "Materialized", "ShardReader", "check_input", "check_schema", "make_reader",
    "materialization_key", "materialize", "materialize_checked", "steps_per_epoch",
]
