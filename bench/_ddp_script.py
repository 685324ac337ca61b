"""The DDP training script bench/spark_run.py runs end to end, by path, on both TorchDistributors:

    _ddp_script.py STEPS OUT      (rank 0 writes its median step time to OUT as JSON)
"""

import json
import os
import sys

from spark_run import ddp_steps

if __name__ == "__main__":
    result = ddp_steps(int(sys.argv[1]))
    if os.environ["RANK"] == "0":
        with open(sys.argv[2] + ".partial", "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(sys.argv[2] + ".partial", sys.argv[2])
