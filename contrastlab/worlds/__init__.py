"""Synthetic worlds whose positive generator M and density ratio dM/dπ are known exactly."""

from contrastlab.worlds.concepts import ConceptBatch, ConceptWorld
from contrastlab.worlds.mixing import MIXINGS, make_mixing
from contrastlab.worlds.sphere import sample_uniform_sphere, sample_vmf
from contrastlab.worlds.vmf_world import SphereWorld, Tuples

__all__ = [
    "ConceptBatch",
    "ConceptWorld",
    "MIXINGS",
    "SphereWorld",
    "Tuples",
    "make_mixing",
    "sample_uniform_sphere",
    "sample_vmf",
]
