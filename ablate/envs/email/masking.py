"""The email task's action-mask context (ablate/harness/masking.py does the decoding):
which argument keys are constrained, what each tool name forces next, and the candidate
values an episode's tool log offers (ids seen, answer spans, keywords)."""
from __future__ import annotations

import json

from ablate.envs.email.tools import ANSWER, READ, SEARCH
from ablate.harness.masking import IDK, answer_spans, keyword_candidates

# format_tool_call's canonical layout: a tool name forces its call's (first) argument key,
# so its value trigger fires; read_email's one argument is the id; the answer's sources
# list follows the answer
GRAMMAR = {"id_key": "message_id", "answer_key": "answer", "sources_key": "sources",
           "keywords_key": "keywords",
           "after_name": {SEARCH: ', "arguments": {"keywords": [',
                          READ: ', "arguments": {"message_id": "',
                          ANSWER: ', "arguments": {"answer": "'},
           "after_id": "}}", "after_answer": ', "sources": ['}


def _searchable_texts(call) -> list[str]:
    """What of a tool call's observation a keyword can match (search covers subject and
    body only): search hits' subjects and snippets; a read email's subject and body."""
    if call.error is not None:
        return []
    if call.name == SEARCH and call.extra.get("hits"):
        try:
            hits = json.loads(call.observation)
        except (ValueError, TypeError):
            return []
        out = []
        for h in hits if isinstance(hits, list) else []:
            if isinstance(h, dict):
                out += [str(h.get("subject") or ""), str(h.get("snippet") or "")]
        return out
    if call.extra.get("read_id"):
        head, sep, body = call.observation.partition("\n\n")
        subj = [ln[len("Subject: "):] for ln in head.split("\n") if ln.startswith("Subject: ")]
        return subj + ([body] if sep else [])
    return []


def episode_candidates(calls, *, answer_masking: bool, keyword_masking: bool = False,
                       question: str | None = None, keyword_words: int = 1) -> dict:
    """The mask's context parts from an episode's ToolResults so far: message ids seen
    in search results (in order), (answer masking) spans of the emails read, and
    (keyword masking) keyword_candidates of the question, then of each call's searchable
    text in order (search hits' subjects and snippets, read emails' subject and body)."""
    ids: dict[str, None] = {}
    reads = []
    for c in calls:
        for h in c.extra.get("hits", ()):
            ids.setdefault(h, None)
        if c.extra.get("read_id"):
            ids.setdefault(c.extra["read_id"], None)
            reads.append(c.observation)
    out = {"ids": list(ids)}
    if answer_masking:
        out["answers"] = answer_spans(reads) + [IDK]
    if keyword_masking:
        texts = [question] if question else []
        for c in calls:
            texts += _searchable_texts(c)
        out["keywords"] = keyword_candidates(texts, keyword_words)
    return out
