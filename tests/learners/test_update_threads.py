"""learner.update_threads (issue 31): update() on two threads gives the same step as on
one (losses, gradient norm and every weight bitwise), and the process's thread count is
restored afterwards."""
from __future__ import annotations

import pytest
import torch

from test_learners import learner, make_batch, weights_dir  # noqa: F401  (fixture)
from test_learner_prefix import make_loss


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_two_update_threads_equal_one(weights_dir, tmp_path, name):  # noqa: F811
    segs, adv = make_batch()
    out = {}
    before = torch.get_num_threads()
    for threads in (0, 2):
        lrn = learner(weights_dir, tmp_path / str(threads), name, update_threads=threads)
        stats = lrn.update(segs, adv, make_loss("token-mean"))
        assert torch.get_num_threads() == before
        out[threads] = (stats["loss"], stats["grad_norm"],
                        {k: v.clone() for k, v in lrn.export_state_dict().items()})
    assert out[0][:2] == out[2][:2]
    assert all(torch.equal(v, out[2][2][k]) for k, v in out[0][2].items())
