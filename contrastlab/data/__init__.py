"""Image datasets from local files (never downloaded), batched seeded augmentations, two-view batches."""

from contrastlab.data.augment import (
    REGIMES,
    Augmentation,
    ColorJitter,
    Compose,
    Cutout,
    GaussianBlur,
    Identity,
    Normalize,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    all_without_crop,
    augmentation_regime,
    crop_only,
    simclr_all,
)
from contrastlab.data.base import DatasetFormatError, DatasetNotFoundError, ImageDataset, to_float_images
from contrastlab.data.blend import BlendedImages, binary_entropy, blend_images
from contrastlab.data.cifar import load_cifar10, load_cifar100
from contrastlab.data.cifar10h import HumanLabels, label_entropy, load_cifar10h
from contrastlab.data.digits import load_digits
from contrastlab.data.imagenet32 import load_imagenet32
from contrastlab.data.registry import (
    DATASETS,
    DatasetSpec,
    dataset_available,
    default_data_root,
    load_dataset,
)
from contrastlab.data.stl10 import load_stl10
from contrastlab.data.svhn import load_svhn
from contrastlab.data.tiny_imagenet import load_tiny_imagenet
from contrastlab.data.views import TwoViewBatches

__all__ = [
    "ImageDataset",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "to_float_images",
    "DATASETS",
    "DatasetSpec",
    "load_dataset",
    "dataset_available",
    "default_data_root",
    "load_digits",
    "load_cifar10",
    "load_cifar100",
    "load_stl10",
    "load_svhn",
    "load_imagenet32",
    "load_tiny_imagenet",
    "Augmentation",
    "Compose",
    "Identity",
    "RandomResizedCrop",
    "RandomHorizontalFlip",
    "ColorJitter",
    "RandomGrayscale",
    "GaussianBlur",
    "Cutout",
    "Normalize",
    "simclr_all",
    "crop_only",
    "all_without_crop",
    "augmentation_regime",
    "REGIMES",
    "TwoViewBatches",
    "HumanLabels",
    "load_cifar10h",
    "label_entropy",
    "BlendedImages",
    "blend_images",
    "binary_entropy",
]
