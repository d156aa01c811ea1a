"""The agent harness (part of the policy; docs/architecture.md): chat templates (chat/), the
rollout engine (rollout.py), action masking (masking.py), episode records (episode.py).

    from ablate.harness.rollout import rollout
    from ablate.harness.chat import render_prompt, parse_tool_calls, render_episode_text
"""
