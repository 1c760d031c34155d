"""The InfoNCE family: InfoNCE/DCL, NT-Xent, SupCon, alignment/uniformity, learnable temperature."""

from contrastlab.losses.alignment_uniformity import alignment, uniformity
from contrastlab.losses.info_nce import InfoNCELoss, info_nce
from contrastlab.losses.nt_xent import NTXentLoss, nt_xent
from contrastlab.losses.supcon import SupConLoss, supcon
from contrastlab.losses.temperature import LearnableTemperature
from contrastlab.losses.weince import WEINCELoss, weince

__all__ = [
    "InfoNCELoss",
    "LearnableTemperature",
    "NTXentLoss",
    "SupConLoss",
    "WEINCELoss",
    "alignment",
    "info_nce",
    "nt_xent",
    "supcon",
    "uniformity",
    "weince",
]

from contrastlab.losses.support_corrected import SupportCorrectedInfoNCELoss, support_corrected_info_nce  # noqa: E402

__all__ += ["SupportCorrectedInfoNCELoss", "support_corrected_info_nce"]

from contrastlab.losses.siglip import SigLIPLoss, siglip  # noqa: E402

__all__ += ["SigLIPLoss", "siglip"]
