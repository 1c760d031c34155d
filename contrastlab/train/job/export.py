"""A fine-tuned text encoder out of its run: a sentence-transformers folder that loads without contrastlab.

A text run of ``contrastlab train`` (encoder ``minilm`` or ``sentence_transformers``) trains the modules of a
sentence-transformers model — the transformer, the pooling and any dense layers — with the final
``Normalize`` left out (:mod:`contrastlab.models.text`). :func:`save_sentence_transformers` writes those
modules as a sentence-transformers folder, so ``SentenceTransformer(folder).encode(texts)`` gives the
embeddings of the contrastlab encoder (the representation: a projection head, if the run trained one,
stays behind, as in SimCLR; LoRA adapters are merged into the weights they adapt, so the folder loads
without peft). The folder's similarity function is the one the loss used: ``cosine`` when
the loss normalised the embeddings (``loss.normalize``), else ``dot``. ``contrastlab.json`` beside the
model files says which run and step it came from.

:func:`run_text_encoder` rebuilds a run's encoder from its ``config.json`` and newest checkpoint (the
base model it started from must still be on disk); :func:`export_run` writes its folder. ``contrastlab
train`` saves ``RUN/model`` at the end of every text run; ``contrastlab export RUN --st OUT`` writes one for
any text run, and ``contrastlab audit RUN --pairs FILE`` audits it on any pairs.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from torch import nn

if TYPE_CHECKING:
    from contrastlab.models.text import TransformerTextEncoder

__all__ = ["MODEL_FOLDER", "run_text_encoder", "save_sentence_transformers", "export_run"]

MODEL_FOLDER = "model"
"""The sentence-transformers folder ``contrastlab train`` writes inside a text run."""


def _similarity(normalize: bool) -> Literal["cosine", "dot"]:
    return "cosine" if normalize else "dot"


def save_sentence_transformers(
    encoder: nn.Module,
    folder: str | Path,
    *,
    normalize: bool,
    about: dict[str, Any],
    prompts: dict[str, str] | None = None,
    card: str | None = None,
) -> Path:
    """Write a :class:`~contrastlab.models.text.TransformerTextEncoder` as a sentence-transformers folder.

    The folder is written beside its final place and renamed into it; an existing ``folder`` is replaced.
    The encoder itself is left as it is (a copy of its modules is saved, on the CPU).

    Args:
        encoder: the text encoder (or a model whose ``encoder`` attribute is one, e.g. with a projection head).
        folder: the output folder.
        normalize: whether the training loss normalised the embeddings (the folder's similarity: cosine or dot).
        about: provenance written to ``contrastlab.json`` in the folder (the run, the step).
        prompts: the run's prompts by name (``{"query": "query: ", "document": "passage: "}``), saved as the
            model's ``prompts``, so ``encode(texts, prompt_name="query")`` puts them before the texts.
        card: the model card written as the folder's ``README.md``
            (:func:`contrastlab.train.job.model_card.model_card`).

    Returns:
        The folder.

    Raises:
        TypeError: ``encoder`` is not a text encoder.
    """
    from sentence_transformers import SentenceTransformer

    from contrastlab.io import write_json_atomic, write_text_atomic
    from contrastlab.models.text import TransformerTextEncoder, hf_progress_bars

    text = getattr(encoder, "encoder", encoder)
    if not isinstance(text, TransformerTextEncoder):
        raise TypeError(f"encoder must be a text encoder (TransformerTextEncoder), got {type(text).__name__}")
    out = Path(folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    from contrastlab.models.lora import merge_lora

    modules = [merge_lora(copy.deepcopy(m).cpu()) for m in text.body]  # LoRA adapters folded into the weights
    model = SentenceTransformer(
        modules=modules,  # type: ignore[arg-type]
        device="cpu",
        similarity_fn_name=_similarity(normalize),  # type: ignore[arg-type]
        prompts=dict(prompts or {}),
    )
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        with hf_progress_bars(False):  # transformers' "Writing model shards"
            model.save(str(stage), create_model_card=False)
        write_json_atomic(stage / "contrastlab.json", {**about, "similarity": _similarity(normalize)})
        if card is not None:
            write_text_atomic(stage / "README.md", card)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            os.replace(out, old / out.name)
        os.replace(stage, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out


def run_text_encoder(run_dir: str | Path, *, device: str = "cpu") -> tuple[TransformerTextEncoder, dict[str, Any], int]:
    """The text encoder of a ``contrastlab train`` run, with its newest checkpoint's weights, in eval mode.

    A run that selects its checkpoint by a dev metric (``select.metric``) gives the selected step's weights,
    which its newest checkpoint holds beside the last step's.

    Returns:
        ``(encoder, the run's config.json as a dict, step)``; the encoder is the representation (without a
        projection head).

    Raises:
        ValueError: ``run_dir`` is not a run folder, has no checkpoint, or did not train a text encoder
            (messages start with ``run``); the base model it started from cannot be loaded.
        contrastlab.io.CorruptFileError: ``config.json`` fails its checksum.
    """
    from contrastlab.io import read_json_verified
    from contrastlab.models import ContrastiveModel, ProjectionHead
    from contrastlab.models.text import TEXT_ENCODERS
    from contrastlab.train.loop.checkpoint import latest_checkpoint

    run = Path(run_dir)
    if not (run / "config.json").is_file():
        raise ValueError(f"run: {run} is not a training run folder (no config.json; made by `contrastlab train`)")
    cfg = read_json_verified(run / "config.json")  # written by contrastlab train from a validated JobConfig
    e = cfg.get("encoder") or {}
    if e.get("name") not in TEXT_ENCODERS:
        raise ValueError(
            f"run: {run} trained the {e.get('name')!r} encoder on {(cfg.get('data') or {}).get('name')!r}; only a "
            f"text run ({', '.join(sorted(TEXT_ENCODERS))}) embeds text"
        )
    state = latest_checkpoint(run)
    if state is None:
        raise ValueError(f"run: {run} has no checkpoint")
    from contrastlab.train.job.lora import LoRAConfig

    text = TEXT_ENCODERS[e["name"]](e.get("path"), int(e["max_seq_length"]))
    LoRAConfig.from_run(e).apply(text)  # the run's adapters, if it trained any, before its weights load
    proj = int(e.get("proj_dim") or 0)
    model: nn.Module = ContrastiveModel(text, ProjectionHead(int(e["out_dim"]), proj)) if proj else text
    weights, step = state["model"], int(state["step"])
    selected = (state.get("extra") or {}).get("select")  # select.metric: the selected step's weights
    if selected is not None and int(selected["best_step"]) >= 0:
        weights, step = selected["best_weights"], int(selected["best_step"])
    # a learnable τ or bias (``loss_parameters.*``) trained beside the encoder is no part of the text model
    model.load_state_dict({k: v for k, v in weights.items() if not k.startswith("loss_parameters.")})
    text.to(device).eval()
    return text, cfg, step


def export_run(run_dir: str | Path, folder: str | Path) -> Path:
    """Write the text encoder of the run ``run_dir`` as a sentence-transformers folder ``folder``.

    Raises:
        ValueError: as :func:`run_text_encoder`; or ``folder`` exists and is not empty (named ``out``).
    """
    out = Path(folder)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"out: {out} exists and is not an empty folder")
    encoder, cfg, step = run_text_encoder(run_dir)
    card = run_card(run_dir, cfg, step)
    loss = cfg.get("loss") or {}
    about = {
        "run": str(Path(run_dir).resolve()),
        "step": step,
        "encoder": cfg["encoder"]["name"],
        "loss": loss.get("name"),
    }
    prompts = {k: v for k, v in (cfg.get("prompts") or {}).items() if v}
    return save_sentence_transformers(
        encoder, out, normalize=bool(loss.get("normalize", True)), about=about, prompts=prompts, card=card
    )


def run_card(run_dir: str | Path, cfg: dict[str, Any], step: int) -> str:
    """The model card of the run ``run_dir`` at ``step``, from its ``config.json`` and ``results.json``.

    The held-out metrics are those of the results' evaluation table at exactly ``step`` (none when the run
    has no results or did not evaluate at that step: the card then says no metric was measured).
    """
    from contrastlab.io import read_json_verified
    from contrastlab.train.job.model_card import run_card_from_results

    path = Path(run_dir) / "results.json"
    results = read_json_verified(path) if path.is_file() else {}
    return run_card_from_results(cfg, results, step)
