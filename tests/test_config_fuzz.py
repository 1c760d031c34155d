"""Config files (YAML, TOML, JSON) under structured mutation, and one test per finding of the fuzzing campaign."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from contrastlab.config import ConfigError, read_config
from contrastlab.train.job.config import JobConfig
from tests._fuzz_contract import contract_tests

test_seeds_read, test_config_contract = contract_tests("config")


def test_yaml_alias_bomb_gives_a_short_error_quickly(tmp_path: Path) -> None:
    # 30 levels of `&aN [*aM, *aM]`: 2**30 leaves, whose repr in the error message once took minutes
    inner = "&a0 [1, 1], " + ", ".join(f"&a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 31))
    path = tmp_path / "bomb.yaml"
    path.write_text("loss: {temperature: [" + inner + "]}\n")
    start = time.process_time()
    with pytest.raises(ConfigError, match="loss.temperature must be a float, got list") as e:
        read_config(JobConfig, path)
    assert time.process_time() - start < 5.0  # bounded repr: a few hundred nodes, not 2**30
    assert len(str(e.value)) < 1000 and str(path) in str(e.value)


def test_non_utf8_config_names_the_file(tmp_path: Path) -> None:
    # found by atheris: a byte 0x9e raised UnicodeDecodeError from read_text
    path = tmp_path / "c.toml"
    path.write_bytes(b"[loss]\ntemperature = 0.1 # \x9e\n")
    with pytest.raises(ConfigError, match=r"c.toml is not UTF-8 text"):
        read_config(JobConfig, path)


@pytest.mark.parametrize("suffix", [".yaml", ".toml", ".json"])
def test_int_too_large_for_a_float_field(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"c{suffix}"
    big = "1" * 400
    text = {".yaml": f"loss: {{temperature: {big}}}\n", ".toml": f"[loss]\ntemperature = {big}\n"}.get(
        suffix, f'{{"loss": {{"temperature": {big}}}}}'
    )
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        read_config(JobConfig, path)
    assert str(path) in str(e.value)


def test_deeply_nested_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="does not parse"):
        read_config(JobConfig, path)


def test_read_config_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("loss: {temperature: abc}\n")
    with pytest.raises(ConfigError, match=r"^config file .*c.yaml: loss.temperature must be a float, got str 'abc'$"):
        read_config(JobConfig, path)
