import faulthandler, json, signal, sys, time
faulthandler.register(signal.SIGUSR1)
import torch
from ablate.apps.cli import compose_config
from ablate.loop.cell import run_cell
out, ov = sys.argv[1], sys.argv[2:]
cfg = compose_config(["run.device=cuda", "run.quiet=true", *ov])
t0 = time.time(); run_cell(cfg, out)
for l in open(f"{out}/metrics.jsonl"):
    r = json.loads(l); print({k: r.get(k) for k in ("step", "step_s", "rollout_s", "update_s", "generated_tokens", "update/tokens_per_s", "eval/accuracy")})
print("wall", round(time.time() - t0, 1), "peak GiB", round(torch.cuda.max_memory_allocated() / 2**30, 2))
