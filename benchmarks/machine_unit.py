"""The machine-speed unit: what a cell's wall time is divided by, so that runs on a busy
or a quiet machine, or on two machines, can be compared.

One unit = the seconds of 10 forward+backward passes of the shipped tiny model
(ablate/models/assets/tiny) over a batch of 8 x 512 token ids, on one thread. Measure it
before and after the work being timed, in the same process (`measure()`), and quote the
work's wall time over the mean of the two: a cell at "6.4 units" took 6.4 times as long
as the reference passes did on the same machine at the same time.

    python benchmarks/machine_unit.py          # prints one unit, in seconds
"""
from __future__ import annotations

import json
import time

import torch

PASSES, BATCH, LENGTH = 10, 8, 512


def _model():
    from transformers import AutoModelForCausalLM

    from ablate.models.tiny import ASSET_DIR
    return AutoModelForCausalLM.from_pretrained(str(ASSET_DIR), dtype=torch.float32,
                                                local_files_only=True)


def measure(model=None) -> float:
    """Seconds of PASSES forward+backward passes over BATCH x LENGTH ids on one thread
    (the thread count is restored afterwards); one warm-up pass is not counted."""
    model = model if model is not None else _model()
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (BATCH, LENGTH), generator=gen)
    try:
        def one():
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            model.zero_grad(set_to_none=True)
        one()
        t0 = time.perf_counter()
        for _ in range(PASSES):
            one()
        return time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)


def in_units(seconds: float, before: float, after: float) -> float:
    """`seconds` in machine-speed units measured before and after it."""
    return seconds / ((before + after) / 2)


if __name__ == "__main__":
    print(json.dumps({"unit_s": round(measure(), 3)}))
