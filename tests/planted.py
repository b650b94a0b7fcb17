"""A 300-file source tree with facts planted at known lines, and a root model that finds and cites them.

Shared by the citation tests of sources/, the MCP server, LangChain and the CLI: each checks that the
sources of the answer name exactly the planted files and lines, and nothing the run merely looked at.
One more file holds a number no run of these tests reads (`UNREAD`); `root(fabricated=True)` answers
with it and with a number that appears nowhere, which every interface must flag as unsupported.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.tree import ANSWER_TURN
from rlm_adapters.testing.fake_openai import RootPolicy, scripted_root

FILES = 300
# file index -> (line number, code)
PLANTED = {
    7: (12, "ZEBRA-4821"),
    58: (3, "OTTER-1937"),
    142: (40, "HERON-7702"),
    233: (27, "LYNX-5150"),
    299: (1, "MOTH-0042"),
}
LINES = 44
# file index, line, text: a number only this line holds, which the root model's grep never reaches.
UNREAD = (150, 9, "# the vault number is 31-77-4096, kept offline")
UNREAD_NUMBER = "31-77-4096"
FABRICATED_NUMBER = "8,312"


def relative_path(i: int) -> str:
    return f"src/pkg_{i:03d}/mod_{i:03d}.txt"


def filler(i: int, n: int) -> str:
    return f"def helper_{i}_{n}(value): return value * {n % 7} + {i % 5}  # keeps the shape of the data"


def fact(code: str) -> str:
    return f"# NOTE: the rollout password for this service is {code} and it must rotate every year"


def file_text(i: int) -> str:
    lines = [filler(i, n) for n in range(1, LINES + 1)]
    if i in PLANTED:
        line, code = PLANTED[i]
        lines[line - 1] = fact(code)
    if i == UNREAD[0]:
        lines[UNREAD[1] - 1] = UNREAD[2]
    return "\n".join(lines) + "\n"


def make_tree(root: Path) -> Path:
    """Write the 300 files under `root`; returns `root`."""
    for i in range(FILES):
        path = root / relative_path(i)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(file_text(i), encoding="utf-8")
    return root


def documents() -> list[dict[str, object]]:
    """The tree as RLM documents, without writing it."""
    return [
        {"id": relative_path(i), "text": file_text(i), "metadata": {"path": relative_path(i)}} for i in range(FILES)
    ]


def expected(prefix: str = "") -> set[tuple[str, int, int]]:
    """The sources a correct citation gives: each planted line, alone."""
    return {(prefix + relative_path(i), line, line) for i, (line, _) in PLANTED.items()}


# Turn 0 looks around (a preview that reaches the root model but does not support the answer) and greps;
# turn 1 asks a sub-model to confirm each hit, then answers with the codes.
FIND = """```repl
docs = context if isinstance(context, list) else [context]
print(docs[0]["text"][:300])
hits = []
for d in docs:
    for n, line in enumerate(d["text"].splitlines(), 1):
        if "rollout password" in line:
            hits.append(line.strip())
for h in hits:
    print(h)
```"""
ANSWER = ANSWER_TURN


ANSWER_FABRICATED = """```repl
checks = llm_query_batched(["Is this a password line? " + h for h in hits])
answer = ("The rollout passwords are " + ", ".join(h.split(" is ")[1].split()[0] for h in hits) + ". "
          + "The vault number is 31-77-4096 and 8,312 rotations were logged.")
FINAL_VAR("answer")
```"""


def root(*, fabricated: bool = False) -> RootPolicy:
    """The root model's script for the planted tree (`fabricated`: its answer adds two unread numbers)."""
    return scripted_root([FIND, ANSWER_FABRICATED if fabricated else ANSWER])


ANSWER_TEXT = "The rollout passwords are " + ", ".join(code for _, code in PLANTED.values()) + "."
FABRICATED_TEXT = f"{ANSWER_TEXT} The vault number is {UNREAD_NUMBER} and {FABRICATED_NUMBER} rotations were logged."


def unread_location(prefix: str = "") -> str:
    """``path:line`` of the line holding `UNREAD_NUMBER`."""
    return f"{prefix}{relative_path(UNREAD[0])}:{UNREAD[1]}"


def check_flags(claims: list[dict[str, object]], prefix: str = "") -> None:
    """Assert what every interface must say of `FABRICATED_TEXT`'s claims (as dicts)."""
    status = {str(claim["text"]): claim for claim in claims}
    for _, code in PLANTED.values():
        assert status[code]["status"] == "supported", status[code]
    made_up, unread = status[FABRICATED_NUMBER], status[UNREAD_NUMBER]
    assert made_up["status"] == "unsupported" and made_up["reason"] == "in no text that reached a model"
    assert unread["status"] == "unsupported"
    assert unread["reason"] == f"in the input ({unread_location(prefix)}) but in no text that reached a model"
