"""Fails when a later install moved a package the README's install resolved (stdin: `pip freeze` now).

Usage: pip freeze | python .ci/same_set.py RESOLVED.txt
"""

import sys


def pins(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        name, sep, version = line.strip().partition("==")
        if sep:
            found[name.lower().replace("_", "-")] = version
    return found


before = pins(open(sys.argv[1], encoding="utf-8").readlines())
after = pins(sys.stdin.readlines())
moved = sorted(f"{name} {version} -> {after.get(name, 'removed')}" for name, version in before.items() if after.get(name) != version)
if moved:
    sys.exit("[ci] the benchmark extra changed the README's resolved set: " + "; ".join(moved))
print(f"[ci] the benchmark extra kept all {len(before)} packages of the README's set")
