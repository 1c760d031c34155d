"""No import cycle between contrastlab's subpackages: every import of every module, lazy ones included.

The graph's nodes are the top-level parts of the package (``losses``, ``distributed``, ``eval``, the
``_checks`` module, ...); an edge A → B means some module under A imports something under B. A cycle
means two parts cannot be understood, tested or replaced apart (``distributed`` once re-derived every
loss and ``losses`` dispatched to it).
"""

import ast
from pathlib import Path

import contrastlab

ROOT = Path(contrastlab.__file__).parent


def _part(module: str) -> str | None:
    """``contrastlab.losses.tiled`` → ``losses``; None outside the package or for the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "contrastlab" and len(parts) > 1 else None


def _imports(path: Path) -> set[str]:
    """Every module a file imports (absolute names; ``from contrastlab import x`` gives ``contrastlab.x``)."""
    pkg = ".".join(("contrastlab", *path.relative_to(ROOT).with_suffix("").parts))
    if path.name == "__init__.py":
        pkg = pkg.removesuffix(".__init__")
    else:
        pkg = pkg.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def import_graph() -> dict[str, set[str]]:
    """Part → the other parts it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        src = _part(".".join(("contrastlab", *path.relative_to(ROOT).with_suffix("").parts)))
        if src is None or src == "__init__":
            continue
        targets = {_part(m) for m in _imports(path)}
        graph.setdefault(src, set()).update(t for t in targets if t and t != src and t != "__init__")
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w) :] + [w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert "distributed" in graph["losses"]  # the losses gather through the collectives
    assert "losses" in graph["eval"]  # eval.tails reads WEINCE's tail statistics


def _on_cycles(graph: dict[str, set[str]]) -> set[str]:
    """Every node that lies on some cycle (its strongly connected component has another node)."""

    def reach(v: str) -> set[str]:
        seen, stack = set(), [v]
        while stack:
            for w in graph.get(stack.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        return seen

    return {v for v in graph if v in reach(v)}


def test_no_cycle_between_subpackages():
    graph = import_graph()
    assert _on_cycles(graph) == set(), f"import cycle: {find_cycle(graph)}"


def module_graph(package: Path) -> dict[str, set[str]]:
    """Module → the other modules of the same (sub)package it imports, lazy and type-only imports included.

    A package's ``__init__`` is the node named after the package; an import of ``pkg.mod.name``
    counts as one of ``pkg.mod``.
    """
    mods: dict[str, Path] = {}
    for path in package.glob("*.py"):
        parts = ("contrastlab", *path.relative_to(ROOT).with_suffix("").parts)
        mods[".".join(parts[:-1] if path.name == "__init__.py" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for imported in _imports(path):
            parts = imported.split(".")
            owner = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in mods), None)
            if owner is not None and owner != name:
                targets.add(owner)
        graph[name] = targets
    return graph


def test_no_cycle_between_the_modules_of_any_subpackage():
    """Within each subpackage, imports run one way (a package's __init__ may import its modules, not back)."""
    for package in sorted({p.parent for p in ROOT.rglob("*.py")}):
        graph = {m: t for m, t in module_graph(package).items() if "." in m and m != package_name(package)}
        assert _on_cycles(graph) == set(), f"import cycle in {package}: {find_cycle(graph)}"


def package_name(package: Path) -> str:
    """``…/contrastlab/train`` → ``contrastlab.train``."""
    return ".".join(("contrastlab", *package.relative_to(ROOT).parts))


def test_train_job_layers_run_one_way():
    """configs ← data source ← dataset builders ← runner: no lower layer imports a higher one, even for types."""
    graph = module_graph(ROOT / "train" / "job")
    layers = [
        {"contrastlab.train.job.config", "contrastlab.train.job.data_source"},
        {"contrastlab.train.job.feature_pairs", "contrastlab.train.job.text_dataset"},
        {"contrastlab.train.job.datasets"},
        {"contrastlab.train.job.runner"},
    ]
    for i, layer in enumerate(layers):
        above = set().union(*layers[i + 1 :])
        for module in layer:
            assert not graph[module] & above, f"{module} imports {sorted(graph[module] & above)}"
    assert "contrastlab.train.job.config" in graph["contrastlab.train.job.datasets"]  # a real import, not type-only


#: The package's floors, top to bottom (docs/architecture.md draws them): a part may import its own floor's
#: parts and those below, never one above.
FLOORS = (
    ("cli", "__main__"),
    ("experiments", "mine"),
    ("audit",),
    ("scale", "export"),
    ("train",),
    ("tasks",),
    ("eval",),
    ("models", "adapters"),
    ("losses", "theory", "data", "report"),
    ("search", "worlds"),
    ("config", "io", "npyfile", "distributed", "progress", "seeds", "_checks", "figures", "host", "__version__"),
)


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every edge (importer, imported) of ``graph`` that runs up the floors."""
    floor = {part: i for i, parts in enumerate(FLOORS) for part in parts}
    return sorted((src, dst) for src, dsts in graph.items() for dst in dsts if floor[dst] < floor[src])


def test_every_part_has_a_floor_and_no_import_runs_up_the_floors():
    graph = import_graph()
    on_a_floor = {part for parts in FLOORS for part in parts}
    assert set(graph) <= on_a_floor, f"parts without a floor: {sorted(set(graph) - on_a_floor)}"
    assert upward_imports(graph) == [], f"imports that run up the floors: {upward_imports(graph)}"


def test_an_import_up_the_floors_is_seen():
    graph = {"data": {"train", "io"}, "train": {"data"}, "io": set()}
    assert upward_imports(graph) == [("data", "train")]
