"""Rank: what the three Horovod-style APIs (``collective``, ``collective.torch``, ``collective.tensorflow``, and
``collective.keras`` over the latter) share: their common names, Horovod's build queries, the framework ``init``
and gradient compression."""
