"""Names of the offline models, apart from their modules: choosing a provider loads no model code."""

from __future__ import annotations

# `model.embedding.local_model` value that takes the multilingual model (embedding/e5.py).
E5_NAME = "multilingual-e5-small"
# The name stored beside its vectors: the 4-bit weights give vectors a little off the float
# model's (cosine about 0.99), so they are never mixed with vectors of the original model.
E5_VECTOR_NAME = "multilingual-e5-small-q4"
# The name stored beside all-MiniLM-L6-v2's vectors (embedding/local.py's PACKAGED_NAME).
MINILM_NAME = "all-MiniLM-L6-v2"
