"""Run `python -m ablate` and SIGKILL this very process at a chosen point, for the
resume tests:  python tests/helpers/kill_at.py POINT STEP [overrides...]

    build       after the EmailDB build staged every email (temporary files on disk)
    step        step STEP computed and its update applied, before its metrics row
    eval        halfway through writing the eval rows of step STEP (torn last line)
    checkpoint  the checkpoint of step STEP written to its temporary folder, not renamed
"""
from __future__ import annotations

import os
import signal
import sys


def die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str, step: int) -> None:
    if point == "build":
        from ablate.envs.email import db
        stage = db._stage_emails

        def staged(*a, **kw):
            out = stage(*a, **kw)
            die()
            return out
        db._stage_emails = staged
    elif point in ("step", "eval"):
        from ablate.loop.outputs import CellDir
        append = CellDir.append

        def append_then_die(self, name, rows):
            rows = [rows] if isinstance(rows, dict) else rows
            if point == "step" and name == "metrics.jsonl" and rows[0]["step"] == step:
                die()
            if point == "eval" and name == "eval.jsonl" and rows[0]["step"] == step:
                append(self, name, rows[: len(rows) // 2])
                with (self.path / name).open("a") as fh:
                    fh.write('{"step": %d, "task_id": "torn' % step)
                die()
            return append(self, name, rows)
        CellDir.append = append_then_die
    elif point == "checkpoint":
        from ablate.learners.torch_learner import TorchLearner
        save_state = TorchLearner._save_state

        def save_then_die(self, path, extra):
            save_state(self, path, extra)
            if extra["step"] == step:
                die()
        TorchLearner._save_state = save_then_die
    else:
        raise SystemExit(f"unknown kill point {point!r}")


if __name__ == "__main__":
    install(sys.argv[1], int(sys.argv[2]))
    from ablate.apps.cli import main
    sys.argv = [sys.argv[0]] + sys.argv[3:]
    main()
