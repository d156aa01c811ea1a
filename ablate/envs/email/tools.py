"""The agent-facing tools of EnronHop: OpenAI-style JSON schemas and a ToolBox that
executes calls against an EmailDB for one episode (docs/architecture.md).

The inbox and the query date are bound when the ToolBox is made (by the harness, from
the task); the model can only choose keywords, message ids and its answer. `call` never
raises: every malformed call (unknown tool, arguments that are not a JSON object, wrong
types, missing or unexpected fields, empty or oversized keyword lists) comes back as a
ToolCall with `error` set and an observation the model can read and act on.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ablate.protocol.environment import parse_arguments, quote
from ablate.envs.email.db import MAX_RESULTS_LIMIT, EmailDB, normalize_date

log = logging.getLogger(__name__)

MAX_KEYWORDS = 10          # more than this is refused outright (many already give 0 hits)
MAX_KEYWORD_CHARS = 200    # a keyword is a word or short phrase, not a paragraph
MAX_ID_CHARS = 500         # real message ids are < 100 chars

SEARCH, READ, ANSWER = "search_inbox", "read_email", "return_final_answer"

TOOL_SCHEMAS: list[dict] = [
    {"type": "function", "function": {
        "name": SEARCH,
        "description": (
            "Search the user's inbox (emails dated before the question). Every keyword must "
            "appear in the email's subject or body (strict AND); a multi-word keyword must "
            "appear as that exact phrase. Returns up to 10 emails, newest first, each with "
            "message_id, subject, date and a snippet. Fewer, distinctive keywords find more."),
        "parameters": {
            "type": "object",
            "properties": {"keywords": {
                "type": "array", "items": {"type": "string"}, "minItems": 1,
                "maxItems": MAX_KEYWORDS,
                "description": "Words or short phrases that must all appear."}},
            "required": ["keywords"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": READ,
        "description": "Read one email of the inbox in full, by a message_id from search "
                       "results.",
        "parameters": {
            "type": "object",
            "properties": {"message_id": {"type": "string",
                                          "description": "The email's message_id."}},
            "required": ["message_id"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": ANSWER,
        "description": "Give the final answer to the question and the message_ids of the "
                       "emails it comes from. Ends the episode.",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {"type": "string", "description": "The answer, short."},
                "sources": {"type": "array", "items": {"type": "string"},
                            "description": "message_ids of the supporting emails."}},
            "required": ["answer", "sources"], "additionalProperties": False}}},
]
SYSTEM_PROMPT = (
    "You are an email search agent. Use the tools to search the user's inbox and find the "
    "answer to the user's question. Search keywords must all appear in an email (strict "
    "AND), so use few, distinctive keywords; if a search finds nothing, try other keywords. "
    "Read emails to find the answer, then call return_final_answer with the answer and "
    "the message_ids of the emails it comes from.")
TOOL_NAMES = tuple(s["function"]["name"] for s in TOOL_SCHEMAS)
_PARAMS = {s["function"]["name"]: tuple(s["function"]["parameters"]["properties"])
           for s in TOOL_SCHEMAS}


@dataclass
class ToolCall:
    """One call as the ToolBox saw it and what it answered (EmailEnv turns it into the
    protocol's ToolResult, these fields going to `extra`)."""
    name: str                       # tool name as written ("" when no name could be parsed)
    arguments: dict | None          # parsed arguments; None when malformed
    observation: str                # the text the model saw back
    error: str | None = None        # set when the call was malformed / unknown / bad args
    hits: list[str] = field(default_factory=list)   # search_inbox: message ids returned
    new_hits: int = 0               # search_inbox: hits never returned before in this episode
    read_id: str | None = None      # read_email: id actually returned (None if missing)
    new_read: bool = False          # read_email: first successful read of this email


class _BadCall(Exception):
    """A malformed call; the message is the observation the model sees."""



def render_email(email: dict, max_chars: int | None = None) -> str:
    """An email as the model reads it: headers, a blank line, the body."""
    lines = [f"Message-ID: {email['message_id']}", f"From: {email['from_address']}",
             f"To: {', '.join(email['to_addresses'])}"]
    if email["cc_addresses"]:
        lines.append(f"Cc: {', '.join(email['cc_addresses'])}")
    if email["bcc_addresses"]:
        lines.append(f"Bcc: {', '.join(email['bcc_addresses'])}")
    lines += [f"Date: {email['date']}", f"Subject: {email['subject']}", ""]
    body = email["body"]
    if max_chars is not None and len(body) > max_chars:
        body = body[:max_chars] + f"\n[… body truncated: {len(email['body']) - max_chars} " \
                                  "more characters]"
    return "\n".join(lines + [body])


class ToolBox:
    """Executes one episode's tool calls against `db` for `inbox` as of `query_date`.

    Tracks which message ids this episode has already been shown (`new_hits`) and read
    (`new_read`): bonuses must reward state change, never the action alone."""

    def __init__(self, db: EmailDB, inbox: str, query_date, max_results: int = 10,
                 max_keywords: int = MAX_KEYWORDS, max_read_chars: int | None = None):
        if not 1 <= max_results <= MAX_RESULTS_LIMIT:
            raise ValueError(f"max_results={max_results} must be in 1..{MAX_RESULTS_LIMIT}")
        if max_keywords < 1:
            raise ValueError(f"max_keywords={max_keywords} must be >= 1")
        if not db.has_inbox(inbox):
            raise ValueError(f"inbox {inbox!r} has no emails in {db.path}")
        self.db = db
        self.inbox = inbox
        self.query_date = normalize_date(query_date, "query_date")
        self.max_results = max_results
        self.max_keywords = max_keywords
        self.max_read_chars = max_read_chars
        self.seen_hits: set[str] = set()
        self.read_ids: set[str] = set()

    def call(self, name: Any, arguments: Any) -> ToolCall:
        """Run one tool call. Never raises; malformed calls set `error`."""
        tool = name if isinstance(name, str) else ""
        args = parse_arguments(arguments)
        try:
            if tool not in TOOL_NAMES:
                shown = quote(name) if name not in (None, "") else "(none)"
                raise _BadCall(f"Error: unknown tool {shown}. Available tools: "
                               f"{', '.join(TOOL_NAMES)}.")
            if not isinstance(args, dict):
                raise _BadCall(f"Error: the arguments of {tool} must be a JSON object, "
                               f"e.g. {_example(tool)}; got {quote(arguments)}.")
            extra = [k for k in args if k not in _PARAMS[tool]]
            if extra:
                raise _BadCall(f"Error: {tool} got unexpected argument(s) "
                               f"{', '.join(quote(k, 30) for k in extra[:3])}; it takes "
                               f"{', '.join(_PARAMS[tool])}, e.g. {_example(tool)}.")
            if tool == SEARCH:
                return self._search(args)
            if tool == READ:
                return self._read(args)
            return self._answer(args)
        except _BadCall as bad:
            return ToolCall(name=tool, arguments=args if isinstance(args, dict) else None,
                            observation=str(bad), error=str(bad))
        except Exception as exc:   # a bug or a broken database must not kill the rollout
            log.exception("tool %s failed on %r", tool, arguments)
            return ToolCall(name=tool, arguments=args if isinstance(args, dict) else None,
                            observation=f"Error: {tool} failed inside the environment.",
                            error=f"internal: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ tools
    def _search(self, args: dict) -> ToolCall:
        kws = args.get("keywords")
        need = f'Error: {SEARCH} needs "keywords": a non-empty list of strings, ' \
               f'e.g. {_example(SEARCH)}'
        if not isinstance(kws, list):
            raise _BadCall(need + (f"; got {quote(kws)}." if "keywords" in args else "."))
        if not kws:
            raise _BadCall(need + "; got an empty list.")
        if len(kws) > self.max_keywords:
            raise _BadCall(f"Error: {SEARCH} takes at most {self.max_keywords} keywords; "
                           f"got {len(kws)}.")
        for kw in kws:
            if not isinstance(kw, str):
                raise _BadCall(need + f"; {quote(kw)} is not a string.")
            if not kw.strip():
                raise _BadCall(f"Error: {SEARCH} keywords must not be empty.")
            if len(kw) > MAX_KEYWORD_CHARS:
                raise _BadCall(f"Error: a keyword is at most {MAX_KEYWORD_CHARS} characters; "
                               f"{quote(kw, 30)} has {len(kw)}.")
        hits = self.db.search(self.inbox, kws, sent_before=self.query_date,
                              max_results=self.max_results)
        ids = [h["message_id"] for h in hits]
        new = [i for i in ids if i not in self.seen_hits]
        self.seen_hits.update(ids)
        if hits:
            obs = json.dumps(hits, ensure_ascii=False, separators=(",", ":"))
        else:
            obs = (f"No results: no email in this inbox contains all of "
                   f"{json.dumps(kws, ensure_ascii=False)}. Try fewer or other keywords.")
        return ToolCall(name=SEARCH, arguments=args, observation=obs, hits=ids,
                        new_hits=len(new))

    def _read(self, args: dict) -> ToolCall:
        mid = args.get("message_id")
        if not isinstance(mid, str) or not mid.strip():
            got = f"; got {quote(mid)}" if "message_id" in args else ""
            raise _BadCall(f'Error: {READ} needs "message_id": a non-empty string from the '
                           f"search results{got}.")
        if len(mid) > MAX_ID_CHARS:
            raise _BadCall(f"Error: message_id is at most {MAX_ID_CHARS} characters; "
                           f"got {len(mid)}.")
        email = self.db.read(self.inbox, mid.strip(), sent_before=self.query_date)
        if email is None:   # well-formed call, nothing to show: not an `error`
            return ToolCall(name=READ, arguments=args, observation=(
                f"Email not found: no email with message_id {quote(mid.strip())} in this "
                "inbox. Use a message_id from search results."))
        new = email["message_id"] not in self.read_ids
        self.read_ids.add(email["message_id"])
        return ToolCall(name=READ, arguments=args,
                        observation=render_email(email, self.max_read_chars),
                        read_id=email["message_id"], new_read=new)

    def _answer(self, args: dict) -> ToolCall:
        answer, sources = args.get("answer"), args.get("sources")
        if not isinstance(answer, str):
            raise _BadCall(f'Error: {ANSWER} needs "answer": a string, '
                           f"e.g. {_example(ANSWER)}.")
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise _BadCall(f'Error: {ANSWER} needs "sources": a list of message_id strings '
                           f"(may be empty), e.g. {_example(ANSWER)}.")
        return ToolCall(name=ANSWER, arguments=args, observation="")


def _example(tool: str) -> str:
    return {SEARCH: '{"keywords": ["budget", "Q3"]}',
            READ: '{"message_id": "<id from search results>"}',
            ANSWER: '{"answer": "...", "sources": ["<message_id>"]}'}[tool]
