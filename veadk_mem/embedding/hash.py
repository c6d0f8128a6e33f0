"""A deterministic lexical embedder with no model: hashed word and word-pair features.

It finds memories that share words with the query and nothing else. It exists for tests,
dry runs and air-gapped machines; the `local` model understands meaning.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from veadk_mem.embedding.base import Embedder

if TYPE_CHECKING:
    from veadk_mem.config import EmbeddingSettings
    from veadk_mem.embedding.base import Matrix

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")


def tokens(text: str) -> list[str]:
    """Lower-case words; CJK runs become one token per character (they have no spaces)."""
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            out.extend(ch for ch in word if not ch.isspace())
        else:
            out.append(word)
    return out


class HashEmbedder(Embedder):
    """Feature hashing of words and adjacent word pairs into `dim` signed buckets."""

    inline = True

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings, **options: Any) -> Embedder:
        """`hash_dim` dimensions (an index's stored hash model names its own)."""
        return cls(dim=int(options.get("hash_dim", 384)))

    def __init__(self, dim: int = 384, batch_size: int = 256) -> None:
        self.dim = dim
        self.name = f"hash-v1-{dim}"
        self.batch_size = batch_size
        self.max_chars = 100_000

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 else -1.0

    def embed_batch(self, texts: list[str]) -> Matrix:
        """Hash each text's features; identical texts give identical vectors."""
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = tokens(text)
            features = Counter(words)
            features.update(f"{a} {b}" for a, b in itertools.pairwise(words))
            for feature, count in features.items():
                index, sign = self._bucket(feature)
                weight = 1.0 + math.log(count)
                out[row, index] += sign * (weight if " " not in feature else 0.5 * weight)
        return out
