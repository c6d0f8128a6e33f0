"""Embeddings from any OpenAI-compatible endpoint (Ark / doubao, OpenAI, vLLM, Ollama ...).

The official `openai` client does the HTTP, with its own retries off: the embedder only
classifies what the client raised (`_classify`), and the one retry policy and message style
of every store (`veadk_mem.failure`) do the rest: 429, 5xx and refused or lost connections
retried with backoff (honouring Retry-After), then one line that never holds the API key or
the user info of the endpoint URL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veadk_mem import failure as fail
from veadk_mem.embedding.base import Embedder
from veadk_mem.errors import BadInput, StoreError

if TYPE_CHECKING:
    from veadk_mem.config import EmbeddingSettings
    from veadk_mem.embedding.base import Matrix


class OpenAIEmbedder(Embedder):
    """`POST {api_base}/embeddings` in batches through the official `openai` client."""

    retry_delays: tuple[float, ...] = fail.RETRY_DELAYS  # the one policy's waits

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings, **options: Any) -> Embedder:
        """The configured model, endpoint and key."""
        return cls(
            name=settings.name,
            dim=settings.dim,
            api_base=settings.api_base,
            api_key=settings.api_key.get_secret_value(),
            batch_size=settings.batch_size,
        )

    def __init__(
        self,
        *,
        name: str,
        dim: int,
        api_base: str,
        api_key: str,
        batch_size: int = 64,
        timeout: float = 30.0,
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
        self.max_chars = max_chars
        self._api_key = api_key
        self._timeout = timeout
        self._client: Any = None
        self.calls = 0

    @property
    def endpoint(self) -> str:
        """The API base as it may be shown: user info and secret query values masked."""
        from veadk_mem.config import mask_url

        return mask_url(self.api_base)

    @property
    def client(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI(api_key=self._api_key, base_url=self.api_base, timeout=self._timeout, max_retries=0)
        return self._client

    def embed_batch(self, texts: list[str]) -> Matrix:
        """One embeddings request for the batch."""
        import numpy as np

        self.calls += 1
        response = self._call(
            lambda: self.client.embeddings.create(model=self.name, input=texts, encoding_format="float")
        )
        try:
            data = sorted(response.data, key=lambda item: item.index)
            return np.asarray([item.embedding for item in data], dtype=np.float32)
        except (AttributeError, TypeError) as exc:
            raise self._not_json(exc) from None

    def _call(self, send: Any) -> Any:
        """Run one request under the retry policy; a failure left is one line without secrets."""
        service = fail.Service(
            where=f"embedding endpoint {self.endpoint}",
            credentials="the API key",
            auth_hint="check MODEL_EMBEDDING_API_KEY (falls back to MODEL_AGENT_API_KEY)",
            url_hint="check MODEL_EMBEDDING_API_BASE",
        )
        return fail.call_sync(
            send,
            classify=self._classify,
            report=lambda failure, retries: fail.report(service, failure, "embedding", retries),
            delays=self.retry_delays,
        )

    def _classify(self, exc: Exception) -> fail.Failure | None:
        """What the openai client raised, as a kind; a reply that is not embeddings JSON is its own error."""
        import json

        import openai

        if isinstance(exc, (json.JSONDecodeError, openai.APIResponseValidationError)):
            raise self._not_json(exc) from None
        if isinstance(exc, openai.APIConnectionError):  # APITimeoutError included
            detail = self._clean(exc.__cause__ or exc)
            return fail.Failure(fail.connection_kind(f"{exc} {exc.__cause__}"), detail)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            asked = fail.retry_after(exc.response.headers)
            return fail.Failure(fail.kind_of_status(status), self._clean(exc), status=status, retry_after=asked)
        return None

    def _not_json(self, exc: Exception) -> StoreError:
        return StoreError(
            f"embedding endpoint {self.endpoint} did not answer with embeddings JSON "
            f"({type(exc).__name__}): is MODEL_EMBEDDING_API_BASE the API base URL?"
        )

    def _clean(self, exc: BaseException) -> str:
        """The first line of the error, with the key and the URL's user info masked."""
        text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return mask_secrets(text, self._api_key, self.api_base)


def mask_secrets(text: str, api_key: str, api_base: str) -> str:
    """`text` with the API key (an endpoint may echo it back) and the endpoint's user info masked."""
    from veadk_mem.config import mask_url

    if api_key:
        text = text.replace(api_key, "****")
    if api_base and api_base in text:
        text = text.replace(api_base, mask_url(api_base))
    return mask_url(text)
