"""A generated folder of real-looking text files, and a root policy that works on it like a model would."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_adapters.testing.fake_openai import scripted_root

FACT_CODE = "HX-4471-KESTREL"
FACT = f"The launch code for Project Halcyon is {FACT_CODE}; keep it out of chat."
FACT_FILES = ("incident_report_015.txt", "meeting_notes_086.txt", "release_notes_152.txt")
QUESTION = "What is the launch code for Project Halcyon?"

_PEOPLE = [
    "Amara Osei",
    "Lukas Brandt",
    "Priya Raman",
    "Tomás Ortega",
    "Mei Lin",
    "Jonah Feld",
    "Sofia Greco",
]
_TEAMS = ["payments", "search", "platform", "mobile", "data", "identity", "billing"]
_SYSTEMS = [
    "the ingest queue",
    "the ledger service",
    "the cache tier",
    "the edge proxy",
    "the batch scheduler",
]
_PROJECTS = ["Halcyon", "Borealis", "Juniper", "Quartz", "Meridian"]
_KINDS = ["incident_report", "meeting_notes", "release_notes", "design_review", "weekly_update"]


def _sentence(rng: random.Random) -> str:
    person, team, system = rng.choice(_PEOPLE), rng.choice(_TEAMS), rng.choice(_SYSTEMS)
    project = rng.choice(_PROJECTS)
    number = rng.randint(2, 950)
    templates = [
        f"{person} from {team} reported that {system} dropped {number} requests during the evening peak.",
        f"The {team} team agreed to move the Project {project} launch review to next Thursday.",
        f"Latency on {system} stayed under {number} ms after the rollback, according to {person}.",
        f"{person} will draft a proposal for sharding {system} before the next planning cycle.",
        f"Action item: {team} owns the follow-up on {system}, due in {number % 30 + 1} days.",
        f"We reviewed {number} open tickets; most of them concern {system} and its retry policy.",
        f"Project {project} is still blocked on a capacity review owned by {person}.",
        f"Customer feedback for {team} mentioned slow exports in {number} separate threads.",
    ]
    return rng.choice(templates)


def _document(rng: random.Random, kind: str, number: int, fact: bool) -> str:
    lines = [f"{kind.replace('_', ' ').title()} #{number:03d}", f"Owner: {rng.choice(_PEOPLE)}", ""]
    paragraphs = []
    for _ in range(rng.randint(30, 46)):
        paragraphs.append(" ".join(_sentence(rng) for _ in range(rng.randint(3, 6))))
    if fact:
        paragraphs.insert(len(paragraphs) // 2, f"Reminder from security: {FACT}")
    elif number % 23 == 0:  # decoys: the same wording about another project
        paragraphs.insert(3, f"The launch code for Project Borealis is BX-{number:04d}-WREN.")
    return "\n".join([*lines, "\n\n".join(paragraphs)]) + "\n"


@dataclass(frozen=True)
class Corpus:
    """The generated folder and what the test knows about it."""

    folder: Path
    files: list[Path]


def make_corpus(folder: Path, count: int = 200, seed: int = 7) -> Corpus:
    """Write `count` text files (~15 KB each); the fact is in exactly the three `FACT_FILES`."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for number in range(count):
        name = f"{_KINDS[number % len(_KINDS)]}_{number:03d}.txt"
        path = folder / name
        path.write_text(_document(rng, _KINDS[number % len(_KINDS)], number, name in FACT_FILES), encoding="utf-8")
        files.append(path)
    assert all((folder / name).exists() for name in FACT_FILES)
    return Corpus(folder, files)


# The code a capable root model writes for this question: look, filter in code, fan out, combine.
PROBE = """```repl
print(type(context), len(context))
print(sorted(context[0].keys()), context[0]["metadata"].get("file_name"))
```"""
FILTER = """```repl
import re
pattern = re.compile(r"launch code for project halcyon", re.IGNORECASE)
hits = [d for d in context if pattern.search(d["text"])]
print(len(hits), [d["metadata"]["file_name"] for d in hits])
```"""
READ_WHOLE = """```repl
question = "What is the launch code for Project Halcyon? Reply with the code only, or NONE."
answers = llm_query_batched([f"{question}\\n\\nDocument:\\n{d['text']}" for d in hits])
codes = sorted({a.strip() for a in answers if a.strip() != "NONE"})
answer = f"The launch code for Project Halcyon is {codes[0]}." if len(codes) == 1 else f"unclear: {codes}"
print(answer)
```"""
READ_WINDOW = """```repl
question = "What is the launch code for Project Halcyon? Reply with the code only, or NONE."
windows = []
for d in hits:
    m = pattern.search(d["text"])
    windows.append(d["text"][max(0, m.start() - 300): m.end() + 300])
answers = llm_query_batched([f"{question}\\n\\nExcerpt:\\n{w}" for w in windows])
codes = sorted({a.strip() for a in answers if a.strip() != "NONE"})
answer = f"The launch code for Project Halcyon is {codes[0]}." if len(codes) == 1 else f"unclear: {codes}"
print(answer)
```"""
FINISH = 'FINAL_VAR("answer")'


def root_policy(read: str = READ_WHOLE) -> Any:
    """A root model playing the four turns above (by turn, so nested or repeated runs stay right)."""
    return scripted_root([PROBE, FILTER, read, FINISH])


_CODE = re.compile(r"launch code for project halcyon is ([A-Z0-9-]+)", re.IGNORECASE)


def leaf_policy(prompt: str) -> str:
    """A sub-model that reads the code from the text it was given."""
    match = _CODE.search(prompt)
    return match.group(1) if match else "NONE"
