"""A user's own advantage estimator and policy loss, registered from outside the ablate
package (tests/algos/test_algos_protocol.py selects them with algo.plugins=[algos_user_plugin])."""
import torch

from ablate.algos import ADVANTAGE_ESTIMATORS, POLICY_LOSSES, aggregate


@ADVANTAGE_ESTIMATORS.register("median_baseline")
def median_baseline(rewards, group_ids, **kw):
    """A_i = r_i - median of its group (torch.median: the lower of the two middle values)."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    ids = list(group_ids)
    adv = torch.zeros_like(r)
    for g in set(ids):
        idx = torch.tensor([i for i, h in enumerate(ids) if h == g])
        adv[idx] = r[idx] - r[idx].median()
    return adv.float()


@POLICY_LOSSES.register("vanilla_pg")
def vanilla_pg(logprobs, old_logprobs, advantages, mask, *, agg, eps_low, eps_high, **kw):
    """On-policy REINFORCE: -A · log π per token, no ratio, no clip."""
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    per_token = torch.where(mask.bool(), -adv * logprobs, 0.0)
    counts = {k: kw.get(k) for k in ("max_len", "num_tokens", "num_seqs", "row_tokens")}
    loss = aggregate(per_token, mask, agg, **counts)
    return loss, {"pg_loss": float(loss.detach()), "tokens": float(mask.sum())}
