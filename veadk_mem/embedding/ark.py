"""Embeddings from Ark's multimodal endpoint, as VeADK makes them for its vision models.

VeADK 1.1.19 (`veadk/models/ark_embedding.py::create_embedding_model`) sends
`doubao-embedding-vision-250615` and `doubao-embedding-vision-251215` (its default is
the first) to `POST {api_base}/embeddings/multimodal` with input
`[{"type": "text", "text": ...}]`, one text and one vector per request, and every other
model name to an OpenAI-compatible `/embeddings`. The request goes through the openai
client and `OpenAIEmbedder._call`, so retries, timeouts and errors are the same as for `openai`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veadk_mem.embedding.openai import OpenAIEmbedder

if TYPE_CHECKING:
    from veadk_mem.embedding.base import Matrix

# Exactly VeADK's list: only these names go to the multimodal endpoint.
ARK_MODELS = frozenset({"doubao-embedding-vision-250615", "doubao-embedding-vision-251215"})


class ArkEmbedder(OpenAIEmbedder):
    """`POST {api_base}/embeddings/multimodal`, one text per request."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["batch_size"] = 1  # the endpoint embeds one input into one vector
        super().__init__(**kwargs)

    def embed_batch(self, texts: list[str]) -> Matrix:
        """One multimodal request per text; `data.embedding` is its vector."""
        import httpx
        import numpy as np

        rows: list[Any] = []
        for text in texts:
            self.calls += 1
            body = {"model": self.name, "input": [{"type": "text", "text": text}]}
            response = self._call(
                lambda body=body: self.client.post("/embeddings/multimodal", body=body, cast_to=httpx.Response)
            )
            try:
                payload = response.json()
                data = payload["data"]
                rows.append((data[0] if isinstance(data, list) else data)["embedding"])
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise self._not_json(exc) from None
        return np.asarray(rows, dtype=np.float32)
