"""A fine-tuned text model leaves its run: a sentence-transformers folder, `contrastlab export`, audits on any pairs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab import cli
from contrastlab.config import from_dict
from contrastlab.data.text.codes import texts_to_codes
from contrastlab.train import JobConfig, run_job
from contrastlab.train.job.export import MODEL_FOLDER, run_text_encoder
from tests.train.job._text_files import bert_and_pairs

pytest.importorskip("sentence_transformers")
ROWS = [(f"query number {i} about topic {i % 3}", f"def answer_{i}(x)") for i in range(40)]
TEXTS = ["Return the sum of a and b.", "def add(a, b)", "x", "Open a file and return a stream of its bytes."]

LOAD = """
import sys
import numpy as np
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
texts = sys.argv[3:]
np.save(sys.argv[2], model.encode(texts, batch_size=len(texts), convert_to_numpy=True))
assert not [m for m in sys.modules if m.split(".")[0] == "contrastlab"], "contrastlab was imported"
print(model.similarity_fn_name)
"""


@pytest.fixture(scope="module")
def text_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export")
    bert, pairs = bert_and_pairs(root, ROWS)
    job = from_dict(
        JobConfig,
        {
            "data": {"name": "text", "batch_size": 8, "text": {"path": str(pairs)}},
            "encoder": {"name": "sentence_transformers", "path": str(bert), "out_dim": 16, "max_seq_length": 12},
            "loss": {"name": "info_nce", "temperature": 0.5},
            "train": {"steps": 3, "seed": 1, "progress": False, "log_every": 1, "eval_every": 0},
            "eval": {"n": 8},
        },
    )
    results = run_job(job, root / "run")
    assert results["model_folder"] == MODEL_FOLDER
    return root / "run"


def _load_in_subprocess(folder: Path, tmp_path: Path) -> tuple[np.ndarray, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    out = tmp_path / "emb.npy"
    proc = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder), str(out), *TEXTS],
        cwd=tmp_path,  # not the repository: nothing of contrastlab on the path but the installed package
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return np.load(out), proc.stdout.strip().splitlines()[-1]


def test_the_saved_folder_loads_without_contrastlab_and_embeds_like_the_run(text_run: Path, tmp_path: Path) -> None:
    folder = text_run / MODEL_FOLDER
    assert (folder / "modules.json").is_file()
    about = json.loads((folder / "contrastlab.json").read_text())
    assert about["step"] == 3 and about["similarity"] == "cosine"
    emb, similarity = _load_in_subprocess(folder, tmp_path)
    encoder, _, step = run_text_encoder(text_run)
    with torch.no_grad():
        ours = encoder(texts_to_codes(TEXTS)).numpy()
    assert step == 3 and emb.shape == ours.shape == (len(TEXTS), 16)
    # the same float32 modules on the same padded batch; only the order of the batch differs (sorted by length)
    np.testing.assert_allclose(emb, ours, rtol=0, atol=1e-5)
    assert similarity == "cosine"


def test_the_folder_holds_the_fine_tuned_weights_not_the_base_model(text_run: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    base = SentenceTransformer(str(text_run.parent / "st"), device="cpu")
    tuned = SentenceTransformer(str(text_run / MODEL_FOLDER), device="cpu")
    a = base.encode(TEXTS, normalize_embeddings=True)
    b = tuned.encode(TEXTS, normalize_embeddings=True)
    assert np.abs(a - b).max() > 1e-4  # three AdamW steps moved the weights


def test_export_command_writes_a_folder_and_refuses_bad_input(
    text_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exported"
    assert cli.main(["export", str(text_run), "--st", str(out)]) == 0
    assert "written:" in capsys.readouterr().out
    a = json.loads((out / "contrastlab.json").read_text())
    assert a["run"] == str(text_run.resolve()) and (out / "modules.json").is_file()
    for argv, needle in (
        (["export", str(text_run), "--st", str(out)], "export: out: "),  # not empty
        (["export", str(tmp_path / "nowhere"), "--st", str(tmp_path / "x")], "is not a training run folder"),
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "x").exists()


def test_a_text_run_is_audited_on_any_pairs_and_quiet_means_quiet(
    text_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = tmp_path / "other.tsv"
    pairs.write_text("".join(f"how to compute thing {i}\tdef thing_{i}()\n" for i in range(30)), encoding="utf-8")
    out = tmp_path / "audit"
    argv = ["audit", str(text_run), "--pairs", str(pairs), "--out", str(out), "--quiet", "--n_boot", "20"]
    assert cli.main([*argv, "--k_max", "8"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no model-loading bar, no encoding bar
    res = json.loads((out / "results.json").read_text())
    assert res["pairs"]["kind"] == "pairs file" and res["metrics"]["num_documents"] == 30
    assert res["model"] == f"{text_run} (contrastlab run, step 3)"


def test_a_run_that_does_not_embed_text_is_refused_with_pairs(tmp_path: Path, capsys) -> None:
    job = from_dict(
        JobConfig,
        {
            "data": {"latent_dim": 3, "batch_size": 16},
            "encoder": {"hidden": [8], "out_dim": 3},
            "train": {"steps": 2, "progress": False},
            "eval": {"n": 64},
        },
    )
    run_job(job, tmp_path / "run")
    assert not (tmp_path / "run" / MODEL_FOLDER).exists()  # only text runs save a model folder
    (tmp_path / "p.tsv").write_text("a\tb\nc\td\n")
    argv = ["audit", str(tmp_path / "run"), "--pairs", str(tmp_path / "p.tsv"), "--out", str(tmp_path / "o")]
    assert cli.main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model: " in err and "does not embed text" in err, err
    assert not (tmp_path / "o").exists()
    assert cli.main(["export", str(tmp_path / "run"), "--st", str(tmp_path / "e")]) == 2
    assert "only a text run" in capsys.readouterr().err


def test_train_quiet_prints_nothing_on_stderr_and_leaves_the_model(
    text_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"data: {{name: text, batch_size: 8, text: {{path: '{text_run.parent / 'pairs.tsv'}'}}}}\n"
        f"encoder: {{name: sentence_transformers, path: '{text_run.parent / 'st'}', out_dim: 16, max_seq_length: 12}}\n"
        "train: {steps: 1, eval_every: 0}\n"
        "eval: {n: 8}\n"
    )
    out = tmp_path / "run"
    assert cli.main(["train", str(config), "--out", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no loading, training or shard-writing bar
    assert (out / MODEL_FOLDER / "modules.json").is_file()
