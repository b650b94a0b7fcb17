"""The document converter: one document in, its text and places out, behind the same walls as the worker.

Standard library only, like the worker: the host starts it once per document through
`subprocess/oneshot.py` (``python -I -S converter.py --walls SPEC``). It raises the walls first (no
capabilities, Landlock, seccomp; the walls module is loaded by path, as the worker does), then reads one
frame from stdin::

    {"type": "convert", "input": path, "format": "pdf", "module": path of the format's converter,
     "function": its function, "text": path of the shared text builder, "paths": [library folders],
     "limits": {"memory_bytes", "cpu_seconds", "text_bytes", "places", "expanded_bytes"}}

caps its own memory, CPU time, file size and open files, puts the library folders on ``sys.path``, loads
the text builder and the format's module by path (the document libraries, PDFium and the others, are
imported only here, inside), and writes one frame ``{"type": "document", "ok": true, "places": [[offset,
kind, label], ...], "notes": [...], "page_labels": [[page, label], ...] (a PDF's own labels, when it
has them), "text_bytes": n}`` followed by exactly ``n`` bytes of UTF-8 text, or
``{"type": "document", "ok": false, "reason": ...}`` for a document it refuses (encrypted, malformed, too
large once expanded). The host trusts none of it: it caps what it reads and checks every field.
"""

from __future__ import annotations

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
    """Convert the one document of the request; the exit status is 0 whenever a frame was sent."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a library printing to stdout must not corrupt the frame
    try:
        enter_walls(sys.argv)
    except Exception as exc:  # fail closed: no document is opened without the walls the host asked for
        print(f"rlm converter: cannot raise the sandbox walls: {exc}", file=sys.stderr)
        return 3
    request = read_request()
    limits = request.get("limits") or {}
    limit_self(limits)
    # The standard table of file types only: openpyxl's import reads the host's /etc/mime.types otherwise,
    # which the walls refuse where /etc is visible (unshare, process) and the import then fails.
    mimetypes.knownfiles = []
    mimetypes.init()
    sys.path[:0] = [str(p) for p in request.get("paths") or []]
    text = load(request["text"], "rlm_doc_text")
    module = load(request["module"], "rlm_doc_format")
    builder = text.TextOut(int(limits["text_bytes"]), int(limits["places"]), int(limits["expanded_bytes"]))
    try:
        with open(request["input"], "rb") as handle:
            getattr(module, str(request.get("function") or "convert"))(handle, builder)
        body = builder.encoded()
    except text.Refused as exc:
        send(out, {"type": "document", "ok": False, "reason": str(exc)[:500]})
        return 0
    except MemoryError:
        cap = int(limits.get("memory_bytes") or 0) / 1024**2
        reason = f"converting it needed more than its memory limit of {cap:,.0f} MiB"
        send(out, {"type": "document", "ok": False, "reason": reason})
        return 0
    except RecursionError:
        send(out, {"type": "document", "ok": False, "reason": "malformed: it nests too deeply (or loops)"})
        return 0
    except Exception as exc:  # a library's own error on a malformed document
        root = root_cause(exc)
        reason = f"malformed or unsupported: {type(root).__name__}: {str(root)[:300]}"
        send(out, {"type": "document", "ok": False, "reason": reason})
        return 0
    header = {"type": "document", "ok": True, "places": builder.places, "notes": builder.notes}
    if builder.page_labels:
        header["page_labels"] = builder.page_labels
    send(out, {**header, "text_bytes": len(body)}, body)
    return 0


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
