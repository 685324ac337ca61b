"""Bench: an alpha-beta schedule simulator of spark-hvd's collectives, for world sizes this machine cannot run.

Each algorithm is written as the list of symmetric rounds it executes (``rounds.Round``: how many messages each
rank sends, how large, over which link, how many flows share a host's NIC, how many bytes its CPU touches);
``cost.round_time`` prices one round on a ``cluster.Cluster``: latency, bandwidth with NIC sharing, and CPU time
shared among the ranks of a host (p ranks on c cores). The command line is bench/simulate.py.
"""
