"""contrastlab losses as sentence-transformers loss modules, for ``SentenceTransformerTrainer``.

A sentence-transformers loss is an ``nn.Module`` built with the model and called by the trainer as
``loss(sentence_features, labels)``: one tokenised batch per text column of the training
``datasets.Dataset`` (in column order; a ``label`` column becomes ``labels``). :class:`ContrastlabLoss`
embeds every column with the model and hands the embeddings to a configured contrastlab loss module:

================================  =====================================================================
contrastlab module                columns → loss
================================  =====================================================================
``InfoNCELoss`` (InfoNCE / DCL)   (anchor, positive[, negative_1 … negative_h]): anchor i against every
                                  positive of the batch and every hard negative of the batch — the
                                  candidate set of ``MultipleNegativesRankingLoss`` (MNRL). With
                                  τ = 1/scale and cosine similarity the two are the same loss.
``WEINCELoss``                    (anchor, positive): SimCLR's 2N views (Erol et al. 2026).
``SupConLoss``                    any columns; rows share the class ``labels[i]`` if the dataset has a
                                  ``label`` column, else each row is its own class (its texts are
                                  positives of one another; Khosla et al. 2020; with ``gather=True`` the
                                  row classes are numbered across ranks).
``SupportCorrectedInfoNCELoss``   (anchor, positive, negative_1 … negative_h): the hard negatives of row
                                  i are its own per-anchor negatives, ``(N, h, D)`` (Zaliaduonis et al.
                                  2026, eq. 8).
``NTXentLoss``                    (anchor, positive): SimCLR's NT-Xent.
================================  =====================================================================

Any of them may come wrapped in :class:`~contrastlab.losses.MatryoshkaLoss`: the columns are then truncated
to each width and the wrapped loss (with its column handling above) is summed over the widths, which with
``InfoNCELoss(temperature=1/scale)`` is sentence-transformers' ``MatryoshkaLoss`` around MNRL.

With hard negatives, InfoNCE's per-row loss over the union of in-batch positives P and hard negatives H
is assembled exactly from two calls of :func:`contrastlab.losses.info_nce` with ``reduction="none"``:

    ℓ_i = LSE_{c ∈ P ∪ H}(q_i·c) − q_i·p_i = logaddexp(LSE_P − q_i·p_i, LSE_H − q_i·p_i)

(the second term is the DCL form with shared negatives H). For DCL the positive is dropped from P
(``variant="dcl"`` in both calls). ``gather=True`` on the wrapped module is passed to those calls, so
under torch.distributed the candidates of every rank are used with contrastlab's exact gradients;
the batch mean is taken per rank, which is the convention of ``contrastlab.distributed`` when every
rank holds the same number of rows (as the trainer's distributed sampler gives it).

Examples:
    >>> from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer  # doctest: +SKIP
    >>> from contrastlab.losses import InfoNCELoss
    >>> loss = ContrastlabLoss(model, InfoNCELoss(temperature=0.05))  # doctest: +SKIP
    >>> SentenceTransformerTrainer(model=model, train_dataset=ds, loss=loss).train()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import Tensor, nn

from contrastlab import distributed as cd
from contrastlab.losses import (
    InfoNCELoss,
    MatryoshkaLoss,
    NTXentLoss,
    SupConLoss,
    SupportCorrectedInfoNCELoss,
    WEINCELoss,
    info_nce,
    matryoshka,
)

__all__ = ["ContrastlabLoss", "SUPPORTED_LOSSES", "embed_columns"]

SUPPORTED_LOSSES: tuple[type[nn.Module], ...] = (
    InfoNCELoss,
    WEINCELoss,
    SupConLoss,
    SupportCorrectedInfoNCELoss,
    NTXentLoss,
)
"""The contrastlab loss modules :class:`ContrastlabLoss` can wrap (each also inside a ``MatryoshkaLoss``)."""

_MATRYOSHKA = "Kusupati et al. 2022, Matryoshka Representation Learning, arXiv 2205.13147"

_CITATIONS = {
    InfoNCELoss: "van den Oord, Li & Vinyals 2018, Representation Learning with Contrastive Predictive Coding, "
    "arXiv 1807.03748; DCL: Yeh et al. 2022, Decoupled Contrastive Learning, arXiv 2110.06848",
    WEINCELoss: "Erol et al. 2026, When Softmax Fails at the Top, arXiv 2606.00262",
    SupConLoss: "Khosla et al. 2020, Supervised Contrastive Learning, arXiv 2004.11362",
    SupportCorrectedInfoNCELoss: "Zaliaduonis et al. 2026, The Loss Is Not Enough",
    NTXentLoss: "Chen et al. 2020, A Simple Framework for Contrastive Learning of Visual Representations, "
    "arXiv 2002.05709",
}


def embed_columns(model: nn.Module, sentence_features: Iterable[dict[str, Tensor]]) -> list[Tensor]:
    """One ``(N, D)`` ``sentence_embedding`` per tokenised column, as every sentence-transformers loss does.

    Uses sentence-transformers' own merged forward where the installed version has it (one pass for
    the candidate columns), else one ``model(features)`` call per column.
    """
    try:
        from sentence_transformers.base.losses.merged_forward import embed_columns as st_embed_columns
    except ImportError:
        return [model(f)["sentence_embedding"] for f in sentence_features]
    return list(st_embed_columns(model, sentence_features))


class ContrastlabLoss(nn.Module):
    """A configured contrastlab loss module as a sentence-transformers loss.

    Args:
        model: the ``SentenceTransformer`` being trained.
        loss: one of :data:`SUPPORTED_LOSSES`, configured (temperature, variant, ``gather`` …) and with
            ``reduction="mean"``, or a :class:`~contrastlab.losses.MatryoshkaLoss` around one. τ = 1/scale
            makes ``InfoNCELoss`` equal MNRL (and ``MatryoshkaLoss(InfoNCELoss(...), dims)`` equal
            sentence-transformers' ``MatryoshkaLoss`` around MNRL).

    Raises:
        TypeError: ``loss`` is not one of :data:`SUPPORTED_LOSSES` (or a ``MatryoshkaLoss`` of one).
        ValueError: ``loss.reduction`` is not ``"mean"``.
    """

    def __init__(self, model: nn.Module, loss: nn.Module) -> None:
        super().__init__()
        inner = loss.loss if isinstance(loss, MatryoshkaLoss) else loss
        if not isinstance(inner, SUPPORTED_LOSSES):
            known = ", ".join(t.__name__ for t in SUPPORTED_LOSSES)
            what = f"MatryoshkaLoss of {type(inner).__name__}" if inner is not loss else type(loss).__name__
            raise TypeError(f"loss must be one of {known} (or a MatryoshkaLoss of one), got {what}")
        if getattr(inner, "reduction", "mean") != "mean":
            raise ValueError(f"loss must have reduction='mean' for the trainer, got {inner.reduction!r}")
        self.model = model
        self.loss = loss

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None) -> Tensor:
        """Embed each column and compute the loss (the trainer's call)."""
        return self.compute_loss_from_embeddings(embed_columns(self.model, sentence_features), labels)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> Tensor:
        """The loss from the columns' embeddings, each ``(N, D)``, in dataset column order.

        Raises:
            ValueError: the number of columns does not suit the loss (see the module table).
        """
        if len(embeddings) < 1:
            raise ValueError("embeddings must hold at least one column")
        if isinstance(self.loss, MatryoshkaLoss):
            inner = cast(nn.Module, self.loss.loss)  # checked to be a supported module at construction

            def columns_loss(*columns: Tensor) -> Tensor:
                return self._columns_loss(inner, list(columns), labels)

            return matryoshka(columns_loss, *embeddings, dims=self.loss.dims, weights=self.loss.weights)
        return self._columns_loss(self.loss, embeddings, labels)

    def _columns_loss(self, loss: nn.Module, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """The supported loss ``loss`` on the columns, as the module table describes."""
        if isinstance(loss, SupConLoss):
            return self._supcon(loss, embeddings, labels)
        if len(embeddings) < 2:
            raise ValueError(f"embeddings: {type(loss).__name__} needs (anchor, positive) columns, got 1")
        anchor, positive, negatives = embeddings[0], embeddings[1], embeddings[2:]
        if isinstance(loss, InfoNCELoss):
            return self._info_nce(loss, anchor, positive, negatives)
        if isinstance(loss, SupportCorrectedInfoNCELoss):
            if not negatives:
                raise ValueError("embeddings: SupportCorrectedInfoNCELoss needs at least one negative column")
            return loss(anchor, positive, torch.stack(negatives, dim=1))  # (N, h, D) per-anchor negatives
        if negatives:
            raise ValueError(
                f"embeddings: {type(loss).__name__} takes (anchor, positive) columns, got {len(embeddings)} columns"
            )
        return loss(anchor, positive)

    @staticmethod
    def _info_nce(loss: InfoNCELoss, anchor: Tensor, positive: Tensor, negatives: list[Tensor]) -> Tensor:
        if not negatives:
            return loss(anchor, positive)
        if loss.symmetric:
            raise ValueError("embeddings: a symmetric InfoNCELoss takes (anchor, positive) columns, not hard negatives")
        options: dict[str, Any] = {
            "temperature": loss.temperature,
            "normalize": loss.normalize,
            "chunk_size": loss.chunk_size,
            "gather": loss.gather,
            "reduction": "none",
        }
        in_batch = info_nce(anchor, positive, variant=loss.variant, **options)  # LSE_P − pos, (N,)
        hard = info_nce(anchor, positive, torch.cat(negatives), variant="dcl", **options)  # LSE_H − pos, (N,)
        return torch.logaddexp(in_batch, hard).mean()

    @staticmethod
    def _supcon(loss: SupConLoss, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        n = embeddings[0].shape[0]
        if labels is None:  # each row its own class, numbered globally when the loss gathers across ranks
            offset = 0
            if loss.gather and cd.world_size() > 1:
                offset = sum(cd.all_sizes(n, embeddings[0].device)[: cd.rank()])
            row_class = torch.arange(offset, offset + n, device=embeddings[0].device)
        else:
            row_class = torch.as_tensor(labels, device=embeddings[0].device)
            if row_class.shape != (n,) or row_class.is_floating_point():
                raise ValueError(f"labels must be {n} integer classes, got shape {tuple(row_class.shape)}")
        if len(embeddings) == 1 and labels is None:
            raise ValueError("embeddings: SupConLoss on one column needs a 'label' column in the dataset")
        return loss(torch.cat(embeddings), row_class.repeat(len(embeddings)))

    def get_config_dict(self) -> dict[str, Any]:
        """What the model card records about the loss."""
        return {"contrastlab_loss": repr(self.loss)}

    @property
    def citation(self) -> str:
        """The paper behind the wrapped loss (and Matryoshka's, when it is wrapped in ``MatryoshkaLoss``)."""
        if isinstance(self.loss, MatryoshkaLoss):
            return f"{_CITATIONS[type(self.loss.loss)]}; {_MATRYOSHKA}"
        return _CITATIONS[type(self.loss)]
