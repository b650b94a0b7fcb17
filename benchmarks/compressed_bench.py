"""How fast a compressed text file is read behind the walls, against ``zcat`` (printed, not asserted).

Run as ``python -m benchmarks.compressed_bench [--mb 50] [--reps 3] [--json]``. The text is ``--mb`` MB
(10^6 bytes) of log lines made from a seeded generator (timestamps, hosts, users, paths, statuses: gzip packs
it about as it packs a real log), gzipped at the default level; a second copy has accented words in Latin-1
(what a legacy system writes), so the converter's encoding detection is measured too. Arms, each from cold
(the conversion cache cleared, the user's store not used), best of ``--reps``:

- ``rlm``: `rlm_adapters.files.load_paths` on the .gz: the copy, the walled converter (gzip in memory, the
  text's check), the host's check of its answer, ending as a ``str`` in this process (what ``rlm ask`` gets);
- ``rlm latin-1``: the same on the Latin-1 copy (decoded as Windows-1252 behind the walls);
- ``gzip``: `gzip.decompress` and a UTF-8 decode in this process (what reading it with no walls costs);
- ``zcat``: ``zcat FILE > /dev/null``, the floor (decompression in C, the text kept nowhere).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.documents_bench import no_store
from rlm_adapters.documents import CONVERSIONS, DocumentLimits
from rlm_adapters.files import load_paths

VERBS = ("GET", "POST", "PUT", "DELETE")
PATHS = ("/api/orders", "/api/users", "/api/cart", "/health", "/api/search", "/static/app.js")
ACCENTED = ("café", "naïve", "résumé", "Müller", "señor", "Øresund", "crème brûlée")


def log_text(mb: float, seed: int = 51, accented: bool = False) -> str:
    """About `mb` MB of log lines (whole lines; accented words in some when asked)."""
    pick = random.Random(seed)
    lines: list[str] = []
    size = 0
    target = int(mb * 1e6)
    while size < target:
        second = len(lines)
        note = f" note={pick.choice(ACCENTED)}" if accented and pick.random() < 0.2 else ""
        clock = f"{second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}.{pick.randrange(1000):03d}"
        status = pick.choice((200, 200, 201, 404, 500))
        line = (
            f"2026-12-03T{clock}Z web-{pick.randrange(12):02d} app[{pick.randrange(2000, 9000)}]: "
            f"user={pick.randrange(100_000)} {pick.choice(VERBS)} {pick.choice(PATHS)}/{pick.randrange(10_000)} "
            f"{status} {pick.randrange(1, 900)}ms{note}\n"
        )
        lines.append(line)
        size += len(line)
    return "".join(lines)


def read_with_rlm(path: Path, limits: DocumentLimits) -> str:
    """The file's text as `load_paths` gives it (decompressed and checked behind the walls)."""
    loaded = load_paths([path.name], [path.parent], base=path.parent, documents=limits)
    (file,) = loaded.files
    return file.text


def _best(run: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        CONVERSIONS.clear()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(mb: float, reps: int) -> dict[str, Any]:
    """The figures, as a JSON-ready dict."""
    zcat = shutil.which("zcat")
    with tempfile.TemporaryDirectory(prefix="rlm-compressed-bench-") as folder, no_store():
        root = Path(folder)
        text = log_text(mb)
        plain = root / "app.log.gz"
        plain.write_bytes(gzip.compress(text.encode()))
        latin_text = log_text(mb, accented=True)
        latin = root / "legacy.log.gz"
        latin.write_bytes(gzip.compress(latin_text.encode("latin-1")))
        # Room for the text, whatever --mb is (by default text may be a fifth of the converter's 1 GiB).
        limits = DocumentLimits(memory_bytes=max(1024**3, int(mb * 1e6 * 6)), seconds=600.0)
        if read_with_rlm(plain, limits) != text or read_with_rlm(latin, limits) != latin_text:
            raise AssertionError("the converter's text is not the text that was compressed")
        seconds = {
            "rlm": _best(lambda: read_with_rlm(plain, limits), reps),
            "rlm_latin1": _best(lambda: read_with_rlm(latin, limits), reps),
            "gzip": _best(lambda: gzip.decompress(plain.read_bytes()).decode("utf-8"), reps),
        }
        if zcat is not None:
            seconds["zcat"] = _best(
                lambda: subprocess.run([zcat, str(plain)], stdout=subprocess.DEVNULL, check=True), reps
            )
        text_mb = len(text.encode()) / 1e6
        return {
            "text_mb": round(text_mb, 2),
            "gz_mb": round(plain.stat().st_size / 1e6, 2),
            "seconds": {arm: round(value, 3) for arm, value in seconds.items()},
            "mb_per_s": {arm: round(text_mb / value, 1) for arm, value in seconds.items()},
            "rlm_over_zcat": round(seconds["rlm"] / seconds["zcat"], 2) if "zcat" in seconds else None,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compressed_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=50.0, help="MB of text, before gzip (default 50)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each arm; the best is kept (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.mb, args.reps)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{figures['text_mb']} MB of log text, {figures['gz_mb']} MB gzipped, from cold, best of {args.reps}:")
    for arm, rate in figures["mb_per_s"].items():
        print(f"  {arm:11} {rate:>7} MB/s  ({figures['seconds'][arm]} s)")
    if figures["rlm_over_zcat"] is not None:
        print(f"  rlm takes {figures['rlm_over_zcat']}x zcat's time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
