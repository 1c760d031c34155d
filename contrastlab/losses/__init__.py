"""The InfoNCE family: InfoNCE/DCL, NT-Xent, SupCon, WEINCE, support-corrected, debiased, hard-negative, SigLIP, ``LOSSES``.

MarginMSE and listwise KL (:func:`margin_mse`, :func:`distill_kl`) distil a teacher's scores.
:func:`matryoshka` / :class:`MatryoshkaLoss` wrap any of them to train nested prefixes of the embedding.
"""

from contrastlab.losses.alignment_uniformity import alignment, uniformity
from contrastlab.losses.debiased import DebiasedInfoNCELoss, debiased_info_nce
from contrastlab.losses.distill_kl import DistillKLLoss, distill_kl
from contrastlab.losses.hard_negative import HardNegativeInfoNCELoss, hard_negative_info_nce
from contrastlab.losses.info_nce import InfoNCELoss, info_nce
from contrastlab.losses.margin_mse import MarginMSELoss, margin_mse
from contrastlab.losses.matryoshka import MatryoshkaLoss, matryoshka
from contrastlab.losses.nt_xent import NTXentLoss, nt_xent
from contrastlab.losses.registry import LOSSES
from contrastlab.losses.siglip import SigLIPLoss, siglip
from contrastlab.losses.supcon import SupConLoss, supcon
from contrastlab.losses.support_corrected import SupportCorrectedInfoNCELoss, support_corrected_info_nce
from contrastlab.losses.temperature import LearnableTemperature
from contrastlab.losses.weince import WEINCELoss, WEINCEOptions, weince

__all__ = [
    "LOSSES",
    "DebiasedInfoNCELoss",
    "DistillKLLoss",
    "MarginMSELoss",
    "HardNegativeInfoNCELoss",
    "InfoNCELoss",
    "LearnableTemperature",
    "MatryoshkaLoss",
    "NTXentLoss",
    "SigLIPLoss",
    "SupConLoss",
    "WEINCELoss",
    "WEINCEOptions",
    "SupportCorrectedInfoNCELoss",
    "alignment",
    "debiased_info_nce",
    "distill_kl",
    "margin_mse",
    "hard_negative_info_nce",
    "info_nce",
    "matryoshka",
    "nt_xent",
    "siglip",
    "supcon",
    "uniformity",
    "weince",
    "support_corrected_info_nce",
]
