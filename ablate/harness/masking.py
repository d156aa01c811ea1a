"""Action masking: constrained decoding of tool calls (docs/cpu.md, "Why the tiny model needs action masking").

Inside a tool call the model may only complete a value with a candidate string. Where a
call is depends on the model's tool-call syntax (ablate.harness.chat.ToolFormat
.mask_spec): between <tool_call> and </tool_call> (hermes, Qwen3), or anywhere for calls
written as bare JSON objects (json_text, llama3_json, whose arguments key "parameters"
replaces "arguments" in what a tool name forces).
Which argument keys trigger which candidates is the environment's `grammar`
(Environment.mask_candidates; the email task's is ablate/envs/email/masking.py):
    `"name": "`         -> a known tool name (always)
    `"<id_key>": "`     -> an id present in this episode's observations so far
    `"<sources_key>": [`-> the same ids, as a list
    `"<answer_key>": "` -> (answer masking) a candidate answer span, or "I don't know"
    `"<keywords_key>": [` -> (keyword masking) a list of 1..max_keywords candidate keywords
each candidate closed with `"` and the grammar's `after_id` / `after_answer`: one string
for every tool, or a dict tool -> string for tools with more arguments after that value
(docs/environments.md, "Tools with several arguments"). `tails` (tool -> id -> strings):
what may follow an id in that tool's call, the rest of the call up to its `}}` (code
repair's edit: line and new text together, for the file the path names); that tool's
id is then one of its keys, closed by one of its tails (leave a tool with no keys out
of tool_names, as for an empty id list). The sources list is a small grammar: `[`, then `]` or `"<id>"`, then
`, "<id>"` or `]`. The keywords list is the same grammar with a count:
`[`, then `"<kw>"` (never an empty list), then `, "<kw>"` or `]}}`, and only `]}}` once
max_keywords keywords are written (the keywords list is its tool's only argument, so the
list's end is the end of the arguments: `]` then anything but `}}` would be malformed).
Candidates are written as JSON string insides (`json.dumps(..., ensure_ascii=False)`, as
format_tool_call writes them), so a keyword holding a double quote or a backslash is
offered only in its escaped form (backslash-quote, double backslash) and parses back to
itself. A token running past the sources list's `]` or the keywords' `]}}` is not
constrained further. In thinking mode the same machinery forces `</think>` once the
turn's thinking reaches its budget (one token, or the BPE pieces of `</think>` one by one
in a vocabulary without it: such markers are found in the bytes, see marker_positions).
With `predict_labels` (world-model predictions, ablate/harness/parser.py) every
`</tool_call>` is followed by the whole tag `<predict>LABEL</predict>` (the model chooses
the label), and the text after a `<predict>` the model writes outside a call is one of
the labels then `</predict>`; with `predict_ends_turn` (calls_per_turn=first: later calls
are ignored anyway) the forced tag is followed by `<|im_end|>`. Where none applies the
logits pass through.

How: the text generated so far in this turn is tracked as BYTES (byte-level BPE tokens
need not end on character boundaries). When the text reaches a trigger (also in the
middle of a token: the part after the trigger is matched against the candidates), the
next tokens are restricted to those whose bytes keep the text on a candidate string
(the token is a prefix of a candidate's remainder, or runs past the candidate's end,
which closes the value). Every restricted position's allowed id list is recorded in
`ActionMask.allowed` (generated position -> ids), so the learner trains under the same
mask: at a position with one allowed id the masked log-prob is 0 (docs/cpu.md).

The mask is a pure function of its spec and the generated ids: `replay(ids)` recomputes
the allowed sets after the fact (the vLLM path builds its masks inside the engine from
`spec()` and the harness replays them here).

Residual hole, documented rather than hidden: a single token that completes a trigger AND
already carries a non-candidate continuation (e.g. `"<id_key>": ` followed by the
token `"xyz`) cannot be undone; it is counted in `escaped` and the tool then answers
with its normal error. With Qwen-style pre-tokenization such tokens arise only from
non-canonical token sequences; the mask does not forbid those: where a forced text ends
at a value's opening quote, a token that ends it and runs on (the tiny vocabulary's `",`
after `"value": `) is allowed unchecked (docs/environments.md, "When a value mask leaks").
"""
from __future__ import annotations

import bisect
import functools
import inspect
import itertools
import json
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from ablate.harness.chat import strip_thinking_ids

IDK = "I don't know"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_PUNCT = ".,;:!?()[]{}<>\"'`*"
MAX_KEYWORD_CHARS = 200     # keyword candidates longer than this are not offered


@runtime_checkable
class Maskable(Protocol):
    """A world whose calls can be constrained (action masking, docs/environments.md):
    context parts for the mask (ids seen so far, `tool_names` allowed next, answers,
    grammar, tails); `options` are the harness's masking switches and, for a callback
    that takes it (a `turn` parameter or **options), `turn`: the episode's turn, from 0."""

    def mask_candidates(self, state: Any, **options) -> dict: ...


@functools.lru_cache(maxsize=None)
def takes_turn(fn: Any) -> bool:
    """Does this mask_candidates take `turn` (a parameter so named, or **options)? Decided
    once per function: one with named switches only (ablate/envs/email/env.py) keeps working."""
    params = inspect.signature(fn).parameters.values()
    return any(p.name == "turn" and p.kind != p.POSITIONAL_ONLY or p.kind == p.VAR_KEYWORD
               for p in params)


def mask_context(env: Any, state: Any, turn: int = 0, **options) -> dict:
    """The world's mask candidates on the episode's `turn` (from 0: a state fresh from
    reset); {} (no masking) for a world that is not Maskable."""
    if not isinstance(env, Maskable):
        return {}
    method = env.mask_candidates
    if takes_turn(getattr(method, "__func__", method)):
        options["turn"] = turn
    return dict(method(state, **options))


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

        def tid(s):      # one token of this vocabulary, never the unknown token's id
            i = tokenizer.convert_tokens_to_ids(s)
            ok = isinstance(i, int) and i >= 0 and tokenizer.convert_ids_to_tokens(i) == s
            return i if ok else None
        self.think_open, self.think_close = tid(THINK_OPEN), tid(THINK_CLOSE)
        # what forcing </think> writes: its one id, or its BPE pieces (SmolLM2)
        self.think_close_ids = [self.think_close] if self.think_close is not None else \
            list(tokenizer.encode(THINK_CLOSE, add_special_tokens=False))
        self.turn_end = tid("<|im_end|>")       # ends a turn after its prediction

    def consistent(self, remainders: Iterable[bytes], follow: Sequence[bytes] | None = None,
                   left: int | None = None, closing: Iterable[bytes] = (b"]",)
                   ) -> list[int]:
        """Non-special ids whose bytes are a prefix of some remainder, or run past one's
        end; with `follow`, what runs past must itself fit the grammar `follow` (a list
        of next pieces, repeatable, `]` ending it), e.g. the rest of a sources list;
        `left`: how many more non-`]` pieces may follow (None: any number); a remainder
        in `closing` ends the list, so anything may run past it."""
        closing = set(closing)
        if follow is not None and not isinstance(follow, _Pieces):
            follow = _Pieces(follow)
        out: set[int] = set()
        for r in set(remainders):
            for k in range(1, len(r) + 1):
                ids = self.by_bytes.get(r[:k])
                if ids:
                    out.update(ids)
            j = bisect.bisect_left(self._sorted, r)
            while j < len(self._sorted) and self._sorted[j].startswith(r):
                b = self._sorted[j]
                if follow is None or r in closing or _fits(b[len(r):], follow, left):
                    out.update(self.by_bytes[b])
                j += 1
        return sorted(out)


class _Pieces:
    """A list grammar's next pieces, indexed for prefix lookups (lists of thousands of
    keywords): the closing ones (starting with `]`) and the others, sorted."""

    def __init__(self, pieces: Sequence[bytes]):
        self.closing = [p for p in set(pieces) if p.startswith(b"]")]
        self.open = sorted(p for p in set(pieces) if not p.startswith(b"]"))
        self.open_set = set(self.open)


def _fits(rest: bytes, follow, left: int | None = None) -> bool:
    """Is `rest` a prefix of a sentence of the grammar (follow)* `]` ...? (the pieces
    starting with `]` close it: anything may follow them). With `left`, at most `left`
    repetitions of the other pieces. `follow`: a list of pieces or a _Pieces."""
    if not rest:
        return True
    p = follow if isinstance(follow, _Pieces) else _Pieces(follow)
    for c in p.closing:
        if c.startswith(rest) or rest.startswith(c):
            return True
    if left is not None and left <= 0:
        return False
    j = bisect.bisect_left(p.open, rest)
    if j < len(p.open) and p.open[j].startswith(rest):
        return True
    nxt = None if left is None else left - 1
    for k in range(1, len(rest)):
        if rest[:k] in p.open_set and _fits(rest[k:], p, nxt):
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


def _offsets(vocab: TokenBytes, ids: Sequence[int]) -> tuple[bytes, list[int]]:
    """The bytes of `ids` and the byte offset after each token."""
    pieces = [vocab.bytes[i] if 0 <= i < len(vocab.bytes) else b"" for i in ids]
    return b"".join(pieces), list(itertools.accumulate(len(p) for p in pieces))


def marker_positions(vocab: TokenBytes, ids: Sequence[int], marker: str
                     ) -> list[tuple[int, int]]:
    """(first token, token after the last) of each occurrence of `marker` in the bytes
    of `ids`: one token for a marker in the vocabulary (Qwen3's <think>), several for
    one written in plain BPE pieces (SmolLM2), also when a piece straddles its border."""
    data, ends = _offsets(vocab, ids)
    m, out, pos = marker.encode("utf-8"), [], 0
    while (p := data.find(m, pos)) >= 0:
        out.append((bisect.bisect_right(ends, p), bisect.bisect_left(ends, p + len(m)) + 1))
        pos = p + len(m)
    return out


def strip_thinking(tokenizer, vocab: TokenBytes, ids: Sequence[int]) -> list[int]:
    """A turn's ids with its think block cut out, as later prompts show it. With
    </think> one token, ablate.harness.chat.strip_thinking_ids; else the same cut on
    bytes: everything up to the last </think> and the newlines after it goes, the ids
    from there on are kept when a token starts there, else that remainder is re-encoded
    (it is context, never trained) with the trailing special tokens kept as ids."""
    if vocab.think_close is not None:
        return strip_thinking_ids(tokenizer, ids)
    ids = list(ids)
    data, ends = _offsets(vocab, ids)
    p = data.rfind(THINK_CLOSE.encode())
    if p < 0:
        return ids
    cut = p + len(THINK_CLOSE)
    while data[cut:cut + 1] == b"\n":
        cut += 1
    k = bisect.bisect_right(ends, cut)                # first token ending after the cut
    if k == len(ids) or ends[k] - len(vocab.bytes[ids[k]]) == cut:
        return ids[k:]
    end = len(ids)
    while end > k and ids[end - 1] in vocab.special:
        end -= 1
    body = data[cut:ends[end - 1]].decode("utf-8", errors="replace")
    return list(tokenizer.encode(body, add_special_tokens=False)) + ids[end:]


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


def _keyword_word(w: str) -> str:
    """A word with the non-alphanumeric characters at both ends stripped."""
    i, j = 0, len(w)
    while i < j and not w[i].isalnum():
        i += 1
    while j > i and not w[j - 1].isalnum():
        j -= 1
    return w[i:j]


def keyword_candidates(texts: Iterable[str], max_words: int = 1) -> list[str]:
    """Search keywords offered by keyword masking: the whitespace-separated words of the
    texts with non-alphanumeric characters stripped from both ends (inner ones kept:
    "Luigi's", "bob@corp.com", "5,000"; case kept as written), words with no letter or
    digit dropped; with max_words >= 2 also the runs of 2..max_words adjacent words (as
    one phrase, single spaces). First-seen order, no duplicates, at most
    MAX_KEYWORD_CHARS characters each. Quotes and backslashes inside a word are kept (the
    mask writes them JSON-escaped)."""
    seen: dict[str, None] = {}
    for text in texts:
        words = [_keyword_word(w) for w in text.split()]
        for i in range(len(words)):
            for n in range(1, max_words + 1):
                span = words[i:i + n]
                if len(span) < n or not all(span):
                    break
                kw = " ".join(span)
                if len(kw) > MAX_KEYWORD_CHARS:
                    break
                seen.setdefault(kw, None)
    return list(seen)


_CALL_OPEN, _CALL_CLOSE = b"<tool_call>", b"</tool_call>"
_PRED_OPEN, _PRED_CLOSE = b"<predict>", b"</predict>"
_KW_CLOSE = b"]}}"     # the keywords list is its tool's only argument: it closes the call
_SRC_CLOSE = b"]}}"    # the sources list is the answer tool's last argument: so does it


def _grammar(grammar: dict | None, arguments_key: str = "arguments"
             ) -> tuple[dict, dict, dict, dict]:
    """(triggers, after_name, after_id, after_answer) of an environment's grammar: the
    argument keys whose values are constrained, and what a tool name, an id and an answer
    force next in format_tool_call's canonical layout (so no key can be invented). The
    grammar is written with `"arguments"`; a tool format whose arguments key differs
    (llama3_json: "parameters") gets it renamed in what a tool name forces. after_id and
    after_answer come back as tool -> bytes, `None` keying what every other tool forces
    (a grammar's str is that default; its dict names tools, others forcing nothing)."""
    g = grammar or {}
    rename = (lambda v: v.replace('"arguments": ', f'"{arguments_key}": ', 1)) \
        if arguments_key != "arguments" else (lambda v: v)
    triggers = {"name": b'"name": "'}
    for kind, key, opener in (("id", "id_key", '"'), ("answer", "answer_key", '"'),
                              ("sources", "sources_key", "["),
                              ("keywords", "keywords_key", "[")):
        if g.get(key):
            triggers[kind] = f'"{g[key]}": {opener}'.encode()
    after_name = {t: rename(str(v)).encode() for t, v in (g.get("after_name") or {}).items()}
    return triggers, after_name, _per_tool(g.get("after_id")), _per_tool(g.get("after_answer"))


def _per_tool(value: str | dict | None) -> dict:
    """A grammar's after_id / after_answer as tool -> bytes (None: every other tool)."""
    if isinstance(value, dict):
        return {None: b"", **{str(t): str(v).encode() for t, v in value.items()}}
    return {None: str(value or "").encode()}


class ActionMask:
    """Per-request logits processor `(generated_ids, logits) -> logits` for one turn.

    tool_names / ids / answers / keywords: candidate values (None: that value is free);
    `grammar`: the environment's argument keys for them (see the module docstring).
    The sources list is a small grammar: `[` then `]` or `"<id>"`, then `, "<id>"` or
    `]`. With an empty id list, a tool that needs an id should be left out of tool_names
    (the environment's mask_candidates does), since no id could be written. The keywords list:
    `[` then `"<kw>"`, then `, "<kw>"` or `]}}`, at most max_keywords keywords (>= 1).
    The tool-call syntax (ablate.harness.chat.ToolFormat.mask_spec): values are
    constrained between `call_open` and `call_close` (None: anywhere, for calls written
    as bare JSON objects), and `arguments_key` names the arguments object."""

    def __init__(self, vocab: TokenBytes, *, tool_names: Sequence[str] | None = None,
                 ids: Sequence[str] | None = None,
                 answers: Sequence[str] | None = None, max_think_tokens: int | None = None,
                 think_open: bool = False, keywords: Sequence[str] | None = None,
                 max_keywords: int = 3, grammar: dict | None = None,
                 predict_labels: Sequence[str] | None = None, predict_ends_turn: bool = False,
                 call_open: str | None = _CALL_OPEN.decode(),
                 call_close: str | None = _CALL_CLOSE.decode(),
                 arguments_key: str = "arguments",
                 tails: dict[str, dict[str, Sequence[str]]] | None = None):
        self.vocab = vocab
        self._triggers, after_name, after_id, after_answer = _grammar(grammar, arguments_key)
        self._call = (call_open.encode(), (call_close or "").encode()) if call_open else None
        ids = list(ids) if ids is not None else None
        kws = list(keywords) if keywords is not None else None
        if kws is not None and max_keywords < 1:
            raise ValueError(f"max_keywords={max_keywords} must be >= 1")
        # each value carries the canonical text that must follow it (the rest of the call's
        # JSON up to the next constrained value), so the model cannot write a call with
        # an invented key, e.g. `"answer": "x", "arguments": [` instead of `"sources": [`
        self.cands = {
            "name": [_j(t) + after_name.get(t, b"") for t in tool_names]
            if tool_names is not None else None,
            "id": [_j(m) + after_id[None] for m in ids] if ids is not None else None,
            "answer": [_j(a) + after_answer[None] for a in answers]
            if answers is not None else None,
            "sources": [_SRC_CLOSE] + [b'"' + _j(m) for m in ids] if ids is not None else None,
            "more": [_SRC_CLOSE] + [b', "' + _j(m) for m in ids] if ids is not None else None,
            # keywords: the first item (no empty list), then more or `]}}`, then `]}}`
            "keywords": [b'"' + _j(k) for k in kws] if kws else None,
            "kwmore": [_KW_CLOSE] + [b', "' + _j(k) for k in kws] if kws else None,
            "kwend": [_KW_CLOSE] if kws else None,
            "predict": [p.encode() + _PRED_CLOSE for p in predict_labels]
            if predict_labels else None,
            "predict_tag": [_PRED_OPEN + p.encode() + _PRED_CLOSE for p in predict_labels]
            if predict_labels else None}
        # tools with tails: name candidate bytes -> their id candidates, each id with
        # each of its tails (one value, so no token can run on past the id)
        names = {_j(t) + after_name.get(t, b""): t for t in tool_names or ()}
        self._tails = {n: [_j(i) + x.encode("utf-8") for i, xs in tails[t].items()
                           for x in xs]
                       for n, t in names.items() if t in (tails or {})}
        # an id / answer inside a tool with its own after_id / after_answer (a call with
        # more arguments after that value): name candidate bytes -> the value candidates
        self._own = {kind: {n: [_j(v) + after[t] for v in values]
                            for n, t in names.items() if t in after}
                     for kind, after, values in (("id", after_id, ids),
                                                 ("answer", after_answer, answers))
                     if values is not None}
        self._last_name: bytes | None = None      # the tool name closed last
        self._follow = {k: _Pieces(self.cands[k]) if self.cands[k] else None
                        for k in ("more", "kwmore")}
        self._spec = dict(tool_names=list(tool_names) if tool_names is not None else None,
                          ids=ids,
                          answers=list(answers) if answers is not None else None,
                          max_think_tokens=max_think_tokens, think_open=think_open)
        if kws is not None:           # (absent otherwise: older specs stay as they were)
            self._spec.update(keywords=kws, max_keywords=int(max_keywords))
        if grammar:
            self._spec["grammar"] = dict(grammar)
        if predict_labels:
            self._spec["predict_labels"] = list(predict_labels)
        if predict_ends_turn:
            self._spec["predict_ends_turn"] = True
        if tails:
            self._spec["tails"] = {t: {i: list(xs) for i, xs in d.items()}
                                   for t, d in tails.items()}
        self._end_after_tag = predict_ends_turn and vocab.turn_end is not None
        self._ended = False       # the forced tag closed: only the turn's end may follow
        syntax = dict(call_open=call_open, call_close=call_close, arguments_key=arguments_key)
        if syntax != dict(call_open=_CALL_OPEN.decode(), call_close=_CALL_CLOSE.decode(),
                          arguments_key="arguments"):
            self._spec.update(syntax)     # (absent for the hermes layout: specs as before)
        self.max_kw = int(max_keywords)
        self._kw_count = 0            # keywords closed in the list being written
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
        self._forced = 0                  # pieces of a multi-token </think> forced so far
        self._cache: list[int] | None = None
        self._scan_from = 0       # triggers are looked for from here (after a closed tag)

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
            close = self.vocab.think_close_ids
            if self._ended:
                self._cache = [self.vocab.turn_end]
            elif self._think_open and self.max_think is not None and \
                    self._think_len >= self.max_think and self._forced < len(close):
                self._cache = [close[self._forced]]
            elif self._live is not None:
                k = len(self._consumed)
                follow, left, closing = None, None, (_SRC_CLOSE,)
                if self._kind in ("sources", "more"):
                    follow = self._follow["more"]
                elif self._kind in ("keywords", "kwmore", "kwend"):  # closing one: count+1
                    follow, left = self._follow["kwmore"], self.max_kw - self._kw_count - 1
                    closing = [c[k:] for c in self._live if c.startswith(_KW_CLOSE)]
                self._cache = self.vocab.consistent((c[k:] for c in self._live), follow,
                                                    left, closing)
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
        if self._marker(token, self.vocab.think_open, THINK_OPEN, before):
            self._think_open, self._think_len, self._forced = True, 0, 0
        elif self._marker(token, self.vocab.think_close, THINK_CLOSE, before):
            self._think_open, self._forced = False, 0
        elif self._think_open:
            if self.max_think is not None and self._think_len >= self.max_think:
                self._forced += 1            # a forced piece of a multi-token </think>
            self._think_len += 1
        elif self._live is not None:
            self._consume(tb)
        else:
            self._check_triggers(before)

    def _marker(self, token: int, marker_id: int | None, marker: str, before: int) -> bool:
        """Did `token` complete `marker`: its id, or (a marker written in plain BPE
        pieces) its bytes ending inside this token's bytes."""
        if marker_id is not None:
            return token == marker_id
        m = marker.encode()
        return self._text.find(m, max(0, before - len(m) + 1)) >= 0

    def _activate(self, kind: str, start: int) -> None:
        cands = self.cands[kind]
        if self._last_name in self._own.get(kind, {}):
            cands = self._own[kind][self._last_name]
        if kind == "id" and self._last_name in self._tails:
            cands = self._tails[self._last_name]
        if not cands:                 # nothing to choose from: the value stays free
            return
        if kind == "keywords":
            self._kw_count = 0
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
            if kind == "name":
                self._last_name = done[0]
            if kind in ("sources", "more") and done[0] != _SRC_CLOSE:
                self._activate("more", end)
            elif kind in ("keywords", "kwmore") and done[0] != _KW_CLOSE:
                self._kw_count += 1
                self._activate("kwmore" if self._kw_count < self.max_kw else "kwend", end)
            else:   # a forced continuation may end in the next value's trigger
                if kind in ("predict", "predict_tag"):
                    self._scan_from = end
                    self._ended = kind == "predict_tag" and self._end_after_tag
                self._check_triggers(len(self._text) - len(c))
            return
        self._live = [x for x in self._live if x.startswith(c)]
        if not self._live:
            self._live, self._kind = None, None
            self.escaped += 1

    def _check_triggers(self, before: int) -> None:
        text = self._text
        if self._call is not None and \
                text.rfind(self._call[0]) <= text.rfind(self._call[1]):   # not in a call
            if self.cands["predict"] is not None:
                self._check_predict(before)
            return
        best = None
        for kind, trig in self._triggers.items():
            if self.cands[kind] is None:
                continue
            pos = text.find(trig, max(self._scan_from, before - len(trig) + 1))
            if pos >= 0 and (best is None or pos + len(trig) < best[0]):
                best = (pos + len(trig), kind)
        if best is not None:
            self._activate(best[1], best[0])

    def _check_predict(self, before: int) -> None:
        """After `</tool_call>`: the whole prediction tag; after `<predict>`: a label."""
        for kind, trig in (("predict_tag", _CALL_CLOSE), ("predict", _PRED_OPEN)):
            pos = self._text.find(trig, max(self._scan_from, before - len(trig) + 1))
            if pos >= 0:
                self._activate(kind, pos + len(trig))
                return

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
