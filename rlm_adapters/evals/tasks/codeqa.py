"""CodeQA: LongBench v2's code-repository-understanding items, four-way multiple choice.

Items are read from a folder of ``<stem>.md`` question files and ``<stem>_context.txt`` contexts (the shared
data folder's layout, converted from LongBench v2 by longbench2_md); they are not shipped in the package. Both
must be regular files inside the folder: a link, even to a file beside them, is refused (`data_files`).
A choice may run over several lines (``sample_262_hard_long``'s C and D do); every line is kept.

Every item, in LongBench order, in LongBench v2's ``0shot`` prompt (its ``pred.py``:
the template with ``$DOC$``, ``$Q$`` and ``$C_A$``..``$C_D$`` replaced in that order by the stripped fields),
scored by its ``extract_answer``. With ``truncate`` the ``direct`` prompt is cut in the middle to that many
o200k tokens, as LongBench cuts prompts over a model's limit (``ids[:m//2] + ids[-m//2:]``). The paper runs all
50 items; a folder with fewer says how many are missing (`inventory`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.scorers import longbench_score
from rlm_adapters.evals.tasks.base import Instance, TaskName
from rlm_adapters.evals.tasks.data_files import present, read_text
from rlm_adapters.evals.tokens import count_tokens, get_encoding

SHARED_RELATIVE = Path("shared/data/longbench_v2_codeqa")
DATA_VARIABLE = "RLM_CODEQA_DIR"
TOTAL_ITEMS = 50  # LongBench v2's "Code repo QA" sub-domain
# Items of the shared folder's source snapshot without a context file (files of 4 MiB or more were left out).
KNOWN_MISSING = (
    "sample_010_easy_long",
    "sample_035_hard_long",
    "sample_143_hard_long",
    "sample_222_easy_long",
    "sample_251_hard_long",
    "sample_260_hard_long",
    "sample_263_hard_long",
    "sample_348_hard_long",
    "sample_357_easy_long",
    "sample_368_hard_long",
    "sample_369_hard_long",
    "sample_371_hard_long",
    "sample_372_easy_long",
    "sample_407_hard_long",
    "sample_415_hard_long",
    "sample_427_hard_long",
    "sample_453_hard_long",
    "sample_471_easy_long",
    "sample_486_easy_long",
)
LONGBENCH_0SHOT = (
    "Please read the following text and answer the question below.\n\n<text>\n$DOC$\n</text>\n\n"
    "What is the correct answer to this question: $Q$\nChoices:\n(A) $C_A$\n(B) $C_B$\n(C) $C_C$\n(D) $C_D$\n\n"
    'Format your response as follows: "The correct answer is (insert answer here)".'
)
_CHOICE = re.compile(r"^- ([A-D]): ", flags=re.M)


@dataclass(frozen=True)
class CodeQAItem:
    """One parsed question file."""

    stem: str
    question: str
    choices: dict[str, str]
    answer: str
    difficulty: str
    bucket: str


def default_data_dir() -> Path | None:
    """The CodeQA items' folder: ``$RLM_CODEQA_DIR``, else ``shared/data/...`` beside the working folder or
    beside a source checkout of this package (where the project keeps its benchmark data), when present."""
    explicit = os.environ.get(DATA_VARIABLE)
    if explicit:
        return Path(explicit) if Path(explicit).is_dir() else None
    checkout = Path(__file__).resolve().parents[3]
    for base in (Path.cwd(), Path.cwd().parent, checkout.parent):
        candidate = base / SHARED_RELATIVE
        if candidate.is_dir():
            return candidate
    return None


def _section(text: str, name: str, path: Path) -> str:
    match = re.search(rf"^# {name}\s*\n(.*?)(?=^# |\Z)", text, flags=re.M | re.S)
    if match is None:
        raise ConfigurationError(f"CodeQA question file {str(path)!r} lacks a '# {name}' section")
    return match.group(1).strip()


def parse_choices(section: str) -> dict[str, str]:
    """``- A: ...`` entries, each running until the next entry (multi-line choices keep every line)."""
    marks = list(_CHOICE.finditer(section))
    choices = {}
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following else len(section)
        choices[mark.group(1)] = section[mark.end() : end].strip()
    return choices


def parse_item(path: Path) -> CodeQAItem:
    """Read one ``<stem>.md`` file (a regular file, never through a link).

    Raises:
        ConfigurationError: naming the file, when it is not a regular file, lacks a section, or its answer is
            not one of its choices A-D.
    """
    text = read_text(path.parent, path.name, "CodeQA question file")
    meta = dict(re.findall(r"^- (\w+): (.*)$", _section(text, "Metadata", path), flags=re.M))
    choices = parse_choices(_section(text, "Choices", path))
    answer = _section(text, "Answer", path)
    if sorted(choices) != ["A", "B", "C", "D"] or answer not in choices:
        raise ConfigurationError(
            f"CodeQA file {str(path)!r} needs choices A-D and a letter answer among them, got answer {answer[:40]!r}"
        )
    return CodeQAItem(
        path.stem,
        _section(text, "Question", path),
        choices,
        answer,
        meta.get("Difficulty", ""),
        meta.get("Length", ""),
    )


def context_name(item: CodeQAItem) -> str:
    """The file name of `item`'s context, beside its question file."""
    return f"{item.stem}_context.txt"


def load_items(data_dir: Path) -> list[CodeQAItem]:
    """Every item of `data_dir` that has its context file, sorted by name.

    Raises:
        ConfigurationError: for a question file or a context that is a link or not a regular file.
    """
    items = [parse_item(p) for p in sorted(data_dir.glob("*.md")) if not p.name.startswith("README")]
    return [item for item in items if present(data_dir, context_name(item), "CodeQA context")]


def read_context(data_dir: Path, item: CodeQAItem) -> str:
    """`item`'s context text, read from inside `data_dir` only."""
    return read_text(data_dir, context_name(item), "CodeQA context")


def longbench_prompt(context: str, item: CodeQAItem) -> str:
    """LongBench v2's 0-shot prompt, replaced field by field in the original's order."""
    prompt = LONGBENCH_0SHOT.replace("$DOC$", context.strip()).replace("$Q$", item.question.strip())
    for letter in "ABCD":
        prompt = prompt.replace(f"$C_{letter}$", item.choices[letter].strip())
    return prompt


def middle_truncate(text: str, limit: int) -> str:
    """LongBench's truncation: the first and last ``limit // 2`` o200k tokens when `text` has more than `limit`."""
    encoding = get_encoding()
    ids = encoding.encode(text, disallowed_special=())
    if len(ids) <= limit:
        return text
    return str(encoding.decode(ids[: limit // 2] + ids[-limit // 2 :]))


@dataclass(frozen=True)
class Inventory:
    """What a CodeQA folder holds: items with their context sizes, and what LongBench v2 has beyond them."""

    items: list[tuple[CodeQAItem, int, int]]  # item, context bytes, context tokens
    missing: int
    missing_known: list[str]


def inventory(data_dir: Path) -> Inventory:
    """Every item of `data_dir` with its context's bytes and o200k tokens, and the count of missing items."""
    rows = []
    for item in load_items(data_dir):
        text = read_context(data_dir, item)
        rows.append((item, len(text.encode("utf-8")), count_tokens(text)))
    present = {item.stem for item, _, _ in rows}
    return Inventory(rows, max(0, TOTAL_ITEMS - len(rows)), [s for s in KNOWN_MISSING if s not in present])


class CodeQATask:
    """LongBench v2 CodeQA items.

    Args:
        data_dir: The items' folder (default: the shared data folder).
        truncate: Cut ``direct`` prompts in the middle to the instance's length.
    """

    name: TaskName = "codeqa"

    def __init__(self, data_dir: Path | None = None, truncate: bool = False) -> None:
        folder = data_dir or default_data_dir()
        if folder is None or not folder.is_dir():
            raise ConfigurationError("codeqa needs its data: pass --data-dir with the LongBench v2 CodeQA items")
        self.data_dir = folder
        self.truncate = truncate
        self.items = load_items(folder)
        if not self.items:
            raise ConfigurationError(f"no CodeQA items (<stem>.md + <stem>_context.txt) in {str(folder)!r}")

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """The first `n` items in LongBench's order, of any length (`length` labels them and is the truncation
        limit; `seed` changes nothing: the items are fixed)."""
        instances = []
        for item in self.items[:n]:
            raw = read_context(self.data_dir, item)
            context = raw.strip()
            prompt = longbench_prompt(raw, item)
            head = LONGBENCH_0SHOT.partition("$DOC$")[0]
            tail = longbench_prompt("", item)[len(head) :]
            # A context holding a placeholder ($Q$, ...) is rewritten by the original's chained replace: then
            # the direct arm gets that exact prompt.
            direct = None if prompt == head + context + tail else prompt
            truncated = False
            if self.truncate:
                cut = middle_truncate(prompt, length)
                truncated = cut != prompt
                direct = cut if truncated else direct
            instances.append(
                Instance(
                    id=f"codeqa-{length}-{item.stem}",
                    task=self.name,
                    length=length,
                    context=context,
                    question=tail.split("</text>\n\n", 1)[-1],
                    gold=item.answer,
                    kind=item.difficulty,
                    metadata={
                        "bucket": item.bucket,
                        "stem": item.stem,
                        "tokens": count_tokens(prompt),
                        "truncated": truncated,
                    },
                    layout="wrapped",
                    prompt_head=head,
                    prompt_tail=tail,
                    direct_prompt=direct,
                )
            )
        return instances

    def score(self, answer: str, instance: Instance) -> float:
        """1 when LongBench's ``extract_answer`` finds the gold letter."""
        return longbench_score(answer, str(instance.gold))
