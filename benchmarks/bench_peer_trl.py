"""ablate vs TRL's GRPOTrainer on the peer's home ground: the same single-turn
reasoning-gym task on SmolLM2-135M-Instruct, the same prompts x generations x max new
tokens, full fine-tune and LoRA, step times measured in one run and their ratio.

    /work/venvs/trl/bin/python benchmarks/bench_peer_trl.py [--prompts 8] [--gens 8]
        [--new 32] [--steps 3] [--modes lora,full] [--threads 2] [--out FILE]

(trl==1.16.0 in a venv made with --system-site-packages, so ablate's pins are shared.)

Same task: env=reasoning_gym env.dataset=chain_sum (two 1-digit terms); the prompt is
ablate's own rendering of the chat (system prompt "direct" + question + the generation
header, ablate.harness.chat.ChatConventions), given to TRL as that exact string; TRL's
reward is the same judge (the dataset's score_answer of the <answer> text, thresholded
at 1.0: ReasoningGymEnv.is_correct). Per step both draw `prompts` training questions and
sample `gens` completions of at most `new` tokens at temperature 1.0, then do one
optimiser step on all of them (no reference model: kl 0 in both).

Settings named in the output:
  ablate  learner: its default (DeepSpeed ZeRO-3, world size 1, fp32, AdamW lr 1e-5 for
          full; LoRA r=8 alpha=16 on q,k,v,o: LearnerConfig), sampler: its HF sampler
          (batched generate with a KV cache, ablate/samplers/hf.py), GRPO defaults.
  TRL     GRPOTrainer with its 1.16 defaults otherwise (loss_type "dapo", scale_rewards
          "group", gradient_checkpointing True, generation by transformers' generate,
          use_vllm False), fp32 on CPU, beta=0, one iteration per batch, LoRA r=8
          alpha=16 on q,k,v,o via peft.
A step's time is wall time: ablate's `step_s` of metrics.jsonl (rollout + update), TRL's
on_step_begin -> on_step_end (generation + scoring + update). The first step of each is
a warm-up and left out; the reported time is the median of the rest. Writes
benchmarks/results/peer_trl.json (or --out).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OPTIONS = {"min_terms": 2, "max_terms": 2, "max_digits": 1}
MASKS_OFF = ["harness.action_masking=false", "harness.answer_masking=false",
             "harness.keyword_masking=false"]


def ablate_steps(mode: str, a, out: Path) -> dict:
    """One cell through the CLI; step times from its metrics.jsonl."""
    args = [sys.executable, "-m", "ablate", "env=reasoning_gym", "env.dataset=chain_sum",
            *[f"env.options.{k}={v}" for k, v in OPTIONS.items()], "model=smollm2_135m",
            f"learner.lora.enable={mode == 'lora'}", f"trainer.max_steps={a.steps}",
            f"trainer.tasks_per_step={a.prompts}", f"trainer.group_size={a.gens}",
            f"harness.max_new_tokens_per_turn={a.new}", "env.max_turns=1",
            "env.train_tasks=100", "env.test_tasks=20",
            f"trainer.lr={a.lr}", "eval.every=0", "eval.num_tasks=1", "eval.samples=1",
            "eval.greedy=false", f"run.num_threads={a.threads}", "run.quiet=true",
            f"hydra.run.dir={out}", *MASKS_OFF]
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"ablate cell failed: {proc.stderr[-2000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    cfg = (out / "config.yaml").read_text()
    return {"step_s": [r["step_s"] for r in rows],
            "rollout_s": [r["rollout_s"] for r in rows],
            "update_s": [r["update_s"] for r in rows],
            "generated_tokens": [r["generated_tokens"] for r in rows],
            "accuracy": [r["accuracy"] for r in rows], "wall_s": time.perf_counter() - t0,
            "learner": _yaml_value(cfg, "learner", "name"),
            "sampler": _yaml_value(cfg, "sampler", "name")}


def _yaml_value(text: str, group: str, key: str):
    from omegaconf import OmegaConf
    return OmegaConf.select(OmegaConf.create(text), f"{group}.{key}")


def prompts_and_judge(n: int):
    """The training questions as ablate renders them, and the judge."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from ablate.envs import make_env
    from ablate.protocol.environment import prompt_tools
    from ablate.harness.chat import ChatConventions
    from ablate.models.smollm import converted_dir
    env = make_env(OmegaConf.create({"name": "reasoning_gym", "dataset": "chain_sum",
                                     "options": OPTIONS, "train_tasks": n,
                                     "test_tasks": 1}))
    path = converted_dir("smollm2_135m")
    tok = AutoTokenizer.from_pretrained(str(path))
    conv = ChatConventions.from_tokenizer(tok)
    tasks = env.tasks("train")
    texts = [conv.prompt_text(env.system_prompt(), t.prompt, prompt_tools(env))
             for t in tasks]
    return env, tasks, texts, path, tok


def trl_steps(mode: str, a, out: Path) -> dict:
    import torch
    from ablate.protocol.environment import answer_from_text
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(a.threads)
    env, tasks, texts, path, tok = prompts_and_judge(a.prompts * (a.steps + 1))
    by_prompt = {text: task for text, task in zip(texts, tasks)}

    def reward(prompts, completions, **kw):
        out = []
        for p, c in zip(prompts, completions):
            args = answer_from_text(env, c)
            out.append(float(args is not None and env.is_correct(by_prompt[p],
                                                                 args["answer"], None)))
        return out

    times, marks = [], {}

    class Timer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            marks["t"] = time.perf_counter()

        def on_step_end(self, *_, **__):
            times.append(time.perf_counter() - marks["t"])
            print(json.dumps({"mode": mode, "trl_step": len(times), "step_s": times[-1]}),
                  flush=True)

    cfg = GRPOConfig(output_dir=str(out), per_device_train_batch_size=a.prompts * a.gens,
                     num_generations=a.gens, max_completion_length=a.new,
                     max_steps=a.steps, learning_rate=a.lr, beta=0.0, temperature=1.0,
                     logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                     bf16=False, seed=0, dataloader_num_workers=0,
                     gradient_accumulation_steps=1, num_iterations=1)
    peft = None
    if mode == "lora":
        from peft import LoraConfig
        peft = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    data = Dataset.from_dict({"prompt": texts})
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data,
                          processing_class=tok, peft_config=peft, callbacks=[Timer()])
    trainer.train()
    return {"step_s": times, "wall_s": time.perf_counter() - t0,
            "loss_type": getattr(cfg, "loss_type", None), "learner": "torch (accelerate)",
            "gradient_checkpointing": cfg.gradient_checkpointing,
            "sampler": "transformers generate",
            "rewards": [h.get("reward") for h in trainer.state.log_history if "reward" in h]}


def median_after_warmup(xs: list) -> float:
    return statistics.median(xs[1:] if len(xs) > 1 else xs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--gens", type=int, default=8)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-5)   # both frameworks
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--modes", default="lora,full")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "peer_trl.json"))
    a = p.parse_args()
    result = {"task": {"env": "reasoning_gym", "dataset": "chain_sum", "options": OPTIONS,
                       "prompts": a.prompts, "generations": a.gens, "max_new_tokens": a.new,
                       "steps": a.steps, "lr": a.lr, "threads": a.threads,
                       "model": "SmolLM2-135M-Instruct (fp32)"}, "modes": {}}
    tmp = Path(tempfile.mkdtemp(prefix="peer_trl_"))
    for mode in a.modes.split(","):
        ours = ablate_steps(mode, a, tmp / f"ablate_{mode}")
        print(json.dumps({"mode": mode, "ablate": ours}), flush=True)
        result["modes"][mode] = {"ablate": ours}
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")   # a killed run keeps it
        peer = trl_steps(mode, a, tmp / f"trl_{mode}")
        print(json.dumps({"mode": mode, "trl": peer}), flush=True)
        ratio = median_after_warmup(ours["step_s"]) / median_after_warmup(peer["step_s"])
        result["modes"][mode] = {"ablate": ours, "trl": peer,
                                 "ablate_step_s": median_after_warmup(ours["step_s"]),
                                 "trl_step_s": median_after_warmup(peer["step_s"]),
                                 "ratio_ablate_over_trl": ratio}
        print(f"{mode}: ablate {result['modes'][mode]['ablate_step_s']:.2f} s/step, "
              f"TRL {result['modes'][mode]['trl_step_s']:.2f} s/step, "
              f"ratio {ratio:.2f}x (target <= 0.8)", flush=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
