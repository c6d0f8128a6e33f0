"""Candidate changes to retrieval, measured on the project's own sets before any is kept (issue 46 items 1, 3, 4).

Sets: bench/fusion.py's (paraphrase pairs, bilingual English / Chinese / cross-lingual facts,
bench/hybrid.py's LoCoMo-like long conversations), each user's memories deduplicated as a store
does. Everything runs in process on vmem's own pieces: the models' embeddings of the memories'
searchable text, FTS5 with the local store's tokenizer and `bm25()`, `keywords.fuse_scores`
with the store's blind rule. The ranking of `vmem ltm search` in each mode is reproduced (its
fusion depth, its cosines), so the `bigram` / plain rows equal bench/fusion.py's.

--part terms: Chinese keyword terms, the store's CJK bigrams against jieba's words
  (jieba 0.42.1, `cut_for_search`, on PYTHONPATH), on the Chinese questions (bilingual zh, long
  zh): keyword and hybrid recall@1/@5 per model, index size, CPU per text.
--part share: partial centering of e5 (a share of each language's mean removed) on the
  bilingual facts, the one set whose store holds two languages.
--part vectors: e5 variants: the `query: ` prefix on both sides (today), `passage: ` on memories,
  and per-language mean-centering (each memory minus the mean of its language's memories in the
  user's store, the query minus the mean of its own language's, renormalised): vector and
  default-mode recall per set, beside MiniLM.

Run: PYTHONPATH=$PWD:/tmp/jieba .venv/bin/python bench/variants.py --part terms|vectors|share
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fusion import Question, sessions_and_questions

from veadk_mem.config import EmbeddingSettings
from veadk_mem.embedding import E5_NAME, create_embedder
from veadk_mem.ltm.keywords import _CJK_RUN, FUSION_DEPTH, STOPWORDS, fuse_scores, index_terms, query_terms, reads

TOKENIZE = "porter unicode61 remove_diacritics 2"  # the local store's (ltm/backends/local.py)
Terms = Callable[[str], str]


def corpus() -> tuple[dict[str, list[str]], list[Question]]:
    """user -> distinct memory texts (first occurrence order), and every question."""
    sessions, questions = sessions_and_questions(4, 15, 20, 60)
    texts: dict[str, dict[str, None]] = {}
    for s in sessions:
        for e in s["events"]:
            texts.setdefault(s["userId"], {})[e["content"]["parts"][0]["text"]] = None
    return {u: list(t) for u, t in texts.items()}, questions


def is_zh(text: str) -> bool:
    return bool(_CJK_RUN.search(text))


# --- keyword terms -----------------------------------------------------------------------


def jieba_terms() -> tuple[Terms, Terms, float]:
    """(index terms, query terms, dictionary load CPU seconds) with jieba's search-mode cut for CJK runs."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    c0 = time.process_time()
    jieba.initialize()
    load = time.process_time() - c0

    def index(text: str) -> str:
        out: list[str] = []
        for word in _split(text):
            out.extend(w for w in jieba.cut_for_search(word) if w.strip()) if is_zh(word) else out.append(word)
        return " ".join(out)

    def query(text: str) -> str:
        out: list[str] = []
        for word in _split(text):
            if is_zh(word):
                out.extend(w for w in jieba.cut_for_search(word) if w.strip())
            elif word not in STOPWORDS:
                out.append(word)
        return " OR ".join(f'"{t}"' for t in dict.fromkeys(out))

    return index, query, load


def _split(text: str) -> list[str]:
    from veadk_mem.ltm.keywords import _words

    return _words(text)


def bigram_terms() -> tuple[Terms, Terms, float]:
    return index_terms, lambda q: " OR ".join(f'"{t}"' for t in query_terms(q)), 0.0


class Keywords:
    """One FTS5 table per user's memories, on a file (for its size)."""

    def __init__(self, users: dict[str, list[str]], index: Terms, folder: Path, name: str) -> None:
        self.path = folder / f"{name}.db"
        self.conn = sqlite3.connect(self.path)
        self.conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(user UNINDEXED, terms, tokenize = '{TOKENIZE}')")
        self.rowid: dict[tuple[str, int], int] = {}
        self.cpu = 0.0
        self.texts = 0
        rows = []
        for user, texts in users.items():
            for i, text in enumerate(texts):
                c0 = time.process_time()
                terms = index(text)
                self.cpu += time.process_time() - c0
                self.texts += 1
                rows.append((len(rows) + 1, user, terms))
                self.rowid[(user, i)] = len(rows)
        self.conn.executemany("INSERT INTO t (rowid, user, terms) VALUES (?, ?, ?)", rows)
        self.conn.commit()
        self.conn.execute("VACUUM")
        self.back = {v: k[1] for k, v in self.rowid.items()}

    def size(self) -> int:
        return os.path.getsize(self.path)

    def hits(self, user: str, match: str, limit: int) -> list[tuple[int, float]]:
        if not match:
            return []
        rows = self.conn.execute(
            "SELECT rowid, bm25(t) AS r FROM t WHERE t MATCH ? AND user = ? ORDER BY r, rowid LIMIT ?",
            (match, user, limit),
        ).fetchall()
        return [(self.back[int(r[0])], -float(r[1])) for r in rows]


# --- vectors -------------------------------------------------------------------------------


def embed_all(model: str, users: dict[str, list[str]], questions: list[Question], prefix: str | None = None):
    """(user -> memory matrix, question matrix, reads_cjk) of a model; `prefix` for e5's memories."""
    from veadk_mem.embedding import e5

    embedder = create_embedder(EmbeddingSettings(provider="local", local_model=model))
    saved = e5.PREFIX
    if prefix is not None:
        e5.PREFIX = prefix
    try:
        memories = {u: embedder.embed(t) for u, t in users.items()}
    finally:
        e5.PREFIX = saved
    queries = embedder.embed([q for _, q, _, _ in questions])
    return memories, queries, embedder.reads_cjk


def centred(
    memories: dict[str, Any], users: dict[str, list[str]], queries: Any, questions: list[Question], share: float = 1.0
):
    """Per-language mean-centering of each user's store, and of each query by its language's mean there
    (`share` of the mean subtracted: 1 is full centering)."""
    out_m, means = {}, {}
    for user, matrix in memories.items():
        langs = np.array([is_zh(t) for t in users[user]])
        m = matrix.copy()
        means[user] = {}
        for lang in (True, False):
            if langs[langs == lang].size:
                mean = matrix[langs == lang].mean(axis=0)
                means[user][lang] = mean
                m[langs == lang] -= share * mean
        out_m[user] = m / np.linalg.norm(m, axis=1, keepdims=True)
    q = queries.copy()
    for i, (user, query, _, _) in enumerate(questions):
        mean = means[user].get(is_zh(query))
        if mean is not None:
            q[i] -= share * mean
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return out_m, q


# --- ranking ---------------------------------------------------------------------------------


def rank(
    mode: str, user: str, query: str, qv: Any, matrix: Any, kw: Keywords, match: Terms, reads_cjk: bool
) -> list[int]:
    cos = matrix @ qv
    by_vector = np.argsort(-cos, kind="stable")[:FUSION_DEPTH]
    if mode == "vector":
        return by_vector.tolist()
    keyword = kw.hits(user, match(query), FUSION_DEPTH)
    if mode == "keyword":
        return [i for i, _ in keyword]
    fused = fuse_scores(
        [(int(i), float(cos[i])) for i in by_vector],
        keyword,
        cosine_of={i: float(cos[i]) for i, _ in keyword},
        blind=not reads(reads_cjk, query),
    )
    return [int(f.key) for f in fused]


def recall(
    modes: tuple[str, ...],
    users: dict[str, list[str]],
    questions: list[Question],
    memories: dict[str, Any],
    queries: Any,
    kw: Keywords,
    match: Terms,
    reads_cjk: bool,
    only: Callable[[tuple[str, ...]], bool] = lambda s: True,
) -> dict[str, dict[str, tuple[float, float, int]]]:
    """mode -> set -> (recall@1, recall@5, questions)."""
    out: dict[str, dict[str, tuple[float, float, int]]] = {}
    position = {u: {t: i for i, t in enumerate(ts)} for u, ts in users.items()}
    for mode in modes:
        tally: dict[str, list[int]] = {}
        for qi, (user, query, answer, sets) in enumerate(questions):
            if not only(sets):
                continue
            ranking = rank(mode, user, query, queries[qi], memories[user], kw, match, reads_cjk)
            target = position[user][answer]
            place = ranking.index(target) + 1 if target in ranking else 999
            for s in sets:
                tally.setdefault(s, []).append(place)
        out[mode] = {
            s: (sum(p <= 1 for p in r) / len(r), sum(p <= 5 for p in r) / len(r), len(r)) for s, r in tally.items()
        }
    return out


def table(title: str, rows: dict[str, dict[str, tuple[float, float, int]]]) -> None:
    sets = list(next(iter(rows.values())))
    print(f"\n{title} (questions: " + ", ".join(f"{s} {next(iter(rows.values()))[s][2]}" for s in sets) + ")")
    print("| variant | " + " | ".join(sets) + " |")
    print("|---|" + "---|" * len(sets))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[s][0]:.2f} / {row[s][1]:.2f}" for s in sets) + " |")


def part_terms() -> None:
    users, questions = corpus()
    chinese = lambda sets: any(s in ("bilingual zh", "long: zh") for s in sets)  # noqa: E731
    rows: dict[str, dict[str, tuple[float, float, int]]] = {}
    costs = []
    with tempfile.TemporaryDirectory() as tmp:
        kws = {}
        for name, make in (("bigram", bigram_terms), ("jieba", jieba_terms)):
            index, match, load = make()
            kw = Keywords(users, index, Path(tmp), name)
            zh_texts = sum(is_zh(t) for ts in users.values() for t in ts)
            kws[name] = (kw, match)
            costs.append((name, kw.size(), kw.cpu / kw.texts * 1e6, load, zh_texts))
        for model in ("", E5_NAME):
            memories, queries, reads_cjk = embed_all(model, users, questions)
            label = "MiniLM" if not model else "e5"
            for name, (kw, match) in kws.items():
                got = recall(("keyword", "hybrid"), users, questions, memories, queries, kw, match, reads_cjk, chinese)
                for mode, by_set in got.items():
                    if mode == "keyword" and label == "e5":
                        continue  # the same as MiniLM's
                    rows[f"{name}: {mode}" + ("" if mode == "keyword" else f" ({label})")] = by_set
    table("Chinese questions, recall@1 / @5", rows)
    print("\n| terms | index file (bytes, all users) | CPU per text (us) | load CPU (s) |")
    print("|---|---|---|---|")
    for name, size, per_text, load, _ in costs:
        print(f"| {name} | {size} | {per_text:.0f} | {load:.2f} |")


def part_vectors() -> None:
    users, questions = corpus()
    rows: dict[str, dict[str, tuple[float, float, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        index, match, _ = bigram_terms()
        kw = Keywords(users, index, Path(tmp), "bigram")
        variants: list[tuple[str, str, str | None, bool]] = [
            ("MiniLM", "", None, False),
            ("MiniLM, centred", "", None, True),
            ("e5 query:/query:", E5_NAME, None, False),
            ("e5 query:/query:, centred", E5_NAME, None, True),
            ("e5 passage:/query:", E5_NAME, "passage: ", False),
            ("e5 passage:/query:, centred", E5_NAME, "passage: ", True),
        ]
        cache: dict[tuple[str, str | None], Any] = {}
        for label, model, prefix, centre in variants:
            if (model, prefix) not in cache:
                cache[(model, prefix)] = embed_all(model, users, questions, prefix)
            memories, queries, reads_cjk = cache[(model, prefix)]
            if centre:
                memories, queries = centred(memories, users, queries, questions)
            got = recall(("vector", "hybrid"), users, questions, memories, queries, kw, match, reads_cjk)
            rows[f"{label}: vector"] = got["vector"]
            rows[f"{label}: hybrid"] = got["hybrid"]
        rows["keyword"] = recall(("keyword",), users, questions, memories, queries, kw, match, True)["keyword"]
    table("recall@1 / @5", rows)


def part_share() -> None:
    """Partial centering of e5 on the bilingual facts (the one set of two languages), by the share removed."""
    users, questions = corpus()
    users = {"bi": users["bi"]}
    questions = [q for q in questions if q[0] == "bi"]
    rows: dict[str, dict[str, tuple[float, float, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        index, match, _ = bigram_terms()
        kw = Keywords(users, index, Path(tmp), "bigram")
        memories, queries, reads_cjk = embed_all(E5_NAME, users, questions)
        for share in (0.0, 0.25, 0.5, 0.6, 0.75, 0.9, 1.0):
            m, q = centred(memories, users, queries, questions, share)
            got = recall(("vector", "hybrid"), users, questions, m, q, kw, match, reads_cjk)
            rows[f"e5, {share:.2f} of the mean: vector"] = got["vector"]
            rows[f"e5, {share:.2f} of the mean: hybrid"] = got["hybrid"]
    table("recall@1 / @5", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("terms", "vectors", "share"), required=True)
    args = parser.parse_args()
    {"terms": part_terms, "vectors": part_vectors, "share": part_share}[args.part]()


if __name__ == "__main__":
    main()
