"""The base64-lines transport: what a provider whose process API carries text hands back becomes bytes again."""

from __future__ import annotations

import asyncio

import pytest

from rlm_adapters.core.sandbox.cloud.transport import LineDecoder, command_line
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


def test_a_command_line_runs_with_exactly_the_environment_given() -> None:
    line = command_line(["python3", "-c", "print('a b')"], {"HOME": "/tmp/rlm x"})
    assert line == "exec env -i 'HOME=/tmp/rlm x' python3 -c 'print('\"'\"'a b'\"'\"')'"
    assert command_line(["true"], {}, replace_shell=False) == "env -i true"
