"""A concept world with known frequency, specificity and ambiguity, for the norm experiments.

Items are the nodes of a complete tree (the root excluded): ``branching`` children per node, depths
``1..depth``. Leaves (depth ``depth``) are *specific* concepts: the positive of a leaf is the leaf
itself. An internal node is *generic*: its positive is drawn uniformly from **all** its descendants
(internal ones and leaves), so its views spread over a whole subtree. Anchors are drawn with Zipfian
frequencies, ``p_i ∝ rank_i^{-s}``, where the ranks are a seeded random permutation so that frequency
is independent of depth. An optional per-item ambiguity ``α_i`` stands in for human uncertainty: with
probability ``α_i`` the positive is drawn from a fixed *partner* concept's positive set instead.

Every item also has an input feature vector for encoders: a hierarchical random walk down the tree
(``x_child = x_parent + level_scale · level_decay^(depth-1) · ε``), so items of one subtree lie close
in input space; a *view* adds isotropic Gaussian noise of scale ``view_noise``.

This is the synthetic world of Su, Ren & Veitch 2026 ("Optimization Dynamics Imprint Semantic Specificity
in Contrastive Embedding Norms", arXiv 2606.30625; only the abstract is public), built here as a
measurement device: the experiment ``norm-dynamics`` measures what the norms do on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from contrastlab._checks import check_int as _check_int
from contrastlab._checks import check_positive_float

__all__ = ["ConceptBatch", "ConceptWorld"]


@dataclass(frozen=True)
class ConceptBatch:
    """One batch of (anchor, positive) pairs from :class:`ConceptWorld`.

    Attributes:
        anchor: item ids of the anchors, shape ``(B,)``, int64.
        positive: item ids of their positives, shape ``(B,)``, int64.
        x_anchor: noisy input views of the anchors, ``(B, input_dim)``, or ``None`` (ids only).
        x_positive: noisy input views of the positives, ``(B, input_dim)``, or ``None``.
    """

    anchor: Tensor
    positive: Tensor
    x_anchor: Tensor | None = None
    x_positive: Tensor | None = None


def _check_unit(name: str, value: object) -> float:
    v = check_positive_float(name, value, allow_zero=True)
    if v > 1:
        raise ValueError(f"{name} must lie in [0, 1], got {v}")
    return v


class ConceptWorld:
    """Items on a concept tree with Zipfian frequencies and optional ambiguity (see module docstring).

    Args:
        branching: children per node (>= 2).
        depth: number of item levels (>= 1); items sit at depths ``1..depth``.
        zipf_exponent: ``s`` in ``p_i ∝ rank^{-s}`` (``0`` gives uniform frequencies).
        ambiguous_fraction: fraction of items that get a nonzero ambiguity.
        max_ambiguity: ambiguous items draw ``α_i ~ U(0, max_ambiguity]``.
        input_dim: dimension of the input features used by encoders.
        level_scale: step size of the hierarchical random walk at depth 1.
        level_decay: factor by which that step shrinks per level.
        view_noise: standard deviation of the Gaussian noise added to make a view.
        feature_norm: if set, every clean feature vector is rescaled to this norm, so that an encoder's
            output norm cannot simply inherit the input norm (which grows with depth in the random walk).
        seed: seed of the world's structure (ranks, ambiguity, partners, features).

    Attributes:
        n_items: number of items ``n = Σ_{l=1}^{depth} branching^l``.
        parent: ``(n,)`` int64 parent id (``-1`` for depth-1 items).
        depth_of: ``(n,)`` int64 depth in ``1..depth``.
        is_leaf: ``(n,)`` bool.
        frequency: ``(n,)`` float64 anchor probabilities (sum to 1).
        ambiguity: ``(n,)`` float64 ``α_i``.
        partner: ``(n,)`` int64 the concept an ambiguous item's positives are mixed with (a different
            item at the same depth).
        positive_sets: list of ``n`` int64 arrays: the descendants of a generic item, ``[i]`` for a leaf.
        features: ``(n, input_dim)`` float32 clean inputs.

    Examples:
        >>> world = ConceptWorld(branching=2, depth=2, seed=0)
        >>> world.n_items
        6
        >>> batch = world.batch_source(batch_size=4, seed=1)(0)
        >>> batch.anchor.shape
        torch.Size([4])
    """

    def __init__(
        self,
        *,
        branching: int = 3,
        depth: int = 3,
        zipf_exponent: float = 1.0,
        ambiguous_fraction: float = 0.0,
        max_ambiguity: float = 0.5,
        input_dim: int = 16,
        level_scale: float = 1.0,
        level_decay: float = 0.6,
        view_noise: float = 0.3,
        feature_norm: float | None = None,
        seed: int = 0,
    ) -> None:
        self.branching = _check_int("branching", branching, 2)
        self.depth = _check_int("depth", depth, 1)
        self.zipf_exponent = check_positive_float("zipf_exponent", zipf_exponent, allow_zero=True)
        self.ambiguous_fraction = _check_unit("ambiguous_fraction", ambiguous_fraction)
        self.max_ambiguity = _check_unit("max_ambiguity", max_ambiguity)
        self.input_dim = _check_int("input_dim", input_dim, 1)
        self.level_scale = check_positive_float("level_scale", level_scale)
        self.level_decay = check_positive_float("level_decay", level_decay)
        self.view_noise = check_positive_float("view_noise", view_noise, allow_zero=True)
        self.feature_norm = None if feature_norm is None else check_positive_float("feature_norm", feature_norm)
        self.seed = _check_int("seed", seed, 0)

        # Tree in breadth-first order: depth-1 items first; children of item i are contiguous.
        parents: list[int] = []
        depths: list[int] = []
        level_ids: list[int] = [-1]  # the (virtual) root
        for level in range(1, self.depth + 1):
            next_level: list[int] = []
            for p in level_ids:
                for _ in range(self.branching):
                    next_level.append(len(parents))
                    parents.append(p)
                    depths.append(level)
            level_ids = next_level
        n = len(parents)
        self.n_items = n
        self.parent = np.asarray(parents, dtype=np.int64)
        self.depth_of = np.asarray(depths, dtype=np.int64)
        self.is_leaf = self.depth_of == self.depth

        children: list[list[int]] = [[] for _ in range(n)]
        for i, p in enumerate(parents):
            if p >= 0:
                children[p].append(i)
        descendants: list[list[int]] = [[] for _ in range(n)]
        for i in range(n - 1, -1, -1):  # children come after their parent in BFS order
            for c in children[i]:
                descendants[i].extend([c, *descendants[c]])
        self.positive_sets = [np.sort(np.asarray(d if d else [i], dtype=np.int64)) for i, d in enumerate(descendants)]

        rng = np.random.default_rng(self.seed)
        ranks = rng.permutation(n) + 1
        weights = ranks.astype(np.float64) ** (-self.zipf_exponent)
        self.rank = ranks
        self.frequency = weights / weights.sum()

        self.ambiguity = np.zeros(n, dtype=np.float64)
        n_amb = int(round(self.ambiguous_fraction * n))
        if n_amb > 0:
            chosen = rng.choice(n, size=n_amb, replace=False)
            self.ambiguity[chosen] = self.max_ambiguity * (1.0 - rng.random(n_amb))  # U(0, max]
        self.partner = np.empty(n, dtype=np.int64)
        for level in range(1, self.depth + 1):
            ids = np.flatnonzero(self.depth_of == level)
            shift = rng.integers(1, len(ids))  # a derangement within the level: partner != self
            self.partner[ids] = np.roll(ids, shift)

        feats = np.zeros((n, self.input_dim), dtype=np.float64)
        for i in range(n):
            base = feats[parents[i]] if parents[i] >= 0 else 0.0
            step = self.level_scale * self.level_decay ** (depths[i] - 1)
            feats[i] = base + step * rng.standard_normal(self.input_dim)
        if self.feature_norm is not None:
            feats *= self.feature_norm / np.linalg.norm(feats, axis=1, keepdims=True)
        self.features = torch.from_numpy(feats).to(torch.float32)

        # Padded positive table for vectorised sampling.
        sizes = np.asarray([len(s) for s in self.positive_sets], dtype=np.int64)
        table = np.zeros((n, int(sizes.max())), dtype=np.int64)
        for i, s in enumerate(self.positive_sets):
            table[i, : len(s)] = s
        self._pos_table = torch.from_numpy(table)
        self._pos_size = torch.from_numpy(sizes)
        self._freq_t = torch.from_numpy(self.frequency)
        self._amb_t = torch.from_numpy(self.ambiguity)
        self._partner_t = torch.from_numpy(self.partner)

    def sample(self, batch_size: int, *, generator: torch.Generator, views: bool = False) -> ConceptBatch:
        """Draw ``batch_size`` (anchor, positive) pairs.

        Args:
            batch_size: number of pairs B.
            generator: the CPU generator that drives every random draw.
            views: also return noisy input views (``x_anchor``, ``x_positive``).

        Returns:
            A :class:`ConceptBatch`; anchors are i.i.d. from ``frequency`` (with replacement).
        """
        b = _check_int("batch_size", batch_size, 1)
        anchor = torch.multinomial(self._freq_t, b, replacement=True, generator=generator)
        flip = torch.rand(b, generator=generator, dtype=torch.float64) < self._amb_t[anchor]
        source = torch.where(flip, self._partner_t[anchor], anchor)
        u = torch.rand(b, generator=generator, dtype=torch.float64)
        col = torch.clamp((u * self._pos_size[source]).long(), max=self._pos_table.shape[1] - 1)
        positive = self._pos_table[source, col]
        if not views:
            return ConceptBatch(anchor=anchor, positive=positive)
        return ConceptBatch(
            anchor=anchor,
            positive=positive,
            x_anchor=self.view(anchor, generator=generator),
            x_positive=self.view(positive, generator=generator),
        )

    def view(self, items: Tensor, *, generator: torch.Generator) -> Tensor:
        """Noisy input views ``features[items] + view_noise · ε``, shape ``(len(items), input_dim)``."""
        noise = torch.randn(len(items), self.input_dim, generator=generator)
        return self.features[items] + self.view_noise * noise

    def batch_source(self, *, batch_size: int, seed: int, views: bool = False) -> Callable[[int], ConceptBatch]:
        """A batch source ``batch_at(step)`` (``docs/contracts.md``): a pure function of the step.

        The generator of step ``t`` is seeded with ``seed * 1_000_003 + t``.
        """
        _check_int("batch_size", batch_size, 1)
        _check_int("seed", seed, 0)

        def batch_at(step: int) -> ConceptBatch:
            g = torch.Generator().manual_seed(seed * 1_000_003 + int(step))
            return self.sample(batch_size, generator=g, views=views)

        return batch_at
