"""What ``contrastlab data get NAME`` can fetch: each dataset's official address and published checksum.

Two kinds:

* ``task`` — BEIR's public retrieval tasks (Thakur et al. 2021, arXiv:2104.08663), one zip each, unpacked to
  ``<root>/<name>/`` (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``; ``cqadupstack`` holds one
  such folder per forum). Addresses and md5s are those of the table "Available Datasets" in the README of the
  beir-cellar/beir repository.
* ``images`` — the image datasets :mod:`contrastlab.data.registry` reads, laid out as their loaders expect
  (``<root>/cifar-10-batches-py/``, ``<root>/stl10_binary/``, ``<root>/train_32x32.mat``). Addresses and md5s
  are those of torchvision's dataset classes (pytorch/vision, ``torchvision/datasets/cifar.py``, ``stl10.py``,
  ``svhn.py``).

Every checksum here was read from the source named beside it; none is computed by this library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contrastlab.data.cifar import CIFAR10_FILES, CIFAR100_FILES
from contrastlab.data.stl10 import STL10_FILES

__all__ = ["RemoteFile", "Download", "DOWNLOADS", "BEIR_BASE_URL", "task_names"]

BEIR_BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/"
"""Where BEIR publishes its zips (beir-cellar/beir, README.md)."""

_BEIR_SOURCE = "beir-cellar/beir, README.md, table 'Available Datasets' (md5 column)"
_BEIR_LICENCE = (
    "not stated by BEIR, which redistributes the data without granting a licence; see the dataset's homepage"
)


@dataclass(frozen=True)
class RemoteFile:
    """One file to download.

    Attributes:
        name: the file's name under the download's base address (also its name on disk while it downloads).
        md5: its published MD5 (hex), or ``""``.
        sha256: its SHA-256 (hex), or ``""``; at least one of the two is set.
        url: its full address, when it is not ``base_url + name`` (a file given by URL).
    """

    name: str
    md5: str = ""
    sha256: str = ""
    url: str = ""


@dataclass(frozen=True)
class Download:
    """A dataset ``data get`` knows.

    Attributes:
        name: the name on the command line (``scifact``, ``cifar10``).
        kind: ``task`` (a retrieval task folder) or ``images`` (files an image loader reads).
        base_url: the address the files sit under (ends with ``/``); ``--mirror`` replaces it.
        files: the files, each with its published checksum.
        target: ``unpack``: the folder under the data root the archive becomes; otherwise ``""`` (the files are
            saved under the root as they are).
        unpack: whether ``files`` (one archive) is unpacked.
        expected: files the unpacked folder must hold, relative to the data root (empty for tasks, whose
            layout is checked by the task reader's rules).
        homepage: the dataset's own page.
        licence: the licence as its source states it.
        checksum_source: where the checksums were read.
    """

    name: str
    kind: Literal["task", "images"]
    base_url: str
    files: tuple[RemoteFile, ...]
    target: str
    unpack: bool
    expected: tuple[str, ...]
    homepage: str
    licence: str
    checksum_source: str


def _beir(name: str, md5: str, homepage: str, licence: str = _BEIR_LICENCE) -> Download:
    return Download(
        name=name,
        kind="task",
        base_url=BEIR_BASE_URL,
        files=(RemoteFile(f"{name}.zip", md5=md5),),
        target=name,
        unpack=True,
        expected=(),
        homepage=homepage,
        licence=licence,
        checksum_source=_BEIR_SOURCE,
    )


_TASKS = (
    # name, md5 (beir-cellar/beir README.md), homepage (the same table)
    _beir("msmarco", "444067daf65d982533ea17ebd59501e4", "https://microsoft.github.io/msmarco/"),
    _beir("trec-covid", "ce62140cb23feb9becf6270d0d1fe6d1", "https://ir.nist.gov/covidSubmit/index.html"),
    _beir("nfcorpus", "a89dba18a62ef92f7d323ec890a0d38d", "https://www.cl.uni-heidelberg.de/statnlpgroup/nfcorpus/"),
    _beir("nq", "d4d3d2e48787a744b6f6e691ff534307", "https://ai.google.com/research/NaturalQuestions"),
    _beir("hotpotqa", "f412724f78b0d91183a0e86805e16114", "https://hotpotqa.github.io"),
    _beir("fiqa", "17918ed23cd04fb15047f73e6c3bd9d9", "https://sites.google.com/view/fiqa/"),
    _beir("arguana", "8ad3e3c2a5867cdced806d6503f29b99", "http://argumentation.bplaced.net/arguana/data"),
    _beir(
        "webis-touche2020", "46f650ba5a527fc69e0a6521c5a23563", "https://webis.de/events/touche-20/shared-task-1.html"
    ),
    _beir("cqadupstack", "4e41456d7df8ee7760a7f866133bda78", "http://nlp.cis.unimelb.edu.au/resources/cqadupstack/"),
    _beir(
        "quora",
        "18fb154900ba42a600f84b839c173167",
        "https://www.quora.com/q/quoradata/First-Quora-Dataset-Release-Question-Pairs",
    ),
    _beir("dbpedia-entity", "c2a39eb420a3164af735795df012ac2c", "https://github.com/iai-group/DBpedia-Entity/"),
    _beir("scidocs", "38121350fc3a4d2f48850f6aff52e4a9", "https://allenai.org/data/scidocs"),
    _beir("fever", "5a818580227bfb4b35bb6fa46d9b6c03", "http://fever.ai"),
    _beir("climate-fever", "8b66f0a9126c521bae2bde127b4dc99d", "http://climatefever.ai"),
    # licence: the allenai/scifact dataset card on the Hugging Face hub (license: cc-by-nc-2.0)
    _beir("scifact", "5f7d1de60b170fc8027bb7898e2efca1", "https://github.com/allenai/scifact", "CC BY-NC 2.0"),
)

_IMAGE_LICENCE = "not recorded here; see the homepage"
_TORCHVISION = "pytorch/vision, torchvision/datasets/{}.py"

_IMAGES = (
    Download(
        name="cifar10",
        kind="images",
        base_url="http://www.cs.toronto.edu/~kriz/",
        files=(RemoteFile("cifar-10-python.tar.gz", md5="c58f30108f718f92721af3b95e74349a"),),
        target="cifar-10-batches-py",
        unpack=True,
        expected=tuple(f for fs in CIFAR10_FILES.values() for f in fs),
        homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
        licence=_IMAGE_LICENCE,
        checksum_source=_TORCHVISION.format("cifar") + " (CIFAR10.tgz_md5)",
    ),
    Download(
        name="cifar100",
        kind="images",
        base_url="http://www.cs.toronto.edu/~kriz/",
        files=(RemoteFile("cifar-100-python.tar.gz", md5="eb9058c3a382ffc7106e4002c42a8d85"),),
        target="cifar-100-python",
        unpack=True,
        expected=tuple(f for fs in CIFAR100_FILES.values() for f in fs),
        homepage="https://www.cs.toronto.edu/~kriz/cifar.html",
        licence=_IMAGE_LICENCE,
        checksum_source=_TORCHVISION.format("cifar") + " (CIFAR100.tgz_md5)",
    ),
    Download(
        name="stl10",
        kind="images",
        base_url="http://ai.stanford.edu/~acoates/stl10/",
        files=(RemoteFile("stl10_binary.tar.gz", md5="91f7769df0f17e558f3565bffb0c7dfb"),),
        target="stl10_binary",
        unpack=True,
        expected=tuple(f for fs in STL10_FILES.values() for f in fs),
        homepage="https://cs.stanford.edu/~acoates/stl10/",
        licence=_IMAGE_LICENCE,
        checksum_source=_TORCHVISION.format("stl10") + " (STL10.tgz_md5)",
    ),
    Download(
        name="svhn",
        kind="images",
        base_url="http://ufldl.stanford.edu/housenumbers/",
        files=(
            RemoteFile("train_32x32.mat", md5="e26dedcc434d2e4c54c9b2d4a06d8373"),
            RemoteFile("test_32x32.mat", md5="eb5a983be6a315427106f1b164d9cef3"),
        ),
        target="",
        unpack=False,
        expected=("train_32x32.mat", "test_32x32.mat"),
        homepage="http://ufldl.stanford.edu/housenumbers/",
        licence=_IMAGE_LICENCE,
        checksum_source=_TORCHVISION.format("svhn") + " (SVHN.split_list)",
    ),
    Download(
        name="svhn-extra",
        kind="images",
        base_url="http://ufldl.stanford.edu/housenumbers/",
        files=(RemoteFile("extra_32x32.mat", md5="a93ce644f1a588dc4d68dda5feec44a7"),),
        target="",
        unpack=False,
        expected=("extra_32x32.mat",),
        homepage="http://ufldl.stanford.edu/housenumbers/",
        licence=_IMAGE_LICENCE,
        checksum_source=_TORCHVISION.format("svhn") + " (SVHN.split_list)",
    ),
)

DOWNLOADS: dict[str, Download] = {d.name: d for d in (*_TASKS, *_IMAGES)}
"""Name → :class:`Download`: BEIR's public tasks, then the image datasets."""


def task_names() -> tuple[str, ...]:
    """The names of the retrieval tasks ``data get`` fetches, in catalogue order."""
    return tuple(n for n, d in DOWNLOADS.items() if d.kind == "task")
