"""The shared argument descriptions: every loss's rendered docstring lists each of its arguments in full."""

import inspect
import re

import pytest
from torch import Tensor

from contrastlab.losses import LOSSES
from contrastlab.losses._docs import ARGS, shared_docs


def _entry(doc: str, name: str) -> str:
    """The text of argument ``name``'s entry under ``Args:`` (its first line and its continuation lines)."""
    match = re.search(rf"^(?P<indent> +){name}: (?P<text>.*(?:\n(?P=indent)    .*)*)", doc, re.MULTILINE)
    assert match, f"{name} is not documented"
    return match["text"]


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_argument_of_every_loss_is_documented_with_its_shape(name):
    fn = getattr(LOSSES[name], "func", LOSSES[name])  # a partial's function
    doc = inspect.getdoc(fn)
    assert not any("{" + key + "}" in doc for key in ARGS)
    for param in inspect.signature(fn, eval_str=True).parameters.values():
        text = _entry(doc, param.name)
        if param.annotation in (Tensor, Tensor | None):
            assert re.search(r"``\(.*\)``", text), f"{name}: {param.name} names no shape: {text!r}"


def test_shared_docs_indents_continuation_lines_and_leaves_other_braces():
    @shared_docs
    def f() -> None:
        """Doc.

        Args:
            negatives: {negatives}
            gather: more words e^{S_ij}. {gather_share}
        """

    assert ARGS["negatives"].count("\n") == 1 and ARGS["gather_share"].count("\n") == 2
    negatives, gather = ARGS["negatives"].split("\n"), ARGS["gather_share"].split("\n")
    assert f.__doc__ == (
        "Doc.\n\n        Args:\n"
        f"            negatives: {negatives[0]}\n                {negatives[1]}\n"
        f"            gather: more words e^{{S_ij}}. {gather[0]}\n                {gather[1]}\n"
        f"                {gather[2]}\n        "
    )
