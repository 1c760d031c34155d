from dataclasses import dataclass, field
from pathlib import Path

import pytest

from contrastlab.config import field_docs, load_config_file, parse_overrides
from contrastlab.train import (
    ConfigError,
    OptimConfig,
    TrainConfig,
    apply_overrides,
    dump_config,
    from_dict,
    to_dict,
)


@dataclass(frozen=True)
class Inner:
    widths: tuple[int, ...] = (8, 8)
    """hidden widths"""
    scale: float | None = None
    """optional scale"""


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    """a name"""
    inner: Inner = field(default_factory=Inner)
    """nested"""


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_round_trip_through_files(tmp_path: Path, suffix: str) -> None:
    cfg = TrainConfig(steps=7, precision="bf16", optim=OptimConfig(lr=0.5, grad_clip=1.5, schedule="cosine"))
    dump_config(cfg, tmp_path / f"c{suffix}")
    assert from_dict(TrainConfig, load_config_file(tmp_path / f"c{suffix}")) == cfg
    nested = Outer(inner=Inner(widths=(3, 4, 5), scale=None))
    dump_config(nested, tmp_path / f"n{suffix}")
    assert from_dict(Outer, load_config_file(tmp_path / f"n{suffix}")) == nested


def test_unknown_keys_are_errors_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^optim\.lrr is not a field of OptimConfig"):
        from_dict(TrainConfig, {"optim": {"lrr": 0.1}})
    with pytest.raises(ConfigError, match=r"^stepz"):
        from_dict(TrainConfig, {"stepz": 3})


def test_ill_typed_and_out_of_range_values_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^optim\.lr must be a float, got str"):
        from_dict(TrainConfig, {"optim": {"lr": "fast"}})
    with pytest.raises(ConfigError, match=r"^steps must be an int"):
        from_dict(TrainConfig, {"steps": 2.5})
    with pytest.raises(ConfigError, match=r"^progress must be a bool"):
        from_dict(TrainConfig, {"progress": "yes"})
    with pytest.raises(ConfigError, match=r"^optim\.lr must be > 0"):
        from_dict(TrainConfig, {"optim": {"lr": -1}})
    with pytest.raises(ConfigError, match=r"^precision must be one of"):
        TrainConfig(precision="fp8")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^inner\.widths\[1\] must be an int"):
        from_dict(Outer, {"inner": {"widths": [1, "a"]}})


def test_ints_become_floats_and_lists_tuples() -> None:
    cfg = from_dict(TrainConfig, {"optim": {"lr": 1}})
    assert isinstance(cfg.optim.lr, float)
    assert from_dict(Outer, {"inner": {"widths": [1, 2]}}).inner.widths == (1, 2)
    assert to_dict(Outer())["inner"]["widths"] == [8, 8]


def test_command_line_overrides() -> None:
    over = parse_overrides(["--optim.lr", "0.2", "--steps=9", "--optim.grad-clip", "none", "--progress", "false"])
    cfg = apply_overrides(TrainConfig(), over)
    assert (cfg.optim.lr, cfg.steps, cfg.optim.grad_clip, cfg.progress) == (0.2, 9, None, False)
    assert apply_overrides(Outer(), {"inner.widths": "4,5", "inner.scale": "1e-3"}).inner == Inner((4, 5), 1e-3)
    with pytest.raises(ConfigError, match=r"^optim\.nope is not a field"):
        apply_overrides(TrainConfig(), {"optim.nope": "1"})
    with pytest.raises(ConfigError, match=r"^steps must be an int"):
        apply_overrides(TrainConfig(), {"steps": "many"})
    with pytest.raises(ConfigError, match="needs a value"):
        parse_overrides(["--steps"])
    with pytest.raises(ConfigError, match="expected an override"):
        parse_overrides(["steps", "3"])


def test_config_files_that_do_not_parse(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("steps = = 3")
    with pytest.raises(ConfigError, match="bad.toml does not parse"):
        load_config_file(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "missing.yaml")
    (tmp_path / "c.ini").write_text("")
    with pytest.raises(ConfigError, match=".yaml"):
        load_config_file(tmp_path / "c.ini")


def test_field_docs_reads_docstrings() -> None:
    docs = field_docs(OptimConfig)
    assert docs["lr"].startswith("peak learning rate") and set(docs) == {f for f in to_dict(OptimConfig())}


def test_field_docs_reads_inherited_docstrings_and_lets_a_subclass_redefine_one() -> None:
    from contrastlab.experiments import progressive_violation
    from contrastlab.experiments._latent_cl import LatentTraining

    docs = field_docs(progressive_violation.Config)
    assert set(docs) == set(to_dict(progressive_violation.Config()))  # every field, inherited ones included
    assert docs["lr"] == field_docs(LatentTraining)["lr"] == "Adam learning rate"
    assert docs["hidden"] == "MLP encoder widths (the paper's 10-D encoder)" != field_docs(LatentTraining)["hidden"]


@dataclass(frozen=True)
class Lists:
    names: tuple[str, ...] = ("linear", "monomial")
    """a list of strings"""
    widths: tuple[int, ...] = (64, 64)
    """a list of ints"""
    crop: tuple[float, float] = (0.08, 1.0)
    """a pair of floats"""
    maybe: tuple[int, ...] | None = None
    """an optional list"""


@pytest.mark.parametrize(
    ("field_name", "forms", "want"),
    [
        ("names", ["linear,monomial", "[linear, monomial]", "['linear', 'monomial']", "(linear,monomial)",
                   "[ 'linear' , \"monomial\" ]", "linear, monomial,"], ("linear", "monomial")),
        ("names", ["mlp", "[mlp]", "['mlp']"], ("mlp",)),
        ("names", ["", "[]"], ()),
        ("widths", ["4,5", "[4, 5]", "(4, 5)", "[4,5]"], (4, 5)),
        ("widths", ["7", "[7]"], (7,)),
        ("crop", ["0.2,1", "[0.2, 1.0]", "(0.2, 1)"], (0.2, 1.0)),
        ("maybe", ["3,2", "[3, 2]"], (3, 2)),
    ],
)  # fmt: skip
def test_a_list_override_reads_the_comma_and_the_bracketed_form(field_name: str, forms: list[str], want) -> None:
    for text in forms:
        assert getattr(apply_overrides(Lists(), {field_name: text}), field_name) == want, text


def test_a_list_override_with_an_empty_item_or_a_bad_element_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^widths has an empty item in '4,,5'; a list is comma-separated"):
        apply_overrides(Lists(), {"widths": "4,,5"})
    with pytest.raises(ConfigError, match=r"^widths\[1\] must be an int, got 'x'"):
        apply_overrides(Lists(), {"widths": "[4, x]"})


def _configs() -> list[type]:
    from contrastlab.audit import AuditConfig
    from contrastlab.experiments import get_experiment, list_experiments
    from contrastlab.mine import MineConfig
    from contrastlab.train.job.config import JobConfig

    return [JobConfig, AuditConfig, MineConfig, *(get_experiment(n).Config for n in list_experiments())]


def test_help_shows_every_list_default_in_a_form_the_command_line_reads_back() -> None:
    """``--help``'s ``[default: …]`` of each list field, typed as an override, gives the default (every config)."""
    from contrastlab.config import describe_fields

    lists = 0
    for cls in _configs():
        base = cls()
        plain = to_dict(base)
        for flag, shown, _ in describe_fields(cls):
            dotted = flag[2:]
            default = plain
            for part in dotted.split("."):
                default = default[part]
            if not isinstance(default, list):
                continue
            lists += 1
            assert not shown.startswith("['"), (cls.__name__, dotted, shown)  # not Python's repr of strings
            assert to_dict(apply_overrides(base, {dotted: shown})) == plain, (cls.__name__, dotted, shown)
    assert lists >= 10  # generators, hidden, ks, papers, …: the loop checked real list fields
