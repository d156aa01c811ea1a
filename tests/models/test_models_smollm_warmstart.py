"""The SmolLM2 SFT warm start (ablate/recipes/smollm_warmstart.py): demonstrations are
the rollout's own pieces in the model's template, the weights are looked up by recipe,
and a run without them fails in one line with the command that builds them."""
from __future__ import annotations

import pytest

from ablate.models import smollm
from ablate.models.loading import ModelNotFoundError
from ablate.recipes.smollm_warmstart import Recipe, demonstrations, warm_dir

from test_harness_util import smollm_installed


def test_missing_warm_start_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(smollm, "converted_dir", lambda name: str(tmp_path / "smollm2_135m-x"))
    from ablate.apps.cli import compose_config
    from ablate.models.loading import resolve_weights
    cfg = compose_config(["model=smollm2_135m", "model.warm_start=true"])
    with pytest.raises(ModelNotFoundError) as err:
        resolve_weights(cfg.model)
    msg = str(err.value)
    assert "\n" not in msg and "python -m ablate.recipes.smollm_warmstart warmstart" in msg
    assert warm_dir("b", Recipe()) != warm_dir("b", Recipe(lr=Recipe().lr / 2))   # keyed by recipe


def test_demonstrations_are_the_rollout_pieces(tmp_path):
    if not smollm_installed():
        pytest.skip("the smollm extra is not installed")
    from transformers import AutoTokenizer

    from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
    from ablate.harness.chat import ChatConventions
    tok = AutoTokenizer.from_pretrained(smollm.converted_dir("smollm2_135m"))
    conv = ChatConventions.from_tokenizer(tok)
    demos = demonstrations(conv, Recipe(demos=3), tmp_path)
    assert len(demos) == 3
    names = {t["function"]["name"] for t in TOOL_SCHEMAS}
    for ids, mask in demos:
        system_turn = conv.prompt_text(SYSTEM_PROMPT, "", TOOL_SCHEMAS).split("<|im_start|>user")[0]
        head = conv.encode(system_turn)
        assert ids[:len(head)] == head and len(head) > 300     # the system turn with tools
        spans, cur = [], []
        for t, m in zip(ids, mask):
            if m:
                cur.append(t)
            elif cur:
                spans.append(cur)
                cur = []
        spans.append(cur)
        assert len(spans) >= 2 and all(s[-1] == conv.end_of_turn_id for s in spans)
        calls = [conv.parse_calls(tok.decode(s[:-1]))[0] for s in spans]
        assert all(c.error is None and c.name in names for c in calls)
        assert calls[-1].name == "return_final_answer" and ids[-1] == conv.end_of_turn_id
