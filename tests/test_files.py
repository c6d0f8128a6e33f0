"""The one file writer (veadk_mem/files.py) and every command that writes a file through it
(issue 40 item 3, issue 41 item 6): a private part file, fsync, rename; a full disk is exit 1
naming the file with nothing half-written left; a symbolic link at the target is never
followed; stale parts of a killed vmem are removed, a live writer's are not.

The full disk is real: a 1 MB tmpfs mounted for the test (vmem's tests run as root in CI).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from veadk_mem import files
from veadk_mem.cli.app import app
from veadk_mem.errors import BadInput, StoreError


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs, unmounted afterwards."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(where)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 1 MB tmpfs here ({mounted.stderr.strip()}); the full-disk tests need root")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(disk: Path, leave: int = 0) -> Path:
    """Fill the disk but for about `leave` bytes, with a file named `filler`."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty directory of the test's own (tmp_path also holds the test's home and work dirs)."""
    made = tmp_path / "files"
    made.mkdir()
    return made


# --- the writer itself --------------------------------------------------------------------------


def test_a_full_disk_names_the_file_and_leaves_the_old_one_whole(small_disk: Path) -> None:
    target = small_disk / "out.jsonl"
    target.write_text("the previous export\n", encoding="utf-8")
    _fill(small_disk, leave=64 * 1024)
    with pytest.raises(StoreError) as caught, files.atomic_output(target) as handle:
        for _ in range(100):
            handle.write("x" * 4096 + "\n")
    assert caught.value.message == f"no space left on device writing {target}"
    assert target.read_text(encoding="utf-8") == "the previous export\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "out.jsonl"]  # no part left
    (small_disk / "filler").unlink()
    with files.atomic_output(target) as handle:
        handle.write("new\n")
    assert target.read_text(encoding="utf-8") == "new\n" and _mode(target) == 0o600


def test_a_full_disk_before_the_first_byte_is_the_same_message(small_disk: Path) -> None:
    _fill(small_disk)
    target = small_disk / "config.toml"
    with pytest.raises(StoreError, match=f"^no space left on device writing {target}$"):
        files.write_text(target, "x" * 10_000)
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_an_error_of_the_data_source_is_not_called_a_write_error(folder: Path) -> None:
    """A store connection reset while exporting is the store's failure, not the file's."""
    target = folder / "out.jsonl"
    with pytest.raises(ConnectionResetError), files.atomic_output(target) as handle:
        handle.write("half\n")
        raise ConnectionResetError("the store went away")
    assert list(folder.iterdir()) == []


def test_the_part_is_private_while_written_and_the_mode_is_set_at_the_end(folder: Path) -> None:
    target = folder / "vmem.fish"
    with files.atomic_output(target, mode=0o644) as handle:
        handle.write("x")
        (part,) = [p for p in folder.iterdir() if p.name.endswith(".part")]
        assert part.name.startswith("vmem.fish.") and _mode(part) == 0o600
        assert not target.exists()
    assert _mode(target) == 0o644 and target.read_text(encoding="utf-8") == "x"
    assert list(folder.iterdir()) == [target]


def test_a_symlink_at_the_target_is_refused_or_replaced_itself_never_followed(folder: Path) -> None:
    victim = folder / "victim"
    victim.write_text("precious", encoding="utf-8")
    link = folder / "out.jsonl"
    link.symlink_to(victim)
    with pytest.raises(BadInput, match="is a symbolic link; vmem never writes through one"):
        files.write_text(link, "data", option="-o")
    dangling = folder / "dangling.toml"
    dangling.symlink_to(folder / "nowhere" / "x.toml")
    with pytest.raises(BadInput, match=f"^{dangling}: is a symbolic link"):
        files.write_text(dangling, "data")
    files.write_text(link, "data", replace_link=True)  # --force: the link itself is replaced
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not link.is_symlink() and link.read_text(encoding="utf-8") == "data" and _mode(link) == 0o600


def test_no_overwrite_keeps_a_file_that_appeared_while_writing(folder: Path) -> None:
    target = folder / "backup.jsonl"
    refused = pytest.raises(BadInput, match="exists; nothing was written over it")
    with refused, files.atomic_output(target, overwrite=False) as handle:
        handle.write("mine")
        target.write_text("theirs", encoding="utf-8")
    assert target.read_text(encoding="utf-8") == "theirs"
    assert list(folder.iterdir()) == [target]


def test_stale_parts_go_a_live_writers_stay_and_others_files_are_left(folder: Path) -> None:
    target = folder / "out.jsonl"
    stale = folder / "out.jsonl.k3j9_x2a.part"  # a kill -9 while writing
    stale.write_text('{"half": ', encoding="utf-8")
    planted = folder / "out.jsonl.abc123.part"
    victim = folder / "victim"
    victim.write_text("precious", encoding="utf-8")
    planted.symlink_to(victim)
    others = [folder / "out.jsonl.notes", folder / "out.jsonl.part", folder / "xout.jsonl.a1.part"]
    for path in others:
        path.write_text("not ours", encoding="utf-8")
    live = folder / "out.jsonl.live0001.part"  # another vmem writing it right now holds its lock
    live.write_text("", encoding="utf-8")
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        files.write_text(target, "new")
    finally:
        os.close(holder)
    assert not stale.exists() and not planted.is_symlink() and live.exists()
    assert victim.read_text(encoding="utf-8") == "precious"
    assert all(p.read_text(encoding="utf-8") == "not ours" for p in others)


# --- the commands ---------------------------------------------------------------------------------


def _session(sid: str, text: str) -> dict[str, object]:
    event = {"id": f"{sid}-e", "author": "user", "invocationId": "i", "timestamp": 1_790_000_000.0}
    event["content"] = {"role": "user", "parts": [{"text": text}]}
    return {"id": sid, "appName": "a", "userId": "u", "state": {}, "events": [event], "lastUpdateTime": 1_790_000_001}


@pytest.fixture
def sessions_db(tmp_path: Path, runner: CliRunner) -> Path:
    """A session database of about 300 KB of chat."""
    source = tmp_path / "seed.jsonl"
    source.write_text("".join(json.dumps(_session(f"s{i}", "y" * 3000)) + "\n" for i in range(100)), encoding="utf-8")
    db = tmp_path / "t.db"
    result = runner.invoke(app, ["session", "import", str(source), "--db-url", str(db)])
    assert result.exit_code == 0, result.output
    return db


def test_session_export_on_a_full_disk_is_exit_1_naming_the_file(
    runner: CliRunner, sessions_db: Path, small_disk: Path
) -> None:
    out = small_disk / "sessions.jsonl"
    _fill(small_disk, leave=64 * 1024)
    result = runner.invoke(app, ["session", "export", "-o", str(out), "--db-url", str(sessions_db)])
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == f"vmem: error: no space left on device writing {out}"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_session_export_refuses_a_symlink_target(runner: CliRunner, sessions_db: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    out.symlink_to(victim)
    result = runner.invoke(app, ["session", "export", "-o", str(out), "--db-url", str(sessions_db)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"vmem: error: -o {out}: is a symbolic link; vmem never writes through one (remove it or name another file)\n"
    )
    assert out.is_symlink() and victim.read_text(encoding="utf-8") == "precious"


def _ltm_store(path: Path) -> None:
    from veadk_mem.config import VmemSettings
    from veadk_mem.ltm.base import MemoryRecord
    from veadk_mem.ltm.facade import LongTermMemory

    settings = VmemSettings()
    settings.long_term_memory.local_path = str(path)
    settings.model.embedding.provider = "hash"
    ltm = LongTermMemory.from_settings(settings)
    records = [
        MemoryRecord(
            text=json.dumps({"role": "user", "parts": [{"text": f"{i} " + "z" * 2000}]}), user_id="u1", app_name="app"
        )
        for i in range(200)
    ]

    async def go() -> None:
        try:
            await ltm.backend_for(index="app").save("u1", records)
        finally:
            await ltm.close()

    asyncio.run(go())


def test_ltm_export_on_a_full_disk_is_exit_1_naming_the_file(
    runner: CliRunner, tmp_path: Path, small_disk: Path
) -> None:
    store = tmp_path / "ltm.db"
    _ltm_store(store)
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(store)}
    out = small_disk / "memories.jsonl"
    out.write_text("last week's export\n", encoding="utf-8")
    _fill(small_disk, leave=64 * 1024)
    result = runner.invoke(app, ["ltm", "export", "-u", "u1", "-o", str(out)], env=env)
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == f"vmem: error: no space left on device writing {out}"
    assert "unexpected" not in result.stderr
    assert out.read_text(encoding="utf-8") == "last week's export\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "memories.jsonl"]
    (small_disk / "filler").unlink()
    result = runner.invoke(app, ["ltm", "export", "-u", "u1", "-o", str(out)], env=env)
    assert result.exit_code == 0, result.output
    assert len(out.read_text(encoding="utf-8").splitlines()) == 201 and _mode(out) == 0o600


def test_ltm_export_refuses_a_symlink_target(runner: CliRunner, tmp_path: Path) -> None:
    store = tmp_path / "ltm.db"
    _ltm_store(store)
    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    out.symlink_to(victim)
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(store)}
    result = runner.invoke(app, ["ltm", "export", "-u", "u1", "-o", str(out)], env=env)
    assert result.exit_code == 2 and "is a symbolic link" in result.stderr
    assert victim.read_text(encoding="utf-8") == "precious"


def test_config_init_is_private_and_never_writes_through_a_symlink(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "conf" / "vmem.toml"
    result = runner.invoke(app, ["config", "init", str(target)])
    assert result.exit_code == 0, result.output
    assert _mode(target) == 0o600  # it has slots for passwords and API keys
    assert [p.name for p in target.parent.iterdir()] == ["vmem.toml"]

    elsewhere = tmp_path / "elsewhere.toml"
    dangling = tmp_path / "dangling.toml"
    dangling.symlink_to(elsewhere)
    result = runner.invoke(app, ["config", "init", str(dangling)])
    assert result.exit_code == 2 and "already exists (use --force to overwrite)" in result.stderr
    assert not elsewhere.exists() and dangling.is_symlink()
    result = runner.invoke(app, ["config", "init", str(dangling), "--force"])
    assert result.exit_code == 0, result.output
    assert not elsewhere.exists() and not dangling.is_symlink() and _mode(dangling) == 0o600

    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    link = tmp_path / "link.toml"
    link.symlink_to(victim)
    assert runner.invoke(app, ["config", "init", str(link)]).exit_code == 2
    assert runner.invoke(app, ["config", "init", str(link), "--force"]).exit_code == 0
    assert victim.read_text(encoding="utf-8") == "precious" and not link.is_symlink()


def test_config_init_on_a_full_disk_is_exit_1_naming_the_file(runner: CliRunner, small_disk: Path) -> None:
    _fill(small_disk)
    target = small_disk / "vmem.toml"
    result = runner.invoke(app, ["config", "init", str(target)])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"vmem: error: no space left on device writing {target}\n"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_completion_install_refuses_a_symlink_and_a_full_disk_is_exit_1(
    runner: CliRunner, tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "conf"))
    target = tmp_path / "conf" / "fish" / "completions" / "vmem.fish"
    target.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious", encoding="utf-8")
    target.symlink_to(victim)
    result = runner.invoke(app, ["completion", "fish", "--install"])
    assert result.exit_code == 2 and "is a symbolic link" in result.stderr
    assert victim.read_text(encoding="utf-8") == "precious"

    monkeypatch.setenv("XDG_CONFIG_HOME", str(small_disk))
    (small_disk / "fish" / "completions").mkdir(parents=True)
    _fill(small_disk)
    result = runner.invoke(app, ["completion", "fish", "--install"])
    assert result.exit_code == 1
    assert result.stderr == f"vmem: error: no space left on device writing {small_disk}/fish/completions/vmem.fish\n"
    assert list((small_disk / "fish" / "completions").iterdir()) == []


def test_the_ledger_and_its_wal_files_are_private_while_open(tmp_path: Path) -> None:
    from veadk_mem.ltm.ledger import Ledger, Scope

    ledger = Ledger(tmp_path / "data" / "ledger.db")
    scope = Scope("tos_context", "bucket", "idx", "u1")
    try:
        ledger.record(scope, [("a" * 64, "m1", "s1")])
        assert ledger.sent(scope, ["a" * 64]) == {"a" * 64}
        made = sorted(p.name for p in ledger.path.parent.iterdir())
        assert made == ["ledger.db", "ledger.db-shm", "ledger.db-wal"]  # WAL mode, vmem still running
        assert {name: _mode(ledger.path.parent / name) for name in made} == dict.fromkeys(made, 0o600)
    finally:
        ledger.close()


def test_an_older_ledgers_wide_files_are_narrowed_when_opened(folder: Path) -> None:
    from veadk_mem.ltm.ledger import Ledger, Scope

    path = folder / "ledger.db"
    first = Ledger(path)
    first.record(Scope("b", "s", "i", "u"), [("b" * 64, "m", "s")])
    first.close()
    for name in (path, path.with_name("ledger.db-wal"), path.with_name("ledger.db-shm")):
        if name.exists():
            name.chmod(0o644)
    again = Ledger(path)
    try:
        assert again.sent(Scope("b", "s", "i", "u"), ["b" * 64]) == {"b" * 64}
        assert all(_mode(p) == 0o600 for p in folder.iterdir())
    finally:
        again.close()


def test_an_upgrade_backup_is_never_written_over_and_a_full_disk_names_it(small_disk: Path) -> None:
    """`session upgrade --backup` through the same writer (the old-ADK databases that drive the
    command end to end are built by .ci/test; here the backup file itself)."""
    from veadk_mem.sessions.upgrade import backup_output

    earlier = small_disk / "vmem-upgrade-backup-20260101000000.jsonl.ab12cd34.part"  # a killed default-named run
    earlier.write_text("{", encoding="utf-8")
    backup = small_disk / "vmem-upgrade-backup-20261203000000.jsonl"
    filler = _fill(small_disk, leave=32 * 1024)
    with pytest.raises(StoreError) as caught, backup_output(backup) as handle:
        for _ in range(100):
            handle.write("b" * 4096 + "\n")
    assert caught.value.message == f"no space left on device writing {backup}"
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]
    filler.unlink()
    with backup_output(backup) as handle:
        handle.write("{}\n")
    assert _mode(backup) == 0o600
    with pytest.raises(BadInput, match="exists; name a new file"):
        backup_output(backup)
    assert backup.read_text(encoding="utf-8") == "{}\n"


def test_a_gz_name_is_written_gzip_whole_or_not_at_all(small_disk: Path, folder: Path) -> None:
    """`-o backup.jsonl.gz` (#45 item 12): gzip with its trailer, the same bytes for the same text,
    and on a full disk nothing, where `| gzip > FILE` leaves an empty or cut file."""
    import gzip

    target = folder / "out.jsonl.gz"
    text = "".join(f'{{"n": {i}}}\n' for i in range(5_000))
    with files.atomic_output(target, compress=True) as handle:
        handle.write(text)
    first = target.read_bytes()
    assert gzip.decompress(first).decode("utf-8") == text and _mode(target) == 0o600
    with files.atomic_output(target, compress=True) as handle:
        handle.write(text)
    assert target.read_bytes() == first  # no name or time in the header
    assert files.compression("b.JSONL.GZ") == "gzip" and files.compression("b.jsonl.zst") == "zstd"
    assert files.compression("b.jsonl") is None and files.compression("gz") is None
    full = small_disk / "big.jsonl.gz"
    _fill(small_disk, leave=16 * 1024)
    refused = pytest.raises(StoreError, match=f"^no space left on device writing {full}$")
    with refused, files.atomic_output(full, compress=True) as handle:
        for _ in range(20_000):
            handle.write(os.urandom(48).hex() + "\n")  # random: gzip cannot make it small
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_session_and_ltm_export_write_gzip_by_the_name(runner: CliRunner, sessions_db: Path, tmp_path: Path) -> None:
    import gzip

    plain, packed = tmp_path / "s.jsonl", tmp_path / "s.jsonl.gz"
    for out in (plain, packed):
        result = runner.invoke(app, ["session", "export", "-o", str(out), "--db-url", str(sessions_db)])
        assert result.exit_code == 0, result.output
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes() and plain.stat().st_size > 0
    store = tmp_path / "ltm.db"
    _ltm_store(store)
    env = {"LONG_TERM_MEMORY_LOCAL_PATH": str(store)}
    result = runner.invoke(app, ["ltm", "export", "-u", "u1", "-o", str(tmp_path / "m.jsonl.gz")], env=env)
    assert result.exit_code == 0, result.output
    lines = gzip.decompress((tmp_path / "m.jsonl.gz").read_bytes()).decode("utf-8").splitlines()
    assert len(lines) == 201
    missing = tmp_path / "gone.db"
    result = runner.invoke(app, ["session", "export", "-o", str(tmp_path / "x.jsonl.gz"), "--db-url", str(missing)])
    assert result.exit_code == 1 and not (tmp_path / "x.jsonl.gz").exists()  # the database down: no file


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def zstd_site() -> Path:
    """The `zstandard` package in a folder of its own (build/zstd-site), never in .venv: vmem's
    environment stays as a user installs it; a subprocess finds it on PYTHONPATH."""
    import sys

    site = ROOT / "build" / "zstd-site"
    if not (site / "zstandard").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), "zstandard"]
        subprocess.run(pip, check=True, capture_output=True)
    return site


def _vmem_with(site: Path | None, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import sys

    paths = [str(ROOT)] + ([str(site)] if site else [])
    full = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-m", "veadk_mem", *args], capture_output=True, text=True, env=full)


def test_a_zst_name_is_written_zstandard_when_the_package_is_there(
    zstd_site: Path, sessions_db: Path, tmp_path: Path
) -> None:
    """`-o FILE.zst` (#45 item 12): one zstandard frame whose text is the plain export's, whole or absent."""
    import sys

    plain, packed = tmp_path / "s.jsonl", tmp_path / "s.jsonl.zst"
    for out in (plain, packed):
        result = _vmem_with(zstd_site, "session", "export", "-o", str(out), "--db-url", str(sessions_db))
        assert result.returncode == 0, result.stderr
    assert packed.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # the zstandard frame's magic number
    unpack = (
        "import sys, zstandard; data = open(sys.argv[1], 'rb').read(); "
        "sys.stdout.buffer.write(zstandard.ZstdDecompressor().decompressobj().decompress(data))"
    )
    env = {**os.environ, "PYTHONPATH": str(zstd_site)}
    text = subprocess.run([sys.executable, "-c", unpack, str(packed)], capture_output=True, env=env, check=True).stdout
    assert text == plain.read_bytes() and len(text) > 0 and _mode(packed) == 0o600
    store = tmp_path / "ltm.db"
    _ltm_store(store)
    memories = tmp_path / "m.jsonl.zst"
    env_ltm = {"LONG_TERM_MEMORY_LOCAL_PATH": str(store)}
    result = _vmem_with(zstd_site, "ltm", "export", "-u", "u1", "-o", str(memories), env=env_ltm)
    assert result.returncode == 0, result.stderr
    out = subprocess.run([sys.executable, "-c", unpack, str(memories)], capture_output=True, env=env, check=True)
    assert len(out.stdout.decode("utf-8").splitlines()) == 201
    gone = tmp_path / "x.jsonl.zst"
    result = _vmem_with(zstd_site, "session", "export", "-o", str(gone), "--db-url", str(tmp_path / "none.db"))
    assert result.returncode == 1 and not gone.exists()  # the database down: no file
    assert sorted(p.name for p in tmp_path.iterdir() if ".part" in p.name) == []


def test_a_zst_name_without_the_package_is_exit_2_with_the_install_line(
    runner: CliRunner, sessions_db: Path, tmp_path: Path
) -> None:
    target = tmp_path / "s.jsonl.zst"
    for argv in (
        ["session", "export", "-o", str(target), "--db-url", str(sessions_db)],
        ["session", "export", "-o", str(target), "--db-url", str(tmp_path / "none.db")],  # said before connecting
        ["ltm", "export", "-u", "u1", "-o", str(target)],
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert "needs the zstandard package" in result.stderr and "hint: pip install zstandard" in result.stderr
        assert list(tmp_path.glob("s.jsonl.zst*")) == []
