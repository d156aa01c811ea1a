"""Several search processes share one study: a live trial of another process is never
marked failed; a dead process's trial is asked again exactly once; a trial whose cell
another process is running is not an error."""
from __future__ import annotations

import socket
import subprocess
import sys

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from ablate.apps import search as search_mod
from ablate.apps.search import load_space, params_key, requeue_dead_trials, run_search
from ablate.loop.outputs import CellBusy
from test_search import SPACE, FakeCell, storage


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({**SPACE, "pruner": {"type": "none"}}))
    return load_space(path)


def running_trial(space, tmp_path, pid, host=None):
    """A trial RUNNING in the shared study, claimed by process `pid` of `host`."""
    study = optuna.create_study(study_name=space["study_name"], storage=storage(tmp_path),
                                direction="maximize", load_if_exists=True)
    trial = study.ask(space["distributions"])
    trial.set_user_attr("host", host or socket.gethostname())
    trial.set_user_attr("pid", pid)
    return study, trial.number


def test_a_live_trial_of_another_search_process_is_left_running(space, tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        _, live = running_trial(space, tmp_path, other.pid)
        _, remote = running_trial(space, tmp_path, 1, host="another-machine")
        study = run_search(space, n_trials=2, storage=storage(tmp_path),
                           out_dir=tmp_path / "o", run_fn=FakeCell())
        states = {t.number: t.state for t in study.get_trials()}
        assert states[live] == TrialState.RUNNING and states[remote] == TrialState.RUNNING
        assert list(states.values()).count(TrialState.FAIL) == 0
        study.tell(live, 0.5)          # the other process can still finish its trial
    finally:
        other.kill()
        other.wait()


def test_a_dead_processes_trial_is_requeued_once_even_after_a_kill(space, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    study, number = running_trial(space, tmp_path, dead.pid)
    params = study.trials[number].params
    tell = study.tell

    def killed_before_tell(*a, **kw):
        raise KeyboardInterrupt        # the process dies between enqueue and tell
    study.tell = killed_before_tell
    with pytest.raises(KeyboardInterrupt):
        requeue_dead_trials(study)
    study.tell = tell
    requeue_dead_trials(study)         # the next start: no second copy of the trial
    waiting = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert [t.system_attrs["fixed_params"] for t in waiting] == [params]
    assert study.trials[number].state == TrialState.FAIL
    cell = FakeCell()
    run_search(space, n_trials=2, storage=storage(tmp_path), out_dir=tmp_path / "o",
               run_fn=cell)
    assert cell.calls[0][0] == f"trial_{params_key(params)}"


def test_a_busy_trial_cell_is_skipped_not_fatal(space, tmp_path, monkeypatch):
    monkeypatch.setattr(search_mod.time, "sleep", lambda s: None)
    inner = FakeCell()
    calls = []

    def busy_first(cfg, cell_dir, on_eval=None):
        calls.append(cell_dir)
        if len(calls) == 1:
            raise CellBusy(f"cell {cell_dir} is being run by process 1")
        return inner(cfg, cell_dir, on_eval)
    study = run_search(space, n_trials=2, storage=storage(tmp_path), out_dir=tmp_path / "o",
                       run_fn=busy_first)
    states = [t.state for t in study.get_trials()]
    assert states.count(TrialState.COMPLETE) == 2 and states.count(TrialState.FAIL) == 1
