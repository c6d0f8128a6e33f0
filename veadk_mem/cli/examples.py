"""Two or three real examples for every command, shown at the end of its --help.

One table for the whole app, attached by wiring.py to the Click tree Typer builds, so a new
command is caught by tests/test_docs.py until it has its examples here. Each example is a
comment saying what it does and a command line short enough for a 60-column terminal.
"""

from __future__ import annotations

EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "": [
        ("sessions of an app, newest first", "vmem session list --app my_agent"),
        ("what VeADK would save from a session, and why", "vmem policy test session.json"),
        ("search a user's long-term memory", 'vmem ltm search "allergies" -u user-42'),
    ],
    "doctor": [
        ("check every configured store", "vmem doctor"),
        ("check one session database, for a script", "vmem doctor --db-url sessions.db --json"),
    ],
    "forget": [
        ("what would go, from where", "vmem forget user-42 --dry-run"),
        ("remove it all without asking", "vmem forget user-42 --yes"),
        ("one session and its memories", "vmem forget user-42 --session S1 -y"),
    ],
    "history": [
        ("what vmem changed in the last day", "vmem history --since 1d"),
        ("one user's session deletes", "vmem history -u alice --command 'session delete'"),
        ("one entry whole, for a request", "vmem history show 12 --json"),
    ],
    "browse": [
        ("look around the configured session database", "vmem browse"),
        ("one user's sessions, changing nothing", "vmem browse -u user-42 --read-only"),
    ],
    "completion": [
        ("try it in this shell", 'eval "$(vmem completion bash)"'),
        ("install it for zsh", "vmem completion zsh --install"),
    ],
    "session": [
        ("sessions of an app, newest first", "vmem session list --app my_agent"),
        ("one session's state and timeline", "vmem session get my_agent user-42 SESSION_ID"),
        ("a nightly backup", "vmem session export --app my_agent -o backup.jsonl"),
    ],
    "session list": [
        ("an app's sessions updated in the last week", "vmem session list --app my_agent --since 7d"),
        ("which sessions ADK compacted", "vmem session list --app my_agent --compactions"),
        ("every session, as JSON", "vmem session list -n 0 --json"),
    ],
    "session get": [
        ("merged state and event timeline", "vmem session get my_agent user-42 SESSION_ID"),
        ("by the start of its id, in any app", "vmem session get 3f9a2c"),
        ("the ADK session JSON", "vmem session get my_agent user-42 SESSION_ID --json"),
    ],
    "session delete": [
        ("what a cleanup would remove", "vmem session delete --older-than 30d --dry-run"),
        ("a session and its memories", "vmem session delete APP U ID --with-memories"),
        ("one session by id", "vmem session delete my_agent user-42 SESSION_ID"),
    ],
    "session prune": [
        ("what the [retention] rules would remove", "vmem session prune --dry-run"),
        ("apply them from cron", "vmem session prune --yes --json"),
        ("one app only", "vmem session prune --app support_bot --yes"),
    ],
    "session index": [
        ("which indexes serve ADK's queries", "vmem session index"),
        ("the statements --create would run", "vmem session index --create --dry-run"),
        ("add the missing ones", "vmem session index --create"),
    ],
    "session vacuum": [
        ("free space, and what would run", "vmem session vacuum --dry-run"),
        ("after a prune, as JSON", "vmem session vacuum --json"),
        ("MySQL/MariaDB: rebuild the tables", "vmem session vacuum --yes"),
    ],
    "session export": [
        ("back up an app", "vmem session export --app my_agent -o backup.jsonl"),
        ("one user's last week, gzip, whole or none", "vmem session export -u user-42 --since 7d -o week.jsonl.gz"),
    ],
    "session import": [
        ("check a backup first", "vmem session import backup.jsonl --dry-run"),
        ("migrate into PostgreSQL", "vmem session import b.jsonl --db-url postgresql://db/a"),
        ("from stdin", "gunzip -c b.jsonl.gz | vmem session import -"),
    ],
    "session stats": [
        ("sizes, growth and token spend", "vmem session stats"),
        ("an app per day, and its 5 largest", "vmem session stats --app support_bot --by day --top 5"),
        ("sessions by age, for a spreadsheet", "vmem session stats --by age --csv > ages.csv"),
    ],
    "session watch": [
        ("follow a user's sessions as events arrive", "vmem session watch support_bot alice"),
        ("one session by the start of its id, only new events", "vmem session watch 3f9a2c --events 0"),
        ("the text, as it comes", "vmem session watch support_bot alice --json | jq .content"),
    ],
    "session upgrade": [
        ("what the upgrade would do", "vmem session upgrade --dry-run"),
        ("upgrade, keeping a verified backup", "vmem session upgrade --backup before.jsonl"),
    ],
    "ltm": [
        ("save sessions into long-term memory", "vmem ltm save sessions/"),
        ("search a user's memories", 'vmem ltm search "allergies" -u user-42'),
        ("back up every user's memories", "vmem ltm export --all-users -o ltm.jsonl"),
    ],
    "ltm sync": [
        ("catch up once, from cron", "vmem ltm sync --app my_agent --once"),
        ("run as a service, JSON lines for logs", "vmem ltm sync --follow --json"),
        ("the cursor, the lag and counts", "vmem ltm sync --app my_agent --status"),
    ],
    "ltm save": [
        ("what would be saved, without saving", "vmem ltm save sessions/ --dry-run"),
        ("save every session of an app", "vmem ltm save --from-store --app my_agent"),
        ("one session from the database", "vmem ltm save --from-store my_agent user-42 SESSION_ID"),
    ],
    "ltm search": [
        ("by meaning and keywords (hybrid, local backend)", 'vmem ltm search "where does my sister live" -u alice'),
        ("by keywords only", "vmem ltm search 北京 -u alice --mode keyword"),
        ("many queries, one JSON line of results each", "vmem ltm search --queries q.jsonl -u alice > r.jsonl"),
    ],
    "ltm list": [
        ("a user's memories, newest first", "vmem ltm list -u user-42"),
        ("the last ten, as JSON lines", "vmem ltm list -u user-42 -n 10 --jsonl"),
    ],
    "ltm profile": [
        ("the viking backend's profile of a user", "vmem ltm profile user-42 --app my_agent"),
        ("as JSON", "vmem ltm profile user-42 --json"),
    ],
    "ltm show": [
        ("a memory, its session and why it was kept", "vmem ltm show MEMORY_ID -u user-42"),
        ("as JSON, for a data-protection request", "vmem ltm show MEMORY_ID -u user-42 --json"),
    ],
    "ltm delete": [
        ("what deleting a session's memories would do", "vmem ltm delete -u user-42 -s SESSION_ID --dry-run"),
        ("one memory by id", "vmem ltm delete -u user-42 --id MEMORY_ID"),
        ("all of a user's memories", "vmem ltm delete -u user-42 --all --yes"),
    ],
    "ltm edit": [
        ("see the change first", 'vmem ltm edit MEMORY_ID -u user-42 --text "..." --dry-run'),
        ("correct a wrong memory", 'vmem ltm edit MEMORY_ID -u user-42 --text "likes tea"'),
    ],
    "ltm export": [
        ("every user's memories", "vmem ltm export --all-users -o ltm.jsonl"),
        ("one user's, with vectors", "vmem ltm export -u user-42 --vectors -o u42.jsonl"),
    ],
    "ltm import": [
        ("count what would be saved", "vmem ltm import ltm.jsonl --dry-run"),
        ("load it into redis", "vmem ltm import ltm.jsonl --backend redis"),
    ],
    "ltm copy": [
        ("what a move would copy", "vmem ltm copy --from-backend local \\\n    --to-backend redis --dry-run"),
        ("copy one user", "vmem ltm copy --from-backend local \\\n    --to-backend redis -u user-42"),
    ],
    "ltm reembed": [
        ("what moving to the multilingual model would do", "vmem ltm reembed --model multilingual-e5-small --dry-run"),
        ("move one app's index", "vmem ltm reembed -a support --model multilingual-e5-small"),
    ],
    "policy": [
        ("what VeADK would save from a session", "vmem policy test session.json"),
        ("the configured policy, field by field", "vmem policy show"),
    ],
    "policy test": [
        ("the default policy on a session file", "vmem policy test session.json"),
        ("keep everything", "vmem policy test session.json --policy all"),
        ("a session in the database", "vmem policy test --from-store my_agent user-42 SESSION_ID"),
    ],
    "policy show": [
        ("the configured policy", "vmem policy show"),
        ("a preset with the assistant role", "vmem policy show default --include-assistant"),
    ],
    "retention": [
        ("what each rule removes now", "vmem retention show"),
        ("one app's rule and its effect, as JSON", "vmem retention show -a support_bot --json"),
    ],
    "retention show": [
        ("per app, what each rule removes now", "vmem retention show"),
        ("one app, as JSON", "vmem retention show --app support_bot --json"),
    ],
    "config": [
        ("every setting and where it came from", "vmem config show"),
        ("write a starter file", "vmem config init"),
    ],
    "config show": [
        ("every setting and its source", "vmem config show"),
        ("as JSON, for a script", "vmem config show --json"),
    ],
    "config init": [
        ("a starter file at the XDG path", "vmem config init"),
        ("here, replacing an old one", "vmem config init ./vmem.toml --force"),
    ],
    "config path": [
        ("the file in use", "vmem config path"),
        ("and every place searched", "vmem config path --json"),
    ],
}


def epilog(path: str) -> str | None:
    r"""The help's closing examples for the command at `path` ("session list"), or None.

    Each example is a `\b` paragraph, which Click prints as it is rather than rewrapping.
    """
    examples = EXAMPLES.get(path)
    if not examples:
        return None
    parts = ["Examples:"]
    for comment, command in examples:
        parts.append(f"\b\n# {comment}\n{command}")
    return "\n\n".join(parts)
