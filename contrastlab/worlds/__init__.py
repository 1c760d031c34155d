"""Synthetic worlds whose positive generator M and density ratio dM/dπ are known exactly."""

from contrastlab.worlds.mixing import MIXINGS, make_mixing
from contrastlab.worlds.sphere import sample_uniform_sphere, sample_vmf

__all__ = ["sample_uniform_sphere", "sample_vmf", "MIXINGS", "make_mixing"]
