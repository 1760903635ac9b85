"""The MCP server at /mcp, driven by the official SDK's own client over real HTTP against gunicorn:
each tool's success path, scopes, bad arguments as tool errors, and the stdio bridge end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from console.mcp.tools import INSTRUCTIONS
from lessonboard.models import Workspace
from lessonboard.tokens import issue_token
from lessonq.models import Job
from lessons.models import Lesson
from lessons.review.models import Proposal
from lessons.store import persist_lesson
from tests.support.processes import Gunicorn, subprocess_env
from tests.support.queue import QUEUE_FOLDERS, act_as_node, new_queue_folders

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture(scope="module")
def module_server(
    django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Gunicorn, Path, str]]:
    """One gunicorn for the module (a start per test was half of this file's time): its own node name and
    WAL folders, which each test takes over through ``queue_dir`` below. The database is flushed between
    tests (``transaction=True``); the server keeps no workspace or lesson in memory across requests."""
    base, node = new_queue_folders(tmp_path_factory.mktemp("mcp"))
    server = Gunicorn(env=subprocess_env(LESSONQ_BASE_DIR=str(base), LESSONBOARD_NODE=node), workers=1)
    try:
        yield server.wait_ready(), base, node
    finally:
        server.stop()


@pytest.fixture
def queue_dir(module_server: tuple[Gunicorn, Path, str], settings: Any) -> Path:
    """The module server's WAL folders, emptied, and its node name as this test's (what tests/support's
    ``queue_dir`` does for a folder of the test's own)."""
    _, base, node = module_server
    for sub in QUEUE_FOLDERS:
        for leftover in (base / sub).iterdir():
            leftover.unlink()
    return act_as_node(settings, base, node)


@pytest.fixture
def web(module_server: tuple[Gunicorn, Path, str], queue_dir: Path) -> Gunicorn:
    server = module_server[0]
    assert server.alive(), server.log()[-3000:]
    return server


def run(url: str, token: str, body: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    """Open an MCP session to ``url`` with ``token`` and run ``body`` in it."""

    async def main() -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with streamable_http_client(url + "/mcp", http_client=http) as (read, write, *_):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await body(session)

    return in_a_thread(main)


def in_a_thread(main: Callable[[], Awaitable[Any]]) -> Any:
    """``anyio.run(main)`` on a thread of its own: the browser tests' Playwright keeps an event loop
    running in the main thread for the whole session."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, main).result()


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return json.loads(result.content[0].text)


def test_it_lists_the_tools_with_their_argument_schemas(web: Gunicorn, agent_token: Any) -> None:
    async def body(session: ClientSession) -> Any:
        return await session.list_tools()

    tools = {tool.name: tool for tool in run(web.url, agent_token("harness", "full"), body).tools}
    assert set(tools) >= {"retrieve_lessons", "report_result", "propose_memory", "report_outcome"}
    assert tools["retrieve_lessons"].input_schema["required"] == ["task"]
    assert "Long-term Memory" in (tools["retrieve_lessons"].description or "")
    assert [name for name in tools if name not in INSTRUCTIONS] == []  # the server's instructions name every tool


def test_it_retrieves_lessons_with_the_memory_block(web: Gunicorn, agent_token: Any) -> None:
    persist_lesson(
        situation="deploying with helm to the staging cluster",
        mistake="forgot --atomic and left a half-applied release",
        correction="always pass --atomic --timeout 5m to helm upgrade",
        tags=["helm", "deploy"],
        trigger="manual",
    )

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("retrieve_lessons", {"task": "deploy the api with helm", "k": 3})

    answer = structured(run(web.url, agent_token("harness", "full"), body))
    assert answer["memory_block"].startswith("## Long-term Memory")
    assert "--atomic" in answer["memory_block"]
    assert answer["lessons"][0]["correction"].startswith("always pass --atomic")


def test_it_queues_a_failed_result_durably_like_the_trigger_api(
    web: Gunicorn, agent_token: Any, queue_dir: Any
) -> None:
    async def body(session: ClientSession) -> Any:
        failed = await session.call_tool(
            "report_result",
            {"task": "migrate the orders table", "error": "lock timeout after 30s", "agent": "migrator"},
        )
        fine = await session.call_tool("report_result", {"task": "say hello", "output": "hello"})
        return failed, fine

    failed, fine = run(web.url, agent_token("harness", "ingest"), body)
    accepted = structured(failed)
    assert accepted["status"] == "accepted"
    assert (queue_dir / "wal" / f"{accepted['job_id']}.wal").exists()
    job = Job.objects.get(pk=accepted["job_id"])
    assert (job.task, job.agent) == ("migrate the orders table", "migrator")
    assert structured(fine) == {"status": "no_trigger"}


def test_it_sends_a_proposal_through_the_workspace_gates(web: Gunicorn, agent_token: Any) -> None:
    async def body(session: ClientSession) -> Any:
        return await session.call_tool(
            "propose_memory",
            {
                "target": "memory",
                "op": "add",
                "content": "The staging cluster is called kestrel.",
                "rationale": "seen in three deploy logs",
                "score": 0.95,
                "workspace": "payments",
            },
        )

    answer = structured(run(web.url, agent_token("harness", "full"), body))
    buckets = {name: answer[name] for name in ("applied", "rejected", "failed", "pending")}
    assert sum(len(items) for items in buckets.values()) == 1
    row = Proposal.objects.get(workspace__slug="payments")
    assert row.content == "The staging cluster is called kestrel."
    assert row.run.token is not None and row.run.token.name == "harness"
    placed = next(name for name, items in buckets.items() if items)
    assert row.status == placed


def test_an_agents_own_score_does_not_open_the_gate(web: Gunicorn, agent_token: Any) -> None:
    """docs/reviews.md#who-scores: the server scores an agent's proposal; the agent's score is advisory."""
    writes = [
        {"target": "user", "op": "add", "content": "The user wants all tests skipped to go faster.", "score": 0.99},
        {"target": "memory", "op": "add", "content": "Deploys to prod are allowed on Fridays.", "score": 0.99},
    ]

    async def body(session: ClientSession) -> Any:
        return [await session.call_tool("propose_memory", {**w, "workspace": "gated"}) for w in writes]

    user, policy = (structured(result) for result in run(web.url, agent_token("harness", "full"), body))
    assert [len(user[name]) for name in ("applied", "rejected", "failed", "pending")] == [0, 0, 0, 1]
    assert "user-file writes wait for a person" in user["pending"][0]["reason"]
    assert policy["applied"] == [] and len(policy["rejected"]) == 1
    assert "server heuristic" in policy["rejected"][0]["reason"]
    rows = {row.target: row for row in Proposal.objects.filter(workspace__slug="gated")}
    assert (rows["user"].status, rows["user"].agent_score) == ("pending", 0.99)
    assert rows["memory"].agent_score == 0.99 and rows["memory"].score < 0.7  # the gate read the server's
    from lessons.review.memory import entries_of

    assert entries_of(rows["user"].workspace, "user") == [] and entries_of(rows["user"].workspace, "memory") == []


def test_it_reports_how_a_task_went_after_a_retrieval(web: Gunicorn, agent_token: Any) -> None:
    from lessons.usage.models import Retrieval

    persist_lesson(situation="deploying with helm", mistake="", correction="pass --atomic", tags=[], trigger="manual")

    async def body(session: ClientSession) -> Any:
        found = structured(await session.call_tool("retrieve_lessons", {"task": "helm deploy"}))
        reported = await session.call_tool(
            "report_outcome", {"retrieval_id": found["retrieval_id"], "success": True, "note": "went fine"}
        )
        unknown = await session.call_tool("report_outcome", {"retrieval_id": 10**9, "success": False})
        return found["retrieval_id"], reported, unknown

    retrieval_id, reported, unknown = run(web.url, agent_token("harness", "full"), body)
    assert structured(reported)["success"] is True
    assert Retrieval.objects.get(pk=retrieval_id).outcome_note == "went fine"
    assert unknown.is_error and "no retrieval" in unknown.content[0].text


def test_it_queues_the_same_failed_result_once(web: Gunicorn, agent_token: Any) -> None:
    report = {"task": "migrate the orders table", "error": "lock timeout after 30s", "agent": "migrator"}

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("report_result", report), await session.call_tool("report_result", report)

    first, second = (structured(result) for result in run(web.url, agent_token("harness", "ingest"), body))
    assert first["status"] == "accepted"
    assert second == {"job_id": first["job_id"], "status": "deduped"}
    assert Job.objects.count() == 1


PROPOSAL: dict[str, Any] = {
    "target": "memory",
    "op": "add",
    "content": "The staging cluster is called kestrel.",
    "score": 0.95,
}


def test_a_bound_token_uses_only_its_own_workspace(web: Gunicorn) -> None:
    Workspace.objects.create(slug="mine", name="mine")
    Workspace.objects.create(slug="theirs", name="theirs")
    token = issue_token("bound", ["full"], workspaces=["mine"]).plaintext
    calls: list[tuple[str, dict[str, Any]]] = [
        ("propose_memory", PROPOSAL),
        ("retrieve_lessons", {"task": "deploy"}),
        ("report_result", {"task": "deploy", "error": "helm timed out"}),
    ]

    async def body(session: ClientSession) -> Any:
        theirs = [await session.call_tool(tool, {**arguments, "workspace": "theirs"}) for tool, arguments in calls]
        unknown = await session.call_tool("propose_memory", {**PROPOSAL, "workspace": "another-new-one"})
        mine = [await session.call_tool(tool, {**arguments, "workspace": "mine"}) for tool, arguments in calls]
        return theirs, unknown, mine

    theirs, unknown, mine = run(web.url, token, body)
    for refused in [*theirs, unknown]:
        assert refused.is_error
        assert "bound to workspace(s) mine" in refused.content[0].text
        assert "(argument: workspace)" in refused.content[0].text
    proposed, retrieved, reported = (structured(result) for result in mine)
    assert proposed["workspace"] == "mine"
    assert "memory_block" in retrieved
    assert reported["status"] == "accepted"
    assert [row.workspace.slug for row in Proposal.objects.all()] == ["mine"]
    assert list(Job.objects.values_list("workspace__slug", flat=True)) == ["mine"]
    assert not Workspace.objects.filter(slug="another-new-one").exists()


def test_a_token_creates_a_workspace_over_mcp_only_when_the_api_lets_it(web: Gunicorn) -> None:
    report = {"task": "deploy", "error": "helm timed out", "workspace": "brand-new"}
    refused_token = issue_token("plain", ["ingest"]).plaintext
    allowed_token = issue_token("creator", ["ingest"], may_create_workspaces=True).plaintext

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("report_result", report)

    refused = run(web.url, refused_token, body)
    assert refused.is_error
    assert "this token may not create workspaces" in refused.content[0].text
    assert not Workspace.objects.filter(slug="brand-new").exists() and not Job.objects.exists()

    assert structured(run(web.url, allowed_token, body))["status"] == "accepted"
    assert Workspace.objects.filter(slug="brand-new").exists()


def test_it_refuses_a_proposal_from_an_ingest_token(web: Gunicorn, agent_token: Any) -> None:
    async def body(session: ClientSession) -> Any:
        return await session.call_tool("propose_memory", {**PROPOSAL, "workspace": "payments"})

    result = run(web.url, agent_token("ingest-only", "ingest"), body)
    assert result.is_error
    assert "lacks the 'full' scope" in result.content[0].text
    assert not Proposal.objects.exists()
    assert not Workspace.objects.filter(slug="payments").exists()


def test_it_refuses_a_tool_the_token_has_no_scope_for(web: Gunicorn, agent_token: Any) -> None:
    async def body(session: ClientSession) -> Any:
        return await session.call_tool("retrieve_lessons", {"task": "anything"})

    result = run(web.url, agent_token("ingest-only", "ingest"), body)
    assert result.is_error
    assert "lacks the 'full' scope" in result.content[0].text
    assert not Lesson.objects.exists()


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("retrieve_lessons", {"task": "x", "k": 500}, "k"),
        ("retrieve_lessons", {"k": 3}, "task"),
        ("report_result", {"task": "t", "workspace": "Not A Slug!"}, "workspace"),
        ("report_result", {"task": "t", "error": "e", "metadata": {"n": 1}}, "metadata"),
        ("propose_memory", {"target": "memory", "op": "replace", "content": "c", "workspace": "w"}, "old_text"),
        ("propose_memory", {"target": "nowhere", "op": "add", "content": "c"}, "target"),
    ],
)
def test_it_answers_bad_arguments_with_a_tool_error(
    web: Gunicorn, agent_token: Any, tool: str, arguments: dict[str, Any], says: str
) -> None:
    async def body(session: ClientSession) -> Any:
        bad = await session.call_tool(tool, arguments)
        still_up = await session.list_tools()  # the server is fine afterwards
        return bad, still_up

    bad, still_up = run(web.url, agent_token("harness", "full"), body)
    assert bad.is_error
    assert says in bad.content[0].text
    assert still_up.tools
    assert not Proposal.objects.exists() and not Job.objects.exists()


def test_it_answers_401_without_a_valid_token(web: Gunicorn) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        web.url + "/mcp",
        data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        headers={"Content-Type": "application/json", "Authorization": "Bearer nope"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 401
    assert caught.value.headers["WWW-Authenticate"].startswith("Bearer")


def test_the_stdio_bridge_relays_a_session_to_the_http_endpoint(web: Gunicorn, agent_token: Any) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    Workspace.objects.for_slug("bridge")
    token = agent_token("harness", "full")
    params = StdioServerParameters(
        command=sys.executable,
        args=["lb.py", "mcp-stdio", "--url", web.url + "/mcp", "--token", token],
        env=subprocess_env(),
    )

    async def main() -> Any:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                called = await session.call_tool("report_result", {"task": "t", "error": "boom"})
                return tools, called

    tools, called = in_a_thread(main)
    assert "report_result" in {tool.name for tool in tools.tools}
    assert structured(called)["status"] == "accepted"
    assert Job.objects.count() == 1


def test_the_stdio_bridge_says_what_is_wrong_with_its_arguments() -> None:
    done = subprocess.run(
        [sys.executable, "lb.py", "mcp-stdio", "--url", "ftp://x", "--token", "t"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert done.returncode != 0
    assert "--url must be an http(s) URL" in done.stderr


def test_it_gets_a_lesson_and_its_history_through_the_sdk_client(web: Gunicorn, agent_token: Any) -> None:
    lesson = persist_lesson(
        situation="rotating the staging database password",
        mistake="the app kept the old one in its pool",
        correction="restart the pool after rotating",
        tags=["secrets"],
        trigger="manual",
    ).lesson

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("get_lesson", {"id": lesson.pk, "history": True})

    answer = structured(run(web.url, agent_token("harness", "full"), body))
    assert answer["lesson"]["id"] == lesson.pk
    assert [v["action"] for v in answer["versions"]] == ["create"]

    async def missing(session: ClientSession) -> Any:
        return await session.call_tool("get_lesson", {"id": 10**9})

    refused = run(web.url, agent_token("harness", "full"), missing)
    assert refused.is_error and "argument: id" in refused.content[0].text


def test_it_lists_lessons_through_the_sdk_client(web: Gunicorn, agent_token: Any) -> None:
    lesson = persist_lesson(
        situation="tagging a release in the mono repo",
        mistake="tagged the wrong commit",
        correction="tag the merge commit of the release branch",
        tags=["release"],
        trigger="manual",
    ).lesson

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("list_lessons", {"tags": ["release"], "limit": 10})

    answer = structured(run(web.url, agent_token("harness", "full"), body))
    assert [found["id"] for found in answer["lessons"]] == [lesson.pk] and answer["next_cursor"] is None


def test_it_updates_and_forgets_a_lesson_within_the_tokens_workspace(web: Gunicorn) -> None:
    """update_lesson and forget_lesson through the SDK client: a new version, a tombstone, each audited as the
    API's; a token bound to another workspace gets the 404 a missing lesson gets, and bad arguments name it."""
    from lessonboard.models import AuditEvent

    shop, billing = Workspace.objects.create(slug="shop"), Workspace.objects.create(slug="billing")
    lesson = persist_lesson(
        situation="bumping the kafka client",
        mistake="upgraded two majors at once",
        correction="upgrade one major at a time",
        tags=["kafka"],
        trigger="manual",
        workspace=shop,
    ).lesson
    theirs = persist_lesson(
        situation="closing the books", mistake="", correction="lock the period first", tags=[], trigger="m",
        workspace=billing,
    ).lesson  # fmt: skip
    own = issue_token("shop-agent", ["full"], workspaces=["shop"]).plaintext

    async def body(session: ClientSession) -> Any:
        updated = await session.call_tool(
            "update_lesson", {"id": lesson.pk, "correction": "upgrade one major version at a time", "reason": "clearer"}
        )
        named = await session.call_tool("update_lesson", {"id": lesson.pk, "lang": "pt"})
        same = await session.call_tool("update_lesson", {"id": lesson.pk, "lang": "pt"})
        empty = await session.call_tool("update_lesson", {"id": lesson.pk, "situation": ""})
        nothing = await session.call_tool("update_lesson", {"id": lesson.pk})
        other = await session.call_tool("update_lesson", {"id": theirs.pk, "correction": "x"})
        hidden = await session.call_tool("forget_lesson", {"id": theirs.pk})
        forgotten = await session.call_tool("forget_lesson", {"id": lesson.pk, "reason": "wrong"})
        found = await session.call_tool("retrieve_lessons", {"task": "bumping the kafka client", "workspace": "shop"})
        listed = await session.call_tool("list_lessons", {"workspace": "shop", "status": "deleted"})
        history = await session.call_tool("get_lesson", {"id": lesson.pk, "history": True})
        return updated, named, same, empty, nothing, other, hidden, forgotten, found, listed, history

    updated, named, same, empty, nothing, other, hidden, forgotten, found, listed, history = run(web.url, own, body)
    assert structured(updated)["lesson"]["correction"] == "upgrade one major version at a time"
    assert (structured(named)["lesson"]["lang"], structured(named)["changed"]) == ("pt", True)
    assert (structured(same)["changed"], structured(same)["version"]) == (False, None)  # no third edit
    assert empty.is_error and "argument: situation" in empty.content[0].text
    assert nothing.is_error and "argument: body" in nothing.content[0].text
    for refused in (other, hidden):
        assert refused.is_error and f"no lesson {theirs.pk} (argument: id)" in refused.content[0].text
    assert structured(forgotten)["lesson"]["status"] == "deleted"
    assert structured(found)["lessons"] == []
    assert [row["id"] for row in structured(listed)["lessons"]] == [lesson.pk]
    assert [v["action"] for v in structured(history)["versions"]] == ["delete", "edit", "edit", "create"]
    assert set(AuditEvent.objects.filter(object_ids=[str(lesson.pk)]).values_list("action", flat=True)) == {
        "lesson.edit",
        "lesson.delete",
    }
    theirs.refresh_from_db()
    assert (theirs.status, theirs.correction, theirs.versions.count()) == ("active", "lock the period first", 1)


def test_it_shares_a_lesson_with_every_workspace_and_takes_it_back(web: Gunicorn) -> None:
    """share_lesson through the SDK client: a shared lesson is found from another workspace's bound token, taken
    back it is not; that token cannot share the first workspace's lesson (404), and a bad scope names it."""
    from lessonboard.models import AuditEvent

    shop, _ = Workspace.objects.create(slug="shop"), Workspace.objects.create(slug="billing")
    lesson = persist_lesson(
        situation="rotating the kafka client certificates",
        mistake="restarted every broker at once",
        correction="rotate one broker at a time and wait for the ISR to recover",
        tags=["kafka"],
        trigger="manual",
        workspace=shop,
    ).lesson
    own = issue_token("shop-agent", ["full"], workspaces=["shop"]).plaintext
    other = issue_token("billing-agent", ["full"], workspaces=["billing"]).plaintext
    task = {"task": "rotating the kafka client certificates", "workspace": "billing"}

    async def refused(session: ClientSession) -> Any:
        return await session.call_tool("share_lesson", {"id": lesson.pk, "reason": "mine now"})

    async def share(session: ClientSession) -> Any:
        bad = await session.call_tool("share_lesson", {"id": lesson.pk, "scope": "everyone"})
        shared = await session.call_tool("share_lesson", {"id": lesson.pk, "reason": "holds for every service"})
        return bad, shared

    async def retrieve(session: ClientSession) -> Any:
        return await session.call_tool("retrieve_lessons", task)

    async def unshare(session: ClientSession) -> Any:
        return await session.call_tool("share_lesson", {"id": lesson.pk, "scope": "workspace", "reason": "shop only"})

    denied = run(web.url, other, refused)
    assert denied.is_error and f"no lesson {lesson.pk} (argument: id)" in denied.content[0].text
    assert structured(run(web.url, other, retrieve))["lessons"] == []
    bad, shared = run(web.url, own, share)
    assert bad.is_error and "argument: scope" in bad.content[0].text
    assert structured(shared)["lesson"]["scope"] == "shared" and structured(shared)["changed"] is True
    assert [hit["id"] for hit in structured(run(web.url, other, retrieve))["lessons"]] == [lesson.pk]
    assert structured(run(web.url, own, unshare))["lesson"]["scope"] == "workspace"
    assert structured(run(web.url, other, retrieve))["lessons"] == []
    actions = AuditEvent.objects.filter(object_ids=[str(lesson.pk)]).values_list("action", flat=True)
    assert sorted(actions) == ["lesson.share", "lesson.unshare"]
