"""The training attention: SDPA's numbers with a 1-byte dropout mask saved, SDPA itself everywhere else."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from contrastlab.models.attention import ATTENTION, DropoutAttention
from contrastlab.models.text import load_text_model, use_sdpa
from tests.models.text_models import write_tiny_bert

pytest.importorskip("sentence_transformers")

TEXTS = ["query 1", "a longer passage about proteins and the cells that make them " * 3, "mid length text", "x"]


def _math_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float, p: float):
    """Attention written from its definition: softmax(q kᵀ · scale + mask), dropout, times v (autograd's backward)."""
    root = math.sqrt(scale)
    scores = (q * root) @ (k * root).transpose(-2, -1)
    if mask is not None:
        scores = scores + (torch.zeros_like(scores).masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else mask)
    return torch.nn.functional.dropout(torch.softmax(scores, -1), p, training=True) @ v


def _seeded(fn, mask: torch.Tensor | None, scale: float = 0.3, p: float = 0.2):
    def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)  # the same dropout draws on every call
        return fn(q, k, v, mask, scale, p)

    return call


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_dropout_attention_is_the_math_path_and_passes_gradcheck(mask_kind: str) -> None:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=gen).requires_grad_() for _ in range(3))
    keys = torch.rand(2, 1, 1, 4, generator=gen) > 0.3
    keys[..., 0] = True  # every query attends to at least one key
    mask = {"none": None, "bool": keys, "float": torch.randn(2, 1, 4, 4, dtype=torch.float64, generator=gen)}[mask_kind]
    ours, ref = _seeded(DropoutAttention.apply, mask), _seeded(_math_path, mask)
    out, expected = ours(q, k, v), ref(q, k, v)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-15)  # the same draws, the same operations
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(expected, (q, k, v), g), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
    assert torch.autograd.gradcheck(ours, (q, k, v))


def test_dropout_attention_saves_the_softmax_and_a_bool_mask_where_sdpa_saves_three_floats() -> None:
    q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        DropoutAttention.apply(q, k, v, None, 0.125, 0.1)
    big = [t for t in saved if t.shape[-2:] == (16, 16)]  # (B, H, L_q, L_k): the attention's own tensors
    assert sorted(str(t.dtype) for t in big) == ["torch.bool", "torch.float32"], [t.dtype for t in big]
    saved.clear()  # SDPA's math path under dropout keeps the softmax, the noise and the dropped attention
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1, scale=0.125)
    assert [str(t.dtype) for t in saved if t.shape[-2:] == (16, 16)] == ["torch.float32"] * 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("attention") / "st", "st")


def _embed_and_grads(enc: torch.nn.Module, dtype: torch.dtype) -> tuple[torch.Tensor, list[torch.Tensor]]:
    from contrastlab.data.text.codes import texts_to_codes

    torch.manual_seed(5)  # the same dropout masks for every model
    emb = enc(texts_to_codes(TEXTS)).to(dtype)
    loss = (emb[:2] @ emb[2:].T).logsumexp(1).sum()
    return emb.detach(), list(torch.autograd.grad(loss, [p for p in enc.parameters() if p.requires_grad]))


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_training_embeddings_and_gradients_equal_eager_attention(
    tiny: Path, dtype: torch.dtype, tol: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # training mode, dropout on, a padded batch (texts of different lengths in one length group or more): eager
    # attention draws the same dropout masks, so only rounding separates them; key biases' gradients are 0 in
    # exact arithmetic (softmax ignores a constant per row), so the tolerance is on each tensor's scale or 1
    enc = load_text_model(str(tiny), 32).to(dtype).train()
    eager = copy.deepcopy(enc)
    eager.body[0].auto_model.set_attn_implementation("eager")
    assert enc.body[0].auto_model.config._attn_implementation == ATTENTION
    calls = []
    apply = DropoutAttention.apply
    monkeypatch.setattr(DropoutAttention, "apply", lambda *a: calls.append(a[3]) or apply(*a))
    emb, grads = _embed_and_grads(enc, dtype)
    assert calls and any(m is not None for m in calls)  # it ran, on padded groups too
    emb_e, grads_e = _embed_and_grads(eager, dtype)
    torch.testing.assert_close(emb, emb_e, rtol=0, atol=tol)
    for a, b in zip(grads, grads_e, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=tol * max(1.0, float(b.abs().max())))


def test_outside_training_it_is_sdpa_and_a_saved_model_does_not_name_it(tiny: Path, tmp_path: Path) -> None:
    enc = load_text_model(str(tiny), 32).eval()
    sdpa = copy.deepcopy(enc)
    sdpa.body[0].auto_model.set_attn_implementation("sdpa")
    from contrastlab.data.text.codes import texts_to_codes

    with torch.no_grad():  # the same function is called: equal to the last bit
        assert torch.equal(enc(texts_to_codes(TEXTS)), sdpa(texts_to_codes(TEXTS)))
    enc.body[0].save(str(tmp_path))
    assert ATTENTION not in (tmp_path / "config.json").read_text()
    assert "_attn_implementation" not in json.loads((tmp_path / "config.json").read_text())
    assert use_sdpa(enc.body) == [ATTENTION]
