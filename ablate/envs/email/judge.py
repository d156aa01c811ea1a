"""Answer judges (`env.judge.*`): is a predicted answer correct given the gold one?

ExactJudge — offline default. Both answers are normalised to token lists (rules in
`normalize_answer`); the prediction is correct when the lists are equal, or when the
gold tokens appear as one contiguous whole-token span of a *short* prediction that adds
no hedge or negation (`ExactJudge.judge`).

LLMJudge — any OpenAI-compatible /chat/completions endpoint. It accepts semantically
equivalent answers and rejects missing or contradicted facts; the one-word verdict is
parsed strictly; verdicts are cached on disk; timeouts, 5xx, 429 and malformed replies
are retried a bounded number of times with exponential backoff, after which a
`JudgeError` names the endpoint. A judge failure is never turned into a silent "wrong".
"""
from __future__ import annotations

import calendar
import hashlib
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal, InvalidOperation
from pathlib import Path

import httpx

from ablate.harness.episode import is_abstention

log = logging.getLogger(__name__)


class JudgeError(RuntimeError):
    """The judge could not give a verdict (endpoint unreachable, misbehaving, ...)."""


# ---------------------------------------------------------------------- normalisation
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MONTHS["sept"] = 9
_MON = r"(?P<mon>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
_WEEKDAY = r"(?:(?:mon|tues?|wed(?:nes)?|thu(?:rs)?|fri|sat(?:ur)?|sun)(?:day)?\.?,?\s+)?"
_DATE_PATTERNS = [  # order matters: most specific first
    re.compile(rf"\b{_YEAR}-(?P<mon>\d{{1,2}})-{_DAY}\b"),                          # ISO
    re.compile(rf"\b{_WEEKDAY}{_MON}\s+{_DAY},?\s+{_YEAR}\b"),                      # May 3, 2001
    re.compile(rf"\b{_WEEKDAY}{_DAY}(?:\s+of)?\s+{_MON},?\s+{_YEAR}\b"),            # 3 May 2001
    re.compile(r"\b(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<year>\d{4}|\d{2})\b"),         # 5/3/2001
    re.compile(rf"\b{_MON}\s+{_YEAR}\b"),                                           # May 2001
]
_SCALES = {"thousand": 3, "k": 3, "million": 6, "mm": 6, "mln": 6, "m": 6, "billion": 9,
           "bn": 9, "b": 9}
# a number: 1,200 | 1200 | 4.2 | .5; a scale word may follow after a space, a one-letter
# scale (k/m/b) only when attached ("$4.2M", not "4.2 m" which may be metres)
_NUMBER = re.compile(r"(?<![\w.])(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?:\.(?P<frac>\d+))?"
                     r"(?:(?P<word>\s*(?:thousand|million|billion|mln|bn|mm)\b)"
                     r"|(?P<letter>[kmb])\b)?(?![\w])")
_SMALL = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}
_DROP = {"a", "an", "the", "usd", "dollar", "dollars"}          # articles, currency words
_TOKEN = re.compile(r"\d{4}-\d{2}(?:-\d{2})?|\d+(?:\.\d+)?|[^\W_]+|%")
_NEGATION = {"not", "no", "never", "neither", "nor", "none", "isn", "wasn", "aren", "weren",
             "doesn", "didn", "don", "cannot", "unknown", "unclear"}
_HEDGE = {"or", "maybe", "perhaps", "possibly", "either"}
SHORT_EXTRA_TOKENS = 8     # a prediction may add at most this many tokens around the gold


def _iso(year: str, month: int, day: int | None) -> str | None:
    y = int(year)
    if len(year) == 2:                   # two-digit years: 00-49 -> 20xx, 50-99 -> 19xx
        y += 2000 if y < 50 else 1900
    if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
        return None
    return f"{y:04d}-{month:02d}" + (f"-{day:02d}" if day is not None else "")


def _date_sub(m: re.Match) -> str:
    g = m.groupdict()
    if "a" in g and g.get("a"):          # numeric a/b/year: US month/day unless a > 12
        a, b = int(g["a"]), int(g["b"])
        month, day = (b, a) if a > 12 else (a, b)
        iso = _iso(g["year"], month, day)
    else:
        mon = g["mon"]
        month = int(mon) if mon.isdigit() else _MONTHS[mon.rstrip(".")]
        iso = _iso(g["year"], month, int(g["day"]) if g.get("day") else None)
    return f" {iso} " if iso else m.group(0)


def _number_sub(m: re.Match) -> str:
    if not m.group("int") and not m.group("frac"):
        return m.group(0)
    digits = (m.group("int") or "0").replace(",", "") + "." + (m.group("frac") or "0")
    scale = (m.group("word") or m.group("letter") or "").strip()
    try:
        value = Decimal(digits).scaleb(_SCALES.get(scale, 0))
    except InvalidOperation:
        return m.group(0)
    text = format(value.normalize(), "f")            # 1200.0 -> 1200, 4.20 -> 4.2
    return f" {text} "


def normalize_answer(text: str) -> list[str]:
    """Tokens of an answer after: Unicode NFKC and lower case; dates in common formats to
    ISO (US month/day order for numeric dates, as in the Enron corpus); numbers without
    thousands separators or trailing zeros, with scale words applied ("$4.2M" ==
    "4.2 million" == "4,200,000"); currency symbols/words, articles and punctuation
    dropped; "%" kept as the word "percent"; number words zero..twenty as digits."""
    t = unicodedata.normalize("NFKC", text).lower()
    for pat in _DATE_PATTERNS:
        t = pat.sub(_date_sub, t)
    t = re.sub(r"[$€£¥]", " ", t)
    # protect ISO dates from the number rule, then canonicalise numbers
    parts = re.split(r"(\d{4}-\d{2}(?:-\d{2})?)", t)
    t = "".join(p if i % 2 else _NUMBER.sub(_number_sub, p) for i, p in enumerate(parts))
    out = []
    for tok in _TOKEN.findall(t):
        tok = _SMALL.get(tok, tok)
        if tok == "%":
            tok = "percent"
        if tok not in _DROP:
            out.append(tok)
    return out


def _is_number(tok: str) -> bool:
    return tok[0].isdigit()


def _find_span(hay: list[str], needle: list[str]) -> int:
    n = len(needle)
    for i in range(len(hay) - n + 1):
        if hay[i:i + n] == needle:
            return i
    return -1


class ExactJudge:
    """Normalised exact match, with one allowance for short sentence answers: the gold
    tokens may sit as a contiguous span inside the prediction if the prediction adds at
    most SHORT_EXTRA_TOKENS tokens, none of them a negation ("not", "no", "isn't"...), a
    hedge ("or", "maybe"...) or another number/date (which would be a second candidate)."""

    def judge(self, question: str, gold: str, prediction: str | None) -> bool:
        if prediction is None or is_abstention(prediction):
            return False
        g, p = normalize_answer(gold), normalize_answer(prediction)
        if not g:   # a gold answer of pure punctuation/articles: compare the raw text
            return gold.strip().lower() == prediction.strip().lower()
        if g == p:
            return True
        i = _find_span(p, g)
        if i < 0 or len(p) - len(g) > SHORT_EXTRA_TOKENS:
            return False
        extra = p[:i] + p[i + len(g):]
        return not any(t in _NEGATION or t in _HEDGE or _is_number(t) for t in extra)

    def judge_many(self, items: Iterable) -> list[bool]:
        return [self.judge(*_unpack(it)) for it in items]


def _unpack(item) -> tuple[str, str, str | None]:
    if isinstance(item, Mapping):
        try:
            return item["question"], item["gold"], item["prediction"]
        except KeyError as exc:
            raise ValueError(f"judge item lacks key {exc}; needs question, gold, "
                             "prediction") from None
    question, gold, prediction = item
    return question, gold, prediction


# ---------------------------------------------------------------------- LLM judge
PROMPT_VERSION = "v1"   # part of the cache key: change it when the prompt changes
SYSTEM_PROMPT = (
    "You grade answers to questions about a person's emails. Compare the PREDICTED answer "
    "with the GOLD answer.\n"
    "Reply CORRECT if the predicted answer states the same fact as the gold answer, even "
    "in other words, another format (dates, numbers, units, names with or without "
    "titles) or with extra detail that does not contradict it.\n"
    "Reply INCORRECT if it misses the key fact, contradicts the gold answer, gives several "
    "candidate answers, or says it does not know.\n"
    "Reply with exactly one word: CORRECT or INCORRECT.")
_VERDICT = re.compile(r"^(?:verdict\s*:\s*)?\**\s*(correct|incorrect)\s*\**\.?$", re.I)


def parse_verdict(reply: str | None) -> bool | None:
    """True/False for a reply that is exactly CORRECT or INCORRECT (case-insensitive,
    optional "Verdict:", bold markers or final period; a leading <think> block is
    ignored); None for anything else."""
    if not isinstance(reply, str):
        return None
    text = reply
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    m = _VERDICT.match(text.strip())
    return None if m is None else m.group(1).lower() == "correct"


class _VerdictCache:
    """Verdicts on disk (SQLite, WAL: safe across processes and threads)."""

    def __init__(self, cache_dir: str | os.PathLike | None):
        self._lock = threading.Lock()
        self._mem: dict[str, bool] = {}
        self._conn = None
        if cache_dir:
            path = Path(os.path.expanduser(str(cache_dir)))
            path.mkdir(parents=True, exist_ok=True)
            self.path = path / "verdicts.sqlite"
            self._conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                         isolation_level=None)
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, "
                               "verdict INTEGER NOT NULL, model TEXT, created REAL)")

    def get(self, key: str) -> bool | None:
        with self._lock:
            if key in self._mem:
                return self._mem[key]
            if self._conn is None:
                return None
            row = self._conn.execute("SELECT verdict FROM verdicts WHERE key = ?",
                                     (key,)).fetchone()
        return None if row is None else bool(row[0])

    def put(self, key: str, verdict: bool, model: str) -> None:
        with self._lock:
            self._mem[key] = verdict
            if self._conn is not None:
                self._conn.execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?)",
                                   (key, int(verdict), model, time.time()))

    def close(self):
        if self._conn is not None:
            self._conn.close()


class LLMJudge:
    """Judge by an LLM behind an OpenAI-compatible API.

    base_url is what OpenAI's client takes (usually ending in /v1); the request goes to
    {base_url}/chat/completions (a bare host gets /v1 added). The API key is read from
    the environment variable `api_key_env` (no Authorization header when unset, as local
    servers need none). Predictions that ExactJudge already accepts, and abstentions,
    are decided without a call (`exact_first`)."""

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 30.0, max_retries: int = 3,
                 cache_dir: str | os.PathLike | None = None, *, backoff_s: float = 1.0,
                 max_tokens: int = 256, concurrency: int = 8, exact_first: bool = True):
        if not base_url or not model:
            raise ValueError("LLMJudge needs base_url and model (env.judge.base_url, "
                             "env.judge.model)")
        if not timeout_s > 0:
            raise ValueError(f"env.judge.timeout_s={timeout_s} must be > 0 seconds")
        if max_retries < 0:
            raise ValueError(f"env.judge.max_retries={max_retries} must be >= 0")
        base = base_url.rstrip("/")
        if httpx.URL(base).path in ("", "/"):
            base += "/v1"
        self.url = base + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_tokens = max_tokens
        self.concurrency = max(1, concurrency)
        self.exact_first = exact_first
        self.api_key_env = api_key_env
        key = os.environ.get(api_key_env) if api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._secret = key or None
        # a fresh connection per request: its socket is what the total deadline shuts
        self._client = httpx.Client(timeout=timeout_s, headers=headers,
                                    limits=httpx.Limits(max_keepalive_connections=0))
        self._cache = _VerdictCache(cache_dir)
        self._exact = ExactJudge()
        self.calls = 0   # HTTP requests made (tests and cost accounting)

    def close(self) -> None:
        self._client.close()
        self._cache.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def cache_key(self, question: str, gold: str, prediction: str) -> str:
        blob = json.dumps([PROMPT_VERSION, self.model, question, gold, prediction],
                          ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def judge(self, question: str, gold: str, prediction: str | None) -> bool:
        if prediction is None or is_abstention(prediction):
            return False
        if self.exact_first and self._exact.judge(question, gold, prediction):
            return True
        key = self.cache_key(question, gold, prediction)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        verdict = self._ask(question, gold, prediction)
        self._cache.put(key, verdict, self.model)
        return verdict

    def judge_many(self, items: Iterable) -> list[bool]:
        items = [_unpack(it) for it in items]
        if self.concurrency == 1 or len(items) <= 1:
            return [self.judge(*it) for it in items]
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda it: self.judge(*it), items))

    # ------------------------------------------------------------------ HTTP
    def _ask(self, question: str, gold: str, prediction: str) -> bool:
        payload = {"model": self.model, "temperature": 0, "max_tokens": self.max_tokens,
                   "messages": [
                       {"role": "system", "content": SYSTEM_PROMPT},
                       {"role": "user", "content": f"Question: {question}\nGold answer: "
                                                   f"{gold}\nPredicted answer: {prediction}"
                                                   "\nVerdict:"}]}
        attempts = self.max_retries + 1
        problem = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(30.0, self.backoff_s * 2 ** (attempt - 1)))
            deadline = Deadline(self.timeout_s)
            try:
                self.calls += 1
                with deadline:
                    resp = self._client.post(self.url, json=payload,
                                             extensions={"trace": deadline.trace})
            except httpx.TimeoutException:
                problem = f"timed out after {self.timeout_s}s"
                continue
            except httpx.TransportError as exc:   # refused, DNS, reset, ...
                problem = (f"timed out after {self.timeout_s}s (total deadline of the "
                           "request)") if deadline.expired else \
                    f"unreachable ({type(exc).__name__}: {self._redact(str(exc))})"
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                problem = f"HTTP {resp.status_code}: {self._redact(resp.text)[:200]!r}"
                continue
            if resp.status_code != 200:   # 4xx: retrying cannot help
                hint = (f" (is ${self.api_key_env} set?)"
                        if resp.status_code in (401, 403) else "")
                raise JudgeError(f"LLM judge at {self.url} (model {self.model!r}) answered "
                                 f"HTTP {resp.status_code}{hint}: "
                                 f"{self._redact(resp.text)[:300]!r}")
            try:
                reply = resp.json()["choices"][0]["message"]["content"]
            except (ValueError, KeyError, IndexError, TypeError):
                problem = f"not an OpenAI chat completion: {self._redact(resp.text)[:200]!r}"
                continue
            verdict = parse_verdict(reply)
            if verdict is not None:
                return verdict
            problem = (f"no CORRECT/INCORRECT verdict in reply "
                       f"{self._redact(str(reply))[:200]!r}")
            log.warning("LLM judge reply unparseable (attempt %d/%d): %r", attempt + 1,
                        attempts, str(reply)[:200])
        raise JudgeError(f"LLM judge at {self.url} (model {self.model!r}) failed after "
                         f"{attempts} attempt(s): {problem}")

    def _redact(self, text: str) -> str:
        """A server's text without the API key or any Authorization header it echoed."""
        if self._secret:
            text = text.replace(self._secret, "<redacted>")
        return _CREDENTIAL.sub(r"\1<redacted>", text)


# an echoed request header: "Authorization: Bearer KEY", "Bearer KEY", "api-key: KEY"
_CREDENTIAL = re.compile(r"((?:authorization|api[-_]?key|x-api-key)[\"']?\s*[:=]\s*[\"']?"
                         r"(?:bearer\s+|basic\s+)?|bearer\s+)[^\s\"',;}]+", re.I)


class Deadline:
    """A total deadline for one HTTP request. A per-read timeout lets a server that
    trickles a byte a second hold a request forever; at `seconds` this shuts the
    request's socket down (found through httpcore's trace hook), which ends any read
    or write at once. Use as a context manager around the request."""

    def __init__(self, seconds: float):
        self.seconds, self.expired = float(seconds), False
        self._sockets: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(self.seconds, self._expire)
        self._timer.daemon = True

    def trace(self, name: str, info: dict) -> None:
        if name.endswith("connect_tcp.complete") and info.get("return_value") is not None:
            sock = info["return_value"].get_extra_info("socket")
            with self._lock:
                self._sockets.append(sock)
                if self.expired:
                    _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()


def _shut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass


def make_judge(cfg) -> ExactJudge | LLMJudge:
    """The judge named by cfg.name (a JudgeConfig or the `env.judge` node of the config)."""
    name = getattr(cfg, "name", None)
    if name == "exact":
        return ExactJudge()
    if name == "llm":
        return LLMJudge(base_url=cfg.base_url, model=cfg.model, api_key_env=cfg.api_key_env,
                        timeout_s=cfg.timeout_s, max_retries=cfg.max_retries,
                        cache_dir=cfg.cache_dir)
    raise ValueError(f"env.judge.name={name!r} is not allowed; choose one of ['exact', 'llm']")
