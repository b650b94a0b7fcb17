"""The worker's standard streams: an empty stdin (model code cannot read the host's frames, and
multiprocessing works), and a stdout whose ``.buffer`` takes bytes into the cell's output."""

from __future__ import annotations

from pathlib import Path

from tests.core.sandbox.helpers import start

_MIB = 1024 * 1024


async def test_reading_stdin_gets_nothing_and_the_protocol_goes_on(tmp_path: Path) -> None:
    sandbox = await start(tmp_path, memory_limit=741 * _MIB, cell_timeout=20.0)
    try:
        result = await sandbox.execute("import sys\nprint(repr(sys.stdin.read()), repr(sys.stdin.readline()))", None)
        assert result.error is None and result.output == "'' ''\n"
        after = await sandbox.execute("print(llm_query('still there?'))", None)
        assert after.output == "answer to still there?\n"
    finally:
        await sandbox.aclose()


async def test_a_multiprocessing_pool_runs_in_the_sandbox(tmp_path: Path) -> None:
    # Each pool child closes sys.stdin; when that was the protocol's buffer, whose lock the reader thread
    # held at the fork, every child hung and the cell ran into its time limit.
    sandbox = await start(tmp_path, memory_limit=742 * _MIB, cell_timeout=20.0)
    try:
        code = "from multiprocessing import Pool\nwith Pool(2) as pool:\n    print(pool.map(abs, [-1, -2, -3]))"
        result = await sandbox.execute(code, None)
        assert not result.timed_out, result
        assert result.error is None and result.output == "[1, 2, 3]\n"
    finally:
        await sandbox.aclose()


async def test_bytes_written_to_stdout_buffer_are_the_cells_output(tmp_path: Path) -> None:
    """Code that prints bytes (``sys.stdout.buffer.write``) failed with AttributeError on the routing stream."""
    sandbox = await start(tmp_path, memory_limit=743 * _MIB, cell_timeout=20.0)
    try:
        code = (
            "import sys\nsys.stdout.buffer.write(b'caf\\xc3')\nsys.stdout.buffer.write(b'\\xa9 \\xff\\n')\nprint('x')"
        )
        result = await sandbox.execute(code, None)
        assert result.error is None and result.output == "café \ufffd\nx\n"
    finally:
        await sandbox.aclose()


def test_the_context_file_is_read_exactly_as_written(tmp_path: Path) -> None:
    """Decoded from a mapping of the file (no bytes copy held beside the text), with no newline translation."""
    from rlm_adapters.core.context import write_context_file
    from rlm_adapters.core.sandbox.programs.worker.program import load_context

    for text in ("a\r\nb\rc\n", "é😀 — " * 1000, ""):
        path = write_context_file(text, tmp_path)
        assert load_context({"path": str(path), "format": "text"}) == text


async def test_a_subprocess_run_sees_the_same_context_as_a_local_one(tmp_path: Path) -> None:
    from rlm_adapters import RLM
    from rlm_adapters.testing import by_turn

    context = "line one\r\nline two\rline three é\n"
    root = by_turn("```repl\nprint(repr(context))\n```", "FINAL_VAR(context)")
    results = [await RLM(backend=root, environment=kind).acompletion(context, "q") for kind in ("local", "subprocess")]
    assert [r.response for r in results] == [context, context]
