"""Job configs: every argument of every registered loss is reachable from a config; bad values are named."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from contrastlab import cli
from contrastlab.train import ConfigError, from_dict
from contrastlab.train.job.config import PER_BATCH_TENSORS, JobConfig, LossConfig, loss_registry
from contrastlab.train.job.loss_parameters import LossParameters
from contrastlab.train.job.runner import call_loss
from tests.train.job._loss_batch import sphere_batch_for

FIELDS = {"temperature": "temperature", "bias": "bias", "symmetric": "symmetric", "normalize": "normalize"}
"""Loss arguments that a named LossConfig field sets."""
BY_THE_JOB = {"gather", "negatives", "labels", "reduction", "return_stats"}
"""Loss arguments the job sets from the batch and the run (under torchrun, gather; the mean, no stats)."""


def _other_value(name: str, default: Any) -> Any:
    """A value of the default's type that differs from it (the spy below never runs the loss)."""
    if dataclasses.is_dataclass(default):
        first = dataclasses.fields(default)[0]
        return {first.name: _other_value(first.name, getattr(default, first.name))}
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default * 0.5 + 0.25
    if isinstance(default, str):
        return default + "_other"
    return 3  # an optional argument defaulting to None: an int (chunk_size, fixed_lambda, …)


@pytest.mark.parametrize("name", sorted(loss_registry()))
def test_every_loss_argument_is_reachable_from_the_config(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each keyword argument of the entry is a named field, an option, set by the job, or a per-batch tensor.

    A spy with the loss's signature records the call: every option set to a non-default value arrives.
    """
    fn = loss_registry()[name]
    params = inspect.signature(fn).parameters
    keywords = {n: p for n, p in params.items() if p.default is not inspect.Parameter.empty}
    options = {n: _other_value(n, p.default) for n, p in keywords.items()}
    options = {n: v for n, v in options.items() if n not in {*FIELDS, *BY_THE_JOB, *PER_BATCH_TENSORS}}
    unreachable = set(keywords) - set(options) - set(FIELDS) - BY_THE_JOB - set(PER_BATCH_TENSORS)
    assert not unreachable

    calls: list[dict[str, Any]] = []

    @functools.wraps(fn)
    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(kwargs)
        return torch.zeros(())

    monkeypatch.setitem(loss_registry(), name, spy)  # type: ignore[index]
    fields: dict[str, Any] = {"temperature": 0.3}
    if "bias" in params:
        fields["bias"] = -4.0
    if "normalize" in params:
        fields["normalize"] = False
    config = LossConfig(name=name, options=options, **fields)
    z = torch.randn(4, 3)
    call_loss(config, z, z, labels=torch.arange(4), negatives=torch.randn(4, 2, 3), teacher_scores=torch.randn(4, 3))
    (got,) = calls
    for key, value in options.items():
        default = params[key].default
        want = type(default)(**{**dataclasses.asdict(default), **value}) if dataclasses.is_dataclass(default) else value
        assert got[key] == want, key
    assert got["temperature"] == 0.3 and got.get("bias", -4.0) == -4.0 and got.get("normalize", False) is False


@pytest.mark.parametrize("name", sorted(loss_registry()))
def test_every_loss_learns_its_temperature_through_the_job(name: str) -> None:
    """One step of each registered loss with loss.learnable_temperature: τ gets a finite, non-zero gradient."""
    from contrastlab.train.job.config import needs_negatives
    from contrastlab.train.job.runner import build_encoder, make_objective

    fn = loss_registry()[name]
    config = from_dict(
        JobConfig,
        {
            "data": {"latent_dim": 3, "batch_size": 16},
            "encoder": {"hidden": [8], "out_dim": 3},
            "eval": {"n": 32},
            "loss": {"name": name, "temperature": 0.5, "learnable_temperature": True},
            "negatives": {"kind": "per_anchor", "num": 8} if needs_negatives(fn) else {},
        },
    )
    source, batch = sphere_batch_for(fn, config)
    torch.manual_seed(0)
    model = build_encoder(config, source)
    objective, extra = make_objective(config, model)
    objective(model, batch).backward()
    assert extra == {}
    grad = model.loss_parameters.learned_temperature.log_scale.grad
    assert grad is not None and torch.isfinite(grad) and float(grad) != 0.0


def test_learnable_parameters_equal_the_loss_modules() -> None:
    """call_loss with LossParameters gives SigLIPLoss's value and gradients (same initial τ and b)."""
    from contrastlab.losses import SigLIPLoss

    g = torch.Generator().manual_seed(0)
    a, p = torch.randn(8, 5, generator=g, dtype=torch.float64), torch.randn(8, 5, generator=g, dtype=torch.float64)
    config = LossConfig(name="siglip", temperature=0.2, bias=-3.0, learnable_temperature=True, learnable_bias=True)
    ours = LossParameters(config).double()
    theirs = SigLIPLoss(temperature=0.2, bias=-3.0).double()
    got, want = call_loss(config, a, p, parameters=ours), theirs(a, p)
    got.backward()
    want.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    assert ours.learned_temperature is not None and ours.learned_bias is not None
    # the same float64 operations on the same values: equal up to rounding
    torch.testing.assert_close(ours.learned_temperature.log_scale.grad, theirs.temperature.log_scale.grad)
    torch.testing.assert_close(ours.learned_bias.grad, theirs.bias.grad)
    assert ours.values() == pytest.approx({"temperature": 0.2, "bias": -3.0})


@pytest.mark.parametrize(
    ("loss", "message"),
    [
        ({"temperature": float("inf"), "learnable_temperature": True}, "loss.temperature must be finite, got inf"),
        ({"name": "siglip", "bias": float("nan"), "learnable_bias": True}, "loss.bias must be finite, got nan"),
        ({"name": "siglip", "bias": float("-inf")}, "loss.bias must be finite, got -inf"),
        (
            {"temperature": 0.001, "learnable_temperature": True},
            "loss.max_inverse_temperature must be >= 1/temperature",
        ),
        ({"max_inverse_temperature": 0.0}, "loss.max_inverse_temperature must be > 0"),
        ({"learnable_bias": True}, "loss.bias applies to losses with a logit bias (siglip); loss 'info_nce' has none"),
        ({"options": {"positive_mask": 1}}, "loss.options.positive_mask is a tensor computed per batch"),
        ({"name": "siglip", "options": {"bias": -3.0}}, "loss.options.bias is not an option of loss 'siglip': set"),
        ({"name": "weince", "options": {"global_beta": 3}}, "loss.options.global_beta must be a table of Global"),
        ({"name": "weince", "options": {"global_beta": {"tail": 1}}}, "loss.options.global_beta.tail is not a field"),
    ],
)
def test_bad_loss_fields_are_named(loss: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_dict(JobConfig, {"loss": loss})
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize(
    ("negatives", "loss", "message"),
    [
        ({"kind": "queue", "size": 0}, {}, "negatives.size must be >= 1 for kind='queue'"),
        ({"kind": "queue", "momentum": 1.0}, {}, "negatives.momentum must be in [0, 1) or null"),
        ({"kind": "queue"}, {"name": "nt_xent"}, "negatives.kind='queue' trains InfoNCE over the batch and the queue"),
        ({"kind": "queue"}, {"symmetric": True}, "negatives.kind='queue' trains InfoNCE"),
    ],
)
def test_bad_queue_fields_are_named(negatives: dict[str, Any], loss: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_dict(JobConfig, {"negatives": negatives, "loss": loss})
    assert str(info.value).startswith(message), str(info.value)


def _pairs(root: Path, n: int = 40) -> None:
    import numpy as np

    g = np.random.default_rng(0)
    root.mkdir(parents=True)
    x = g.standard_normal((n, 4)).astype(np.float32)
    np.save(root / "anchors.npy", x)
    np.save(root / "positives.npy", x + 0.1)


@pytest.mark.parametrize(
    ("yaml", "needle"),
    [
        ("negatives: {kind: queue, size: 64}", "negatives.size (64) is larger than the data: data.name 'pairs' has 24"),
        ("loss: {temperature: .inf, learnable_temperature: true}", "loss.temperature must be finite, got inf"),
        ("loss: {name: siglip, bias: .nan, learnable_bias: true}", "loss.bias must be finite, got nan"),
        ("negatives: {kind: queue, size: 16, momentum: -0.5}", "negatives.momentum must be in [0, 1) or null"),
    ],
)
def test_the_cli_refuses_in_one_line_and_writes_nothing(tmp_path: Path, capsys, yaml: str, needle: str) -> None:
    _pairs(tmp_path / "data")
    job = tmp_path / "job.yaml"
    job.write_text(
        f"data: {{name: pairs, root: {tmp_path / 'data'}, batch_size: 8}}\nencoder: {{hidden: [8], out_dim: 3}}\n"
        f"eval: {{n: 16}}\ntrain: {{steps: 2, progress: false}}\n{yaml}\n"
    )
    assert cli.main(["train", str(job), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_a_run_with_learned_siglip_parameters_is_re_evaluated_from_its_checkpoint(tmp_path: Path, capsys) -> None:
    """`contrastlab eval` rebuilds the learnable τ and b from the config and loads them with the encoder."""
    import json

    job = tmp_path / "job.yaml"
    job.write_text(
        "data: {latent_dim: 3, batch_size: 16}\nencoder: {hidden: [8], out_dim: 3}\neval: {n: 32}\n"
        "train: {steps: 6, log_every: 3, progress: false}\n"
        "loss: {name: siglip, temperature: 0.2, bias: -3.0, learnable_temperature: true, learnable_bias: true}\n"
    )
    out = tmp_path / "run"
    assert cli.main(["train", str(job), "--out", str(out)]) == 0
    metrics = json.loads((out / "results.json").read_text())["metrics"]
    assert metrics["learned_temperature"] != 0.2 and metrics["learned_bias"] != -3.0  # both trained
    assert cli.main(["eval", str(out)]) == 0
    again = json.loads((out / "eval.json").read_text())["metrics"]
    assert again["loss"] == pytest.approx(metrics["eval_loss"], rel=1e-6)


def test_cross_batch_memory_from_the_config_pushes_the_trained_encoders_keys(tmp_path: Path) -> None:
    """momentum: null — no key encoder; after 3 steps of 16 pairs the queue holds the last 40 keys."""
    from contrastlab.train.job.runner import run_job
    from contrastlab.train.loop.checkpoint import latest_checkpoint

    config = from_dict(
        JobConfig,
        {
            "data": {"latent_dim": 3, "batch_size": 16}, "encoder": {"hidden": [8], "out_dim": 3, "proj_dim": 5},
            "eval": {"n": 32}, "train": {"steps": 3, "progress": False},
            "negatives": {"kind": "queue", "size": 40, "momentum": None},
        },
    )  # fmt: skip
    run_job(config, tmp_path)
    state = latest_checkpoint(tmp_path)
    assert set(state["extra"]) == {"queue"}
    queue = state["extra"]["queue"]
    assert queue["buffer"].shape == (40, 5)  # the projection's dimension: the loss's embeddings
    assert (queue["ptr"], queue["count"]) == (48 % 40, 40)
