"""Rank: how a TensorFlow collective reaches the engine (bridge.py, engine_calls.py), from eager code, a
``tf.function``, a TF1 ``Session`` graph (session_ops.py), or buckets that overlap backward (overlap.py)."""
