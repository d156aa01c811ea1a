"""Short names for factors and cells: a factor is named by the shortest dotted suffix of
its config key (without `.name`) that no other factor shares; a comparison by the
factors in which its cells differ."""
from __future__ import annotations

import re

METRIC_WORDS = {"correct": "held-out accuracy", "reward": "held-out reward",
                "answered": "answer rate", "turns": "turns per episode"}


def metric_words(metric: str) -> str:
    return METRIC_WORDS.get(metric, metric.replace("_", " ").replace("/", " "))


# Words that depend on the environment (the cells' `env.name`): what a task's `hops` is
# (ablate/envs/coderepair/env.py: a repository's difficulty) and what `reads` read. An
# environment not listed gets the neutral words of None.
ENV_WORDS = {
    None: {"hops": "task level", "reads": "reads", "training accuracy": "training accuracy",
           "training answer rate": "training submission/answer rate",
           "held-out solve rate": "held-out solve rate",
           "held-out tasks forgotten": "held-out tasks forgotten"},
    "synthetic": {"hops": "hops", "reads": "emails read",
                  "training answer rate": "training answer rate",
                  "held-out tasks forgotten": "held-out questions forgotten"},
    "enronhop": {"hops": "hops", "reads": "emails read",
                 "training answer rate": "training answer rate",
                 "held-out tasks forgotten": "held-out questions forgotten"},
    "coderepair": {"hops": "difficulty", "reads": "files read",
                   "training accuracy": "training repair rate",
                   "training answer rate": "training submission rate",
                   "answer_rate": "submission rate", "held-out accuracy": "repair rate",
                   "answer rate": "submission rate",
                   "held-out solve rate": "held-out repair rate",
                   "held-out tasks forgotten": "held-out repositories forgotten"},
    "reasoning_gym": {"hops": "difficulty", "training answer rate": "training answer rate",
                      "held-out tasks forgotten": "held-out questions forgotten"},
}
# behaviour fields an environment does not have (computed from generic episode fields,
# they would read as a measurement): left out of its summary
ENV_SKIPPED = {"coderepair": ("idk_rate",), "reasoning_gym": ("idk_rate",)}
# words that must not appear in an environment's figures (tests/analysis/test_figures.py)
FOREIGN_WORDS = {"coderepair": ("hop", "email", "keyword", "search"),
                 "reasoning_gym": ("hop", "email", "keyword", "search", "repair",
                                   "submission", "i don't know"),
                 "synthetic": ("test run", "repair", "submission"),
                 "enronhop": ("test run", "repair", "submission")}


def env_word(word: str, env: str | None) -> str:
    """The environment's word for `word` (ENV_WORDS; the neutral word when unknown)."""
    table = ENV_WORDS.get(env, ENV_WORDS[None])
    return table.get(word, ENV_WORDS[None].get(word, word))


def short_names(factors: list[str]) -> dict:
    """config key -> shortest unambiguous dotted suffix ('reward.name' -> 'reward')."""
    parts = {f: f.removesuffix(".name").split(".") for f in factors}
    out = {}
    for f, p in parts.items():
        for n in range(1, len(p) + 1):
            cand = ".".join(p[-n:])
            if sum(".".join(q[-n:]) == cand for q in parts.values() if len(q) >= n) == 1:
                out[f] = cand
                break
        else:
            out[f] = f
    return out


def value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def cell_name(factors: dict, names: dict, keys=None) -> str:
    keys = list(factors) if keys is None else keys
    if not keys:
        return "all"
    return ", ".join(f"{names.get(k, k)}={value(factors[k])}" for k in keys)


def differing(a: dict, b: dict) -> list[str]:
    return [k for k in a if k in b and str(a[k]) != str(b[k])]


def legend(names: dict) -> str:
    """'reward = reward.name; lora = learner.lora.enable' for the factors renamed."""
    return "; ".join(f"{s} = {k}" for k, s in names.items() if s != k)


def compact(factors: dict, names: dict, keys: list) -> str:
    """'algo=dapo' for one differing factor, else the values in factor order
    ('dapo/shaped'), for table rows that must fit a single column."""
    if len(keys) == 1:
        return cell_name(factors, names, keys)
    return "/".join(value(factors[k]) for k in keys)


def pair_label(a: dict, b: dict, keys: list, same: list) -> str:
    """'dapo vs grpo (naive)': values of the differing factors, then of the shared ones."""
    def vals(f, ks):
        return "/".join(value(f[k]) for k in ks)
    return f"{vals(a, keys)} vs {vals(b, keys)}" + (f" ({vals(a, same)})" if same else "")


def behaviour_words(name: str, env: str | None) -> str:
    """A BEHAVIOUR field's words in the environment's terms (analysis/estimates.py)."""
    from analysis.estimates import BEHAVIOUR
    table = ENV_WORDS.get(env, ENV_WORDS[None])
    if name in table:
        return table[name]
    return env_word(BEHAVIOUR[name][0], env) if name in BEHAVIOUR else name


def breakdown_word(summary: dict) -> str:
    """What the tasks' `hops` counts: the world's own `breakdown_label` (environment.json,
    summary["world"]), else the environment's word (ENV_WORDS)."""
    return (summary.get("world") or {}).get("breakdown_label") or env_word(
        "hops", summary.get("env"))


# the other files of a report folder (analysis.tables, analysis.figures, analysis.cli)
REPORT_FILES = ("results", "comparisons", "behaviour", "mde", "hypotheses", "lifelong",
                "summary", "report", "captions", "finding", "learning_curves", "change",
                "forest", "seeds", "factor_intervals", "training", "trend", "endpoint")


def breakdown_file(summary: dict) -> str:
    """The name of the breakdown's table and figure files (NAME.tex/.csv/.png/.pdf): the
    world's `breakdown_label` (environment.json; the email world's is `hops`) as a file
    name, `by_<label>` where it is another file's name; `hops` for runs without one."""
    label = (summary.get("world") or {}).get("breakdown_label") or "hops"
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", label).strip("_") or "hops"
    return f"by_{stem}" if stem in REPORT_FILES else stem


def hop_words(h, word: str) -> str:
    """'2 hops' / 'difficulty 2' / 'rooms 2': a level of a task's `hops` in `word`
    (breakdown_word)."""
    if word == "hops":
        return f"{h} hop{'' if str(h) == '1' else 's'}"
    return f"{word} {h}"


def own_behaviour(summary: dict) -> list[str]:
    """The world's own behaviour columns the summary estimated (environment.json
    `behaviour_labels` beyond analysis/estimates.py BEHAVIOUR)."""
    return list((summary.get("world") or {}).get("behaviour_labels") or {})


def field_words(name: str, summary: dict) -> str:
    """A behaviour field's words: the world's own label for its own columns, else
    behaviour_words."""
    own = (summary.get("world") or {}).get("behaviour_labels") or {}
    return own[name] if name in own else behaviour_words(name, summary.get("env"))


def level(alpha: float, tex: bool = False) -> str:
    """The confidence level of the intervals an analysis at `alpha` draws: '95%' at 0.05,
    '97.06%' at Pocock's 0.0294 (analysis.yaml `alpha`)."""
    return f"{100 * (1 - alpha):.4g}" + ("\\%" if tex else "%")


# Words for factors and their levels in figures, LaTeX tables and the README headline
# ("reward: outcome" rather than `reward=outcome` or `+reward=outcome`). An experiment's
# analysis.yaml may rename either (`names: {factors: {KEY: words}, levels: {KEY: {LEVEL:
# words}}}`) for a paper's own names; a factor or level not listed keeps its short name.
FACTOR_WORDS = {"reward.name": "reward", "algo.name": "algorithm", "agent.name": "agent",
                "harness.max_malformed": "retries",
                "harness.parser": "parser", "reward.state_change_bonus":
                "bonus only after a change", "learner.lora.enable": "LoRA",
                "model.name": "model", "env.name": "environment",
                "trainer.lr": "learning rate", "trainer.group_size": "group size",
                "reward.weights.wrong": "wrong-answer penalty λ"}
LEVEL_WORDS = {
    "algo.name": {"grpo": "GRPO", "dr_grpo": "Dr. GRPO", "dapo": "DAPO", "ppo": "PPO",
                  "rloo": "RLOO", "dpo": "trajectory DPO", "rft": "RFT", "star": "STaR",
                  "grpo_curriculum": "GRPO + curriculum", "reinforce": "REINFORCE"},
    "agent.name": {"react": "ReAct", "voyager": "Voyager (skill library)"},
    "reward.name": {"tool_bonus": "test-run bonus"},
}


def _level_text(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return value(v)


def words_table(factors: list[str], levels: dict, names: dict,
                overrides: dict | None = None) -> dict:
    """{"factors": {key: words}, "levels": {key: {value(level): words}}} for a design's
    factors: analysis.yaml's `names` over FACTOR_WORDS / LEVEL_WORDS over the short name."""
    overrides = overrides or {}
    fo, lo = overrides.get("factors") or {}, overrides.get("levels") or {}
    out = {"factors": {}, "levels": {}}
    for k in factors:
        short = names.get(k, k.removesuffix(".name"))
        out["factors"][k] = str(fo.get(k, FACTOR_WORDS.get(k, short.replace("_", " "))))
        own = {value(a): b for a, b in (lo.get(k) or {}).items()}
        out["levels"][k] = {value(lv): str(own.get(value(lv), LEVEL_WORDS.get(k, {}).get(
            value(lv), _level_text(lv)))) for lv in levels.get(k, [])}
    return out


def check_names(overrides, factors: list[str], levels: dict, where) -> None:
    """analysis.yaml's `names`: only factors of the design and their levels."""
    from analysis.errors import AnalysisError
    if overrides is None:
        return
    if not isinstance(overrides, dict) or set(overrides) - {"factors", "levels"}:
        raise AnalysisError(f"{where}: names must be a mapping with `factors` and/or "
                            "`levels`")
    for part in ("factors", "levels"):
        unknown = sorted(set(overrides.get(part) or {}) - set(factors))
        if unknown:
            raise AnalysisError(f"{where}: names.{part} {unknown} are not factors of this "
                                f"design ({', '.join(factors) or 'none'})")
    for k, table in (overrides.get("levels") or {}).items():
        known = {value(v) for v in levels.get(k, [])}
        bad = sorted(value(v) for v in table if value(v) not in known)
        if bad:
            raise AnalysisError(f"{where}: names.levels.{k} {bad} are not levels of {k} "
                                f"({', '.join(sorted(known))})")


def words_of(summary: dict) -> dict:
    """The summary's words table (summary["words"]; built with the defaults for a summary
    from before it had one)."""
    if summary.get("words"):
        return summary["words"]
    return words_table(summary.get("factors") or [], summary.get("levels") or {},
                       summary.get("short_names") or {})


def factor_words(summary: dict, k: str) -> str:
    return words_of(summary)["factors"].get(k, k.removesuffix(".name"))


def level_words(summary: dict, k: str, v) -> str:
    return words_of(summary)["levels"].get(k, {}).get(value(v), _level_text(v))


def in_words(summary: dict, factors: dict, keys=None) -> str:
    """'reward: outcome' / 'reward: test-run bonus; bonus only after a change: yes'."""
    keys = list(factors) if keys is None else list(keys)
    if not keys:
        return "all runs"
    return "; ".join(f"{factor_words(summary, k)}: {level_words(summary, k, factors[k])}"
                     for k in keys)


def comparison_words(summary: dict, c: dict) -> str:
    """A comparison in words: the differing factors of its cells ('reward: naive vs
    shaped'); a main effect keeps its label."""
    if "a" not in c or "b" not in c:
        return c["label"]
    keys = differing(c["a"], c["b"]) or list(c["a"])
    tail = " (main effect)" if c.get("kind") == "main_effect" else ""
    if len(keys) == 1:
        k = keys[0]
        return (f"{factor_words(summary, k)}: {level_words(summary, k, c['a'][k])} vs "
                f"{level_words(summary, k, c['b'][k])}{tail}")
    return f"{in_words(summary, c['a'], keys)} vs {in_words(summary, c['b'], keys)}{tail}"


def cell_words(summary: dict, c: dict) -> str:
    return in_words(summary, c["factors"], summary.get("factors"))
