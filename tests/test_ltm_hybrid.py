"""`ltm search --mode` and `--queries` on the local store: the keyword index beside the vectors.

The hash embedder ranks by shared character trigrams, so these tests check what the
keyword index adds (exact words, short Chinese words) and that it stays in step with
the memories through save, delete, forget, import and the migration of an older store.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veadk_mem.cli.app import app
from veadk_mem.config import load_settings
from veadk_mem.embedding.hash import HashEmbedder
from veadk_mem.ltm.base import MemoryRecord
from veadk_mem.ltm.facade import LongTermMemory
from veadk_mem.ltm.keywords import KEYWORD_LIFT, fuse, fuse_scores, index_terms, query_terms, reads

DATA = Path(__file__).parent / "data"
APP = "hyb"
TEXTS = [
    "My sister Lena lives in Porto and works as a dentist.",
    "I drive a blue Subaru Outback.",
    "Remind me that the quarterly report is due on March 14.",
    "我住在北京海淀区，离公司很近。",
    "下周三我要去上海出差三天。",
    "我喜欢猫，家里养了两只。",
    "周末和朋友去杭州西湖划船。",
]


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_EMBEDDING_PROVIDER", "hash")


def content(text: str) -> str:
    return json.dumps({"role": "user", "parts": [{"text": text}]}, ensure_ascii=False)


def seed(user: str = "alice", texts: list[str] = TEXTS) -> list[str]:
    ltm = LongTermMemory.from_settings(load_settings().settings)
    records = [
        MemoryRecord(text=content(t), user_id=user, app_name=APP, session_id=f"s{i}", event_id=f"e{i}", author="user")
        for i, t in enumerate(texts)
    ]
    return asyncio.run(ltm.backend_for(APP).save(user, records))


def search(runner: CliRunner, query: str, *args: str, user: str = "alice") -> list[dict[str, Any]]:
    result = runner.invoke(app, ["--json", "ltm", "search", query, "-u", user, "-a", APP, *args])
    assert result.exit_code == 0, result.stderr
    return list(json.loads(result.stdout))


def texts(entries: list[dict[str, Any]]) -> list[str]:
    return [e["content"]["parts"][0]["text"] for e in entries]


# --- terms and fusion ----------------------------------------------------------------


def test_terms_of_english_and_chinese() -> None:
    assert index_terms("Lena's Porto, 2027!") == "lena s porto 2027"
    assert index_terms("去北京") == "去 北 京 去北 北京"  # characters and pairs: one- and two-character queries match
    assert query_terms("Where does my sister live?") == ["sister", "live"]  # stop words out
    assert query_terms("北京") == ["北京"] and query_terms("猫") == ["猫"]
    assert query_terms("the") == ["the"]  # a query of stop words only keeps them
    assert query_terms("ＡＢＣ　上海") == ["abc", "上海"]  # full-width folded


def test_fuse_scores_ranks_by_vector_lifted_by_keywords() -> None:
    vector = [("a", 0.80), ("b", 0.78), ("c", 0.40), ("d", 0.20)]
    # No keyword hit: the vector ranking, each score the cosine scaled between the lowest and 1.
    plain = fuse_scores(vector, [])
    assert [f.key for f in plain] == ["a", "b", "c", "d"]
    assert plain[0].score == pytest.approx((0.80 - 0.20) / 0.80) and plain[-1].score == 0
    assert plain[0].bm25 is None and plain[0].cosine == 0.80
    # A strong keyword match lifts a near tie past the vector's first, never a clearly worse hit.
    lifted = fuse_scores(vector, [("b", 9.0), ("c", 9.0)])
    assert [f.key for f in lifted] == ["b", "a", "c", "d"]
    assert all(0 <= f.score <= 1 for f in lifted) and lifted[0].bm25 == 9.0
    # A keyword hit outside the vector ranking: its cosine from the store, else the lowest.
    assert fuse_scores(vector, [("e", 1.0)], cosine_of={"e": 0.5})[2].key == "e"
    assert next(f for f in fuse_scores(vector, [("e", 1.0)]) if f.key == "e").cosine is None


def test_fuse_scores_leans_on_keywords_when_the_model_cannot_read_the_query() -> None:
    vector = [("a", 0.80), ("b", 0.70), ("c", 0.20)]
    blind = fuse_scores(vector, [("c", 3.0)], blind=True)
    assert blind[0].key == "c" and blind[0].score == pytest.approx(0.6)
    assert not reads(False, "我妹妹住在哪里") and reads(False, "where does my sister live")
    assert reads(True, "我妹妹住在哪里")


def test_fuse_is_reciprocal_rank() -> None:
    fused = dict(fuse([["a", "b", "c"], ["c", "a"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["b"] == pytest.approx(1 / 62)
    assert [key for key, _ in fuse([["a", "b", "c"], ["c", "a"]])] == ["a", "c", "b"]


# --- modes -----------------------------------------------------------------------------


def test_keyword_mode_finds_exact_words_and_scores_bm25(runner: CliRunner) -> None:
    seed()
    found = search(runner, "Porto dentist", "--mode", "keyword")
    assert texts(found) == [TEXTS[0]]  # only memories holding a term: BM25 does not pad with the rest
    meta = found[0]["custom_metadata"]
    assert meta["score_kind"] == "bm25" and meta["keyword_score"] == meta["score"] > 0
    assert "vector_score" not in meta


@pytest.mark.parametrize(
    ("query", "expected"),
    [("北京", TEXTS[3]), ("上海出差", TEXTS[4]), ("猫", TEXTS[5]), ("西湖", TEXTS[6]), ("Subaru", TEXTS[1])],
)
def test_short_chinese_and_english_words_rank_first_in_keyword_and_hybrid(
    runner: CliRunner, query: str, expected: str
) -> None:
    seed()
    assert texts(search(runner, query, "--mode", "keyword"))[0] == expected
    hybrid = search(runner, query, "-k", "3")  # hybrid is local's default
    assert texts(hybrid)[0] == expected
    assert hybrid[0]["custom_metadata"]["score_kind"] == "fused"


def test_hybrid_results_carry_both_scores_and_vector_mode_is_cosine(runner: CliRunner) -> None:
    seed()
    hybrid = search(runner, "quarterly report March", "-k", "7")
    assert len(hybrid) == 7  # every memory has a cosine, so the fusion ranks all of them
    top = hybrid[0]["custom_metadata"]
    assert texts(hybrid)[0] == TEXTS[2]
    assert top["keyword_score"] > 0 and -1 <= top["vector_score"] <= 1
    # The shown score is fuse_scores' in [0, 1], ordered as the ranking: the cosine scaled
    # between the lowest candidate's and 1, lifted by at most KEYWORD_LIFT by the keyword match.
    metas = [e["custom_metadata"] for e in hybrid]
    scores = [m["score"] for m in metas]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    floor = min(m["vector_score"] for m in metas)
    best_bm25 = max(m["keyword_score"] or 0 for m in metas)
    for m in metas:
        v = (m["vector_score"] - floor) / (1 - floor)
        lift = 1 + KEYWORD_LIFT * (m["keyword_score"] or 0) / best_bm25
        assert m["score"] == pytest.approx(v * lift / (1 + KEYWORD_LIFT), abs=1e-5)
    without_terms = [m for m in metas if m["keyword_score"] is None]
    assert without_terms and all(m["score"] < top["score"] for m in without_terms)
    vector = search(runner, "quarterly report March", "--mode", "vector", "-k", "2")
    assert [e["custom_metadata"]["score_kind"] for e in vector] == ["cosine", "cosine"]
    assert set(vector[0]["custom_metadata"]) == {"score", "score_kind", "origin"}


def test_vector_mode_is_todays_search(runner: CliRunner) -> None:
    """--mode vector ranks exactly as the store's plain search (what a VeADK agent would get)."""
    seed()
    ltm = LongTermMemory.from_settings(load_settings().settings)
    backend = ltm.backend_for(APP)
    plain = asyncio.run(backend.search("alice", "where does Lena live", 7))
    vector = search(runner, "where does Lena live", "--mode", "vector", "-k", "7")
    assert [r.id for r in plain if isinstance(r, MemoryRecord)] == [e["id"] for e in vector]
    assert [round(r.score or 0, 6) for r in plain if isinstance(r, MemoryRecord)] == [
        e["custom_metadata"]["score"] for e in vector
    ]


def test_search_mode_setting_and_min_score_on_the_shown_score(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed()
    monkeypatch.setenv("LONG_TERM_MEMORY_SEARCH_MODE", "keyword")
    assert [e["custom_metadata"]["score_kind"] for e in search(runner, "Subaru")] == ["bm25"]
    monkeypatch.setenv("LONG_TERM_MEMORY_SEARCH_MODE", "hybrid")
    everything = search(runner, "blue Subaru Outback", "-k", "7")
    shown = sorted(e["custom_metadata"]["score"] for e in everything)
    kept = search(runner, "blue Subaru Outback", "-k", "7", "--min-score", str(shown[-2]))
    assert [e["custom_metadata"]["score"] for e in kept] == shown[-1:-3:-1]  # the fused score, not the cosine
    result = runner.invoke(app, ["ltm", "search", "x", "-u", "alice", "--mode", "fuzzy"])
    assert result.exit_code == 2 and "fuzzy" in result.stderr


def test_keyword_search_is_scoped_to_the_user_and_index(runner: CliRunner) -> None:
    seed("alice", ["Lena lives in Porto."])
    seed("bob", ["Porto is where my dentist works."])
    assert texts(search(runner, "Porto", "--mode", "keyword", user="bob")) == ["Porto is where my dentist works."]
    assert search(runner, "Porto", "--mode", "keyword", user="carol") == []


# --- the keyword index in step -----------------------------------------------------------


def keyword_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM memory_terms").fetchone()[0])


def store_path() -> Path:
    return Path(load_settings().settings.long_term_memory.local_path or "") or Path()


def test_delete_and_forget_drop_keyword_rows(runner: CliRunner, isolated_env: Path) -> None:
    seed()
    seed("bob", ["Bob keeps bees in Porto."])
    path = isolated_env.parent / "home" / ".local" / "share" / "vmem" / "ltm.db"
    assert keyword_rows(path) == len(TEXTS) + 1
    result = runner.invoke(app, ["ltm", "delete", "-u", "alice", "-a", APP, "--session", "s3", "--yes", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["deleted"] == 1  # the memory, not its keyword row too
    assert keyword_rows(path) == len(TEXTS)
    assert "北京" not in "".join(texts(search(runner, "北京", "--mode", "keyword")))
    result = runner.invoke(app, ["forget", "alice", "--yes"])
    assert result.exit_code == 0, result.stderr
    assert keyword_rows(path) == 1
    assert texts(search(runner, "Porto", "--mode", "keyword", user="bob")) == ["Bob keeps bees in Porto."]


def test_import_indexes_keywords(runner: CliRunner, tmp_path: Path) -> None:
    seed()
    dump = tmp_path / "alice.jsonl"
    result = runner.invoke(app, ["ltm", "export", "-u", "alice", "-a", APP, "-o", str(dump)])
    assert result.exit_code == 0, result.stderr
    other = tmp_path / "other.db"
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(other)}
    result = runner.invoke(app, ["ltm", "import", str(dump)], env=env)
    assert result.exit_code == 0, result.stderr
    assert keyword_rows(other) == len(TEXTS)
    result = runner.invoke(app, ["--json", "ltm", "search", "西湖", "-u", "alice", "-a", APP, "-m", "keyword"], env=env)
    assert texts(json.loads(result.stdout)) == [TEXTS[6]]


def test_an_older_store_gets_its_keyword_index_on_open(runner: CliRunner, tmp_path: Path) -> None:
    """tests/data/ltm_store_v1.db was written by vmem at 8736c68 (no keyword index), hash embedder."""
    path = tmp_path / "old.db"
    shutil.copy(DATA / "ltm_store_v1.db", path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_terms'").fetchone() is None
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(path)}
    result = runner.invoke(
        app, ["--json", "ltm", "search", "北京", "-u", "alice", "-a", "old_app", "-m", "keyword"], env=env
    )
    assert result.exit_code == 0, result.stderr
    assert texts(json.loads(result.stdout)) == ["我住在北京海淀区"]
    assert keyword_rows(path) == 5  # every user's memories, built once
    # an older vmem appending to the migrated store: its rows get their terms on the next open
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO memories (id, index_name, user_id, text, content_hash, model, dim, created_at, vector) "
            "SELECT 'appended', index_name, user_id, ?, 'h-appended', model, dim, created_at, vector "
            "FROM memories LIMIT 1",
            (content("Appended by an older vmem about Zanzibar"),),
        )
    from veadk_mem.ltm.backends import local

    local._CONNECTIONS.pop(str(path)).close()  # a new process
    result = runner.invoke(
        app, ["--json", "ltm", "search", "Zanzibar", "-u", "alice", "-a", "old_app", "-m", "keyword"], env=env
    )
    assert texts(json.loads(result.stdout)) == ["Appended by an older vmem about Zanzibar"]
    assert keyword_rows(path) == 6


# --- batch search ------------------------------------------------------------------------


def test_batch_search_prints_one_jsonl_line_per_query(runner: CliRunner, tmp_path: Path) -> None:
    seed()
    seed("bob", ["Bob keeps bees in Porto."])
    queries = tmp_path / "q.txt"
    queries.write_text(
        "where does Lena live\n\n"
        + json.dumps({"query": "北京", "top_k": 1}, ensure_ascii=False)
        + "\n"
        + json.dumps({"query": "bees", "user": "bob", "top_k": 1})
        + "\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["ltm", "search", "--queries", str(queries), "-u", "alice", "-a", APP, "-k", "2"])
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["query"] for line in lines] == ["where does Lena live", "北京", "bees"]
    assert [line["user_id"] for line in lines] == ["alice", "alice", "bob"]
    assert [len(line["results"]) for line in lines] == [2, 1, 1]
    assert TEXTS[0] in texts(lines[0]["results"])  # the hash embedder's vectors rank; Lena's words lift
    assert texts(lines[1]["results"]) == [TEXTS[3]] and texts(lines[2]["results"]) == ["Bob keeps bees in Porto."]
    # the same results as one search at a time
    assert lines[0]["results"] == search(runner, "where does Lena live", "-k", "2")
    # stdin, and a query of a user with no memories is an empty result, not an error
    result = runner.invoke(app, ["ltm", "search", "--queries", "-", "-u", "nobody", "-a", APP], input="bees\n")
    assert result.exit_code == 0 and json.loads(result.stdout)["results"] == []


def test_batch_search_embeds_the_queries_in_batches(tmp_path: Path) -> None:
    from veadk_mem.ltm.facade import SearchRequest

    seed()
    calls: list[int] = []

    class Counting(HashEmbedder):
        def embed_batch(self, texts: list[str]) -> Any:
            calls.append(len(texts))
            return super().embed_batch(texts)

    settings = load_settings().settings
    ltm = LongTermMemory.from_settings(settings, embedder=Counting(384, 64))
    requests = [SearchRequest(query=f"question {n} about Porto", user_id="alice", app_name=APP) for n in range(150)]
    done = asyncio.run(ltm.search_batch(requests, mode="hybrid"))
    assert all(r.error is None and r.entries for r in done)
    assert calls == [64, 64, 22]  # the embedder's batches, not one call per query


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "q.txt: line 2, column 2: invalid JSON"),
        ('{"user": "alice"}', "q.txt: line 2: field 'query' must be a non-empty string"),
        ('{"query": "x", "top_k": 0}', "q.txt: line 2: field 'top_k' must be a positive integer"),
        ('{"query": "x", "user": 3}', "q.txt: line 2: field 'user' must be a non-empty string"),
    ],
)
def test_a_bad_query_line_is_exit_2_naming_it(runner: CliRunner, tmp_path: Path, line: str, message: str) -> None:
    queries = tmp_path / "q.txt"
    queries.write_text(f"fine\n{line}\n", encoding="utf-8")
    result = runner.invoke(app, ["ltm", "search", "--queries", str(queries), "-u", "alice"])
    assert result.exit_code == 2 and message in result.stderr and result.stdout == ""


def test_query_and_queries_together_or_neither_is_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    assert runner.invoke(app, ["ltm", "search", "x", "--queries", "-", "-u", "a"]).exit_code == 2
    assert runner.invoke(app, ["ltm", "search", "-u", "a"]).exit_code == 2
    result = runner.invoke(app, ["ltm", "search", "x"])
    assert result.exit_code == 2 and "--user" in result.stderr


# --- hosted backends: their own search only ----------------------------------------------


@pytest.mark.parametrize(
    ("backend", "env"),
    [
        ("viking", {"DATABASE_VIKINGMEM_BASE_URL": "http://127.0.0.1:9", "VOLCENGINE_ACCESS_KEY": "ak"}),
        ("mem0", {"DATABASE_MEM0_BASE_URL": "http://127.0.0.1:9", "DATABASE_MEM0_API_KEY": "k"}),
        ("openviking", {"DATABASE_OPENVIKING_BASE_URL": "http://127.0.0.1:9"}),
        (
            "tos_context",
            {"DATABASE_TOS_CONTEXT_BASE_URL": "http://127.0.0.1:9", "DATABASE_TOS_CONTEXT_ACCOUNT_ID": "1"},
        ),
    ],
)
def test_hosted_backends_have_only_their_own_search(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, backend: str, env: dict[str, str]
) -> None:
    monkeypatch.setenv("LONG_TERM_MEMORY_BACKEND", backend)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for mode in ("keyword", "hybrid"):
        result = runner.invoke(app, ["ltm", "search", "x", "-u", "alice", "-a", APP, "--mode", mode])
        assert result.exit_code == 4, result.stderr
        assert f"the {backend} backend has no {mode} search" in result.stderr


# --- save embeds across sessions ------------------------------------------------------------


def test_save_embeds_many_sessions_in_shared_batches(runner: CliRunner, tmp_path: Path) -> None:
    from veadk_mem.ltm.replay import aiter_items, replay

    calls: list[int] = []

    class Counting(HashEmbedder):
        def embed_batch(self, texts: list[str]) -> Any:
            calls.append(len(texts))
            return super().embed_batch(texts)

    from veadk_mem.events import Event, Session

    sessions = [
        Session(
            id=f"s{n}",
            app_name=APP,
            user_id="alice",
            events=[
                Event(id=f"e{n}-{i}", author="user", content={"role": "user", "parts": [{"text": f"fact {n}.{i}"}]})
                for i in range(2)
            ],
        )
        for n in range(100)
    ]
    ltm = LongTermMemory.from_settings(load_settings().settings, embedder=Counting(384, 64))
    policy = ltm.resolve_policy("all")
    summary = asyncio.run(replay(ltm, aiter_items((s.id, s) for s in sessions), policy))
    assert summary.totals()["saved"] == 200 and not summary.failed
    assert calls == [64, 64, 64, 8]  # 200 memories of 100 sessions in four batches, not 100 calls
    again = asyncio.run(replay(ltm, aiter_items((s.id, s) for s in sessions), policy))
    assert again.totals()["duplicates"] == 200 and len(calls) == 4  # nothing new: nothing embedded
    found = asyncio.run(ltm.search_memory(app_name=APP, user_id="alice", query="fact 42.1", mode="keyword"))
    assert found[0]["content"]["parts"][0]["text"] == "fact 42.1"


def test_a_dropped_keyword_index_is_rebuilt_on_open(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(path)}
    runner.invoke(app, ["ltm", "search", "x", "-u", "alice", "-a", APP], env=env)  # creates nothing
    from veadk_mem.ltm.backends import local

    settings = load_settings(environ={"MODEL_EMBEDDING_PROVIDER": "hash", **env}).settings
    backend = LongTermMemory.from_settings(settings).backend_for(APP)
    asyncio.run(backend.save("alice", [MemoryRecord(text=content("Lena lives in Porto"), user_id="alice")]))
    local._CONNECTIONS.pop(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE memory_terms")
    result = runner.invoke(
        app, ["--json", "ltm", "search", "Porto", "-u", "alice", "-a", APP, "-m", "keyword"], env=env
    )
    assert result.exit_code == 0, result.stderr
    assert texts(json.loads(result.stdout)) == ["Lena lives in Porto"]


def test_hybrid_leaves_out_a_memory_saved_after_the_vectors_were_read() -> None:
    """Another vmem saving between this one's matrix read and its keyword query: no crash, no wrong cosine."""
    seed()
    ltm = LongTermMemory.from_settings(load_settings().settings)
    backend: Any = ltm.backend_for(APP)
    vector = backend.embedder.embed_one("Zanzibar")
    backend.matrix("alice")  # read and cached at this generation
    backend.conn.execute(
        "INSERT INTO memories (id, index_name, user_id, text, content_hash, model, dim, created_at, vector) "
        "SELECT 'late', index_name, user_id, ?, 'h-late', model, dim, created_at, vector FROM memories LIMIT 1",
        (content("Zanzibar trip"),),
    )
    rowid = backend.conn.execute("SELECT rowid FROM memories WHERE id = 'late'").fetchone()[0]
    backend.conn.execute("INSERT INTO memory_terms (rowid, terms) VALUES (?, 'zanzibar trip')", (rowid,))
    found = backend.search_hybrid("alice", "Zanzibar", vector, 3)
    assert "late" not in [r.id for r in found] and len(found) == 3
