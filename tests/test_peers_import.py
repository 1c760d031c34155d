"""The peers of the test extra import beside torch 2.13 (CPU) without torchvision and without replacing torch."""

import sys

import torch

from tests import peers


def test_peer_losses_load_without_torchvision():
    assert peers.open_clip_loss().SigLipLoss is not None
    assert peers.lightly_dcl_loss().DCLWLoss is not None
    st = peers.sentence_transformers_losses()
    assert st.MultipleNegativesRankingLoss is not None and st.GISTEmbedLoss is not None
    assert torch.__version__.startswith("2.13.0")
    assert "torchvision" not in sys.modules
