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

__all__ = ["lightly_dcl_loss", "open_clip_loss", "sentence_transformers_losses"]


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
