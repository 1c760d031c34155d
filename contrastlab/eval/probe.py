"""Frozen-feature evaluation: linear probe, weighted kNN, kNN recall R@k, seed intervals, baselines.

The protocol is WEINCE's (Erol et al. 2026, arXiv 2606.00262, as its reproduction scripts run it): a
logistic-regression probe on frozen, standardised features; a kNN classifier on cosine similarity with the
temperature-weighted vote of Wu et al. (2018, "Unsupervised feature learning via non-parametric instance discrimination", eq. 7),
τ_knn = 0.1 and k ∈ {1, 2, 5, 10, 20, 50}; kNN recall R@k = the fraction of queries with at least one
same-label item among their k nearest neighbours; 95% Student-t intervals over encoder seeds. The baselines
are raw pixels and a randomly initialised encoder. Accuracies and recalls are fractions in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastlab._checks import check_choice, check_embeddings, check_labels, check_positive_float
from contrastlab._checks import check_int as _check_int
from contrastlab.data.base import ImageDataset, to_float_images

__all__ = [
    "KNN_KS",
    "extract_features",
    "LinearProbeResult",
    "linear_probe",
    "knn_predict",
    "knn_accuracy",
    "knn_recall",
    "MeanCI",
    "mean_ci",
    "summarize_seeds",
    "raw_pixel_features",
    "random_encoder",
    "evaluate_features",
    "evaluate_encoder",
]

KNN_KS = (1, 2, 5, 10, 20, 50)
"""The k of the WEINCE kNN protocol."""


def _check_ks(ks: int | Sequence[int], n_candidates: int) -> tuple[int, ...]:
    ks_t = (ks,) if isinstance(ks, int) else tuple(ks)
    if not ks_t or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks_t):
        raise ValueError(f"k must be a positive int or a non-empty sequence of them, got {ks!r}")
    if max(ks_t) > n_candidates:
        raise ValueError(f"k must be at most the number of neighbour candidates ({n_candidates}), got {max(ks_t)}")
    return ks_t


@torch.no_grad()
def extract_features(
    encoder: nn.Module,
    images: Tensor | ImageDataset,
    batch_size: int = 256,
    *,
    device: str | torch.device | None = None,
) -> Tensor:
    """Run a frozen ``encoder`` over ``images`` in eval mode and return the features on the CPU.

    The encoder's train/eval mode is restored afterwards. ``uint8`` images are scaled to [0, 1].

    Args:
        encoder: maps ``(B, C, H, W)`` float images to ``(B, D)``.
        images: ``(N, C, H, W)`` tensor or an :class:`~contrastlab.data.ImageDataset`.
        batch_size: images per forward pass.
        device: where to run; default the device of the encoder's first parameter (CPU if none).

    Returns:
        ``(N, D)`` float32 features on the CPU.

    Raises:
        ValueError: ``batch_size`` < 1 or ``images`` is not 4-D.
    """
    _check_int("batch_size", batch_size, 1)
    x = images.images if isinstance(images, ImageDataset) else images
    if not isinstance(x, Tensor) or x.ndim != 4:
        raise ValueError(f"images must be an (N, C, H, W) tensor or an ImageDataset, got {getattr(x, 'shape', x)!r}")
    if device is None:
        first = next(encoder.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    was_training = encoder.training
    encoder.eval()
    try:
        out = [
            encoder(to_float_images(x[i : i + batch_size].to(device)).float()).float().cpu()
            for i in range(0, x.shape[0], batch_size)
        ]
    finally:
        encoder.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, 0)


@dataclass(frozen=True)
class LinearProbeResult:
    """The outcome of :func:`linear_probe`.

    Attributes:
        accuracy: test accuracy in [0, 1].
        train_accuracy: accuracy on the training features.
        predictions: ``(N_test,)`` predicted classes.
        weight: ``(K, D)`` weights on the standardised features.
        bias: ``(K,)``.
        mean: ``(D,)`` feature means used for standardisation (zeros without it).
        std: ``(D,)`` feature standard deviations (ones without it).
        final_loss: the training objective at the end.
    """

    accuracy: float
    train_accuracy: float
    predictions: Tensor
    weight: Tensor
    bias: Tensor
    mean: Tensor
    std: Tensor
    final_loss: float


def linear_probe(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    num_classes: int | None = None,
    optimizer: str = "lbfgs",
    epochs: int = 100,
    lr: float | None = None,
    batch_size: int = 256,
    weight_decay: float = 1e-3,
    standardize: bool = True,
    seed: int = 0,
) -> LinearProbeResult:
    """Multinomial logistic regression on frozen features (the linear-evaluation protocol).

    Minimises ``mean CE(W x + b, y) + (weight_decay / 2) ‖W‖²`` from ``W = 0, b = 0`` on features
    standardised with the training mean and standard deviation. ``"lbfgs"``: full batch, ``epochs``
    L-BFGS iterations with a strong-Wolfe line search (deterministic, no randomness at all).
    ``"adam"``: ``epochs`` passes of mini-batches of ``batch_size`` in an order drawn from a generator
    seeded with ``seed`` (the WEINCE scripts: Adam, 100 epochs, batch 256).

    Args:
        train_features: ``(N, D)``.
        train_labels: ``(N,)`` int in ``[0, num_classes)``.
        test_features: ``(M, D)``.
        test_labels: ``(M,)``.
        num_classes: K; default ``max label + 1`` over both label sets.
        optimizer: ``"lbfgs"`` or ``"adam"``.
        epochs: L-BFGS iterations or Adam epochs.
        lr: step size; default 1.0 for L-BFGS and 1e-3 for Adam.
        batch_size: Adam mini-batch size.
        weight_decay: L2 penalty on ``W`` (not on ``b``).
        standardize: standardise features with training statistics.
        seed: seed of the Adam mini-batch order.

    Returns:
        A :class:`LinearProbeResult`.

    Raises:
        ValueError: mismatched shapes, non-finite features, negative labels or bad hyperparameters.

    Examples:
        >>> x = torch.tensor([[0.0], [1.0], [2.0], [3.0]]); y = torch.tensor([0, 0, 1, 1])
        >>> linear_probe(x, y, x, y).accuracy
        1.0
    """
    check_embeddings("train_features", train_features, ndim=2)
    check_embeddings("test_features", test_features, ndim=2)
    check_labels("train_labels", train_labels, train_features.shape[0])
    check_labels("test_labels", test_labels, test_features.shape[0])
    if test_features.shape[1] != train_features.shape[1]:
        raise ValueError(
            f"test_features has dimension {test_features.shape[1]}, train_features {train_features.shape[1]}"
        )
    check_choice("optimizer", optimizer, ("lbfgs", "adam"))
    _check_int("epochs", epochs, 1)
    _check_int("batch_size", batch_size, 1)
    _check_int("seed", seed, 0)
    weight_decay = check_positive_float("weight_decay", weight_decay, allow_zero=True)
    lr = check_positive_float("lr", lr if lr is not None else (1.0 if optimizer == "lbfgs" else 1e-3))
    if int(train_labels.min()) < 0 or int(test_labels.min()) < 0:
        raise ValueError("train_labels and test_labels must be >= 0 (unlabelled rows cannot be probed)")
    k = int(max(int(train_labels.max()), int(test_labels.max()))) + 1 if num_classes is None else num_classes
    _check_int("num_classes", k, 1)
    if int(train_labels.max()) >= k or int(test_labels.max()) >= k:
        raise ValueError(
            f"num_classes is {k} but the labels go up to {max(int(train_labels.max()), int(test_labels.max()))}"
        )

    x_train, x_test = train_features.float(), test_features.float()
    d = x_train.shape[1]
    if standardize:
        mean = x_train.mean(0)
        std = x_train.std(0, unbiased=False).clamp_min(1e-8)
    else:
        mean, std = torch.zeros(d, device=x_train.device), torch.ones(d, device=x_train.device)
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    y_train, y_test = train_labels.to(x_train.device), test_labels.to(x_test.device)
    weight = torch.zeros(k, d, device=x_train.device, requires_grad=True)
    bias = torch.zeros(k, device=x_train.device, requires_grad=True)

    def objective(x: Tensor, y: Tensor) -> Tensor:
        return F.cross_entropy(x @ weight.T + bias, y) + 0.5 * weight_decay * weight.pow(2).sum()

    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(
            [weight, bias], lr=lr, max_iter=epochs, history_size=20, line_search_fn="strong_wolfe",
            tolerance_grad=1e-9, tolerance_change=1e-12,
        )  # fmt: skip

        def closure() -> Tensor:
            opt.zero_grad()
            loss = objective(x_train, y_train)
            loss.backward()
            return loss

        opt.step(closure)
    else:
        adam = torch.optim.Adam([weight, bias], lr=lr)
        g = torch.Generator().manual_seed(seed)
        n = x_train.shape[0]
        for _ in range(epochs):
            order = torch.randperm(n, generator=g).to(x_train.device)
            for i in range(0, n, batch_size):
                idx = order[i : i + batch_size]
                adam.zero_grad()
                objective(x_train[idx], y_train[idx]).backward()
                adam.step()
    with torch.no_grad():
        final_loss = float(objective(x_train, y_train))
        train_pred = (x_train @ weight.T + bias).argmax(1)
        pred = (x_test @ weight.T + bias).argmax(1)
    return LinearProbeResult(
        accuracy=float((pred == y_test).float().mean()),
        train_accuracy=float((train_pred == y_train).float().mean()),
        predictions=pred.cpu(),
        weight=weight.detach().cpu(),
        bias=bias.detach().cpu(),
        mean=mean.cpu(),
        std=std.cpu(),
        final_loss=final_loss,
    )


def _topk_neighbours(
    queries: Tensor, gallery: Tensor, k: int, *, exclude_self: bool, chunk_size: int
) -> tuple[Tensor, Tensor]:
    """Cosine similarities and indices of the ``k`` nearest gallery rows of each query, best first."""
    q = F.normalize(queries.float(), dim=1)
    g = F.normalize(gallery.float(), dim=1)
    sims, idxs = [], []
    for start in range(0, q.shape[0], chunk_size):
        s = q[start : start + chunk_size] @ g.T  # (chunk, N_gallery) cosine similarities
        if exclude_self:
            rows = torch.arange(s.shape[0], device=s.device)
            s[rows, rows + start] = -math.inf  # a query is never its own neighbour
        top_s, top_i = s.topk(k, dim=1)
        sims.append(top_s)
        idxs.append(top_i)
    return torch.cat(sims), torch.cat(idxs)


def knn_predict(
    train_features: Tensor,
    train_labels: Tensor,
    query_features: Tensor,
    *,
    k: int | Sequence[int] = KNN_KS,
    temperature: float = 0.1,
    num_classes: int | None = None,
    exclude_self: bool = False,
    chunk_size: int = 1024,
) -> dict[int, Tensor]:
    """Temperature-weighted kNN classification on cosine similarity (Wu et al. 2018, eq. 7).

    For each query, the ``k`` training rows with the largest cosine similarity ``s_j`` vote for their
    labels with weight ``exp(s_j / temperature)``; the class with the largest total wins (ties go to the
    smallest class index).

    Args:
        train_features: ``(N, D)`` gallery features.
        train_labels: ``(N,)`` int labels in ``[0, num_classes)``.
        query_features: ``(M, D)``.
        k: one k or several (evaluated from one neighbour search).
        temperature: τ_knn > 0.
        num_classes: K; default ``max(train_labels) + 1``.
        exclude_self: the queries are the gallery (``M = N``, row i is query i) and a query may not vote
            for itself (leave-one-out).
        chunk_size: queries per similarity block (memory ``chunk_size × N``).

    Returns:
        ``{k: (M,) int64 predicted classes}``.

    Raises:
        ValueError: mismatched shapes, ``k`` larger than the number of candidates, bad ``temperature``.
    """
    check_embeddings("train_features", train_features, ndim=2)
    check_embeddings("query_features", query_features, ndim=2)
    check_labels("train_labels", train_labels, train_features.shape[0])
    if query_features.shape[1] != train_features.shape[1]:
        raise ValueError(f"query_features has dimension {query_features.shape[1]}, train {train_features.shape[1]}")
    if exclude_self and query_features.shape[0] != train_features.shape[0]:
        raise ValueError("exclude_self needs query_features to be the gallery (same number of rows)")
    temperature = check_positive_float("temperature", temperature)
    _check_int("chunk_size", chunk_size, 1)
    ks = _check_ks(k, train_features.shape[0] - int(exclude_self))
    if int(train_labels.min()) < 0:
        raise ValueError("train_labels must be >= 0")
    n_cls = int(train_labels.max()) + 1 if num_classes is None else _check_int("num_classes", num_classes, 1)
    sims, idx = _topk_neighbours(
        query_features, train_features, max(ks), exclude_self=exclude_self, chunk_size=chunk_size
    )
    # weights exp(s_j / tau), divided by the row's largest (argmax-invariant, cannot overflow): (M, k_max)
    votes = torch.exp((sims - sims[:, :1]) / temperature)
    neighbour_labels = train_labels.to(idx.device)[idx]  # (M, k_max)
    preds: dict[int, list[Tensor]] = {kk: [] for kk in ks}
    for start in range(0, votes.shape[0], chunk_size):  # class totals (chunk, K) per k: memory chunk × K
        v, lab = votes[start : start + chunk_size], neighbour_labels[start : start + chunk_size]
        for kk in ks:
            totals = torch.zeros(v.shape[0], n_cls, dtype=v.dtype, device=v.device)
            totals.scatter_add_(1, lab[:, :kk], v[:, :kk])
            preds[kk].append(totals.argmax(1).cpu())
    return {kk: torch.cat(p) for kk, p in preds.items()}


def knn_accuracy(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    k: int | Sequence[int] = KNN_KS,
    temperature: float = 0.1,
    num_classes: int | None = None,
    chunk_size: int = 1024,
) -> dict[int, float]:
    """Accuracy of :func:`knn_predict` on ``(test_features, test_labels)``: ``{k: fraction correct}``."""
    check_labels("test_labels", test_labels, test_features.shape[0])
    preds = knn_predict(
        train_features, train_labels, test_features, k=k, temperature=temperature,
        num_classes=num_classes, chunk_size=chunk_size,
    )  # fmt: skip
    y = test_labels.cpu()
    return {kk: float((p == y).float().mean()) for kk, p in preds.items()}


def knn_recall(
    features: Tensor,
    labels: Tensor,
    *,
    k: int | Sequence[int] = KNN_KS,
    gallery_features: Tensor | None = None,
    gallery_labels: Tensor | None = None,
    chunk_size: int = 1024,
) -> dict[int, float]:
    """Recall R@k of kNN search (WEINCE): the share of queries with a same-label item in their top k.

    Neighbours are ranked by cosine similarity; R@k counts a query when at least one of its k nearest
    neighbours shares its label.
    Without a gallery, every row is a query against all the *other* rows (the query itself excluded);
    with ``gallery_features``/``gallery_labels`` the rows of ``features`` query the gallery.

    Args:
        features: ``(N, D)`` query features.
        labels: ``(N,)`` int labels.
        k: one k or several.
        gallery_features: optional ``(G, D)``.
        gallery_labels: optional ``(G,)``, required with ``gallery_features``.
        chunk_size: queries per similarity block.

    Returns:
        ``{k: R@k in [0, 1]}``.

    Raises:
        ValueError: mismatched shapes or ``k`` larger than the number of candidates.

    Examples:
        >>> f = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> knn_recall(f, torch.tensor([0, 0, 1, 1]), k=1)
        {1: 1.0}
    """
    check_embeddings("features", features, ndim=2)
    check_labels("labels", labels, features.shape[0])
    _check_int("chunk_size", chunk_size, 1)
    if (gallery_features is None) != (gallery_labels is None):
        raise ValueError("gallery_features and gallery_labels must be given together")
    if gallery_features is not None and gallery_labels is not None:
        check_embeddings("gallery_features", gallery_features, ndim=2)
        check_labels("gallery_labels", gallery_labels, gallery_features.shape[0])
        if gallery_features.shape[1] != features.shape[1]:
            raise ValueError(
                f"gallery_features has dimension {gallery_features.shape[1]}, features {features.shape[1]}"
            )
        g_f, g_y, exclude = gallery_features, gallery_labels, False
    else:
        g_f, g_y, exclude = features, labels, True
    ks = _check_ks(k, g_f.shape[0] - int(exclude))
    _, idx = _topk_neighbours(features, g_f, max(ks), exclude_self=exclude, chunk_size=chunk_size)
    hits = g_y.to(idx.device)[idx] == labels.to(idx.device).unsqueeze(1)  # (N, k_max)
    found = hits.cumsum(1) > 0  # found[:, r]: a same-label item among the r+1 nearest
    return {kk: float(found[:, kk - 1].float().mean()) for kk in ks}


@dataclass(frozen=True)
class MeanCI:
    """Mean with a Student-t confidence interval over ``n`` runs.

    Attributes:
        mean: sample mean.
        half_width: ``t_{(1+c)/2, n−1} · s / √n`` (NaN for n = 1).
        low: ``mean − half_width``.
        high: ``mean + half_width``.
        std: sample standard deviation (ddof = 1; NaN for n = 1).
        n: number of values.
        confidence: the level c.
    """

    mean: float
    half_width: float
    low: float
    high: float
    std: float
    n: int
    confidence: float

    def __str__(self) -> str:
        return f"{self.mean:.4g} ± {self.half_width:.2g}"

    def format(self, scale: float = 1.0, digits: int = 2) -> str:
        """``"mean ± half_width"`` with values multiplied by ``scale`` (100 for percentages)."""
        return f"{self.mean * scale:.{digits}f} ± {self.half_width * scale:.{digits}f}"


def mean_ci(values: Sequence[float] | Tensor, confidence: float = 0.95) -> MeanCI:
    """Mean and two-sided Student-t interval ``mean ± t_{(1+c)/2, n−1} s/√n`` (the WEINCE tables' 95% CI).

    Args:
        values: the per-seed values (at least one, all finite).
        confidence: the level c in (0, 1).

    Raises:
        ValueError: empty or non-finite ``values``, or ``confidence`` outside (0, 1).

    Examples:
        >>> round(mean_ci([1.0, 2.0, 3.0]).half_width, 4)
        2.4841
    """
    from scipy import stats

    v = [float(x) for x in (values.flatten().tolist() if isinstance(values, Tensor) else values)]
    if not v:
        raise ValueError("values must hold at least one number")
    if not all(math.isfinite(x) for x in v):
        raise ValueError(f"values must be finite, got {v}")
    if not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    n = len(v)
    mean = math.fsum(v) / n
    if n == 1:
        return MeanCI(mean, math.nan, math.nan, math.nan, math.nan, 1, float(confidence))
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in v) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return MeanCI(mean, half, mean - half, mean + half, std, n, float(confidence))


def summarize_seeds(runs: Sequence[Mapping[str, float]], confidence: float = 0.95) -> dict[str, MeanCI]:
    """Per-metric :func:`mean_ci` over runs (e.g. one dict of metrics per encoder seed).

    Raises:
        ValueError: no runs, or runs with different metric names.
    """
    if not runs:
        raise ValueError("runs must hold at least one dict of metrics")
    keys = list(runs[0])
    for i, r in enumerate(runs):
        if set(r) != set(keys):
            raise ValueError(f"runs[{i}] has metrics {sorted(r)} but runs[0] has {sorted(keys)}")
    return {key: mean_ci([r[key] for r in runs], confidence) for key in keys}


def raw_pixel_features(images: Tensor | ImageDataset) -> Tensor:
    """The raw-pixel baseline: images flattened to ``(N, C·H·W)`` float32 in [0, 1]."""
    x = images.images if isinstance(images, ImageDataset) else images
    if not isinstance(x, Tensor) or x.ndim != 4:
        raise ValueError(f"images must be an (N, C, H, W) tensor or an ImageDataset, got {getattr(x, 'shape', x)!r}")
    return to_float_images(x).float().flatten(1)


def random_encoder(
    name: str,
    in_channels: int,
    image_size: int,
    embed_dim: int = 512,
    width: int | None = None,
    *,
    seed: int = 0,
) -> nn.Module:
    """The random-encoder baseline: :func:`~contrastlab.models.build_encoder` initialised from ``seed``.

    The global torch RNG is forked, so the caller's random state is untouched.
    """
    from contrastlab.models.registry import build_encoder

    _check_int("seed", seed, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_encoder(name, in_channels, image_size, embed_dim, width).eval()


def evaluate_features(
    train_features: Tensor,
    train_labels: Tensor,
    test_features: Tensor,
    test_labels: Tensor,
    *,
    ks: Sequence[int] = KNN_KS,
    knn_temperature: float = 0.1,
    probe_optimizer: str = "lbfgs",
    probe_epochs: int = 100,
    probe_weight_decay: float = 1e-3,
    seed: int = 0,
) -> dict[str, float]:
    """The whole frozen-feature protocol on given features, as a flat dict of fractions.

    Keys: ``linear_acc`` (:func:`linear_probe`), ``knn_acc@k`` (:func:`knn_accuracy`, train gallery, test
    queries) and ``R@k`` (:func:`knn_recall` among the test features, query excluded) for each k in ``ks``.
    """
    probe = linear_probe(
        train_features, train_labels, test_features, test_labels,
        optimizer=probe_optimizer, epochs=probe_epochs, weight_decay=probe_weight_decay, seed=seed,
    )  # fmt: skip
    out = {"linear_acc": probe.accuracy}
    knn = knn_accuracy(train_features, train_labels, test_features, test_labels, k=ks, temperature=knn_temperature)
    out.update({f"knn_acc@{k}": v for k, v in knn.items()})
    out.update({f"R@{k}": v for k, v in knn_recall(test_features, test_labels, k=ks).items()})
    return out


def evaluate_encoder(
    encoder: nn.Module,
    train: ImageDataset,
    test: ImageDataset,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    ks: Sequence[int] = KNN_KS,
    knn_temperature: float = 0.1,
    probe_optimizer: str = "lbfgs",
    probe_epochs: int = 100,
    probe_weight_decay: float = 1e-3,
    seed: int = 0,
) -> dict[str, float]:
    """Extract frozen features of ``train`` and ``test`` with ``encoder``, then :func:`evaluate_features`."""
    f_train = extract_features(encoder, train, batch_size, device=device)
    f_test = extract_features(encoder, test, batch_size, device=device)
    return evaluate_features(
        f_train, train.labels, f_test, test.labels, ks=ks, knn_temperature=knn_temperature,
        probe_optimizer=probe_optimizer, probe_epochs=probe_epochs, probe_weight_decay=probe_weight_decay,
        seed=seed,
    )  # fmt: skip
