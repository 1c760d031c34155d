"""``encoder.lora`` through peft: base model at step 0, only adapters train, merged export, exact resume, bad input."""

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
from contrastlab.models.lora import count_parameters
from contrastlab.train import ConfigError
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.export import MODEL_FOLDER, run_text_encoder
from contrastlab.train.job.runner import build_encoder, build_source, run_job
from contrastlab.train.loop.checkpoint import latest_checkpoint
from tests.models.text_models import write_tiny_bert

pytest.importorskip("sentence_transformers")
ROWS = [(f"query number {i} about topic {i % 3}", f"def answer_{i}(x)") for i in range(24)]
TEXTS = ["Return the sum of a and b.", "def add(a, b)", "x", "Open a file and return a stream of its bytes."]
LORA = {"r": 4, "alpha": 8.0, "dropout": 0.1, "targets": ["query", "value"]}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("lora")
    bert = write_tiny_bert(root / "st", "st")
    pairs = root / "pairs.tsv"
    pairs.write_text("".join("\t".join(r) + "\n" for r in ROWS), encoding="utf-8")
    return bert, pairs


def _job(files: tuple[Path, Path], steps: int = 4, **encoder: object) -> dict:
    bert, pairs = files
    return {
        "data": {"name": "text", "batch_size": 8, "text": {"path": str(pairs)}},
        "encoder": {
            "name": "sentence_transformers", "path": str(bert), "out_dim": 16, "max_seq_length": 12,
            "lora": LORA, **encoder,
        },
        "loss": {"name": "info_nce", "temperature": 0.5},
        "train": {"steps": steps, "seed": 1, "progress": False, "log_every": 1, "optim": {"lr": 0.05}},
        "eval": {"n": 8},
    }  # fmt: skip


def _embed(model: torch.nn.Module) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(texts_to_codes(TEXTS))


def test_at_step_0_the_adapted_model_is_the_base_model(files) -> None:
    """B starts at zero: the adapters add exactly 0, so the embeddings are the base model's bit for bit."""
    pytest.importorskip("peft")
    cfg = from_dict(JobConfig, _job(files))
    source = build_source(cfg)
    adapted = build_encoder(cfg, source)
    base = build_encoder(from_dict(JobConfig, _job(files, lora={"r": 0})), source)
    assert any("lora_B" in n for n, _ in adapted.named_parameters())
    assert all(float(p.detach().abs().max()) == 0 for n, p in adapted.named_parameters() if "lora_B" in n)
    torch.testing.assert_close(_embed(adapted), _embed(base), rtol=0, atol=0)


def test_only_the_adapters_train_and_their_count_is_reported(files, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    cfg = from_dict(JobConfig, _job(files))
    results = run_job(cfg, tmp_path / "run")
    state = latest_checkpoint(tmp_path / "run")["model"]
    base_model = build_encoder(from_dict(JobConfig, _job(files, lora={"r": 0})), build_source(cfg))
    base = base_model.state_dict()
    adapters = {k: v for k, v in state.items() if "lora_" in k}
    # tiny BERT: 2 layers x (query, value) x (A: r x 16, B: 16 x r) with r = 4
    assert len(adapters) == 8 and sum(v.numel() for v in adapters.values()) == 2 * 2 * 2 * 4 * 16
    assert results["parameters"]["trainable"] == 2 * 2 * 2 * 4 * 16
    assert results["parameters"]["total"] == count_parameters(base_model)["total"] + 512
    assert any(float(v.abs().max()) > 0 for k, v in adapters.items() if "lora_B" in k)  # the adapters moved
    for key, value in base.items():  # every base weight is where it started (peft renames the adapted ones)
        ours = (
            key if key in state else key.replace(".weight", ".base_layer.weight").replace(".bias", ".base_layer.bias")
        )
        assert torch.equal(state[ours], value), key
    assert results["peak_memory"]["bytes"] > 0 and results["peak_memory"]["what"]
    first = results["summary"].split(". Held-out")[0]
    assert "through LoRA (r = 4 on query, value: 512 of" in first and first.count(" with ") == 1, first


# tiny BERT, r = 4: LoRA's A is r x d_in and B is d_out x r, so an adapter on a d_in -> d_out layer holds
# r (d_in + d_out) parameters. The mean-pooled embedding reaches, in each of the 2 layers, the key (16 -> 16)
# and three dense layers: attention output (16 -> 16), intermediate (16 -> 32), output (32 -> 16); the pooler's
# dense (16 -> 16) is not reached.
REACHED_KEY_DENSE = 2 * 4 * ((16 + 16) + (16 + 16) + (16 + 32) + (32 + 16))


def test_adapters_go_only_on_layers_the_loss_reaches(files) -> None:
    """``targets: [key, dense]`` also names the pooler's dense layer; it gets no adapter, every adapter trains."""
    pytest.importorskip("peft")
    cfg = from_dict(JobConfig, _job(files, lora={**LORA, "targets": ["key", "dense"]}))
    model = build_encoder(cfg, build_source(cfg))
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and "pooler" not in n for n in trainable), sorted(trainable)
    assert count_parameters(model)["trainable"] == sum(p.numel() for p in trainable.values()) == REACHED_KEY_DENSE
    model.train()
    torch.nn.functional.normalize(model(texts_to_codes(TEXTS)), dim=1).sum().backward()
    assert [n for n, p in trainable.items() if p.grad is None] == []  # the loss reaches every adapter


def test_a_targets_list_of_only_unreached_layers_is_refused(files) -> None:
    pytest.importorskip("peft")
    cfg = from_dict(JobConfig, _job(files, lora={**LORA, "targets": ["pooler.dense"]}))
    with pytest.raises(ConfigError, match=r"^encoder\.lora\.targets: only frozen linear layers, outside the "):
        build_encoder(cfg, build_source(cfg))


@pytest.mark.distributed
def test_dense_targets_train_under_torchrun(files, tmp_path: Path) -> None:
    """Two ranks with ``targets: [key, dense]`` (``dense`` also names BERT's unused pooler): DDP finds every
    trainable parameter in the loss, and results.json counts only the adapters that train."""
    pytest.importorskip("peft")
    job = tmp_path / "job.json"
    job.write_text(json.dumps(_job(files, steps=2, lora={**LORA, "targets": ["key", "dense"]})))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            "-m", "contrastlab", "train", str(job), "--out", str(tmp_path / "run"), "--quiet",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["parameters"]["trainable"] == REACHED_KEY_DENSE
    assert f"{REACHED_KEY_DENSE:,} of" in results["summary"]


LOAD = """
import sys
sys.modules["peft"] = None  # the folder must load without peft
import numpy as np
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
np.save(sys.argv[2], model.encode(sys.argv[3:], batch_size=len(sys.argv) - 3, convert_to_numpy=True))
"""


def test_the_export_merges_the_adapters_and_loads_without_peft(files, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    run = tmp_path / "run"
    run_job(from_dict(JobConfig, _job(files)), run)
    folder = run / MODEL_FOLDER
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        assert not [k for k in f.keys() if "lora" in k or "base_layer" in k]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    out = tmp_path / "emb.npy"
    proc = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder), str(out), *TEXTS],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    encoder, _, _ = run_text_encoder(run)  # the adapted model, adapters unmerged
    assert any("lora_A" in n for n, _ in encoder.named_parameters())
    np.testing.assert_allclose(np.load(out), _embed(encoder).numpy(), rtol=0, atol=1e-5)


def test_resume_is_exact(files, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    run_job(from_dict(JobConfig, _job(files, steps=4)), tmp_path / "whole")
    run_job(from_dict(JobConfig, _job(files, steps=2)), tmp_path / "parts")
    run_job(from_dict(JobConfig, _job(files, steps=4)), tmp_path / "parts", resume=True)
    whole, parts = latest_checkpoint(tmp_path / "whole"), latest_checkpoint(tmp_path / "parts")
    assert whole["step"] == parts["step"] == 4
    assert whole["model"].keys() == parts["model"].keys()
    assert all(torch.equal(whole["model"][k], parts["model"][k]) for k in whole["model"])
    rows = [(tmp_path / r / "metrics.jsonl").read_text() for r in ("whole", "parts")]
    assert [json.loads(x)["loss"] for x in rows[0].splitlines()] == [
        json.loads(x)["loss"] for x in rows[1].splitlines()
    ]


def test_bad_lora_input_is_one_line_naming_the_field(files, tmp_path: Path, capsys, monkeypatch) -> None:
    pytest.importorskip("peft")
    job = tmp_path / "job.json"
    cases = [
        (
            _job(files, lora={**LORA, "targets": ["query", "nope"]}),
            "encoder.lora.targets: 'nope' names no linear layer",
        ),
        ({**_job(files), "encoder": {"name": "mlp", "lora": LORA}}, "encoder.lora applies to the text encoders"),
        (_job(files, lora={**LORA, "dropout": 1.0}), "encoder.lora.dropout must be in [0, 1)"),
    ]
    for data, needle in cases:
        job.write_text(json.dumps(data))
        capsys.readouterr()
        assert cli.main(["train", str(job), "--out", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
        assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"^encoder\.lora\.targets: 'nope' names no linear layer of the model; "):
        run_job(from_dict(JobConfig, cases[0][0]), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    monkeypatch.setitem(sys.modules, "peft", None)  # as if contrastlab[lora] were not installed
    with pytest.raises(ConfigError, match=r"^encoder\.lora\.r > 0 needs the peft package: .*contrastlab\[lora\]"):
        from_dict(JobConfig, _job(files))
