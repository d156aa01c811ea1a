"""The tiny model's warm start on another environment (ablate/recipes/tiny_warmstart.py):
demonstrations are the scripted baseline's correct episodes rendered as a rollout renders
them, and a build lowers the model's loss on them and loads like the shipped checkpoint."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from ablate.envs.coderepair.env import CodeRepairEnv
from ablate.harness.chat import ChatConventions
from ablate.models.tiny import load_tiny
from ablate.recipes.tiny_warmstart import RECIPE_FILE, Recipe, build, demonstrations


@pytest.fixture(scope="module")
def tiny():
    return load_tiny()


def nll(model, demos) -> float:
    """Token-mean NLL of the demonstrated turns (loss-mask 1), plain forward."""
    total, n = 0.0, 0
    with torch.no_grad():
        for ids, mask in demos:
            x = torch.tensor([ids])
            logp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)
            tok = logp.gather(1, x[0, 1:, None])[:, 0]
            m = torch.tensor(mask[1:], dtype=torch.float32)
            total, n = total - float((tok * m).sum()), n + int(m.sum())
    return total / n


def test_demonstrations_are_the_fixers_calls_rendered_as_a_rollout(tiny):
    model, tok = tiny
    conv = ChatConventions.from_tokenizer(tok)
    env = CodeRepairEnv(train_tasks=4, test_tasks=2)
    demos = demonstrations(env, conv, 2)
    ids, mask = demos[0]
    trained = tok.decode([i for i, m in zip(ids, mask) if m])
    assert trained.startswith(conv.format_call("list_files", {}))
    assert "run_tests" in trained and trained.rstrip().endswith(
        conv.format_call("submit", {}) + tok.decode([conv.end_of_turn_id]))
    assert "tests.calc" not in trained.split("read_file")[0]    # observations: no loss
    with pytest.raises(ValueError, match="only .* correct scripted episodes"):
        demonstrations(env, conv, 99)


def test_build_lowers_the_loss_and_loads_like_the_shipped_model(tmp_path, tiny):
    model, tok = tiny
    env = CodeRepairEnv(train_tasks=4, test_tasks=2)
    demos = demonstrations(env, ChatConventions.from_tokenizer(tok), 1)
    out = build(Recipe(demos=1, epochs=2, batch=1, lr=1e-3), tmp_path / "w", log=lambda m: 0)
    warm, _ = load_tiny(SimpleNamespace(path=str(out), dtype="float32"))
    assert json.loads((out / RECIPE_FILE).read_text())["demos"] == 1
    assert nll(warm, demos) < nll(model, demos) - 1.0
