"""The house keeps its floors: every import inside backthink/ goes down, never in a circle.

The floors are written down in docs/architecture.md; this test reads every
import of every module, those inside functions too, and fails on an import
that crosses a floor upwards, and on a circle of imports. A module stays small
enough to hold one concept.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "backthink"

# Room -> floor. A module may import its own room and the rooms on lower floors only.
FLOORS: dict[str, int] = {
    "ground": 0,
    "config": 1,
    "decision": 2,
    "memory": 3,
    "store": 4,
    "endpoint": 4,
    "tools": 5,
    "delivery": 5,
    "round": 6,
    "host": 7,
    "testing": 8,
    "evaluation": 9,
    "web": 9,
    "api": 9,
    "cli": 10,
}
# The ground floor: the shared vocabulary and the ports, one room of small modules.
GROUND = {"models", "records", "errors", "ports", "redact", "protocol", "clock", "chat_ports"}
# The public names kept where scripts import them from, and the package's own entry points:
# they may import any room, and no room imports them.
FACADE = {"backthink", "backthink.footer", "backthink.channels", "backthink.__main__"}
# Lines a module may have: past this it holds more than one concept; split it by concern.
MAX_LINES = 400


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports, anywhere in its text (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        wanted: list[str] = []
        if isinstance(node, ast.Import):
            wanted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            wanted = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
            # `from package import module` reads the package's namespace: the
            # package (its __init__) is imported too, and a circle through it counts.
            if base in known and known[base].name == "__init__.py":
                wanted.append(base)
        for target in wanted:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
    return targets


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def room(name: str) -> str:
    """The room a module belongs to: the first part after `backthink` (the ground floor's)."""
    first = name.split(".")[1] if "." in name else name
    return "ground" if first in GROUND else first


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other round a circle (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_every_module_lives_in_a_known_room() -> None:
    """A new room is given its floor here and in docs/architecture.md before it is used."""
    rooms = {room(name) for name in modules() if name not in FACADE}
    assert rooms <= set(FLOORS), f"rooms without a floor: {sorted(rooms - set(FLOORS))}"


def test_no_import_goes_up_a_floor() -> None:
    """A room imports its own modules and lower floors only; nothing imports the facade."""
    wrong = []
    for source, targets in graph().items():
        for target in targets:
            if target in FACADE:
                wrong.append(f"{source} -> {target} (the facade is imported by no room)")
                continue
            if source in FACADE or room(source) == room(target):
                continue
            if FLOORS[room(target)] >= FLOORS[room(source)]:
                wrong.append(f"{source} -> {target}")
    assert not wrong, "imports across floors:\n" + "\n".join(sorted(wrong))


def test_no_import_circles() -> None:
    """No two modules import each other, directly or round a longer circle."""
    assert circles(graph()) == []


def test_the_circle_finder_finds_circles() -> None:
    """The check itself sees a circle of three and passes a straight line."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}}) == []


def test_modules_stay_small() -> None:
    """No module grows past MAX_LINES lines: one concept per module."""
    big = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_the_package_never_imports_the_test_fakes() -> None:
    """Only tests and benchmarks import `backthink.testing`; the evaluation has its own parts."""
    importers = sorted(
        source
        for source, targets in graph().items()
        if "backthink.testing" in targets and source != "backthink.testing"
    )
    assert importers == []
