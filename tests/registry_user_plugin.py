"""A user's module that adds a name to several axes the one way every axis takes
(ablate.core.registry.Registry.register); tests/loop/test_config.py lists it in `plugins`."""
from ablate.harness.parser import PARSERS, parse_strict
from ablate.learners import LEARNERS
from ablate.samplers import SAMPLERS


@PARSERS.register("strict_copy")
def strict_copy(text: str):
    """The strict parser under another name."""
    return parse_strict(text)


@SAMPLERS.register("hf_copy")
def hf_copy(sampler_cfg, model, tokenizer, **kw):
    """The HF sampler under another name."""
    return SAMPLERS["hf"](sampler_cfg, model, tokenizer, **kw)


@LEARNERS.register("torch_copy")
def torch_copy(learner_cfg, model, **kw):
    """The torch learner under another name."""
    return LEARNERS["torch"](learner_cfg, model, **kw)
