"""Short names for factors and cells: a factor is named by the shortest dotted suffix of
its config key (without `.name`) that no other factor shares; a comparison by the
factors in which its cells differ."""
from __future__ import annotations

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


def hop_words(h: str, env: str | None) -> str:
    """'2 hops' / 'difficulty 2': a level of a task's `hops` in the environment's terms."""
    word = env_word("hops", env)
    if word == "hops":
        return f"{h} hop{'' if str(h) == '1' else 's'}"
    return f"{word} {h}"


def level(alpha: float, tex: bool = False) -> str:
    """The confidence level of the intervals an analysis at `alpha` draws: '95%' at 0.05,
    '97.06%' at Pocock's 0.0294 (analysis.yaml `alpha`)."""
    return f"{100 * (1 - alpha):.4g}" + ("\\%" if tex else "%")
