"""The memory plan (ablate/apps/memory_plan.py): parameter counts of the paper's models
from configs written here (no download, meta device), each term's bytes by its formula,
refusal in one line on a GPU (or against a memory stated for CPU), report-only against
host RAM, a GPU cell planned without a GPU, and a verdict for every paper cell."""
from __future__ import annotations

import pytest
import torch
import transformers
from omegaconf import open_dict

from ablate.apps import cli
from ablate.apps import memory_plan as mp
from ablate.apps.cli import compose_config, expand_jobs
from ablate.apps.memory_plan import GB, memory_plan, shape_of_dir
from ablate.apps.preflight import check_device, check_memory
from ablate.loop.config import ConfigError
from ablate.models.budget import check_weights

# Qwen/Qwen3-4B and Qwen/Qwen3-30B-A3B config.json (Hugging Face), the fields that size them
QWEN3_4B = dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, intermediate_size=9728,
                vocab_size=151936, tie_word_embeddings=True)
QWEN3_30B_A3B = dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                     num_key_value_heads=4, head_dim=128, moe_intermediate_size=768,
                     num_experts=128, num_experts_per_tok=8, vocab_size=151936,
                     tie_word_embeddings=False)
PAPER_DATA = ["env.emails_path=/d/e.jsonl", "env.train_tasks_path=/d/tr.jsonl",
              "env.test_tasks_path=/d/te.jsonl"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    transformers.Qwen3Config(**QWEN3_4B).save_pretrained(root / "q4b")
    transformers.Qwen3MoeConfig(**QWEN3_30B_A3B).save_pretrained(root / "q30b")
    return {"qwen3_4b": str(root / "q4b"), "qwen3_30b_a3b": str(root / "q30b")}


def gpu_cell(dirs, *extra, model="qwen3_4b"):
    return compose_config([f"model={model}", f"model.path={dirs[model]}", "sampler=vllm",
                           "learner=deepspeed", "learner.dtype=bfloat16", "run.device=cuda",
                           "trainer.tasks_per_step=16", "trainer.group_size=16",
                           "harness.max_tokens_per_episode=4096", *extra])


def test_parameter_counts_match_the_published_sizes(dirs):
    assert shape_of_dir(dirs["qwen3_4b"]).params == pytest.approx(4.02e9, rel=0.02)
    assert shape_of_dir(dirs["qwen3_30b_a3b"]).params == pytest.approx(30.5e9, rel=0.02)


def test_full_fine_tune_beside_vllm_is_refused_in_one_line(dirs):
    plan = memory_plan(gpu_cell(dirs, "sampler.gpu_memory_utilization=0.5",
                                "learner.micro_batch_tokens=8192"), device_bytes=80 * GB)
    p = plan.shape.params
    terms = {t.name: t.bytes for t in plan.terms}
    assert terms["parameters"] == 2 * p and terms["gradients"] == 4 * p
    assert terms["optimizer"] == 12 * p and terms["vllm share"] == 40 * GB
    # + ZeRO-3's gradient bucket: reduce_bucket_size 5e8 x 2 B (deepspeed's default)
    assert terms["gradient bucket"] == 5e8 * 2
    assert plan.phase_total("rollout") == pytest.approx(18 * p + 1e9 + 40 * GB)
    line = plan.refusal()
    assert line is not None and "\n" not in line
    assert f"{plan.peak / GB:.1f} GB" in line and "optimizer 48.3" in line
    assert "learner.lora.enable=true" in line


def test_lora_r16_cell_fits_on_80_gb(dirs):
    plan = memory_plan(gpu_cell(dirs, "learner.lora.enable=true", "learner.lora.rank=16",
                                "learner.micro_batch_tokens=8192"), device_bytes=80 * GB)
    # q,k,v,o: r·(in+out) = 16·((2560+4096)+(2560+1024)·2+(4096+2560)) per layer, 36 layers
    assert plan.trainable == 16 * 20480 * 36
    assert plan.fits and plan.refusal() is None
    assert plan.peak < 80 * GB


def test_kv_cache_zero3_partition_and_offload(dirs):
    cfg = gpu_cell(dirs, "sampler=hf", "learner.micro_batch_tokens=4096")
    plan = memory_plan(cfg, world_size=4, device_bytes=1e15)
    terms = {t.name: t.bytes for t in plan.terms}
    p = plan.shape.params
    # 2 (K, V) x 36 layers x 8 kv heads x 128 x 2 bytes per token, 64 episodes per rank
    assert terms["kv cache"] == 64 * 4096 * 2 * 36 * 8 * 128 * 2
    assert terms["parameters"] == 2 * p / 4 and terms["optimizer"] == 12 * p / 4
    with open_dict(cfg):
        cfg.learner.ds_overrides = {"zero_optimization": {
            "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}
    off = {t.name: t.bytes for t in memory_plan(cfg, world_size=4, device_bytes=1e15).terms}
    assert off["parameters"] == off["optimizer"] == off["gradients"] == 0
    assert off["zero3 gathered"] > 0


def test_activations_and_logits_follow_the_learner_keys(dirs):
    cfg = gpu_cell(dirs, "learner.micro_batch_tokens=4096")
    with open_dict(cfg.learner):   # keys the schema may not have (yet)
        cfg.learner.logprob_chunk = 0
    terms = {t.name: t.bytes for t in memory_plan(cfg, device_bytes=1e15).terms}
    assert terms["activations"] == 4096 * 36 * 34 * 2560        # Korthikanti et al. eq. 1
    assert terms["logits"] == 4096 * 151936 * (2 * 2 + 4 * 2)   # bf16 + grad, fp32 + grad
    with open_dict(cfg.learner):
        cfg.learner.activation_checkpointing = True
        cfg.learner.logprob_chunk = 256
    terms = {t.name: t.bytes for t in memory_plan(cfg, device_bytes=1e15).terms}
    assert terms["activations"] == 4096 * 2560 * (2 * 36 + 34)
    assert terms["logits"] == 4096 * 151936 * 4 + 256 * 151936 * 8


def test_cpu_plan_against_host_ram_reports_and_never_refuses(dirs, capsys, monkeypatch):
    monkeypatch.setattr(mp, "device_memory", lambda cfg: ("cpu", 1 * GB, "host RAM"))
    plan = check_memory(gpu_cell(dirs, "run.device=cpu", "sampler=hf"))
    assert plan.device_bytes == 1 * GB and not plan.fits and plan.refusal() is None
    assert "exceeds (CPU: reported only)" in capsys.readouterr().out


def test_a_memory_stated_for_cpu_is_enforced(dirs, capsys):
    """run.device_memory_gb on run.device=cpu: the stated budget is kept (issue 64 item
    13; it was reported only: 103.4 GB > 1.0 GB, no refusal)."""
    cfg = gpu_cell(dirs, "run.device=cpu", "sampler=hf", "run.device_memory_gb=1.0")
    with pytest.raises(ConfigError) as err:
        check_memory(cfg)
    line = str(err.value)
    assert "> 1.0 GB on cpu (run.device_memory_gb)" in line and "\n" not in line
    assert line.endswith("or drop run.device_memory_gb (on CPU a plan against host RAM is "
                         "only reported)")
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_preflight_refuses_on_the_planning_override(dirs, capsys):
    cfg = gpu_cell(dirs, "run.quiet=true", "run.device_memory_gb=80")
    with pytest.raises(ConfigError, match=r"> 80.0 GB on cuda \(run.device_memory_gb\)"):
        check_memory(cfg)
    assert capsys.readouterr().out == ""   # run.quiet: no table


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_a_gpu_cell_is_planned_on_a_machine_without_one(dirs, no_gpu, capsys):
    """run.device=cuda with run.device_memory_gb where no GPU is visible: the plan is made
    and enforced, and the refusal of the missing device gives its verdict (issue 64 item
    13: it was refused before any plan)."""
    with pytest.raises(ConfigError) as err:
        check_device(gpu_cell(dirs, "run.device_memory_gb=80"))
    line = str(err.value)
    assert line.startswith("run.device='cuda': no CUDA device is visible here, so the cell "
                           "was only planned: memory plan: ")
    assert "> 80.0 GB on cuda (run.device_memory_gb)" in line and "fits with: " in line
    assert "DOES NOT FIT" in capsys.readouterr().out          # the table, as on a GPU
    with pytest.raises(ConfigError) as err:
        check_device(gpu_cell(dirs, "run.device_memory_gb=80", "learner.lora.enable=true",
                              "sampler=vllm_server", "run.quiet=true"))
    assert str(err.value).startswith("run.device='cuda': no CUDA device is visible here, so "
                                     "the cell was only planned: the memory plan fits: ")
    assert str(err.value).endswith(" of 80.0 GB (run.device_memory_gb); run it where that "
                                   "GPU is")
    with pytest.raises(ConfigError, match=r"use run.device=cpu, or give "
                                          r"run.device_memory_gb=GB to plan"):
        check_device(gpu_cell(dirs))


def test_config_json_alone_sizes_the_plan(dirs):
    """The plan reads config.json only (docs/gpu.md); the weights and tokenizer a cell
    needs are preflight's check_weights, which refuses the same folder."""
    cfg = gpu_cell(dirs)
    assert memory_plan(cfg, device_bytes=80 * GB).shape.params > 4e9
    with pytest.raises(ConfigError, match="holds no weights"):
        check_weights(cfg)


@pytest.mark.parametrize("value", ["-1", "0"])
def test_device_memory_gb_must_be_positive(value, capsys):
    assert cli.preflight([f"run.device_memory_gb={value}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ablate: error: run.device_memory_gb={float(value)!r} is not allowed; "
                   "must be > 0 (the device's memory in GB, for the memory plan) or null "
                   "(what the device reports)"]


def test_every_paper_cell_gets_a_verdict(dirs):
    jobs = expand_jobs(["+experiment=enronhop_paper", *PAPER_DATA, "run.device=cuda"], True)
    verdicts = {}
    for job in jobs:
        cfg = compose_config(job)
        if cfg.seed:
            continue
        with open_dict(cfg):
            cfg.model.path = dirs[cfg.model.name]
        plan = memory_plan(cfg, device_bytes=80 * GB)
        cell = next(j.split("=")[1] for j in job if j.startswith("+paper_cell"))
        verdicts[cell] = plan.refusal()
    assert len(verdicts) == 4
    assert verdicts["qwen3_4b_naive"] and verdicts["qwen3_4b_shaped"]   # full FT + vLLM
    assert verdicts["qwen3_4b_shaped_lora"] is None
    # the 30B preset offloads optimizer and parameters (conf/paper_cell): it fits
    assert verdicts["qwen3_30b_a3b_outcome"] is None, verdicts["qwen3_30b_a3b_outcome"]


def test_kv_cache_is_sized_by_context_not_by_the_generated_budget(dirs):
    """issue 61 item 3: an episode holds its prompt, tool results and generated tokens;
    HF's KV cache is every live episode at that context (capped by the model's), not
    episodes x harness.max_tokens_per_episode."""
    per_token = 2 * 36 * 8 * 128 * 2
    cfg = gpu_cell(dirs, "sampler=hf", "learner.micro_batch_tokens=4096")
    kv = lambda plan: {t.name: t.bytes for t in plan.terms}["kv cache"]  # noqa: E731
    plan = memory_plan(cfg, world_size=4, device_bytes=1e15, prompt_tokens=700)
    assert kv(plan) == 64 * (700 + 4096) * per_token       # main: 64 x 4096 x per_token
    with open_dict(cfg):
        cfg.harness.max_tokens_per_episode = 60000   # beyond the config's 32,768 positions
    plan = memory_plan(cfg, world_size=4, device_bytes=1e15, prompt_tokens=700)
    assert kv(plan) == 64 * 32768 * per_token


def test_a_max_model_len_whose_kv_does_not_fit_is_refused(dirs, tmp_path):
    """vLLM refuses to start when one sequence of max_model_len does not fit beside its
    weights (Qwen3-4B-Instruct-2507 declares 262,144 positions: 38.7 GB of KV against
    40 - 8 GB at utilization 0.5 on 80 GB); the plan says so first, in one line."""
    transformers.Qwen3Config(**QWEN3_4B, max_position_embeddings=262144).save_pretrained(
        tmp_path / "q4b_2507")
    cfg = gpu_cell(dirs, f"model.path={tmp_path / 'q4b_2507'}", "learner.lora.enable=true",
                   "learner.micro_batch_tokens=8192")
    line = memory_plan(cfg, device_bytes=80 * GB).refusal()
    assert line is not None and "\n" not in line
    assert ("sampler.max_model_len=262144 (null: the model's own): one sequence's KV cache "
            "is 38.7 GB > the 32.0 GB vLLM has beside its weights") in line
    assert "set sampler.max_model_len<=216709 or raise sampler.gpu_memory_utilization" in line
    assert "49.2 GB per device at the rollout within 80.0 GB" in line
    with open_dict(cfg):
        cfg.sampler.max_model_len = 32768                  # the paper preset's
    assert memory_plan(cfg, device_bytes=80 * GB).refusal() is None


def test_the_step_phase_and_the_reserved_figure(dirs):
    """The optimizer step's temporaries (ZeRO-3: a 1e9-element sub-group's flat fp32
    gradients + AdamW's sqrt(v), 8 B each) are a phase of their own, and the allocator's
    reserved figure holds the update's, the step's and the slack's blocks."""
    cfg = gpu_cell(dirs, "sampler=vllm_server", "learner.micro_batch_tokens=4096",
                   "learner.activation_checkpointing=true")
    plan = memory_plan(cfg, world_size=1, device_bytes=1e15)
    terms = {t.name: t for t in plan.terms}
    assert terms["optimizer step"].bytes == 8e9 and terms["optimizer step"].phase == "step"
    assert plan.peak_phase == "step"
    assert plan.reserved == pytest.approx(
        sum(t.bytes for t in plan.terms if t.phase in ("resident", "update", "step", "slack")))
    assert plan.reserved - plan.peak == pytest.approx(
        sum(t.bytes for t in plan.terms if t.phase in ("update", "slack")))
    assert "reserved by torch's allocator ~" in plan.table()
    torch_plan = memory_plan(gpu_cell(dirs, "sampler=vllm_server", "learner=torch",
                                      "learner.micro_batch_tokens=4096"), device_bytes=1e15)
    step = {t.name: t.bytes for t in torch_plan.terms}["optimizer step"]
    assert step == 4 * torch_plan.shape.params                 # foreach AdamW's sqrt(v)


def test_offload_is_planned_against_host_ram(dirs):
    """The 30B preset's offload (optimizer: fp32 master + moments + grads, 16 B; params:
    2 B) and its engine's host copy (a full-weight push: the state + its /dev/shm file)
    against this machine's RAM: refused where the GPU is here, a warning line otherwise."""
    cfg = compose_config(["+experiment=enronhop_paper", "+paper_cell=qwen3_30b_a3b_outcome",
                          *PAPER_DATA, "run.device=cuda", f"model.path={dirs['qwen3_30b_a3b']}"])
    plan = memory_plan(cfg, device_bytes=80 * GB, host_bytes=512 * GB)
    host = {t.name: t.bytes for t in plan.terms if t.phase == "host"}
    p = plan.shape.params
    assert host == {"host optimizer": 16 * p, "host parameters": 2 * p, "vllm host": 4 * p}
    assert plan.host == 22 * p and plan.host / GB == pytest.approx(671, abs=1)
    line = plan.host_line()
    assert line.startswith("host RAM: 671.") and "> 512.0 GB of this machine" in line
    assert plan.refusal() is None                  # planned for another machine: warned
    plan.host_enforced = True                      # on the machine that runs it: refused
    assert plan.refusal() == f"memory plan: {line}"
    assert memory_plan(cfg, device_bytes=80 * GB, host_bytes=1e12).host_line() is None


def test_tensor_parallel_size_is_checked_against_the_visible_gpus(dirs, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = gpu_cell(dirs, "sampler.tensor_parallel_size=2")
    with pytest.raises(ConfigError) as err:
        check_device(cfg)                          # main: no check, vLLM fails later
    assert str(err.value) == (
        "sampler.tensor_parallel_size=2 is not allowed: 1 CUDA device(s) visible here; "
        "use sampler.tensor_parallel_size=1, or run where 2 GPUs are visible "
        "(CUDA_VISIBLE_DEVICES, the launcher's GPUs per node)")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    check_device(cfg)


def test_docs_gpu_table_of_paper_cells(dirs):
    """docs/gpu.md, "Which cell fits which GPUs": the peaks it quotes, per GPU."""
    h200 = 143771 * 2 ** 20     # benchmarks/results/gpu_h200_2026-12-04/gpu.txt

    def peak(cell, device, world=1, *extra):
        cfg = compose_config(["+experiment=enronhop_paper", f"+paper_cell={cell}",
                              *PAPER_DATA, "run.device=cuda", *extra])
        with open_dict(cfg):
            cfg.model.path = dirs[cfg.model.name]
        plan = memory_plan(cfg, device_bytes=device, world_size=world, host_bytes=1e15)
        return round(plan.peak / GB, 1), plan.refusal() is None

    assert peak("qwen3_4b_shaped", 80 * GB) == (113.4, False)
    assert peak("qwen3_4b_shaped", 80 * GB, 2) == (77.2, True)
    assert peak("qwen3_4b_shaped", 80 * GB, 2, "sampler.gpu_memory_utilization=0.3") == (
        61.2, True)
    assert peak("qwen3_4b_shaped", h200) == (148.8, True)
    assert peak("qwen3_4b_shaped", h200, 1, "sampler.gpu_memory_utilization=0.3") == (
        118.6, True)
    assert peak("qwen3_4b_shaped_lora", 80 * GB) == (49.3, True)
    assert peak("qwen3_4b_shaped_lora", h200) == (84.6, True)
    assert peak("qwen3_30b_a3b_outcome", 80 * GB) == (41.0, True)


def test_host_ram_planned_for_another_machine_is_a_warning(dirs, monkeypatch, caplog):
    monkeypatch.setattr(mp, "host_memory", lambda: 256 * GB)
    cfg = compose_config(["+experiment=enronhop_paper", "+paper_cell=qwen3_30b_a3b_outcome",
                          *PAPER_DATA, "run.device=cuda", "run.device_memory_gb=80",
                          f"model.path={dirs['qwen3_30b_a3b']}"])
    with caplog.at_level("WARNING", logger="ablate"):
        plan = check_memory(cfg)                   # not refused: the GPU is elsewhere
    assert plan.host_line() and "> 256.0 GB of this machine" in plan.host_line()
    lines = [r.getMessage() for r in caplog.records if "host RAM" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "(planned for run.device_memory_gb, not refused here)" in lines[0]
