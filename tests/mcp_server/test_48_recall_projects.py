"""Issue 48, item 7: `rlm_recall` reads the current project's transcripts, and others' only when told to.

Two projects are planted under one Claude Code projects folder, named as Claude Code names them: the one the
server serves (``app``) and a neighbour whose path starts the same (``app-old``), whose transcript holds a pasted
key. From ``app``, ``session="all"``, the neighbour's session id, a link planted in ``app``'s folder and a
"current" session recorded for the neighbour all leave the key out of the run; ``--recall-projects all``
reads both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.recall.transcripts import project_folder, project_folder_name
from rlm_adapters.mcp_server.setup.config import parse_config
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig

MINE, THEIRS = "0b6c3f1e-aaaa-4c1b-9f3e-2a1d5c4b3a21", "7d2a0c1f-bbbb-4e5f-8a9b-1c2d3e4f5a6b"
PASTED_KEY = "sk-neighbour-pasted-key-31337"
# The run's answer: the sessions it was given, and whether the neighbour's key was among what it could read.
REPORT = (
    "```repl\nFINAL(' '.join(sorted(d['id'] for d in context)) + "
    f"(' LEAKED' if {PASTED_KEY!r} in str(context) else ''))\n```"
)


def transcript(session: str, said: str) -> str:
    record = {"type": "user", "sessionId": session, "timestamp": "2026-12-01T14:02:00.000Z",
              "message": {"role": "user", "content": said}}  # fmt: skip
    return json.dumps(record) + "\n"


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(projects folder, this project, the neighbour), each project with one session in its own folder."""
    projects, mine, theirs = tmp_path / "claude" / "projects", tmp_path / "work" / "app", tmp_path / "work" / "app-old"
    for project, session, said in ((mine, MINE, "the deploy port is 8731"), (theirs, THEIRS, f"key {PASTED_KEY}")):
        project.mkdir(parents=True)
        folder = projects / project_folder_name(str(project))
        folder.mkdir(parents=True)
        (folder / f"{session}.jsonl").write_text(transcript(session, said))
    return projects, mine, theirs


async def recall(config: object, **arguments: str) -> tuple[bool, str]:
    """Whether the call failed, and its text without the sources block."""
    async with Client(build_server(config)) as client:  # type: ignore[arg-type]
        result = await client.call_tool("rlm_recall", {"query": "what was said?", **arguments})
    return result.is_error, result.content[0].text.split("\n\nSources:")[0]  # type: ignore[union-attr]


async def test_only_this_projects_transcripts_are_read_by_default(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, planted: tuple[Path, Path, Path]
) -> None:
    projects, mine, _theirs = planted
    fake_server.root = scripted_root([REPORT])
    config = make_config(transcripts=projects, project=mine)
    assert await recall(config, session="all") == (False, MINE)
    failed, text = await recall(config, session=THEIRS)
    assert failed and f"no transcript of session '{THEIRS}'" in text and PASTED_KEY not in text, text
    # Told to, the server reads every project: the neighbour's key was there to be read all along.
    everything = make_config(transcripts=projects, project=mine, recall_projects="all")
    assert await recall(everything, session="all") == (False, f"{MINE} {THEIRS} LEAKED")


async def test_links_and_a_session_recorded_for_another_project_stay_out(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, planted: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    projects, mine, theirs = planted
    fake_server.root = scripted_root([REPORT])
    folder, neighbour = projects / project_folder_name(str(mine)), projects / project_folder_name(str(theirs))
    (folder / "linked.jsonl").symlink_to(neighbour / f"{THEIRS}.jsonl")
    (folder / "linked-folder").symlink_to(neighbour, target_is_directory=True)
    config = make_config(transcripts=projects, project=mine)
    assert await recall(config, session="all") == (False, MINE)
    # The plugin's hook recorded the neighbour's session as the newest: "current" finds no transcript of it here.
    cache = tmp_path / "cache" / "rlm-adapters"
    cache.mkdir(parents=True, mode=0o700)
    (cache / "claude-sessions.json").write_text(json.dumps({"sessions": {str(theirs): {"session_id": THEIRS}}}))
    (cache / "claude-sessions.json").chmod(0o600)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        failed, text = await recall(config)
    assert failed and THEIRS in text and PASTED_KEY not in text, text


async def test_a_project_with_no_transcripts_yet_names_the_setting(
    make_config: MakeConfig, planted: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    projects, _mine, _theirs = planted
    fresh = tmp_path / "work" / "fresh"
    fresh.mkdir()
    failed, text = await recall(make_config(transcripts=projects, project=fresh), session="all")
    assert failed and f"no Claude Code transcripts of this project ({fresh}) yet" in text, text
    assert "--recall-projects all" in text


def test_the_project_is_claude_project_dir_else_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    base = ["--root", str(tmp_path), "--transcripts", str(tmp_path)]
    assert parse_config(base, environ={}).project == tmp_path
    assert parse_config(base, environ={}).recall_projects == "current"
    given = parse_config(base, environ={"CLAUDE_PROJECT_DIR": "/work/app"})
    assert given.project == Path("/work/app")
    assert parse_config([*base, "--recall-projects", "all"], environ={}).recall_projects == "all"
    assert parse_config(base, environ={"RLM_MCP_RECALL_PROJECTS": "all"}).recall_projects == "all"
    with pytest.raises(ConfigurationError, match="RLM_MCP_RECALL_PROJECTS='every' is not one of current, all"):
        parse_config(base, environ={"RLM_MCP_RECALL_PROJECTS": "every"})
    with pytest.raises(ConfigurationError, match="CLAUDE_PROJECT_DIR='app' is not an absolute path"):
        parse_config(base, environ={"CLAUDE_PROJECT_DIR": "app"})


def test_folder_names_are_claude_codes() -> None:
    # Claude Code's sanitizePath, run by Node on these paths (UTF-16 units; djb2 past 200 of them).
    assert project_folder_name("/Users/foo/my-project") == "-Users-foo-my-project"
    assert project_folder_name("/work/my.app_2 (copy)") == "-work-my-app-2--copy-"
    assert project_folder_name("/a/😀b/é") == "-a---b--"
    long = "/x" * 150
    assert project_folder_name(long) == "-x" * 100 + "-4y6yx2"
    assert project_folder_name("/home/u/" + "deep/" * 60 + "😀z").endswith("-deep-de-2ggevw")


def test_a_long_path_is_found_by_its_hash_and_never_guessed(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    long, other = Path("/" + "a" * 120 + "/" + "b" * 120), Path("/" + "a" * 120 + "/" + "b" * 119 + "c")
    named = projects / project_folder_name(str(long))
    assert project_folder(projects, long) == named  # no folder yet: where Claude Code will write it
    # Claude Code under Bun names it with another hash: another project's folder with the same cut name is
    # never taken for this one's.
    (projects / (project_folder_name(str(other))[:200] + "-bunhash1")).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"over 200 characters.*--recall-projects all"):
        project_folder(projects, long)
    named.mkdir()
    assert project_folder(projects, long) == named
