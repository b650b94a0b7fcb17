"""The README and docs/ hold together: every relative link and #anchor resolves, each page is reachable from
the README, the README stays a guide, and the README's examples (and `rlm ask` lines) run as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.testing import FakeOpenAIServer, turn_of

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 16 * 1024  # the guide's size; reference detail goes into docs/

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
MARKER = "MARKER-7731"


def prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces as hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every #anchor of a page: its headings (a repeated one gets -1, -2, ...) and explicit HTML anchors."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for line in prose_lines(page.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading.group(2))
        found.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return found


def links(page: Path) -> list[str]:
    """The link targets of a page, outside code blocks and code spans."""
    targets: list[str] = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        targets += LINK.findall(CODE_SPAN.sub("", line))
    return targets


def broken_links(pages: list[Path], root: Path) -> list[str]:
    """One line per relative link or #anchor of `pages` that does not resolve inside `root`."""
    problems: list[str] = []
    for page in pages:
        name = page.relative_to(root)
        for target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check here
                continue
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.is_relative_to(root.resolve()) or not resolved.exists():
                problems.append(f"{name}: {target!r}: no such file")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                problems.append(f"{name}: {target!r}: no heading with the anchor #{fragment}")
    return problems


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Use `rlm ask`: flags\n\n## Again\n\n## Again\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md#use-rlm-ask-flags) [twice](docs/a.md#again-1) [top](#guide) [web](https://example.com)\n"
        "[gone](docs/b.md) [no anchor](docs/a.md#flags) `[in code](docs/c.md)` [up](../outside.md)\n"
        "```\n[in a block](docs/d.md)\n```\n# Guide\n"
    )
    pages = [tmp_path / "README.md", tmp_path / "docs" / "a.md"]
    assert broken_links(pages, tmp_path) == [
        "README.md: 'docs/b.md': no such file",
        "README.md: 'docs/a.md#flags': no heading with the anchor #flags",
        "README.md: '../outside.md': no such file",
    ]


def test_every_relative_link_and_anchor_of_the_readme_and_docs_resolves() -> None:
    assert broken_links(PAGES, ROOT) == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(ROOT / "README.md")}
    assert [page.name for page in PAGES[1:] if page.resolve() not in linked] == []


def test_the_readme_stays_a_guide() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size:,} bytes: move reference detail into a page of docs/"


def section(page: Path, heading: str) -> str:
    """The text of one `## heading` section of a page."""
    text = page.read_text(encoding="utf-8")
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def code_block(text: str, language: str) -> str:
    found = re.search(rf"```{language}\n(.*?)```", text, re.S)
    assert found is not None, f"no {language} block"
    return found.group(1)


def root(messages: list[dict[str, Any]]) -> str:
    """Looks for the marker in `context`, then answers whether it was there: the input reached the sandbox."""
    if turn_of(messages) == 0:
        return f"```repl\nprint('seen:', {MARKER!r} in str(context))\n```"
    return "FINAL(marker found)" if "seen: True" in str(messages[-1]["content"]) else "FINAL(marker missing)"


def inputs(folder: Path) -> Path:
    """The files the README's examples name: big.log, server.log, report.txt and notes/."""
    # About 20,000 tokens: a big log is over ChatRLM's direct-route threshold (16,000), as the README means it.
    log = "\n".join(f"2026-11-{n % 28 + 1:02d} INFO user{n % 7:03d} request {n}" for n in range(2_000))
    for name in ("big.log", "server.log", "report.txt"):
        (folder / name).write_text(f"{log}\nERROR user004 {MARKER}\n", encoding="utf-8")
    (folder / "notes" / "2026").mkdir(parents=True)
    (folder / "notes" / "review.md").write_text(f"Decided: drop the beta ({MARKER}).\n", encoding="utf-8")
    (folder / "notes" / "2026" / "kickoff.md").write_text("We ship the beta in March.\n", encoding="utf-8")
    return folder


def run(command: list[str], server: FakeOpenAIServer, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    env |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize(
    ("heading", "needs"),
    [("Use it from Python", None), ("LangChain", "langchain_core"), ("LlamaIndex", "llama_index.core")],
)
@pytest.mark.slow
def test_the_readmes_python_examples_run_as_written(
    heading: str, needs: str | None, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    if needs is not None:
        pytest.importorskip(needs, reason=f"{needs} is not installed (pip install -e '.[all]')")
    fake_server.root = root
    example = code_block(section(ROOT / "README.md", heading), "python")
    done = run([sys.executable, "-c", example], fake_server, inputs(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "marker found" in done.stdout, done.stdout


@pytest.mark.skipif(shutil.which("rlm") is None, reason="the rlm console script is missing (pip install -e .)")
@pytest.mark.parametrize(("page", "heading"), [("README.md", "`rlm ask`"), ("docs/cli.md", None)])
@pytest.mark.slow
def test_the_rlm_ask_lines_run_as_written(
    page: str, heading: str | None, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The export line's OPENAI_API_KEY=... stands; the environment's OPENAI_BASE_URL points at the fake."""
    fake_server.root = root
    text = (ROOT / page).read_text(encoding="utf-8")
    block = code_block(section(ROOT / page, heading) if heading else text, "bash")
    asks = [line for line in block.splitlines() if line.startswith("rlm ask ")]
    assert len(asks) == 2
    done = run(["bash", "-euc", block], fake_server, inputs(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["marker found", "marker found"], done.stdout
    assert list((tmp_path / "logs").glob("*.jsonl")), "--log-dir logs wrote no trajectory"
