"""Embeddings from any OpenAI-compatible endpoint (Ark / doubao, OpenAI, vLLM, Ollama ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veadk_mem.embedding.base import Embedder, RetryableError
from veadk_mem.errors import BadInput, StoreError

if TYPE_CHECKING:
    from veadk_mem.embedding.base import Matrix


class OpenAIEmbedder(Embedder):
    """`POST {api_base}/embeddings` in batches through the official `openai` client.

    The client's own retries are off: the base class retries 429 and 5xx with backoff
    so every embedder behaves alike. A 401 is reported once, clearly, without the key.
    """

    def __init__(
        self,
        *,
        name: str,
        dim: int,
        api_base: str,
        api_key: str,
        batch_size: int = 64,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.5,
        max_chars: int = 8000,
    ) -> None:
        if not api_key:
            raise BadInput(
                "no embedding API key: set MODEL_EMBEDDING_API_KEY (or MODEL_AGENT_API_KEY)",
                hint="or use the offline model: model.embedding.provider = 'local'",
            )
        self.name = name
        self.dim = dim
        self.api_base = api_base
        self.batch_size = batch_size
        self.retries = retries
        self.backoff = backoff
        self.max_chars = max_chars
        self._api_key = api_key
        self._timeout = timeout
        self._client: Any = None
        self.calls = 0

    @property
    def client(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI(api_key=self._api_key, base_url=self.api_base, timeout=self._timeout, max_retries=0)
        return self._client

    def embed_batch(self, texts: list[str]) -> Matrix:
        """One embeddings request for the batch; transient failures raise RetryableError."""
        import numpy as np
        import openai

        self.calls += 1
        try:
            response = self.client.embeddings.create(model=self.name, input=texts, encoding_format="float")
        except openai.AuthenticationError:
            raise StoreError(
                f"embedding endpoint {self.api_base} rejected the API key (401 Unauthorized)",
                hint="check MODEL_EMBEDDING_API_KEY (falls back to MODEL_AGENT_API_KEY)",
            ) from None
        except (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError) as exc:
            raise RetryableError(_describe(exc)) from None
        except openai.APIConnectionError as exc:
            raise RetryableError(f"cannot reach {self.api_base}: {_describe(exc)}") from None
        except openai.APIStatusError as exc:
            raise StoreError(f"embedding endpoint {self.api_base} answered {_describe(exc)}") from None
        data = sorted(response.data, key=lambda item: item.index)
        return np.asarray([item.embedding for item in data], dtype=np.float32)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return f"{status}: {text}" if status else text
