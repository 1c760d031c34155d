"""Batched, seeded image augmentations in plain torch: each sample of a batch gets its own random parameters.

Every op works on float images ``(B, C, H, W)`` in ``[0, 1]`` (``uint8`` input is converted) and splits
its work into two steps, so that what an op did can be inspected and tested:

* ``params = op.sample(batch, height, width, generator)`` draws the per-sample parameters on the CPU
  from an explicit ``torch.Generator`` (the same numbers whatever the device of the images), including
  the ``"apply"`` mask of the samples the op acts on (probability ``p``);
* ``op.apply(x, params)`` transforms the batch deterministically.

``op(x, generator)`` does both. Every op draws the same amount of randomness whatever ``p`` is, so
changing one op's probability leaves the other ops' draws unchanged.

The ops follow torchvision's definitions (SimCLR, Chen et al. 2020, appendix A, uses them):
:class:`RandomResizedCrop`, :class:`RandomHorizontalFlip`, :class:`ColorJitter` (brightness, contrast,
saturation, hue in a random order per sample), :class:`RandomGrayscale`, :class:`GaussianBlur`, and
:class:`Cutout` (DeVries & Taylor 2017). :func:`augmentation_regime` builds the regimes of "The Loss Is
Not Enough" (Zaliaduonis et al. 2026, §5): ``simclr_all``, ``crop_only`` and ``all_without_crop``.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from contrastlab.data.base import to_float_images

__all__ = [
    "Augmentation",
    "Compose",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "Cutout",
    "Normalize",
    "Identity",
    "rgb_to_grayscale",
    "rgb_to_hsv",
    "hsv_to_rgb",
    "simclr_all",
    "crop_only",
    "all_without_crop",
    "augmentation_regime",
    "REGIMES",
]

Params = dict[str, Tensor]


def _check_prob(name: str, p: object) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


def _check_range(name: str, r: object, *, low: float, high: float = math.inf) -> tuple[float, float]:
    if not isinstance(r, (tuple, list)) or len(r) != 2 or not all(isinstance(v, (int, float)) for v in r):
        raise ValueError(f"{name} must be a pair (min, max) of numbers, got {r!r}")
    a, b = float(r[0]), float(r[1])
    if not low <= a <= b <= high:
        raise ValueError(f"{name} must satisfy {low} <= min <= max <= {high}, got {r!r}")
    return a, b


def _check_images(x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    x = to_float_images(x)
    if x.ndim != 4:
        raise ValueError(f"x must have shape (B, C, H, W), got {tuple(x.shape)}")
    return x


def _check_generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"generator must be a CPU torch.Generator, got {generator!r}")
    return generator


class Augmentation(abc.ABC):
    """Base class: a random image transform applied to each sample with probability ``p``.

    Subclasses implement ``_sample`` (parameters for all ``B`` samples, each a tensor with leading
    dimension ``B``) and ``_apply`` (the transform of the selected samples), and override ``out_size``
    when they change the image size.

    Args:
        p: probability that a sample is transformed.
    """

    def __init__(self, p: float = 1.0) -> None:
        self.p = _check_prob("p", p)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        """The ``(H, W)`` of the output for inputs of ``(height, width)``."""
        return height, width

    def _sample(self, batch: int, height: int, width: int, generator: torch.Generator) -> Params:
        return {}

    @abc.abstractmethod
    def _apply(self, x: Tensor, params: Params) -> Tensor:
        """The transform of the selected samples ``x`` with their parameters ``params``."""

    def sample(self, batch: int, height: int, width: int, generator: torch.Generator) -> Params:
        """Draw the parameters of ``batch`` samples of size ``height × width`` on the CPU.

        Returns:
            A dict of CPU tensors with leading dimension ``batch``; ``"apply"`` is the bool mask of the
            samples the op transforms.
        """
        _check_generator(generator)
        apply = torch.rand(batch, generator=generator) < self.p
        params = self._sample(batch, height, width, generator)
        params["apply"] = apply
        return params

    def apply(self, x: Tensor, params: Params) -> Tensor:
        """Transform the samples of ``x`` ``(B, C, H, W)`` selected by ``params["apply"]``.

        Returns:
            A new tensor ``(B, C, H', W')`` with ``(H', W') = out_size(H, W)``; ``x`` is not modified.
        """
        x = _check_images(x)
        mask = params["apply"].to(x.device)
        out_h, out_w = self.out_size(x.shape[2], x.shape[3])
        if (out_h, out_w) != tuple(x.shape[2:]):  # size-changing ops transform every sample
            if not bool(mask.all()):
                raise ValueError(f"p must be 1 for {type(self).__name__}: it changes the image size")
            return self._apply(x, {k: v.to(x.device) for k, v in params.items()})
        out = x.clone()
        if bool(mask.any()):
            idx = mask.nonzero().squeeze(1)
            sub = {k: v.to(x.device)[idx] for k, v in params.items() if k != "apply"}
            out[idx] = self._apply(x[idx], sub)
        return out

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Sample parameters from ``generator`` and apply them to ``x`` ``(B, C, H, W)``."""
        x = _check_images(x)
        return self.apply(x, self.sample(x.shape[0], x.shape[2], x.shape[3], generator))


class Identity(Augmentation):
    """Leave the images unchanged (a regime with nothing in it)."""

    def __init__(self) -> None:
        super().__init__(1.0)

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        return x


class Compose(Augmentation):
    """Apply ``ops`` in order; the whole chain acts on a sample with probability ``p``.

    With ``p < 1`` this is torchvision's ``RandomApply(Compose(...))``.

    Args:
        ops: the augmentations, applied first to last.
        p: probability that a sample goes through the chain at all.

    Examples:
        >>> aug = Compose([RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8)])
        >>> aug(torch.rand(4, 3, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([4, 3, 8, 8])
    """

    def __init__(self, ops: Sequence[Augmentation], p: float = 1.0) -> None:
        super().__init__(p)
        if not all(isinstance(op, Augmentation) for op in ops):
            raise TypeError(f"ops must be a sequence of Augmentation, got {[type(o).__name__ for o in ops]}")
        self.ops = tuple(ops)

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        """The output size after every op."""
        for op in self.ops:
            height, width = op.out_size(height, width)
        return height, width

    def sample(self, batch: int, height: int, width: int, generator: torch.Generator) -> Params:
        """Parameters of every op, keyed ``"<i>.<name>"``, plus the chain's ``"apply"`` mask."""
        _check_generator(generator)
        params: Params = {"apply": torch.rand(batch, generator=generator) < self.p}
        for i, op in enumerate(self.ops):
            for k, v in op.sample(batch, height, width, generator).items():
                params[f"{i}.{k}"] = v
            height, width = op.out_size(height, width)
        return params

    def op_params(self, params: Params, i: int) -> Params:
        """The parameters of op ``i`` out of the chain's ``params``."""
        prefix = f"{i}."
        return {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}

    def apply(self, x: Tensor, params: Params) -> Tensor:
        """Apply the ops in order to the samples the chain's mask selects.

        Raises:
            ValueError: the chain skips some samples (``p < 1``) and an op changes the image size, so the
                skipped samples would not fit in one batch.
        """
        x = _check_images(x)
        chain = params["apply"]
        masked = dict(params)
        size = tuple(x.shape[2:])
        for i, op in enumerate(self.ops):
            out = op.out_size(*size)
            if out == size:
                masked[f"{i}.apply"] = params[f"{i}.apply"] & chain
            elif not bool(chain.all()):
                raise ValueError(
                    f"p must be 1 for a Compose whose op {type(op).__name__} changes the image size "
                    f"({size} -> {out}), else skipped samples would keep the old size"
                )
            size = out
        return self._apply(x, masked)

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        """Run the ops in order, each with its own parameters (masks already combined with the chain's)."""
        for i, op in enumerate(self.ops):
            x = op.apply(x, self.op_params(params, i))
        return x


class RandomResizedCrop(Augmentation):
    """Crop a random box of random area and aspect ratio, resized to ``size × size`` (bilinear).

    torchvision's sampler, vectorised: for each sample ten candidate boxes with area fraction
    ``U(scale)`` and log-uniform aspect ratio in ``ratio``; the first that fits is used, else a central
    crop with the ratio clamped. Boxes are whole pixels ``(top, left, height, width)``; the resize is
    ``grid_sample`` with ``align_corners=False`` (no antialiasing), so a box equal to the image is the
    identity.

    Args:
        size: output side in pixels.
        scale: range of the box's area as a fraction of the image's.
        ratio: range of the box's aspect ratio width/height.
    """

    ATTEMPTS = 10

    def __init__(
        self, size: int, scale: tuple[float, float] = (0.08, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3)
    ) -> None:
        super().__init__(1.0)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self.size = size
        self.scale = _check_range("scale", scale, low=0.0, high=1.0)
        if self.scale[1] == 0:
            raise ValueError(f"scale must have max > 0, got {scale!r}")
        self.ratio = _check_range("ratio", ratio, low=0.0)
        if self.ratio[0] == 0:
            raise ValueError(f"ratio must have min > 0, got {ratio!r}")

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        """Always ``(size, size)``."""
        return self.size, self.size

    def _sample(self, batch: int, height: int, width: int, generator: torch.Generator) -> Params:
        n = self.ATTEMPTS
        area = (
            height
            * width
            * (
                self.scale[0]
                + (self.scale[1] - self.scale[0]) * torch.rand(batch, n, generator=generator, dtype=torch.float64)
            )
        )
        log_r = math.log(self.ratio[0]) + (math.log(self.ratio[1]) - math.log(self.ratio[0])) * torch.rand(
            batch, n, generator=generator, dtype=torch.float64
        )
        aspect = log_r.exp()
        w = (area * aspect).sqrt().round()
        h = (area / aspect).sqrt().round()
        u_top = torch.rand(batch, n, generator=generator, dtype=torch.float64)
        u_left = torch.rand(batch, n, generator=generator, dtype=torch.float64)
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = torch.where(ok.any(1), ok.to(torch.int8).argmax(1), torch.full((batch,), -1))
        # fallback: a central crop of the whole image with the aspect ratio clamped into `ratio`
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            fw, fh = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            fw, fh = round(height * self.ratio[1]), height
        else:
            fw, fh = width, height
        rows = torch.arange(batch)
        pick = first.clamp(min=0)
        bw, bh = w[rows, pick], h[rows, pick]
        top = (u_top[rows, pick] * (height - bh + 1)).floor()
        left = (u_left[rows, pick] * (width - bw + 1)).floor()
        fallback = first < 0
        bw = torch.where(fallback, torch.full_like(bw, fw), bw)
        bh = torch.where(fallback, torch.full_like(bh, fh), bh)
        top = torch.where(fallback, torch.full_like(top, (height - fh) // 2), top)
        left = torch.where(fallback, torch.full_like(left, (width - fw) // 2), left)
        box = torch.stack([top, left, bh, bw], 1).to(torch.int64)  # (B, 4) pixels
        return {"box": box}

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        _, _, height, width = x.shape
        box = params["box"].to(x.dtype)
        top, left, bh, bw = box.unbind(1)
        theta = torch.zeros(x.shape[0], 2, 3, dtype=x.dtype, device=x.device)
        # output pixel centre u in (-1, 1) maps to the input coordinate (2*left + bw*(u+1))/W - 1
        # (normalised, align_corners=False)
        theta[:, 0, 0] = bw / width
        theta[:, 0, 2] = (2 * left + bw) / width - 1
        theta[:, 1, 1] = bh / height
        theta[:, 1, 2] = (2 * top + bh) / height - 1
        grid = F.affine_grid(theta, [x.shape[0], x.shape[1], self.size, self.size], align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


class RandomHorizontalFlip(Augmentation):
    """Mirror left–right with probability ``p`` (default 0.5)."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        return x.flip(-1)


def rgb_to_grayscale(x: Tensor) -> Tensor:
    """ITU-R 601 luma ``0.299 R + 0.587 G + 0.114 B``, shape ``(B, 1, H, W)``; one-channel input is returned.

    Raises:
        ValueError: the images have neither 1 nor 3 channels.
    """
    if x.shape[-3] == 1:
        return x
    if x.shape[-3] != 3:
        raise ValueError(f"x must have 1 or 3 channels for colour ops, got {x.shape[-3]}")
    r, g, b = x.unbind(-3)
    return (0.299 * r + 0.587 * g + 0.114 * b).unsqueeze(-3)


def rgb_to_hsv(x: Tensor) -> Tensor:
    """RGB ``(B, 3, H, W)`` in [0, 1] to HSV with hue in [0, 1) (torchvision's ``_rgb2hsv``)."""
    r, g, b = x.unbind(-3)
    maxc, _ = x.max(-3)
    minc, _ = x.min(-3)
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    cr_div = torch.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / cr_div, (maxc - g) / cr_div, (maxc - b) / cr_div
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = torch.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return torch.stack([h, s, maxc], -3)


def hsv_to_rgb(x: Tensor) -> Tensor:
    """HSV ``(B, 3, H, W)`` (hue in [0, 1)) to RGB (torchvision's ``_hsv2rgb``)."""
    h, s, v = x.unbind(-3)
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.to(torch.int64) % 6
    p = (v * (1.0 - s)).clamp(0.0, 1.0)
    q = (v * (1.0 - s * f)).clamp(0.0, 1.0)
    t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0)
    mask = i.unsqueeze(-3) == torch.arange(6, device=x.device).view(-1, 1, 1)  # (B, 6, H, W)
    a1 = torch.stack((v, q, p, p, t, v), -3)
    a2 = torch.stack((t, v, v, q, p, p), -3)
    a3 = torch.stack((p, p, t, v, v, q), -3)
    a4 = torch.stack((a1, a2, a3), -4)  # (B, 3, 6, H, W)
    return torch.einsum("...ijk,...xijk->...xjk", mask.to(x.dtype), a4)


def _blend(x: Tensor, other: Tensor, factor: Tensor) -> Tensor:
    f = factor.view(-1, 1, 1, 1)
    return (f * x + (1.0 - f) * other).clamp(0.0, 1.0)


class ColorJitter(Augmentation):
    """Random brightness, contrast, saturation and hue, in a random order per sample (torchvision).

    Factors are uniform in ``[max(0, 1 − s), 1 + s]`` for brightness/contrast/saturation strength ``s``
    and the hue shift is uniform in ``[−hue, hue]`` (fraction of the colour wheel). Brightness scales the
    pixels; contrast blends with the image's mean luma; saturation blends with the luma image; hue rotates
    H in HSV. One-channel images have no saturation or hue, so those two are identities on them.

    Args:
        brightness, contrast, saturation: strengths ≥ 0 (SimCLR: 0.8·s with s = 0.5 for CIFAR).
        hue: strength in [0, 0.5].
        p: probability per sample (SimCLR: 0.8).
    """

    def __init__(
        self,
        brightness: float = 0.4,
        contrast: float = 0.4,
        saturation: float = 0.4,
        hue: float = 0.1,
        p: float = 0.8,
    ) -> None:
        super().__init__(p)
        for name, v, hi in (("brightness", brightness, math.inf), ("contrast", contrast, math.inf),
                            ("saturation", saturation, math.inf), ("hue", hue, 0.5)):  # fmt: skip
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= float(v) <= hi:
                raise ValueError(f"{name} must be a number in [0, {hi}], got {v!r}")
        self.brightness, self.contrast, self.saturation, self.hue = map(float, (brightness, contrast, saturation, hue))

    def _sample(self, batch: int, height: int, width: int, generator: torch.Generator) -> Params:
        u = torch.rand(batch, 4, generator=generator)
        factors = []
        for j, s in enumerate((self.brightness, self.contrast, self.saturation)):
            lo = max(0.0, 1.0 - s)
            factors.append(lo + (1.0 + s - lo) * u[:, j])
        hue = (2.0 * u[:, 3] - 1.0) * self.hue
        order = torch.rand(batch, 4, generator=generator).argsort(1)  # a random permutation of the 4 ops
        return {
            "brightness": factors[0],
            "contrast": factors[1],
            "saturation": factors[2],
            "hue": hue,
            "order": order,
        }

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        if x.shape[1] not in (1, 3):
            raise ValueError(f"x must have 1 or 3 channels for ColorJitter, got {x.shape[1]}")
        x = x.clone()
        for position in range(4):
            for op in range(4):
                sel = (params["order"][:, position] == op).nonzero().squeeze(1)
                if sel.numel() == 0:
                    continue
                xs = x[sel]
                if op == 0:
                    xs = _blend(xs, torch.zeros_like(xs), params["brightness"][sel])
                elif op == 1:
                    mean = rgb_to_grayscale(xs).mean(dim=(1, 2, 3), keepdim=True)
                    xs = _blend(xs, mean, params["contrast"][sel])
                elif x.shape[1] == 1:
                    continue  # saturation and hue do not exist for one channel
                elif op == 2:
                    xs = _blend(xs, rgb_to_grayscale(xs), params["saturation"][sel])
                else:
                    hsv = rgb_to_hsv(xs)
                    h = torch.remainder(hsv[:, 0] + params["hue"][sel].view(-1, 1, 1), 1.0)
                    xs = hsv_to_rgb(torch.stack([h, hsv[:, 1], hsv[:, 2]], 1))
                x[sel] = xs
        return x


class RandomGrayscale(Augmentation):
    """Replace the image by its luma, replicated over the channels, with probability ``p`` (SimCLR: 0.2)."""

    def __init__(self, p: float = 0.2) -> None:
        super().__init__(p)

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        return rgb_to_grayscale(x).expand_as(x).clone()


class GaussianBlur(Augmentation):
    """Separable Gaussian blur with a per-sample ``σ ~ U(sigma)`` and reflect padding.

    Args:
        kernel_size: odd kernel side; ``None`` picks SimCLR's 10% of the image side (odd, at least 3),
            capped at the largest odd size the reflect padding allows.
        sigma: range of the standard deviation in pixels (SimCLR: (0.1, 2.0)); σ = 0 is the identity.
        p: probability per sample (SimCLR: 0.5).
    """

    def __init__(self, kernel_size: int | None = None, sigma: tuple[float, float] = (0.1, 2.0), p: float = 0.5) -> None:
        super().__init__(p)
        if kernel_size is not None and (
            isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0
        ):
            raise ValueError(f"kernel_size must be None or an odd positive int, got {kernel_size!r}")
        self.kernel_size = kernel_size
        self.sigma = _check_range("sigma", sigma, low=0.0)

    def _kernel_size(self, height: int, width: int) -> int:
        k = self.kernel_size if self.kernel_size is not None else max(3, int(0.1 * min(height, width)) // 2 * 2 + 1)
        limit = 2 * (min(height, width) - 1) + 1  # reflect padding needs pad < side
        return max(1, min(k, limit))

    def _sample(self, batch: int, height: int, width: int, generator: torch.Generator) -> Params:
        lo, hi = self.sigma
        return {"sigma": lo + (hi - lo) * torch.rand(batch, generator=generator)}

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        b, c, height, width = x.shape
        k = self._kernel_size(height, width)
        if k == 1:
            return x
        offsets = torch.arange(k, dtype=x.dtype, device=x.device) - (k - 1) / 2
        sigma = params["sigma"].to(x.dtype).clamp(min=1e-6).view(-1, 1)
        kern = torch.exp(-0.5 * (offsets.view(1, -1) / sigma) ** 2)
        kern = kern / kern.sum(1, keepdim=True)  # (B, k); σ → 0 gives the delta kernel exactly
        weight = kern.repeat_interleave(c, 0)  # (B*C, k): one depthwise filter per (sample, channel)
        pad = k // 2
        y = F.pad(x.reshape(1, b * c, height, width), (pad, pad, pad, pad), mode="reflect")
        y = F.conv2d(y, weight.view(b * c, 1, k, 1), groups=b * c)  # vertical
        y = F.conv2d(y, weight.view(b * c, 1, 1, k), groups=b * c)  # horizontal
        return y.view(b, c, height, width)


class Cutout(Augmentation):
    """Fill one ``size × size`` square per sample with ``fill`` (DeVries & Taylor 2017, arXiv 1708.04552).

    The square's centre is uniform over the pixels and the square is clipped at the border (the paper's
    version), so near an edge less than ``size²`` pixels are filled; with ``inside=True`` the square
    always lies fully inside the image and exactly ``size²`` pixels are filled. ``params["box"]`` holds
    ``(top, left, bottom, right)`` (exclusive) of the filled region.

    Args:
        size: side in pixels (int ≥ 0) or as a fraction of the shorter image side (float in [0, 1]).
        p: probability per sample.
        fill: value written into the square.
        inside: keep the square inside the image.
    """

    def __init__(self, size: int | float = 0.25, p: float = 0.5, fill: float = 0.0, inside: bool = False) -> None:
        super().__init__(p)
        if (
            isinstance(size, bool)
            or not isinstance(size, (int, float))
            or size < 0
            or (isinstance(size, float) and size > 1)
        ):
            raise ValueError(f"size must be an int >= 0 (pixels) or a float in [0, 1] (fraction), got {size!r}")
        self.size, self.fill, self.inside = size, float(fill), bool(inside)

    def side(self, height: int, width: int) -> int:
        """The square's side in pixels for an image of ``height × width``."""
        s = self.size if isinstance(self.size, int) else round(self.size * min(height, width))
        return min(s, height, width)

    def _sample(self, batch: int, height: int, width: int, generator: torch.Generator) -> Params:
        s = self.side(height, width)
        u = torch.rand(batch, 2, generator=generator, dtype=torch.float64)
        if self.inside:
            top = (u[:, 0] * (height - s + 1)).floor().to(torch.int64)
            left = (u[:, 1] * (width - s + 1)).floor().to(torch.int64)
        else:
            top = (u[:, 0] * height).floor().to(torch.int64) - s // 2
            left = (u[:, 1] * width).floor().to(torch.int64) - s // 2
        box = torch.stack(
            [
                top.clamp(0, height),
                left.clamp(0, width),
                (top + s).clamp(0, height),
                (left + s).clamp(0, width),
            ],
            1,
        )
        return {"box": box}

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        height, width = x.shape[2:]
        rows = torch.arange(height, device=x.device).view(1, -1, 1)
        cols = torch.arange(width, device=x.device).view(1, 1, -1)
        top, left, bottom, right = (v.view(-1, 1, 1) for v in params["box"].unbind(1))
        inside = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)  # (B, H, W)
        return x.masked_fill(inside.unsqueeze(1), self.fill)


class Normalize(Augmentation):
    """Deterministic per-channel ``(x − mean) / std`` (for encoders trained on standardised inputs).

    Args:
        mean: one value per channel.
        std: one positive value per channel.
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__(1.0)
        if len(mean) != len(std) or not len(mean):
            raise ValueError(f"mean and std must have the same non-zero length, got {len(mean)} and {len(std)}")
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be positive, got {tuple(std)}")
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)

    def _apply(self, x: Tensor, params: Params) -> Tensor:
        if x.shape[1] != len(self.mean):
            raise ValueError(f"x has {x.shape[1]} channels but mean/std have {len(self.mean)}")
        m = torch.tensor(self.mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        s = torch.tensor(self.std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        return (x - m) / s


# --- the regimes of "The Loss Is Not Enough" (paper 4, §5) and SimCLR -------------------------------------


def _colour_and_corruption_ops(image_size: int, strength: float) -> list[Augmentation]:
    s = float(strength)
    return [
        ColorJitter(0.8 * s, 0.8 * s, 0.8 * s, min(0.2 * s, 0.5), p=0.8),
        RandomGrayscale(p=0.2),
        GaussianBlur(sigma=(0.1, 2.0), p=0.5),
        Cutout(size=max(1, image_size // 4), p=0.5),
    ]


def simclr_all(
    image_size: int, *, crop_scale: tuple[float, float] = (0.08, 1.0), strength: float = 0.5, flip: bool = True
) -> Compose:
    """The *All* regime: random resized crop, flip, colour jitter, grayscale, blur and cutout.

    SimCLR's pipeline (Chen et al. 2020, appendix A: jitter strength ``s`` with brightness/contrast/
    saturation 0.8s and hue 0.2s at p = 0.8, grayscale p = 0.2, blur p = 0.5) plus cutout of a quarter of
    the side at p = 0.5, as in paper 4's "All" regime. Ops (indices for :meth:`Compose.op_params`):
    0 crop, 1 flip, 2 jitter, 3 grayscale, 4 blur, 5 cutout.

    Args:
        image_size: output side.
        crop_scale: area range of the random resized crop.
        strength: colour-jitter strength ``s`` (SimCLR uses 0.5 on CIFAR, 1.0 on ImageNet).
        flip: mirror with p = 0.5; ``False`` keeps the op with p = 0 (for digits, where a mirror image is
            not the same digit), so op indices do not move.
    """
    return Compose([RandomResizedCrop(image_size, scale=crop_scale), RandomHorizontalFlip(0.5 if flip else 0.0),
                    *_colour_and_corruption_ops(image_size, strength)])  # fmt: skip


def crop_only(
    image_size: int, *, crop_scale: tuple[float, float] = (0.08, 1.0), strength: float = 0.5, flip: bool = True
) -> Compose:
    """The *Crop only* regime: a random resized crop and nothing else (colour statistics untouched).

    ``strength`` and ``flip`` are accepted for a uniform regime signature and have no effect.
    """
    return Compose([RandomResizedCrop(image_size, scale=crop_scale)])


def all_without_crop(
    image_size: int, *, crop_scale: tuple[float, float] = (0.08, 1.0), strength: float = 0.5, flip: bool = True
) -> Compose:
    """The *All w/o crop* regime: flip, colour jitter, grayscale, blur and cutout.

    No pixel moves except under the flip. Ops: 0 flip (p = 0 without ``flip``), 1 jitter, 2 grayscale,
    3 blur, 4 cutout. ``crop_scale`` is accepted for a uniform signature and has no effect.
    """
    return Compose([RandomHorizontalFlip(0.5 if flip else 0.0), *_colour_and_corruption_ops(image_size, strength)])


REGIMES: dict[str, Callable[..., Compose]] = {
    "simclr_all": simclr_all,
    "crop_only": crop_only,
    "all_without_crop": all_without_crop,
}
"""Regime name → builder ``(image_size, *, crop_scale, strength, flip) -> Compose``."""


def augmentation_regime(
    name: str,
    image_size: int,
    *,
    crop_scale: tuple[float, float] = (0.08, 1.0),
    strength: float = 0.5,
    flip: bool = True,
) -> Compose:
    """Build the augmentation regime ``name`` (a key of :data:`REGIMES`) for square images of ``image_size``.

    For 8×8 digits, ``crop_scale=(0.5, 1.0), flip=False`` works better than the CIFAR defaults (see
    ``docs/vision.md`` for the measurements).

    Raises:
        ValueError: an unknown ``name``, or a bad ``image_size``/``strength``/``crop_scale``.

    Examples:
        >>> aug = augmentation_regime("crop_only", 8, crop_scale=(0.5, 1.0))
        >>> aug(torch.rand(2, 1, 8, 8), torch.Generator().manual_seed(0)).shape
        torch.Size([2, 1, 8, 8])
    """
    if name not in REGIMES:
        raise ValueError(f"name must be one of {tuple(REGIMES)}, got {name!r}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"image_size must be a positive int, got {image_size!r}")
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or strength < 0:
        raise ValueError(f"strength must be a number >= 0, got {strength!r}")
    if not isinstance(flip, bool):
        raise TypeError(f"flip must be a bool, got {type(flip).__name__}")
    _check_range("crop_scale", crop_scale, low=0.0, high=1.0)
    return REGIMES[name](image_size, crop_scale=crop_scale, strength=strength, flip=flip)
