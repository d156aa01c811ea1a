"""A Prime file -> ablate overrides (docs/prime.md is the table in prose).

`convert(path)` reads and checks the whole file first (every key known, of the right
type, the batch a multiple of the group) and raises PrimeError, one line naming
FILE:LINE and the key, on the first mistake; nothing else happens before it returns.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field

from ablate.prime import resolve
from ablate.prime.schema import FORMATS, IGNORE, REFUSE, Rule, detect
from ablate.prime.source import PrimeError, Source, flatten, normal, parent_key

# prime-rl's own defaults where the file says nothing (its pydantic schema); the Lab's
# documented defaults for Hosted Training (LoRA only)
DEFAULTS = {
    "prime-rl": {"batch": 128, "group": 1, "lr": 1e-6, "weight_decay": 0.01,
                 "temperature": 1.0, "lora_rank": 16, "lora_alpha": 32,
                 "eval_interval": 100, "eval_group": 1, "eval_base": True},
    "lab": {"lr": 1e-4, "temperature": 1.0, "lora_alpha": 16, "eval_interval": 100,
            "eval_group": 1, "eval_base": True},
}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# prime-rl masks tokens whose importance ratio leaves a band: ablate's token-mask
ASYNC_CORRECTION = "token-mask"
TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true/false",
              list: "a list", dict: "a table"}


@dataclass
class Override:
    key: str                   # an ablate key, a group (`env`) or `~model`
    value: object = None
    origin: str = ""           # the Prime key it comes from


@dataclass
class Conversion:
    source: Source
    format: str
    era: str
    overrides: list[Override] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Fields:
    """field -> [(prime key, value)] in file order."""

    def __init__(self, fmt: str):
        self.rows: dict[str, list[tuple[str, object]]] = {}
        self.defaults = DEFAULTS[fmt]

    def add(self, name: str, key: str, value) -> None:
        self.rows.setdefault(name, []).append((key, value))

    def has(self, *names: str) -> bool:
        return any(n in self.rows for n in names)

    def key(self, name: str) -> str:
        rows = self.rows.get(name)
        return min(rows, key=lambda r: r[0].count("["))[0] if rows else ""

    def get(self, name: str, default=None):
        rows = self.rows.get(name)
        if rows:   # a top-level key wins over one inside an array of tables
            return min(rows, key=lambda r: r[0].count("["))[1]
        return self.defaults.get(name, default)


# ------------------------------------------------------------------ reading and checking
def _rule(src: Source, table: dict[str, Rule], key: str) -> Rule:
    norm = normal(key)
    if norm in table:
        return table[norm]
    parent = parent_key(norm)
    while parent:      # the nearest table with a rule: its rule, if it covers the rest
        if parent in table:
            if table[parent].rest:
                return table[parent]
            break
        parent = parent_key(parent)
    near = difflib.get_close_matches(norm, table, n=1, cutoff=0.6)
    if not near:
        tails = {k.rsplit(".", 1)[-1]: k for k in table}
        near = [tails[t] for t in difflib.get_close_matches(norm.rsplit(".", 1)[-1],
                                                            tails, n=1, cutoff=0.75)]
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise PrimeError(src.where(key), key, f"unknown key{hint}")


def _check_type(src: Source, key: str, value, rule: Rule) -> None:
    ok = isinstance(value, rule.types) and not (
        isinstance(value, bool) and bool not in rule.types)
    if rule.types and not ok:
        want = " or ".join(dict.fromkeys(TYPE_NAMES[t] for t in rule.types))
        raise PrimeError(src.where(key), key, f"expected {want}, got {value!r} "
                         f"({TYPE_NAMES.get(type(value), type(value).__name__)})")


def _check_range(src: Source, key: str, value, rule: Rule) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if rule.low is not None and value < rule.low or rule.high is not None and value > rule.high:
        bound = " and ".join(f"{op} {b:g}" for op, b in ((">=", rule.low), ("<=", rule.high))
                             if b is not None)
        raise PrimeError(src.where(key), key, f"{value!r} is out of range: give a number "
                         f"{bound}")


def _check_only(src: Source, key: str, value, rule: Rule) -> None:
    """A key ablate follows for some values only (`trainer.optim.type = "adamw"`)."""
    if rule.only and value not in rule.only:
        raise PrimeError(src.where(key), key, f"{value!r} refused: {rule.otherwise}")


def _empty_table(table: dict[str, Rule], key: str, value) -> bool:
    """`[wandb]` with nothing under it: it sets nothing (a table with its own rule, such
    as `[trainer.model.lora]`, is read by its rule)."""
    norm = normal(key)
    return value == {} and norm not in table and any(k.startswith(f"{norm}.") for k in table)


def read_fields(src: Source, fmt: str) -> tuple[Fields, list[str]]:
    table, fields, notes = FORMATS[fmt], Fields(fmt), []
    leaf = lambda k: k in table and table[k].whole   # noqa: E731
    for key, value in flatten(src.data, leaf):
        if _empty_table(table, key, value):
            continue
        rule = _rule(src, table, key)
        _check_type(src, key, value, rule)
        _check_range(src, key, value, rule)
        _check_only(src, key, value, rule)
        if rule.field == REFUSE:
            raise PrimeError(src.where(key), key, f"refused: {rule.why}")
        if rule.field == IGNORE:
            notes.append(f"{src.where(key)}: {key} ignored: {rule.why}")
        else:
            fields.add(rule.field, key, value)
    return fields, notes


# ------------------------------------------------------------------ fields -> overrides
def convert(path: str, skip_groups: tuple[str, ...] = ()) -> Conversion:
    """The file as ablate overrides; `skip_groups` are groups the command line sets
    (`env`, `model`), whose resolution from the file is skipped."""
    src = Source(path)
    fmt, era = detect(src.data)
    fields, notes = read_fields(src, fmt)
    conv = Conversion(src, fmt, era, notes=notes)
    out = conv.overrides
    if "model" not in skip_groups:
        out += _model(src, fields)
    out += _trainer(src, fields)
    out += _sampling(fields, conv)
    out += _learner(fields, fmt)
    out += _eval(src, fields, conv)
    out += _logging(fields)
    if "env" not in skip_groups:
        out += _env(src, fields, conv)
    return conv


def _required(src: Source, fields: Fields, name: str, key: str):
    value = fields.get(name)
    if value is None:
        raise PrimeError(f"{src.path}:1", key, "missing: the file must set it")
    return value


def _model(src: Source, fields: Fields) -> list[Override]:
    model_id = _required(src, fields, "model", "model")
    return [Override(k, v, fields.key("model")) for k, v in resolve.model_overrides(model_id)]


def _trainer(src: Source, fields: Fields) -> list[Override]:
    steps = _required(src, fields, "max_steps", "max_steps")
    tasks, group = _batch(src, fields)
    out = [Override("trainer.max_steps", steps, fields.key("max_steps")),
           Override("trainer.tasks_per_step", tasks, fields.key("batch")),
           Override("trainer.group_size", group, fields.key("group")),
           Override("trainer.lr", float(fields.get("lr")), fields.key("lr"))]
    if fields.has("seed"):
        out.append(Override("seed", fields.get("seed"), fields.key("seed")))
    return out + _async(fields)


def _batch(src: Source, fields: Fields) -> tuple[int, int]:
    """(tasks per step, group): `batch_size` rollouts = tasks x group."""
    for name, key in (("batch", "batch_size"), ("group", "rollouts_per_example")):
        _required(src, fields, name, key)
        if fields.get(name) < 1:
            raise PrimeError(src.where(fields.key(name)), fields.key(name), "must be >= 1")
    batch, group = fields.get("batch"), fields.get("group")
    if batch % group:
        group_key = fields.key("group") or "the group"
        raise PrimeError(src.where(fields.key("batch")), fields.key("batch"),
                         f"{batch} rollouts is not a multiple of {group_key} = {group} "
                         "(ablate trains trainer.tasks_per_step x trainer.group_size "
                         "rollouts)")
    return batch // group, group


def _async(fields: Fields) -> list[Override]:
    k = fields.get("async", 0)
    out = []
    if fields.has("async"):
        out.append(Override("trainer.max_async_level", k, fields.key("async")))
    if k > 0:
        out.append(Override("algo.rollout_correction", ASYNC_CORRECTION, fields.key("async")))
    factor = fields.get("oversampling", 1.0)
    if factor > 1 and k == 0:   # the surplus refills groups with no signal (DAPO)
        out += [Override("algo.dynamic_sampling.enable", True, fields.key("oversampling")),
                Override("algo.dynamic_sampling.max_batches", math.ceil(factor) - 1,
                         fields.key("oversampling"))]
    return out


def _sampling(fields: Fields, conv: Conversion) -> list[Override]:
    out = [Override("sampler.temperature", float(fields.get("temperature")),
                    fields.key("temperature"))]
    per_turn, seq_len = fields.get("max_tokens"), fields.get("seq_len")
    if per_turn is not None:
        out.append(Override("harness.max_new_tokens_per_turn", per_turn,
                            fields.key("max_tokens")))
    if seq_len is not None or per_turn is not None:
        out.append(Override("harness.max_tokens_per_episode",
                            seq_len if seq_len is not None else per_turn,
                            fields.key("seq_len") or fields.key("max_tokens")))
    if fields.get("oversampling", 1.0) > 1 and fields.get("async", 0) > 0:
        conv.notes.append(f"{conv.source.where(fields.key('oversampling'))}: "
                          f"{fields.key('oversampling')} ignored: {_OVERSAMPLING}")
    return out


_OVERSAMPLING = ("with max_async_level > 0 it only keeps the pipeline full; ablate's "
                 "rollout process already runs ahead (dynamic sampling, its other "
                 "reading, cannot run asynchronously)")


def _learner(fields: Fields, fmt: str) -> list[Override]:
    out = []
    if fields.has("weight_decay") or "weight_decay" in fields.defaults:
        out.append(Override("learner.weight_decay", float(fields.get("weight_decay")),
                            fields.key("weight_decay")))
    if fields.has("grad_clip"):
        out.append(Override("learner.grad_clip", float(fields.get("grad_clip")),
                            fields.key("grad_clip")))
    if fields.has("beta1", "beta2"):   # prime-rl's AdamW defaults: 0.9, 0.999
        out.append(Override("learner.betas", [float(fields.get("beta1", 0.9)),
                                              float(fields.get("beta2", 0.999))],
                            fields.key("beta1") or fields.key("beta2")))
    lora = fmt == "lab" or fields.has("lora", "lora_rank", "lora_alpha", "lora_dropout",
                                      "lora_targets")
    if not lora:
        return out
    out.append(Override("learner.lora.enable", True, fields.key("lora")))
    for name, key in (("lora_rank", "rank"), ("lora_alpha", "alpha"),
                      ("lora_dropout", "dropout")):
        value = fields.get(name)
        if value is not None:
            value = float(value) if name == "lora_dropout" else _integral(value)
            out.append(Override(f"learner.lora.{key}", value, fields.key(name)))
    if fmt != "lab":
        out.append(Override("learner.lora.target_modules",
                            list(fields.get("lora_targets", LORA_TARGETS)),
                            fields.key("lora_targets")))
    return out


def _integral(value):
    return int(value) if float(value).is_integer() else value


def _eval(src: Source, fields: Fields, conv: Conversion) -> list[Override]:
    if not fields.has("eval_interval", "eval_num", "eval_group", "eval_base",
                      "eval_env_id", "eval_skip_first"):
        return [Override("eval.every", 0), Override("eval.at_start", False)]
    at_start = (not fields.get("eval_skip_first") if fields.has("eval_skip_first")
                else fields.get("eval_base"))   # eras B, C: skip_first_step
    out = [Override("eval.every", fields.get("eval_interval"), fields.key("eval_interval")),
           Override("eval.samples", fields.get("eval_group"), fields.key("eval_group")),
           Override("eval.at_start", at_start,
                    fields.key("eval_skip_first") or fields.key("eval_base"))]
    num = fields.get("eval_num")
    if num is not None and num > 0:
        out.append(Override("eval.num_tasks", num, fields.key("eval_num")))
    elif num is not None:
        conv.notes.append(f"{src.where(fields.key('eval_num'))}: {fields.key('eval_num')} "
                          f"= {num} (all) kept as eval.num_tasks (a fixed subset)")
    train = {resolve.env_name(v) for _, v in fields.rows.get("env_id", [])}
    for key, env_id in fields.rows.get("eval_env_id", []):
        if resolve.env_name(env_id) not in train:
            conv.notes.append(f"{src.where(key)}: {key} = {env_id!r} ignored: ablate "
                              "evaluates the training environment's held-out split")
    return out


def _logging(fields: Fields) -> list[Override]:
    out = []
    if fields.has("wandb_project"):
        out.append(Override("run.wandb_project", fields.get("wandb_project"),
                            fields.key("wandb_project")))
    if fields.get("wandb_offline"):
        out.append(Override("run.wandb_mode", "offline", fields.key("wandb_offline")))
    if fields.has("ckpt_interval"):
        out.append(Override("learner.checkpoint_every", fields.get("ckpt_interval"),
                            fields.key("ckpt_interval")))
    if fields.has("keep_last"):
        out.append(Override("learner.keep_checkpoints", fields.get("keep_last"),
                            fields.key("keep_last")))
    return out


# ------------------------------------------------------------------ the environment
def _env(src: Source, fields: Fields, conv: Conversion) -> list[Override]:
    rows = fields.rows.get("env_id", [])
    if not rows:
        raise PrimeError(f"{src.path}:1", "env", "no environment: the file must name one "
                         "(or give env=NAME after the file)")
    if len(rows) > 1:
        raise PrimeError(src.where(rows[1][0]), rows[1][0], "refused: one environment per "
                         "cell (run one cell per environment, or give env=NAME)")
    key, env_id = rows[0]
    args = _env_args(fields)
    package = resolve.verifiers_package(env_id)
    if package:
        return [Override("env", "verifiers", key), Override("env.taskset", package, key),
                *[Override(f"env.options.{k}", v, origin) for k, (v, origin) in args.items()]]
    spec = resolve.env_alias(env_id)
    if spec is None:
        raise PrimeError(src.where(key), key, f"{env_id!r} is neither an installed verifiers "
                         f"environment (prime env install {env_id}) nor an alias an ablate "
                         f"environment declares ({', '.join(resolve.known_aliases()) or 'none'}"
                         "; docs/prime.md); or give env=NAME after the file")
    return [Override("env", spec["env"], key), *_alias_args(src, spec, args)]


def _env_args(fields: Fields) -> dict[str, tuple]:
    """name -> (value, its key): the `args` table's, and (era C) the keys written in the
    taskset table itself (`[orchestrator.train.source.env.taskset] max_turns = 3`)."""
    args_key = fields.key("env_args")
    out = {k: (v, f"{args_key}.{k}") for k, v in (fields.get("env_args") or {}).items()}
    for key, value in fields.rows.get("env_arg", []):
        out[key.split(".taskset.", 1)[1]] = (value, key)
    return out


def _alias_args(src: Source, spec: dict, args: dict[str, tuple]) -> list[Override]:
    out = []
    for name, (value, key) in args.items():
        target = spec["args"].get(name)
        if target is None:
            near = difflib.get_close_matches(name, spec["args"], n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise PrimeError(src.where(key), key, f"unknown argument of the environment"
                             f"{hint}; known: {', '.join(spec['args'])}")
        *fixed, last = target
        out += [Override(*f.split("=", 1), key) for f in fixed]
        out.append(Override(last, value, key))
    return out
