"""The peer libraries the tests compare against, loaded so that a missing torchvision does not matter.

open_clip and lightly import torchvision in their package ``__init__``; the torchvision wheel for
torch 2.13 on PyPI does not import beside the CPU build used here (``torchvision::nms does not exist``),
and an installed-but-broken torchvision also breaks ``transformers`` (so sentence-transformers). The
Makefile therefore removes torchvision, and the losses that only need torch are loaded from their
own files without running their package's ``__init__``: open_clip's ``loss.py`` and lightly's
``loss/dcl_loss.py`` (which needs only ``lightly.utils.dist``, a torch-only module).

Each loader skips the calling test when the peer is not installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

__all__ = [
    "distill_kl_div_loss",
    "gist_embed_loss",
    "margin_mse_loss",
    "lightly_dcl_loss",
    "matryoshka_mnrl_loss",
    "multiple_negatives_ranking_loss",
    "open_clip_loss",
    "sentence_transformers_losses",
]


def _module_file(package: str, relative: str, name: str) -> ModuleType:
    """Import ``relative`` (a file inside the installed ``package``) as module ``name``, once."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(package)  # locates the package without executing its __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed (pip install -e '.[test]')")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    file_spec = importlib.util.spec_from_file_location(name, path)
    if file_spec is None or file_spec.loader is None:
        pytest.skip(f"{path} not found in the installed {package}")
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[name] = module
    file_spec.loader.exec_module(module)
    return module


def open_clip_loss() -> ModuleType:
    """open_clip's ``loss.py`` (``SigLipLoss``, ``ClipLoss``), which imports only torch."""
    return _module_file("open_clip", "loss.py", "_peer_open_clip_loss")


def lightly_dcl_loss() -> ModuleType:
    """lightly's ``loss/dcl_loss.py`` (``DCLLoss``, ``DCLWLoss``)."""
    return _module_file("lightly", "loss/dcl_loss.py", "_peer_lightly_dcl_loss")


def sentence_transformers_losses() -> ModuleType:
    """``sentence_transformers.sentence_transformer.losses`` (``MultipleNegativesRankingLoss``, ``GISTEmbedLoss``)."""
    return pytest.importorskip("sentence_transformers.sentence_transformer.losses")


class _ColumnEncoder:
    """What sentence-transformers' losses need of a model: ``model(features)["sentence_embedding"]``.

    The features dict of each column carries the precomputed embedding under ``key``; ``tokenizer`` is a
    one-word ``PreTrainedTokenizerFast`` built in memory (GISTEmbedLoss checks that the model and the guide
    share a vocabulary; nothing is downloaded).
    """

    max_seq_length = 512

    def __init__(self, key: str) -> None:
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel
        from transformers import PreTrainedTokenizerFast

        self.key = key
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")))

    def __call__(self, features: dict) -> dict:
        return {"sentence_embedding": features[self.key]}


def gist_embed_loss(anchor, positive, guide_anchor, guide_positive, **kwargs):
    """sentence-transformers' ``GISTEmbedLoss`` on given embeddings (``kwargs``: temperature, margin, ...).

    Shape: four ``(N, D)`` tensors; the guide's similarities decide which in-batch negatives are masked as
    false negatives.
    """
    st = sentence_transformers_losses()
    loss = st.GISTEmbedLoss(model=_ColumnEncoder("x"), guide=_ColumnEncoder("g"), **kwargs)
    features = [{"x": anchor, "g": guide_anchor}, {"x": positive, "g": guide_positive}]
    return loss(features, labels=None)


def multiple_negatives_ranking_loss(anchor, positive, *negatives, scale=20.0, **kwargs):
    """sentence-transformers' ``MultipleNegativesRankingLoss`` on given embeddings (cosine · ``scale``)."""
    st = sentence_transformers_losses()
    loss = st.MultipleNegativesRankingLoss(model=None, scale=scale, **kwargs)
    return loss.compute_loss_from_embeddings([anchor, positive, *negatives], labels=None)


def matryoshka_mnrl_loss(columns, dims, weights=None, scale=20.0):
    """sentence-transformers' ``MatryoshkaLoss`` around ``MultipleNegativesRankingLoss`` on given embeddings.

    Shape: ``columns`` is ``[anchor, positive, *hard negatives]``, each ``(N, D)``. MatryoshkaLoss replaces
    the model's ``forward`` while it runs and asks for its width, so the model here is an ``nn.Module``
    whose forward returns each column's embedding in a fresh dict (MatryoshkaLoss writes the truncated
    embedding into it).
    """
    import torch

    st = sentence_transformers_losses()

    class ColumnModel(torch.nn.Module):
        def forward(self, features: dict) -> dict:
            return {"sentence_embedding": features["x"]}

        def get_embedding_dimension(self) -> int:
            return int(columns[0].shape[-1])

    model = ColumnModel()
    loss = st.MatryoshkaLoss(model, st.MultipleNegativesRankingLoss(model, scale=scale), list(dims), weights)
    return loss([{"x": c} for c in columns], None)


def margin_mse_loss(anchor, positive, negatives, labels):
    """sentence-transformers' ``MarginMSELoss`` (dot product) on given embeddings.

    Shape: ``negatives`` is ``(N, K, D)``; ``labels`` the teacher's scores ``(N, 1 + K)``, positive first.
    """
    st = sentence_transformers_losses()
    loss = st.MarginMSELoss(model=None)
    return loss.compute_loss_from_embeddings([anchor, positive, *negatives.unbind(1)], labels)


def distill_kl_div_loss(anchor, positive, negatives, labels, **kwargs):
    """sentence-transformers' ``DistillKLDivLoss`` (dot product) on given embeddings (``kwargs``: temperatures).

    Shape: ``negatives`` is ``(N, K, D)``; ``labels`` the teacher's scores ``(N, 1 + K)``, positive first.
    """
    st = sentence_transformers_losses()
    loss = st.DistillKLDivLoss(model=None, **kwargs)
    return loss.compute_loss_from_embeddings([anchor, positive, *negatives.unbind(1)], labels)
