"""In-process fakes of the E2B, Modal, Prime Intellect and Daytona SDKs, with the SDKs' real shapes.

No account or network is reachable here, so each fake stands in for the provider's service while keeping
its SDK's surface honest:

- every call is checked against the REAL SDK's signature (``inspect.signature(real).bind``), so a call the
  SDK would reject by its arguments raises ``TypeError`` here too;
- the SDKs' own request / response models are used wherever the SDK uses them (Prime's
  ``CreateSandboxRequest`` / ``Sandbox`` and its real ``AsyncSandboxProcess`` fed real protobuf events;
  Daytona's ``CreateSandbox*Params``, ``SessionExecuteRequest`` / ``SessionSendInputRequest`` / ``Command``;
  a real ``modal.Image``), so a value the SDK would refuse is refused;
- each command runs for real as a local process (the bootstrap and the worker, unchanged), with the remote
  scratch folder mapped onto a local one and ``python3`` onto this interpreter; or, for the benchmark, on a
  `SimulatedWorker` that answers frames in-process after an injected latency.

`tests/core/sandbox/cloud/test_fakes.py` pins the fakes' signatures to the installed SDKs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import json
import os
import re
import shlex
import signal
import struct
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

REMOTE_SCRATCH = "/tmp/rlm"
E2B_SCRATCH = "/home/user/rlm"  # the E2B sandbox's folder: under the template user's home


def checked(real: Callable[..., Any], *, method: bool = True) -> Callable[..., None]:
    """A checker that raises TypeError for arguments `real` would not accept."""
    signature = inspect.signature(real)

    def check(*args: Any, **kwargs: Any) -> None:
        signature.bind(*((None, *args) if method else args), **kwargs)

    return check


# -- where a command runs ------------------------------------------------------------------------------


class Command:
    """A started command: what every fake needs of it."""

    pid: int

    def stdout(self) -> AsyncIterator[bytes]:
        raise NotImplementedError

    def stderr(self) -> AsyncIterator[bytes]:
        raise NotImplementedError

    async def write(self, data: bytes) -> None:
        raise NotImplementedError

    def close_stdin(self) -> None:
        raise NotImplementedError

    def signal(self, sig: int) -> None:
        raise NotImplementedError

    @property
    def returncode(self) -> int | None:
        raise NotImplementedError

    async def wait(self) -> int:
        raise NotImplementedError


Launcher = Callable[[list[str], dict[str, str], Path], Awaitable[Command]]


class LocalCommand(Command):
    """A real local process: argv with ``python3`` mapped to this interpreter, in the mapped scratch.

    Its output comes back in pieces of `CHUNK` bytes: odd-sized and tiny by default, so frames and lines
    arrive split anywhere; a test of volume sets a provider's usual 64 KiB.
    """

    CHUNK = 7

    def __init__(self, process: asyncio.subprocess.Process, chunk: int) -> None:
        self.process = process
        self.pid = process.pid
        self.chunk = chunk

    @classmethod
    async def launch(
        cls,
        argv: list[str],
        env: dict[str, str],
        root: Path,
        chunk: int | None = None,
        new_group: bool = False,
        scratch: str = REMOTE_SCRATCH,
    ) -> LocalCommand:
        mapped = [sys.executable if a == "python3" else scratch_mapped(a, scratch, root) for a in argv]
        env = {k: scratch_mapped(v, scratch, root) for k, v in env.items()}
        process = await asyncio.create_subprocess_exec(
            *mapped,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=root,
            start_new_session=new_group,
        )
        return cls(process, chunk or cls.CHUNK)

    async def _read(self, stream: asyncio.StreamReader | None) -> AsyncIterator[bytes]:
        assert stream is not None
        while piece := await stream.read(self.chunk):  # odd-sized pieces: frames and lines arrive split
            yield piece

    def stdout(self) -> AsyncIterator[bytes]:
        return self._read(self.process.stdout)

    def stderr(self) -> AsyncIterator[bytes]:
        return self._read(self.process.stderr)

    async def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        await self.process.stdin.drain()

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if _is_group_leader(self.pid):  # the bootstrap's group: the worker and all it started
                os.killpg(self.pid, sig)
            else:
                self.process.send_signal(sig)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def wait(self) -> int:
        return await self.process.wait()


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


async def local_launcher(argv: list[str], env: dict[str, str], root: Path) -> Command:
    return await LocalCommand.launch(argv, env, root)


def scratch_mapped(text: str, scratch: str, root: Path) -> str:
    """`text` with the remote scratch folder (a whole path component: ``/tmp/rlm`` or ``/tmp/rlm/...``) put
    at `root`; a host path that merely starts alike (a virtualenv at ``/tmp/rlm-venv``) stays as it is."""
    return re.sub(rf"{re.escape(scratch)}(?=/|:|$|\s|[\"'])", lambda _m: str(root), text)


async def shell_launcher(
    command: str,
    env: dict[str, str],
    root: Path,
    launcher: Launcher,
    wrap: Callable[[str], str] | None = None,
    scratch: str = REMOTE_SCRATCH,
) -> Command:  # a wrapped command is a session's: its shell leads a process group, as in a Daytona session
    """Run a command string as the provider does, through bash; ``python3`` and the scratch folder are
    mapped token by token (then re-quoted), so bash parses the same quoting the real sandbox would.
    `wrap` puts the mapped command into the provider's own script around it."""
    if launcher is not local_launcher:
        return await launcher(shlex.split(command), env, root)
    tokens = [sys.executable if t == "python3" else scratch_mapped(t, scratch, root) for t in shlex.split(command)]
    line = shlex.join(tokens)
    return await LocalCommand.launch(["/bin/bash", "-c", wrap(line) if wrap else line], env, root, new_group=bool(wrap))


async def run_to_end(command: Command) -> tuple[int, str, str]:
    """Wait for a short command; its exit code and output."""
    out, err = bytearray(), bytearray()

    async def drain(source: AsyncIterator[bytes], into: bytearray) -> None:
        async for chunk in source:
            into += chunk

    await asyncio.gather(drain(command.stdout(), out), drain(command.stderr(), err))
    return await command.wait(), out.decode(errors="replace"), err.decode(errors="replace")


class SimulatedWorker(Command):
    """A remote worker simulated in-process for the benchmark: reads the bootstrap frame and the context,
    answers ``init`` with ``ready`` and each ``exec`` with one ``llm_query`` call and a ``result``, each
    after `latency` seconds (the network round trip to a provider's region)."""

    _pids = iter(range(10_000_000, 20_000_000))

    def __init__(self, latency: float, base64_lines: bool) -> None:
        self.pid = next(self._pids)
        self.latency = latency
        self.base64_lines = base64_lines
        self._in = bytearray()
        self._out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._code: int | None = None
        self._exited = asyncio.Event()
        self._state = "boot"
        self._context_left = 0
        self._pending = b""
        self._calls = 0

    def stdout(self) -> AsyncIterator[bytes]:
        async def gen() -> AsyncIterator[bytes]:
            while (item := await self._out.get()) is not None:
                yield item

        return gen()

    def stderr(self) -> AsyncIterator[bytes]:
        async def gen() -> AsyncIterator[bytes]:
            await self._exited.wait()
            return
            yield b""

        return gen()

    async def _emit(self, message: dict[str, Any]) -> None:
        await asyncio.sleep(self.latency)
        body = json.dumps(message).encode()
        frame = struct.pack(">I", len(body)) + body
        self._out.put_nowait(base64.b64encode(frame) + b"\n" if self.base64_lines else frame)

    async def write(self, data: bytes) -> None:
        if self._code is not None:
            raise BrokenPipeError("the process has exited")
        if self.base64_lines:
            self._pending += data
            *lines, self._pending = self._pending.split(b"\n")
            data = b"".join(base64.b64decode(line) for line in lines if line.strip())
        self._in += data
        while await self._step():
            pass

    async def _step(self) -> bool:
        if self._state == "context":
            take = min(self._context_left, len(self._in))
            del self._in[:take]  # the context is dropped, not kept: only the host's side is measured
            self._context_left -= take
            if self._context_left == 0:
                self._state = "frames"
                return True
            return False
        if len(self._in) < 4:
            return False
        (length,) = struct.unpack(">I", self._in[:4])
        if len(self._in) < 4 + length:
            return False
        message = json.loads(bytes(self._in[4 : 4 + length]))
        del self._in[: 4 + length]
        if self._state == "boot":
            self._context_left = max(0, int(message["context_bytes"]))
            self._state = "context" if self._context_left else "frames"
        elif message.get("type") == "init":
            await self._emit({"type": "ready", "ok": True, "pid": self.pid, "limits": [], "python": "simulated"})
        elif message.get("type") == "exec":
            self._calls += 1
            self._cell = message["id"]
            await self._emit({"type": "call", "id": self._calls, "kind": "llm_query", "args": {"prompt": "p"}})
        elif message.get("type") == "reply":
            result = {"output": f"{message.get('value')}\n", "output_chars": 2, "variables": {}, "duration": 0.0}
            await self._emit({"type": "result", "id": self._cell, **result})
        return True

    def close_stdin(self) -> None:
        pass

    def signal(self, sig: int) -> None:
        if self._code is None:
            self._code = -sig
            self._out.put_nowait(None)
            self._exited.set()

    @property
    def returncode(self) -> int | None:
        return self._code

    async def wait(self) -> int:
        await self._exited.wait()
        assert self._code is not None
        return self._code


class FinishedCommand(Command):
    """A short command that has already run (the simulated kill program)."""

    _pids = iter(range(20_000_000, 30_000_000))

    def __init__(self) -> None:
        self.pid = next(self._pids)

    def stdout(self) -> AsyncIterator[bytes]:
        return _empty()

    def stderr(self) -> AsyncIterator[bytes]:
        return _empty()

    async def write(self, data: bytes) -> None:
        raise BrokenPipeError("the process has exited")

    def close_stdin(self) -> None:
        pass

    def signal(self, sig: int) -> None:
        pass

    @property
    def returncode(self) -> int | None:
        return 0

    async def wait(self) -> int:
        return 0


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""


def simulated_launcher(latency: float, base64_lines: bool = False) -> Launcher:
    """Starts `SimulatedWorker`s; the kill program (``os.killpg``) ends the workers of its sandbox."""
    workers: dict[Path, list[SimulatedWorker]] = {}

    async def launch(argv: list[str], env: dict[str, str], root: Path) -> Command:
        if any("os.killpg" in a for a in argv):
            for worker in workers.pop(root, []):
                worker.signal(signal.SIGKILL)
            return FinishedCommand()
        worker = SimulatedWorker(latency, base64_lines)
        workers.setdefault(root, []).append(worker)
        return worker

    return launch


class Remote:
    """One fake cloud sandbox: its scratch folder and the commands started in it."""

    def __init__(self, root: Path, launcher: Launcher) -> None:
        self.id = f"sb-{uuid.uuid4().hex[:10]}"
        self.root = root / self.id
        self.root.mkdir(parents=True)
        self.launcher = launcher
        self.commands: list[Command] = []
        self.destroyed = False

    async def start(self, launch: Awaitable[Command]) -> Command:
        """Start a command; a caller cancelled meanwhile does not stop it (the request reached the provider),
        but the command is still the machine's, so deleting the machine ends it."""
        task = asyncio.ensure_future(launch)
        try:
            command = await asyncio.shield(task)
        except asyncio.CancelledError:
            self.commands.append(await task)
            raise
        self.commands.append(command)
        return command

    async def destroy(self) -> None:
        """Deleting the machine ends every process on it, those that left their command's group included."""
        from tests.core.sandbox.helpers import descendants

        for command in self.commands:
            for pid in descendants(command.pid) if isinstance(command, LocalCommand) else []:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            command.signal(signal.SIGKILL)
        for command in self.commands:
            await command.wait()
        self.destroyed = True


class Service:
    """The provider's side shared by a fake SDK: every sandbox made, and the injected API latency."""

    def __init__(self, root: Path, launcher: Launcher = local_launcher, latency: float = 0.0) -> None:
        self.root = root
        self.launcher = launcher
        self.latency = latency
        self.remotes: list[Remote] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.made = asyncio.Event()  # set once the first sandbox exists

    async def api(self, call: str, **details: Any) -> None:
        self.calls.append((call, details))
        if self.latency:
            await asyncio.sleep(self.latency)  # the injected round trip to the provider (benchmark only)

    def new_remote(self) -> Remote:
        remote = Remote(self.root, self.launcher)
        self.remotes.append(remote)
        self.made.set()
        return remote

    def live(self) -> list[Remote]:
        return [r for r in self.remotes if not r.destroyed]


def pump_into(source: AsyncIterator[bytes], queue: asyncio.Queue[Any], end: Any) -> asyncio.Task[None]:
    async def run() -> None:
        try:
            async for chunk in source:
                queue.put_nowait(chunk)
        finally:
            queue.put_nowait(end)

    return asyncio.create_task(run())


# -- E2B -----------------------------------------------------------------------------------------------

# What the template's shell has (the worker must see none of it: the sandbox runs it under `env -i`).
E2B_TEMPLATE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/user", "E2B_SANDBOX": "true"}


class FakeE2BHandle:
    """e2b.AsyncCommandHandle of a background command: its pid, `kill`, `wait` and `exit_code`."""

    def __init__(self, command: Command, pump: asyncio.Task[None]) -> None:
        self._command = command
        self._pump = pump

    @property
    def pid(self) -> int:
        return self._command.pid

    @property
    def exit_code(self) -> int | None:
        return self._command.returncode

    async def wait(self) -> Any:
        """As the SDK's: every output event is delivered first; a non-zero exit raises `CommandExitException`."""
        from e2b.sandbox.commands.command_handle import CommandExitException, CommandResult

        code = await self._command.wait()
        await asyncio.shield(self._pump)
        if code != 0:
            raise CommandExitException(stderr="", stdout="", exit_code=code, error=None)
        return CommandResult(stderr="", stdout="", exit_code=code, error=None)

    async def kill(self) -> bool:
        self._command.signal(signal.SIGKILL)
        await self._command.wait()
        return True


class FakeE2BFiles:
    """e2b's async Filesystem: `write` puts a file under the sandbox's (mapped) folder."""

    def __init__(self, remote: Remote, service: Service) -> None:
        self.remote = remote
        self.service = service

    async def write(
        self,
        path: str,
        data: Any,
        user: str | None = None,
        request_timeout: float | None = None,
        gzip: bool = False,
        use_octet_stream: bool | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        body = data.encode() if isinstance(data, str) else data if isinstance(data, bytes) else data.read()
        await self.service.api("write", path=path, size=len(body))
        if not path.startswith(E2B_SCRATCH + "/"):
            raise PermissionError(f"the fake maps only {E2B_SCRATCH}: {path}")
        target = self.remote.root / path[len(E2B_SCRATCH) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)  # E2B makes the parents
        target.write_bytes(body)


class FakeE2BCommands:
    """e2b's async Commands: `run` a background command through bash with stdin open, `send_stdin` to it."""

    def __init__(self, remote: Remote, service: Service) -> None:
        self.remote = remote
        self.service = service
        self.handles: dict[int, tuple[Command, FakeE2BHandle]] = {}
        self.runs: list[dict[str, Any]] = []

    async def run(
        self,
        cmd: str,
        background: bool | None = None,
        envs: dict[str, str] | None = None,
        user: str | None = None,
        cwd: str | None = None,
        on_stdout: Callable[[str], Any] | None = None,
        on_stderr: Callable[[str], Any] | None = None,
        stdin: bool | None = None,
        timeout: float | None = 60,
        request_timeout: float | None = None,
    ) -> FakeE2BHandle:
        from e2b.sandbox_async.commands.command import Commands

        checked(Commands.run)(cmd, background, envs, user, cwd, on_stdout, on_stderr, stdin, timeout, request_timeout)
        if not (background and stdin):
            raise NotImplementedError("the fake runs background commands with stdin open only")
        await self.service.api("run", cmd=cmd, envs=envs)
        self.runs.append({"cmd": cmd, "envs": envs, "timeout": timeout})
        launch = shell_launcher(cmd, {**E2B_TEMPLATE_ENV, **(envs or {})}, self.remote.root, self.remote.launcher,
                                scratch=E2B_SCRATCH)  # fmt: skip
        command = await self.remote.start(launch)

        async def pump() -> None:  # E2B hands output back as text, in whatever pieces arrive
            async with contextlib.aclosing(merged_output(command, ("out", "err"), asyncio.Queue())) as output:
                async for kind, data in output:
                    callback = on_stdout if kind == "out" else on_stderr
                    if callback is not None:
                        callback(data.decode(errors="replace"))

        handle = FakeE2BHandle(command, asyncio.create_task(pump()))
        self.handles[command.pid] = (command, handle)
        return handle

    async def send_stdin(self, pid: int, data: str | bytes, request_timeout: float | None = None) -> None:
        body = data.encode() if isinstance(data, str) else data
        await self.service.api("send_stdin", size=len(body))
        await self.handles[pid][0].write(body)


class FakeE2BSandbox:
    """e2b.AsyncSandbox: `files`, `commands`, `kill` (which ends every process in it)."""

    def __init__(self, remote: Remote, service: Service) -> None:
        self.remote = remote
        self.service = service
        self.files = FakeE2BFiles(remote, service)
        self.commands = FakeE2BCommands(remote, service)

    async def kill(self) -> bool:
        await self.service.api("kill", id=self.remote.id)
        await self.remote.destroy()
        return True


class FakeE2B:
    """Stands in for ``e2b.AsyncSandbox.create`` (the E2B sandbox's ``sandbox_factory``)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.created: list[dict[str, Any]] = []
        self.sandboxes: list[FakeE2BSandbox] = []

    async def create(self, **kwargs: Any) -> FakeE2BSandbox:
        from e2b import AsyncSandbox

        checked(AsyncSandbox.create, method=False)(**kwargs)
        await self.service.api("create", **kwargs)
        self.created.append(kwargs)
        sandbox = FakeE2BSandbox(self.service.new_remote(), self.service)
        self.sandboxes.append(sandbox)
        return sandbox


# -- Modal ---------------------------------------------------------------------------------------------


class Aio:
    """A synchronicity-style function: blocking `__call__` refused in an event loop, the real `.aio`."""

    def __init__(self, real: Callable[..., Any], impl: Callable[..., Awaitable[Any]], *, method: bool = True) -> None:
        self._check = checked(real, method=method)
        self._impl = impl

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a blocking Modal call inside an event loop: use .aio")

    async def aio(self, *args: Any, **kwargs: Any) -> Any:
        self._check(*args, **kwargs)
        return await self._impl(*args, **kwargs)


class FakeStreamWriter:
    """modal.io_streams.StreamWriter: `write` buffers (16 MiB cap on the exec path), `drain.aio` sends."""

    def __init__(self, command: Command, service: Service) -> None:
        from modal.io_streams import TASK_COMMAND_ROUTER_MAX_BUFFER_SIZE, _StreamWriter

        self._cap = TASK_COMMAND_ROUTER_MAX_BUFFER_SIZE
        self._command = command
        self._service = service
        self._buffer = bytearray()
        self._closed = False
        self.drain = Aio(_StreamWriter.drain, self._drain)
        self._check_write = checked(_StreamWriter.write)

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        self._check_write(data)
        if self._closed:
            raise ValueError("Stdin is closed. Cannot write to it.")
        if not isinstance(data, (bytes, bytearray, memoryview, str)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__}")
        data = data.encode() if isinstance(data, str) else bytes(data)
        if len(self._buffer) + len(data) > self._cap:
            raise BufferError("Buffer size exceed limit. Call drain to flush the buffer.")
        self._buffer.extend(data)

    def write_eof(self) -> None:
        self._closed = True

    async def _drain(self) -> None:
        data, self._buffer = bytes(self._buffer), bytearray()
        await self._service.api("stdin_write", size=len(data))
        if data:
            await self._command.write(data)
        if self._closed:
            self._command.close_stdin()


class FakeStreamReader:
    """modal.io_streams.StreamReader: async-iterable chunks (bytes with ``text=False``)."""

    def __init__(self, source: AsyncIterator[bytes], text: bool) -> None:
        self._source = source
        self._text = text

    def __aiter__(self) -> AsyncIterator[Any]:
        async def gen() -> AsyncIterator[Any]:
            async for chunk in self._source:
                yield chunk.decode() if self._text else chunk

        return gen()


class FakeContainerProcess:
    """modal.container_process.ContainerProcess: stdin / stdout / stderr, `poll`, `wait`; no kill."""

    def __init__(self, command: Command, service: Service, text: bool) -> None:
        from modal.container_process import _ContainerProcess

        self.command = command
        self.stdin = FakeStreamWriter(command, service)
        self.stdout = FakeStreamReader(command.stdout(), text)
        self.stderr = FakeStreamReader(command.stderr(), text)
        self.poll = Aio(_ContainerProcess.poll, self._poll)
        self.wait = Aio(_ContainerProcess.wait, command.wait)

    async def _poll(self) -> int | None:
        return self.command.returncode

    @property
    def returncode(self) -> int:
        if self.command.returncode is None:
            raise RuntimeError("process has not exited")  # what Modal raises too (InvalidError)
        return self.command.returncode


class FakeModalSandbox:
    """modal.Sandbox as `create` returns it: `exec.aio`, `terminate.aio`."""

    def __init__(self, remote: Remote, service: Service, env: dict[str, str]) -> None:
        from modal.sandbox._sandbox import _Sandbox

        self.remote = remote
        self.object_id = remote.id
        self._service = service
        self._env = env
        self.exec = Aio(_Sandbox.exec, self._exec)
        self.terminate = Aio(_Sandbox.terminate, self._terminate)
        self.execs: list[dict[str, Any]] = []

    async def _exec(self, *args: str, text: bool = True, env: dict[str, str | None] | None = None, **kw: Any) -> Any:
        await self._service.api("exec", args=args)
        if self.remote.destroyed:
            raise RuntimeError("the sandbox was terminated")  # modal raises SandboxTerminatedError
        if not all(isinstance(a, str) for a in args):
            raise TypeError("exec arguments must be strings")
        merged = {**self._env, **{k: v for k, v in (env or {}).items() if v is not None}}
        self.execs.append({"args": args, "text": text, "env": merged, **kw})
        command = await self.remote.start(self.remote.launcher(list(args), merged, self.remote.root))
        return FakeContainerProcess(command, self._service, text)

    async def _terminate(self, *, wait: bool = False) -> int | None:
        await self._service.api("terminate", id=self.remote.id)
        await self.remote.destroy()
        return 137 if wait else None


class FakeModal:
    """The parts of the ``modal`` module the sandbox uses: ``App``, ``Image``, ``Sandbox``, ``Client``, ``config``."""

    def __init__(self, service: Service) -> None:
        import modal
        from modal.app import _App
        from modal.client import _Client
        from modal.sandbox._sandbox import _Sandbox

        self.service = service
        self.Image = modal.Image  # the real one: building an image description is local
        self.created: list[dict[str, Any]] = []
        self.sandboxes: list[FakeModalSandbox] = []
        self.App = type("App", (), {"lookup": Aio(_App.lookup, self._lookup, method=False)})
        self.Client = type(
            "Client", (), {"from_credentials": Aio(_Client.from_credentials, self._client, method=False)}
        )
        self.Sandbox = type("Sandbox", (), {"create": Aio(_Sandbox.create, self._create, method=False)})
        self.config = type("config", (), {"config": {"token_id": None}})

    async def _lookup(self, name: str, **kwargs: Any) -> Any:
        await self.service.api("app_lookup", name=name)
        return type("FakeApp", (), {"name": name})()

    async def _client(self, token_id: str, token_secret: str) -> Any:
        return type("FakeClient", (), {"token_id": token_id})()

    async def _create(self, *args: str, app: Any = None, image: Any = None, env: Any = None, **kwargs: Any) -> Any:
        import modal

        if app is None:
            raise ValueError("App is required")  # Modal: an app is needed outside a Modal container
        if image is not None and not isinstance(image, modal.Image):
            raise TypeError(f"image must be a modal.Image, not {type(image).__name__}")
        if kwargs.get("memory") is not None and not isinstance(kwargs["memory"], int):
            raise TypeError("memory is in MiB, an int")
        await self.service.api("sandbox_create", **kwargs)
        self.created.append({"args": args, "app": app, "image": image, "env": env, **kwargs})
        sandbox = FakeModalSandbox(self.service.new_remote(), self.service, dict(env or {}))
        self.sandboxes.append(sandbox)
        return sandbox


# -- Prime Intellect -----------------------------------------------------------------------------------


class _StreamClient:
    """What `AsyncSandboxProcess` closes when its stream ends (a ConnectClient)."""

    async def close(self) -> None:
        return None


async def prime_events(command: Command) -> AsyncIterator[Any]:
    """The command's life as the gateway streams it: real ``StartResponse`` protobuf messages."""
    from prime_sandboxes._proto.command_session import command_session_pb2 as pb

    def event(**kwargs: Any) -> Any:
        return pb.StartResponse(event=pb.CommandSessionEvent(**kwargs))

    yield event(start=pb.CommandSessionEvent.StartEvent(pid=command.pid))
    async with contextlib.aclosing(merged_output(command, ("stdout", "stderr"), asyncio.Queue())) as output:
        async for kind, data in output:
            yield event(data=pb.CommandSessionEvent.DataEvent(**{kind: data}))
    code = await command.wait()
    yield event(end=pb.CommandSessionEvent.EndEvent(exit_code=code, exited=True))


async def _tagged(source: AsyncIterator[bytes], kind: str) -> AsyncIterator[tuple[str, bytes]]:
    async for chunk in source:
        yield kind, chunk


async def merged_output(
    command: Command, tags: tuple[str, str], queue: asyncio.Queue[Any]
) -> AsyncIterator[tuple[str, bytes]]:
    """The command's stdout and stderr as ``(tag, chunk)`` in arrival order until both end.

    Whatever else is put on `queue` meanwhile (a terminal echo) comes out among them.
    """
    end = object()
    pumps = [
        pump_into(_tagged(command.stdout(), tags[0]), queue, end),
        pump_into(_tagged(command.stderr(), tags[1]), queue, end),
    ]
    ended = 0
    try:
        while ended < 2:
            item = await queue.get()
            if item is end:
                ended += 1
                continue
            yield item
    finally:
        for task in pumps:
            task.cancel()


class FakePrimeClient:
    """prime_sandboxes.AsyncSandboxClient: create / wait_for_creation / open_process / delete / aclose."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.requests: list[Any] = []
        self.by_id: dict[str, Remote] = {}
        self.processes: list[dict[str, Any]] = []
        self.closed = False
        self.deleted: list[str] = []

    async def create(self, request: Any) -> Any:
        from prime_sandboxes import AsyncSandboxClient, CreateSandboxRequest, Sandbox

        checked(AsyncSandboxClient.create)(request)
        if not isinstance(request, CreateSandboxRequest):
            raise TypeError("create() takes a CreateSandboxRequest")
        await self.service.api("create", name=request.name)
        self.requests.append(request)
        remote = self.service.new_remote()
        self.by_id[remote.id] = remote
        payload = request.model_dump(by_alias=False, exclude_none=True, exclude={"lan_network_id", "lan_tags"})
        return Sandbox.model_validate(
            {
                "id": remote.id,
                "name": payload["name"],
                "dockerImage": request.docker_image,
                "cpuCores": request.cpu_cores,
                "memoryGB": request.memory_gb,
                "diskSizeGB": request.disk_size_gb,
                "diskMountPath": "/",
                "gpuCount": request.gpu_count,
                "vm": True,
                "status": "PENDING",
                "timeoutMinutes": request.timeout_minutes,
                "createdAt": "2026-01-01T00:00:00Z",
                "updatedAt": "2026-01-01T00:00:00Z",
            }
        )

    def _remote(self, sandbox_id: str) -> Remote:
        remote = self.by_id.get(sandbox_id)
        if remote is None or remote.destroyed:
            from prime_sandboxes import SandboxNotRunningError

            raise SandboxNotRunningError(sandbox_id, "TERMINATED")
        return remote

    async def wait_for_creation(
        self,
        sandbox_id: str,
        max_attempts: int = 60,
        stability_checks: int = 1,
        image_build_timeout_seconds: int = 3000,
    ) -> None:
        await self.service.api("wait_for_creation", id=sandbox_id)
        self._remote(sandbox_id)

    async def open_process(
        self,
        sandbox_id: str,
        command: str,
        working_dir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> Any:
        from prime_sandboxes.process import AsyncSandboxProcess
        from prime_sandboxes.rpc_command_session import build_command_session_start_request

        # The SDK builds this request from the arguments: it validates them the same way.
        build_command_session_start_request(command=command, working_dir=working_dir, env=env, stdin=True, user=user)
        await self.service.api("open_process", command=command)
        remote = self._remote(sandbox_id)
        self.processes.append({"command": command, "env": env, "working_dir": working_dir})
        started = await remote.start(shell_launcher(command, dict(env or {}), remote.root, remote.launcher))

        async def write_stdin(data: bytes) -> None:
            await self.service.api("stdin", size=len(data))
            await started.write(data)

        async def send_signal(name: str) -> None:
            await self.service.api("signal", name=name)
            started.signal(signal.SIGKILL if name == "kill" else signal.SIGTERM)

        return await AsyncSandboxProcess._create(_StreamClient(), prime_events(started), write_stdin, send_signal)

    async def execute_command(
        self,
        sandbox_id: str,
        command: str,
        working_dir: str | None = None,
        env: dict[str, str] | None = None,
        timeout: int | None = None,
        user: str | None = None,
    ) -> Any:
        from prime_sandboxes import CommandResponse

        await self.service.api("execute_command", command=command)
        remote = self._remote(sandbox_id)
        launch = shell_launcher(command, dict(env or {}), remote.root, remote.launcher)
        code, out, err = await run_to_end(await remote.start(launch))
        return CommandResponse(stdout=out, stderr=err, exit_code=code)

    async def delete(self, sandbox_id: str) -> dict[str, Any]:
        await self.service.api("delete", id=sandbox_id)
        await self._remote(sandbox_id).destroy()
        self.deleted.append(sandbox_id)
        return {"success": True}

    async def aclose(self) -> None:
        self.closed = True


# -- Daytona -------------------------------------------------------------------------------------------


class FakeDaytonaProcess:
    """daytona.AsyncProcess: sessions, asynchronous session commands, their input and streamed logs."""

    def __init__(self, remote: Remote, service: Service, env: dict[str, str]) -> None:
        self.remote = remote
        self.service = service
        self.env = env
        self.sessions: dict[str, dict[str, tuple[Command, bool]]] = {}
        self.requests: list[Any] = []
        self._echo: dict[str, asyncio.Queue[Any]] = {}

    async def create_session(self, session_id: str, request_timeout: float | None = None) -> None:
        await self.service.api("create_session", id=session_id)
        if session_id in self.sessions:
            raise RuntimeError(f"Failed to create session: session {session_id} already exists")
        self.sessions[session_id] = {}

    async def execute_session_command(self, session_id: str, req: Any, timeout: int | None = None) -> Any:
        from daytona import SessionExecuteRequest
        from daytona._async.process import SessionExecuteResponse

        if not isinstance(req, SessionExecuteRequest):
            raise TypeError("execute_session_command() takes a SessionExecuteRequest")
        if not req.run_async:
            raise ValueError("this fake only runs asynchronous commands (run_async=True), as the sandbox does")
        await self.service.api("execute_session_command", command=req.command)
        self.requests.append(req)
        commands = self.sessions[session_id]
        cmd_id = f"cmd-{uuid.uuid4().hex[:8]}"
        exit_file = self.remote.root / f".daytona-{cmd_id}.exit"

        def wrap(line: str) -> str:
            # Daytona's session script: the command in a group, its exit code recorded afterwards.
            return f"{{ {line}; }}; echo $? > {shlex.quote(str(exit_file))}"

        started = await self.remote.start(
            shell_launcher(req.command, self.env, self.remote.root, self.remote.launcher, wrap)
        )
        commands[cmd_id] = (started, bool(req.suppress_input_echo))
        return SessionExecuteResponse.model_construct(cmd_id=cmd_id, output=None, stdout="", stderr="", exit_code=None)

    async def get_session_command_logs_async(
        self, session_id: str, command_id: str, on_stdout: Callable[[str], Any], on_stderr: Callable[[str], Any]
    ) -> None:
        command, _ = self.sessions[session_id][command_id]
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._echo[command_id] = queue
        try:
            async with contextlib.aclosing(merged_output(command, ("out", "err"), queue)) as output:
                async for kind, data in output:
                    # The SDK decodes the log stream as UTF-8 text before calling back.
                    result = (on_stdout if kind == "out" else on_stderr)(data.decode("utf-8", "replace"))
                    if inspect.isawaitable(result):
                        await result
        finally:
            self._echo.pop(command_id, None)

    async def send_session_command_input(
        self, session_id: str, command_id: str, data: str, request_timeout: float | None = None
    ) -> None:
        from daytona_toolbox_api_client_async.models import SessionSendInputRequest

        SessionSendInputRequest(data=data)  # StrictStr: bytes are refused, as by the SDK
        await self.service.api("send_input", size=len(data))
        command, quiet = self.sessions[session_id][command_id]
        if command.returncode is not None:
            raise RuntimeError("Failed to send input: the command has exited")
        if not quiet and command_id in self._echo:
            self._echo[command_id].put_nowait(("out", data.encode()))  # the terminal echo Daytona adds
        await command.write(data.encode())

    async def delete_session(self, session_id: str, request_timeout: float | None = None) -> None:
        await self.service.api("delete_session", id=session_id)
        for command, _ in self.sessions.pop(session_id).values():
            command.signal(signal.SIGKILL)  # the session's process group; one that left it lives on

    async def get_session_command(self, session_id: str, command_id: str, request_timeout: float | None = None) -> Any:
        from daytona_toolbox_api_client_async.models import Command as DaytonaCommand

        command, _ = self.sessions[session_id][command_id]
        exit_file = self.remote.root / f".daytona-{command_id}.exit"
        recorded = exit_file.read_text().strip() if exit_file.exists() else ""
        if not isinstance(command, LocalCommand):
            recorded = str(command.returncode) if command.returncode is not None else ""
        return DaytonaCommand(id=command_id, command="worker", exit_code=int(recorded) if recorded else None)

    async def exec(
        self, command: str, cwd: str | None = None, env: dict[str, str] | None = None, timeout: int | None = None
    ) -> Any:
        from daytona.common.process import ExecuteResponse

        await self.service.api("exec", command=command)
        launch = shell_launcher(command, {**self.env, **(env or {})}, self.remote.root, self.remote.launcher)
        started = await self.remote.start(launch)
        code, out, err = await run_to_end(started)
        return ExecuteResponse.model_construct(exit_code=code, result=out + err, artifacts=None)


class FakeDaytonaSandbox:
    """daytona.AsyncSandbox: `process`, `delete`."""

    def __init__(self, remote: Remote, service: Service, params: Any) -> None:
        self.id = remote.id
        self.remote = remote
        self.service = service
        self.params = params
        self.process = FakeDaytonaProcess(remote, service, dict(params.env_vars or {}))

    async def delete(self, timeout: float | None = 60, wait: bool = False) -> None:
        await self.service.api("delete", id=self.id)
        await self.remote.destroy()


class FakeAsyncDaytona:
    """daytona.AsyncDaytona: `create`, `delete`, `close`."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.sandboxes: list[FakeDaytonaSandbox] = []
        self.closed = False

    async def create(
        self, params: Any = None, *, timeout: float = 60, on_snapshot_create_logs: Callable[[str], None] | None = None
    ) -> FakeDaytonaSandbox:
        from daytona import CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams

        if params is not None and not isinstance(
            params, (CreateSandboxFromImageParams, CreateSandboxFromSnapshotParams)
        ):
            raise TypeError("create() takes CreateSandboxFromSnapshotParams or CreateSandboxFromImageParams")
        if timeout < 0:
            raise ValueError("Timeout must be a non-negative number")
        await self.service.api("create")
        sandbox = FakeDaytonaSandbox(
            self.service.new_remote(), self.service, params or CreateSandboxFromSnapshotParams()
        )
        self.sandboxes.append(sandbox)
        return sandbox

    async def delete(self, sandbox: Any, timeout: float = 60, wait: bool = False) -> None:
        await sandbox.delete(timeout, wait)

    async def close(self) -> None:
        self.closed = True
