"""`lincorr` under torchrun with a faulty or counted rank, for tests/test_distributed.py.

LINCORR_TEST_COUNT_DIR: each rank writes how many pieces it ran to `rank<R>` there on exit.
LINCORR_TEST_DIE_AFTER=N: rank 1 dies (as a crashed node does, without cleanup) when it would start piece N+1.
LINCORR_TEST_RANK0_LATE_S=S: rank 0 starts S seconds after the others, as on a loaded machine.
"""

import atexit
import os
import sys
import time
from pathlib import Path

from lincorr.collection import pieces
from lincorr.cli import main

rank = os.environ.get("RANK", "0")
real_run_piece = pieces.run_piece
ran = [0]


def counted_run_piece(*args, **kwargs):
    if rank == "1" and "LINCORR_TEST_DIE_AFTER" in os.environ and ran[0] == int(os.environ["LINCORR_TEST_DIE_AFTER"]):
        os._exit(1)
    ran[0] += 1
    return real_run_piece(*args, **kwargs)


pieces.run_piece = counted_run_piece
if "LINCORR_TEST_COUNT_DIR" in os.environ:
    atexit.register(lambda: (Path(os.environ["LINCORR_TEST_COUNT_DIR"]) / f"rank{rank}").write_text(str(ran[0])))
if rank == "0":
    time.sleep(float(os.environ.get("LINCORR_TEST_RANK0_LATE_S", "0")))
sys.exit(main(sys.argv[1:]))
