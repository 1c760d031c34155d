"""Loading an export folder: every file verified first; an export audited like the model it came from."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from contrastlab.audit import AuditConfig  # noqa: E402
from contrastlab.audit.run import audit  # noqa: E402
from contrastlab.cli import main  # noqa: E402
from contrastlab.export import export_model, load_onnx, read_export  # noqa: E402
from contrastlab.io import CorruptFileError  # noqa: E402
from tests.audit.test_audit import FAST, _synthetic  # noqa: E402
from tests.models.text_models import write_tiny_bert  # noqa: E402


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("export")
    st = write_tiny_bert(root / "st", "st")
    return st, export_model(str(st), root / "st-onnx")


@pytest.fixture
def copy(folders: tuple[Path, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(folders[1], tmp_path / "copy"))


def test_a_verified_folder_loads(copy: Path) -> None:
    meta, model_bytes = read_export(copy)
    assert meta["kind"] == "text" and meta["inputs"][:2] == ["input_ids", "attention_mask"]
    assert model_bytes == (copy / "model.onnx").read_bytes() and set(meta["files"]) >= {"model.onnx"}
    assert any(name.startswith("tokenizer/") for name in meta["files"])


def test_a_corrupted_onnx_file_is_refused_naming_it(copy: Path) -> None:
    data = bytearray((copy / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=f"^{copy / 'model.onnx'} is corrupted: its SHA-256 does not match"):
        load_onnx(copy)


def test_a_truncated_onnx_file_is_refused_naming_it(copy: Path) -> None:
    data = (copy / "model.onnx").read_bytes()
    (copy / "model.onnx").write_bytes(data[: len(data) - 100])
    with pytest.raises(CorruptFileError, match=f"^{copy / 'model.onnx'} is truncated or changed"):
        load_onnx(copy)


def test_a_changed_tokenizer_or_sidecar_is_refused(copy: Path) -> None:
    tok = copy / "tokenizer" / "tokenizer_config.json"
    original = tok.read_bytes()
    tok.write_bytes(original.replace(b"{", b"{ ", 1))
    with pytest.raises(CorruptFileError, match=f"^{tok} is truncated or changed"):
        load_onnx(copy)
    tok.write_bytes(original)
    meta = copy / "onnx.json"
    meta.write_text(meta.read_text().replace('"dim": 16', '"dim": 17'))
    with pytest.raises(CorruptFileError, match=f"^{meta}"):
        load_onnx(copy)


def test_a_sidecar_listing_a_file_outside_the_folder_is_refused(copy: Path) -> None:
    from contrastlab.io import write_json_atomic

    meta = json.loads((copy / "onnx.json").read_text())
    meta.pop("contrastlab_sha256")
    meta["files"]["../outside"] = {"bytes": 1, "sha256": "0" * 64}
    write_json_atomic(copy / "onnx.json", meta)
    with pytest.raises(CorruptFileError, match="lists a file outside the export folder"):
        read_export(copy)


def test_audit_refuses_a_corrupted_export_in_one_line(copy: Path, tmp_path: Path, capsys) -> None:
    data = (copy / "model.onnx").read_bytes()
    (copy / "model.onnx").write_bytes(data[:-1])
    _, pairs = _synthetic(tmp_path, n=40)
    assert main(["audit", str(copy), "--pairs", str(pairs), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{copy / 'model.onnx'} is truncated" in err
    assert not (tmp_path / "out").exists()


def test_an_export_is_audited_as_the_model_it_came_from(folders: tuple[Path, Path], tmp_path: Path) -> None:
    st, onnx = folders
    _, pairs = _synthetic(tmp_path, n=120)
    runs = {
        name: audit(AuditConfig(model=str(model), pairs=str(pairs), max_seq_length=32, **FAST), tmp_path / name)
        for name, model in (("torch", st), ("onnx", onnx))
    }
    assert "(ONNX, " in runs["onnx"]["model"]
    torch_m, onnx_m = runs["torch"]["metrics"], runs["onnx"]["metrics"]
    # the embeddings agree to float32 rounding (test_onnx.py): the ranks, so the retrieval, are the same;
    # the fitted quantities move by rounding only
    ranked = [k for k in torch_m if k.startswith(("recall@", "mrr@", "ndcg@"))]
    assert "recall@1" in ranked and any(k.startswith("mrr@") for k in ranked)
    for key in ranked:
        assert onnx_m[key] == torch_m[key], key
    for key in ("tau_star", "norm_cv", "log_partition"):
        assert math.isclose(onnx_m[key], torch_m[key], rel_tol=1e-4), key
    for claim in ("frequency", "specificity"):  # the words and pairs through onnxruntime and its tokenizer
        t, o = (runs[r]["norm_claims"]["claims"][claim]["estimate"] for r in ("torch", "onnx"))
        assert o["n"] == t["n"] > 0 and math.isclose(o["value"], t["value"], abs_tol=1e-3), claim


def test_an_export_has_a_store_identity_that_follows_its_files(folders: tuple[Path, Path], tmp_path: Path) -> None:
    """An embedding store tells ONNX exports apart by their verified files: a re-exported int8 copy is another model."""
    from contrastlab.audit.text_model import TextModelSource, model_fingerprint
    from contrastlab.export import quantize_int8

    source = TextModelSource(str(folders[1]), max_seq_length=16)
    encoder = source.load()
    identity = source.identity(encoder)
    assert identity["fingerprint"] == model_fingerprint(source.load())  # two loads, one fingerprint
    assert identity["dim"] == encoder.dim and identity["name"] == str(folders[1].resolve())
    int8 = TextModelSource(str(quantize_int8(folders[1], tmp_path / "int8")), max_seq_length=16)
    assert model_fingerprint(int8.load()) != identity["fingerprint"]
    longer = TextModelSource(str(folders[1]), max_seq_length=32)
    assert model_fingerprint(longer.load()) != identity["fingerprint"]
