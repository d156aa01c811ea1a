"""Dense text vectors for agent=voyager's optional embedding retrieval
(`agent.voyager.embedding`): the mean over a text's tokens of a local transformers
model's last hidden states, L2-normalised, so that a dot product is the cosine similarity
(mean pooling as in Sentence-BERT, Reimers & Gurevych, 2019, arXiv:1908.10084, §3).

    embedding: null        no vectors (BM25 only)
    embedding: policy      the cell's own model (its `model` config, weights as loaded at
                           the start of the cell: a frozen copy, so a stored vector and a
                           later query's come from the same weights; nothing downloaded)
    embedding: <dir>       a local Hugging Face model directory (config.json, tokenizer,
                           weights; AutoModel, local files only)

Each text is embedded alone (no padding, so a vector never depends on which other texts
shared a batch: a resumed cell computes the same bits) and on the CPU; vectors of texts
already seen are cached in memory (the curriculum searches for every drawable task)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ablate.models.loading import load_policy

CACHE_TEXTS = 8192          # distinct texts whose vectors are kept in memory


class Embedder:
    def __init__(self, model, tokenizer, name: str, max_tokens: int = 256):
        self.model, self.tokenizer = model.eval().requires_grad_(False), tokenizer
        self.name, self.max_tokens = name, int(max_tokens)
        self.cache: dict[str, np.ndarray] = {}

    @classmethod
    def from_spec(cls, spec: str, model_cfg: Any = None, max_tokens: int = 256) -> "Embedder":
        """`policy` (needs the cell's model config) or a local model directory; a
        missing directory is a one-line error naming agent.voyager.embedding."""
        import torch
        if spec == "policy":
            if model_cfg is None:
                raise ValueError("agent.voyager.embedding=policy: no model config to load "
                                 "the policy from (Voyager.bind got none)")
            model, tok = load_policy(model_cfg)
            return cls(model.float(), tok, f"policy:{model_cfg.name}", max_tokens)
        path = Path(str(spec)).expanduser()
        if not (path / "config.json").is_file():
            raise ValueError(f"agent.voyager.embedding={spec}: no config.json there; "
                             "allowed: null, policy or a local model directory")
        from transformers import AutoModel, AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = AutoModel.from_pretrained(str(path), local_files_only=True,
                                          dtype=torch.float32)
        return cls(model, tok, str(path), max_tokens)

    def __call__(self, text: str) -> np.ndarray:
        """The unit vector of `text` (its first `max_tokens` tokens), float32."""
        hit = self.cache.get(text)
        if hit is not None:
            return hit
        import torch
        ids = self.tokenizer(text or " ", return_tensors="pt", truncation=True,
                             max_length=self.max_tokens)
        with torch.no_grad():
            out = self.model(input_ids=ids["input_ids"],
                             attention_mask=ids.get("attention_mask"),
                             output_hidden_states=True)
        v = out.hidden_states[-1][0].float().mean(dim=0).numpy()
        v = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
        if len(self.cache) < CACHE_TEXTS:
            self.cache[text] = v
        return v
