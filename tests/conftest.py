"""Test isolation shared by every test module."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from ablate.loop.config import ALLOWED

# Cells run by tests track nothing (as .ci/run does): an offline wandb run per test cell
# starts wandb's service, and its exit hook printed a HandleAbandonedError traceback after
# pytest's summary. tests/core/test_tracking.py sets run.wandb_mode=offline where it tests it.
os.environ.setdefault("WANDB_MODE", "disabled")

# Tests are grouped by the package they test (tests/<package>/test_*.py, no __init__.py:
# pytest's default "prepend" import mode names each module by its file name). Some share
# helpers across groups (`import test_harness_util`, `from test_learners import ...`), so
# every group's folder is importable from every other.
TESTS = os.path.dirname(os.path.abspath(__file__))
for _group in sorted(os.listdir(TESTS)):
    _path = os.path.join(TESTS, _group)
    if os.path.isdir(_path) and any(n.startswith("test_") for n in os.listdir(_path)):
        if _path not in sys.path:
            sys.path.insert(0, _path)


@pytest.fixture(autouse=True)
def _restore_logging_handlers():
    """A CLI run in-process (Hydra's job logging, `-m` included) attaches handlers bound
    to the test's captured stream; once pytest closes that stream, a later test's log
    call prints a "Logging error" traceback. Put every logger's handlers back as they
    were before the test."""
    loggers = [logging.getLogger()] + [logging.getLogger(n) for n in
                                       list(logging.root.manager.loggerDict)]
    saved = {lg: list(lg.handlers) for lg in loggers}
    yield
    for lg in [logging.getLogger()] + [logging.getLogger(n) for n in
                                       list(logging.root.manager.loggerDict)]:
        keep = saved.get(lg, [])
        for h in list(lg.handlers):
            if h not in keep:
                lg.removeHandler(h)


@pytest.fixture(autouse=True)
def _restore_registries():
    """A test that imports a user's plugin module (`algo.plugins`, an external environment)
    registers names for the rest of the process; a later test (docs/configuration.md's
    freshness, the docs-list-every-name checks) would see them. Drop what a test added,
    and forget the module that added it, so the next import registers it again."""
    registries = [r for r in ALLOWED.values() if isinstance(r, dict)]
    saved = [dict(r) for r in registries]
    yield
    for reg, before in zip(registries, saved):
        for name in [n for n in reg if n not in before]:
            sys.modules.pop(getattr(reg[name], "__module__", ""), None)
            del reg[name]


HOLD = ("import sys, time; from ablate.loop.outputs import CellDir; c = CellDir(sys.argv[1]); "
        "c.lock(); print('held', flush=True); time.sleep(600)")


@pytest.fixture
def hold_cell():
    """hold_cell(dir): a separate live process that holds the cell's lock (as a running
    cell does) until the test kills it, or until teardown."""
    procs = []

    def start(cell):
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(cell)],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc
    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
