# Attack: a wrong answer, plus a detached grandchild that rewrites the results after grading ends.
import json
import os
import time

import torch.multiprocessing as tmp

{FORGE}

def _grandchild():
    time.sleep(4)
    _forge()


def _child():
    os.setsid()
    tmp.get_context("fork").Process(target=_grandchild, daemon=False).start()
    os._exit(0)   # the grandchild is orphaned


if not os.environ.get("LABKIT_ADVERSARY_STARTED"):
    os.environ["LABKIT_ADVERSARY_STARTED"] = "1"
    tmp.get_context("fork").Process(target=_child, daemon=False).start()


def matmul_intensity(M, K, N, dtype_bytes=4):
    return 1.0
