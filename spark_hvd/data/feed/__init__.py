"""Rank child: a split's batches for the training loop (rank_feed.py), after transformation_fn, run in the
loop or by decode workers ahead of it (decode_pool.py, decode_worker.py)."""
