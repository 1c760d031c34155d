"""The two tests every fuzzed file family starts with: its seeds read, and its mutated inputs keep the contract."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given

from tests._fuzzing import FUZZ_SETTINGS, assert_contract, mutated_inputs, seeds


def contract_tests(family: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """The seed test and the mutation test of one family of ``fuzz/targets.py``, for a test module to name.

    A module binds them to test names, ``test_seeds_read, test_index_contract = contract_tests("index")``,
    and pytest collects them under those names.

    Args:
        family: a key of ``fuzz.targets.FAMILIES``.

    Returns:
        A test that every seed input reads (``"ok"``), and a hypothesis test (:data:`FUZZ_SETTINGS`) that
        every structured mutation of a seed either reads or gives the family's documented error.
    """

    def seeds_read() -> None:
        assert {assert_contract(family, s) for s in seeds(family)} == {"ok"}

    @FUZZ_SETTINGS
    @given(mutated_inputs(family))
    def contract(data: bytes) -> None:
        assert_contract(family, data)

    return seeds_read, contract
