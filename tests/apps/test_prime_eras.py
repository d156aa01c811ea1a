"""Every real prime-rl key has a rule (issue 64 item 15): the keys of prime-rl's RLConfig
at a commit of each era (tests/data/prime/prime_rl_keys_*.txt, read from its pydantic
classes) are each mapped, ignored with a note, or refused with what to do; none is an
"unknown key". A key that only tunes throughput is a note."""
from __future__ import annotations

from pathlib import Path

import pytest

from ablate.prime.cli import prepare
from ablate.prime.convert import _rule
from ablate.prime.schema import IGNORE, PRIME_RL, REFUSE
from ablate.prime.source import PrimeError, Source

DATA = Path(__file__).resolve().parents[1] / "data" / "prime"
ERAS = {"A": "1826b1892", "A_late": "7e456ace2", "B": "8be123be4", "C": "9975d8868",
        "C_latest": "559b44772"}


def _keys(era: str) -> list[str]:
    lines = (DATA / f"prime_rl_keys_{era}.txt").read_text().splitlines()
    assert lines[0].startswith(f"# prime-rl's RLConfig keys at commit {ERAS[era]}")
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _rule_of(key: str):
    """The rule of `key`: its own, a `rest` table's above it, or the whole table's that
    holds it (convert.py never reads below a whole table)."""
    parts = key.split(".")
    for i in range(1, len(parts)):
        head = ".".join(parts[:i])
        if head in PRIME_RL and PRIME_RL[head].whole:
            return PRIME_RL[head]
    return _rule(Source.__new__(Source), PRIME_RL, key)


@pytest.mark.parametrize("era", list(ERAS))
def test_every_key_of_the_era_has_a_rule(era, monkeypatch):
    monkeypatch.setattr(Source, "where", lambda self, key: "x.toml:1", raising=False)
    keys = _keys(era)
    assert len(keys) > 300
    unknown = []
    for key in keys:
        try:
            _rule_of(key)
        except PrimeError:
            unknown.append(key)
    assert unknown == []


def _era_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "rl.toml"
    path.write_text('max_steps = 10\n[model]\nname = "Qwen/Qwen3-4B-Instruct-2507"\n' + body)
    return path


ERA_BODIES = {
    "A_late": ('[orchestrator]\nbatch_size = 64\nrollouts_per_example = 8\n'
               'max_inflight_rollouts = 128\n[[orchestrator.env]]\nid = "x/enronhop_env"\n'),
    "B": ('[orchestrator]\nbatch_size = 64\ngroup_size = 8\nmax_inflight_rollouts = 128\n'
          '[[orchestrator.train.env]]\nid = "x/enronhop_env"\n'),
    "C": ('[orchestrator]\nbatch_size = 64\ngroup_size = 8\npool_size = 4\n'
          '[[orchestrator.train.source]]\nenv.taskset.id = "x/enronhop_env"\n'),
}


@pytest.mark.parametrize("era", list(ERA_BODIES))
def test_a_throughput_key_is_a_note(era, tmp_path, capsys):
    path = _era_file(tmp_path, ERA_BODIES[era])
    conv, ours, _, _ = prepare([str(path), "--cfg", "job"])
    keys = {o.key: o.value for o in ours}
    assert (keys["trainer.tasks_per_step"], keys["trainer.group_size"]) == (8, 8)
    assert keys["env"] == "enronhop"
    notes = [n for n in conv.notes if "ignored" in n]
    throughput = "orchestrator.pool_size" if era == "C" else "orchestrator.max_inflight_rollouts"
    assert len(notes) == 1 and notes[0].startswith(f"{path}:7: {throughput} ignored: ")


def test_the_rules_say_what_to_do():
    for key, rule in PRIME_RL.items():
        if rule.field == REFUSE:
            assert "remove" in rule.why or "give" in rule.why, key
        if rule.field == IGNORE:
            assert rule.why, key
        if rule.only:
            assert rule.otherwise, key


@pytest.mark.parametrize("body,expected", [
    ('[trainer.optim]\ntype = "muon"\n', ':5: trainer.optim.type: \'muon\' refused: ablate '
     'trains with AdamW'),
    ('[trainer.scheduler]\ntype = "cosine"\n', ":5: trainer.scheduler.type: 'cosine' "
     "refused: ablate's lr is constant"),
    ('[trainer.loss]\ntoken_mask_low = 0.1\n', ":5: trainer.loss.token_mask_low: refused: "
     "ablate's loss is its algorithm's"),
    ('[orchestrator.buffer]\nonline_difficulty_filtering = true\n',
     ":5: orchestrator.buffer.online_difficulty_filtering: refused: difficulty filtering"),
])
def test_a_key_that_changes_results_ablate_cannot_follow_is_refused(tmp_path, body, expected):
    path = _era_file(tmp_path, ERA_BODIES["A_late"] + body)
    text = path.read_text()
    line = text[:text.index(body)].count("\n") + 2
    expected = expected.replace(":5:", f":{line}:")
    with pytest.raises(PrimeError) as exc:
        prepare([str(path), "--cfg", "job"])
    assert str(exc.value).startswith(f"{path}{expected}")


def test_optimizer_and_taskset_keys_are_mapped(tmp_path):
    body = (ERA_BODIES["C"] + 'env.taskset.max_turns = 3\n[trainer.optim]\nmax_norm = 0.5\n'
            'betas2 = 0.95\ntype = "adamw"\n[orchestrator.eval]\nskip_first_step = true\n'
            'interval = 5\n')
    path = _era_file(tmp_path, body)
    _, ours, _, _ = prepare([str(path), "--cfg", "job"])
    keys = {o.key: o.value for o in ours}
    assert keys["learner.grad_clip"] == 0.5 and keys["learner.betas"] == [0.9, 0.95]
    assert keys["env.max_turns"] == 3
    assert (keys["eval.every"], keys["eval.at_start"]) == (5, False)


def test_a_typo_below_a_known_table_is_still_unknown(tmp_path):
    path = _era_file(tmp_path, ERA_BODIES["A_late"] + "[trainer.model.lora]\nrnk = 8\n")
    with pytest.raises(PrimeError, match=r"rl.toml:11: trainer.model.lora.rnk: unknown key "
                                         r"\(did you mean trainer.model.lora.rank\?\)"):
        prepare([str(path), "--cfg", "job"])
