"""A tiny Vision Transformer (Dosovitskiy et al. 2021) for small images.

Patch embedding, a class token, learned position embeddings and pre-norm transformer blocks.

Paper 4 ("The Loss Is Not Enough", §5) uses a ViT with 4×4 patches on 32×32 CIFAR-10 at a parameter
count comparable to ResNet-18 (≈ 11 M): ``width = 384, depth = 6`` gives 10.9 M here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastlab.models._image import ImageEncoder, check_positive_int

__all__ = ["TinyViT", "TransformerBlock"]


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + MHSA(LN(x))`` then ``x + MLP(LN(x))`` with a GELU MLP of ``mlp_ratio · width``.

    Shape:
        ``(B, T, width)`` → ``(B, T, width)``.
    """

    def __init__(self, width: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"heads must divide width, got width={width}, heads={heads}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        hidden = int(round(mlp_ratio * width))
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x: Tensor) -> Tensor:
        """Apply attention and MLP with residuals."""
        b, t, c = x.shape  # batch, tokens, width
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, heads, T, head_dim)
        attn = F.scaled_dot_product_attention(q, k, v)  # (B, heads, T, head_dim)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class TinyViT(ImageEncoder):
    """A ViT encoder: ``patch_size × patch_size`` patches, a class token, ``depth`` pre-norm blocks.

    The output is the final LayerNorm of the class token mapped linearly to ``embed_dim``.

    Args:
        in_channels: image channels C.
        image_size: image side H = W; must be a multiple of ``patch_size``.
        embed_dim: output dimension.
        width: token dimension (384 → ≈ 11 M parameters at depth 6; 64 for quick CPU runs).
        depth: number of transformer blocks.
        heads: attention heads; default ``max(1, width // 64)``.
        patch_size: patch side; default ``max(1, image_size // 8)`` (4 for 32×32, 2 for 16×16, 1 for 8×8).
        mlp_ratio: hidden width of the block MLP relative to ``width``.

    Shape:
        input ``(B, C, H, W)`` float, output ``(B, embed_dim)`` (pre-normalisation).

    Examples:
        >>> TinyViT(3, 32, 64, width=64, depth=2)(torch.rand(2, 3, 32, 32)).shape
        torch.Size([2, 64])
    """

    def __init__(
        self,
        in_channels: int = 3,
        image_size: int = 32,
        embed_dim: int = 512,
        width: int = 384,
        *,
        depth: int = 6,
        heads: int | None = None,
        patch_size: int | None = None,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__(in_channels, image_size, embed_dim, width)
        self.depth = check_positive_int("depth", depth)
        self.heads = check_positive_int("heads", heads if heads is not None else max(1, width // 64))
        self.patch_size = check_positive_int(
            "patch_size", patch_size if patch_size is not None else max(1, image_size // 8)
        )
        if image_size % self.patch_size:
            raise ValueError(f"patch_size must divide image_size, got {self.patch_size} and {image_size}")
        if width % self.heads:
            raise ValueError(f"heads must divide width, got width={width}, heads={self.heads}")
        if not mlp_ratio > 0:
            raise ValueError(f"mlp_ratio must be > 0, got {mlp_ratio!r}")
        n_tokens = (image_size // self.patch_size) ** 2
        self.patch_embed = nn.Conv2d(in_channels, width, self.patch_size, stride=self.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_tokens + 1, width))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.Sequential(*(TransformerBlock(width, self.heads, mlp_ratio) for _ in range(depth)))
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, embed_dim)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``(B, C, H, W)`` images to ``(B, embed_dim)``."""
        self.check_input(x)
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, T, width), T = (H/p)·(W/p)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        h = self.blocks(torch.cat([cls, tokens], 1) + self.pos_embed)
        return self.fc(self.norm(h[:, 0]))
