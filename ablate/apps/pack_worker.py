"""The process of one pack of hydra/launcher=pack (ablate/apps/pack.py):
`python -m ablate.apps.pack_worker JOB OUT` reads the pack and Hydra's state from JOB
(written by ablate.apps.pack.run_in_process), runs the pack's cells (run_pack) and
writes their JobReturns to OUT. Its exit status is 0 whenever OUT was written: a cell
that failed is FAILED in its own directory, not a failed pack."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, setup_globals
import cloudpickle

from ablate.apps.argv import register_launchers
from ablate.apps.pack import job_runner, run_pack


def main(job: str, out: str) -> int:
    register_launchers()   # the launcher's module found as the grid's process found it
    state = cloudpickle.loads(Path(job).read_bytes())
    setup_globals()
    Singleton.set_state(state["singletons"])
    run_alone = job_runner(state["hydra_context"], state["task_function"], state["logging"])
    returns = [portable(r) for r in run_pack(state["pack"], run_alone)]
    tmp = Path(f"{out}.tmp{os.getpid()}")
    tmp.write_bytes(cloudpickle.dumps(returns))
    tmp.replace(out)
    return 0


def portable(ret: JobReturn) -> JobReturn:
    """A JobReturn the grid's process can load: a failed job's exception that does not
    pickle travels as a RuntimeError with its text."""
    if ret.status == JobStatus.FAILED:
        try:
            cloudpickle.loads(cloudpickle.dumps(ret._return_value))
        except Exception:   # noqa: BLE001 - any exception that does not round-trip
            ret._return_value = RuntimeError(str(ret._return_value))
    return ret


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
