"""``augmentation-diversity``: the regimes it trains under, its FLOP count, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from contrastlab.data import (
    ColorJitter,
    Cutout,
    GaussianBlur,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    augmentation_regime,
)
from contrastlab.eval.probe import mean_ci
from contrastlab.experiments import augmentation_diversity as ad
from contrastlab.experiments import get_experiment, resolve_config

TINY = ad.Config(
    dataset="digits", train_subset=64, test_subset=40, resnet_width=2, vit_width=8, vit_depth=1, mlp_width=16,
    embed_dim=8, proj_dim=4, steps=2, batch_size=16, probe_epochs=5, seeds=(0, 1), device="cpu",
)  # fmt: skip


def test_regimes_are_all_crop_only_and_all_minus_crop() -> None:
    # what the vision tests leave out: All holds the paper's six ops, and is exactly Crop only + All w/o crop
    types = {r: [type(op) for op in augmentation_regime(r, 8).ops] for r in ad.REGIME_LABELS}
    six = {RandomResizedCrop, RandomHorizontalFlip, ColorJitter, RandomGrayscale, GaussianBlur, Cutout}
    assert set(types["simclr_all"]) == six and len(types["simclr_all"]) == 6
    assert types["crop_only"] == [RandomResizedCrop]
    assert types["simclr_all"] == types["crop_only"] + types["all_without_crop"]


def test_encoders_have_comparable_parameter_counts() -> None:
    from contrastlab.models import count_parameters

    for c, size, ch in ((ad.Config(), 8, 1), (ad.FULL_CIFAR10, 32, 3)):
        n = [count_parameters(ad.build_encoder(e, ch, size, c)) for e in ("resnet18", "vit", "mlp")]
        assert max(n) / min(n) < 1.2, n
    with pytest.raises(ValueError, match="^encoders"):
        ad.build_encoder("vgg", 1, 8, ad.Config())


def test_step_flops_matches_a_hand_count() -> None:
    # MLP 16 → 16 → 16 → 8, no head, 2·5 views: forward 2·B·Σ in·out; backward the weight grads of every
    # layer plus the input grads of all but the first (the images need no gradient)
    c = ad.Config(mlp_width=16, embed_dim=8, proj_dim=0, batch_size=5)
    b, layers = 10, [(16, 16), (16, 16), (16, 8)]
    forward = sum(2 * b * i * o for i, o in layers)
    assert ad.step_flops("mlp", c, channels=1, image_size=4) == 3 * forward - 2 * b * 16 * 16


def _table(res: dict, title: str) -> list[list]:
    return next(t["rows"] for t in res["tables"] if t["title"].startswith(title))


def test_tiny_run(tmp_path: Path) -> None:
    res = ad.run(TINY, tmp_path)
    assert set(res) == {"summary", "metrics", "tables", "figures"}
    json.dumps(res)
    assert (tmp_path / "augmentation_diversity.png").stat().st_size > 5000
    runs = _table(res, "Every run")
    assert len(runs) == 3 * 3 * 2 and {tuple(r[:3]) for r in runs} == {
        (ad.ENCODER_LABELS[e], ad.REGIME_LABELS[r], s) for e in TINY.encoders for r in TINY.regimes for s in (0, 1)
    }
    acc = {(r[0], r[1], r[2]): r[3] for r in runs}
    for e, r in {(x[0], x[1]) for x in runs}:
        ci = mean_ci([acc[(e, r, 0)], acc[(e, r, 1)]])
        row = next(x for x in res["tables"][0]["rows"] if x[0] == e and x[1] == r)
        assert row[2] == pytest.approx(ci.mean) and row[3] == pytest.approx(ci.half_width)
        assert 0 <= row[2] <= 1
    # the spread metric is the per-seed best − worst, averaged
    for r in TINY.regimes:
        label = ad.REGIME_LABELS[r]
        per_seed = [max(acc[(e, label, s)] for e in ("ResNet-18", "ViT", "MLP")) -
                    min(acc[(e, label, s)] for e in ("ResNet-18", "ViT", "MLP")) for s in (0, 1)]  # fmt: skip
        assert res["metrics"][f"spread/{r}"] == pytest.approx(sum(per_seed) / 2)
    assert res["tables"][0]["rows"][0][4] == ad.PAPER_CIFAR10["resnet18"]["simclr_all"]
    assert "raw pixels" in dict(_table(res, "Baselines"))
    cost = _table(res, "Cost of the full")
    assert [r[0] for r in cost] == ["ResNet-18", "ViT", "MLP"] and cost[0][2] == pytest.approx(13.32, abs=0.01)
    assert all(math.isfinite(v) for k, v in res["metrics"].items() if "half_width" not in k)
    assert (tmp_path / "train" / "mlp_crop_only_s1" / "metrics.jsonl").exists()


def test_registered_with_the_runner() -> None:
    assert get_experiment("augmentation-diversity") is ad
    cfg = resolve_config("augmentation-diversity", quick=True, overrides={"seeds": "[0, 1]"})
    assert cfg.seeds == (0, 1) and cfg.steps == ad.QUICK.steps
    with pytest.raises(ValueError, match="^regimes"):
        ad.run(ad.Config(regimes=("colour_only",)), Path("/nonexistent"))


def test_same_seed_same_result(tmp_path: Path) -> None:
    c = ad.Config(**{**TINY.__dict__, "encoders": ("mlp",), "regimes": ("crop_only",), "seeds": (3,)})
    a = _table(ad.run(c, tmp_path / "a"), "Every run")[0]
    b = _table(ad.run(c, tmp_path / "b"), "Every run")[0]
    assert a[3] == b[3] and a[4] == b[4]  # probe accuracy and final loss, bit for bit
