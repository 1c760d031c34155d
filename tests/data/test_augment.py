"""Each augmentation does what it says, per sample, reproducibly; the regimes keep what they promise."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from contrastlab.data import (
    REGIMES,
    ColorJitter,
    Compose,
    Cutout,
    GaussianBlur,
    Identity,
    Normalize,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    augmentation_regime,
)
from contrastlab.data.augment import Augmentation, hsv_to_rgb, rgb_to_grayscale, rgb_to_hsv


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def smooth_images(b: int, c: int, size: int, seed: int = 0) -> torch.Tensor:
    """Low-frequency images: 4×4 noise upsampled bilinearly, values in [0.1, 0.9]."""
    coarse = torch.rand(b, c, 4, 4, generator=gen(seed)) * 0.8 + 0.1
    return F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=True)


ALL_OPS: list[Augmentation] = [
    RandomResizedCrop(16),
    RandomHorizontalFlip(),
    ColorJitter(),
    RandomGrayscale(),
    GaussianBlur(),
    Cutout(),
    Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25]),
    Identity(),
]


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda o: type(o).__name__)
def test_shapes_dtype_and_determinism(op: Augmentation) -> None:
    x = torch.rand(6, 3, 16, 16, generator=gen(1))
    out = op(x, gen(5))
    assert out.shape == x.shape and out.dtype == torch.float32
    assert torch.equal(out, op(x, gen(5)))  # same generator seed, same result
    assert torch.equal(x, torch.rand(6, 3, 16, 16, generator=gen(1)))  # the input is untouched
    u8 = (x * 255).round().to(torch.uint8)
    assert torch.allclose(op(u8, gen(5)), op(u8.float() / 255, gen(5)))


@pytest.mark.parametrize("name", list(REGIMES))
@pytest.mark.parametrize("channels,size", [(1, 8), (3, 32)])
def test_regimes_shapes_and_seeds(name: str, channels: int, size: int) -> None:
    aug = augmentation_regime(name, size)
    x = smooth_images(8, channels, size)
    a, b = aug(x, gen(0)), aug(x, gen(0))
    assert a.shape == x.shape and torch.equal(a, b)
    assert not torch.equal(a, aug(x, gen(1)))
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0


def test_zero_strength_is_identity() -> None:
    x = smooth_images(5, 3, 16)
    g = gen(3)
    assert torch.allclose(RandomResizedCrop(16, scale=(1.0, 1.0), ratio=(1.0, 1.0))(x, g), x, atol=1e-6)
    assert torch.allclose(ColorJitter(0.0, 0.0, 0.0, 0.0, p=1.0)(x, g), x, atol=1e-6)
    assert torch.allclose(GaussianBlur(sigma=(0.0, 0.0), p=1.0)(x, g), x, atol=0)
    assert torch.equal(Cutout(size=0, p=1.0)(x, g), x)
    for op in (RandomHorizontalFlip(p=0.0), ColorJitter(p=0.0), RandomGrayscale(p=0.0), GaussianBlur(p=0.0),
               Cutout(p=0.0), Compose([ColorJitter(p=1.0), Cutout(p=1.0)], p=0.0)):  # fmt: skip
        assert torch.equal(op(x, g), x)


def test_parameters_are_per_sample_and_independent_of_p() -> None:
    crop = RandomResizedCrop(16)
    boxes = crop.sample(64, 16, 16, gen(0))["box"]
    assert len({tuple(b) for b in boxes.tolist()}) > 30  # each sample gets its own box
    # changing one op's p leaves every later op's draws unchanged
    p_a = Compose([ColorJitter(p=0.1), Cutout(p=0.5)]).sample(16, 8, 8, gen(0))
    p_b = Compose([ColorJitter(p=0.9), Cutout(p=0.5)]).sample(16, 8, 8, gen(0))
    assert torch.equal(p_a["1.box"], p_b["1.box"]) and torch.equal(p_a["1.apply"], p_b["1.apply"])
    assert not torch.equal(p_a["0.apply"], p_b["0.apply"])


def test_random_resized_crop_boxes_respect_scale_and_ratio() -> None:
    crop = RandomResizedCrop(32, scale=(0.2, 0.6), ratio=(0.5, 2.0))
    box = crop.sample(500, 32, 32, gen(1))["box"]
    top, left, h, w = box.unbind(1)
    assert bool((top >= 0).all() and (left >= 0).all() and (top + h <= 32).all() and (left + w <= 32).all())
    area = (h * w).float() / 1024
    assert float(area.min()) >= 0.2 - 0.05 and float(area.max()) <= 0.6 + 0.05  # rounding to whole pixels
    ratio = w.float() / h.float()
    assert float(ratio.min()) >= 0.5 * 0.85 and float(ratio.max()) <= 2.0 / 0.85


def test_crop_resamples_exactly_the_box() -> None:
    # a crop of a box at integer scale 1 (box side = output side) is an exact slice of the image
    x = torch.rand(3, 2, 12, 12, generator=gen(2))
    crop = RandomResizedCrop(6)
    params = {"box": torch.tensor([[0, 0, 6, 6], [3, 5, 6, 6], [6, 6, 6, 6]]), "apply": torch.ones(3, dtype=torch.bool)}
    out = crop.apply(x, params)
    for i, (t, left, h, w) in enumerate(params["box"].tolist()):
        assert torch.allclose(out[i], x[i, :, t : t + h, left : left + w], atol=1e-6)


def test_crop_only_keeps_colour_statistics() -> None:
    # (a) images of one colour each stay exactly that colour: no jitter, no grayscale, no blending
    colours = torch.rand(16, 3, 1, 1, generator=gen(4))
    flat = colours.expand(16, 3, 32, 32)
    out = augmentation_regime("crop_only", 32)(flat, gen(0))
    assert torch.allclose(out, colours.expand_as(out), atol=1e-6)
    # (b) on smooth images each output's channel means equal those of its crop box (up to interpolation)
    aug = augmentation_regime("crop_only", 32)
    x = smooth_images(32, 3, 32, seed=5)
    params = aug.sample(32, 32, 32, gen(7))
    out = aug.apply(x, params)
    box = aug.op_params(params, 0)["box"]
    region_means = torch.stack(
        [x[i, :, t : t + h, le : le + w].mean(dim=(1, 2)) for i, (t, le, h, w) in enumerate(box.tolist())]
    )
    assert torch.allclose(out.mean(dim=(2, 3)), region_means, atol=0.02)
    assert [type(op) for op in aug.ops] == [RandomResizedCrop]


def test_all_without_crop_keeps_geometry() -> None:
    # one bright pixel on a dark grey background: colour ops, blur and flips keep it the brightest pixel
    # at its place (or its mirror image); only cutout can hide it
    b, size = 64, 16
    g = gen(11)
    rows, cols = torch.randint(2, size - 2, (b,), generator=g), torch.randint(2, size - 2, (b,), generator=g)
    x = torch.full((b, 3, size, size), 0.1)
    x[torch.arange(b), :, rows, cols] = 0.8
    aug = augmentation_regime("all_without_crop", size)
    params = aug.sample(b, size, size, gen(3))
    out = aug.apply(x, params)
    flipped = aug.op_params(params, 0)["apply"]
    cut = aug.op_params(params, 4)
    checked = 0
    for i in range(b):
        col = size - 1 - cols[i] if flipped[i] else cols[i]
        t, le, bt, r = cut["box"][i].tolist()
        if cut["apply"][i] and t <= rows[i] < bt and le <= col < r:
            continue
        lum = out[i].sum(0)
        assert divmod(int(lum.argmax()), size) == (int(rows[i]), int(col))
        checked += 1
    assert checked > b // 2 and bool(flipped.any()) and not bool(flipped.all())
    assert not any(isinstance(op, RandomResizedCrop) for op in aug.ops)


def test_cutout_zeroes_the_stated_area() -> None:
    x = torch.ones(20, 3, 16, 16)
    out = Cutout(size=5, p=1.0, inside=True)(x, gen(0))
    assert ((out == 0).sum(dim=(2, 3)) == 25).all()  # exactly size² pixels, in every channel
    cut = Cutout(size=0.25, p=1.0)  # a quarter of the side: 4 pixels, clipped at the border
    params = cut.sample(50, 16, 16, gen(1))
    out = cut.apply(torch.ones(50, 1, 16, 16), params)
    t, le, bt, r = params["box"].unbind(1)
    assert torch.equal((out == 0).sum(dim=(1, 2, 3)), (bt - t) * (r - le))
    assert bool(((bt - t) <= 4).all()) and bool(((bt - t) * (r - le) < 16).any())
    for i in range(50):
        assert bool((out[i, :, t[i] : bt[i], le[i] : r[i]] == 0).all())


def test_flip_grayscale_and_normalize() -> None:
    x = torch.rand(4, 3, 8, 8, generator=gen(0))
    assert torch.equal(RandomHorizontalFlip(p=1.0)(x, gen(0)), x.flip(-1))
    gray = RandomGrayscale(p=1.0)(x, gen(0))
    luma = 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]
    assert torch.allclose(gray, luma.unsqueeze(1).expand_as(x))
    one = torch.rand(4, 1, 8, 8, generator=gen(1))
    assert torch.equal(RandomGrayscale(p=1.0)(one, gen(0)), one)
    norm = Normalize([0.5], [0.25])(one, gen(0))
    assert torch.allclose(norm, (one - 0.5) / 0.25)


def test_colour_jitter_factors_match_definitions() -> None:
    x = smooth_images(8, 3, 8)
    jitter = ColorJitter(0.5, 0.0, 0.0, 0.0, p=1.0)
    params = jitter.sample(8, 8, 8, gen(0))
    f = params["brightness"]
    assert bool((f >= 0.5).all() and (f <= 1.5).all())
    assert torch.allclose(jitter.apply(x, params), (x * f.view(-1, 1, 1, 1)).clamp(0, 1), atol=1e-6)
    sat = ColorJitter(0.0, 0.0, 1.0, 0.0, p=1.0)
    params = sat.sample(8, 8, 8, gen(1))
    s = params["saturation"].view(-1, 1, 1, 1)
    expected = (s * x + (1 - s) * rgb_to_grayscale(x)).clamp(0, 1)
    assert torch.allclose(sat.apply(x, params), expected, atol=1e-6)
    hsv = rgb_to_hsv(x)
    assert torch.allclose(hsv_to_rgb(hsv), x, atol=1e-5)
    # a hue shift keeps value (max channel) and saturation
    hue = ColorJitter(0.0, 0.0, 0.0, 0.5, p=1.0)
    shifted = rgb_to_hsv(hue(x, gen(2)))
    assert torch.allclose(shifted[:, 1:], hsv[:, 1:], atol=1e-5)
    # on one channel, saturation and hue are identities and brightness/contrast still act
    one = smooth_images(4, 1, 8)
    assert torch.allclose(ColorJitter(0.0, 0.0, 1.0, 0.5, p=1.0)(one, gen(0)), one)
    assert not torch.allclose(ColorJitter(0.5, 0.5, 0.0, 0.0, p=1.0)(one, gen(0)), one)


def test_blur_is_a_normalised_gaussian() -> None:
    const = torch.full((3, 3, 16, 16), 0.4)
    assert torch.allclose(GaussianBlur(kernel_size=5, p=1.0)(const, gen(0)), const, atol=1e-6)
    delta = torch.zeros(1, 1, 15, 15)
    delta[0, 0, 7, 7] = 1.0
    blur = GaussianBlur(kernel_size=5, sigma=(1.0, 1.0), p=1.0)
    out = blur(delta, gen(0))
    k1 = torch.exp(-0.5 * torch.arange(-2.0, 3.0) ** 2)
    k1 = k1 / k1.sum()
    assert torch.allclose(out[0, 0, 5:10, 5:10], k1.view(-1, 1) * k1.view(1, -1), atol=1e-6)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="^p"):
        ColorJitter(p=1.5)
    with pytest.raises(ValueError, match="^scale"):
        RandomResizedCrop(8, scale=(0.9, 0.1))
    with pytest.raises(ValueError, match="^kernel_size"):
        GaussianBlur(kernel_size=4)
    with pytest.raises(ValueError, match="^size"):
        Cutout(size=-1)
    with pytest.raises(ValueError, match="^name"):
        augmentation_regime("everything", 8)
    with pytest.raises(TypeError, match="^generator"):
        ColorJitter()(torch.rand(2, 3, 4, 4), 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^x"):
        ColorJitter()(torch.rand(3, 4, 4), gen(0))
    half = Compose([RandomResizedCrop(8)], p=0.5)
    assert half(torch.rand(4, 1, 8, 8), gen(0)).shape == (4, 1, 8, 8)  # a same-size crop may be skipped
    with pytest.raises(ValueError, match="^p must be 1"):
        half(torch.rand(4, 1, 16, 16), gen(0))
    with pytest.raises(ValueError, match="p must be 1"):
        RandomResizedCrop(8).apply(
            torch.rand(2, 1, 16, 16), {"box": torch.zeros(2, 4), "apply": torch.tensor([True, False])}
        )


def test_regimes_without_flip_keep_op_positions() -> None:
    x = smooth_images(32, 1, 8)
    aug = augmentation_regime("all_without_crop", 8, flip=False)
    params = aug.sample(32, 8, 8, gen(0))
    assert not bool(aug.op_params(params, 0)["apply"].any())
    assert isinstance(aug.ops[0], RandomHorizontalFlip) and isinstance(aug.ops[4], Cutout)
    assert aug(x, gen(0)).shape == x.shape
    assert augmentation_regime("simclr_all", 8, flip=False).ops[1].p == 0.0
