"""documents/_dependencies.py: a converter library's installed dependencies import behind the walls too, even
when they sit in another folder than the library (a venv over the system's packages); nothing else is bound."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from rlm_adapters.core.sandbox.programs import CONVERTER_PATH
from rlm_adapters.core.sandbox.subprocess.isolation import level_available
from rlm_adapters.core.sandbox.subprocess.oneshot import OneShotLimits, run_walled
from rlm_adapters.documents import FORMATS, ConversionCache, DocumentLimits, convert_fd, library_paths
from rlm_adapters.documents._convert import TEXT_MODULE
from rlm_adapters.documents._dependencies import dependency_folders, forget_dependencies, requirement_names
from rlm_adapters.documents._formats import FORMATS_FOLDER
from rlm_adapters.documents._output import Converted, parse_output
from tests.documents import writers

LEVELS = [
    pytest.param(level, marks=pytest.mark.skipif(not level_available(level, sys.executable), reason=f"no {level} here"))
    for level in ("bwrap", "unshare", "process")
]
# A stand-in format module, run by the real converter behind the walls: it reports where openpyxl and
# defusedxml come from inside, and whether openpyxl parses with defusedxml.
PROBE = """
def convert(handle, out):
    import openpyxl, openpyxl.xml
    out.line("openpyxl=" + openpyxl.__file__)
    out.line("defusedxml_used=" + str(openpyxl.xml.DEFUSEDXML))
    try:
        import defusedxml
        out.line("defusedxml=" + defusedxml.__file__)
    except ImportError as exc:
        out.line("defusedxml=missing: " + str(exc))
"""


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f'needs {module} installed on the host (pip install "rlm-adapters[documents]")')


@pytest.fixture(autouse=True)
def _fresh() -> None:
    forget_dependencies()


def probe(tmp_path: Path, paths: list[str], level: str) -> dict[str, str]:
    """Run the real converter at `level` with `paths` on its path and the probe as its format module."""
    tmp_path.mkdir(exist_ok=True)
    module = tmp_path / "probe.py"
    module.write_text(PROBE)
    document = tmp_path / "document.xlsx"
    document.write_bytes(b"PK\x05\x06" + bytes(18))
    limits = {
        "memory_bytes": 1024**3,
        "cpu_seconds": 30,
        "text_bytes": 1 << 20,
        "places": 10,
        "expanded_bytes": 1 << 20,
    }
    request = {"type": "convert", "format": "xlsx", "module": str(module), "function": "convert",
               "text": str(TEXT_MODULE), "paths": paths, "limits": limits}  # fmt: skip
    run = run_walled(CONVERTER_PATH, request, document, OneShotLimits(1024**3, 30.0, 1 << 21),
                     libraries=[str(FORMATS_FOLDER), str(tmp_path), *paths], isolation=level)  # type: ignore[arg-type]  # fmt: skip
    assert run.ending == "exited" and run.returncode == 0, run.stderr
    answer = parse_output(run.output, text_bytes=1 << 20, max_places=10)
    assert isinstance(answer, Converted), answer
    return dict(line.split("=", 1) for line in answer.text.splitlines() if "=" in line)


@pytest.mark.parametrize("level", LEVELS)
def test_openpyxl_parses_with_defusedxml_inside_the_converter(tmp_path: Path, level: str) -> None:
    needs("openpyxl")
    needs("defusedxml")
    paths = library_paths(FORMATS[".xlsx"])
    assert isinstance(paths, list)
    found = probe(tmp_path, paths, level)
    assert found["defusedxml_used"] == "True", found
    assert found["defusedxml"].endswith("defusedxml/__init__.py"), found


@pytest.fixture
def split_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """openpyxl and et_xmlfile copied into a folder of their own, first on the path, as a venv's packages sit
    apart from the system's; defusedxml stays where it is installed."""
    needs("openpyxl")
    needs("defusedxml")
    site = tmp_path / "venv-site"
    site.mkdir()
    for distribution in ("openpyxl", "et-xmlfile"):
        installed = importlib.metadata.distribution(distribution)
        root = Path(str(installed.locate_file("")))
        for part in {Path(str(f)).parts[0] for f in installed.files or []}:
            source = root / part
            if source.is_dir() and not part.startswith(".."):
                shutil.copytree(source, site / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("openpyxl", "et_xmlfile"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # find_spec would answer from a loaded module
    monkeypatch.syspath_prepend(str(site))
    return site


@pytest.mark.parametrize("level", LEVELS)
def test_a_dependency_in_another_folder_than_its_library_is_importable_inside(
    split_site: Path, tmp_path: Path, level: str
) -> None:
    paths = library_paths(FORMATS[".xlsx"])
    assert isinstance(paths, list) and paths[0] == str(split_site.resolve()), paths
    defused = str(Path(str(importlib.metadata.distribution("defusedxml").locate_file(""))).resolve())
    assert defused in paths and defused != paths[0]
    found = probe(tmp_path / "with", paths, level)
    assert found["openpyxl"].startswith(str(split_site.resolve())), found  # the venv's copy, not the system's
    assert found["defusedxml_used"] == "True" and found["defusedxml"].startswith(defused), found
    # What the converter was given before: the libraries' own folder only, where defusedxml is not.
    bare = probe(tmp_path / "without", [str(split_site.resolve())], level)
    assert bare["defusedxml_used"] == "False" and bare["defusedxml"].startswith("missing"), bare


def test_requirements_follow_markers_and_leave_extras_out() -> None:
    lines = [
        "et-xmlfile",
        "typing_extensions >= 4.0; python_version < '3.11'",
        "lxml>=3.1.0",
        'cryptography>=43 ; extra == "crypto"',
        "pywin32; sys_platform == 'win32'",
        "Pillow >=3.3.2",
        "   ",
    ]
    holds = lambda marker: "extra" not in marker and "win32" not in marker and "< '3.11'" not in marker  # noqa: E731
    assert requirement_names(lines, holds) == ["et-xmlfile", "lxml", "Pillow"]


def test_only_installed_distributions_are_followed_and_each_folder_once() -> None:
    needs("docx")
    folders = dependency_folders(("python-docx", "not-a-distribution-rlm-0451", "python_docx"))
    lxml = importlib.util.find_spec("lxml")
    assert lxml is not None and lxml.origin is not None
    assert str(Path(lxml.origin).resolve().parent.parent) in folders  # python-docx requires lxml
    assert len(folders) == len(set(folders))
    assert dependency_folders(("not-a-distribution-rlm-0451",)) == ()


def test_a_missing_library_is_still_named_with_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openpyxl" else real(name, *a))
    reason = library_paths(FORMATS[".xlsx"])
    assert isinstance(reason, str) and 'pip install "rlm-adapters[documents]"' in reason and "'openpyxl'" in reason


@pytest.mark.parametrize("level", LEVELS)
def test_a_workbook_converts_at_every_level_where_etc_is_visible_too(tmp_path: Path, level: str) -> None:
    # openpyxl's import builds a MimeTypes table, which reads the host's /etc/mime.types unless the converter
    # has set up the standard table first: under unshare and process the walls refuse that read.
    book = writers.xlsx(tmp_path / "book.xlsx")
    fd = os.open(book, os.O_RDONLY)
    try:
        outcome = convert_fd(fd, FORMATS[".xlsx"], DocumentLimits(isolation=level), cache=ConversionCache())  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert outcome.converted is not None, outcome.reason
    assert "[sheet " in outcome.converted.text
