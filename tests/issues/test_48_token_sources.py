"""Issue 48, item 6: a server's token comes from a private file or the environment, not the command line.

Any local user reads a process's arguments (``/proc/PID/cmdline``), and for `rlm-mcp` the token is the
principal that owns the runs: an attacker who read ``--token SECRET`` listed the victim's task and read its result.
Both servers take ``--token-file FILE`` (or ``*_TOKEN_FILE``) and their ``*_TOKEN`` variable; ``--token`` still
works, with one warning line. A token file someone else could read, write or own is refused in one line, before
the server starts; so are a FIFO or a device (refused at once, never waited on) and a file holding more than a
token.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from rlm_adapters.cli import main as rlm_main
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.http_guard import TokenNames, read_token_file, server_token
from rlm_adapters.mcp_server import __main__ as mcp_main
from rlm_adapters.mcp_server.setup.config import parse_config

TOKEN = "tok-0123456789abcdef"
NAMES = TokenNames("rlm serve", "RLM_SERVE_TOKEN", "RLM_SERVE_TOKEN_FILE")
NOBODY = 65534
SERVE_ENV = ("RLM_SERVE_TOKEN", "RLM_SERVE_TOKEN_FILE", "RLM_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL")


def token_file(folder: Path, text: str = TOKEN + "\n", mode: int = 0o600, name: str = "token") -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(mode)
    return path


# -- where the token comes from ------------------------------------------------------------------------------
def test_the_token_comes_from_a_private_file_or_the_variables(tmp_path: Path) -> None:
    path = token_file(tmp_path)
    assert server_token(NAMES, None, str(path), {}) == TOKEN  # the line's newline is not the token's
    assert server_token(NAMES, None, None, {"RLM_SERVE_TOKEN": TOKEN}) == TOKEN
    assert server_token(NAMES, None, None, {"RLM_SERVE_TOKEN_FILE": str(path)}) == TOKEN
    assert server_token(NAMES, "flag", None, {"RLM_SERVE_TOKEN": TOKEN}) == "flag"  # a flag wins over a variable
    assert server_token(NAMES, None, None, {"RLM_SERVE_TOKEN": ""}) is None
    with pytest.raises(ConfigurationError, match="--token and --token-file contradict each other"):
        server_token(NAMES, "flag", str(path), {})
    with pytest.raises(ConfigurationError, match="RLM_SERVE_TOKEN and RLM_SERVE_TOKEN_FILE are both set"):
        server_token(NAMES, None, None, {"RLM_SERVE_TOKEN": TOKEN, "RLM_SERVE_TOKEN_FILE": str(path)})


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o700 | 0o004])
def test_a_token_file_others_may_read_or_write_is_refused_in_one_line(tmp_path: Path, mode: int) -> None:
    path = token_file(tmp_path, mode=mode)
    with pytest.raises(ConfigurationError) as refused:
        read_token_file(str(path))
    message = str(refused.value)
    assert f"may be read or written by others (mode {oct(mode)}): chmod 600 {path}" in message
    assert "\n" not in message and TOKEN not in message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_token_file_another_user_owns_is_refused(tmp_path: Path) -> None:
    path = token_file(tmp_path)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(ConfigurationError, match=f"belongs to another user \\(uid {NOBODY}\\)"):
        read_token_file(str(path))
    # A link in a shared folder, planted to point at a file its planter owns, is judged by that file.
    link = tmp_path / "planted"
    link.symlink_to(path)
    with pytest.raises(ConfigurationError, match="belongs to another user"):
        read_token_file(str(link))


def test_a_link_to_a_private_file_of_ours_is_read(tmp_path: Path) -> None:
    # Secret stores mount tokens through links: the file read is the one checked (fstat of what was opened).
    link = tmp_path / "link"
    link.symlink_to(token_file(tmp_path))
    assert read_token_file(str(link)) == TOKEN
    (tmp_path / "open-link").symlink_to(token_file(tmp_path, mode=0o644, name="open"))
    with pytest.raises(ConfigurationError, match="may be read or written by others"):
        read_token_file(str(tmp_path / "open-link"))


def test_what_is_not_a_token_file_is_refused_at_once(tmp_path: Path) -> None:
    refusals = {
        "/dev/zero": "is not a regular file",
        str(tmp_path): "is not a regular file",
        str(tmp_path / "missing"): "cannot be read (No such file or directory)",
        str(token_file(tmp_path, "", name="empty")): "is empty",
        str(token_file(tmp_path, "two words\n", name="two")): "holds more than one word",
        str(token_file(tmp_path, "a\nb\n", name="lines")): "holds more than one word",
        str(token_file(tmp_path, "x" * 5000, name="big")): "is over 4096 bytes",
    }
    for path, why in refusals.items():
        with pytest.raises(ConfigurationError, match=re.escape(why)):
            read_token_file(path)
    (tmp_path / "bytes").write_bytes(b"\xff\xfe")
    (tmp_path / "bytes").chmod(0o600)
    with pytest.raises(ConfigurationError, match="is not UTF-8 text"):
        read_token_file(str(tmp_path / "bytes"))


# -- rlm serve -------------------------------------------------------------------------------------------------
def serve(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any]:
    """`rlm serve ARGV` up to the point it would listen: its exit status and the app it would serve."""
    from rlm_adapters.serve import shutdown

    started: list[Any] = []
    monkeypatch.setattr(shutdown, "serve_until_stopped", lambda app, **_: started.append(app) or 0)
    spec = "m=root,base_url=http://127.0.0.1:9/v1"
    code = rlm_main(["serve", "--model", spec, "--environment", "subprocess", *argv])
    return code, started[0] if started else None


async def models_status(app: Any, key: str | None) -> int:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        return (await client.get("/v1/models", headers=headers)).status_code


def test_rlm_serve_takes_its_token_from_a_file_or_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in SERVE_ENV:
        monkeypatch.delenv(name, raising=False)
    code, app = serve(["--token-file", str(token_file(tmp_path))], monkeypatch)
    assert code == 0
    assert [asyncio.run(models_status(app, key)) for key in (None, "wrong", TOKEN)] == [401, 401, 200]
    monkeypatch.setenv("RLM_SERVE_TOKEN", TOKEN)
    code, app = serve([], monkeypatch)
    assert [asyncio.run(models_status(app, key)) for key in (None, TOKEN)] == [401, 200]
    assert "--token" not in capsys.readouterr().err  # neither warns


def test_rlm_serve_still_takes_token_but_warns_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in SERVE_ENV:
        monkeypatch.delenv(name, raising=False)
    code, app = serve(["--token", TOKEN], monkeypatch)
    assert code == 0 and asyncio.run(models_status(app, TOKEN)) == 200
    warned = [line for line in capsys.readouterr().err.splitlines() if "--token is in the process list" in line]
    assert warned == [NAMES.flag_warning()]
    assert "--token-file FILE" in warned[0] and "RLM_SERVE_TOKEN" in warned[0] and TOKEN not in warned[0]


def test_rlm_serve_refuses_an_open_token_file_before_it_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in SERVE_ENV:
        monkeypatch.delenv(name, raising=False)
    path = token_file(tmp_path, mode=0o644)
    code, app = serve(["--token-file", str(path), "--host", "0.0.0.0"], monkeypatch)
    err = capsys.readouterr().err.strip()
    assert (code, app) == (2, None)
    assert (
        err == f"rlm serve: --token-file {str(path)!r} may be read or written by others (mode 0o644): chmod 600 {path}"
    )


# -- rlm-mcp ---------------------------------------------------------------------------------------------------
def test_rlm_mcp_takes_its_token_from_a_file_or_the_variables(tmp_path: Path) -> None:
    path = token_file(tmp_path)
    base = ["--root", str(tmp_path), "--http"]
    assert parse_config([*base, "--token-file", str(path)], environ={}).token == TOKEN
    assert parse_config(base, environ={"RLM_MCP_TOKEN_FILE": str(path)}).token == TOKEN
    assert parse_config(base, environ={"RLM_MCP_TOKEN": TOKEN}).token == TOKEN
    path.chmod(0o604)
    with pytest.raises(ConfigurationError, match=r"RLM_MCP_TOKEN_FILE .* may be read or written by others"):
        parse_config(base, environ={"RLM_MCP_TOKEN_FILE": str(path)})


def test_rlm_mcp_warns_on_token_and_refuses_an_open_file_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("RLM_MCP_TOKEN", "RLM_MCP_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    served: list[object] = []
    monkeypatch.setattr(mcp_main.anyio, "run", lambda *args: served.append(args))
    base = ["--http", "--root", str(tmp_path), "--log-dir", str(tmp_path / "logs")]
    assert mcp_main.main([*base, "--token", TOKEN]) == 0 and served
    assert TokenNames("rlm-mcp", "RLM_MCP_TOKEN", "RLM_MCP_TOKEN_FILE").flag_warning() in capsys.readouterr().err
    assert mcp_main.main([*base, "--token-file", str(token_file(tmp_path))]) == 0
    assert "--token is in the process list" not in capsys.readouterr().err
    open_file = token_file(tmp_path, mode=0o666, name="open")
    assert mcp_main.main([*base, "--token-file", str(open_file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "may be read or written by others (mode 0o666): chmod 600" in err[0], err


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    # A blocking open of a FIFO no one writes never returns: the server would hang before it starts.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    refusals: list[str] = []

    def read() -> None:
        try:
            read_token_file(str(fifo))
        except ConfigurationError as exc:
            refusals.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():
        with open(fifo, "w"):  # the other end: lets the blocked open return, so no thread is left behind
            pass
        pytest.fail("read_token_file waited for a writer on a FIFO")
    assert len(refusals) == 1 and "is not a regular file" in refusals[0]


def test_print_config_never_writes_a_token_source_into_a_clients_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A client starts a stdio server: a token (or where it lies) has no place in its configuration file.
    path = str(token_file(tmp_path))
    assert mcp_main.main(["--print-config", "json", "--root", str(tmp_path), "--token-file", path]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "drop --token-file" in err
