"""Multi-layer perceptron encoder, the default encoder of the synthetic worlds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn

__all__ = ["MLP"]


class MLP(nn.Module):
    """A fully connected encoder ``(N, in_dim) -> (N, out_dim)``.

    Hidden layers are Linear → (BatchNorm) → activation. The output is the raw last linear layer;
    losses with ``normalize=True`` L2-normalise it, so the pre-normalisation norm stays available to
    the norm tools.

    Args:
        in_dim: input dimension.
        hidden: widths of the hidden layers (may be empty: a linear map).
        out_dim: output (embedding) dimension.
        batch_norm: insert BatchNorm1d after each hidden linear layer (the identifiability paper's
            encoder uses it).
        activation: "relu", "leaky_relu" (slope 0.2) or "gelu".
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
        self.in_dim, self.hidden, self.out_dim = in_dim, tuple(hidden), out_dim
        layers: list[nn.Module] = []
        prev = in_dim
        for h in hidden:
            layers.append(nn.Linear(prev, h, bias=bias))
            if batch_norm:
                layers.append(nn.BatchNorm1d(h))
            layers.append(acts[activation]())
            prev = h
        layers.append(nn.Linear(prev, out_dim, bias=bias))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``x`` of shape ``(N, in_dim)`` to ``(N, out_dim)``."""
        if x.ndim != 2 or x.shape[1] != self.in_dim:
            raise ValueError(f"x must have shape (N, {self.in_dim}), got {tuple(x.shape)}")
        return self.net(x)
