"""The embedder contract: a subclass implements `embed_batch`; batching, checks and chunking live here.

An HTTP embedder only classifies its client's exceptions: retries (429, 5xx, refused or
lost connections) and messages are the one policy of every store, `veadk_mem.failure`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import StoreError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from veadk_mem.config import EmbeddingSettings

    Matrix = npt.NDArray[np.float32]


_SENTENCE_END = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])|\n+")


def split_sentences(text: str) -> list[str]:
    """Split text after sentence-ending punctuation (Latin and CJK) and at line breaks."""
    return [piece.strip() for piece in _SENTENCE_END.split(text) if piece and piece.strip()]


class Embedder(ABC):
    """Turns texts into unit-length float32 vectors of a fixed dimension.

    `name` identifies the model (it is stored next to every vector so a store never mixes
    models), `dim` is the vector size. `max_chars` bounds one chunk for models whose
    `fits` is not more precise.
    """

    name: str = ""
    dim: int = 0
    # Whether its vectors mean anything for Chinese, Japanese or Korean text: hybrid search
    # leans on keywords for such a query when they do not (all-MiniLM-L6-v2 reads English only).
    reads_cjk: bool = True
    batch_size: int = 64
    max_chars: int = 2000
    # Cheap and without I/O (a microsecond-scale pure function): a single query is embedded on
    # the event loop, where a worker thread's hop would cost more than the embedding.
    inline: bool = False

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings, **options: Any) -> Embedder:
        """The embedder `[model.embedding]` configures (how the registry builds one by name)."""
        return cls(**options)

    @abstractmethod
    def embed_batch(self, texts: list[str]) -> Sequence[Sequence[float]] | Matrix:
        """Embed one batch of at most `batch_size` texts; raise StoreError when the model fails."""

    def fits(self, text: str) -> bool:
        """Whether one chunk of text fits the model's input in one piece."""
        return len(text) <= self.max_chars

    def chunk(self, text: str) -> list[str]:
        """Split a long text into chunks that fit the model, on sentence boundaries where possible."""
        if self.fits(text):
            return [text]
        chunks: list[str] = []
        current = ""
        for sentence in split_sentences(text):
            candidate = f"{current} {sentence}" if current else sentence
            if self.fits(candidate):
                current = candidate
                continue
            if current:
                chunks.append(current)
            current = sentence
            while not self.fits(current):
                head, current = self._cut(current)
                chunks.append(head)
        if current:
            chunks.append(current)
        return chunks or [text]

    def spans(self, text: str) -> list[tuple[int, str]]:
        """The text's chunks with their start offsets (one chunk, at 0, when it fits the model)."""
        if self.fits(text):
            return [(0, text)]
        out: list[tuple[int, str]] = []
        position = 0
        for piece in self.chunk(text):
            found = text.find(piece, position)
            start = found if found >= 0 else position
            out.append((start, piece))
            position = start + len(piece) if found >= 0 else position
        return out

    def _cut(self, text: str) -> tuple[str, str]:
        """Cut an over-long sentence at the last space that fits (or hard, for unspaced text)."""
        low, high = 1, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            if self.fits(text[:mid]):
                low = mid
            else:
                high = mid - 1
        space = text.rfind(" ", 0, low)
        cut = space if space > low // 2 else low
        return text[:cut].strip(), text[cut:].strip()

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> Matrix:
        """Embed any number of texts in batches; returns an (n, dim) unit-norm matrix.

        Vectors holding NaN or infinity are refused here: stored, they would never match
        and a re-save would skip them as duplicates, so they could never be repaired.
        """
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                vectors = np.asarray(self.embed_batch(batch), dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise StoreError(f"embedding model {self.name} returned something that is not vectors: {exc}") from None
            if vectors.shape != (len(batch), self.dim):
                raise StoreError(
                    f"embedding model {self.name} returned vectors of shape {vectors.shape}, "
                    f"expected ({len(batch)}, {self.dim})",
                    hint="set model.embedding.dim (MODEL_EMBEDDING_DIM) to the model's real dimension",
                )
            finite = np.isfinite(vectors).all(axis=1) if vectors.size else np.ones(len(batch), dtype=bool)
            if not bool(finite.all()):
                bad = start + int(np.argmin(finite)) + 1
                raise StoreError(
                    f"embedding model {self.name} returned a vector holding NaN or infinity "
                    f"(text {bad} of {len(texts)}): nothing of this batch was stored",
                    hint="the embedding endpoint is misbehaving; retry later or use another model",
                )
            out[start : start + len(batch)] = vectors
            if progress is not None:
                progress(len(batch))
        return normalize(out)

    def embed_one(self, text: str) -> Matrix:
        """The unit vector of one text (a query), averaging its chunks when it is long."""
        chunks = self.chunk(text)
        vectors = self.embed(chunks)
        if len(chunks) == 1:
            return vectors[0]
        return normalize(vectors.mean(axis=0, keepdims=True))[0]

    def describe(self) -> str:
        """`name (dim-d)` for messages."""
        return f"{self.name} ({self.dim}-d)"


def normalize(matrix: Matrix) -> Matrix:
    """Scale each row to unit length (zero rows stay zero)."""
    import numpy as np

    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32, copy=False)
