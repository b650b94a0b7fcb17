"""PowerPoint (.pptx), with python-pptx: one place per slide (``[slide 4]``), its text, tables and notes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

import pptx
from pptx.enum.shapes import MSO_SHAPE_TYPE

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

MAX_GROUP_DEPTH = 20


def convert(handle: IO[bytes], out: TextOut) -> None:
    """Write each slide, headed ``[slide N]``: its title, text frames, tables, then its speaker notes."""
    out.open_zip(handle).close()
    handle.seek(0)
    presentation = pptx.Presentation(handle)
    for number, slide in enumerate(presentation.slides, start=1):
        out.place("slide", str(number))
        out.line(f"[slide {number}]")
        title = slide.shapes.title
        if title is not None and title.has_text_frame and title.text_frame.text.strip():
            out.line(f"# {title.text_frame.text.strip()}")
        _shapes(slide.shapes, out, skip=title, depth=0)
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                out.line(f"Notes: {notes.text.strip()}")


def _shapes(shapes: Iterable[Any], out: TextOut, skip: Any, depth: int) -> None:
    if depth > MAX_GROUP_DEPTH:
        out.refuse("malformed: shapes nested more than 20 groups deep")
    for shape in shapes:
        if skip is not None and shape.shape_id == skip.shape_id:
            continue
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            _shapes(shape.shapes, out, None, depth + 1)
        elif getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                cells = [" ".join(cell.text.split()) for cell in row.cells]
                if any(cells):
                    out.line(" | ".join(cells))
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            for paragraph in shape.text_frame.paragraphs:
                text = "".join(run.text for run in paragraph.runs).strip()
                if text:
                    out.line(("  " * paragraph.level) + text)
