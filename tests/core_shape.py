"""The shape of `rlm_adapters.core`, measured the same way before and after a change of its layout.

``python -m tests.core_shape`` prints: the modules of ``core/`` (its top level and each sub-package), the
floors of the engine's import graph (a module's floor is one above the highest of the core modules it loads;
the layers `lm`, `sandbox`, `cache` and `tracing` count as one module each), and the imports from outside
``core`` into ``core`` modules that are not a face. `tests/test_layers.py` holds the last number at zero.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache

from tests.import_graph import PACKAGE, Package, within

CORE = "rlm_adapters.core"
# The packages of `core` reached from outside through their `__init__` (each with an `__all__`).
CORE_FACES = (CORE, f"{CORE}.adapter_kit", f"{CORE}.lm", f"{CORE}.sandbox", f"{CORE}.cache", f"{CORE}.tracing")
LAYERS = (f"{CORE}.lm", f"{CORE}.sandbox", f"{CORE}.cache", f"{CORE}.tracing")


def unit_of(module: str) -> str:
    """What a core module counts as on a floor: itself, or the layer (`lm`, `sandbox`, ...) holding it."""
    return next((layer for layer in LAYERS if within(module, layer)), module)


def floors(package: Package = PACKAGE) -> dict[str, int]:
    """Each engine module (and each layer, as one) -> its floor: 1 when it loads no other core unit."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, targets in package.graph.items():
        if within(name, CORE) and name != CORE:
            graph[unit_of(name)] |= {unit_of(t) for t in targets if within(t, CORE) and t != CORE} - {unit_of(name)}

    @cache
    def floor(unit: str) -> int:
        return 1 + max((floor(t) for t in graph[unit]), default=0)

    return {unit: floor(unit) for unit in sorted(graph)}


def outside_reaches(package: Package = PACKAGE) -> list[tuple[str, str]]:
    """The (importer, core module) pairs where a module outside `core` loads a core module that is not a face."""
    return sorted(
        (name, target)
        for name, targets in package.graph.items()
        if not within(name, CORE)
        for target in targets
        if within(target, CORE) and target not in CORE_FACES
    )


def report(package: Package = PACKAGE) -> str:
    """The measures above, as lines of text."""
    core = package.root / "core"
    lines = [f"core/ top level: {len(list(core.glob('*.py')))} modules"]
    for sub in sorted(p for p in core.iterdir() if (p / "__init__.py").exists()):
        lines.append(f"core/{sub.name}/: {len(package.modules_under(sub))} modules")
    found = floors(package)
    engine = {unit: f for unit, f in found.items() if unit not in LAYERS}
    lines.append(f"engine modules: {len(engine)}; floors: {max(found.values())}")
    by_floor: dict[int, list[str]] = defaultdict(list)
    for unit, f in found.items():
        by_floor[f].append(unit.removeprefix(CORE + "."))
    lines += [f"  floor {f}: {', '.join(sorted(by_floor[f]))}" for f in sorted(by_floor)]
    reaches = outside_reaches(package)
    targets = {target for _, target in reaches}
    lines.append(f"imports from outside core into non-face core modules: {len(reaches)} (into {len(targets)} modules)")
    lines += [f"  {target.removeprefix(CORE + '.')}" for target in sorted(targets)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
