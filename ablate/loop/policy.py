"""The policies a cell acts with: the environment's scripted baseline, a learning model
(learner + sampler) and the acting half alone (the asynchronous producer's policy)."""
from __future__ import annotations

import time
from pathlib import Path

from ablate.agents import agent_for, persistent_agent, run_rollout
from ablate.algos.curriculum import WithExperience
from ablate.core.seeding import derived_seed
from ablate.envs import run_episode
from ablate.harness.episode import scripted_episode
from ablate.protocol.trajectory import baseline_policy
from ablate.loop.scoring import score
from ablate.models.loading import load_policy, sampler_copy
from ablate.samplers import SAMPLERS, make_sampler

# False: the evaluation's greedy episodes in a second rollout after the sampled ones (the
# engine before issue 31, kept as the benchmarks' baseline: benchmarks/bench_eval.py)
MERGED_EVAL = True
# False: a LoRA cell pushes the adapter merged into the whole base (the route before
# adapter-native sync, kept as the benchmarks' baseline: benchmarks/bench_push.py)
ADAPTER_SYNC = True


def eval_episodes(policy, tasks, samples: int, *, temperature: float, greedy: bool,
                  seed: int, greedy_seed: int) -> tuple[list, list]:
    """An evaluation's episodes: `samples` per task at `temperature`, and (greedy and
    temperature > 0) one greedy episode per task. A model policy with the plain rollout
    (agent=react) and a sampler taking per-prompt temperatures runs both in ONE rollout
    (sample index `samples` is the greedy one): the sampled rows draw exactly the random
    numbers they drew alone, and every decoding step and prefix serves both. Batch
    composition can change float rounding, so a greedy near-tie may flip (docs/cpu.md:
    the default cell's 192 rows were identical; tests/samplers/test_eval_merged.py bounds it)."""
    greedy = greedy and temperature > 0
    if greedy and MERGED_EVAL and _merges(policy):
        eps = run_rollout(policy, tasks, samples + 1, seed=seed,
                          temperature=[temperature] * samples + [0.0])
        sampled = [e for e in eps if e.sample < samples]
        g_eps = [e for e in eps if e.sample == samples]
        for e in g_eps:
            e.sample = 0
        return sampled, g_eps
    eps = policy.act(tasks, samples, temperature=temperature, seed=seed, evaluation=True)
    g_eps = policy.act(tasks, 1, temperature=0.0, seed=greedy_seed,
                       evaluation=True) if greedy else []
    return eps, g_eps


def _merges(policy) -> bool:
    return isinstance(policy, ModelPolicy) and agent_for(policy.cfg, True) is None and \
        getattr(policy.sampler, "mixed_temperatures", False)


class ScriptedPolicy:
    """The no-learning baseline row: the environment's scripted baseline acting through
    the real tools."""
    learns = False
    remote = None   # no asynchronous producer (ModelPolicy.remote)

    def __init__(self, env, cfg):
        self.env, self.cfg = env, cfg

    def act(self, tasks, group_size, *, temperature, seed, evaluation=False):
        episodes = []
        for gi, task in enumerate(tasks):
            for s in range(group_size):
                policy = baseline_policy(self.env, task, derived_seed(seed, gi, s))
                if policy is None:
                    raise ValueError(f"model=scripted: env {self.env.name} has no "
                                     "scripted baseline")
                traj = run_episode(self.env, task, policy, self.cfg.env.max_turns)
                episodes.append(scripted_episode(traj, gi, s,
                                                 self.env.behaviour(task, traj.results)))
        return episodes


class ModelPolicy:
    """A language model acting through the harness; trained by the learner."""
    learns = True

    def __init__(self, env, cfg, ckpt_dir: Path):
        # deferred: ablate.learners loads transformers (+0.8 s, 284 modules measured after
        # `import ablate.loop.policy`, 2-core host); the async producer's SamplerPolicy
        # (ablate.loop.async_rollout) never builds a learner
        from ablate.learners import make_learner
        self.env, self.cfg = env, cfg
        self.remote = None   # the async rollout producer (trainer.max_async_level > 0)
        model, self.tokenizer = load_policy(cfg.model)
        # DeepSpeed partitions the learner's model in place: the sampler gets its own copy
        # (vLLM loads from the weights directory instead)
        local_dir = getattr(model, "name_or_path", None)
        from_dir = SAMPLERS.declared(cfg.sampler.name).can("from_weights_dir")
        if from_dir and local_dir and Path(local_dir).is_dir():
            sampler_model = local_dir
        else:   # the base's tensors shared inside a pack (models.loading.shared_bases)
            sampler_model = sampler_copy(model)
        ref_model = None
        if cfg.algo.kl_coef > 0:  # only then is a frozen reference loaded at all
            ref_model, _ = load_policy(cfg.model)
            ref_model.eval().requires_grad_(False)
        self.learner = make_learner(cfg.learner, model, lr=cfg.trainer.lr, seed=cfg.seed,
                                    temperature=cfg.sampler.temperature, ckpt_dir=ckpt_dir,
                                    ref_model=ref_model, device=cfg.run.device)
        # a LoRA cell whose sampler loads adapters pushes the adapter alone
        lora = cfg.learner.lora if cfg.learner.lora.enable and ADAPTER_SYNC else None
        self.adapters = lora is not None and \
            SAMPLERS.declared(cfg.sampler.name).can("adapters")
        self.sampler = make_sampler(cfg.sampler, sampler_model, self.tokenizer,
                                    device=cfg.run.device, dtype=cfg.model.dtype, seed=cfg.seed,
                                    lora=lora)
        self.agents: dict = {}   # a persistent agent (agent=voyager) lives for the cell
        persistent_agent(cfg, self.agents)
        self.push_weights()

    def push_weights(self, step: int = 0) -> dict:
        """The learner's weights to the sampler: a LoRA cell's adapter alone where the
        sampler loads adapters, else the whole (merged) state; a sampler that records
        policy versions (sampler=vllm_server) is told the learner step they are from
        (resumes included). Returns the push's metrics: push/bytes (tensor bytes sent)
        and push/seconds (export included)."""
        t0 = time.perf_counter()
        versioned = SAMPLERS.declared(self.cfg.sampler.name).can("versioned")
        kw = {"version": step} if versioned else {}
        if self.adapters:
            adapter = self.learner.export_adapter()
            self.sampler.load_adapter(adapter, **kw)
            sent = adapter.nbytes
        else:
            state = self.learner.export_state_dict()
            sent = sum(t.numel() * t.element_size() for t in state.values())
            self.sampler.load_weights(state, **kw)
        return {"push/bytes": float(sent), "push/seconds": time.perf_counter() - t0}

    def act(self, tasks, group_size, *, temperature, seed, evaluation=False):
        c = self.cfg
        # agent=reflexion|lats|voyager (ablate/agents); else ReAct
        agent = agent_for(c, evaluation, getattr(self, "agents", None))
        if agent is not None:
            return agent.act(self, tasks, group_size, temperature=temperature, seed=seed,
                             score=lambda eps: score(eps, self.env, c.reward))
        return run_rollout(self, tasks, group_size, temperature=temperature, seed=seed)


class SamplerPolicy(ModelPolicy):
    """ModelPolicy's acting half without a learner: the policy of the asynchronous rollout
    producer process (ablate.loop.async_rollout), whose weights arrive from the learner."""

    def __init__(self, env, cfg):
        self.env, self.cfg, self.remote = env, cfg, None
        model, self.tokenizer = load_policy(cfg.model)
        # a LoRA cell's producer loads the adapter the learner sends (load_adapter)
        lora = cfg.learner.lora if cfg.learner.lora.enable else None
        self.sampler = make_sampler(cfg.sampler, model, self.tokenizer,
                                    device=cfg.run.device, dtype=cfg.model.dtype, seed=cfg.seed,
                                    lora=lora)


def with_agent_state(policy, algorithm):
    """The algorithm together with a persistent agent's Experience (agent=voyager: its
    curriculum samples the training tasks, its skill library is saved and loaded with
    the algorithm's checkpoints); the algorithm itself otherwise."""
    agents = getattr(policy, "agents", None)
    agent = persistent_agent(policy.cfg, agents) if agents is not None else None
    return WithExperience(algorithm, agent.experience(policy.env, policy.cfg.model)) \
        if agent else algorithm
