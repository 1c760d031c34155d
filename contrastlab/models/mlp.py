"""Multi-layer perceptron encoder, the default encoder of the synthetic worlds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from torch import Tensor, nn

__all__ = ["MLP", "NORM_ORDERS", "linear_stack"]

#: Where BatchNorm sits in a hidden layer: "pre_act" = Linear → BatchNorm1d → activation (cl-ica's
#: ``get_mlp``, Zimmermann et al. 2021, arXiv 2102.08850); "post_act" = Linear → activation → BatchNorm1d
#: (the encoder of Zaliaduonis et al. 2026, arXiv 2606.04280, §5).
NORM_ORDERS = ("pre_act", "post_act")


def linear_stack(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    *,
    activation: Callable[[], nn.Module],
    batch_norm: bool,
    norm_order: Literal["pre_act", "post_act"] = "pre_act",
    bias: bool = True,
) -> nn.Sequential:
    """Linear layers ``in_dim → hidden[0] → … → out_dim``, the last one bare.

    Each hidden layer is a Linear layer and ``activation()``, with a BatchNorm1d (``batch_norm``) before the
    activation (``"pre_act"``) or after it (``"post_act"``). The arguments are taken as checked.
    """
    layers: list[nn.Module] = []
    prev = in_dim
    for h in hidden:
        block: list[nn.Module] = [nn.Linear(prev, h, bias=bias), activation()]
        if batch_norm:
            block.insert(1 if norm_order == "pre_act" else 2, nn.BatchNorm1d(h))
        layers += block
        prev = h
    layers.append(nn.Linear(prev, out_dim, bias=bias))
    return nn.Sequential(*layers)


class MLP(nn.Module):
    """A fully connected encoder ``(N, in_dim) -> (N, out_dim)``.

    Each hidden layer is a Linear layer, an activation and (with ``batch_norm``) a BatchNorm1d, in the
    order ``norm_order`` names:

    - ``"pre_act"``: Linear → BatchNorm1d → activation, the order of cl-ica's ``get_mlp`` (Zimmermann et
      al., "Contrastive Learning Inverts the Data Generating Process", ICML 2021, arXiv 2102.08850);
    - ``"post_act"``: Linear → activation → BatchNorm1d, the order of the identifiability encoder of
      Zaliaduonis et al., "The Loss Is Not Enough", ICML 2026, arXiv 2606.04280, §5 (widths
      128-256-256-256-128, ReLU, then a linear projection and L2 normalisation).

    The order matters in practice: on the paper's Spiral generator with diversity holding (batch 2000
    with 2000 uniform negatives, τ = 0.3, seed 0, 400 Adam steps), the "pre_act" encoder ends in a
    rank-deficient map (held-out R² 0.67) where "post_act" reaches 0.99 (docs/identifiability.md). The output is the raw last linear layer (the projection); losses with
    ``normalize=True`` L2-normalise it, so the pre-normalisation norm stays available to the norm tools.

    Args:
        in_dim: input dimension.
        hidden: widths of the hidden layers (may be empty: a linear map).
        out_dim: output (embedding) dimension.
        batch_norm: insert a BatchNorm1d in each hidden layer (the identifiability paper's encoder
            uses it).
        activation: "relu", "leaky_relu" (slope 0.2) or "gelu".
        norm_order: "pre_act" (BatchNorm before the activation, cl-ica's) or "post_act" (after it,
            Zaliaduonis et al.'s); no effect without ``batch_norm``.
        bias: whether linear layers have a bias.

    Shape:
        input ``(N, in_dim)``, output ``(N, out_dim)``.

    Examples:
        >>> enc = MLP(3, [64, 64], 8)
        >>> enc(torch.randn(5, 3)).shape
        torch.Size([5, 8])
    """

    def __init__(
        self,
        in_dim: int,
        hidden: Sequence[int],
        out_dim: int,
        *,
        batch_norm: bool = False,
        activation: str = "leaky_relu",
        bias: bool = True,
        norm_order: Literal["pre_act", "post_act"] = "pre_act",
    ) -> None:
        super().__init__()
        for name, v in (
            ("in_dim", in_dim),
            ("out_dim", out_dim),
            *((f"hidden[{i}]", h) for i, h in enumerate(hidden)),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        acts: dict[str, Callable[[], nn.Module]] = {
            "relu": nn.ReLU,
            "leaky_relu": lambda: nn.LeakyReLU(0.2),  # the cl-ica slope
            "gelu": nn.GELU,
        }
        if activation not in acts:
            raise ValueError(f"activation must be one of {tuple(acts)}, got {activation!r}")
        if norm_order not in NORM_ORDERS:
            raise ValueError(f"norm_order must be one of {NORM_ORDERS}, got {norm_order!r}")
        self.in_dim, self.hidden, self.out_dim = in_dim, tuple(hidden), out_dim
        self.net = linear_stack(
            in_dim,
            hidden,
            out_dim,
            activation=acts[activation],
            batch_norm=batch_norm,
            norm_order=norm_order,
            bias=bias,
        )

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``x`` of shape ``(N, in_dim)`` to ``(N, out_dim)``."""
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"x must have shape (N, {self.in_dim}), got {tuple(x.shape)}")
        return self.net(x)
