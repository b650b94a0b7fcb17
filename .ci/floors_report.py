"""Prints each direct dependency's floor beside the version the floors pass installed (stdin: `uv pip freeze`).

A chosen version above its floor means the floor cannot be installed with the rest (another dependency needs
more): the floor says less than the truth and should be raised to what was chosen, so the report exits 1. Usage:
uv pip freeze | python .ci/floors_report.py pyproject.toml
"""

import re
import sys
import tomllib

REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version ("1.35" and "1.35.0" are equal; pre-release tags are dropped)."""
    numbers = [int(part) for part in re.findall(r"\d+", version.split("+")[0])[:4]]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


project = tomllib.load(open(sys.argv[1], "rb"))["project"]
floors: dict[str, str] = {}
for requirement in [*project["dependencies"], *(r for group in project["optional-dependencies"].values() for r in group)]:
    if (found := REQUIREMENT.match(requirement)) and not found.group(1).startswith("rlm-adapters"):
        name = canonical(found.group(1))
        # An extra may need more than the base (daytona needs a newer pydantic): its floor is the highest.
        if name not in floors or release(found.group(2)) > release(floors[name]):
            floors[name] = found.group(2)
chosen = {canonical(n): v for n, _, v in (line.strip().partition("==") for line in sys.stdin) if v}
above = 0
for name, floor in sorted(floors.items()):
    version = chosen.get(name, "not installed")
    mark = "" if version != "not installed" and release(version) <= release(floor) else "   <- above its floor"
    above += bool(mark)
    print(f"  {name:32} floor {floor:10} installed {version}{mark}")
print(f"[floors] {len(floors) - above} of {len(floors)} direct dependencies installed at their floor")
if above:
    print("[floors] raise the floors marked above to the version installed, or lower what keeps them from resolving")
    sys.exit(1)
