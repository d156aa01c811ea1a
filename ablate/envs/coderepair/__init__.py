"""`env=coderepair`: a stateful world of small Calc repositories with planted bugs.

    lang.py       the Calc tokenizer, parser and bounded evaluator (no Python eval)
    generator.py  deterministic repositories, difficulty 1..3, train / held-out test
    env.py        CodeRepairEnv: tools list_files, read_file, replace_line, run_tests, submit
    baseline.py   scripted policies: HonestFixer, run_tests_forever, ReadAndSubmit
    rewards.py    outcome, tool_bonus (+ state_change_bonus)
"""
from ablate.envs.coderepair.env import CodeRepairEnv

__all__ = ["CodeRepairEnv"]
