"""The training job's dataset registry: :data:`DATA_BUILDERS`, dataset name → ``build(config) -> DataSource``.

Entries:

* ``sphere`` — the synthetic world of Zimmermann et al. (2021, arXiv 2102.08850):
  latents z ~ U(S^{d−1}), positives z̃ ~ vMF(z, κ), observations g(z) through a generator of
  :mod:`contrastlab.worlds.mixing` (:class:`~contrastlab.worlds.vmf_world.SphereWorld`);
* ``concepts`` — the concept tree of :class:`~contrastlab.worlds.concepts.ConceptWorld` (Zipfian
  frequencies, generic and specific items), noisy feature views;
* ``pairs`` — stored (anchor, positive) feature pairs with optional mined hard negatives
  (:mod:`contrastlab.train.job.feature_pairs`);
* ``text`` — (anchor, positive[, negatives…]) text pairs from a TSV / CSV / JSONL file or a saved Hugging
  Face dataset, or by default the docstring code corpus of the installed Python
  (:mod:`contrastlab.train.job.text_dataset`), for the text encoders of :data:`contrastlab.models.text.TEXT_ENCODERS`;
* ``sources`` — several text datasets (pairs files, BEIR tasks) with round-robin or proportional sampling
  (:mod:`contrastlab.train.job.text_sources`);
* every file-backed image dataset of :data:`contrastlab.data.registry.DATASETS` (``digits``, ``cifar10``,
  ``cifar100``, ``cifar10h``, ``stl10``, ``svhn``, ``imagenet32``, ``tiny-imagenet``) — SimCLR's two views
  per image (:class:`~contrastlab.data.views.TwoViewBatches`) through an augmentation pipeline of
  :data:`contrastlab.data.augment.REGIMES`.

The image entries are generated from the reader registry, so a dataset registered there is trainable here
with no further code. Every batch source is a pure function of the step (exact resume), and the held-out
set is drawn once from ``eval.seed``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from contrastlab.config import ConfigError
from contrastlab.data.sampler import step_generator
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.data_source import DataSource
from contrastlab.train.job.feature_pairs import build_pairs
from contrastlab.train.job.text_dataset import build_texts
from contrastlab.train.job.text_sources import build_sources

if TYPE_CHECKING:
    from contrastlab.data.base import ImageDataset

__all__ = ["DATA_BUILDERS", "build_sphere", "build_concepts", "build_images"]


def build_sphere(config: JobConfig) -> DataSource:
    """The synthetic sphere world: z ~ U(S^{d−1}), z̃ ~ vMF(z, κ), observations g(z), g(z̃).

    Negatives (``negatives.kind`` shared / per_anchor) are g(z⁻) with z⁻ ~ U(S^{d−1}). Every batch is
    drawn from a generator seeded by ``(train.seed, step)``, the held-out set from ``eval.seed``.
    """
    from contrastlab.worlds.vmf_world import SphereWorld

    data, neg = config.data, config.negatives
    world = SphereWorld.from_mixing(data.mixing, d=data.latent_dim, kappa=config.views.kappa, seed=data.mixing_seed)

    def draw(count: int, gen: torch.Generator, with_negatives: bool) -> dict[str, Tensor]:
        x_a, x_p, z, _ = world.sample_pairs(count, generator=gen)
        batch = {"anchor": x_a, "positive": x_p, "latent": z.float()}
        if with_negatives and neg.kind == "shared":
            batch["negatives"] = world.sample(neg.num, generator=gen)[0]
        elif with_negatives and neg.kind == "per_anchor":
            batch["negatives"] = world.sample(count * neg.num, generator=gen)[0].view(count, neg.num, -1)
        return batch

    def batch_at(step: int) -> dict[str, Tensor]:
        return draw(data.batch_size, step_generator(config.train.seed, step), True)

    eval_batch = draw(config.eval.n, torch.Generator().manual_seed(config.eval.seed), False)
    return DataSource("vectors", (world.input_dim,), batch_at, eval_batch, fresh_negatives=True)


def build_concepts(config: JobConfig) -> DataSource:
    """The concept world: Zipfian anchors on a concept tree, positives from their subtree, noisy views.

    Batches are :meth:`~contrastlab.worlds.concepts.ConceptWorld.sample` with ``views=True`` from a
    generator seeded by ``(train.seed, step)``; the held-out set from ``eval.seed``. No labels: an anchor
    and its positive are different items of one subtree.
    """
    from contrastlab.worlds.concepts import ConceptWorld

    c = config.data.concepts
    world = ConceptWorld(
        branching=c.branching,
        depth=c.depth,
        zipf_exponent=c.zipf_exponent,
        input_dim=c.input_dim,
        view_noise=c.view_noise,
        seed=c.seed,
    )

    def draw(count: int, gen: torch.Generator) -> dict[str, Tensor]:
        b = world.sample(count, generator=gen, views=True)
        assert b.x_anchor is not None and b.x_positive is not None  # views=True returns both
        return {"anchor": b.x_anchor, "positive": b.x_positive}

    def batch_at(step: int) -> dict[str, Tensor]:
        return draw(config.data.batch_size, step_generator(config.train.seed, step))

    eval_batch = draw(config.eval.n, torch.Generator().manual_seed(config.eval.seed))
    return DataSource("vectors", (world.input_dim,), batch_at, eval_batch)


def _load_split(name: str, config: JobConfig, split: str) -> ImageDataset:
    from contrastlab.data.base import DatasetNotFoundError
    from contrastlab.data.registry import load_dataset

    try:
        ds = load_dataset(name, config.data.root, split)
    except DatasetNotFoundError as e:  # the readers name their argument `root`; the job's field is data.root
        raise DatasetNotFoundError(f"data.{e}") from None
    size = config.data.image_size
    return ds if size is None else ds.resized(size)


def build_images(name: str, config: JobConfig) -> DataSource:
    """Two augmented views per image of the registered image dataset ``name`` (SimCLR, Chen et al. 2020).

    The training split is ``train`` (its first ``data.subset`` images when ``subset > 0``), the held-out
    set ``eval.n`` images of the ``test`` split drawn with ``eval.seed``; both are resized to
    ``data.image_size`` when set. Each view is ``REGIMES[views.augment]`` applied with its own draw;
    training draws come from ``(train.seed, step)`` (:class:`~contrastlab.data.views.TwoViewBatches`).
    The linear probe fits on ``eval.probe_n`` un-augmented training images (``eval.seed``).

    Raises:
        contrastlab.train.ConfigError: ``data.batch_size`` exceeds the training images.
        contrastlab.data.DatasetNotFoundError: the files are not under ``data.root``.
    """
    from contrastlab.data.augment import augmentation_regime
    from contrastlab.data.views import TwoViewBatches

    data, views = config.data, config.views
    train = _load_split(name, config, "train")
    if data.subset:
        train = train.subset(torch.arange(min(data.subset, len(train))))
    labelled = train.labels >= 0
    if data.batch_size > len(train):
        raise ConfigError(f"data.batch_size ({data.batch_size}) exceeds the {len(train)} training images of {name}")
    _, height, width = train.image_shape
    if height != width:
        raise ConfigError(f"data.image_size must be set for {name}: its images are {height}x{width}, not square")
    augment = augmentation_regime(
        views.augment, height, crop_scale=views.crop_scale, strength=views.strength, flip=views.flip
    )
    batches = TwoViewBatches(train, augment, data.batch_size, seed=config.train.seed)

    def batch_at(step: int) -> dict[str, Tensor]:
        a, b, y = batches.batch_at(step)
        return {"anchor": a, "positive": b, "labels": y}

    g = torch.Generator().manual_seed(config.eval.seed)
    test = _load_split(name, config, "test")
    held = test.subset(torch.randperm(len(test), generator=g)[: config.eval.n])
    clean = held.float_images()
    eval_batch = {"anchor": augment(clean, g), "positive": augment(clean, g), "labels": held.labels, "clean": clean}
    probe_rows = torch.randperm(len(train), generator=g)[: config.eval.probe_n]
    probe_rows = probe_rows[labelled[probe_rows]]
    probe_set = train.subset(probe_rows)
    probe_train = {"clean": probe_set.images, "labels": probe_set.labels}  # as stored (uint8); scaled when encoded
    has_labels = bool(labelled.all()) and bool((held.labels >= 0).all())
    probe = has_labels and len(probe_rows) > 0
    return DataSource(
        "images",
        train.image_shape,
        batch_at,
        eval_batch,
        num_classes=train.num_classes if has_labels else 0,
        probe_train=probe_train if probe else None,
        train_size=len(train),
    )


def _image_builders() -> dict[str, Callable[[JobConfig], DataSource]]:
    from contrastlab.data.registry import DATASETS

    return {name: partial(build_images, name) for name in DATASETS}


DATA_BUILDERS: dict[str, Callable[[JobConfig], DataSource]] = {
    "sphere": build_sphere,
    "concepts": build_concepts,
    "pairs": build_pairs,
    "text": build_texts,
    "sources": build_sources,
    **_image_builders(),
}
"""Dataset name → ``build(config) -> DataSource``; ``data.name`` of a job is a key of this dict."""
