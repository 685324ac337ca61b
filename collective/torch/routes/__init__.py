"""Rank: the routes a ``collective.torch`` op takes (the engine for host tensors, NCCL for CUDA tensors,
host staging onto the engine), each returning the one handle type of handles.py."""
