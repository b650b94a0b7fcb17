"""Issue 48 item 8: trajectories were world-readable.

The MCP server's default folder ``~/.cache/rlm-adapters/mcp-trajectories`` was made 0755 with 0644 files (the
documents store beside it is 0700, the cache 0600), and a second user grepped a pasted key out of one. Now every
trajectory file is created 0600 and never through a link, a folder the logger makes is 0700, and the server's
default folder is closed (0700) even where an older version left it open
(tests/mcp_server/test_48_trajectory_folder.py).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rlm_adapters import RLM, RLMLogger, ScriptedModel
from rlm_adapters.core.adapter_kit import append_record

PASTED = "sk-proj-PASTED-INTO-THE-QUERY"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_rlm_logger_makes_its_folder_and_files_private_everywhere(tmp_path: Path) -> None:
    """`rlm ask --log-dir`, `rlm serve --log-dir` and `RLMLogger` in code write through the same logger."""
    folder = tmp_path / "new" / "logs"
    rlm = RLM(backend=ScriptedModel(lambda messages: "FINAL(done)"), environment="local", logger=RLMLogger(folder))
    result = rlm.completion("context", f"question with {PASTED}")
    assert result.trajectory_file is not None
    append_record(result.trajectory_file, {"type": "sources", "kind": "sources"})  # the adapters' late record
    assert _mode(folder) == 0o700 and _mode(result.trajectory_file) == 0o600
    assert result.trajectory_file.read_text().count("\n") >= 3


@pytest.mark.parametrize("plant", ["symlink", "hard link"])
def test_a_link_planted_at_the_logs_name_is_not_written_through(tmp_path: Path, plant: str) -> None:
    """In a folder others can write (a shared --log-dir), the next log's name planted as a link to a victim file."""
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o777)
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's file\n")
    logger = RLMLogger(folder)
    run_id = "0123abcd" + "0" * 24
    first = logger.open_run(run_id, {})  # learn the name the logger gives this run
    assert first.path is not None
    first.close()
    first.path.unlink()
    if plant == "symlink":
        first.path.symlink_to(victim)
    else:
        os.link(victim, first.path)
    with pytest.raises(OSError):  # ELOOP for a link; a named refusal for a second name of another file
        logger.open_run(run_id, {})
    with pytest.raises(OSError):
        append_record(first.path, {"type": "sources"})
    assert victim.read_text() == "the victim's file\n"
    if plant == "hard link":
        with pytest.raises(PermissionError, match="not a plain file of this user's with one name"):
            logger.open_run(run_id, {})


def test_a_run_resumed_under_its_own_id_rewrites_its_own_log(tmp_path: Path) -> None:
    """The same id within the same second (a resumed run) reuses the run's own file, as before, still 0600."""
    logger = RLMLogger(tmp_path / "logs")
    run_id = "89abcdef" + "0" * 24
    first = logger.open_run(run_id, {"query": "first"})
    assert first.path is not None
    first.close()
    first.path.chmod(0o644)
    second = logger.open_run(run_id, {"query": "second"})
    second.close()
    if second.path == first.path:  # the clock did not tick between the two
        assert "second" in first.path.read_text() and "first" not in first.path.read_text()
    assert second.path is not None and _mode(second.path) == 0o600
