"""Deterministic mini-batch indices as a pure function of the step (what makes resume exact)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["EpochSampler", "step_generator"]

_SEED_STRIDE = 1_000_003  # a prime; (seed, k) -> seed * stride + k is injective for k < stride


def step_generator(seed: int, step: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded from ``(seed, step)``, for batch sources ``batch_at(step)``."""
    return torch.Generator(device=device).manual_seed(seed * _SEED_STRIDE + step)


class EpochSampler:
    """Indices of the mini-batch at each step: a fresh permutation of ``range(n)`` per epoch.

    Epoch ``e`` uses ``torch.randperm(n)`` seeded by ``(seed, e)``; step ``s`` takes the
    ``s % steps_per_epoch``-th slice of epoch ``s // steps_per_epoch``. No state is carried, so a
    resumed run draws exactly the batches the uninterrupted run would.

    Args:
        n: dataset size.
        batch_size: rows per batch.
        seed: seeds the per-epoch permutations.
        drop_last: drop the final incomplete batch of each epoch (else it is smaller).

    Examples:
        >>> s = EpochSampler(10, 4, seed=0)
        >>> s.steps_per_epoch, s.indices_at(0).shape
        (2, torch.Size([4]))
    """

    def __init__(self, n: int, batch_size: int, *, seed: int = 0, drop_last: bool = True) -> None:
        for name, v in (("n", n), ("batch_size", batch_size)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if drop_last and batch_size > n:
            raise ValueError(f"batch_size ({batch_size}) must be <= n ({n}) when drop_last=True")
        self.n, self.batch_size, self.seed, self.drop_last = n, batch_size, seed, drop_last
        self.steps_per_epoch = n // batch_size if drop_last else -(-n // batch_size)
        self._epoch = -1
        self._perm = torch.empty(0, dtype=torch.long)

    def permutation(self, epoch: int) -> Tensor:
        """The permutation of ``range(n)`` used in ``epoch``. Shape: ``(n,)``."""
        if epoch != self._epoch:
            self._perm = torch.randperm(self.n, generator=step_generator(self.seed, epoch))
            self._epoch = epoch
        return self._perm

    def indices_at(self, step: int) -> Tensor:
        """Row indices of the batch at 0-based ``step``. Shape: ``(batch_size,)`` (last may be shorter)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        epoch, k = divmod(step, self.steps_per_epoch)
        return self.permutation(epoch)[k * self.batch_size : (k + 1) * self.batch_size]

    __call__ = indices_at
