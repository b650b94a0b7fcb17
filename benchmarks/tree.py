"""A generated source tree of any size with facts planted at known files and lines.

Files of about 10 KB hold a mix of the lines real trees hold (code, log records, prose), each line made
unique by its numbers and words, from a fixed seed. A few files get a planted fact at a known line
(``PLANTED``); one more (``UNREAD``) holds a number that the benchmarks' and tests' runs never read.
Used by `benchmarks.citations_bench` and, at a small size, `tests/cli/test_cli_sources.py`.

`HardTree` is the high-entropy variant (issue 41): 400 files of random 12-word lines from a 30,000-word
vocabulary, the same facts planted, so that almost every word is rare and no line repeats another's words.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

FILE_CHARS = 10_000
# file index -> (line number, code); indexes wrap around the tree's file count
PLANTED = {7: (12, "ZEBRA-4821"), 5003: (3, "OTTER-1937"), 11_777: (40, "HERON-7702")}
UNREAD = (13, 9, "the backup vault number is 31-77-4096")  # file index, line, the line's text
_WORDS_SEED = 7


def fact(code: str) -> str:
    """A planted line."""
    return f"# NOTE: the rollout password for this service is {code} and it must rotate every year"


# A root model's last turn over a grepped tree: a sub-model checks each hit, the answer lists the codes
# (`hits` holds the planted lines the turn before found).
ANSWER_TURN = """```repl
checks = llm_query_batched(["Is this a password line? " + h for h in hits])
answer = "The rollout passwords are " + ", ".join(h.split(" is ")[1].split()[0] for h in hits) + "."
FINAL_VAR("answer")
```"""


def _vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(20_000)]


class Tree:
    """A tree of about `megabytes` MB in files of about `FILE_CHARS` characters.

    Args:
        megabytes: The total size.
        seed: The generator's seed (same seed, same tree).
    """

    def __init__(self, megabytes: float, seed: int = 1) -> None:
        self.files = max(1, int(megabytes * 1e6 / FILE_CHARS))
        self.seed = seed
        self.words = _vocabulary(random.Random(_WORDS_SEED))
        self.planted = {index % self.files: spot for index, spot in PLANTED.items()}
        unread, line, text = UNREAD
        self.unread = (unread % self.files, line, text)

    def path(self, index: int) -> str:
        """The file's path relative to the tree's folder."""
        return f"src/pkg_{index // 100:04d}/mod_{index:06d}.txt"

    def text(self, index: int) -> str:
        """The file's text."""
        rng = random.Random(self.seed * 1_000_003 + index)
        words = self.words
        lines: list[str] = []
        size = 0
        number = 0
        while size < FILE_CHARS:
            number += 1
            kind = rng.random()
            if kind < 0.4:
                line = (
                    f"    def {rng.choice(words)}_{index}_{number}(self, {rng.choice(words)}): "
                    f"return self.{rng.choice(words)}({rng.randint(0, 9999)})"
                )
            elif kind < 0.7:
                line = (
                    f"2024-05-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
                    f"{rng.randint(0, 59):02d} INFO {rng.choice(words)} served {rng.choice(words)} in "
                    f"{rng.randint(1, 999)} ms by worker {rng.randint(1, 64)}"
                )
            else:
                line = " ".join(rng.choices(words, k=rng.randint(6, 16))).capitalize() + "."
            lines.append(line)
            size += len(line) + 1
        return self._with_planted(index, lines)

    def _with_planted(self, index: int, lines: list[str]) -> str:
        """File `index`'s text: `lines` with its planted fact and the unread line put in their places."""
        spot = self.planted.get(index)
        if spot is not None:
            lines[spot[0] - 1] = fact(spot[1])
        if index == self.unread[0]:
            lines[self.unread[1] - 1] = self.unread[2]
        return "\n".join(lines) + "\n"

    def documents(self) -> Iterator[dict[str, object]]:
        """The tree as RLM documents (as `rlm_adapters.files` loads them), without writing it."""
        for index in range(self.files):
            path = self.path(index)
            yield {"id": path, "text": self.text(index), "metadata": {"path": path}}

    def write(self, folder: Path) -> Path:
        """Write the tree under `folder`; returns `folder`."""
        for index in range(self.files):
            target = folder / self.path(index)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self.text(index), encoding="utf-8")
        return folder

    def expected(self) -> set[tuple[str, int]]:
        """``(path, line)`` of each planted fact."""
        return {(self.path(index), line) for index, (line, _) in self.planted.items()}

    def codes(self) -> list[str]:
        """The planted codes, in file order."""
        return [code for _, (_, code) in sorted(self.planted.items())]


HARD_FILES = 400
HARD_VOCABULARY = 30_000
HARD_WORDS_PER_LINE = 12


class HardTree(Tree):
    """A tree of about `megabytes` MB in `HARD_FILES` files of random 12-word lines (high entropy).

    Args:
        megabytes: The total size (200 MB: files of 500 KB).
        seed: The generator's seed (same seed, same tree).
    """

    def __init__(self, megabytes: float, seed: int = 1) -> None:
        super().__init__(megabytes, seed)
        self.files = HARD_FILES
        self.file_chars = max(5_000, int(megabytes * 1e6 / HARD_FILES))  # the planted lines (up to 40) exist
        rng = random.Random(_WORDS_SEED + 1)
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(32_000)})[
            :HARD_VOCABULARY
        ]
        self.planted = {index % self.files: spot for index, spot in PLANTED.items()}
        unread, line, text = UNREAD
        self.unread = (unread % self.files, line, text)

    def text(self, index: int) -> str:
        """The file's text: random lines of `HARD_WORDS_PER_LINE` words, the facts at their lines."""
        rng = random.Random(self.seed * 1_000_003 + index)
        words = self.words
        lines: list[str] = []
        size = 0
        while size < self.file_chars:
            line = " ".join(rng.choices(words, k=HARD_WORDS_PER_LINE))
            lines.append(line)
            size += len(line) + 1
        return self._with_planted(index, lines)


def make_tree(kind: str, megabytes: float) -> Tree:
    """The benchmarks' tree of `kind` (``friendly``: `Tree`; ``hard``: `HardTree`)."""
    return HardTree(megabytes) if kind == "hard" else Tree(megabytes)
