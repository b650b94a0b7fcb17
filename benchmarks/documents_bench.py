"""What converting documents behind the walls costs, against converting them on the host (printed, not asserted).

Run as ``python -m benchmarks.documents_bench [--pdfs 100] [--pages 10] [--long 200] [--reps 3]``. The PDFs
are written by fpdf2 (the dev extra) with a paragraph of text per page. Both arms run the same converter
module (`rlm_adapters/documents/formats/pdf.py`, PDFium) into the same `TextOut`:

- ``sandboxed``: `rlm_adapters.documents.convert_all`, one walled converter process per document (the
  launcher ``auto`` picks: bubblewrap, Landlock, seccomp), ``parallel`` at a time, from cold (the cache in
  memory cleared, the user's store on disk not used);
- ``host``: the module imported in this process for one long PDF, and in a pool of ``parallel`` plain
  processes for the batch (what a converter with no walls would do; never done by the package itself).

- ``pdftotext``: poppler's reader on the same files, ``parallel`` at a time (the reference; when installed).

Reported: pages/s for one ``--long``-page PDF (best of ``--reps``), MB/s and pages/s for ``--pdfs`` PDFs
of ``--pages`` pages (the issue's "100 small PDFs"), and the batch again from the conversion cache (in
memory, and from a fresh store on disk as the next process would find it).

``--real`` measures real PDFs instead (the Debian manuals `.ci/setup_documents.sh` installs, or
``--folder``), side by side with poppler's ``pdftotext`` (the reference reading): the PDF engines in this
process (pypdf, pypdfium2, pdfminer.six, each when installed) for spacing (word tokens holding a run of
20+ letters), phrases (6-word phrases sampled from pdftotext's page N found on the engine's page N; a phrase
counts only where ``pdftotext -layout`` reads it on that page too, since where pdftotext's two readings
disagree, as on a table read column by column, neither is the document's order; a file with fewer than
`MIN_AGREED_PHRASES` agreed phrases, a card of tables, is left to the rows measure; "all phrases" counts
every sampled phrase), reading order (found phrases in pdftotext's order), table rows (rows of
``pdftotext -layout`` with 3+ columns whose cells stand in order on one line) and pages/s, with each file's
figures under ``files`` in ``--json``; then the package's own sandboxed conversion of the folder against
``pdftotext`` run on every file, ``parallel`` at a time, both from cold.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from rlm_adapters.documents import CONVERSIONS, ConversionStore, DocumentJob, DocumentLimits, convert_all, format_of
from rlm_adapters.documents._formats import FORMATS_FOLDER
from rlm_adapters.documents._output import Converted

LIMITS = DocumentLimits()


def write_pdf(path: Path, pages: int, seed: int = 0) -> Path:
    """A PDF of `pages` pages of report-like text (the `seed` makes each file's bytes its own)."""
    import fpdf

    document = fpdf.FPDF()
    document.set_font("Helvetica", size=10)
    for number in range(1, pages + 1):
        document.add_page()
        document.multi_cell(0, 5, f"File {seed}, page {number}. Revenue grew in every region this quarter. " * 12)
    document.output(str(path))
    return path


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"rlm_bench_{name}", FORMATS_FOLDER / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def convert_on_host(path: str) -> int:
    """Convert one PDF in this process, unwalled, with the converter's own module; the text's characters."""
    text, pdf = _module("_text"), _module("pdf")
    out = text.TextOut(LIMITS.text_bytes, LIMITS.max_places, LIMITS.expanded_bytes)
    with open(path, "rb") as handle:
        pdf.convert(handle, out)
    return len(out.encoded())


def convert_sandboxed(paths: list[Path]) -> list[Converted]:
    """Convert `paths` behind the walls, `LIMITS.parallel` at a time, from an empty cache."""
    fmt = format_of("x.pdf")
    assert fmt is not None
    jobs = [DocumentJob(str(p), fmt, lambda p=p: os.open(p, os.O_RDONLY | os.O_NOFOLLOW)) for p in paths]
    batch = convert_all(jobs, LIMITS)
    done = [o.converted for o in batch.outcomes if o is not None and o.converted is not None]
    if len(done) != len(paths):
        reasons = {o.reason for o in batch.outcomes if o is not None and o.reason}
        raise RuntimeError(f"{len(paths) - len(done)} PDFs were not converted: {sorted(reasons)}")
    return done


# ------------------------------------------------------------------------------- real PDFs, measured
REAL_PDFS = (
    "/usr/share/doc/debmake-doc/debmake-doc.en.pdf",  # DocBook via dblatex (xdvipdfmx)
    "/usr/share/developers-reference/developers-reference.pdf",  # Sphinx via LaTeX
    "/usr/share/R/doc/manual/R-intro.pdf",  # texinfo
    "/usr/share/R/doc/manual/R-data.pdf",
    "/usr/share/R/doc/manual/R-FAQ.pdf",
    "/usr/share/doc/gnuplot/gnuplot.pdf",  # LaTeX with tables
    "/usr/share/doc/asymptote/asymptote.pdf",
    "/usr/share/doc/asymptote/asyRefCard.pdf",  # a reference card: tables in columns
    "/usr/share/doc/libtasn1-doc/libtasn1.pdf",
    "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
)
# A file is held to the phrase measure when pdftotext's two readings agree on this many of its sampled
# phrases; fewer (asyRefCard.pdf: 6 of 60) is a file of tables in columns, judged by its rows instead.
MIN_AGREED_PHRASES = 100
_RUN_TOGETHER = re.compile(r"[^\W\d_]{20,}")
_WORD = re.compile(r"\w+")
_HYPHEN = re.compile(r"(\w)-\n(\w)")  # a word broken at a line's end is one word, whoever broke it


def pdftotext_pages(path: str, layout: bool = False) -> list[str]:
    """Poppler's reading of `path`, one string per page."""
    command = ["pdftotext", "-q", "-enc", "UTF-8", *(["-layout"] if layout else []), path, "-"]
    pages = subprocess.run(command, capture_output=True, check=True).stdout.decode("utf-8", "replace").split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def _pypdf_pages(path: str) -> list[str]:
    import pypdf

    return [page.extract_text() or "" for page in pypdf.PdfReader(path).pages]


def _pdfminer_pages(path: str) -> list[str]:
    from pdfminer.high_level import extract_text

    pages = extract_text(path).split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def _ours_pages(path: str) -> list[str]:
    """The package's converter module (PDFium), unwalled, one string per page (headings dropped)."""
    text, pdf = _module("_text"), _module("pdf")
    out = text.TextOut(LIMITS.text_bytes, LIMITS.max_places, LIMITS.expanded_bytes)
    with open(path, "rb") as handle:
        pdf.convert(handle, out)
    return pages_of(out.text(), [offset for offset, kind, _ in out.places if kind == "page"])


def pages_of(text: str, starts: list[int]) -> list[str]:
    """`text` cut at the page places `starts`, each page without its ``[page N]`` heading line."""
    ends = [*starts[1:], len(text)]
    spans = [text[start:end] for start, end in zip(starts, ends, strict=True)]
    return [span.split("\n", 1)[1] if "\n" in span else "" for span in spans]


ENGINES: dict[str, Any] = {"pypdf": _pypdf_pages, "pypdfium2": _ours_pages, "pdfminer.six": _pdfminer_pages}
ENGINE_MODULES = {"pypdf": "pypdf", "pypdfium2": "pypdfium2", "pdfminer.six": "pdfminer"}


def words(text: str) -> list[str]:
    """`text`'s words, lower-cased (punctuation and layout ignored)."""
    return _WORD.findall(_HYPHEN.sub(r"\1\2", text).lower())


def run_together(pages: list[str]) -> float:
    """Percent of whitespace-separated tokens holding a run of 20+ letters (words glued together)."""
    tokens = [token for page in pages for token in page.split()]
    return 100 * sum(1 for token in tokens if _RUN_TOGETHER.search(token)) / max(len(tokens), 1)


def sample_phrases(page: str, size: int = 6, per_page: int = 20) -> list[str]:
    """Up to `per_page` phrases of `size` words, spread evenly over `page`."""
    found = words(page)
    if len(found) < size:
        return []
    step = max(1, (len(found) - size + 1) // per_page)
    return [" ".join(found[i : i + size]) for i in range(0, len(found) - size + 1, step)][:per_page]


def phrases_found(reference: list[str], pages: list[str], layout: list[str] | None = None) -> tuple[float, float, int]:
    """Percent of the reference's phrases found on the same page, percent of found pairs in order, phrases counted.

    With `layout` (``pdftotext -layout``'s pages), a phrase of the reference counts only where the layout
    reading holds it on that page too: where pdftotext's two readings disagree (a table read column by column
    in one and row by row in the other, a reference card whose two columns share lines), the order is
    pdftotext's guess, and no engine can be held to it.
    """
    found = total = ordered = pairs = 0
    for number, page in enumerate(reference):
        ours = " " + " ".join(words(pages[number])) + " " if number < len(pages) else ""
        agreed = " " + " ".join(words(layout[number])) + " " if layout is not None and number < len(layout) else None
        last: int | None = None
        for phrase in sample_phrases(page):
            if agreed is not None and f" {phrase} " not in agreed:
                continue
            total += 1
            at = ours.find(f" {phrase} ")
            if at >= 0:
                found += 1
                if last is not None:
                    pairs += 1
                    ordered += at > last
                last = at
    return 100 * found / max(total, 1), 100 * ordered / max(pairs, 1), total


def rows_kept(layout: list[str], pages: list[str]) -> tuple[float, int]:
    """Percent of ``pdftotext -layout``'s table rows (3+ cells) whose cells stand in order on one line of ours."""
    kept = total = 0
    for number, page in enumerate(layout):
        lines = [
            " " + " ".join(words(line)) + " " for line in (pages[number] if number < len(pages) else "").splitlines()
        ]
        for row in page.splitlines():
            cells = [" " + " ".join(words(cell)) + " " for cell in re.split(r"\s{2,}", row.strip()) if words(cell)]
            if len(cells) < 3:
                continue
            total += 1
            kept += any(in_order(line, cells) for line in lines)
    return 100 * kept / max(total, 1), total


def in_order(line: str, cells: list[str]) -> bool:
    """Whether `cells` (spaced words) stand in this order on `line` (spaced words)."""
    at = 0
    for cell in cells:
        at = line.find(cell, at)
        if at < 0:
            return False
        at += len(cell) - 1
    return True


def compare_engines(paths: list[str]) -> dict[str, Any]:
    """Each installed engine's figures on `paths`, pdftotext's first (as the reference, against itself)."""
    reference = {p: pdftotext_pages(p) for p in paths}
    layout = {p: pdftotext_pages(p, layout=True) for p in paths}
    engines: dict[str, Any] = {"pdftotext": pdftotext_pages}
    engines |= {n: f for n, f in ENGINES.items() if importlib.util.find_spec(ENGINE_MODULES[n]) is not None}
    pages = sum(len(r) for r in reference.values())
    table: dict[str, Any] = {"pdfs": len(paths), "pages": pages, "engines": {}}
    for name, engine in engines.items():
        started = time.perf_counter()
        read = {p: engine(p) for p in paths}
        took = time.perf_counter() - started
        every = {p: phrases_found(reference[p], read[p]) for p in paths}
        agreed = {p: phrases_found(reference[p], read[p], layout[p]) for p in paths}
        held = [p for p in paths if agreed[p][2] >= MIN_AGREED_PHRASES]
        rows = [rows_kept(layout[p], read[p]) for p in paths]
        table["engines"][name] = {
            "run_together_pct": round(run_together([page for p in paths for page in read[p]]), 2),
            "worst_run_together_pct": round(max(run_together(read[p]) for p in paths), 2),
            "phrases_pct": round(sum(agreed[p][0] for p in held) / max(len(held), 1), 1),
            "worst_phrases_pct": round(min((agreed[p][0] for p in held), default=0.0), 1),
            "all_phrases_pct": round(sum(f for f, _, _ in every.values()) / len(paths), 1),
            "worst_all_phrases_pct": round(min(f for f, _, _ in every.values()), 1),
            "order_pct": round(sum(agreed[p][1] for p in held) / max(len(held), 1), 1),
            "rows_pct": round(sum(k * n for k, n in rows) / max(sum(n for _, n in rows), 1), 1),
            "pages_per_s": round(pages / took, 1),
            "files": {Path(p).name: _file_figures(agreed[p], every[p], rows[i]) for i, p in enumerate(paths)},
        }
    return table


def _file_figures(agreed: tuple[float, float, int], every: tuple[float, float, int], rows: tuple[float, int]) -> Any:
    return {
        "phrases_pct": round(agreed[0], 1),
        "phrases": agreed[2],
        "all_phrases_pct": round(every[0], 1),
        "rows_pct": round(rows[0], 1),
        "rows": rows[1],
    }


def pdftotext_folder(paths: list[str], parallel: int) -> None:
    """``pdftotext`` on every file, `parallel` at a time (the reference's own batch)."""
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda p: subprocess.run(["pdftotext", "-q", p, "-"], capture_output=True, check=True), paths))


def measure_real(paths: list[str], reps: int) -> dict[str, Any]:
    """The engines' table, then the package's sandboxed conversion of `paths` against ``pdftotext``."""
    figures = compare_engines(paths)
    pages = figures["pages"]
    with no_store():
        ours = _best(lambda: convert_sandboxed([Path(p) for p in paths]), reps)
    theirs = _best(lambda: pdftotext_folder(paths, LIMITS.parallel), reps)
    figures["folder"] = {
        "parallel": LIMITS.parallel,
        "sandboxed_pages_per_s": round(pages / ours, 1),
        "pdftotext_pages_per_s": round(pages / theirs, 1),
        "ratio": round(theirs / ours, 2),
    }
    return figures


@contextlib.contextmanager
def no_store() -> Iterator[None]:
    """Conversions kept in memory only: the user's store (``RLM_DOCUMENT_CACHE``) would answer every cold run."""
    CONVERSIONS.use_store(None)
    try:
        yield
    finally:
        CONVERSIONS.use_store("environment")


def _best(run: Any, reps: int, fresh: bool = True) -> float:
    times = []
    for _ in range(reps):
        if fresh:
            CONVERSIONS.clear()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def _rate(pages: int, seconds: float | None) -> float | None:
    return None if seconds is None else round(pages / seconds, 1)


def measure(pdfs: int, pages: int, long: int, reps: int) -> dict[str, Any]:
    """The figures, as a JSON-ready dict; ``pdftotext`` names the reference the run found (None: its arm is left
    out, its rates None).

    Whether poppler's ``pdftotext`` is there is asked here, when the arms run: a flag frozen when the module was
    first imported disagreed with a caller that asks later (an import under another ``PATH``, poppler installed
    after it) and left the arm out while the caller held its rates to be there.
    """
    pdftotext = shutil.which("pdftotext")
    with tempfile.TemporaryDirectory(prefix="rlm-documents-bench-") as folder, no_store():
        root = Path(folder)
        book = write_pdf(root / "long.pdf", long)
        batch = [write_pdf(root / f"f{i:03d}.pdf", pages, seed=i) for i in range(pdfs)]
        batch_mb = sum(p.stat().st_size for p in batch) / 1e6
        one_sandboxed = _best(lambda: convert_sandboxed([book]), reps)
        one_host = _best(lambda: convert_on_host(str(book)), reps)
        many_sandboxed = _best(lambda: convert_sandboxed(batch), reps)
        with concurrent.futures.ProcessPoolExecutor(LIMITS.parallel) as pool:
            list(pool.map(convert_on_host, [str(batch[0])] * LIMITS.parallel))  # the pool's imports, not timed
            many_host = _best(lambda: list(pool.map(convert_on_host, map(str, batch))), reps)
        one_pdftotext = _best(lambda: pdftotext_folder([str(book)], 1), reps) if pdftotext else None
        names = [str(p) for p in batch]
        many_pdftotext = _best(lambda: pdftotext_folder(names, LIMITS.parallel), reps) if pdftotext else None
        convert_sandboxed(batch)
        cached = _best(lambda: convert_sandboxed(batch), reps, fresh=False)
        CONVERSIONS.use_store(ConversionStore(root / "store"))  # what the next process finds: the disk, no memory
        try:
            convert_sandboxed(batch)
            stored = _best(lambda: convert_sandboxed(batch), reps)
        finally:
            CONVERSIONS.use_store(None)  # the store's folder goes with the temporary one
        return {
            "parallel": LIMITS.parallel,
            "pdftotext": pdftotext,
            "long_pdf": {
                "pages": long,
                "mb": round(book.stat().st_size / 1e6, 3),
                "sandboxed_pages_per_s": round(long / one_sandboxed, 1),
                "host_pages_per_s": round(long / one_host, 1),
                "sandboxed_seconds": round(one_sandboxed, 3),
                "host_seconds": round(one_host, 3),
                "pdftotext_pages_per_s": _rate(long, one_pdftotext),
            },
            "batch": {
                "pdfs": pdfs,
                "pages_each": pages,
                "mb": round(batch_mb, 2),
                "sandboxed_mb_per_s": round(batch_mb / many_sandboxed, 4),
                "host_mb_per_s": round(batch_mb / many_host, 4),
                "sandboxed_pages_per_s": round(pdfs * pages / many_sandboxed, 1),
                "host_pages_per_s": round(pdfs * pages / many_host, 1),
                "sandboxed_seconds": round(many_sandboxed, 3),
                "host_seconds": round(many_host, 3),
                "pdftotext_pages_per_s": _rate(pdfs * pages, many_pdftotext),
                "cached_seconds": round(cached, 4),
                "stored_seconds": round(stored, 4),
            },
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.documents_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--pdfs", type=int, default=100, help="PDFs in the batch (default 100)")
    parser.add_argument("--pages", type=int, default=10, help="pages of each PDF of the batch (default 10)")
    parser.add_argument("--long", type=int, default=200, help="pages of the one long PDF (default 200)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each arm; the best is kept (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--real", action="store_true", help="real PDFs against pdftotext (see above)")
    parser.add_argument("--folder", help="with --real: the PDFs of this folder instead of the Debian manuals")
    args = parser.parse_args(argv)
    if args.real:
        found = sorted(str(p) for p in Path(args.folder).glob("*.pdf")) if args.folder else list(REAL_PDFS)
        paths = [p for p in found if os.path.exists(p)]
        if not paths:
            parser.error("no real PDF found: run .ci/setup_documents.sh, or give --folder")
        real = measure_real(paths, args.reps)
        if args.json:
            print(json.dumps(real, indent=2))
            return 0
        print(f"{real['pdfs']} real PDFs, {real['pages']} pages, against pdftotext:")
        print("  engine        run-together (worst)  phrases (worst)  all phrases (worst)  order  table rows  pages/s")
        for name, row in real["engines"].items():
            print(
                f"  {name:13} {row['run_together_pct']:6.2f}% ({row['worst_run_together_pct']:5.2f})"
                f"   {row['phrases_pct']:5.1f}% ({row['worst_phrases_pct']:5.1f})"
                f"  {row['all_phrases_pct']:8.1f}% ({row['worst_all_phrases_pct']:5.1f})  {row['order_pct']:6.1f}%"
                f"  {row['rows_pct']:9.1f}%  {row['pages_per_s']:8.1f}"
            )
        folder = real["folder"]
        print(f"the folder, {folder['parallel']} at a time, from cold:")
        print(f"  sandboxed  {folder['sandboxed_pages_per_s']:>8} pages/s")
        print(
            f"  pdftotext  {folder['pdftotext_pages_per_s']:>8} pages/s  (ours at {1 / folder['ratio']:.2f}x its time)"
        )
        return 0
    figures = measure(args.pdfs, args.pages, args.long, args.reps)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    one, many = figures["long_pdf"], figures["batch"]
    print(f"one {one['pages']}-page PDF ({one['mb']} MB):")
    print(f"  sandboxed {one['sandboxed_pages_per_s']:>8} pages/s  ({one['sandboxed_seconds']} s)")
    print(f"  host      {one['host_pages_per_s']:>8} pages/s  ({one['host_seconds']} s)")
    print(f"  pdftotext {one['pdftotext_pages_per_s']!s:>8} pages/s")
    print(f"{many['pdfs']} PDFs of {many['pages_each']} pages ({many['mb']} MB), {figures['parallel']} at a time:")
    print(f"  sandboxed {many['sandboxed_mb_per_s']:>8} MB/s  {many['sandboxed_pages_per_s']:>8} pages/s")
    print(f"  host      {many['host_mb_per_s']:>8} MB/s  {many['host_pages_per_s']:>8} pages/s")
    print(f"  pdftotext {'':>8}       {many['pdftotext_pages_per_s']!s:>8} pages/s")
    print(f"  cached    {many['cached_seconds']} s for the batch ({many['stored_seconds']} s from the disk store)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
