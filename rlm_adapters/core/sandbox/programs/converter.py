"""The document converter: one document in, its text and places out, behind the same walls as the worker.

Standard library only, like the worker: the host starts it through `subprocess/oneshot.py` (``python
-I -S converter.py --walls SPEC``), either once per document or, for a batch, once per converter slot as
a server that imports the libraries once and forks a fresh child per document (`serve`). It raises the walls first (no
capabilities, Landlock, seccomp; the walls module is loaded by path, as the worker does), then reads one
frame from stdin::

    {"type": "convert", "input": path, "format": "pdf", "module": path of the format's converter,
     "function": its function, "text": path of the shared text builder, "paths": [library folders],
     "compression": "gzip" | "bzip2" | "xz" | null,
     "limits": {"memory_bytes", "cpu_seconds", "text_bytes", "places", "expanded_bytes", "expansion_ratio"}}

caps its own memory, CPU time, file size and open files, puts the library folders on ``sys.path``, loads
the text builder and the format's module by path (the document libraries, PDFium and the others, are
imported only here, inside), decompresses a compressed document in memory under the text builder's caps,
and writes one frame ``{"type": "document", "ok": true, "places": [[offset,
kind, label], ...], "notes": [...], "page_labels": [[page, label], ...] (a PDF's own labels, when it
has them), "text_bytes": n}`` followed by exactly ``n`` bytes of UTF-8 text, or
``{"type": "document", "ok": false, "reason": ...}`` for a document it refuses (encrypted, malformed, too
large once expanded). The host trusts none of it: it caps what it reads and checks every field.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import os
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LENGTH = struct.Struct(">I")
MAX_REQUEST_BYTES = 1 << 20
CORE_BYTES = 0
FILE_BYTES = 1 << 20
OPEN_FILES = 64


def enter_walls(argv: list[str]) -> None:
    """Raise the walls the host asked for (``--walls SPEC``), before anything reads the document."""
    if len(argv) < 3 or argv[1] != "--walls":
        return
    from importlib.machinery import SourceFileLoader

    spec = json.loads(argv[2])
    code = SourceFileLoader("rlm_walls", spec["module"]).get_code("rlm_walls")
    if code is None:
        raise ImportError(f"no code in the walls module {spec['module']!r}")
    namespace: dict[str, Any] = {"__name__": "rlm_walls"}
    exec(code, namespace)
    namespace["apply"](spec)


def read_request() -> dict[str, Any]:
    """The one request frame on stdin."""
    stream = sys.stdin.buffer
    header = stream.read(LENGTH.size)
    (length,) = LENGTH.unpack(header)
    if length > MAX_REQUEST_BYTES:
        raise ValueError(f"request of {length} bytes")
    request: dict[str, Any] = json.loads(stream.read(length).decode("utf-8"))
    return request


def limit_self(limits: dict[str, Any]) -> None:
    """Cap this process: address space, CPU seconds (SIGXCPU ends it), files written, files open, no core."""
    import resource

    caps = {
        resource.RLIMIT_AS: limits.get("memory_bytes"),
        resource.RLIMIT_CPU: limits.get("cpu_seconds"),
        resource.RLIMIT_FSIZE: FILE_BYTES,
        resource.RLIMIT_NOFILE: OPEN_FILES,
        resource.RLIMIT_CORE: CORE_BYTES,
    }
    for which, value in caps.items():
        if value is not None:
            soft = int(value) if which != resource.RLIMIT_CPU else max(int(value), 1)
            resource.setrlimit(which, (soft, soft))


def load(path: str, name: str) -> Any:
    """A module from its file (the text builder, a format's converter): none of ours is on ``sys.path``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def send(out: Any, message: dict[str, Any], text: bytes = b"") -> None:
    body = json.dumps(message).encode("utf-8")
    out.write(LENGTH.pack(len(body)) + body)
    if text:
        out.write(text)
    out.flush()


def convert_main() -> int:
    """Convert the document of the request (or serve many, ``{"type": "serve"}``); 0 whenever frames were sent."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a library printing to stdout must not corrupt the frame
    try:
        enter_walls(sys.argv)
    except Exception as exc:  # fail closed: no document is opened without the walls the host asked for
        print(f"rlm converter: cannot raise the sandbox walls: {exc}", file=sys.stderr)
        return 3
    request = read_request()
    # The standard table of file types only: openpyxl's import reads the host's /etc/mime.types otherwise,
    # which the walls refuse where /etc is visible (unshare, process) and the import then fails.
    mimetypes.knownfiles = []
    mimetypes.init()
    sys.path[:0] = [str(p) for p in request.get("paths") or []]
    text = load(request["text"], "rlm_doc_text")
    if request.get("type") == "serve":
        return serve(request, text, out)
    limit_self(request.get("limits") or {})
    convert_one(request, text, load(request["module"], "rlm_doc_format"), out)
    return 0


def convert_one(request: dict[str, Any], text: Any, module: Any, out: Any) -> None:
    """Convert the request's document with `module`, sending its one answer frame to `out`."""
    limits = request.get("limits") or {}
    builder = text.TextOut(
        int(limits["text_bytes"]),
        int(limits["places"]),
        int(limits["expanded_bytes"]),
        int(limits.get("expansion_ratio") or 200),
    )
    try:
        with open(request["input"], "rb") as handle:
            compression = request.get("compression")
            document = handle if compression is None else builder.decompress(handle, str(compression))
            getattr(module, str(request.get("function") or "convert"))(document, builder)
        body = builder.encoded()
    except text.Refused as exc:
        send(out, {"type": "document", "ok": False, "reason": str(exc)[:500]})
        return
    except MemoryError:
        cap = int(limits.get("memory_bytes") or 0) / 1024**2
        reason = f"converting it needed more than its memory limit of {cap:,.0f} MiB"
        send(out, {"type": "document", "ok": False, "reason": reason})
        return
    except RecursionError:
        send(out, {"type": "document", "ok": False, "reason": "malformed: it nests too deeply (or loops)"})
        return
    except Exception as exc:  # a library's own error on a malformed document
        root = root_cause(exc)
        reason = f"malformed or unsupported: {type(root).__name__}: {str(root)[:300]}"
        send(out, {"type": "document", "ok": False, "reason": reason})
        return
    header = {"type": "document", "ok": True, "places": builder.places, "notes": builder.notes}
    if builder.page_labels:
        header["page_labels"] = builder.page_labels
    send(out, {**header, "text_bytes": len(body)}, body)


def serve(request: dict[str, Any], text: Any, out: Any) -> int:
    """Convert one document per request frame, each in a fresh child forked from this clean process.

    This process imports the libraries and loads the format modules once (the request's ``modules`` and
    ``preload``), before any document exists, and never opens one: each ``convert`` frame is handed to a
    child that caps itself (`limit_self`), converts, writes its answer into a pipe and exits. Its answer,
    exit status and the tail of its stderr come back as one frame ``{"type": "converted", "returncode",
    "stderr", "output_bytes"}`` and the bytes. A child leaves nothing behind: it leads its own process
    group, which is killed once it exits, and this process is the subreaper of any process that left the
    group; if one is still alive after that, the server stops after answering (the host starts a new one).
    """
    for name in request.get("preload") or []:
        try:
            __import__(str(name))
        except Exception as exc:  # the child's conversion will say what is missing
            print(f"rlm converter: cannot preload {name}: {exc}", file=sys.stderr)
    modules = {str(path): load(str(path), f"rlm_doc_format_{i}") for i, path in enumerate(request.get("modules") or [])}
    _subreaper()
    send(out, {"type": "ready"})
    while True:
        try:
            job = read_request()
        except (struct.error, ValueError):  # stdin closed (the host is done) or a broken frame
            return 0
        module = modules.get(str(job.get("module")))
        if module is None:
            send(out, {"type": "converted", "returncode": 2, "stderr": "unknown module", "output_bytes": 0})
            continue
        returncode, stderr, answer = _fork_one(job, text, module, int(job.get("output_bytes") or 0), out)
        stray = _reap_strays()
        message = {"type": "converted", "returncode": returncode, "stderr": stderr, "output_bytes": len(answer)}
        send(out, message, answer)
        if stray:
            return 4


def _fork_one(job: dict[str, Any], text: Any, module: Any, cap: int, out: Any) -> tuple[int, str, bytes]:
    """Run one conversion in a forked child; its exit status, stderr tail and answer (cut at `cap` + 1)."""
    import selectors

    answer_read, answer_write = os.pipe()
    err_read, err_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the server's but its code; no stdin (the next requests), no frame out
        code = 1
        try:
            os.setpgid(0, 0)
            os.close(answer_read)
            os.close(err_read)
            os.close(out.fileno())
            os.close(0)
            os.dup2(err_write, 2)
            os.dup2(err_write, 1)
            limit_self(job.get("limits") or {})
            with os.fdopen(answer_write, "wb") as answer:
                convert_one(job, text, module, answer)
            code = 0
        except MemoryError:
            code = 137
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.write(2, f"rlm converter: {type(exc).__name__}: {exc}".encode()[-1000:])
        finally:
            os._exit(code)
    os.close(answer_write)
    os.close(err_write)
    answer_bytes = bytearray()
    err = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(answer_read, selectors.EVENT_READ, "answer")
        selector.register(err_read, selectors.EVENT_READ, "err")
        while selector.get_map():
            for key, _ in selector.select():
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    selector.unregister(key.fd)
                    os.close(key.fd)
                elif key.data == "answer":
                    answer_bytes += chunk
                    if len(answer_bytes) > cap:  # past what the host takes: stop it now
                        with contextlib.suppress(OSError):
                            os.killpg(pid, 9)
                        del answer_bytes[cap + 1 :]
                else:
                    err = (err + chunk)[-4096:]
    _, status = os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        os.killpg(pid, 9)  # what it started in its group
    return os.waitstatus_to_exitcode(status), bytes(err).decode("utf-8", "replace"), bytes(answer_bytes)


def _subreaper() -> None:
    """Become the reaper of every process a child leaves (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: strays are found by `_reap_strays` all the same
        pass


def _reap_strays() -> bool:
    """Reap every child that ended; whether one is still alive (a stray that left its group)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def root_cause(exc: BaseException) -> BaseException:
    """The first error of a chain: a library that wraps the parser's error (openpyxl's "could not read
    worksheets") would otherwise hide what was wrong (an entity amplification, a syntax error)."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return exc


if __name__ == "__main__":
    sys.exit(convert_main())
