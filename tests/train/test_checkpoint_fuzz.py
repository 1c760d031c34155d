"""Checkpoint files under structured mutation: a valid checkpoint or a ``CheckpointError`` naming the file."""

from __future__ import annotations

from hypothesis import given

from tests._fuzzing import FUZZ_SETTINGS, assert_contract, mutated_inputs, seeds


def test_seeds_read() -> None:
    assert {assert_contract("checkpoint", s) for s in seeds("checkpoint")} == {"ok"}


@FUZZ_SETTINGS
@given(mutated_inputs("checkpoint"))
def test_checkpoint_contract(data: bytes) -> None:
    assert_contract("checkpoint", data)
