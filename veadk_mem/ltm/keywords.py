"""Keyword search for long-term memory: the terms of a text, and rank fusion with the vectors.

Embeddings alone miss what a conversation plainly said (a name, a date, a place), so
`ltm search --mode hybrid` fuses a keyword ranking with the vector ranking by reciprocal
rank. The terms work for English and Chinese alike without a segmenter: words of
alphabetic scripts are words (the store's FTS5 tokenizer stems them), and a run of Han,
kana or Hangul becomes its overlapping character pairs (the classic CJK bigram analysis
of Lucene's CJKAnalyzer), plus its single characters in the index so a one-character
query still matches. A two-character word such as 北京 is then exactly one term, which
FTS5's trigram tokenizer cannot match at all (it needs three characters).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

SEARCH_MODES = ("vector", "keyword", "hybrid")
RRF_K = 60  # reciprocal-rank fusion constant (Cormack et al. 2009), as the issue measured
# How many of each ranking a hybrid search fuses: enough that a memory ranked low by one
# method and high by the other still surfaces, few enough that BM25 stays cheap.
FUSION_DEPTH = 100

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"[{_CJK}]")

# Words too common to rank anything; dropped from queries only (the index keeps them, so
# a query made only of them still finds something).
STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


def _cjk_terms(run: str, *, unigrams: bool) -> list[str]:
    pairs = [run[i : i + 2] for i in range(len(run) - 1)]
    if len(run) == 1:
        return [run]
    return [*run, *pairs] if unigrams else pairs


def _words(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def index_terms(text: str) -> str:
    """The terms stored in the keyword index for a memory's text, space separated."""
    out: list[str] = []
    for word in _words(text):
        out.extend(_cjk_terms(word, unigrams=True) if _CJK_RUN.match(word) else [word])
    return " ".join(out)


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query: words minus stop words, and CJK character pairs."""
    terms: list[str] = []
    words = _words(text)
    kept = [w for w in words if w not in STOPWORDS] or words
    for word in kept:
        terms.extend(_cjk_terms(word, unigrams=False) if _CJK_RUN.match(word) else [word])
    return list(dict.fromkeys(terms))


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression: any of the query's terms (BM25 ranks the documents having more)."""
    return " OR ".join(f'"{term}"' for term in query_terms(text))


K = TypeVar("K", bound=Hashable)


def fuse(rankings: Sequence[Sequence[K]], k: int = RRF_K) -> list[tuple[K, float]]:
    """Reciprocal-rank fusion: each item scores the sum of 1 / (k + rank) over the rankings holding it."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: -item[1])


def redisearch_query(text: str) -> str:
    """A RediSearch query for any of the terms in the `text` field.

    VeADK's index does not segment Chinese (its language is RediSearch's default), so a
    run of Chinese is one token there: a character pair matches inside it (`*北京*`).
    """
    parts = [f"*{term}*" if _CJK_RUN.match(term) else term for term in query_terms(text)]
    return f"@text:({' | '.join(parts)})" if parts else ""


def fuse_records(by_vector: Sequence[Any], by_keyword: Sequence[Any], top_k: int, k: int = RRF_K) -> list[Any]:
    """Two rankings of MemoryRecords (same memory, same id) fused by reciprocal rank, with each one's score."""
    records = {r.id: r for r in by_keyword} | {r.id: r for r in by_vector}
    vector_scores = {r.id: r.score for r in by_vector}
    keyword_scores = {r.id: r.score for r in by_keyword}
    out = []
    for memory_id, rrf in fuse([[r.id for r in by_vector], [r.id for r in by_keyword]], k)[:top_k]:
        record = records[memory_id]
        record.score = rrf
        record.metadata.update(
            score_kind="rrf", vector_score=vector_scores.get(memory_id), keyword_score=keyword_scores.get(memory_id)
        )
        out.append(record)
    return out
