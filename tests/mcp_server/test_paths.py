"""Path safety through the tool: only files under the allowed roots are read, and nothing runs away."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult

from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig

LIST_IDS = '```repl\nFINAL(",".join(d["id"] for d in context))\n```'


async def _call(make_config: MakeConfig, arguments: dict[str, Any], **overrides: Any) -> CallToolResult:
    async with Client(build_server(make_config(**overrides))) as client:
        return await client.call_tool("rlm_query", {"detail": "full", "query": "q", **arguments})


def _text(result: CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


@pytest.fixture(autouse=True)
def _list_ids(fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root([LIST_IDS])


async def test_traversal_is_refused(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    result = await _call(make_config, {"paths": ["../outside/secret.txt"]})
    assert result.is_error
    assert "'../outside/secret.txt'" in _text(result) and "outside the allowed roots" in _text(result)
    assert fake_server.counters.requests == 0


async def test_absolute_path_outside_the_roots_is_refused(make_config: MakeConfig, workspace: Path) -> None:
    secret = workspace.parent / "outside" / "secret.txt"
    for path in (str(secret), "/etc/passwd"):
        result = await _call(make_config, {"paths": [path]})
        assert result.is_error and "outside the allowed roots" in _text(result), path


async def test_symlink_escape_is_refused(make_config: MakeConfig, workspace: Path) -> None:
    (workspace / "link.txt").symlink_to(workspace.parent / "outside" / "secret.txt")
    result = await _call(make_config, {"paths": ["link.txt"]})
    assert result.is_error and "through a symlink" in _text(result)


async def test_symlinked_folder_escape_inside_a_folder_is_skipped(make_config: MakeConfig, workspace: Path) -> None:
    (workspace / "docs" / "escape").symlink_to(workspace.parent / "outside")
    result = await _call(make_config, {"paths": ["docs"]})
    assert not result.is_error
    # The listed files are cited whole (the answer rests on their names); the skipped one never is.
    assert _text(result) == "docs/a.md,docs/b.md\n\nSources:\n- docs/a.md\n- docs/b.md"
    assert result.structured_content is not None
    assert result.structured_content["detail"]["files_skipped"] == [
        {"path": "docs/escape", "reason": "symlink pointing outside the allowed roots"}
    ]


async def test_globs_reaching_outside_the_roots_are_refused_before_expanding(
    make_config: MakeConfig, workspace: Path
) -> None:
    outside = workspace.parent / "outside"
    relative = await _call(make_config, {"paths": ["../outside/*"]})
    hidden_dotdot = await _call(make_config, {"paths": ["docs/*/../../../outside/*"]})
    absolute = await _call(make_config, {"paths": [f"{outside}/*.txt", "docs/a.md"]})
    system = await _call(make_config, {"paths": ["/etc/*"]})
    assert relative.is_error and "contains '..'" in _text(relative)
    assert hidden_dotdot.is_error and "contains '..'" in _text(hidden_dotdot)
    assert absolute.is_error and "outside the allowed roots" in _text(absolute)
    assert system.is_error and "starts at /etc, outside the allowed roots" in _text(system)
    # Nothing outside the roots is named: the refusal comes before the glob is expanded.
    for result in (relative, absolute, system):
        assert "secret" not in _text(result) and "passwd" not in _text(result)


async def test_binary_files_are_skipped_and_listed(make_config: MakeConfig, workspace: Path) -> None:
    (workspace / "docs" / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    result = await _call(make_config, {"paths": ["docs"]})
    # The listed files are cited whole (the answer rests on their names); the skipped one never is.
    assert _text(result) == "docs/a.md,docs/b.md\n\nSources:\n- docs/a.md\n- docs/b.md"
    assert result.structured_content is not None
    assert result.structured_content["detail"]["files_skipped"] == [{"path": "docs/image.png", "reason": "binary file"}]


async def test_a_skipped_file_the_answer_names_is_never_cited(
    make_config: MakeConfig, workspace: Path, fake_server: FakeOpenAIServer
) -> None:
    (workspace / "docs" / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    fake_server.root = scripted_root(['```repl\nFINAL("docs/a.md and docs/image.png")\n```'])
    result = await _call(make_config, {"paths": ["docs"]})
    assert _text(result) == (
        "docs/a.md and docs/image.png\n\nSources:\n- docs/a.md\n"
        'Unsupported: "docs/image.png" (in no text that reached a model)'
    )


async def test_a_latin1_file_is_decoded_in_its_encoding_and_marked(
    make_config: MakeConfig, workspace: Path, fake_server: FakeOpenAIServer
) -> None:
    """Not UTF-8: its encoding is found behind the converter's walls (issue 51) and the file marked as not UTF-8."""
    (workspace / "latin1.txt").write_bytes(b"caf\xe9 au lait\n")
    fake_server.root = scripted_root(['```repl\nFINAL(context[0]["text"])\n```'])
    result = await _call(make_config, {"paths": ["latin1.txt"]})
    assert _text(result) == "caf\u00e9 au lait\n"
    assert result.structured_content is not None
    assert result.structured_content["detail"]["files_read"] == [
        {"path": "latin1.txt", "size": 14, "invalid_utf8": True}  # the text's bytes: é is two in UTF-8
    ]


async def test_empty_folder_is_a_clear_error(make_config: MakeConfig, workspace: Path) -> None:
    (workspace / "empty").mkdir()
    result = await _call(make_config, {"paths": ["empty"]})
    assert result.is_error and "no readable text files" in _text(result)


async def test_missing_path_is_a_clear_error(make_config: MakeConfig) -> None:
    result = await _call(make_config, {"paths": ["nope.md"]})
    assert result.is_error and "no such file or folder: 'nope.md'" in _text(result)


async def test_vcs_dependency_and_virtualenv_folders_are_skipped(make_config: MakeConfig, workspace: Path) -> None:
    for folder in (".git", "node_modules/pkg", "env"):
        (workspace / folder).mkdir(parents=True)
        (workspace / folder / "x.md").write_text("skip me", encoding="utf-8")
    (workspace / "env" / "pyvenv.cfg").write_text("home = /usr", encoding="utf-8")
    (workspace / ".gitignore").write_text("notes.txt\n", encoding="utf-8")
    result = await _call(make_config, {"paths": ["."]})
    assert _text(result) == ".gitignore,docs/a.md,docs/b.md\n\nSources:\n- .gitignore\n- docs/a.md\n- docs/b.md"


async def test_sparse_2gb_file_is_stopped_by_the_size_cap(
    make_config: MakeConfig, workspace: Path, fake_server: FakeOpenAIServer
) -> None:
    with (workspace / "huge.log").open("wb") as handle:
        handle.truncate(2 * 1024**3)  # sparse: takes no disk space and is never read
    result = await _call(make_config, {"paths": ["huge.log"]})
    assert result.is_error
    assert "2 GiB" in _text(result) and "--max-bytes" in _text(result) and "512 MiB" in _text(result)
    assert fake_server.counters.requests == 0


async def test_max_bytes_flag_sets_the_cap(make_config: MakeConfig) -> None:
    result = await _call(make_config, {"paths": ["docs"]}, max_bytes=10)
    assert result.is_error and "over the cap of 10 bytes" in _text(result)


@pytest.mark.slow
async def test_glob_matching_100000_files_is_refused(make_config: MakeConfig, workspace: Path) -> None:
    many = workspace / "many"
    many.mkdir()
    for i in range(100_000):
        os.close(os.open(many / f"f{i:06d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    result = await _call(make_config, {"paths": ["many/*.txt"]})
    assert result.is_error
    assert "more than 50,000 files" in _text(result)


async def test_an_empty_file_is_refused_as_rlm_ask_refuses_it(
    make_config: MakeConfig, workspace: Path, fake_server: FakeOpenAIServer
) -> None:
    """Issue 51: ``rlm ask`` refused a 0-byte file with one line; ``rlm_query(paths=["zero.txt"])`` ran a model."""
    (workspace / "zero.txt").write_bytes(b"")
    (workspace / "blank").mkdir()
    (workspace / "blank" / "one.txt").write_text(" \n")
    (workspace / "blank" / "two.txt").write_bytes(b"")
    result = await _call(make_config, {"paths": ["zero.txt"]})
    assert result.is_error
    assert _text(result).endswith("the file 'zero.txt' is empty: give `paths` a file with text in it, or `text`")
    folder = await _call(make_config, {"paths": ["blank"]})
    assert folder.is_error and "every file in ['blank'] is empty (2 files): give `paths`" in _text(folder)
    spaces = await _call(make_config, {"text": " \n\t"})
    assert spaces.is_error and "`text` holds only whitespace (3 characters)" in _text(spaces)
    assert fake_server.counters.requests == 0
    # Inline text beside the empty file is something to read: the run goes ahead.
    both = await _call(make_config, {"paths": ["zero.txt"], "text": "inline words"})
    assert not both.is_error and fake_server.counters.requests == 1
