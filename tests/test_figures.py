"""The one figure helper: PNGs written atomically, no pyplot, no backend change; no module saves its own."""

import subprocess
import sys
from pathlib import Path

import pytest

from contrastlab import figures

PACKAGE = Path(__file__).resolve().parents[1] / "contrastlab"


def test_save_png_writes_a_complete_png_and_no_temporary(tmp_path):
    fig, axes = figures.subplots(1, 2, figsize=(3, 2), squeeze=False)
    axes[0, 0].plot([0, 1], [1, 0])
    fig.tight_layout()
    out = tmp_path / "sub" / "f.png"
    figures.save_png(fig, out, dpi=40)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["f.png"]


def test_a_failed_save_leaves_the_old_file(tmp_path):
    out = tmp_path / "f.png"
    out.write_bytes(b"old")

    class Broken:
        def savefig(self, *args, **kwargs):
            raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError):
        figures.save_png(Broken(), out)
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.png"]


def test_no_pyplot_and_the_backend_is_left_alone(tmp_path):
    out = tmp_path / "f.png"
    code = (
        "import matplotlib, sys; matplotlib.use('svg'); from contrastlab import figures; "
        "fig = figures.new_figure((2, 2)); fig.add_subplot(1, 1, 1).plot([0, 1]); "
        f"figures.save_png(fig, {str(out)!r}); "
        "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["svg", "False"]
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_no_module_saves_figures_itself():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "figures.py":
            continue
        text = path.read_text(encoding="utf-8")
        for needle in ("matplotlib.use(", "import matplotlib.pyplot", ".savefig("):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert offenders == []
