import contrastlab.eval.geometry as geometry
from contrastlab.eval import norms, tails
from contrastlab.losses import alignment_uniformity


def test_geometry_reexports_the_same_objects():
    for name in geometry.__all__:
        obj = getattr(geometry, name)
        owner = next(m for m in (norms, tails, alignment_uniformity) if hasattr(m, name))
        assert obj is getattr(owner, name), name
