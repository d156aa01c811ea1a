"""Chat conventions from the model's own template (ablate/harness/chat/conventions.py):
the incremental pieces a rollout concatenates equal, token for token, one render of the
whole conversation, for the tiny model's template, Qwen3's (the repository's copy,
ablate/models/tokenizer.py) and SmolLM2-135M-Instruct's (when the extra is installed)."""
import json
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from ablate.envs.email.tools import TOOL_SCHEMAS
from ablate.harness.chat import (TOOL_FORMATS, ChatConventions, ChatTemplateError,
                                 check_incremental, detect_tool_format, observation_ids,
                                 render_prompt)
from ablate.harness.config import ModeConfig
from ablate.models.tokenizer import QWEN3_CHAT_TEMPLATE

from test_harness_util import smollm_installed

TINY = "ablate/models/assets/tiny"
SYSTEM, USER = "You are an email agent.", "When is the dinner on Friday?\n\nToday is 2001-05-04."
# a read result of real-looking text: punctuation and newlines next to the piece borders
READ = 'From: bob@enron.com\nSubject: "dinner"\n\nSee you at 7pm -- Bob.'


def _turns(conv):
    call = conv.format_call
    return [(call("search_inbox", {"keywords": ["dinner", "Friday"]}),
             [json.dumps({"hits": ["<a1.x@enron>", "<b2.y@enron>"]})]),
            ("Reading the first hit. " + call("read_email", {"message_id": "<a1.x@enron>"}),
             [READ, "Error: unknown message_id"]),
            (call("return_final_answer", {"answer": "7pm", "sources": ["<a1.x@enron>"]}), [])]


@pytest.fixture(scope="module")
def tiny():
    return AutoTokenizer.from_pretrained(TINY)


@pytest.fixture(scope="module")
def smollm():
    if not smollm_installed():
        pytest.skip("the smollm extra is not installed")
    from ablate.models.smollm import converted_dir
    return AutoTokenizer.from_pretrained(converted_dir("smollm2_135m"))


def _assert_exact(conv, open_end=True):
    turns = _turns(conv)
    for k in range(1, len(turns) + 1):     # every prefix: each header and observation
        part = turns[:k] if open_end or k < len(turns) else turns
        ok, i, inc, whole = check_incremental(conv, SYSTEM, USER, TOOL_SCHEMAS, part)
        tok = conv.tokenizer
        assert ok, (k, i, tok.decode(inc[max(i - 5, 0):i + 5]), tok.decode(whole[max(i - 5, 0):i + 5]))
    return inc


def test_tiny_template_thinking_mode_is_exact_without_adjustment(tiny):
    conv = ChatConventions.from_tokenizer(tiny, enable_thinking=True)
    assert conv.fmt.name == "hermes" and conv.renders_tools and conv.header_suffix == ""
    _assert_exact(conv)


def test_qwen3_instruct_differs_from_history_only_by_the_empty_think_block(tiny):
    conv = ChatConventions.from_tokenizer(tiny, chat_template=QWEN3_CHAT_TEMPLATE)
    assert conv.header_suffix == "<think>\n\n</think>\n\n"
    inc = _assert_exact(conv)           # reference with the think block put back: exact
    # the raw render (no adjustment) lacks exactly one empty think block per past turn
    msgs = conv.head_messages(SYSTEM, USER, TOOL_SCHEMAS)
    for text, obs in _turns(conv):
        msgs += [{"role": "assistant", "content": text}, *conv.tool_messages(obs)]
    raw = conv.encode(conv._render(msgs, TOOL_SCHEMAS, gen=False).rstrip("\n"))
    suffix = conv.encode(conv.header_suffix)
    assert len(inc) - len(raw) == len(suffix) * len(_turns(conv))


def test_qwen3_template_on_a_real_bpe_tokenizer(smollm):
    """SmolLM2's 49k BPE splits <tool_call> and merges across JSON/markup borders."""
    conv = ChatConventions.from_tokenizer(smollm, chat_template=QWEN3_CHAT_TEMPLATE,
                                          enable_thinking=True)
    assert conv.fmt.name == "hermes"
    _assert_exact(conv)
    _assert_exact(conv, open_end=False)


def test_smollm2_own_template(smollm):
    conv = ChatConventions.from_tokenizer(smollm)
    assert conv.fmt.name == "json_text" and not conv.renders_tools
    assert conv.end_of_turn == "<|im_end|>" and conv.header_text == "<|im_start|>assistant\n"
    inc = _assert_exact(conv)
    text = smollm.decode(inc)
    assert '"name": "search_inbox"' in text            # tools described in the system turn
    assert conv.parse_calls(_turns(conv)[1][0])[0].arguments == {"message_id": "<a1.x@enron>"}


def test_detection_and_registry():
    assert detect_tool_format(QWEN3_CHAT_TEMPLATE) == "hermes"
    llama = "{% if message.role == 'ipython' %}<|start_header_id|>ipython<|end_header_id|>{% endif %}"
    assert detect_tool_format(llama) == "llama3_json"
    assert detect_tool_format("{{ messages[0].content }}") == "json_text"
    assert set(TOOL_FORMATS) == {"hermes", "llama3_json", "json_text"}


def test_tool_call_formats_round_trip_and_reject():
    args = {"keywords": ["a", "b"]}
    for fmt in TOOL_FORMATS.values():
        (call,) = fmt.parse_calls("ok " + fmt.format_call("search_inbox", args))
        assert (call.name, call.arguments, call.error) == ("search_inbox", args, None)
    llama = TOOL_FORMATS["llama3_json"].parse_calls(
        '<|python_tag|>{"name": "read_email", "parameters": {"message_id": "<x>"}}')
    assert llama[0].arguments == {"message_id": "<x>"}
    for bad in ("no call here", '{"name": "x", "arguments": [1]}', '{"nam": 1}'):
        assert all(c.error for c in TOOL_FORMATS["json_text"].parse_calls(bad)), bad


def test_missing_template_names_the_key(tiny):
    bare = AutoTokenizer.from_pretrained(TINY)
    bare.chat_template = None
    with pytest.raises(ChatTemplateError, match=r"model\.chat_template=/path/to/template\.jinja"):
        ChatConventions.from_tokenizer(bare)
    with pytest.raises(ChatTemplateError, match="model.tool_format='xml'"):
        ChatConventions.from_tokenizer(tiny, tool_format="xml")


def test_demonstration_mask_covers_exactly_the_turns(tiny):
    from ablate.harness.chat import demonstration
    conv = ChatConventions.from_tokenizer(tiny, enable_thinking=True)
    turns = _turns(conv)
    ids, mask = demonstration(conv, SYSTEM, USER, TOOL_SCHEMAS, turns)
    trained = [i for i, m in zip(ids, mask) if m]
    expect = [t for text, _ in turns for t in conv.encode(text) + [conv.end_of_turn_id]]
    assert trained == expect and len(ids) == len(mask)


def test_from_config_reads_the_model_keys(tiny):
    from ablate.apps.cli import compose_config
    cfg = compose_config(["model.tool_format=json_text", "mode=thinking"])
    conv = ChatConventions.from_config(tiny, cfg.model, cfg.mode)
    assert conv.fmt.name == "json_text" and conv.enable_thinking and not conv.renders_tools
    _assert_exact(conv)                 # tools in the system prompt, Qwen3 template: exact


@pytest.mark.parametrize("thinking", [False, True])
def test_qwen3_written_out_equals_the_conventions(tiny, thinking):
    """ablate.harness.chat.qwen3 (Qwen3's template by hand, the tiny model's SFT data)
    gives the ids ChatConventions renders from the tiny model's own template."""
    mode = ModeConfig(name="thinking" if thinking else "instruct", enable_thinking=thinking)
    conv = ChatConventions.from_tokenizer(tiny, enable_thinking=thinking)
    prompt = render_prompt(tiny, SimpleNamespace(prompt=USER), TOOL_SCHEMAS, mode, SYSTEM)
    assert prompt == conv.prompt_ids(SYSTEM, USER, TOOL_SCHEMAS)
    for obs in (["x"], [READ, "Error: unknown message_id"]):
        assert observation_ids(tiny, obs, mode) == conv.observation_ids(obs)
