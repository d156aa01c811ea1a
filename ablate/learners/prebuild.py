"""Build DeepSpeed's JIT ops once, ahead of the first learner (CI, container images).

    python -m ablate.learners.prebuild

On CPU the only op a ZeRO-3 learner needs is the shared-memory comm op; its first build
takes 40-60 s (gcc + ninja). It lands in $TORCH_EXTENSIONS_DIR (default
~/.cache/torch_extensions/<python+torch tag>/), where torch's extension loader looks for
it; a second run finds it there and returns in about a second. CI: cache that directory
keyed on the python, torch and deepspeed versions and run this step before pytest (or
install a wheel built with DS_BUILD_SHM_COMM=1, see docs/cpu.md). It loads through
ablate.learners.oplock, as every DeepSpeed learner does: a stale lock is broken, a
half-built folder rebuilt, and a lock a live process holds past ABLATE_OPLOCK_WAIT_S ends
this with one line and exit status 2."""
from __future__ import annotations

import os
import sys
import time

from ablate.learners.oplock import OpLockTimeout, load_comm_op


def prebuild() -> dict:
    from deepspeed.accelerator import get_accelerator
    t = time.time()
    built = {}
    if load_comm_op() is not None:
        built["deepspeed_shm_comm"] = round(time.time() - t, 1)
    return {"accelerator": get_accelerator().device_name(), "built_s": built,
            "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR",
                                                   "~/.cache/torch_extensions (default)")}


def main() -> int:
    try:
        print(prebuild())
    except OpLockTimeout as e:
        print(f"ablate: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
