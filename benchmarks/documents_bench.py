"""What converting documents behind the walls costs, against converting them on the host (printed, not asserted).

Run as ``python -m benchmarks.documents_bench [--pdfs 100] [--pages 10] [--long 200] [--reps 3]``. The PDFs
are written by fpdf2 (the dev extra) with a paragraph of text per page. Both arms run the same converter
module (`rlm_adapters/documents/formats/pdf.py`, pypdf) into the same `TextOut`:

- ``sandboxed``: `rlm_adapters.documents.convert_all`, one walled converter process per document (the
  launcher ``auto`` picks: bubblewrap, Landlock, seccomp), ``parallel`` at a time, the cache cleared first;
- ``host``: the module imported in this process for one long PDF, and in a pool of ``parallel`` plain
  processes for the batch (what a converter with no walls would do; never done by the package itself).

Reported: pages/s for one ``--long``-page PDF (best of ``--reps``), MB/s and pages/s for ``--pdfs`` PDFs
of ``--pages`` pages, and the batch again from the conversion cache.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from rlm_adapters.documents import CONVERSIONS, DocumentJob, DocumentLimits, convert_all, format_of
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


def _best(run: Any, reps: int, fresh: bool = True) -> float:
    times = []
    for _ in range(reps):
        if fresh:
            CONVERSIONS.clear()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(pdfs: int, pages: int, long: int, reps: int) -> dict[str, Any]:
    """The figures, as a JSON-ready dict."""
    with tempfile.TemporaryDirectory(prefix="rlm-documents-bench-") as folder:
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
        convert_sandboxed(batch)
        cached = _best(lambda: convert_sandboxed(batch), reps, fresh=False)
        return {
            "parallel": LIMITS.parallel,
            "long_pdf": {
                "pages": long,
                "mb": round(book.stat().st_size / 1e6, 3),
                "sandboxed_pages_per_s": round(long / one_sandboxed, 1),
                "host_pages_per_s": round(long / one_host, 1),
                "sandboxed_seconds": round(one_sandboxed, 3),
                "host_seconds": round(one_host, 3),
            },
            "batch": {
                "pdfs": pdfs,
                "pages_each": pages,
                "mb": round(batch_mb, 2),
                "sandboxed_mb_per_s": round(batch_mb / many_sandboxed, 2),
                "host_mb_per_s": round(batch_mb / many_host, 2),
                "sandboxed_pages_per_s": round(pdfs * pages / many_sandboxed, 1),
                "host_pages_per_s": round(pdfs * pages / many_host, 1),
                "sandboxed_seconds": round(many_sandboxed, 3),
                "host_seconds": round(many_host, 3),
                "cached_seconds": round(cached, 4),
            },
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.documents_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--pdfs", type=int, default=100, help="PDFs in the batch (default 100)")
    parser.add_argument("--pages", type=int, default=10, help="pages of each PDF of the batch (default 10)")
    parser.add_argument("--long", type=int, default=200, help="pages of the one long PDF (default 200)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each arm; the best is kept (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.pdfs, args.pages, args.long, args.reps)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    one, many = figures["long_pdf"], figures["batch"]
    print(f"one {one['pages']}-page PDF ({one['mb']} MB):")
    print(f"  sandboxed {one['sandboxed_pages_per_s']:>8} pages/s  ({one['sandboxed_seconds']} s)")
    print(f"  host      {one['host_pages_per_s']:>8} pages/s  ({one['host_seconds']} s)")
    print(f"{many['pdfs']} PDFs of {many['pages_each']} pages ({many['mb']} MB), {figures['parallel']} at a time:")
    print(f"  sandboxed {many['sandboxed_mb_per_s']:>8} MB/s  {many['sandboxed_pages_per_s']:>8} pages/s")
    print(f"  host      {many['host_mb_per_s']:>8} MB/s  {many['host_pages_per_s']:>8} pages/s")
    print(f"  cached    {many['cached_seconds']} s for the whole batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
