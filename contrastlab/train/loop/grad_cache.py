"""Gradient caching: a contrastive batch larger than the encoder's activations can hold.

Gao, Zhang, Han & Callan 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited
Setup" (arXiv 2101.06983, §3.2). A contrastive loss couples every row of the batch, so gradient
accumulation cannot split it; but the loss depends on the encoder only through the embeddings
``e = f_θ(x)``, and by the chain rule

    ∂L/∂θ = Σ_i (∂L/∂e_i) · ∂e_i/∂θ.

One step therefore runs in three passes (:func:`cached_backward`):

1. embed the rows in mini-batches of ``embed_minibatch`` **without a graph** (memory: one
   mini-batch's activations), recording the RNG state before each mini-batch;
2. compute the loss of all ``(R, D)`` embeddings (a leaf tensor) and back-propagate it to them:
   the cached gradient ``∂L/∂e`` (memory: O(R·D), plus whatever the loss needs — linear in R for the
   streamed kernels);
3. for each mini-batch, restore its RNG state (so dropout draws the same masks as in pass 1),
   re-embed it **with** a graph and back-propagate ``(∂L/∂e)[mini-batch]``; parameter gradients
   accumulate over the mini-batches.

The result equals the gradient of the loss of the embeddings that pass 1 computed, to the rounding of
the summation order. The price is one extra forward pass over all but one mini-batch: in one process
the last mini-batch of pass 1 keeps its graph and is back-propagated right after pass 2 (so the peak
holds one mini-batch's activations, during the loss too) instead of being replayed. Under ``torch.distributed`` the loss is the
rank's share of the gathered loss (``gather=True``), whose backward in pass 2 delivers every rank's
contribution to this rank's embeddings; pass 3 then replays every mini-batch, through the unwrapped
model and only the last through ``DistributedDataParallel`` (one gradient all-reduce per step, as without
caching, whatever the number of mini-batches on each rank).

The encoder must embed each row independently of the others. A BatchNorm layer in training mode mixes
the rows of a mini-batch (with its statistics, and it updates its running statistics at every forward
pass, the replays included), so caching would give the gradient of mini-batch-normalised embeddings
instead of the batch's: :func:`cached_backward` refuses one with the error
:func:`~contrastlab.train.fit` gives (:func:`check_row_independent`); in eval mode it is accepted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor, nn

from contrastlab.train.loop.objective import EmbeddingObjective, embed, split_loss_output

__all__ = ["cached_backward", "check_embed_minibatch", "check_row_independent"]


def check_embed_minibatch(embed_minibatch: object, rows: int | None = None) -> int:
    """Validate a mini-batch size: an int ≥ 1, and at most ``rows`` when given.

    Raises:
        TypeError, ValueError: naming ``embed_minibatch``.
    """
    if isinstance(embed_minibatch, bool) or not isinstance(embed_minibatch, int):
        raise TypeError(f"embed_minibatch must be an int, got {type(embed_minibatch).__name__}")
    if embed_minibatch < 1:
        raise ValueError(f"embed_minibatch must be >= 1, got {embed_minibatch}")
    if rows is not None and embed_minibatch > rows:
        raise ValueError(
            f"embed_minibatch must be at most the {rows} rows the objective embeds per step, got {embed_minibatch}"
        )
    return embed_minibatch


def check_row_independent(model: nn.Module, *, training_only: bool = False) -> None:
    """Refuse models whose output for a row depends on the other rows of its mini-batch.

    Args:
        model: the encoder.
        training_only: refuse only BatchNorm layers now in training mode (a layer in eval mode
            normalises with its running statistics, row by row). :func:`~contrastlab.train.fit` passes
            False: it puts the model in training mode itself.

    Raises:
        ValueError: naming ``embed_minibatch`` and the first BatchNorm layer found.
    """
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and (module.training or not training_only):
            raise ValueError(
                f"embed_minibatch: layer {name or type(module).__name__!r} is a BatchNorm, which in training mode "
                "normalises with its mini-batch's statistics, so that cached and uncached gradients would differ; "
                "use LayerNorm/GroupNorm or embed_minibatch=None"
            )


def _rng_state(device: torch.device) -> tuple[Tensor, Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[Tensor, Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def cached_backward(
    model: nn.Module,
    objective: EmbeddingObjective,
    batch: Any,
    embed_minibatch: int,
    *,
    net: nn.Module | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    scale: Callable[[Tensor], Tensor] = lambda loss: loss,
) -> tuple[Tensor, dict[str, float]]:
    """One step's loss, with the parameter gradients accumulated into ``.grad`` by gradient caching.

    Equivalent to ``scale(objective.loss(embeddings, batch)).backward()`` where ``embeddings`` are
    the rows of ``objective.inputs(batch)`` embedded ``embed_minibatch`` at a time; memory holds
    one mini-batch's activations instead of the whole batch's. On return the global RNG is where
    pass 1 left it, as if the mini-batches had been embedded once with a graph.

    Args:
        model: the encoder (unwrapped); its parameters receive the gradient.
        objective: the inputs and the loss of their embeddings.
        batch: the step's batch (on the model's device).
        embed_minibatch: rows per forward pass; the last mini-batch may be smaller.
        net: ``model`` wrapped in ``DistributedDataParallel``, used for the last mini-batch's
            gradient pass so that the gradients are all-reduced once (default: ``model``).
        autocast: context manager factory entered around every forward pass and the loss.
        scale: applied to the loss before back-propagation (a grad scaler's ``scale``).

    Returns:
        ``(loss, logs)``: the detached fp32 loss (unscaled) and the objective's logs.

    Raises:
        TypeError, ValueError: ``embed_minibatch`` not an int in ``[1, R]``, a BatchNorm layer of
            ``model`` in training mode (the message of :func:`~contrastlab.train.fit`'s refusal), bad
            objective output.
    """
    check_row_independent(model, training_only=True)
    rows = objective.rows(batch)
    check_embed_minibatch(embed_minibatch, rows.shape[0])
    chunks = rows.split(embed_minibatch)
    device = rows.device
    last = len(chunks) - 1
    # In one process the last mini-batch keeps its graph from pass 1 and is not replayed (one
    # forward pass saved). Under DDP every mini-batch is replayed, the last through the wrapper, so
    # that DDP's single gradient all-reduce comes after all the others have accumulated.
    keep_last = net is None or net is model

    # pass 1: embeddings without a graph, the RNG state before each mini-batch kept for the replay
    states: list[tuple[Tensor, Tensor | None]] = []
    parts: list[Tensor] = []
    for i, chunk in enumerate(chunks):
        states.append(_rng_state(device))
        with torch.set_grad_enabled(keep_last and i == last), autocast():
            parts.append(embed(model, chunk))
    after = _rng_state(device)
    kept = parts[last] if keep_last else None
    emb = torch.cat([p.detach() for p in parts]).requires_grad_()  # (R, D) leaf: the loss's gradient stops here
    del parts

    # pass 2: the loss and its gradient with respect to the embeddings (and any parameter of the loss)
    with autocast():
        loss, logs = split_loss_output(objective.loss(emb, batch))
    scale(loss).backward()
    grad = emb.grad
    if grad is None:
        raise ValueError("loss: the objective's loss does not depend on the embeddings it was given")

    # pass 3: the kept mini-batch first (freeing its graph), then each other mini-batch replayed with
    # its RNG state, pushing the cached gradient through it
    starts = [embed_minibatch * i for i in range(len(chunks))]
    if kept is not None:
        kept.backward(grad[starts[last] :])
        del kept
    for i, chunk in enumerate(chunks[:last] if keep_last else chunks):
        _set_rng_state(states[i], device)
        with autocast():
            out = embed(net if (i == last and net is not None) else model, chunk)
        out.backward(grad[starts[i] : starts[i] + chunk.shape[0]])
    _set_rng_state(after, device)
    return loss.detach(), logs
