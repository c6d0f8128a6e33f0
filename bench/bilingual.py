"""Retrieval in English and Chinese, and across the two, for each offline model and search mode.

One user's 80 memories (bench/bilingual_set.py: 40 English facts, 40 Chinese), saved with
`vmem ltm save` into a fresh local store per model; each set of questions then runs through
`vmem ltm search --queries` in-process. Three sets of questions: paraphrases in the fact's language
(English, Chinese) and in the other language (cross-lingual). A hit at k is the fact's text
among the first k results. Per model, also the CPU seconds per embedded memory, the load
time and the peak RSS of loading it (each measured in a child process of its own).

Run: .venv/bin/python bench/bilingual.py [--models minilm,e5] [--json]
Targets (issue 46): default mode recall@1 >= 0.85 in Chinese and in English, >= 0.5
cross-lingual.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bilingual_set import CHINESE, ENGLISH

APP, USER = "bench_app", "bench_user"
MODELS = {"minilm": "", "e5": "multilingual-e5-small"}
MODES = ("vector", "keyword", "hybrid")


def session_file(folder: Path) -> Path:
    """One ADK session per fact, in a JSONL file."""
    path = folder / "memories.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i, (fact, _, _) in enumerate(ENGLISH + CHINESE):
            event = {
                "id": f"e{i}",
                "invocationId": f"i{i}",
                "author": "user",
                "timestamp": 1764403200.0 + i,
                "content": {"role": "user", "parts": [{"text": fact}]},
            }
            handle.write(json.dumps({"id": f"s{i}", "appName": APP, "userId": USER, "events": [event]}) + "\n")
    return path


def question_sets() -> dict[str, list[tuple[str, str]]]:
    """(fact, question) per set."""
    return {
        "english": [(f, q) for f, q, _ in ENGLISH],
        "chinese": [(f, q) for f, q, _ in CHINESE],
        "cross-lingual": [(f, x) for f, _, x in ENGLISH + CHINESE],
    }


def measure(model: str, folder: Path) -> list[dict[str, object]]:
    from typer.testing import CliRunner

    from veadk_mem.cli.app import app

    env = {
        "MODEL_EMBEDDING_PROVIDER": "local",
        "MODEL_EMBEDDING_LOCAL_MODEL": MODELS[model],
        "LONG_TERM_MEMORY_LOCAL_PATH": str(folder / f"{model}.db"),
    }
    runner = CliRunner()
    saved = runner.invoke(app, ["--quiet", "ltm", "save", str(session_file(folder))], env=env)
    if saved.exit_code != 0:
        raise SystemExit(f"vmem ltm save failed ({model}): {saved.stderr}")
    rows = []
    for mode in MODES:
        for name, pairs in question_sets().items():
            # One `--queries` run per set: the model loads once, not once a question.
            queries = folder / f"{name}.jsonl"
            queries.write_text(
                "".join(json.dumps({"query": q, "user": USER, "app": APP, "top_k": 5}) + "\n" for _, q in pairs),
                encoding="utf-8",
            )
            result = runner.invoke(app, ["ltm", "search", "--queries", str(queries), "--mode", mode], env=env)
            if result.exit_code != 0:
                raise SystemExit(f"vmem ltm search failed ({model}, {mode}): {result.stderr}")
            lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
            at1 = at5 = 0
            for (fact, _), line in zip(pairs, lines, strict=True):
                texts = [e["content"]["parts"][0]["text"] for e in line["results"]]
                at1 += texts[:1] == [fact]
                at5 += fact in texts
            n = len(pairs)
            rows.append({"model": model, "mode": mode, "set": name, "recall@1": at1 / n, "recall@5": at5 / n, "n": n})
    return rows


COST = """
import json, sys, time
from veadk_mem.config import EmbeddingSettings
from veadk_mem.embedding import create_embedder
sys.path.insert(0, {bench!r})
from bilingual_set import CHINESE, ENGLISH
t0 = time.perf_counter(); c0 = time.process_time()
e = create_embedder(EmbeddingSettings(provider="local", local_model={local!r}))
load_wall, load_cpu = time.perf_counter() - t0, time.process_time() - c0
def hwm():  # VmHWM: ru_maxrss would carry the parent's peak across exec
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
rss_load = hwm()
texts = [f for f, _, _ in ENGLISH + CHINESE] * 5
c0 = time.process_time(); e.embed(texts); cpu = (time.process_time() - c0) / len(texts)
print(json.dumps({{"load_s": load_wall, "load_cpu_s": load_cpu, "rss_loaded_mb": rss_load,
    "rss_peak_mb": hwm(), "cpu_ms_per_text": cpu * 1000}}))
"""


def cost(model: str) -> dict[str, float]:
    code = COST.format(bench=str(Path(__file__).resolve().parent), local=MODELS[model])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,e5")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    rows, costs = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            folder = Path(tmp) / model
            folder.mkdir()
            rows += measure(model, folder)
            costs[model] = cost(model)
    if args.json:
        json.dump({"recall": rows, "cost": costs}, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return
    print(f"{len(ENGLISH)} English + {len(CHINESE)} Chinese memories of one user, via `vmem ltm search`\n")
    print("| model | mode | English @1 | @5 | Chinese @1 | @5 | cross-lingual @1 | @5 |")
    print("|---|---|---|---|---|---|---|---|")
    for model in models:
        for mode in MODES:
            got = {r["set"]: r for r in rows if r["model"] == model and r["mode"] == mode}
            cells = [
                f"{got[s]['recall@1']:.2f} | {got[s]['recall@5']:.2f}" for s in ("english", "chinese", "cross-lingual")
            ]
            print(f"| {model} | {mode} | " + " | ".join(cells) + " |")
    print("\n| model | load (s) | load CPU (s) | RSS loaded (MB) | RSS after 400 texts (MB) | CPU per text (ms) |")
    print("|---|---|---|---|---|---|")
    for model, c in costs.items():
        print(
            f"| {model} | {c['load_s']:.2f} | {c['load_cpu_s']:.2f} | {c['rss_loaded_mb']:.0f} | "
            f"{c['rss_peak_mb']:.0f} | {c['cpu_ms_per_text']:.1f} |"
        )


if __name__ == "__main__":
    main()
