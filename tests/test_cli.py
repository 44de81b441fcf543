"""The ``threadstore`` command, in-process (typer's runner) and as a real server process."""

from __future__ import annotations

import asyncio
import errno
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

import threadstore
from cli_support import invoke, runner
from postgres_support import (
    POSTGRES_URL_ENV,
    clean_database,
    fresh_database,
    server_url,
    with_database,
)
from server_support import read_sse, run_input
from threadstore import (
    ChatCreate,
    MessageCreate,
    MessageStatus,
    MessageToolCallCreate,
    Role,
    Run,
    RunStatus,
    open_store,
)
from threadstore.cli import app
from threadstore.models import utcnow
from threadstore.server import LOCAL_USER_UUID, user_uuid_for


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite URL in a fresh directory (the file does not exist yet)."""
    return f"sqlite:///{tmp_path / 'threadstore.db'}"


async def _seed(db: str, user: str = "local", thread: str = "t1", name: str = "Maths") -> str:
    store = await open_store(db)
    try:
        chat = await store.create_chat(
            ChatCreate(user_uuid=user_uuid_for(user), thread_id=thread, name=name)
        )
        done = {"status": MessageStatus.COMPLETE, "in_progress": False}
        await store.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role=Role.USER, content="what is 2+2", **done)
        )
        reply = await store.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role=Role.ASSISTANT, content="4", **done)
        )
        await store.create_message_tool_call(
            MessageToolCallCreate(
                message_uuid=reply.message_uuid,
                tool_call_id="c1",
                name="calculator",
                arguments='{"expression": "2+2"}',
                content='{"value": 4}',
                **done,
            )
        )
        return str(chat.chat_uuid)
    finally:
        await store.close()


@pytest.mark.parametrize(
    "command",
    [
        ["serve"],
        ["migrate"],
        ["sweep"],
        ["export"],
        ["import"],
        ["chats", "list"],
        ["chats", "show"],
        ["chats", "rename"],
        ["chats", "delete"],
    ],
)
def test_every_command_explains_itself_and_takes_db(command: list[str]) -> None:
    code, output = invoke(*command, "--help")

    assert code == 0
    assert "--db" in output
    assert "THREADSTORE_DB" in output


def test_commands_on_a_missing_database_say_how_to_create_it(db: str, tmp_path: Path) -> None:
    code, output = invoke("chats", "list", "--db", db)

    assert code == 1
    assert "no database" in output
    assert "threadstore migrate" in output
    assert not (tmp_path / "threadstore.db").exists()


def test_migrate_creates_an_empty_database(db: str) -> None:
    migrated, migrate_output = invoke("migrate", "--db", db)
    listed, list_output = invoke("chats", "list", "--db", db)

    assert (migrated, listed) == (0, 0)
    assert "up to date" in migrate_output
    assert "no chats yet" in list_output


def test_list_show_rename_and_delete_a_chat(db: str) -> None:
    chat_id = asyncio.run(_seed(db))
    asyncio.run(_seed(db, user="bob", thread="t2", name="Bob's"))

    _, everyone = invoke("chats", "list", "--db", db)
    _, mine = invoke("chats", "list", "--db", db, "--user", "local")
    _, as_json = invoke("chats", "list", "--db", db, "--user", "local", "--json")
    _, shown = invoke("chats", "show", chat_id[:8], "--db", db)
    renamed, _ = invoke("chats", "rename", "t1", "Sums", "--db", db, "--user", "local")
    _, after_rename = invoke("chats", "list", "--db", db, "--user", "local")
    refused = runner.invoke(app, ["chats", "delete", chat_id, "--db", db], input="n\n")
    deleted, delete_output = invoke("chats", "delete", chat_id, "--db", db, "--yes")
    _, after_delete = invoke("chats", "list", "--db", db)

    assert "Maths" in everyone and "Bob's" in everyone
    assert "Maths" in mine and "Bob's" not in mine
    items = json.loads(as_json)["items"]
    assert items[0]["user_uuid"] == str(LOCAL_USER_UUID)
    assert items[0]["last_message"]["content"] == "4"
    assert "what is 2+2" in shown and "calculator" in shown and '{"value": 4}' in shown
    assert renamed == 0 and "Sums" in after_rename
    assert refused.exit_code == 1
    assert deleted == 0 and "deleted" in delete_output
    assert "Sums" not in after_delete and "Bob's" in after_delete


def test_an_unknown_or_ambiguous_chat_is_a_clear_error(db: str) -> None:
    asyncio.run(_seed(db, thread="same"))
    asyncio.run(_seed(db, user="bob", thread="same"))

    unknown, unknown_output = invoke("chats", "show", "nope", "--db", db)
    ambiguous, ambiguous_output = invoke("chats", "show", "same", "--db", db)
    narrowed, _ = invoke("chats", "show", "same", "--db", db, "--user", "bob")

    assert unknown == 1 and "no chat matches" in unknown_output
    assert ambiguous == 1 and "matches 2 chats" in ambiguous_output
    assert narrowed == 0


def test_export_and_import_round_trip_as_json_lines(db: str, tmp_path: Path) -> None:
    asyncio.run(_seed(db, thread="a", name="First"))
    asyncio.run(_seed(db, thread="b", name="Second"))
    dump = tmp_path / "chats.jsonl"
    other = f"sqlite:///{tmp_path / 'other.db'}"
    invoke("migrate", "--db", other)

    exported, _ = invoke("export", "--db", db, "-o", str(dump))
    imported, import_output = invoke("import", str(dump), "--db", other)
    again, again_output = invoke("import", str(dump), "--db", other)
    strict, strict_output = invoke("import", str(dump), "--db", other, "--no-skip-existing")
    as_carol, _ = invoke("import", str(dump), "--db", other, "--user", "carol")
    _, listing = invoke("chats", "list", "--db", other, "--user", "carol")

    lines = dump.read_text(encoding="utf-8").splitlines()
    assert exported == 0 and len(lines) == 2
    assert {json.loads(line)["chat"]["name"] for line in lines} == {"First", "Second"}
    assert imported == 0 and "imported 2" in import_output
    assert again == 0 and "skipped 2" in again_output
    assert strict == 1 and "already exists" in strict_output
    assert as_carol == 0 and "First" in listing and "Second" in listing


def test_import_names_the_line_that_is_not_an_export(db: str, tmp_path: Path) -> None:
    invoke("migrate", "--db", db)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "an export"}\n', encoding="utf-8")

    code, output = invoke("import", str(bad), "--db", db)

    assert code == 1
    assert "line 1" in output


def _error_lines(output: str) -> list[str]:
    assert "Traceback" not in output
    return [line for line in output.splitlines() if line.startswith("error:")]


def test_export_to_a_file_replaces_it_only_with_force(db: str, tmp_path: Path) -> None:
    asyncio.run(_seed(db))
    target = tmp_path / "chats.jsonl"
    target.write_text("keep me\n", encoding="utf-8")

    refused, refused_output = invoke("export", "--db", db, "-o", str(target))
    kept = target.read_text(encoding="utf-8")
    forced, _ = invoke("export", "--db", db, "-o", str(target), "--force")

    assert refused == 1
    assert _error_lines(refused_output) == [f"error: {target} already exists"]
    assert "--force" in refused_output
    assert kept == "keep me\n"
    assert forced == 0
    [line] = target.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["chat"]["name"] == "Maths"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chats.jsonl", "threadstore.db"]


@pytest.mark.parametrize(
    ("where", "says"),
    [(".", "is a folder"), ("missing/chats.jsonl", "does not exist")],
)
def test_export_to_a_folder_or_into_a_missing_one_is_one_error_line(
    db: str, tmp_path: Path, where: str, says: str
) -> None:
    asyncio.run(_seed(db))
    target = tmp_path / where

    for args in ((), ("--force",)):
        code, output = invoke("export", "--db", db, "-o", str(target), *args)

        assert code == 1
        [line] = _error_lines(output)
        assert says in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["threadstore.db"]


def test_an_export_that_cannot_be_written_whole_leaves_the_old_file(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_seed(db))
    target = tmp_path / "chats.jsonl"
    target.write_text("the last export\n", encoding="utf-8")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    code, output = invoke("export", "--db", db, "-o", str(target), "--force")

    assert code == 1
    assert _error_lines(output) == [f"error: cannot write {target}: No space left on device"]
    assert target.read_text(encoding="utf-8") == "the last export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chats.jsonl", "threadstore.db"]


def test_import_reads_a_file_that_starts_with_a_byte_order_mark(db: str, tmp_path: Path) -> None:
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    asyncio.run(_seed(elsewhere))
    invoke("export", "--db", elsewhere, "-o", str(tmp_path / "one.jsonl"))
    text = (tmp_path / "one.jsonl").read_text(encoding="utf-8")
    (tmp_path / "bom.jsonl").write_text(text, encoding="utf-8-sig")
    invoke("migrate", "--db", db)

    code, output = invoke("import", str(tmp_path / "bom.jsonl"), "--db", db)

    assert code == 0, output
    assert "imported 1 chat(s)" in output


def test_import_refuses_a_chat_it_cannot_store_whole_and_names_why(db: str, tmp_path: Path) -> None:
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    asyncio.run(_seed(elsewhere))
    invoke("export", "--db", elsewhere, "-o", str(tmp_path / "one.jsonl"))
    document = json.loads((tmp_path / "one.jsonl").read_text(encoding="utf-8"))
    first = document["messages"][0]
    invoke("migrate", "--db", db)
    cases = {
        "a format version it does not know": (
            json.dumps({**document, "export_version": 999}),
            "line 1: export_version 999 is not one this version of threadstore reads",
        ),
        "a message its own parent": (
            json.dumps({**document, "messages": [{**first, "parent_uuid": first["message_uuid"]}]}),
            "line 1: messages[0] is its own parent",
        ),
        "a date PostgreSQL reads back as -infinity": (
            json.dumps({**document, "messages": [{**first, "created_at": "0001-01-01T00:00Z"}]}),
            "line 1: document.messages[0].created_at is 0001-01-01T00:00:00+00:00, outside",
        ),
        "a number that is not finite": (
            json.dumps({**document, "chat": {**document["chat"], "state": {"t": math.inf}}}),
            "line 1: document.chat.state.t is inf, which is not a finite number",
        ),
    }

    for case, (line, says) in cases.items():
        (tmp_path / "bad.jsonl").write_text(line + "\n", encoding="utf-8")
        code, output = invoke("import", str(tmp_path / "bad.jsonl"), "--db", db)

        assert code == 1, case
        [error] = _error_lines(output)
        assert error.startswith(f"error: {says}"), (case, error)
    _, listing = invoke("chats", "list", "--db", db, "--json")
    assert json.loads(listing)["items"] == []


def test_sweep_finalizes_the_runs_of_a_server_that_died(db: str) -> None:
    async def leave_a_dead_run() -> str:
        store = await open_store(db)
        try:
            chat = await store.create_chat(ChatCreate(user_uuid=LOCAL_USER_UUID, thread_id="t"))
            old = utcnow() - timedelta(minutes=10)
            await store.start_run(
                Run(
                    chat_uuid=chat.chat_uuid,
                    thread_id="t",
                    run_id="r",
                    owner="gone:1:x",
                    heartbeat_at=old,
                )
            )
            message = await store.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, content="half an ans", run_id="r")
            )
            return str(message.message_uuid)
        finally:
            await store.close()

    async def statuses(message_uuid: str) -> tuple[str, str]:
        from uuid import UUID

        store = await open_store(db)
        try:
            message = await store.get_message(UUID(message_uuid))
            assert message is not None
            run = await store.get_run(message.chat_uuid, "r")
            assert run is not None
            return message.status, run.status
        finally:
            await store.close()

    message_uuid = asyncio.run(leave_a_dead_run())
    code, output = invoke("sweep", "--db", db, "--stale-after", "60")

    assert code == 0 and "finalized 1" in output
    assert asyncio.run(statuses(message_uuid)) == ("interrupted", "interrupted")


# --- the real thing: `threadstore serve` as a process ------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_server(
    db: str, port: int, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "threadstore.cli", "serve", "--db", db, "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--demo-delay", "0", "--log-level", "warning", *args],  # args win
        cwd=cwd,
        env={**os.environ, "THREADSTORE_DB": "", "THREADSTORE_TOKENS": "", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read().decode() if process.stdout else ""
            raise AssertionError(f"threadstore serve exited early:\n{output}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("threadstore serve did not come up")


def _stop_server(process: subprocess.Popen[bytes]) -> str:
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    return output.decode()


@pytest.mark.slow
def test_serve_runs_the_demo_on_sqlite_and_keeps_history_across_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = "sqlite:///./threadstore.db"  # the default, relative to the working directory
    port = _free_port()
    body = run_input("What is 12 * 7 + 3?")

    server = _start_server(db, port, tmp_path)
    try:
        stream = httpx.post(f"http://127.0.0.1:{port}/agui", json=body, timeout=60).text
    finally:
        banner = _stop_server(server)
    server = _start_server(db, port, tmp_path)
    try:
        chats = httpx.get(f"http://127.0.0.1:{port}/api/chats").json()["items"]
    finally:
        _stop_server(server)
    monkeypatch.chdir(tmp_path)  # `chats list` reads the same relative default as `serve`
    code, listing = invoke("chats", "list")

    events = [json.loads(line[5:]) for line in stream.split("\n") if line.startswith("data:")]
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "curl -N" in banner
    assert stream.startswith("id: 1\ndata: ")
    assert "12 * 7 + 3 = 87" in answer
    assert [chat["thread_id"] for chat in chats] == [body["threadId"]]
    assert chats[0]["last_message"]["role"] == "assistant"
    assert "87" in chats[0]["last_message"]["content"]
    # The chat is named from its first user message; the listing shows that name.
    assert chats[0]["name"] == body["messages"][0]["content"]
    assert code == 0 and chats[0]["name"] in listing


@pytest.mark.postgres
def test_sweep_on_postgresql_also_deletes_old_relayed_events() -> None:
    server = server_url()

    async def relayed_events(url: str, setup: bool) -> list[str]:
        import asyncpg

        if setup:
            store = await open_store(url)
            try:
                chat = await store.create_chat(ChatCreate(user_uuid=LOCAL_USER_UUID, thread_id="t"))
                for run_id in ("old", "recent"):
                    await store.start_run(
                        Run(chat_uuid=chat.chat_uuid, thread_id="t", run_id=run_id)
                    )
                    await store.finish_run(chat.chat_uuid, run_id, RunStatus.COMPLETE)
            finally:
                await store.close()
        conn = await asyncpg.connect(url)
        try:
            if setup:
                for run_id, age in (("old", 600), ("recent", 5)):
                    await conn.execute(
                        "INSERT INTO run_events (chat_uuid, run_id, event_id, event, created_at)"
                        " VALUES ($1, $2, 1, '{}', $3)",
                        chat.chat_uuid,
                        run_id,
                        utcnow() - timedelta(seconds=age),
                    )
            rows = await conn.fetch("SELECT run_id FROM run_events ORDER BY run_id")
            return [row["run_id"] for row in rows]
        finally:
            await conn.close()

    async def scenario() -> tuple[list[str], int, str, list[str]]:
        async with clean_database(server) as url:
            before = await relayed_events(url, setup=True)
            code, output = await asyncio.to_thread(
                invoke, "sweep", "--db", url, "--event-retention", "60"
            )
            return before, code, output, await relayed_events(url, setup=False)

    before, code, output, after = asyncio.run(scenario())

    assert before == ["old", "recent"]
    assert code == 0, output
    assert after == ["recent"]


def _worker_pids(pid: int) -> list[int]:
    """The processes ``pid`` started (uvicorn's workers, and any helper of theirs)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in (task / "children").read_text().split()]
    return children


@pytest.mark.postgres
@pytest.mark.slow
def test_serve_with_two_workers_on_postgresql_resumes_and_cancels_a_run_from_any_connection(
    tmp_path: Path,
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    body = run_input("Tell me a long story.")
    thread, run = body["threadId"], body["runId"]

    async def scenario(url: str) -> tuple[list[int], list[list[int]], dict[str, object], object]:
        server = _start_server(url, port, tmp_path, "--workers", "2", "--demo-delay", "0.2")
        try:
            workers = _worker_pids(server.pid)
            async with httpx.AsyncClient(timeout=60) as client:
                async with client.stream("POST", f"{base}/agui", json=body) as response:
                    frames = read_sse(response)
                    async for frame in frames:
                        if frame.data and frame.data["type"] == "TEXT_MESSAGE_CONTENT":
                            break
                    # Each resume and the cancel on a connection of its own, so the
                    # kernel hands them to whichever worker accepts first.
                    resumed: list[list[int]] = []
                    for _ in range(4):
                        async with (
                            httpx.AsyncClient(timeout=60) as other,
                            other.stream(
                                "GET", f"{base}/agui/threads/{thread}/runs/{run}/events?after=1"
                            ) as again,
                        ):
                            ids: list[int] = []
                            async for frame in read_sse(again):
                                if frame.id is not None:
                                    ids.append(frame.id)
                                if len(ids) == 2:
                                    break
                            resumed.append(ids)
                    async with httpx.AsyncClient(timeout=60) as other:
                        cancel = await other.post(f"{base}/agui/threads/{thread}/runs/{run}/cancel")
                    last = None
                    async for frame in frames:
                        if frame.data is not None:
                            last = frame.data
            return workers, resumed, cancel.json(), last
        finally:
            _stop_server(server)

    async def main() -> tuple[list[int], list[list[int]], dict[str, object], object]:
        async with clean_database(server_url()) as url:
            return await scenario(url)

    workers, resumed, cancelled, last = asyncio.run(main())

    assert len(workers) >= 2
    assert resumed == [[2, 3]] * 4  # every connection picked the run up after event 1
    assert cancelled["cancelled"] is True and cancelled["status"] == "interrupted"
    assert isinstance(last, dict) and last["type"] == "RUN_ERROR" and last["code"] == "CANCELLED"


def test_serve_refuses_several_workers_on_sqlite_in_one_line(db: str) -> None:
    code, output = invoke("serve", "--db", db, "--workers", "2", *UNBINDABLE)

    (line,) = _one_error(output)
    assert code == 1
    assert "--workers 2 needs PostgreSQL" in line


def test_serve_refuses_an_outbox_bound_without_an_outbox_in_one_line(db: str) -> None:
    code, output = invoke("serve", "--db", db, "--outbox-max-bytes", "1000", *UNBINDABLE)

    (line,) = _one_error(output)
    assert code == 1
    assert "give --outbox PATH too" in line


def test_serve_with_an_outbox_journals_beside_it_and_reports_its_depth(tmp_path: Path) -> None:
    port = _free_port()
    journal = tmp_path / "outbox.sqlite3"
    # The child runs the threadstore under test, wherever the tests import it from.
    package_root = str(Path(threadstore.__file__).resolve().parents[1])
    server = _start_server(
        f"sqlite:///{tmp_path / 'threadstore.db'}",
        port,
        tmp_path,
        "--outbox",
        str(journal),
        env={"PYTHONPATH": package_root},
    )
    try:
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz").json()
    finally:
        banner = _stop_server(server)

    assert ready == {"status": "ready", "outbox_depth": 0}
    assert journal.exists()
    assert f"outbox    {journal}" in " ".join(banner.split("\n"))


# --- configuration errors and auth at start-up ------------------------------------------------


def _one_error(output: str) -> list[str]:
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines[0].startswith("error: "), output
    assert "Traceback" not in output
    assert len(lines) <= 2, output  # the error and its hint
    return lines


# A serve that got past its checks fails to bind this address (TEST-NET-3) instead of serving.
UNBINDABLE = ["--host", "203.0.113.1", "--port", "8000"]


@pytest.mark.parametrize("command", [["serve", *UNBINDABLE], ["chats", "list"], ["migrate"]])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("nosuch://x", "unsupported store URL"),
        ("sqlite://x.db", "invalid sqlite URL"),
        ("postgresql://postgres@127.0.0.1:1/x", "cannot connect"),
    ],
)
def test_a_bad_db_is_one_error_line_before_anything_else(
    command: list[str], url: str, says: str
) -> None:
    code, output = invoke(*command, "--db", url)

    assert code == 1
    lines = _one_error(output)
    assert says in lines[0]
    assert "serving" not in output


def test_a_missing_sqlite_folder_is_one_error_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'absent' / 'x.db'}"

    for command in (["serve", *UNBINDABLE], ["migrate"]):
        code, output = invoke(*command, "--db", db)
        assert code == 1
        assert "folder" in _one_error(output)[0]
    assert not (tmp_path / "absent").exists()


@pytest.mark.postgres
def test_a_missing_postgres_database_is_one_error_line() -> None:
    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set; PostgreSQL tests need a server")
    url = with_database(server_url, f"absent_{os.getpid()}_{time.monotonic_ns()}")
    code, output = invoke("serve", *UNBINDABLE, "--db", url)

    assert code == 1
    assert "does not exist" in _one_error(output)[0]


def test_an_explicit_auth_none_with_tokens_refuses_to_start(db: str, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("tok=alice\n", encoding="utf-8")

    code, output = invoke(
        "serve", *UNBINDABLE, "--db", db, "--auth", "none", "--tokens-file", str(tokens)
    )

    assert code == 1
    assert "--auth none turns auth off" in _one_error(output)[0]


@pytest.mark.slow
@pytest.mark.parametrize("source", ["file", "env"])
def test_a_tokens_source_alone_turns_token_auth_on(tmp_path: Path, source: str) -> None:
    port = _free_port()
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("tok-alice=alice\n", encoding="utf-8")
    args: list[str] = []
    env: dict[str, str] = {}
    if source == "file":
        args += ["--tokens-file", str(tokens)]
    else:
        env["THREADSTORE_TOKENS"] = "tok-alice=alice"

    server = _start_server(f"sqlite:///{tmp_path / 'x.db'}", port, tmp_path, *args, env=env)
    try:
        anonymous = httpx.get(f"http://127.0.0.1:{port}/api/chats")
        alice = httpx.get(
            f"http://127.0.0.1:{port}/api/chats", headers={"Authorization": "Bearer tok-alice"}
        )
    finally:
        banner = _stop_server(server)

    assert anonymous.status_code == 401
    assert alice.status_code == 200
    assert "auth      tokens" in banner
    assert "-H 'Authorization: Bearer <token>'" in banner
    assert "warning" not in banner


@pytest.mark.slow
def test_an_open_server_on_a_public_interface_warns(tmp_path: Path) -> None:
    port = _free_port()
    server = _start_server(f"sqlite:///{tmp_path / 'x.db'}", port, tmp_path, "--host", "0.0.0.0")
    banner = _stop_server(server)

    assert "auth      none" in banner
    assert "warning: listening on 0.0.0.0 with no auth" in banner
    assert "Authorization" not in banner


def test_import_skips_invalid_chats_when_asked_and_names_their_lines(
    db: str, tmp_path: Path
) -> None:
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    asyncio.run(_seed(elsewhere))
    invoke("export", "--db", elsewhere, "-o", str(tmp_path / "one.jsonl"))
    document = json.loads((tmp_path / "one.jsonl").read_text(encoding="utf-8"))
    invoke("migrate", "--db", db)

    def line(thread: str, **chat: object) -> str:
        return json.dumps({**document, "chat": {**document["chat"], "thread_id": thread, **chat}})

    source = tmp_path / "mixed.jsonl"
    lines = [
        line("good-1"),
        line("nul", state={"x": "a\u0000b"}),
        "{broken",
        line("long-name", name="n" * 201),
        line("good-2"),
    ]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")

    stopped, stop_output = invoke("import", str(source), "--db", db)
    skipped, skip_output = invoke("import", str(source), "--db", db, "--skip-invalid")
    _, listing = invoke("chats", "list", "--db", db, "--json")

    assert stopped == 1
    assert "line 2: document.chat.state.x contains a NUL" in stop_output
    assert skipped == 0
    assert "imported 1 chat(s), skipped 1 already present, skipped 3 invalid" in skip_output
    for number in (2, 3, 4):
        assert f"skipped line {number}:" in skip_output
    assert "limit is 200" in skip_output
    threads = sorted(item["thread_id"] for item in json.loads(listing)["items"])
    assert threads == ["good-1", "good-2"]


def test_rename_holds_the_server_name_limit(db: str) -> None:
    chat_id = asyncio.run(_seed(db))

    long_code, long_output = invoke("chats", "rename", chat_id, "n" * 201, "--db", db)
    ok_code, _ = invoke("chats", "rename", chat_id, "n" * 200, "--db", db)

    assert long_code == 1
    assert "limit is 200" in long_output
    assert ok_code == 0


@pytest.mark.postgres
def test_a_sqlite_export_with_a_nul_imports_into_postgres_without_failing_halfway(
    tmp_path: Path,
) -> None:
    server_url = os.environ.get(POSTGRES_URL_ENV)
    if not server_url:
        pytest.skip(f"{POSTGRES_URL_ENV} is not set; PostgreSQL tests need a server")
    sqlite = f"sqlite:///{tmp_path / 'from.db'}"
    asyncio.run(_seed(sqlite, thread="clean"))
    asyncio.run(_seed(sqlite, thread="with-nul", name="has a \x00 in it"))
    asyncio.run(_seed(sqlite, thread="also-clean"))
    invoke("export", "--db", sqlite, "-o", str(tmp_path / "all.jsonl"))

    async def imported_threads(url: str) -> list[str]:
        store = await open_store(url, setup=False)
        try:
            return sorted(chat.thread_id for chat in await store.get_all_chats())
        finally:
            await store.close()

    async def scenario() -> tuple[int, str, int, str, list[str]]:
        async with fresh_database(server_url) as url:
            # The CLI runs its own event loop, so it runs in a thread here.
            await asyncio.to_thread(invoke, "migrate", "--db", url)
            source = str(tmp_path / "all.jsonl")
            stop_code, stop_output = await asyncio.to_thread(invoke, "import", source, "--db", url)
            skip_code, skip_output = await asyncio.to_thread(
                invoke, "import", source, "--db", url, "--skip-invalid"
            )
            return stop_code, stop_output, skip_code, skip_output, await imported_threads(url)

    stop_code, stop_output, skip_code, skip_output, threads = asyncio.run(scenario())

    assert stop_code == 1
    assert "name contains a NUL character" in stop_output
    assert skip_code == 0
    assert "skipped 1 invalid" in skip_output
    assert threads == ["also-clean", "clean"]


def test_version_prints_the_package_version() -> None:
    code, output = invoke("--version")

    assert code == 0
    assert output.strip() == f"threadstore {threadstore.__version__}"


def test_migrate_says_whether_it_applied_migrations(db: str) -> None:
    _, first = invoke("migrate", "--db", db)
    _, second = invoke("migrate", "--db", db)

    assert "applied migrations 1 to" in first
    assert "already current" in second and "nothing applied" in second


def test_a_chat_prefix_needs_eight_characters(db: str) -> None:
    chat_id = asyncio.run(_seed(db))

    short, short_output = invoke("chats", "show", chat_id[:7], "--db", db)
    enough, shown = invoke("chats", "show", chat_id[:8], "--db", db)

    assert short == 1
    assert "at least 8 characters" in short_output
    assert enough == 0 and "what is 2+2" in shown


def test_show_pages_a_long_chat_and_list_pages_every_users_chats(db: str) -> None:
    chat_id = asyncio.run(_seed(db))  # a question and its answer
    asyncio.run(_seed(db, user="bob", thread="t2", name="Bob's"))

    _, newest = invoke("chats", "show", chat_id, "--db", db, "--last", "1")
    _, whole = invoke("chats", "show", chat_id, "--db", db)
    first, first_page = invoke("chats", "list", "--db", db, "--limit", "1", "--json")
    cursor = json.loads(first_page)["next_cursor"]
    _, second_page = invoke(
        "chats", "list", "--db", db, "--limit", "1", "--json", "--cursor", cursor
    )

    assert "calculator" in newest and "what is 2+2" not in newest
    assert "earlier messages not shown" in newest
    assert "what is 2+2" in whole and "earlier messages not shown" not in whole
    assert first == 0 and cursor
    names = [json.loads(page)["items"][0]["name"] for page in (first_page, second_page)]
    assert sorted(names) == ["Bob's", "Maths"]
    assert json.loads(second_page)["next_cursor"] is None
