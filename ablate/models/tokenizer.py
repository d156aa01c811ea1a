"""Byte-level BPE tokenizer with Qwen3's conventions, trained on our own texts.

API
---
    build_tokenizer(texts, vocab_size, extra_tokens=(), out_dir=None) -> PreTrainedTokenizerFast
        Trains a byte-level BPE (Qwen2/3 pre-tokenizer regex, NFC) on `texts`.
        Special tokens (never split, skipped by decode(skip_special_tokens=True)):
            <|endoftext|> (pad), <|im_start|>, <|im_end|> (eos)
        Single, NON-special tokens, as in Qwen3's own tokenizer:
            <think> </think> <tool_call> </tool_call> <tool_response> </tool_response>
        `extra_tokens` are added as whole non-special tokens (message ids, entity values),
        so that copying one from the context is pointing at one token.
        The chat template follows Qwen3's (system/user/assistant/tool roles, `tools`
        rendered into the system prompt, `enable_thinking`: False => the generation prompt
        ends with "<think>\\n\\n</think>\\n\\n"); unlike Qwen3's, it strips <think> blocks
        from EVERY earlier assistant message (Qwen3 keeps them after the last user query),
        because the harness strips earlier thinking from later prompts (Qwen3's chat template does the same).
        Deterministic: the same texts and arguments give an identical tokenizer.json.
    QWEN3_CHAT_TEMPLATE: the jinja template string above.
    SPECIAL_TOKENS, MARKER_TOKENS: the token strings listed above.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKER_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>",
                 "<tool_response>", "</tool_response>"]

# Qwen2/Qwen3 pre-tokenizer: letters, single digits, punctuation runs, newlines apart.
QWEN_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")

_TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")


def _jinja_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


# Qwen3's template, with earlier thinking stripped from all past assistant turns.
QWEN3_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- " + _jinja_str(_TOOLS_HEADER) + " }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- " + _jinja_str(_TOOLS_FOOTER) + " }}{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.content is string %}{%- set content = message.content %}"
    "{%- else %}{%- set content = '' %}{%- endif %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set reasoning = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.last and reasoning %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{%- if message.tool_calls %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}")


def build_tokenizer(texts: Iterable[str], vocab_size: int, extra_tokens: Iterable[str] = (),
                    out_dir: str | os.PathLike | None = None):
    """Train the tokenizer (see module docstring). `texts` is consumed once, in order."""
    # rayon threads make merge tie-breaking order-dependent in principle: pin to one.
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    n_fixed = len(SPECIAL_TOKENS) + len(MARKER_TOKENS)
    trainer = trainers.BpeTrainer(
        vocab_size=max(vocab_size - n_fixed, 256), min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(list(texts), trainer=trainer)
    # Added after training so that markers never take part in merges; ids follow the
    # learned vocabulary (Qwen3 too keeps its special tokens after the BPE vocabulary).
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKER_TOKENS])
    seen = set(SPECIAL_TOKENS) | set(MARKER_TOKENS)
    extra = [t for t in dict.fromkeys(extra_tokens) if t and t not in seen]  # stable dedupe
    if extra:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        padding_side="left", chat_template=QWEN3_CHAT_TEMPLATE, model_max_length=32768,
        clean_up_tokenization_spaces=False)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        hf.save_pretrained(str(out_dir))
    return hf
