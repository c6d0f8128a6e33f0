"""Keyword search for long-term memory: the terms of a text, and their fusion with the vectors.

Embeddings alone miss what a conversation plainly said (a name, a date, a place), so
`ltm search --mode hybrid` fuses a keyword ranking with the vector ranking (`fuse_scores`:
one score in [0, 1] made of the cosine and the query's words a memory holds). The terms
work for English and Chinese alike without a segmenter: words of alphabetic scripts are
words (the store's FTS5 tokenizer stems them), and a run of Han,
kana or Hangul becomes its overlapping character pairs (the classic CJK bigram analysis
of Lucene's CJKAnalyzer), plus its single characters in the index so a one-character
query still matches. A two-character word such as 北京 is then exactly one term, which
FTS5's trigram tokenizer cannot match at all (it needs three characters).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

SEARCH_MODES = ("vector", "keyword", "hybrid")
RRF_K = 60  # reciprocal-rank fusion constant (Cormack et al. 2009): the old fusion, measured beside the new
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

# The two weights of a hybrid score (`fuse_scores`), chosen by bench/fusion.py on the project's
# sets (paraphrases, keyword-sharing questions, LoCoMo-like long conversations; English and
# Chinese; MiniLM and e5). Keyword matches lift a memory the vectors find by up to
# KEYWORD_LIFT of its score: more and paraphrased questions lose to incidental shared words.
# Where the model cannot read the query (MiniLM and a Chinese query) the vectors are noise,
# so the keyword part takes BLIND_KEYWORD_WEIGHT of the score.
KEYWORD_LIFT = 0.05
BLIND_KEYWORD_WEIGHT = 0.6


def reads(model_reads_cjk: bool, query: str) -> bool:
    """Whether a model's vectors mean something for this query (a CJK query needs a model that reads CJK)."""
    return model_reads_cjk or not _CJK_RUN.search(query)


class Fused(NamedTuple):
    """One hybrid result: its fused score in [0, 1] and the two scores it was made of."""

    key: Any  # the memory's key in the rankings (a rowid, an id)
    score: float
    cosine: float | None
    bm25: float | None


def fuse_scores(
    by_vector: Sequence[tuple[K, float]],
    by_keyword: Sequence[tuple[K, float]],
    lift: float = KEYWORD_LIFT,
    cosine_of: Mapping[K, float] | None = None,
    *,
    blind: bool = False,
) -> list[Fused]:
    """Two scored rankings fused into one score in [0, 1], best first.

    The cosine part v is the cosine scaled between the lowest among the candidates (0) and a
    perfect match (1); the keyword part k is BM25 over the query's best match. The score is
    v * (1 + lift * k) / (1 + lift): the vectors rank, keyword matches lift a memory by at
    most `lift`. When the model cannot read the query (`blind`, see `reads`) it is
    0.4 * v + 0.6 * k (BLIND_KEYWORD_WEIGHT). A query sharing no term with any memory is
    ranked by v alone. `cosine_of` gives the cosine of keyword hits outside the vector
    ranking when the store knows it (local); elsewhere they count as the lowest.
    """
    cosines: dict[K, float] = dict(by_vector)
    if cosine_of is not None:
        cosines.update({key: cosine_of[key] for key, _ in by_keyword if key in cosine_of})
    bm25 = dict(by_keyword)
    floor = min(cosines.values(), default=0.0)
    span = 1.0 - floor if floor < 1.0 else 1.0
    top = max(bm25.values(), default=0.0)
    evidence = {key: value / top for key, value in bm25.items()} if top > 0 else {}
    weight = BLIND_KEYWORD_WEIGHT if blind and bm25 else 0.0
    lift = lift if bm25 else 0.0
    out = []
    for key in dict.fromkeys([*cosines, *bm25]):
        cosine = cosines.get(key)
        v = max(0.0, (cosine - floor) / span) if cosine is not None else 0.0
        k = min(1.0, evidence.get(key, 0.0))
        score = (1.0 - weight) * v * (1.0 + lift * k) / (1.0 + lift) + weight * k
        out.append(Fused(key, min(1.0, score), cosine, bm25.get(key)))
    out.sort(key=lambda f: -f.score)
    return out


def fuse(rankings: Sequence[Sequence[K]], k: int = RRF_K) -> list[tuple[K, float]]:
    """Reciprocal-rank fusion: each item scores the sum of 1 / (k + rank) over the rankings holding it.

    Kept for comparison in bench/fusion.py; hybrid search uses `fuse_scores`.
    """
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


def fuse_records(by_vector: Sequence[Any], by_keyword: Sequence[Any], top_k: int, *, blind: bool = False) -> list[Any]:
    """Two rankings of MemoryRecords (same memory, same id) fused by `fuse_scores`, with each one's score.

    Redis and OpenSearch hybrid search: a store's vector score rises to 1 for a perfect match
    (Redis's 1 - cosine distance, OpenSearch's cosinesimil scores), which is all the scaling needs.
    """
    records = {r.id: r for r in by_keyword} | {r.id: r for r in by_vector}
    fused = fuse_scores(
        [(r.id, float(r.score or 0.0)) for r in by_vector],
        [(r.id, float(r.score or 0.0)) for r in by_keyword],
        blind=blind,
    )
    out = []
    for hit in fused[:top_k]:
        record = records[hit.key]
        record.score = hit.score
        record.metadata.update(score_kind="fused", vector_score=hit.cosine, keyword_score=hit.bm25)
        out.append(record)
    return out
