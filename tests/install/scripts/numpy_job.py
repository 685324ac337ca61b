"""A 2-rank numpy job for the installed wheel: each rank checks what it got, and says where collective came from."""

import numpy as np

import collective as hvd

hvd.init()
total = hvd.allreduce(np.full(1000, hvd.rank() + 1.0), op=hvd.Sum, name="total")
assert np.all(total == 3.0), total[:4]
rows = hvd.allgather(np.full((hvd.rank() + 1, 2), hvd.rank(), dtype=np.int32))
assert rows.shape == (3, 2), rows.shape
print(f"numpy job ok rank={hvd.rank()} size={hvd.size()} collective={hvd.__file__}", flush=True)
hvd.shutdown()
