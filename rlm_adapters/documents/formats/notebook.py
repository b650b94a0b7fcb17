"""Jupyter notebooks (.ipynb), standard library only: one place per cell (``cell 7``), its source and outputs.

Outputs keep their text (streams, ``text/plain`` results, errors without terminal colours); an image or
other rich output is named, not inlined; one output longer than `MAX_OUTPUT_CHARS` is cut (and the cut is
noted), so a notebook with a huge output still reads.
"""

from __future__ import annotations

import json
import re
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

MAX_OUTPUT_CHARS = 20_000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def convert(handle: IO[bytes], out: TextOut) -> None:
    """Write each cell, headed ``[cell N: kind]`` (N counts cells from 1, as Jupyter shows them)."""
    try:
        notebook = json.load(handle)
    except (ValueError, UnicodeDecodeError) as exc:
        out.refuse(f"malformed notebook: not JSON ({str(exc)[:120]})")
    if not isinstance(notebook, dict):
        out.refuse("malformed notebook: not a JSON object")
    cells = notebook.get("cells")
    if cells is None and isinstance(notebook.get("worksheets"), list) and notebook["worksheets"]:
        cells = notebook["worksheets"][0].get("cells")  # nbformat 3
    if not isinstance(cells, list):
        out.refuse("malformed notebook: no list of cells")
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            continue
        kind = str(cell.get("cell_type", "cell"))
        count = cell.get("execution_count", cell.get("prompt_number"))
        out.place("cell", f"cell {number}")
        out.line(f"[cell {number}: {kind}" + (f", In [{count}]]" if isinstance(count, int) else "]"))
        source = _joined(cell.get("source", cell.get("input", "")))
        out.line(source.rstrip())
        for output in cell.get("outputs") or []:
            if isinstance(output, dict):
                _output(output, out)


def _joined(value: Any) -> str:
    if isinstance(value, list):
        return "".join(item for item in value if isinstance(item, str))
    return value if isinstance(value, str) else ""


def _output(output: dict[str, Any], out: TextOut) -> None:
    kind = output.get("output_type")
    if kind == "stream":
        text = _joined(output.get("text"))
    elif kind == "error":
        trace = "\n".join(line for line in output.get("traceback") or [] if isinstance(line, str))
        text = _ANSI.sub("", trace) or f"{output.get('ename')}: {output.get('evalue')}"
    else:
        raw = output.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else output
        text = _joined(data.get("text/plain", data.get("text", "")))
        if not text:
            rich = sorted(key for key in data if isinstance(key, str) and "/" in key)
            text = f"[{', '.join(rich)} output]" if rich else ""
    if not text.strip():
        return
    if len(text) > MAX_OUTPUT_CHARS:
        out.note(f"outputs over {MAX_OUTPUT_CHARS:,} characters were cut")
        text = text[:MAX_OUTPUT_CHARS] + f"\n[... {len(text) - MAX_OUTPUT_CHARS:,} more characters of output cut]"
    out.line("[output]")
    out.line(text.rstrip())
