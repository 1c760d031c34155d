"""Training attention that keeps a 1-byte dropout mask instead of two float copies of the attention.

In training, attention dropout sends PyTorch's ``scaled_dot_product_attention`` down its math path, which
autograd records op by op: for the backward pass it keeps the softmax output P, the dropout's float noise
tensor and the dropped attention P ⊙ noise — three ``(B, H, L_q, L_k)`` float tensors per layer, which for
a batch of 32 passages of 256 tokens through MiniLM's 12 heads is 3 × 100 MiB per layer, most of a text
step's peak memory. :class:`DropoutAttention` computes the same forward pass (the same operations in the
same order, the same random draws, so the same numbers) and keeps P and the mask as ``bool`` — 1 byte per
entry — rebuilding the noise and P ⊙ noise in the backward pass, one multiplication each.

:func:`attention_forward` is registered with ``transformers`` under :data:`ATTENTION` (its attention and
mask registries, with SDPA's mask): in training with dropout on float32/float64 inputs it runs
:class:`DropoutAttention`; everywhere else — inference, no dropout, half precision, causal or grouped-query
attention, a position bias — it *is* transformers' SDPA attention. The name lives in the loaded model's
config only: a saved model's ``config.json`` does not carry it, so the folder loads anywhere.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["ATTENTION", "DropoutAttention", "attention_forward", "register"]

ATTENTION = "contrastlab_sdpa"
"""The attention implementation's name in ``transformers``' registries (``model.set_attn_implementation``)."""


class DropoutAttention(torch.autograd.Function):
    """softmax(q kᵀ · scale + mask) with dropout, times v, saving the softmax and a ``bool`` dropout mask.

    The forward pass mirrors ATen's math path of ``scaled_dot_product_attention``: q and k are each scaled
    by √scale, a boolean mask becomes 0 / −∞ and is added to the scores, and dropout draws its noise as
    ``torch.nn.functional.dropout`` does on the CPU (a tensor like P filled by ``bernoulli_(1 − p)``, then
    divided by 1 − p), so the random stream, the mask and the output are the math path's. The backward
    pass is that of the same operations.

    Shapes:
        query ``(B, H, L_q, E)``, key ``(B, H, L_k, E)``, value ``(B, H, L_k, E_v)``, mask broadcastable to
        ``(B, H, L_q, L_k)`` (``bool``: True attends; or float, added) or None; returns ``(B, H, L_q, E_v)``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scale: float, p: float
    ) -> Tensor:
        """The attention output; saves q·√scale, k·√scale, v, the softmax and the dropout's keep mask."""
        root = math.sqrt(scale)
        q, k = query * root, key * root
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            if mask.dtype == torch.bool:
                mask = torch.zeros_like(mask, dtype=scores.dtype).masked_fill_(mask.logical_not(), -math.inf)
            scores = scores.add_(mask)
        probs = torch.softmax(scores, dim=-1)
        del scores
        noise = torch.empty_like(probs).bernoulli_(1 - p)
        keep = noise.bool()
        out = (probs * noise.div_(1 - p)) @ value
        ctx.save_for_backward(q, k, value, probs, keep)
        ctx.root, ctx.p = root, p
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        """Gradients of query, key and value: the math path's, with the noise rebuilt from the mask."""
        q, k, value, probs, keep = ctx.saved_tensors
        noise = keep.to(probs.dtype).div_(1 - ctx.p)  # the forward pass's noise, value for value
        grad_value = (probs * noise).transpose(-2, -1) @ grad
        grad_probs = (grad @ value.transpose(-2, -1)).mul_(noise)
        del noise
        grad_scores = torch._softmax_backward_data(grad_probs, probs, -1, probs.dtype)
        del grad_probs
        grad_query = (grad_scores @ k).mul_(ctx.root)
        grad_key = (grad_scores.transpose(-2, -1) @ q).mul_(ctx.root)
        return grad_query, grad_key, grad_value, None, None, None


def attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """``transformers``' attention interface: :class:`DropoutAttention` in training, SDPA otherwise.

    Args:
        module: the attention layer (its ``is_causal`` and ``num_key_value_groups`` are read).
        query: ``(B, H, L_q, E)``.
        key: ``(B, H, L_k, E)``.
        value: ``(B, H, L_k, E_v)``.
        attention_mask: SDPA's mask (``bool``, True attends, or float added to the scores), or None.
        dropout: the attention dropout probability (0 outside training).
        scaling: the scores' scale (None: 1/√E).
        **kwargs: the rest of the layer's call, passed on to SDPA.

    Returns:
        ``(output of shape (B, L_q, H, E_v), None)``, as transformers' SDPA attention returns it.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    plain = (
        getattr(module, "is_causal", False) is False
        and not kwargs.get("is_causal")
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
        and getattr(module, "num_key_value_groups", 1) == 1
        and query.dtype in (torch.float32, torch.float64)
    )
    if not (0.0 < dropout < 1.0 and grad and plain):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
    out = DropoutAttention.apply(query, key, value, attention_mask, scale, dropout)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Register :func:`attention_forward` and SDPA's mask under :data:`ATTENTION` (idempotent); the name."""
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(ATTENTION, attention_forward)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    return ATTENTION
