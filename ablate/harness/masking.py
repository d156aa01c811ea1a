"""Action masking: constrained decoding of tool calls (DESIGN §4 "Harness").

Inside a <tool_call> block the model may only complete a value with a candidate string:
    `"name": "`         -> a known tool name
    `"message_id": "`   -> a message id present in this episode's search results
    `"sources": [`      -> the same ids, as a list
    `"answer": "`       -> (answer masking) a 1-3-word span of an email read, or
                           "I don't know"
each candidate closed with `"`; the sources list is a small grammar: `[`, then `]` or
`"<id>"`, then `, "<id>"` or `]`. In thinking mode the same machinery forces `</think>`
once the turn's thinking reaches its budget. Where none applies the logits pass through.

How: the text generated so far in this turn is tracked as BYTES (byte-level BPE tokens
need not end on character boundaries). When the text reaches a trigger (also in the
middle of a token: the part after the trigger is matched against the candidates), the
next tokens are restricted to those whose bytes keep the text on a candidate string
(the token is a prefix of a candidate's remainder, or runs past the candidate's end,
which closes the value). Every restricted position's allowed id list is recorded in
`ActionMask.allowed` (generated position -> ids), so the learner trains under the same
mask: at a position with one allowed id the masked log-prob is 0 (PLATFORM.md).

The mask is a pure function of its spec and the generated ids: `replay(ids)` recomputes
the allowed sets after the fact (the vLLM path builds its masks inside the engine from
`spec()` and the harness replays them here).

Residual hole, documented rather than hidden: a single token that completes a trigger AND
already carries a non-candidate continuation (e.g. `"message_id": ` followed by the
token `"xyz`) cannot be undone; it is counted in `escaped` and the tool then answers
with its normal error. With Qwen-style pre-tokenization such tokens arise only from
non-canonical token sequences.
"""
from __future__ import annotations

import bisect
import json
from typing import Iterable, Sequence

IDK = "I don't know"
_PUNCT = ".,;:!?()[]{}<>\"'`*"


class TokenBytes:
    """Each token id's bytes, with lookups for prefix matching. One per tokenizer."""

    def __init__(self, tokenizer):
        from transformers.convert_slow_tokenizer import bytes_to_unicode
        dec = {c: b for b, c in bytes_to_unicode().items()}
        added = {int(i): t.content for i, t in
                 getattr(tokenizer, "added_tokens_decoder", {}).items()}
        n = len(tokenizer)
        toks = tokenizer.convert_ids_to_tokens(list(range(n)))
        self.bytes: list[bytes] = []
        for i, tok in enumerate(toks):
            if i in added:
                b = added[i].encode("utf-8")
            elif tok is not None and all(c in dec for c in tok):
                b = bytes(dec[c] for c in tok)
            else:                                   # not byte-level: best effort
                b = tokenizer.decode([i]).encode("utf-8")
            self.bytes.append(b)
        self.special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []))
        self.special |= {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()
                         if t.special}
        self.by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.bytes):
            if b and i not in self.special:
                self.by_bytes.setdefault(b, []).append(i)
        order = sorted(self.by_bytes)
        self._sorted = order
        self.vocab_size = n

        def tid(s):
            ids = tokenizer.convert_tokens_to_ids(s)
            return ids if isinstance(ids, int) and ids is not None and ids >= 0 else None
        self.think_open, self.think_close = tid("<think>"), tid("</think>")

    def consistent(self, remainders: Iterable[bytes], follow: Sequence[bytes] | None = None
                   ) -> list[int]:
        """Non-special ids whose bytes are a prefix of some remainder, or run past one's
        end; with `follow`, what runs past must itself fit the grammar `follow` (a list
        of next pieces, repeatable, `]` ending it), e.g. the rest of a sources list."""
        out: set[int] = set()
        for r in set(remainders):
            for k in range(1, len(r) + 1):
                ids = self.by_bytes.get(r[:k])
                if ids:
                    out.update(ids)
            j = bisect.bisect_left(self._sorted, r)
            while j < len(self._sorted) and self._sorted[j].startswith(r):
                b = self._sorted[j]
                if follow is None or r == b"]" or _fits(b[len(r):], follow):
                    out.update(self.by_bytes[b])
                j += 1
        return sorted(out)


def _fits(rest: bytes, follow: Sequence[bytes]) -> bool:
    """Is `rest` a prefix of a sentence of the grammar (follow)* `]` ...?"""
    if not rest:
        return True
    for f in follow:
        if f.startswith(rest):
            return True
        if rest.startswith(f) and (f == b"]" or _fits(rest[len(f):], follow)):
            return True
    return False


def token_bytes(tokenizer) -> TokenBytes:
    """The tokenizer's TokenBytes, built once and kept on the tokenizer object."""
    tb = getattr(tokenizer, "_ablate_token_bytes", None)
    if tb is None or tb.vocab_size != len(tokenizer):
        tb = TokenBytes(tokenizer)
        try:
            object.__setattr__(tokenizer, "_ablate_token_bytes", tb)
        except (AttributeError, TypeError):
            pass
    return tb


def _j(s: str) -> bytes:
    """A JSON string's inside, then the closing quote: what follows an opening quote."""
    return json.dumps(s, ensure_ascii=False)[1:].encode("utf-8")


def answer_spans(texts: Iterable[str], max_words: int = 3) -> list[str]:
    """1..max_words-word spans of the texts (edge punctuation stripped), first-seen order."""
    seen: dict[str, None] = {}
    for text in texts:
        words = [w.strip(_PUNCT) for w in text.split()]
        for i in range(len(words)):
            for n in range(1, max_words + 1):
                span = words[i:i + n]
                if len(span) < n or not all(span):
                    break
                seen.setdefault(" ".join(span), None)
    return list(seen)


_TRIGGERS = {"name": b'"name": "', "id": b'"message_id": "', "answer": b'"answer": "',
             "sources": b'"sources": ['}
_CALL_OPEN, _CALL_CLOSE = b"<tool_call>", b"</tool_call>"


class ActionMask:
    """Per-request logits processor `(generated_ids, logits) -> logits` for one turn.

    tool_names / message_ids / answers: candidate values (None: that value is free).
    The sources list is a small grammar: `[` then `]` or `"<id>"`, then `, "<id>"` or
    `]`. With an empty id list, `read_email` should be left out of tool_names (the
    rollout does), since no id could be written."""

    def __init__(self, vocab: TokenBytes, *, tool_names: Sequence[str] | None = None,
                 message_ids: Sequence[str] | None = None,
                 answers: Sequence[str] | None = None, max_think_tokens: int | None = None,
                 think_open: bool = False):
        self.vocab = vocab
        ids = list(message_ids) if message_ids is not None else None
        self.cands = {
            "name": [_j(t) for t in tool_names] if tool_names is not None else None,
            "id": [_j(m) for m in ids] if ids is not None else None,
            "answer": [_j(a) for a in answers] if answers is not None else None,
            "sources": [b"]"] + [b'"' + _j(m) for m in ids] if ids is not None else None,
            "more": [b"]"] + [b', "' + _j(m) for m in ids] if ids is not None else None}
        self._spec = dict(tool_names=list(tool_names) if tool_names is not None else None,
                          message_ids=ids,
                          answers=list(answers) if answers is not None else None,
                          max_think_tokens=max_think_tokens, think_open=think_open)
        self.max_think = max_think_tokens
        self.allowed: dict[int, list[int]] = {}
        self.escaped = 0          # triggers whose token overshot onto a non-candidate
        self.violations = 0       # sampled ids outside the allowed set (must stay 0)
        self._text = b""
        self._n = 0
        self._kind: str | None = None            # the value being constrained
        self._live: list[bytes] | None = None    # its candidates still matching
        self._consumed = b""
        self._think_open = think_open     # the prompt opened <think> (thinking-only models)
        self._think_len = 0
        self._cache: list[int] | None = None

    @classmethod
    def from_spec(cls, vocab: TokenBytes, spec: dict) -> "ActionMask":
        return cls(vocab, **spec)

    def spec(self) -> dict:
        """JSON-able arguments that rebuild this mask (e.g. inside a vLLM engine)."""
        return dict(self._spec)

    # -------------------------------------------------------------- state machine
    def allowed_next(self) -> list[int] | None:
        """The ids allowed at the next position (None: unconstrained)."""
        if self._cache is None:
            if self._think_open and self.max_think is not None and \
                    self._think_len >= self.max_think and self.vocab.think_close is not None:
                self._cache = [self.vocab.think_close]
            elif self._live is not None:
                k = len(self._consumed)
                follow = self.cands["more"] if self._kind in ("sources", "more") else None
                self._cache = self.vocab.consistent((c[k:] for c in self._live), follow)
            else:
                self._cache = []
        return self._cache or None

    def advance(self, token: int) -> None:
        allowed = self.allowed_next()
        if allowed is not None:
            self.allowed[self._n] = allowed
            if token not in allowed:
                self.violations += 1
        self._cache = None
        self._n += 1
        tb = self.vocab.bytes[token] if 0 <= token < len(self.vocab.bytes) else b""
        before = len(self._text)
        self._text += tb
        if token == self.vocab.think_open:
            self._think_open, self._think_len = True, 0
        elif token == self.vocab.think_close:
            self._think_open = False
        elif self._think_open:
            self._think_len += 1
        elif self._live is not None:
            self._consume(tb)
        else:
            self._check_triggers(before)

    def _activate(self, kind: str, start: int) -> None:
        cands = self.cands[kind]
        if not cands:                 # nothing to choose from: the value stays free
            return
        self._kind, self._live, self._consumed = kind, list(cands), b""
        if len(self._text) > start:   # the trigger's token ran on past it
            self._consume(self._text[start:])

    def _consume(self, tb: bytes) -> None:
        self._consumed += tb
        c = self._consumed
        done = [x for x in self._live if c.startswith(x)]
        if done:                      # the value is closed
            end = len(self._text) - len(c) + len(done[0])
            kind, self._live, self._kind = self._kind, None, None
            if kind in ("sources", "more") and done[0] != b"]":
                self._activate("more", end)
            else:
                self._check_triggers(end)
            return
        self._live = [x for x in self._live if x.startswith(c)]
        if not self._live:
            self._live, self._kind = None, None
            self.escaped += 1

    def _check_triggers(self, before: int) -> None:
        text = self._text
        if text.rfind(_CALL_OPEN) <= text.rfind(_CALL_CLOSE):   # not inside a call
            return
        best = None
        for kind, trig in _TRIGGERS.items():
            if self.cands[kind] is None:
                continue
            pos = text.find(trig, max(0, before - len(trig) + 1))
            if pos >= 0 and (best is None or pos + len(trig) < best[0]):
                best = (pos + len(trig), kind)
        if best is not None:
            self._activate(best[1], best[0])

    # -------------------------------------------------------------- processor API
    def _sync(self, generated: Sequence[int]) -> None:
        for t in generated[self._n:]:
            self.advance(int(t))

    def __call__(self, generated: Sequence[int], logits):
        self._sync(generated)
        allowed = self.allowed_next()
        if allowed is None:
            return logits
        import torch
        masked = torch.full_like(logits, float("-inf"))
        idx = torch.tensor(allowed, dtype=torch.long, device=logits.device)
        masked[idx] = logits[idx]
        return masked

    def replay(self, ids: Sequence[int]) -> dict[int, list[int]]:
        """Advance over a whole completion; returns the allowed sets by position."""
        self._sync(ids)
        return self.allowed


class HFLogitsProcessor:
    """transformers LogitsProcessor adapter: one ActionMask (or None) per batch row, for
    use with `model.generate(..., logits_processor=LogitsProcessorList([...]))`;
    `prompt_len` is the (padded) prompt length, so row r's generated ids are
    input_ids[r, prompt_len:]."""

    def __init__(self, masks: Sequence[ActionMask | None], prompt_len: int):
        self.masks, self.prompt_len = list(masks), prompt_len

    def __call__(self, input_ids, scores):
        out = scores.clone()
        for r, m in enumerate(self.masks):
            if m is not None:
                out[r] = m(input_ids[r, self.prompt_len:].tolist(), scores[r])
        return out


def episode_candidates(calls, *, answer_masking: bool) -> dict:
    """The mask spec's context parts from an episode's tool log so far: message ids seen
    in search results (in order), and (answer masking) spans of the emails read."""
    ids: dict[str, None] = {}
    reads = []
    for c in calls:
        for h in c.hits:
            ids.setdefault(h, None)
        if c.read_id:
            ids.setdefault(c.read_id, None)
            reads.append(c.observation)
    out = {"message_ids": list(ids)}
    if answer_masking:
        out["answers"] = answer_spans(reads) + [IDK]
    return out

