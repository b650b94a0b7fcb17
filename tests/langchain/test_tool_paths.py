"""`RLMTool(roots=["./notes"])` reads `./notes`, as the user means (issue 17, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_adapters import ScriptedModel
from rlm_adapters.langchain import ChatRLM, RLMTool


def tool(roots: list[str | Path]) -> RLMTool:
    """A tool whose root model answers with the ids of the documents it was given."""
    llm = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(["```repl\nFINAL(', '.join(d['id'] for d in context))\n```"], model_name="root"),
        environment="local",
    )
    return RLMTool(llm=llm, roots=roots)


def test_a_relative_root_and_path_name_the_same_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.md").write_text("buy milk")
    monkeypatch.chdir(tmp_path)
    # The file the answer names is cited whole: it was read, however short it is.
    assert tool(["./notes"]).invoke({"query": "which files?", "paths": ["./notes"]}) == "todo.md\n\nSources:\n- todo.md"


def test_a_refused_path_speaks_of_roots_not_of_a_cli_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.md").write_text("buy milk")
    (tmp_path / "secret.txt").write_text("s")
    monkeypatch.chdir(tmp_path)
    answer = tool(["notes"]).invoke({"query": "q", "paths": ["secret.txt"]})
    assert "outside the allowed roots" in answer and "roots=" in answer
    assert "(e.g. --root)" not in answer
