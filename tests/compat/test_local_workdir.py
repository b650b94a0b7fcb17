"""The reference's ``local`` REPL chdirs into a temp folder per cell, which races between threads (its
bug #180). Ours gives each run its own folder for `open()` without touching the process's working folder."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from .helpers import by_turn, final, make

WRITE = "```repl\nwith open('notes.txt', 'w') as f:\n    f.write(context)\nprint(open('notes.txt').read())\n```"


def test_a_relative_write_does_not_land_in_the_callers_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    root = by_turn(WRITE, final("written"))
    result = make(root).completion("run data")
    assert result.response == "written" and "run data" in root.calls[1][-1]["content"]
    assert list(tmp_path.iterdir()) == [] and Path.cwd() == tmp_path


def test_concurrent_runs_each_read_their_own_file_and_the_cwd_never_moves(tmp_path: Path) -> None:
    cwd = os.getcwd()

    async def main() -> list[str]:
        code = WRITE.replace("print(", "import time\ntime.sleep(0.05)\nprint(") + "\n"
        runs = [
            make(by_turn(code + "```repl\nFINAL(open('notes.txt').read())\n```")).acompletion(f"run {i}")
            for i in range(6)
        ]
        return [r.response for r in await asyncio.gather(*runs)]

    assert asyncio.run(main()) == [f"run {i}" for i in range(6)]
    assert os.getcwd() == cwd
