"""How much work checking a value against a JSON schema may take, bounded before and while it is done.

A schema's ``$ref``s make it a graph, and a checker walks that graph as a tree: 31 subschemas whose ``allOf``
each names the next one twice are 2**30 checks of one value, and a thread cannot be killed once it has
started them. `check_cost` is run once, when a schema is accepted (a run's ``output_schema``, a tool's
``parameters``). It counts the subschemas a checker may apply, every ``$ref`` followed, and the values they
compare a value with (an ``enum``'s options, a ``const``'s nodes) (`MAX_EXPANDED_NODES`;
a recursive schema is unrolled `MAX_SCHEMA_DEPTH` levels of the value deep, as a value is never checked
deeper than that), and refuses with one line a ``$ref`` that leads back to itself at the same place of the
value (it never ends), more than `MAX_HOPS` of them in a chain, and nesting deeper than `MAX_SCHEMA_DEPTH`.
Under those bounds, checking a value applies at most `MAX_EXPANDED_NODES` subschemas at each of its nodes:
the work is linear in the value's size.

`Steps` bounds the check itself: both checkers count the subschemas they apply (an ``enum``'s options, a
pattern's text and a ``uniqueItems`` array count too) and stop after `MAX_CHECK_STEPS`, so that a value of a
million nodes under a schema of ten thousand ends in seconds with a problem that says so, whatever both
are: a thread that cannot be killed is at least bounded.

`resolve_pointer` is the one reading of a local ``$ref`` (``#``, ``#/$defs/Name``, RFC 6901 with the URI
fragment's %-escapes, as `jsonschema` reads it), so that what is counted is what is checked.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

MAX_SCHEMA_NODES = 10_000  # subschemas as written
MAX_EXPANDED_NODES = 100_000  # subschemas a check may apply, every $ref followed
MAX_SCHEMA_DEPTH = 64  # levels of the value a schema describes (tool arguments nest at most as deep)
MAX_HOPS = 64  # $ref / anyOf / allOf / oneOf / not / if applied at one place of the value, in a chain
MAX_CHECK_STEPS = 1_000_000  # subschemas applied by one check of one value (about 1-5 s of one core)

# Keywords whose subschemas apply to parts of the value (its items, its properties' values, its keys).
DESCENDING = frozenset(
    {"properties", "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames", "items",
     "prefixItems", "additionalItems", "unevaluatedItems", "contains"}
)  # fmt: skip
# Keywords whose value maps names (data) to subschemas.
NAMED = frozenset({"properties", "patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions"})
# Subschemas applied only where a $ref names them.
STORED = frozenset({"$defs", "definitions"})
# Values that are data, never subschemas; ``enum`` costs one comparison per option.
DATA = frozenset({"enum", "const", "default", "examples", "required", "dependentRequired", "$ref"})
# Data a check compares the value with, at a cost that grows with it.
_COMPARED = ("enum", "const", "required", "dependentRequired")
# Keywords where a boolean is a subschema (``additionalProperties: false``); elsewhere it is data
# (``uniqueItems: true``).
BOOLEAN_SCHEMAS = DESCENDING | {"not", "if", "then", "else"}


@dataclass(frozen=True)
class _Node:
    """One subschema: where it is written, its own cost, and the subschemas it applies."""

    pointer: str
    weight: int
    here: list[int] = field(default_factory=list)  # applied at the same place of the value
    down: list[int] = field(default_factory=list)  # applied to a part of the value
    refs: list[int] = field(default_factory=list)  # the here-edges that are $refs (for the error's words)


def resolve_pointer(root: Any, ref: Any) -> Any:
    """The subschema a local ``$ref`` names: ``#`` (the root) or ``#/a/b`` (a JSON pointer, %-escapes read).

    Raises:
        LookupError: Not a local JSON pointer, or one that names nothing (the message quotes the ``$ref``).
    """
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise LookupError(f"$ref {ref!r:.200} is not a reference inside this schema (only '#...' refs are)")
    fragment = unquote(ref[1:])
    if not fragment:
        return root
    if not fragment.startswith("/"):
        raise LookupError(f"$ref {ref!r:.200} names an anchor; refer by a JSON pointer ('#/$defs/Name')")
    node = root
    for part in fragment[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise LookupError(f"$ref {ref!r:.200} names nothing in the schema")
    return node


def check_cost(
    root: Any, applied: Collection[str] | None = None, refused: Collection[str] = (), at_root: Collection[str] = ()
) -> int:
    """How many subschemas checking one place of a value may apply at most, every ``$ref`` followed.

    Args:
        root: The schema (a dict or a boolean).
        applied: The keywords the checker applies (None: every keyword); the others cost nothing.
        refused: Keywords refused wherever they appear (``$dynamicRef``: what it names is known only while
            checking, so its cost cannot be counted before).
        at_root: Keywords refused below the root (``$id``: a nested one would make a ``$ref`` name
            something else than what was counted).

    Raises:
        ValueError: One line naming the subschema at fault (its JSON pointer) and what to do.
    """
    nodes = _graph(root, applied, refused, at_root)
    order = _in_place_order(nodes)
    recursive = _recursive(nodes)
    if not recursive:
        deepest = _depths(nodes)[0]
        if deepest > MAX_SCHEMA_DEPTH:
            raise ValueError(
                f"the schema describes values nested {deepest} levels deep; at most {MAX_SCHEMA_DEPTH} are checked"
            )
    total = _expanded(nodes, order, MAX_SCHEMA_DEPTH)
    if total > MAX_EXPANDED_NODES:
        how = "recursive $refs that branch" if recursive else "$refs that name the same subschemas many times"
        raise ValueError(
            f"the schema expands to more than {MAX_EXPANDED_NODES:,} subschemas once its $refs are followed "
            f"({len(nodes):,} as written: {how}); checking a value against it could take hours, so write each "
            "part once"
        )
    return total


def _graph(
    root: Any, applied: Collection[str] | None, refused: Collection[str], at_root: Collection[str]
) -> list[_Node]:
    """Every subschema (the root first, index 0), each $ref resolved to one of them, without recursion."""
    nodes: list[_Node] = []
    index: dict[int, int] = {}
    pending: list[tuple[int, Any]] = []  # (index, subschema) whose keywords are still to be read

    def add(node: Any, pointer: str) -> int:
        key = id(node)
        if key in index:
            return index[key]
        if not isinstance(node, Mapping | bool):
            raise ValueError(f"the subschema at {pointer!r:.200} must be an object or a boolean")
        if len(nodes) >= MAX_SCHEMA_NODES:
            raise ValueError(f"the schema has more than {MAX_SCHEMA_NODES:,} subschemas")
        weight = 1  # and the values a check compares (each option of an enum, each node of a const: a check
        if isinstance(node, Mapping):  # of one value against 100,000 options costs 100,000 comparisons)
            weight += sum(_data_size(node[key]) for key in _COMPARED if key in node)
        index[key] = len(nodes)
        nodes.append(_Node(pointer, weight))
        pending.append((len(nodes) - 1, node))
        return len(nodes) - 1

    add(root, "#")
    while pending:
        i, node = pending.pop()
        if not isinstance(node, Mapping):
            continue
        pointer = nodes[i].pointer
        for key, value in node.items():
            if key in refused or (i and key in at_root):
                raise ValueError(f"the keyword {key!r} at {pointer!r:.200} is not supported here ({_why(key)})")
            if key == "$ref":
                try:
                    target = resolve_pointer(root, value)
                except LookupError as exc:
                    raise ValueError(f"at {pointer!r:.200}: {exc}") from None
                j = add(target, f"{value}"[:200])
                nodes[i].here.append(j)
                nodes[i].refs.append(j)
                continue
            if key in DATA or (applied is not None and key not in applied and key not in STORED):
                continue
            edges = None if key in STORED else nodes[i].down if key in DESCENDING else nodes[i].here
            for name, sub in _subschemas(key, value):
                j = add(sub, f"{pointer}/{key}{name}")
                if edges is not None:
                    edges.append(j)
    return nodes


def _data_size(value: Any) -> int:
    """How many JSON values `value` holds (counting stops past `MAX_EXPANDED_NODES`: it is refused then)."""
    count, stack = 0, [value]
    while stack and count <= MAX_EXPANDED_NODES:
        item = stack.pop()
        count += 1
        if isinstance(item, Mapping):
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return count


def _subschemas(key: str, value: Any) -> list[tuple[str, Any]]:
    """The subschemas a keyword's value holds, each with its pointer's tail (what is not one is data)."""
    if key in NAMED and isinstance(value, Mapping):
        return [(f"/{_escaped(name)}", sub) for name, sub in value.items() if isinstance(sub, Mapping | bool)]
    if isinstance(value, list):
        return [(f"/{i}", sub) for i, sub in enumerate(value) if isinstance(sub, Mapping | bool)]
    if isinstance(value, Mapping) or (isinstance(value, bool) and key in BOOLEAN_SCHEMAS):
        return [("", value)]
    return []


def _escaped(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


def _why(key: str) -> str:
    if key in ("$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"):
        return "what it names is known only while a value is checked; use $ref to '#/$defs/...'"
    return "it would make a $ref name another schema; refer by JSON pointer from the root ('#/$defs/...')"


def _post_order(edges: list[list[int]]) -> tuple[list[int], int | None]:
    """Every node after all it reaches through `edges`, and a node on a cycle when there is one (then the
    order is not complete). Iterative: a schema may nest deeper than Python's stack."""
    state = [0] * len(edges)  # 0 unseen, 1 on the path, 2 done
    order: list[int] = []
    for start in range(len(edges)):
        if state[start]:
            continue
        stack: list[tuple[int, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            i, k = stack[-1]
            if k < len(edges[i]):
                stack[-1] = (i, k + 1)
                j = edges[i][k]
                if state[j] == 1:
                    return order, j
                if state[j] == 0:
                    state[j] = 1
                    stack.append((j, 0))
                continue
            stack.pop()
            state[i] = 2
            order.append(i)
    return order, None


def _in_place_order(nodes: list[_Node]) -> list[int]:
    """The subschemas with each one after all it applies at the same place (a $ref loop there is refused)."""
    order, looped = _post_order([node.here for node in nodes])
    if looped is not None:
        raise ValueError(
            f"the subschema at {nodes[looped].pointer!r:.200} applies itself to the same value through $ref / "
            "allOf / anyOf / oneOf / not without going into it, so a check never ends; a schema may refer to "
            "itself only inside properties or items"
        )
    hops = [0] * len(nodes)
    for i in order:
        hops[i] = 1 + max(hops[j] for j in nodes[i].here) if nodes[i].here else 0
        if hops[i] > MAX_HOPS:
            raise ValueError(
                f"the subschema at {nodes[i].pointer!r:.200} starts a chain of more than {MAX_HOPS} $ref / "
                "allOf / anyOf / oneOf / not applied to one value; flatten it"
            )
    return order


def _recursive(nodes: list[_Node]) -> bool:
    """Whether a subschema applies itself again further into the value (a tree type, a linked list)."""
    return _post_order([node.here + node.down for node in nodes])[1] is not None


def _depths(nodes: list[_Node]) -> list[int]:
    """For a schema that is not recursive: how many levels of the value each subschema reaches into."""
    depth = [0] * len(nodes)
    for i in _post_order([node.here + node.down for node in nodes])[0]:
        node = nodes[i]
        depth[i] = max([0] + [depth[j] for j in node.here] + [depth[j] + 1 for j in node.down])
    return depth


def _expanded(nodes: list[_Node], order: list[int], levels: int) -> int:
    """The subschemas applied from the root, every $ref followed, `levels` levels of the value deep.

    One pass per level of the value: the cost of a subschema at level d is its own, plus its same-place
    children's at d (already worked out: `order`), plus its parts' at d - 1. Counts stop growing past the
    limit, so a 2**30 expansion costs no more than a small one to refuse.
    """
    cap = MAX_EXPANDED_NODES + 1
    below = [0] * len(nodes)
    for _level in range(levels + 1):
        cost = [0] * len(nodes)
        for i in order:
            node = nodes[i]
            total = node.weight + sum(cost[j] for j in node.here) + sum(below[j] for j in node.down)
            cost[i] = min(total, cap)
        if cost == below:  # nothing deeper to count: a schema that is not recursive ends here
            break
        below = cost
    return below[0]


class StepsExceeded(Exception):
    """A check applied more than `MAX_CHECK_STEPS` subschemas (caught by the checker that counts)."""


class Steps:
    """The subschemas one check of one value may still apply (`MAX_CHECK_STEPS`); `take` raises past them."""

    def __init__(self, limit: int = MAX_CHECK_STEPS) -> None:
        self.left = limit
        self.limit = limit

    def take(self, count: int = 1) -> None:
        """Count `count` steps: one subschema applied, or work that costs as much (an ``enum``'s options).

        Raises:
            StepsExceeded: The check has taken `limit` steps.
        """
        self.left -= count
        if self.left < 0:
            raise StepsExceeded

    def problem(self, where: str) -> str:
        """What a check cut by the limit says."""
        return (
            f"{where}: too large to check against this schema (more than {self.limit:,} subschemas applied); "
            "make the value smaller"
        )
