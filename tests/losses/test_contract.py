"""The bad-input contract, property-based: invalid input raises a named error; valid input is finite."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contrastlab.losses import alignment, info_nce, nt_xent, supcon, uniformity

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# "Valid finite input": entries 0 or of magnitude in [1e-6, 1e6] (zero rows included), τ in [1e-3, 1e3].
magnitudes = st.one_of(st.just(0.0), st.floats(1e-6, 1e6), st.floats(-1e6, -1e-6))


@st.composite
def embeddings(draw, n=None, d=None):
    n = draw(st.integers(1, 6)) if n is None else n
    d = draw(st.integers(1, 5)) if d is None else d
    vals = draw(st.lists(magnitudes, min_size=n * d, max_size=n * d))
    return torch.tensor(vals, dtype=torch.float32).reshape(n, d)


@SETTINGS
@given(
    data=st.data(),
    mode=st.sampled_from(["inbatch", "shared", "per_anchor"]),
    variant=st.sampled_from(["infonce", "dcl"]),
    tau=st.floats(1e-3, 1e3),
    symmetric=st.booleans(),
)
def test_valid_inputs_give_finite_loss_and_grads(data, mode, variant, tau, symmetric):
    a = data.draw(embeddings())
    n, d = a.shape
    if mode == "inbatch" and variant == "dcl" and n < 2:
        n, a = 2, torch.cat([a, a])
    p = data.draw(embeddings(n, d))
    negs = None
    if mode == "shared":
        negs = data.draw(embeddings(data.draw(st.integers(1, 5)), d))
    elif mode == "per_anchor":
        negs = torch.stack([data.draw(embeddings(3, d)) for _ in range(n)])
    a.requires_grad_()
    loss = info_nce(a, p, negs, temperature=tau, variant=variant, symmetric=symmetric and negs is None)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(a.grad).all()


@SETTINGS
@given(data=st.data(), tau=st.floats(1e-3, 1e3))
def test_valid_inputs_nt_xent_supcon(data, tau):
    za = data.draw(embeddings()).requires_grad_()
    zb = data.draw(embeddings(*za.shape))
    loss = nt_xent(za, zb, temperature=tau)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(za.grad).all()
    z = data.draw(embeddings(n=data.draw(st.integers(2, 8))))
    labels = torch.tensor(data.draw(st.lists(st.integers(0, 2), min_size=z.shape[0], max_size=z.shape[0])))
    if bool((labels.unsqueeze(0) == labels.unsqueeze(1)).sum(1).gt(1).any()):
        assert torch.isfinite(supcon(z, labels, temperature=tau))
    assert torch.isfinite(uniformity(z)) and torch.isfinite(alignment(za.detach(), zb))


BAD = [
    # (description, callable, exception type, argument named in the message)
    ("anchor not a tensor", lambda: info_nce([[1.0]], torch.ones(1, 1)), TypeError, "anchor"),
    ("integer anchor", lambda: info_nce(torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3)), TypeError, "anchor"),
    ("anchor 1-D", lambda: info_nce(torch.ones(3), torch.ones(3)), ValueError, "anchor"),
    ("N = 0", lambda: info_nce(torch.ones(0, 3), torch.ones(0, 3)), ValueError, "anchor"),
    ("D = 0", lambda: info_nce(torch.ones(2, 0), torch.ones(2, 0)), ValueError, "anchor"),
    ("shape mismatch", lambda: info_nce(torch.ones(2, 3), torch.ones(3, 3)), ValueError, "positive"),
    (
        "NaN positive",
        lambda: info_nce(torch.ones(2, 3), torch.tensor([[1.0, math.nan, 0], [1, 1, 1]])),
        ValueError,
        "positive",
    ),
    ("Inf anchor", lambda: info_nce(torch.full((2, 3), math.inf), torch.ones(2, 3)), ValueError, "anchor"),
    ("K = 0", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 0, 3)), ValueError, "negatives"),
    ("M = 0", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), torch.ones(0, 3)), ValueError, "negatives"),
    ("negatives D", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), torch.ones(4, 2)), ValueError, "negatives"),
    ("negatives N", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), torch.ones(3, 4, 3)), ValueError, "negatives"),
    (
        "negatives 4-D",
        lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 1, 1, 3)),
        ValueError,
        "negatives",
    ),
    ("tau = 0", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), temperature=0.0), ValueError, "temperature"),
    ("tau < 0", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), temperature=-0.1), ValueError, "temperature"),
    ("tau nan", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), temperature=math.nan), ValueError, "temperature"),
    ("tau inf", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), temperature=math.inf), ValueError, "temperature"),
    ("tau str", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), temperature="0.1"), TypeError, "temperature"),
    (
        "tau tensor<0",
        lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), temperature=torch.tensor(-1.0)),
        ValueError,
        "temperature",
    ),
    (
        "tau underflow",
        lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), temperature=1e-300),
        ValueError,
        "temperature",
    ),
    ("variant", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), variant="nce"), ValueError, "variant"),
    ("reduction", lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), reduction="avg"), ValueError, "reduction"),
    (
        "symmetric shared",
        lambda: info_nce(torch.ones(2, 3), torch.ones(2, 3), torch.ones(4, 3), symmetric=True),
        ValueError,
        "symmetric",
    ),
    ("z_b shape", lambda: nt_xent(torch.ones(2, 3), torch.ones(2, 4)), ValueError, "z_b"),
    ("z_a empty", lambda: nt_xent(torch.ones(0, 3), torch.ones(0, 3)), ValueError, "z_a"),
    ("labels length", lambda: supcon(torch.ones(3, 2), torch.tensor([0, 1])), ValueError, "labels"),
    ("labels float", lambda: supcon(torch.ones(3, 2), torch.tensor([0.0, 1.0, 1.0])), TypeError, "labels"),
    ("labels 2-D", lambda: supcon(torch.ones(3, 2), torch.zeros(3, 1, dtype=torch.long)), ValueError, "labels"),
]


@pytest.mark.parametrize("desc,fn,exc,name", BAD, ids=[b[0] for b in BAD])
def test_invalid_input_names_the_argument(desc, fn, exc, name):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(name), str(info.value)


@SETTINGS
@given(
    bad=st.sampled_from([math.nan, math.inf, -math.inf]),
    row=st.integers(0, 3),
    col=st.integers(0, 2),
    which=st.sampled_from(["anchor", "positive", "negatives"]),
)
def test_any_nonfinite_entry_is_rejected(bad, row, col, which):
    t = {"anchor": torch.ones(4, 3), "positive": torch.ones(4, 3), "negatives": torch.ones(4, 5, 3)}
    if which == "negatives":
        t[which][row, 0, col] = bad
    else:
        t[which][row, col] = bad
    with pytest.raises(ValueError, match=f"^{which} contains NaN or Inf"):
        info_nce(t["anchor"], t["positive"], t["negatives"])


def test_devices_differ():
    if not torch.cuda.is_available():
        meta = torch.ones(2, 3, device="meta")
        with pytest.raises(ValueError, match="^positive is on meta"):
            from contrastlab._checks import check_same_device

            check_same_device(anchor=torch.ones(2, 3), positive=meta)
    else:
        with pytest.raises(ValueError, match="positive is on"):
            info_nce(torch.ones(2, 3), torch.ones(2, 3, device="cuda"))
