"""Rank child (and the driver's sample check): reading a rank's shard of the materialised Parquet in lockstep
batches, by the Arrow or the Petastorm reader, and turning Arrow columns into numpy by their kind."""
