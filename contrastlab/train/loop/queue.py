"""Negatives from past steps: a FIFO queue of embeddings and a momentum encoder.

MoCo (He, Fan, Wu, Xie & Girshick 2020, arXiv 1911.05722, §3.2) keeps the keys of the last steps in a
queue and contrasts each query with them as well as with its own key; cross-batch memory (XBM;
Wang, Zhang, Huang & Scott 2020, arXiv 1912.06798, §3) does the same with the embeddings of the
trained encoder itself, which drift slowly enough late in training. The queue is a buffer outside
the autograd graph: its rows are constants of the loss.

* :class:`NegativeQueue` — the last ``size`` embeddings, oldest overwritten first. Each push gathers
  the keys of every rank (in rank order), so the queue is **identical on every rank**; each rank then
  contributes its 1/R share of the rows (:meth:`NegativeQueue.shard`) to a ``gather=True`` loss, which
  gathers them back into the whole queue exactly once.
* :class:`MomentumEncoder` — a copy of the encoder updated as θ_k ← m θ_k + (1 − m) θ_q (MoCo eq. 2)
  that computes the keys without a gradient.
* :func:`queue_info_nce` and :func:`queue_objective` — InfoNCE over the in-batch negatives plus the
  queue, as an :class:`~contrastlab.train.EmbeddingObjective` that :func:`~contrastlab.train.fit`
  trains with (gradient caching included).

Both state objects implement ``state_dict``/``load_state_dict``; pass them to ``fit(...,
extra_state={"queue": queue, "key_encoder": key_encoder})`` and they are saved in every checkpoint,
so an interrupted and resumed run stays bit-identical.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from contrastlab import distributed as cd
from contrastlab._checks import check_embeddings, check_positive_float
from contrastlab.losses import info_nce
from contrastlab.losses._common import TemperatureLike
from contrastlab.train.loop.objective import EmbeddingObjective

__all__ = ["NegativeQueue", "MomentumEncoder", "queue_info_nce", "queue_objective"]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


class NegativeQueue:
    """A FIFO of the last ``size`` embeddings, the same on every rank.

    Args:
        size: rows kept. Under ``torch.distributed`` a multiple of the number of ranks R, so that the
            R shards of a full queue (:meth:`shard`) are equal.
        dim: embedding dimension D.
        dtype: dtype of the stored rows (pushed keys are cast to it).
        device: where the rows live.

    Raises:
        TypeError, ValueError: ``size``/``dim`` not positive ints, ``size`` not a multiple of R.

    Examples:
        >>> queue = NegativeQueue(4, 2)
        >>> queue.push(torch.arange(6.0).view(3, 2)); queue.push(torch.tensor([[6.0, 7.0], [8.0, 9.0]]))
        >>> queue.rows()
        tensor([[2., 3.],
                [4., 5.],
                [6., 7.],
                [8., 9.]])
    """

    def __init__(
        self, size: int, dim: int, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> None:
        self.size = _positive_int("size", size)
        self.dim = _positive_int("dim", dim)
        self._check_ranks()
        self.buffer = torch.zeros(size, dim, dtype=dtype, device=device)  # (size, D)
        self.ptr = 0  # the next row to overwrite (the oldest once full)
        self.count = 0  # rows filled so far (≤ size)

    def _check_ranks(self) -> None:
        r = cd.world_size()
        if self.size % r:
            raise ValueError(
                f"size must be a multiple of the number of ranks {r} (each rank feeds 1/{r} of the queue to a "
                f"gathered loss), got {self.size}"
            )

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"NegativeQueue(size={self.size}, dim={self.dim}, filled={self.count})"

    def rows(self) -> Tensor:
        """The filled rows, oldest first, as a new tensor. Shape ``(len(self), D)``."""
        if self.count < self.size:
            return self.buffer[: self.count].clone()
        return torch.cat([self.buffer[self.ptr :], self.buffer[: self.ptr]])

    def shard(self) -> Tensor:
        """This rank's share of :meth:`rows` (as even as possible, rank order); all of it in one process.

        The shards of the R ranks concatenated in rank order are :meth:`rows`, so a loss called with
        ``negatives=queue.shard(), gather=True`` sees the whole queue once.

        Shape:
            ``(n_r, D)`` with Σ_r n_r = ``len(self)``.
        """
        rows, world = self.rows(), cd.world_size()
        if world == 1:
            return rows
        r, n = cd.rank(), rows.shape[0]
        sizes = [n // world + (1 if i < n % world else 0) for i in range(world)]
        start = sum(sizes[:r])
        return rows[start : start + sizes[r]]

    @torch.no_grad()
    def push(self, keys: Tensor) -> None:
        """Append every rank's ``keys`` (gathered in rank order; detached), dropping the oldest rows.

        Call it on every rank at the same point of each step (it is a collective under torch.distributed).

        Shape:
            keys: ``(n, D)``.

        Raises:
            TypeError, ValueError: ``keys`` not a finite ``(n, D)`` float tensor.
        """
        check_embeddings("keys", keys, ndim=2, allow_empty=True)
        if keys.shape[1] != self.dim:
            raise ValueError(f"keys must have embedding dimension D = {self.dim}, got {keys.shape[1]}")
        self._check_ranks()
        new = cd.gather_no_grad(keys.detach()).to(self.buffer)[-self.size :]  # only the newest size rows matter
        n = new.shape[0]
        first = min(n, self.size - self.ptr)  # rows written before the end of the buffer, then wrap
        self.buffer[self.ptr : self.ptr + first] = new[:first]
        self.buffer[: n - first] = new[first:]
        self.ptr = (self.ptr + n) % self.size
        self.count = min(self.count + n, self.size)

    def state_dict(self) -> dict[str, Any]:
        """The rows and the pointers (tensors and ints: loads with ``weights_only=True``)."""
        return {"buffer": self.buffer.detach().cpu().clone(), "ptr": self.ptr, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`.

        Raises:
            ValueError: naming ``state``, for a queue of another size, dimension or dtype.
        """
        buf = state["buffer"]
        if not isinstance(buf, Tensor) or buf.shape != self.buffer.shape or buf.dtype != self.buffer.dtype:
            got = (tuple(buf.shape), buf.dtype) if isinstance(buf, Tensor) else type(buf).__name__
            raise ValueError(f"state holds a queue of {got}, this one is {(self.size, self.dim)} {self.buffer.dtype}")
        ptr, count = int(state["ptr"]), int(state["count"])
        if not (0 <= ptr < self.size and 0 <= count <= self.size):
            raise ValueError(f"state has ptr={ptr}, count={count} outside a queue of size {self.size}")
        self.buffer.copy_(buf)
        self.ptr, self.count = ptr, count


class MomentumEncoder(nn.Module):
    """An exponential moving average of an encoder, used without a gradient (MoCo's key encoder).

    ``update()`` sets θ_k ← m θ_k + (1 − m) θ_q for every parameter (He et al. 2020, eq. 2; m = 0.999
    there) and copies buffers; the first copy is θ_k = θ_q. The source encoder is held by reference,
    not as a submodule, so the EMA adds no trainable parameters and ``state_dict`` holds θ_k alone.

    Args:
        encoder: the trained encoder θ_q.
        momentum: m in [0, 1); 0 makes the key encoder a copy of θ_q at each update.

    Raises:
        TypeError, ValueError: ``encoder`` not a module, ``momentum`` outside [0, 1).
    """

    def __init__(self, encoder: nn.Module, momentum: float = 0.999) -> None:
        super().__init__()
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder must be a torch.nn.Module, got {type(encoder).__name__}")
        m = check_positive_float("momentum", momentum, allow_zero=True)
        if m >= 1:
            raise ValueError(f"momentum must be in [0, 1), got {m}")
        self.momentum = m
        self._source = [encoder]  # a list: not registered as a submodule
        self.encoder = copy.deepcopy(encoder)
        for p in self.encoder.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self) -> None:
        """One EMA step from the source encoder's current parameters (moved to its device if needed)."""
        source = self._source[0]
        first = next(source.parameters(), None)
        if first is not None and next(self.encoder.parameters()).device != first.device:
            self.encoder.to(first.device)
        for pk, pq in zip(self.encoder.parameters(), source.parameters(), strict=True):
            pk.mul_(self.momentum).add_(pq.detach(), alpha=1.0 - self.momentum)
        for bk, bq in zip(self.encoder.buffers(), source.buffers(), strict=True):
            bk.copy_(bq)

    def forward(self, x: Tensor) -> Tensor:
        """The key embeddings of ``x``, without a gradient."""
        with torch.no_grad():
            return self.encoder(x)


def queue_info_nce(
    anchor: Tensor,
    positive: Tensor,
    queue: NegativeQueue,
    *,
    temperature: TemperatureLike = 0.1,
    normalize: bool = True,
    gather: bool = True,
) -> Tensor:
    """InfoNCE with the other rows' positives and the queue's rows as negatives.

    For anchor a_i with positive p_i, in-batch positives p_j and queue rows u_m (constants):

        ℓ_i = −s(a_i, p_i)/τ + log( Σ_j exp(s(a_i, p_j)/τ) + Σ_m exp(s(a_i, u_m)/τ) )

    (MoCo eq. 1 with the batch's keys added, as MoCo v3 and XBM do). It is computed as the decoupled
    form of :func:`~contrastlab.losses.info_nce` over the shared negatives [p; u], which contain the
    positive itself, so that the same streamed kernel (and with ``gather=True`` the same exact gathered
    gradients) serve it; with an empty queue it is the in-batch InfoNCE.

    Args:
        anchor: queries. Shape ``(n, D)``.
        positive: keys, row i paired with anchor i. Shape ``(n, D)``.
        queue: past keys; under torch.distributed each rank passes its :meth:`NegativeQueue.shard`.
        temperature: τ > 0.
        normalize: cosine similarity (else dot products).
        gather: under torch.distributed, contrast with every rank's positives and queue shard (this
            rank's share of the global loss); a no-op in one process.

    Returns:
        The mean loss (this rank's share under ``gather``).

    Raises:
        TypeError, ValueError: as :func:`~contrastlab.losses.info_nce`; ``queue`` not a
            :class:`NegativeQueue` or of another dimension.
    """
    if not isinstance(queue, NegativeQueue):
        raise TypeError(f"queue must be a NegativeQueue, got {type(queue).__name__}")
    check_embeddings("positive", positive, ndim=2)
    if queue.dim != positive.shape[1]:
        raise ValueError(f"queue holds D = {queue.dim} embeddings, positive has D = {positive.shape[1]}")
    negatives = torch.cat([positive, queue.shard().to(device=positive.device, dtype=positive.dtype)])
    return info_nce(
        anchor, positive, negatives, temperature=temperature, variant="dcl", normalize=normalize, gather=gather
    )


def queue_objective(
    queue: NegativeQueue,
    *,
    temperature: TemperatureLike = 0.1,
    key_encoder: MomentumEncoder | None = None,
    normalize: bool = True,
) -> EmbeddingObjective:
    """An objective for batches ``{"anchor", "positive"}``: :func:`queue_info_nce`, then push the keys.

    Without ``key_encoder`` the trained encoder embeds anchors and positives (cross-batch memory,
    XBM); with one, it embeds the anchors and the momentum encoder, updated first, the positives
    (MoCo). After the loss, this step's keys (every rank's) enter the queue. Pass ``queue`` (and
    ``key_encoder``) to ``fit(..., extra_state=...)`` for exact resume.

    Raises:
        TypeError: ``queue`` not a :class:`NegativeQueue`, ``key_encoder`` not a :class:`MomentumEncoder`.
    """
    if not isinstance(queue, NegativeQueue):
        raise TypeError(f"queue must be a NegativeQueue, got {type(queue).__name__}")
    if key_encoder is not None and not isinstance(key_encoder, MomentumEncoder):
        raise TypeError(f"key_encoder must be a MomentumEncoder or None, got {type(key_encoder).__name__}")

    def inputs(batch: dict[str, Tensor]) -> Tensor:
        if key_encoder is not None:
            return batch["anchor"]
        return torch.cat([batch["anchor"], batch["positive"]])

    def loss(emb: Tensor, batch: dict[str, Tensor]) -> Tensor:
        if key_encoder is not None:
            key_encoder.update()
            q, k = emb, key_encoder(batch["positive"]).to(emb.dtype)
        else:
            q, k = emb.split(batch["anchor"].shape[0])
        value = queue_info_nce(q, k, queue, temperature=temperature, normalize=normalize)
        queue.push(k.detach())
        return value

    return EmbeddingObjective(inputs=inputs, loss=loss)
