"""One-time build of the tiny warm start (see ablate.models.tiny for the CLI).

Pipeline, deterministic from `seed` (same steps => same weights on the same torch build):
  1. worlds: fresh synthetic mailboxes (seeds disjoint from any env gen_seed a user is
     likely to pick), each built into its own EmailDB (PLATFORM: a shared DB makes every
     search scan all mailboxes);
  2. demonstrations: the scripted agent (imperfect on purpose: extra keywords it then
     backs off from, misreads it recovers from, a controlled share of "I don't know";
     episodes with a wrong non-abstaining answer are dropped) acting through the real
     ToolBox, rendered with the harness's own chat functions so SFT and RL see
     token-identical text; a share in thinking mode (one random turn segment each);
  3. tokenizer: byte-level BPE on mailbox + harness text, with every message id, code
     name and answer value of the synthetic pools as ONE token (copying = pointing);
  4. model: Qwen3 architecture, tied embeddings, a few million parameters;
  5. SFT: loss on assistant tokens only, tokens that must be copied from context (ids,
     code names, values) weighted up. The system prompt (tool schemas, ~60% of an
     instruct episode's tokens) is identical in every sequence: its KV cache is computed
     once per step without gradient and shared by the batch, which roughly halves the
     cost of a step on CPU.
Checkpoints every `ckpt_every` steps (model, optimiser, step); a killed build resumes.
"""
from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

WORLD_SEED_BASE = 910_000      # training worlds use gen seeds 910000+seed*1000+w


@dataclass
class BuildConfig:
    seed: int = 0
    steps: int = 900
    worlds: int = 30
    inboxes_per_world: int = 8
    emails_per_inbox: int = 120
    tasks_per_world: int = 160
    bpe_vocab: int = 2048
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 640
    lr: float = 1.5e-3
    min_lr_frac: float = 0.1
    warmup: int = 60
    weight_decay: float = 0.01
    batch_tokens: int = 2560        # non-prefix tokens per step (padded)
    copy_weight: float = 5.0        # loss weight of pool tokens (ids, names, values)
    type_init: float = 1.0          # shared per-pool direction in pool tokens' embeddings
    copy_init_layers: str = "0"     # layers whose head 0 starts as a copy head ("" = none)
    copy_init_scale: float = 2.0
    freeze_copy_head: bool = True   # keep the wired copy head fixed during SFT
    pool_attn_init: float = 1.0     # copy heads start attending to pool tokens (0 = off)
    thinking_share: float = 0.1
    window_tokens: int = 4096       # tokens per step of turn-window (copy curriculum) batches
    window_until: float = 0.5       # share of steps over which windows fade out
    window_floor: float = 0.2       # share of window steps after that
    idk_share: float = 0.05         # share of "I don't know" demonstrations kept
    # demonstrator knobs
    extra_keyword_prob: float = 0.2
    misread_prob: float = 0.1
    give_up_prob: float = 0.1
    ckpt_every: int = 50
    threads: int = 1                # 1: fastest on a shared 2-core box (no spin-waits); 0: torch default
    bf16: bool = True               # bfloat16 autocast (avx512_bf16: ~1.5x faster on CPU)


def _log(msg: str) -> None:
    print(f"[tiny-build {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- data
def make_worlds(cfg: BuildConfig, work: Path) -> list[dict]:
    from ablate.envs.email import synthetic
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    out = []
    for w in range(cfg.worlds):
        d = work / "worlds" / f"w{w:03d}"
        if not (d / "DONE").exists():
            synthetic.generate(d, seed=WORLD_SEED_BASE + cfg.seed * 1000 + w,
                               num_inboxes=cfg.inboxes_per_world,
                               emails_per_inbox=cfg.emails_per_inbox,
                               train_tasks=cfg.tasks_per_world, test_tasks=0,
                               max_hops=3 if w % 3 == 2 else 2)
            (d / "DONE").write_text("")
        EmailDB.build(d / "emails.jsonl", d / "db.sqlite").close()   # cached by content
        out.append({"dir": d, "tasks": read_tasks(d / "train_tasks.jsonl")})
    return out


def run_demos(cfg: BuildConfig, worlds: list[dict]) -> list[dict]:
    """Scripted episodes -> [{task, steps, kind}] (kind: 'ok' | 'idk')."""
    from ablate.envs.email.db import EmailDB
    from ablate.envs.email.scripted import ScriptedAgent
    from ablate.envs.email.tools import ToolBox
    from ablate.harness.episode import is_abstention
    agent = ScriptedAgent(extra_keyword_prob=cfg.extra_keyword_prob,
                          misread_prob=cfg.misread_prob, give_up_prob=cfg.give_up_prob,
                          think=True)
    demos = []
    rng = random.Random(f"demos-{cfg.seed}")
    for w in worlds:
        with EmailDB.open(w["dir"] / "db.sqlite") as db:
            for t in w["tasks"]:
                ep, steps = agent.run(t, ToolBox(db, t.inbox_address, t.query_date), rng)
                if ep.final_answer is None:
                    continue
                if is_abstention(ep.final_answer):
                    kind = "idk"
                elif ep.final_answer == t.answer:
                    kind = "ok"
                else:
                    continue
                demos.append({"task": t, "steps": steps, "kind": kind})
    ok = [d for d in demos if d["kind"] == "ok"]
    idk = [d for d in demos if d["kind"] == "idk"]
    n_idk = min(len(idk), int(round(cfg.idk_share * len(ok) / max(1e-9, 1 - cfg.idk_share))))
    keep = ok + rng.sample(idk, n_idk)
    rng.shuffle(keep)
    return keep


def chat_steps(steps, thinking: bool) -> list[tuple[str, list[str]]]:
    """Scripted Steps -> render_demonstration's [(assistant_text, [observation])]."""
    from ablate.harness.chat import format_tool_call
    out = []
    for s in steps:
        text = format_tool_call(s.name, s.arguments)
        if thinking and s.think:
            text = f"<think>\n{s.think}\n</think>\n\n" + text
        out.append((text, [s.observation]))
    return out


def tokenizer_texts(worlds, demos, n_demo_texts: int = 400) -> list[str]:
    """Mailbox text + harness text in proportion to what the model will read."""
    from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
    from ablate.harness.chat import observation_text
    from ablate.models.tokenizer import QWEN3_CHAT_TEMPLATE  # noqa: F401 (documented)
    texts = []
    for w in worlds[:3]:
        with open(w["dir"] / "emails.jsonl", encoding="utf-8") as fh:
            for line in fh:
                e = json.loads(line)
                texts.append(f"{e['subject']}\n{e['body']}")
    schema = "\n".join(json.dumps(s) for s in TOOL_SCHEMAS)
    for d in demos[:n_demo_texts]:
        texts += [SYSTEM_PROMPT, schema, d["task"].question]
        for text, obs in chat_steps(d["steps"], thinking=True):
            texts += [text, observation_text(obs, "")]
    return texts


def render_all(cfg: BuildConfig, tok, demos) -> list[dict]:
    """Token sequences: instruct demos whole; thinking demos as one random turn segment."""
    from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
    from ablate.harness.chat import render_demonstration_segments
    from ablate.harness.config import ModeConfig
    instruct = ModeConfig(name="instruct", enable_thinking=False)
    thinking = ModeConfig(name="thinking", enable_thinking=True)
    rng = random.Random(f"render-{cfg.seed}")
    seqs = []
    for d in demos:
        think = rng.random() < cfg.thinking_share
        segs = render_demonstration_segments(tok, d["task"], chat_steps(d["steps"], think),
                                             thinking if think else instruct, TOOL_SCHEMAS,
                                             SYSTEM_PROMPT)
        ids, mask = segs[rng.randrange(len(segs))] if think else segs[0]
        seqs.append({"ids": ids, "mask": mask, "hops": d["task"].hops, "think": think})
    return seqs


def common_prefix(seqs) -> int:
    """Length of the prefix shared by every sequence (system prompt + tools), minus one
    token so that every sequence keeps at least its first user-turn token."""
    first = seqs[0]["ids"]
    n = len(first)
    for s in seqs[1:]:
        ids = s["ids"]
        m = min(n, len(ids))
        k = 0
        while k < m and ids[k] == first[k]:
            k += 1
        n = k
    return max(0, n - 1)


def turn_windows(seqs, prefix: int) -> list[dict]:
    """Short copy-curriculum examples: for every assistant turn, the text since the
    previous turn ended (the observation, or the user question for the first turn) plus
    the turn, loss on the turn only.

    Why: a copy head gets gradient in proportion to the attention it already puts on the
    source token; in a 1,000-token episode that starts near 1/1000 and the circuit never
    forms within a CPU budget (the probes' failure). In a ~150-token window the signal is
    an order of magnitude stronger; once attention selects by type and recency, full
    episodes take over (RoPE: only relative positions matter)."""
    out = []
    for s in seqs:
        ids, mask = s["ids"], s["mask"]
        start, t, n = prefix, 0, len(ids)
        while t < n:
            if mask[t] and (t == 0 or not mask[t - 1]):
                e = t
                while e < n and mask[e]:
                    e += 1
                out.append({"ids": ids[start:e], "mask": [0] * (t - start) + [1] * (e - t)})
                start, t = e, e
            else:
                t += 1
    return out


def make_batches(seqs, prefix: int, batch_tokens: int, rng: random.Random):
    """Length-bucketed batches of indices (padded size <= batch_tokens), shuffled."""
    order = list(range(len(seqs)))
    rng.shuffle(order)
    batches = []
    for c in range(0, len(order), 256):
        chunk = sorted(order[c:c + 256], key=lambda i: len(seqs[i]["ids"]))
        cur, longest = [], 0
        for i in chunk:
            n = len(seqs[i]["ids"]) - prefix
            if cur and max(longest, n) * (len(cur) + 1) > batch_tokens:
                batches.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, n)
        if cur:
            batches.append(cur)
    rng.shuffle(batches)
    return batches


# ----------------------------------------------------------------------------- model
def make_model(cfg: BuildConfig, tok):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(cfg.seed)
    mc = Qwen3Config(
        vocab_size=len(tok), hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.hidden // cfg.heads, intermediate_size=cfg.intermediate,
        max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id, initializer_range=0.02)
    model = Qwen3ForCausalLM(mc)
    if cfg.type_init:
        type_aware_init(model, tok, cfg.type_init)
    layers = [int(x) for x in cfg.copy_init_layers.split(",") if x.strip()]
    for layer in layers:
        copy_head_init(model, layer, cfg.copy_init_scale, seed=cfg.seed + layer)
    if cfg.pool_attn_init and layers:
        pool_attention_init(model, tok, layers, cfg.pool_attn_init)
    return model


def copy_head_slices(model, cfg: BuildConfig):
    """(parameter, index, initial value) of the wired copy heads' q/k/v/o weights.

    Why frozen: left free, SFT switched the wired head off within ~200 steps (its
    proposal mixes every pool token in context, so at first it hurts as often as it
    helps) and the model fell back to a context-free prior. Kept fixed, it is a copy
    *proposal* the rest of the network learns to filter by type."""
    hd = model.config.head_dim
    out = []
    for layer in [int(x) for x in cfg.copy_init_layers.split(",") if x.strip()]:
        a = model.model.layers[layer].self_attn
        for param, index in ((a.q_proj.weight, (slice(0, hd), slice(None))),
                             (a.k_proj.weight, (slice(0, hd), slice(None))),
                             (a.v_proj.weight, (slice(0, hd), slice(None))),
                             (a.o_proj.weight, (slice(None), slice(0, hd)))):
            out.append((param, index, param.detach()[index].clone()))
        # what the head reads: in layer 0 that is exactly the (frozen) token embedding
        for param in (model.model.layers[layer].input_layernorm.weight, a.q_norm.weight,
                      a.k_norm.weight):
            out.append((param, slice(None), param.detach().clone()))
    emb = model.get_input_embeddings().weight
    out.append((emb, slice(None), emb.detach().clone()))
    return out


def pool_attention_init(model, tok, layers, strength: float) -> None:
    """Make head 0 of `layers` start out attending to pool tokens (ids, names, values).

    A constant direction c is added to every token embedding (a shared logit offset:
    softmax-invariant) so that queries have a constant part; the head's query is c's
    projection and its key the projection on the pool type directions, both in the
    slowest RoPE dimension pair (rotation < 0.3 rad over 2k positions, so the match is
    position-independent). The copy head then reads the pool tokens of its context from
    step 0 and its OV output scores them; training only has to refine *which* one
    (the first result, the value in the last email), a much easier gradient path than
    discovering the attention pattern from scratch."""
    import torch
    from ablate.envs.email import synthetic
    emb = model.get_input_embeddings().weight
    H, hd = model.config.hidden_size, model.config.head_dim
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        norm = emb.norm(dim=1).mean()
        c = torch.randn(H, generator=g)
        c = c / c.norm()
        emb += c * norm * 0.7
        types = []
        for pool in (synthetic.id_pool(), synthetic.CODENAMES, synthetic.CITIES,
                     synthetic.COMPANIES, synthetic.AMOUNTS, synthetic.CAPACITIES):
            ids = torch.tensor([tok.convert_tokens_to_ids(s) for s in pool])
            d = emb[ids].mean(0) - c * norm * 0.7 - emb.mean(0) + c * norm * 0.7
            types.append(d / d.norm())
        t_sum = torch.stack(types).sum(0)
        t_sum = t_sum / t_sum.norm()
        slow = hd // 2 - 1                     # slowest RoPE pair: dims (slow, hd - 1)
        for layer in layers:
            attn = model.model.layers[layer].self_attn
            attn.q_proj.weight[:hd, :] = 0.0   # head 0's query: only the constant part
            attn.q_proj.weight[slow, :] = c * strength
            attn.k_proj.weight[slow, :] = t_sum * strength


def copy_head_init(model, layer: int, scale: float, seed: int = 0) -> None:
    """Start head 0 of `layer` as a copy head: its OV circuit is a projection onto a
    random head_dim-dimensional subspace (W_O = Q^T, W_V = Q), so whatever token it
    attends to is written back in the direction of that token's own (tied) embedding.

    Why: a copy head needs two parts, OV (write what you read) and QK (read the right
    token); each part's gradient is proportional to the other's quality, so from random
    init both start at ~0 and the circuit forms late or never (what all three CPU probes
    saw). With OV wired, attending to the right token lowers the loss at once, and QK
    is learned by plain gradient descent. The model stays a standard Qwen3."""
    import torch
    attn = model.model.layers[layer].self_attn
    hd = model.config.head_dim
    H = model.config.hidden_size
    g = torch.Generator().manual_seed(4321 + seed)
    q, _ = torch.linalg.qr(torch.randn(H, hd, generator=g))    # H x hd, orthonormal columns
    with torch.no_grad():
        attn.v_proj.weight[:hd, :] = q.T * scale                # kv group 0 (heads 0..)
        attn.o_proj.weight[:, :hd] = q * scale


def type_aware_init(model, tok, scale: float) -> None:
    """Give every token of a pool (message ids, code names, cities, companies, amounts,
    capacities) a shared random direction on top of its own random embedding.

    Why: a copy head must find "the id in the last result list" or "the amount in the
    email read". With purely random embeddings the 4,096 rarely seen id tokens share no
    feature a query could match, and learning one takes thousands of steps (PLATFORM:
    the probes never got there). With a type direction from the start, attention can
    select by type at once and the token's own random part still tells the copies apart
    (tied embeddings: the copied vector scores its own token highest)."""
    import torch
    from ablate.envs.email import synthetic
    pools = [synthetic.id_pool(), synthetic.CODENAMES, synthetic.CITIES, synthetic.COMPANIES,
             synthetic.AMOUNTS, synthetic.CAPACITIES]
    emb = model.get_input_embeddings().weight
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for pool in pools:
            ids = torch.tensor([tok.convert_tokens_to_ids(s) for s in pool])
            rows = emb[ids]
            direction = torch.randn(emb.shape[1], generator=g)
            direction = direction / direction.norm() * rows.norm(dim=1).mean() * scale
            emb[ids] = rows + direction


def step_loss(model, batch, prefix_ids, weights_table, kind_table=None):
    """Weighted next-token loss on the masked (assistant) tokens of `batch`
    (list of (ids, mask)); the shared prefix runs once, without gradient."""
    import torch
    B = len(batch)
    P = len(prefix_ids)
    cache = None
    if P:
        with torch.no_grad():
            pre = model.model(input_ids=torch.tensor([prefix_ids]), use_cache=True)
            cache = getattr(pre, "cache", None) or pre.past_key_values
            cache.batch_repeat_interleave(B)
    T = max(len(ids) for ids, _ in batch) - P
    pad = 0
    x = torch.full((B, T), pad, dtype=torch.long)
    for b, (ids, _) in enumerate(batch):
        x[b, :len(ids) - P] = torch.tensor(ids[P:])
    pos = torch.arange(P, P + T).unsqueeze(0).expand(B, T)
    h = model.model(input_ids=x, cache=cache, position_ids=pos,
                    use_cache=False).last_hidden_state          # (B, T, H)
    rows, cols, labels = [], [], []
    for b, (ids, mask) in enumerate(batch):
        for t in range(max(P, 1), len(ids)):
            if mask[t]:
                rows.append(b)
                cols.append(t - 1 - P)   # hidden at t-1 predicts token t
                labels.append(ids[t])
    rows, cols = torch.tensor(rows), torch.tensor(cols)
    labels = torch.tensor(labels)
    logits = model.lm_head(h[rows, cols]).float()
    nll = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
    w = weights_table[labels]
    loss = (nll * w).sum() / w.sum()
    with torch.no_grad():
        acc = (logits.argmax(-1) == labels).float()
        copy = w > 1
        copy_acc = acc[copy].mean().item() if copy.any() else float("nan")
        out = {"acc": acc.mean().item(), "copy_acc": copy_acc, "tokens": len(labels)}
        if kind_table is not None:
            kinds = kind_table[labels]
            for k, name in ((1, "id"), (2, "name"), (3, "value")):
                sel = kinds == k
                out[f"{name}_acc"] = acc[sel].mean().item() if sel.any() else float("nan")
    return loss, out


def window_source(cfg: BuildConfig, step: int) -> bool:
    """True: this step trains on turn windows. Probability 1 at the start, falling
    linearly to window_floor at window_until x steps, then constant."""
    end = max(1, int(cfg.window_until * cfg.steps))
    p = max(cfg.window_floor, 1.0 - (1.0 - cfg.window_floor) * step / end)
    return random.Random(f"src-{cfg.seed}-{step}").random() < p


def lr_at(cfg: BuildConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    p = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


# ----------------------------------------------------------------------------- build
def build(out_dir, cfg: BuildConfig, work_dir=None, minutes: float | None = None,
          eval_tasks: int = 0) -> Path:
    """Build (or resume) the warm start into out_dir. Returns out_dir. With `minutes`,
    stops after that much training time with a checkpoint (run again to resume)."""
    import torch
    from ablate.envs.email import synthetic
    from ablate.models.tokenizer import build_tokenizer
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(out_dir)
    work = Path(work_dir) if work_dir else out.parent / (out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    (work / "build_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    t0 = time.time()
    worlds = make_worlds(cfg, work)
    _log(f"{len(worlds)} worlds ready ({time.time() - t0:.0f}s)")
    demos = run_demos(cfg, worlds)
    _log(f"{len(demos)} demonstrations ({sum(d['kind'] == 'idk' for d in demos)} I-don't-know)")
    tok_dir = work / "tokenizer"
    if (tok_dir / "tokenizer.json").exists():
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(tok_dir))
    else:
        tok = build_tokenizer(tokenizer_texts(worlds, demos), cfg.bpe_vocab,
                              synthetic.all_special_strings(), tok_dir)
    _log(f"tokenizer: {len(tok)} tokens")
    seqs = render_all(cfg, tok, demos)
    prefix = common_prefix(seqs)
    prefix_ids = seqs[0]["ids"][:prefix]
    n_tok = sum(len(s["ids"]) - prefix for s in seqs)
    _log(f"{len(seqs)} sequences, shared prefix {prefix} tokens, {n_tok} other tokens")
    model = make_model(cfg, tok)
    n_params = sum(p.numel() for p in model.parameters())
    _log(f"model: {n_params / 1e6:.2f}M parameters")
    weights = torch.ones(len(tok))
    copy_ids = [tok.convert_tokens_to_ids(s) for s in synthetic.all_special_strings()]
    weights[torch.tensor(copy_ids)] = cfg.copy_weight
    kinds = torch.zeros(len(tok), dtype=torch.long)
    for k, pool in ((1, synthetic.id_pool()), (2, synthetic.CODENAMES),
                    (3, synthetic.AMOUNTS + synthetic.CAPACITIES + synthetic.CITIES +
                     synthetic.COMPANIES)):
        kinds[torch.tensor([tok.convert_tokens_to_ids(x) for x in pool])] = k
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8)
    frozen = copy_head_slices(model, cfg) if cfg.freeze_copy_head else []
    ckpt = work / "ckpt.pt"
    step, history = 0, []
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, history = state["step"], state["history"]
        _log(f"resumed at step {step}")
    wins = turn_windows(seqs, prefix)
    _log(f"{len(wins)} turn windows (copy curriculum)")
    # The batch sequence depends only on the seed: epoch e uses Random(seed, e); each
    # step's source (window or full episode) is drawn from Random(seed, step).
    def batches_from(data, pre, tokens, tag, skip):
        e, k = 0, 0
        while True:
            bs = make_batches(data, pre, tokens, random.Random(f"{tag}-{cfg.seed}-{e}"))
            for b in bs:
                if k >= skip:
                    yield b
                k += 1
            e += 1
    sources = [window_source(cfg, s) for s in range(cfg.steps)]
    n_win = sum(sources[:step])
    it_full = batches_from(seqs, prefix, cfg.batch_tokens, "b", step - n_win)
    it_win = batches_from(wins, 0, cfg.window_tokens, "w", n_win)
    model.train()
    t_start = time.time()
    from tqdm import tqdm
    bar = tqdm(total=cfg.steps, initial=step, desc="tiny SFT", unit="step",
               mininterval=10, disable=not os.isatty(2) and os.environ.get("TINY_BAR") != "1")
    def fresh():
        return {"loss": 0.0, "acc": 0.0, "copy": 0.0, "n": 0,
                **{f"{k}_acc": [] for k in ("id", "name", "value")}}
    run = fresh()
    while step < cfg.steps:
        use_win = sources[step]
        data = wins if use_win else seqs
        idx = next(it_win if use_win else it_full)
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            loss, m = step_loss(model, [(data[i]["ids"], data[i]["mask"]) for i in idx],
                                [] if use_win else prefix_ids, weights, kinds)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():            # the wired copy head stays as wired (see below)
            for param, index, value in frozen:
                param[index] = value
        step += 1
        bar.update(1)
        run["loss"] += loss.item(); run["acc"] += m["acc"]
        run["copy"] += 0 if math.isnan(m["copy_acc"]) else m["copy_acc"]; run["n"] += 1
        for k in ("id_acc", "name_acc", "value_acc"):
            if not math.isnan(m[k]):
                run[k].append(m[k])
        if step % 25 == 0 or step == cfg.steps:
            n = run["n"]
            rec = {"step": step, "loss": run["loss"] / n, "acc": run["acc"] / n,
                   "copy_acc": run["copy"] / n, "minutes": (time.time() - t_start) / 60,
                   **{k: sum(run[k]) / max(1, len(run[k]))
                      for k in ("id_acc", "name_acc", "value_acc")}}
            history.append(rec)
            _log(json.dumps(rec))
            run = fresh()
        stop = minutes is not None and (time.time() - t_start) > minutes * 60
        if step % cfg.ckpt_every == 0 or step == cfg.steps or stop:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "history": history}, tmp)
            tmp.replace(ckpt)
        if stop and step < cfg.steps:
            _log(f"time budget reached at step {step}/{cfg.steps}; run again to resume")
            bar.close()
            save_checkpoint(model, tok, out, cfg, history, partial=True)
            return out
    bar.close()
    save_checkpoint(model, tok, out, cfg, history, partial=False)
    _log(f"done: {out}")
    return out


def save_checkpoint(model, tok, out: Path, cfg: BuildConfig, history, partial: bool,
                    dtype: str = "float16") -> None:
    import torch
    out.mkdir(parents=True, exist_ok=True)
    m = model.to(getattr(torch, dtype))
    m.config.dtype = dtype
    m.save_pretrained(str(out), safe_serialization=True)
    model.to(torch.float32)
    tok.save_pretrained(str(out))
    info = {"build_config": asdict(cfg), "history": history, "partial": partial,
            "stored_dtype": dtype}
    (out / "build_info.json").write_text(json.dumps(info, indent=2))
