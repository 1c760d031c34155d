"""No experiment imports another experiment: shared code lives in ``_``-prefixed helper modules."""

import ast
from pathlib import Path

import contrastlab.experiments

PACKAGE = Path(contrastlab.experiments.__file__).parent
EXPERIMENTS = {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}


def _imported_experiments(path: Path) -> set[str]:
    """Experiment modules that ``path`` imports, however spelled (absolute, relative, from the package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["contrastlab", "experiments"] and len(parts) > 2:
                    found.add(parts[2])
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from . import x / from .x import y
                parts = module.split(".") if module else []
                names = [parts[0]] if parts else [a.name for a in node.names]
            elif module == "contrastlab.experiments":
                names = [a.name for a in node.names]
            elif module.startswith("contrastlab.experiments."):
                names = [module.split(".")[2]]
            else:
                names = []
            found.update(names)
    return found & EXPERIMENTS


def test_the_walk_sees_every_spelling(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import contrastlab.experiments.k_gap\n"
        "from contrastlab.experiments.demo import run\n"
        "from contrastlab.experiments import norm_dynamics, run_experiment\n"
        "from . import continuity_bound\n"
        "from .weince_vs_infonce import Config\n"
        "from contrastlab.experiments._k_gap import fit_slope\n"
    )
    assert _imported_experiments(src) == {"k_gap", "demo", "norm_dynamics", "continuity_bound", "weince_vs_infonce"}


def test_no_module_of_the_package_imports_an_experiment():
    assert len(EXPERIMENTS) >= 10
    offenders = {
        p.name: sorted(_imported_experiments(p) - {p.stem})
        for p in PACKAGE.glob("*.py")
        if p.name != "__init__.py" and _imported_experiments(p) - {p.stem}
    }
    assert offenders == {}
