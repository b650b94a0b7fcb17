"""The base64-lines transport: what a provider whose process API carries text hands back becomes bytes again."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from rlm_adapters.core.sandbox.cloud.transport import MAX_LINE_CHARS, LineDecoder, RemoteProcess, command_line
from rlm_adapters.core.sandbox.programs.worker import ProtocolError


def test_the_line_decoder_joins_split_lines_and_refuses_garbage() -> None:
    async def run(pieces: list[str | bytes]) -> bytes:
        decoder = LineDecoder()
        for piece in pieces:
            decoder.feed(piece)
        decoder.close()
        return await decoder.reader.read()

    assert asyncio.run(run(["aGVs", b"bG8=\nIHdv", "cmxk\n", "\n"])) == b"hello world"
    with pytest.raises(ProtocolError, match="not base64"):
        asyncio.run(run(["aGVsbG8=\n", "Traceback (most recent call last):\n"]))


async def test_a_line_without_end_is_refused_at_the_bound_in_linear_time() -> None:
    """Issue 24, defect 3: 48 MiB without a newline took the host 20-31 s (the whole buffer re-split per chunk)."""
    piece = "A" * (1 << 16)
    decoder = LineDecoder()
    started = time.perf_counter()
    for _ in range(48 * 16):
        decoder.feed(piece)
    assert time.perf_counter() - started < 0.5
    with pytest.raises(ProtocolError, match=f"a stdout line runs past {MAX_LINE_CHARS:,} characters"):
        await decoder.reader.read()
    one_long = LineDecoder()
    one_long.feed("A" * (MAX_LINE_CHARS + 4) + "\n")  # arrived whole: refused all the same
    with pytest.raises(ProtocolError, match="a stdout line of 1,048,580 characters"):
        await one_long.reader.read()


async def test_honest_lines_decode_however_the_provider_cuts_them() -> None:
    """The bootstrap's 87,384-character lines, cut anywhere, even into one-character pieces."""
    payload = bytes(range(256)) * (1 << 12)  # 1 MiB
    lines = "".join(
        base64.b64encode(payload[i : i + (1 << 16)]).decode() + "\n" for i in range(0, len(payload), 1 << 16)
    )
    for cut in (len(lines), 99_991, 997, 1):
        decoder = LineDecoder()
        for start in range(0, len(lines), cut):
            decoder.feed(lines[start : start + cut])
        decoder.close()
        assert await decoder.reader.read() == payload


class _Process(RemoteProcess):
    async def send(self, data: bytes) -> None: ...
    async def kill(self) -> None: ...
    async def exit_code(self) -> int | None:
        return None


async def test_a_flood_on_stderr_keeps_a_bounded_tail() -> None:
    process = _Process("raw")
    for _ in range(100):
        process.feed_stderr(b"e" * (1 << 20))
    assert len(process.stderr) == 64 and sum(len(piece) for piece in process.stderr) <= 64 * 8192


def test_a_command_line_runs_with_exactly_the_environment_given() -> None:
    line = command_line(["python3", "-c", "print('a b')"], {"HOME": "/tmp/rlm x"})
    assert line == "exec env -i 'HOME=/tmp/rlm x' python3 -c 'print('\"'\"'a b'\"'\"')'"
    assert command_line(["true"], {}, replace_shell=False) == "env -i true"
