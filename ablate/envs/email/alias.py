"""EnronHop's name on the Prime Environments Hub: the EnronHop article's verifiers package
`o-taisei/enronhop_env`, and how its `load_environment` arguments map to ablate keys
(read by `python -m ablate.prime`, docs/prime.md). Each argument maps to overrides; the
last one receives the argument's value."""
PRIME_ALIASES = {
    "enronhop_env": {
        "env": "enronhop",
        "args": {
            "max_turns": ("env.max_turns",),
            "judge_model": ("env.judge.name=llm", "env.judge.model"),
            "train_data_file": ("env.train_tasks_path",),
            "test_data_file": ("env.test_tasks_path",),
            "corpus_data_file": ("env.emails_path",),
        },
    },
}
