"""A script that exits with CODE on rank RANK and succeeds elsewhere: exit_on_rank.py RANK CODE."""

import os
import sys

if __name__ == "__main__":
    bad_rank, code = int(sys.argv[1]), int(sys.argv[2])
    print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} running {sys.argv[0]}", flush=True)
    if int(os.environ["RANK"]) == bad_rank:
        sys.exit(code)
    sys.exit(0)
