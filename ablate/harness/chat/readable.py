"""Readable episodes: render_episode_text(episode, reward_components=None) -> str."""
from __future__ import annotations

import json

from ablate.harness.chat.calls import split_thinking


def _short(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _info(extra: dict) -> str:
    """An environment's per-call facts in one line (lists as their first items)."""
    out = []
    for k, v in extra.items():
        if isinstance(v, (list, tuple)):
            v = "[" + ", ".join(map(str, v[:5])) + (", …" if len(v) > 5 else "") + "]"
        out.append(f"{k}={v}")
    return _short(" ".join(out), 200)


def render_episode_text(episode, reward_components: dict | None = None,
                        obs_chars: int = 160) -> str:
    """A compact, readable trajectory: the task, each turn's thinking and calls (with
    what the environment answered, errors), the answer against the gold, and the reward
    components."""
    t = episode.task
    meta = " ".join(f"{k}={v}" for k, v in getattr(t, "metadata", {}).items())
    lines = [f"=== task {t.id} ({meta}) group={episode.group} sample={episode.sample}",
             f"Q: {_short(t.prompt, 400)}", f"gold: {t.answer}"]
    for i, turn in enumerate(episode.turns, 1):
        think, _ = split_thinking(turn.text)
        head = f"-- turn {i}: {turn.completion_tokens} tokens"
        if turn.think_tokens:
            head += f" ({turn.think_tokens} thinking)"
        lines.append(head)
        if think:
            lines.append(f"   think: {_short(think, 200)}")
        if not turn.calls:
            lines.append(f"   text: {_short(turn.text, 200)}")
        for c in turn.calls:
            args = json.dumps(c.arguments, ensure_ascii=False) if c.arguments is not None \
                else "(unparsed)"
            lines.append(f"   call {c.name or '?'} {_short(args, 200)}")
            if c.error:
                lines.append(f"     ERROR {_short(c.error, obs_chars)}")
            else:
                changed = " [state changed]" if c.state_changed else ""
                lines.append(f"     ->{changed} {_short(c.observation, obs_chars)}")
                if c.extra:
                    lines.append(f"     info {_info(c.extra)}")
    verdict = {True: "CORRECT", False: "WRONG", None: "unjudged"}[episode.correct]
    lines.append(f"answer: {episode.final_answer!r} sources={episode.sources} "
                 f"[{verdict}] end={episode.end_reason} turns={episode.num_turns}")
    if reward_components:
        comp = ", ".join(f"{k}={v:.3g}" if isinstance(v, (int, float)) else f"{k}={v}"
                         for k, v in reward_components.items())
        lines.append(f"reward: {comp}")
    return "\n".join(lines)
