"""EVT tail diagnostics: GPD recovery on exact GPD data, the isotropic-sphere shape ξ = −2/(D − 1),
negatives with labels, the per-anchor AIC comparison, the QQ data and the figure, whose ΔAIC panel
draws the anchors beyond its clip."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats as sps

from contrastlab import figures
from contrastlab.eval import tails
from contrastlab.losses.weince import anchor_tail_stats


def test_pot_fit_recovers_a_gpd_and_its_endpoint():
    rng = np.random.default_rng(0)
    y = sps.genpareto.rvs(-0.3, scale=0.1, size=4000, random_state=rng) + 0.2
    fit = tails.pot_fit(y, threshold_quantile=0.0)
    assert fit.n == 4000 and fit.n_exceed == 3999  # the minimum is the threshold itself
    assert fit.xi == pytest.approx(-0.3, abs=0.05)
    assert fit.sigma == pytest.approx(0.1, rel=0.08)
    assert fit.endpoint == pytest.approx(0.2 + 0.1 / 0.3, abs=0.03)
    assert fit.endpoint == pytest.approx(fit.threshold - fit.sigma / fit.xi)
    assert fit.delta_aic > 10  # ξ ≠ 0 is clearly preferred over the exponential
    ll = np.sum(sps.genpareto.logpdf(np.sort(y[y > fit.threshold] - fit.threshold), fit.xi, scale=fit.sigma))
    assert fit.loglik == pytest.approx(ll)


def test_exponential_data_is_not_forced_into_weibull():
    rng = np.random.default_rng(1)
    fit = tails.pot_fit(rng.exponential(0.5, size=4000), threshold_quantile=0.5)
    assert abs(fit.xi) < 0.08 and fit.delta_aic < 4  # no evidence against ξ = 0
    assert fit.sigma_exponential == pytest.approx(0.5, rel=0.08)


@pytest.mark.parametrize("dim", [5, 9])
def test_isotropic_sphere_matches_minus_two_over_d_minus_one(dim):
    z = torch.randn(900, dim, generator=torch.Generator().manual_seed(dim), dtype=torch.float64)
    rep = tails.tail_diagnostics(z, threshold_quantile=0.99)
    assert rep.xi_isotropic == tails.isotropic_xi(dim) == -2 / (dim - 1)
    assert rep.pot.xi == pytest.approx(rep.xi_isotropic, abs=0.1)
    assert rep.pot.endpoint <= 1.0 + 0.02
    assert rep.pot.n == 900 * 899 // 2  # all unordered pairs, each once
    assert rep.frac_weibull > 0.9  # every anchor's top is in the Weibull domain at this dimension


def test_negative_cosines_excludes_self_and_same_label():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 4, generator=g)
    z = torch.cat([base, base])  # items i and i + 6 are identical (cosine 1) and share a label
    labels = torch.arange(12) % 6
    per_anchor, pooled = tails.negative_cosines(z, labels)
    assert per_anchor.shape == (12, 12)
    assert np.isneginf(per_anchor[np.arange(12), np.arange(12)]).all()
    assert np.isneginf(per_anchor[np.arange(6), np.arange(6) + 6]).all()
    assert pooled.max() < 1 - 1e-6 and pooled.size == (12 * 12 - 24) // 2
    per_all, pooled_all = tails.negative_cosines(z)
    assert pooled_all.max() == pytest.approx(1.0) and pooled_all.size == 66
    sub, pooled_sub = tails.negative_cosines(z, max_anchors=5, seed=3)
    assert sub.shape == (5, 12) and pooled_sub.size == 5 * 11


def test_per_anchor_comparison_is_the_loss_statistics():
    z = torch.randn(200, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    rep = tails.tail_diagnostics(z, max_anchors=50, margin=0.0, threshold_quantile=0.95)
    per_anchor, _ = tails.negative_cosines(z, max_anchors=50)
    want = anchor_tail_stats(torch.from_numpy(per_anchor), margin=0.0)
    torch.testing.assert_close(rep.anchors.delta_aic, want.delta_aic)
    assert rep.frac_weibull == pytest.approx(float((want.delta_aic > 0).double().mean()))


def test_qq_points_and_figure(tmp_path):
    rng = np.random.default_rng(3)
    y = sps.genpareto.rvs(-0.4, scale=0.05, size=500, random_state=rng)
    fit = tails.pot_fit(y, threshold_quantile=0.0)
    q_gpd, q_exp, emp = tails.qq_points(fit, y[y > fit.threshold] - fit.threshold)
    assert q_gpd.shape == q_exp.shape == emp.shape == (499,)
    assert np.all(np.diff(emp) >= 0) and np.all(np.diff(q_gpd) > 0)
    assert np.corrcoef(q_gpd, emp)[0, 1] > 0.99
    z = torch.randn(300, 8, generator=torch.Generator().manual_seed(4))
    rep = tails.tail_diagnostics(z, threshold_quantile=0.98)
    out = tails.plot_tail_diagnostics({"a": rep, "b": rep}, tmp_path / "tails.png", title="iso")
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _bars(ax):
    """The histogram's rectangles (``ax.patches``), left to right."""
    return sorted(ax.patches, key=lambda p: p.get_x())


def test_the_delta_aic_panel_counts_every_anchor_and_marks_those_beyond_the_clip():
    # values away from the interior edges (multiples of 3), so the oracle's floor needs no tie rule
    v = np.array([-100.0, -60.0, -59.9, -0.5, 0.0, 2.9, 3.1, 59.9, 60.0, 61.0, 1e6])
    fig, ax = figures.subplots(figsize=(4, 3))
    counts = tails.delta_aic_histogram(ax, v, clip=60.0, bins=40)
    want = np.zeros(40, dtype=int)
    for x in v:  # naive oracle: clip, then the bin of width 3 it falls in (the last bin closed at +60)
        c = min(max(x, -60.0), 60.0)
        want[min(int((c + 60.0) // 3.0), 39)] += 1
    np.testing.assert_array_equal(counts, want)
    bars = _bars(ax)
    assert [round(b.get_height()) for b in bars] == want.tolist()
    assert all(b.get_width() == pytest.approx(3.0) for b in bars)
    assert bars[0].get_x() == pytest.approx(-60.0) and bars[-1].get_x() + 3.0 == pytest.approx(60.0)
    assert bars[0].get_hatch() == bars[-1].get_hatch() == "//"  # the two end bins hold clipped anchors
    assert all(b.get_hatch() is None for b in bars[1:-1])
    assert sorted(t.get_text() for t in ax.texts) == ["1 anchor < -60", "2 anchors > +60"]


def test_every_anchor_beyond_the_clip_is_one_full_height_bar_of_the_figure(tmp_path, monkeypatch):
    z = torch.randn(200, 8, generator=torch.Generator().manual_seed(5))
    rep = tails.tail_diagnostics(z, threshold_quantile=0.98)
    r = rep.anchors.delta_aic.numel()
    far = rep.anchors._replace(delta_aic=torch.full((r,), 250.0, dtype=rep.anchors.delta_aic.dtype))
    drawn = []
    monkeypatch.setattr(figures, "save_png", lambda fig, path, dpi=100: drawn.append(fig))
    tails.plot_tail_diagnostics(dataclasses.replace(rep, anchors=far, frac_weibull=1.0), tmp_path / "t.png")
    (fig,) = drawn
    ax = fig.axes[2]
    full = [b for b in _bars(ax) if b.get_height() > 0]
    assert len(full) == 1 and round(full[0].get_height()) == r  # every anchor, in one bar
    lo, hi = ax.get_xlim()
    assert full[0].get_width() == pytest.approx(2 * tails.DELTA_AIC_CLIP / 40) and (lo, hi) == (
        -tails.DELTA_AIC_CLIP,
        tails.DELTA_AIC_CLIP,
    )
    assert full[0].get_x() + full[0].get_width() == pytest.approx(hi)
    assert ax.get_ylim()[1] > full[0].get_height()  # the bar is inside the axes, not cut off
    assert [t.get_text() for t in ax.texts] == [f"{r} anchors > +60"]


def test_the_delta_aic_panel_refuses_nan_and_bad_bins():
    fig, ax = figures.subplots(figsize=(4, 3))
    with pytest.raises(ValueError, match="^delta_aic"):
        tails.delta_aic_histogram(ax, np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="^clip"):
        tails.delta_aic_histogram(ax, np.array([1.0]), clip=0.0)
    with pytest.raises(ValueError, match="^bins"):
        tails.delta_aic_histogram(ax, np.array([1.0]), bins=1)


def test_bad_inputs_name_the_argument():
    with pytest.raises(TypeError, match="^embeddings"):
        tails.negative_cosines([[1.0, 2.0]])
    with pytest.raises(ValueError, match="^embeddings"):
        tails.negative_cosines(torch.randn(1, 3))
    with pytest.raises(ValueError, match="^labels"):
        tails.negative_cosines(torch.randn(4, 3), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="^labels"):
        tails.negative_cosines(torch.randn(4, 3), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="^max_anchors"):
        tails.negative_cosines(torch.randn(4, 3), max_anchors=0)
    with pytest.raises(ValueError, match="^threshold_quantile"):
        tails.pot_fit(np.arange(100.0), threshold_quantile=1.0)
    with pytest.raises(ValueError, match="^values"):
        tails.pot_fit(np.arange(100.0), threshold_quantile=0.99)
    assert math.isnan(tails.isotropic_xi(1))


def test_an_endpoint_prints_as_a_number_only_when_xi_is_negative():
    rng = np.random.default_rng(0)
    bounded = tails.pot_fit(sps.genpareto.rvs(-0.3, scale=0.1, size=4000, random_state=rng), threshold_quantile=0.0)
    assert bounded.xi < 0
    assert bounded.endpoint_text() == f"{bounded.endpoint:.3f}" and bounded.endpoint_cell() == bounded.endpoint
    for xi in (0.0, 0.2):  # the Gumbel and Fréchet domains: no finite endpoint
        fit = dataclasses.replace(bounded, xi=xi, endpoint=math.inf)
        assert fit.endpoint_text() == fit.endpoint_cell() == tails.NO_ENDPOINT == "none (ξ̂ ≥ 0)"


def test_an_endpoint_far_beyond_the_exceedances_is_named_not_drawn(tmp_path, monkeypatch):
    # ξ̂ just below 0 puts u − σ/ξ far beyond any cosine (13.2 here): the panel keeps to the exceedances' range
    import dataclasses

    from matplotlib.figure import Figure

    saved = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (saved.append(self), save(self, *a, **k))[1])
    z = torch.randn(300, 8, generator=torch.Generator().manual_seed(4))
    rep = tails.tail_diagnostics(z, threshold_quantile=0.98)
    far = dataclasses.replace(rep, pot=dataclasses.replace(rep.pot, xi=-0.004, endpoint=13.2))
    near = dataclasses.replace(
        rep, pot=dataclasses.replace(rep.pot, xi=-0.3, endpoint=rep.pot.threshold + 0.5 * float(rep.exceedances.max()))
    )
    tails.plot_tail_diagnostics({"far": far, "near": near}, tmp_path / "tails.png")
    axes = saved[0].axes
    top = float(rep.exceedances.max())
    far_panel, near_panel = axes[1], axes[4]
    assert far_panel.get_xlim()[1] <= 1.05 * top + 1e-12
    drawn = [np.asarray(line.get_xdata()) for line in far_panel.get_lines()]
    assert not [x for x in drawn if x.size and np.allclose(x, 13.2 - rep.pot.threshold)]
    assert any("off the axis" in t.get_text() for t in far_panel.get_legend().get_texts())
    reach = near.pot.endpoint - near.pot.threshold
    assert [line for line in near_panel.get_lines() if np.allclose(line.get_xdata(), reach)]  # the endpoint, drawn
