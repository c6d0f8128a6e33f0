"""Which hybrid fusion: every candidate side by side on the project's sets, per offline model.

Sets (each saved with `vmem ltm save` into a fresh local store per model):
- paraphrase: bench/retrieval.py's 48 memories, a question each sharing few words with it;
- bilingual English / Chinese / cross-lingual: bench/bilingual_set.py's 80 memories of one user;
- long conversations (LoCoMo-like): bench/hybrid.py's generated multi-session conversations
  of English and Chinese users, names and places repeated in filler turns; its questions split
  into keyword-sharing ones (they name the person, place or thing) and paraphrases.
Per question, the store's vector ranking and keyword (BM25) ranking are read once to depth
FUSION_DEPTH; each fusion then ranks those same candidates: plain RRF (k = 60, the old default)
and `keywords.fuse_scores` (hybrid search's) at several keyword lifts, and without its
keyword-led scoring of queries the model cannot read. A hit at k is the answer among the first k.

Run: PYTHONPATH=$PWD:/work/e5-site .venv/bin/python bench/fusion.py [--models minilm,e5] [--json]
Target (issue 46): the chosen fusion within 0.02 of the better of vector and keyword, recall@1
and @5, on every set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bilingual_set import CHINESE, ENGLISH
from hybrid import build
from retrieval import PAIRS

from veadk_mem.ltm.keywords import FUSION_DEPTH, KEYWORD_LIFT, fuse, fuse_scores, reads

APP = "fusion_bench"
MODELS = {"minilm": "", "e5": "multilingual-e5-small"}
CACHE = os.environ.get("FUSION_CACHE", "")
LIFTS = (0.05, 0.2, 0.5)

# (user, question, answer text, set names)
Question = tuple[str, str, str, tuple[str, ...]]


def sessions_and_questions(users: int, sessions: int, turns: int, facts: int) -> tuple[list[dict], list[Question]]:
    """Every set's sessions (each set its own user) and its questions."""
    out: list[dict[str, Any]] = []
    questions: list[Question] = []

    def one(user: str, i: int, text: str) -> dict[str, Any]:
        event = {
            "id": f"{user}-e{i}",
            "invocationId": f"{user}-i{i}",
            "author": "user",
            "timestamp": 1764403200.0 + i,
            "content": {"role": "user", "parts": [{"text": text}]},
        }
        return {"id": f"{user}-s{i}", "appName": APP, "userId": user, "events": [event]}

    out += [one("para", i, m) for i, (m, _) in enumerate(PAIRS)]
    questions += [("para", q, m, ("paraphrase",)) for m, q in PAIRS]
    facts_bi = ENGLISH + CHINESE
    out += [one("bi", i, f) for i, (f, _, _) in enumerate(facts_bi)]
    questions += [("bi", q, f, ("bilingual en",)) for f, q, _ in ENGLISH]
    questions += [("bi", q, f, ("bilingual zh",)) for f, q, _ in CHINESE]
    questions += [("bi", x, f, ("cross-lingual",)) for f, _, x in facts_bi]
    corpus = build(users, sessions, turns, facts)
    for session in corpus.sessions:
        session["appName"] = APP
    out += corpus.sessions
    for q in corpus.questions:
        kind = "long: keyword-sharing" if q.kind == "entity" else "long: paraphrase"
        questions.append((q.user, q.query, q.answer, (kind, f"long: {q.lang}")))
    return out, questions


async def candidates(env: dict[str, str], questions: list[Question]) -> list[dict[str, Any]]:
    """Per question: the vector ranking (id, cosine), the keyword ranking (id, BM25), every cosine, the answer id."""
    from veadk_mem.config import load_settings
    from veadk_mem.ltm.convert import searchable_text
    from veadk_mem.ltm.facade import LongTermMemory

    ltm = LongTermMemory.from_settings(load_settings(environ=env).settings, app_name=APP)
    backend: Any = ltm.backend_for(APP)
    backend.queries.prepare(backend.embedder, [q for _, q, _, _ in questions])
    ids: dict[tuple[str, str], str] = {}
    out = []
    for user, query, answer, sets in questions:
        if not any(u == user for u, _ in ids):
            async for page in backend.iter_memories(user):
                ids.update({(user, searchable_text(r.text)): r.id for r in page})
        everything = await backend.search_by(user, query, 100_000, "vector")
        keyword = await backend.search_by(user, query, FUSION_DEPTH, "keyword")
        out.append(
            {
                "sets": sets,
                "blind": not reads(backend.embedder.reads_cjk, query),
                "answer": ids[(user, answer)],
                "vector": [(r.id, r.score) for r in everything[:FUSION_DEPTH]],
                "keyword": [(r.id, r.score) for r in keyword],
                "cosines": {r.id: r.score for r in everything},
            }
        )
    await ltm.close()
    return out


def methods() -> dict[str, Callable[[dict[str, Any]], list[str]]]:
    """Each ranking under test: the two parts, RRF, and `fuse_scores` in its variants."""
    got: dict[str, Callable[[dict[str, Any]], list[str]]] = {
        "vector": lambda c: [k for k, _ in c["vector"]],
        "keyword": lambda c: [k for k, _ in c["keyword"]],
        "rrf k=60 (old)": lambda c: [k for k, _ in fuse([[k for k, _ in c["vector"]], [k for k, _ in c["keyword"]]])],
    }
    for lift in LIFTS:
        mark = " (default)" if lift == KEYWORD_LIFT else ""
        got[f"fuse_scores, lift {lift}{mark}"] = lambda c, lift=lift: [
            str(f.key) for f in fuse_scores(c["vector"], c["keyword"], lift, c["cosines"], blind=c["blind"])
        ]
    got["fuse_scores, never blind"] = lambda c: [
        str(f.key) for f in fuse_scores(c["vector"], c["keyword"], KEYWORD_LIFT, c["cosines"])
    ]
    return got


def score(cands: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """method -> set -> (recall@1, recall@5, questions)."""
    out: dict[str, dict[str, tuple[float, float, int]]] = {}
    for name, rank in methods().items():
        tally: dict[str, list[int]] = {}
        for c in cands:
            ranking = rank(c)
            position = ranking.index(c["answer"]) + 1 if c["answer"] in ranking else 999
            for s in c["sets"]:
                tally.setdefault(s, []).append(position)
        out[name] = {
            s: (sum(p <= 1 for p in r) / len(r), sum(p <= 5 for p in r) / len(r), len(r)) for s, r in tally.items()
        }
    return out


def run_model(model: str, folder: Path, sessions: list[dict], questions: list[Question]) -> dict[str, Any]:
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    env = {
        **os.environ,
        "MODEL_EMBEDDING_PROVIDER": "local",
        "MODEL_EMBEDDING_LOCAL_MODEL": MODELS[model],
        "LONG_TERM_MEMORY_LOCAL_PATH": str(folder / f"{model}.db"),
    }
    path = folder / "sessions.jsonl"
    path.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in sessions), "utf-8")
    saved = CliRunner().invoke(app, ["--quiet", "ltm", "save", str(path), "--policy", "all"], env=env)
    if saved.exit_code != 0:
        raise SystemExit(f"vmem ltm save failed ({model}): {saved.stderr}")
    cands = asyncio.run(candidates(env, questions))
    if CACHE:
        Path(CACHE, f"{model}.json").write_text(json.dumps(cands))
    return score(cands)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,e5")
    parser.add_argument("--users", type=int, default=4, help="long-conversation users (half English, half Chinese)")
    parser.add_argument("--sessions", type=int, default=15)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--facts", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sessions, questions = sessions_and_questions(args.users, args.sessions, args.turns, args.facts)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in [m for m in args.models.split(",") if m]:
            folder = Path(tmp) / model
            folder.mkdir()
            results[model] = run_model(model, folder, sessions, questions)
    if args.json:
        json.dump(results, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return
    for model, table in results.items():
        sets = list(next(iter(table.values())))
        print(f"\n{model}: recall@1 / @5 (questions: " + ", ".join(f"{s} {table['vector'][s][2]}" for s in sets) + ")")
        print("| fusion | " + " | ".join(sets) + " |")
        print("|---|" + "---|" * len(sets))
        for name, row in table.items():
            print(f"| {name} | " + " | ".join(f"{row[s][0]:.2f} / {row[s][1]:.2f}" for s in sets) + " |")
        best = {s: tuple(max(table[p][s][i] for p in ("vector", "keyword")) for i in (0, 1)) for s in sets}
        for name, row in table.items():
            if name in ("vector", "keyword"):
                continue
            worst = min(min(row[s][0] - best[s][0], row[s][1] - best[s][1]) for s in sets)
            print(f"  {name}: worst shortfall against the better part, any set, @1 or @5: {worst:+.2f}")


if __name__ == "__main__":
    main()
