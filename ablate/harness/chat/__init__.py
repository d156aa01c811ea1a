"""The chat-template layer: every id sequence the harness feeds a sampler, and every
supervised demonstration, so that SFT data and RL episodes are token-identical.

    calls.py        the markup: ChatML/Qwen3 markers, ParsedCall, format_tool_call /
                    parse_tool_calls (hermes), the tool-call formats TOOL_FORMATS and
                    detect_tool_format, split_thinking
    conventions.py  ChatConventions: prompt, observation turns, generation header, end of
                    turn and stop ids, read from the model's own chat template (any
                    template, Qwen3's one of them; model.chat_template / model.tool_format);
                    demonstration, check_incremental, marker_id, ChatTemplateError
    qwen3.py        Qwen3's template written out (the tiny model's): render_prompt (through
                    ChatConventions), observation_text / observation_ids,
                    generation_suffix, strip_thinking_ids, render_demonstration(_segments)
    readable.py     render_episode_text: an episode as readable text

The rollout (ablate/harness/rollout.py) and the agents use ChatConventions.from_config
(the cell's model.tool_format, model.chat_template and mode); everything is importable
from here: `from ablate.harness.chat import ChatConventions, parse_tool_calls`.
"""
from ablate.harness.chat.calls import (CALL_CLOSE, CALL_OPEN, ENDOFTEXT, IM_END, IM_START,
                                       THINK_CLOSE, THINK_OPEN, TOOL_FORMATS, ParsedCall,
                                       ToolFormat, detect_tool_format, format_tool_call,
                                       parse_tool_calls, split_thinking)
from ablate.harness.chat.conventions import (SENTINEL, ChatConventions, ChatTemplateError,
                                             check_incremental, demonstration,
                                             incremental_ids, marker_id, whole_ids)
from ablate.harness.chat.qwen3 import (EMPTY_THINK, conventions, generation_suffix,
                                       observation_ids, observation_text, render_demonstration,
                                       render_demonstration_segments, render_prompt,
                                       strip_thinking_ids)
from ablate.harness.chat.readable import render_episode_text

__all__ = [
    "CALL_CLOSE", "CALL_OPEN", "EMPTY_THINK", "ENDOFTEXT", "IM_END", "IM_START", "SENTINEL",
    "THINK_CLOSE", "THINK_OPEN", "TOOL_FORMATS", "ChatConventions", "ChatTemplateError",
    "ParsedCall", "ToolFormat", "check_incremental", "conventions", "demonstration",
    "detect_tool_format", "format_tool_call", "generation_suffix", "incremental_ids",
    "marker_id", "observation_ids", "observation_text", "parse_tool_calls",
    "render_demonstration", "render_demonstration_segments", "render_episode_text",
    "render_prompt", "split_thinking", "strip_thinking_ids", "whole_ids"]
