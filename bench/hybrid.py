"""Keyword, vector and hybrid search side by side on generated long conversations.

Builds multi-session conversations in English and Chinese from templates (people,
places, dates, preferences, appointments...), with filler turns that mention the same
names and places, so a question's answer turn is known but not trivially found. Saves
them with `vmem ltm save --policy all` (one process, timed), then for each question asks
the local store in each mode and counts recall@5 / recall@10 (an answer turn in the top
k). Then: in-process search p50 on 6,000 memories of one user (vectors copied, not
re-embedded), and `vmem ltm search --queries` over every question, whole process.

Run: /work/main/.venv/bin/python bench/hybrid.py [--users 10] [--sessions 30] [--turns 20]
     [--embedder local|hash] [--json]
Targets: hybrid recall@5 above both others; p50 < 30 ms at 6,000 memories;
`ltm search --queries` of 1,000 queries < 15 s on the offline model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

APP = "hybrid_bench"

# --- the conversations -------------------------------------------------------------------


def _w(text: str, sep: str | None = None) -> list[str]:
    """A vocabulary written as one string."""
    return text.split(sep)


EN = {
    "names": _w("Lena Marco Priya Tom Aisha Jonas Mia Diego Hana Omar Ruth Felix Chloe Ivan Nora Sam Elena Kofi"),
    "rels": _w("sister brother cousin aunt uncle neighbour colleague friend"),
    "cities": _w("Porto Lisbon Oslo Kyoto Denver Nairobi Dublin Tallinn Quito Hobart Bergen Lyon Austin Malmo"),
    "months": _w("January February March April May June July August September October November December"),
    "days": _w("Monday Tuesday Wednesday Thursday Friday Saturday Sunday"),
    "jobs": _w("nurse architect pilot baker lawyer chemist teacher plumber translator paramedic"),
    "companies": _w("Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne Tyrell Cyberdyne"),
    "animals": _w("beagle parrot tortoise kitten ferret rabbit hamster greyhound"),
    "pets": _w("Pickles Biscuit Nimbus Waffles Pepper Juniper Mochi Ziggy"),
    "foods": _w("cilantro olives anchovies mushrooms blue cheese licorice okra tofu"),
    "hobbies": _w("pottery bouldering watercolour painting salsa dancing chess beekeeping archery knitting"),
    "cars": _w("Subaru Outback|Volvo wagon|Honda Civic|Tesla Model 3|Ford Ranger|Mini Cooper", "|"),
    "colors": _w("blue red silver green black white"),
    "books": _w("Dune|Middlemarch|The Dispossessed|Beloved|Piranesi|Kindred|Stoner", "|"),
    "sports": _w("tennis badminton squash volleyball table tennis football"),
    "allergens": _w("peanuts shellfish penicillin pollen latex sesame"),
    "gifts": _w("a fountain pen|a telescope|a cashmere scarf|a bread maker|a vinyl record player", "|"),
    "unis": _w("McGill|Edinburgh|Leiden|Uppsala|Monash|Bologna", "|"),
    "doctors": _w("Dr. Reyes|Dr. Okafor|Dr. Lindqvist|Dr. Haddad|Dr. Moreau", "|"),
    "appts": _w("dentist eye exam physiotherapy dermatology vaccination"),
}
ZH = {
    "names": _w("王芳 李娜 张伟 刘洋 陈静 杨帆 赵磊 黄敏 周婷 吴昊 孙悦 马超 朱琳 胡军 郭蕾"),
    "rels": _w("姐姐 哥哥 表妹 阿姨 舅舅 邻居 同事 朋友"),
    "cities": _w("杭州 成都 西安 厦门 青岛 大理 苏州 重庆 长沙 昆明 桂林 哈尔滨 拉萨 珠海"),
    "months": _w("一月 二月 三月 四月 五月 六月 七月 八月 九月 十月 十一月 十二月"),
    "days": _w("周一 周二 周三 周四 周五 周六 周日"),
    "jobs": _w("护士 建筑师 飞行员 面包师 律师 化学家 老师 水管工 翻译 医生"),
    "companies": _w("华为 腾讯 阿里 字节 小米 美团 京东 百度 网易 滴滴"),
    "animals": _w("柯基 鹦鹉 乌龟 小猫 仓鼠 兔子 金毛 布偶猫"),
    "pets": _w("豆豆 团子 可乐 布丁 年糕 旺财 咪咪 雪球"),
    "foods": _w("香菜 榴莲 臭豆腐 苦瓜 芹菜 羊肉 生蚝 折耳根"),
    "hobbies": _w("陶艺 攀岩 水彩画 书法 围棋 养蜂 射箭 古筝"),
    "cars": _w("比亚迪汉 特斯拉 大众帕萨特 丰田凯美瑞 理想汽车 蔚来"),
    "colors": _w("蓝色 红色 银色 绿色 黑色 白色"),
    "books": _w("红楼梦 三体 活着 围城 平凡的世界 白鹿原 边城"),
    "sports": _w("网球 羽毛球 乒乓球 排球 篮球 游泳"),
    "allergens": _w("花生 海鲜 青霉素 花粉 芒果 鸡蛋"),
    "gifts": _w("一支钢笔 一台望远镜 一条围巾 一台面包机 一台黑胶唱机"),
    "unis": _w("浙江大学 复旦大学 武汉大学 南京大学 中山大学 四川大学"),
    "doctors": _w("刘医生 陈医生 王医生 何医生 林医生"),
    "appts": _w("牙科 眼科 理疗 皮肤科 体检"),
}

# (statement, questions): {slot} from the vocabulary; each fact gets one of its questions.
FACTS_EN = [
    (
        "My {rel} {name} just moved to {city} for a new job.",
        ["Where does my {rel} live now?", "Which city did {name} move to?"],
    ),
    (
        "I booked my {appt} appointment with {doctor} for {month} {n}.",
        ["When is my {appt} appointment?", "What date am I seeing {doctor}?"],
    ),
    (
        "We adopted a {animal} and we named it {pet}.",
        ["What is the name of our {animal}?", "What kind of animal is {pet}?"],
    ),
    (
        "{name} works as a {job} at {company} these days.",
        ["What does {name} do for a living?", "Who do I know that works at {company}?"],
    ),
    ("Honestly I can't stand {food}, please never put it in my food.", ["Which food do I dislike?"]),
    ("I've started learning {hobby} on weekends.", ["What new hobby did I pick up?"]),
    (
        "We're planning a trip to {city} in {month}.",
        ["Where are we travelling in {month}?", "When is the trip to {city}?"],
    ),
    ("I finally bought a {color} {car} last week.", ["What car did I buy?", "What colour is my new {car}?"]),
    ("{name}'s birthday is on {month} {n}.", ["When is {name}'s birthday?"]),
    ("I'm reading {book} right now and I love it.", ["Which book am I reading at the moment?"]),
    ("I gave {name} {gift} for our anniversary.", ["What present did I give {name}?"]),
    ("{name} is allergic to {allergen}, remember that.", ["What is {name} allergic to?"]),
    (
        "{name} and I play {sport} every {day} evening.",
        ["Which day do I play {sport}?", "What sport do I play with {name}?"],
    ),
    ("{name} graduated from {uni} in {year}.", ["Where did {name} go to university?", "When did {name} graduate?"]),
]
FACTS_ZH = [
    ("我{rel}{name}为了新工作刚搬到了{city}。", ["我{rel}现在住在哪里？", "{name}搬去了哪个城市？"]),
    ("我约了{doctor}{month}{n}号看{appt}。", ["我的{appt}预约是什么时候？", "我哪天去见{doctor}？"]),
    ("我们领养了一只{animal}，给它起名叫{pet}。", ["我们的{animal}叫什么名字？", "{pet}是什么动物？"]),
    ("{name}现在在{company}当{job}。", ["{name}是做什么工作的？", "我认识的谁在{company}上班？"]),
    ("说实话我真受不了{food}，千万别放在我的菜里。", ["我不喜欢吃什么？"]),
    ("我周末开始学{hobby}了。", ["我最近培养了什么新爱好？"]),
    ("我们打算{month}去{city}旅行。", ["我们{month}去哪里旅行？", "去{city}的旅行是什么时候？"]),
    ("我上周终于买了一辆{color}的{car}。", ["我买了什么车？", "我的新{car}是什么颜色？"]),
    ("{name}的生日是{month}{n}号。", ["{name}的生日是哪天？"]),
    ("我最近在读《{book}》，特别喜欢。", ["我现在在读哪本书？"]),
    ("纪念日我送了{name}{gift}。", ["我送了{name}什么礼物？"]),
    ("{name}对{allergen}过敏，记住这一点。", ["{name}对什么过敏？"]),
    ("我和{name}每个{day}晚上打{sport}。", ["我哪天打{sport}？", "我和{name}一起做什么运动？"]),
    ("{name}{year}年毕业于{uni}。", ["{name}在哪所大学读书？", "{name}哪一年毕业的？"]),
]
FILLER_EN = [
    "The weather in {city} was {color} skies all day, believe it or not.",
    "{name} sent me a funny video about a {animal}.",
    "I need more coffee before the {day} meeting.",
    "Did you see the {sport} match last night?",
    "{name} keeps talking about {city} again.",
    "Traffic was terrible on the way back from {company}.",
    "I might cook something with {food} for the party, or maybe not.",
    "My {rel} said hi, by the way.",
    "Remind me to water the plants on {day}.",
    "{name} recommended a podcast about {hobby}.",
    "The {appt} clinic near {city} station closed down.",
    "We watched a documentary about {city} and {month} festivals.",
]
FILLER_ZH = [
    "{city}今天一整天都是{color}的天空，真难得。",
    "{name}给我发了一个关于{animal}的搞笑视频。",
    "{day}开会之前我得再来杯咖啡。",
    "昨晚的{sport}比赛你看了吗？",
    "{name}又在聊{city}了。",
    "从{company}回来的路上堵得厉害。",
    "聚会上我也许会做点{food}，也许不会。",
    "对了，我{rel}向你问好。",
    "提醒我{day}给花浇水。",
    "{name}推荐了一个关于{hobby}的播客。",
    "{city}车站旁边那家{appt}诊所关门了。",
    "我们看了一部关于{city}{month}节日的纪录片。",
]


@dataclass
class Question:
    user: str
    lang: str
    query: str
    answer: str
    kind: str  # "entity" (names a person/place/thing) or "paraphrase"


@dataclass
class Corpus:
    sessions: list[dict[str, Any]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    turns: int = 0


# vocabulary -> slot name; the rest drop their s
SLOT = {"companies": "company", "cities": "city", "hobbies": "hobby", "unis": "uni"}


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def _slots(vocab: dict[str, list[str]], rnd: random.Random) -> dict[str, str]:
    one = {SLOT.get(key, key[:-1]): rnd.choice(values) for key, values in vocab.items()}
    return {**one, "n": str(rnd.randint(1, 28)), "year": str(rnd.randint(1995, 2024))}


def build(users: int, sessions: int, turns: int, facts: int, seed: int = 7) -> Corpus:
    """Half the users talk English, half Chinese; each has `facts` facts among its turns."""
    rnd = random.Random(seed)
    corpus = Corpus()
    clock = 1_760_000_000.0
    for u in range(users):
        lang = "en" if u % 2 == 0 else "zh"
        vocab, fact_t, filler_t = (EN, FACTS_EN, FILLER_EN) if lang == "en" else (ZH, FACTS_ZH, FILLER_ZH)
        user = f"{lang}-user-{u}"
        total = sessions * turns
        fact_at = set(rnd.sample(range(total), min(facts, total)))
        seen: set[str] = set()
        texts: list[str] = []
        for position in range(total):
            if position in fact_at:
                while True:
                    statement, questions = rnd.choice(fact_t)
                    slots = _slots(vocab, rnd)
                    text = _fill(statement, slots)
                    if text not in seen:
                        break
                asked = rnd.choice(questions)
                kind = (
                    "entity"
                    if any(f"{{{s}}}" in asked for s in ("name", "city", "company", "pet", "doctor", "car"))
                    else "paraphrase"
                )
                corpus.questions.append(Question(user, lang, _fill(asked, slots), text, kind))
            else:
                text = _fill(rnd.choice(filler_t), _slots(vocab, rnd))
            seen.add(text)
            texts.append(text)
        for s in range(sessions):
            events = []
            for t, text in enumerate(texts[s * turns : (s + 1) * turns]):
                clock += 30
                events.append(
                    {
                        "id": f"{user}-s{s}-e{t}",
                        "invocationId": f"{user}-s{s}-i{t}",
                        "author": "user",
                        "timestamp": clock,
                        "content": {"role": "user", "parts": [{"text": text}]},
                    }
                )
            corpus.sessions.append({"id": f"{user}-s{s}", "appName": APP, "userId": user, "events": events})
            corpus.turns += len(events)
    return corpus


# --- measuring ------------------------------------------------------------------------------


def vmem(args: list[str], env: dict[str, str], stdin: str | None = None) -> tuple[float, str]:
    """Run `vmem` as a user would (a fresh process); (seconds, stdout)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "veadk_mem", *args], env=env, input=stdin, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"vmem {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done.stdout


def _text(entry: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in entry["content"]["parts"])


async def recall(env: dict[str, str], questions: list[Question]) -> dict[str, dict[str, float]]:
    """recall@5 and @10 of each mode over the questions, in-process through the facade."""
    from veadk_mem.config import load_settings
    from veadk_mem.ltm.facade import LongTermMemory

    ltm = LongTermMemory.from_settings(load_settings(environ=env).settings, app_name=APP)
    out: dict[str, dict[str, float]] = {}
    for mode in ("vector", "keyword", "hybrid"):
        hits: dict[str, list[int]] = {}
        for q in questions:
            entries = await ltm.search_memory(app_name=APP, user_id=q.user, query=q.query, top_k=10, mode=mode)
            found = [_text(e) for e in entries]
            rank = found.index(q.answer) + 1 if q.answer in found else 99
            for group in ("all", q.lang, q.kind):
                hits.setdefault(group, []).append(rank)
        out[mode] = {
            f"{group}@{k}": sum(r <= k for r in ranks) / len(ranks) for group, ranks in hits.items() for k in (5, 10)
        }
    await ltm.close()
    return out


async def latency(env: dict[str, str], corpus: Corpus, size: int) -> dict[str, float]:
    """In-process search p50/p95 (ms) per mode on `size` memories of one user (vectors copied from the corpus)."""
    from veadk_mem.config import load_settings
    from veadk_mem.ltm.base import QueryVectors, content_hash
    from veadk_mem.ltm.facade import LongTermMemory

    ltm = LongTermMemory.from_settings(load_settings(environ=env).settings, app_name=APP)
    source = ltm.backend_for(APP)
    big = ltm.backend_for(index="latency_bench")
    records = []
    users = sorted({q.user for q in corpus.questions})
    while len(records) < size:  # every user's memories, again until there are enough
        for user in users:
            async for page in source.iter_memories(user, vectors=True):
                for record in page:
                    # a copy is a new memory: its own hash (the text stays a real memory's text)
                    record.content_hash = content_hash(f"{record.text}\0{len(records)}")
                    record.user_id, record.id = "big", ""
                    records.append(record)
    await big.save("big", records[:size])
    count = len(await big.list_memories("big"))
    queries = [q.query for q in corpus.questions][:300]
    out: dict[str, float] = {"memories": float(count)}
    for mode in ("vector", "keyword", "hybrid"):
        await ltm.search_memory(app_name="latency_bench", user_id="big", query=queries[0], mode=mode)  # warm
        for embedded in (False, True):
            big.__dict__["_query_vectors"] = QueryVectors()  # forget what a previous round embedded ahead
            if embedded:  # the search alone: its query embedded ahead, as `--queries` does
                big.queries.prepare(big.embedder, queries)
            times = []
            for query in queries:
                started = time.perf_counter()
                await ltm.search_memory(app_name="latency_bench", user_id="big", query=query, mode=mode)
                times.append((time.perf_counter() - started) * 1000)
            label = f"{mode}{' (query embedded ahead)' if embedded else ''}"
            out[f"{label} p50"] = statistics.median(times)
            if mode == "keyword":
                break  # no query vector
    await ltm.close()
    return out


def migration(corpus: Corpus, rows: int, folder: Path) -> float:
    """Seconds to build the keyword index of a store written before it existed (`rows` memories)."""
    import sqlite3

    from veadk_mem.ltm.backends import local

    path = folder / "old-store.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(local.SCHEMA)  # the tables of an older vmem: no memory_terms
    texts = [e["content"]["parts"][0]["text"] for s in corpus.sessions for e in s["events"]]
    blob = bytes(4 * 384)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO memories (id, index_name, user_id, text, content_hash, model, dim, created_at, vector) "
        "VALUES (?, 'old', 'u', ?, ?, 'm', 384, 0, ?)",
        (
            (f"m{n}", json.dumps({"role": "user", "parts": [{"text": texts[n % len(texts)]}]}), f"h{n}", blob)
            for n in range(rows)
        ),
    )
    conn.execute("COMMIT")
    conn.close()
    started = time.perf_counter()
    local.connect(str(path))  # the first open of the file by this vmem builds the index
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--facts", type=int, default=100, help="facts (and questions) per user")
    parser.add_argument("--latency-memories", type=int, default=6000)
    parser.add_argument("--migration-rows", type=int, default=100_000, help="older store to index on open (0: skip)")
    parser.add_argument("--embedder", default="local", help="local (the offline MiniLM) or hash")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--keep", metavar="DIR", help="build the store in DIR and keep it; run again to skip the save (default: temp)"
    )
    args = parser.parse_args()
    corpus = build(args.users, args.sessions, args.turns, args.facts)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "MODEL_EMBEDDING_PROVIDER": args.embedder,
            "LONG_TERM_MEMORY_LOCAL_PATH": str(folder / "ltm.db"),
        }
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
        sessions_file = folder / "sessions.jsonl"
        sessions_file.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in corpus.sessions), "utf-8")
        save_s = 0.0
        if not (args.keep and (folder / "ltm.db").exists()):  # --keep DIR a second time: measure the saved store
            save_s, _ = vmem(["--quiet", "ltm", "save", str(sessions_file), "--policy", "all"], env)
        queries_file = folder / "queries.jsonl"
        queries_file.write_text(
            "".join(
                json.dumps({"query": q.query, "user": q.user}, ensure_ascii=False) + "\n" for q in corpus.questions
            ),
            "utf-8",
        )
        batch_s, batch_out = vmem(["ltm", "search", "--queries", str(queries_file), "-a", APP, "-k", "10"], env)
        batch_lines = [json.loads(line) for line in batch_out.splitlines()]
        batch_at5 = sum(
            q.answer in [_text(e) for e in line["results"][:5]]
            for q, line in zip(corpus.questions, batch_lines, strict=True)
        ) / len(corpus.questions)
        scores = asyncio.run(recall(env, corpus.questions))
        timing = asyncio.run(latency(env, corpus, args.latency_memories))
        migrate_s = migration(corpus, args.migration_rows, folder) if args.migration_rows else 0.0
    report = {
        "load average (1 min, at the end)": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "embedder": args.embedder,
        "users": args.users,
        "sessions": len(corpus.sessions),
        "turns": corpus.turns,
        "questions": len(corpus.questions),
        "save seconds": round(save_s, 2),
        "batch search seconds": round(batch_s, 2),
        "batch search hybrid recall@5": round(batch_at5, 3),
        "recall": {mode: {k: round(v, 3) for k, v in row.items()} for mode, row in scores.items()},
        "latency ms": {k: round(v, 2) for k, v in timing.items()},
        f"keyword index of an older store, {args.migration_rows} memories, seconds": round(migrate_s, 2),
    }
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    print(
        f"{report['sessions']} sessions, {report['turns']} turns of {args.users} users (half English, half Chinese), "
        f"{report['questions']} questions; embedder {args.embedder}"
    )
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    print(f"ltm save --policy all: {save_s:.1f} s (whole process); {load}")
    groups = list(next(iter(scores.values())))
    print(f"{'mode':<8}" + "".join(f"{g:>14}" for g in groups))
    for mode, row in scores.items():
        print(f"{mode:<8}" + "".join(f"{row[g]:>14.3f}" for g in groups))
    n = len(corpus.questions)
    print(f"ltm search --queries ({n} queries, hybrid, whole process): {batch_s:.1f} s; recall@5 {batch_at5:.3f}")
    print(
        f"in-process search on {int(timing['memories'])} memories of one user: "
        + "; ".join(f"{k} {v:.1f} ms" for k, v in timing.items() if k != "memories")
    )
    if args.migration_rows:
        print(
            f"keyword index built on first open of an older store of {args.migration_rows} memories: {migrate_s:.1f} s"
        )


if __name__ == "__main__":
    main()
