"""Export an encoder to ONNX: a folder onnxruntime serves without PyTorch.

An export folder holds

* ``model.onnx`` — the graph, with a dynamic batch axis (and, for text, a dynamic sequence axis) and two
  outputs: ``embedding``, the embedding as the model serves it (L2-normalised when the model normalises:
  a sentence-transformers pipeline ending in ``Normalize``, or an encoder trained with
  ``loss.normalize``), and ``raw_embedding``, the same before normalisation (the norm the audit's
  diagnostics read). Pooling (a sentence-transformers ``Pooling`` module and any ``Dense`` after it) is
  inside the graph;
* ``tokenizer/`` — for a text model, its Hugging Face tokenizer (``save_pretrained``), which
  :class:`~contrastlab.export.runtime.OnnxTextEncoder` calls as sentence-transformers does (padding to
  the longest text, truncation to ``max_seq_length`` tokens);
* ``onnx.json`` — a checksummed sidecar (:func:`contrastlab.io.write_json_atomic`) with what the graph
  takes and gives and the size and SHA-256 of every other file, which the loader checks before it
  parses anything (:func:`contrastlab.export.runtime.read_export`).

The graph is traced by PyTorch's TorchScript-based exporter (``torch.onnx.export(..., dynamo=False)``,
opset :data:`OPSET`). A trace records the operations of one call, so a model whose operations depend
on the values or sizes of its input (data-dependent control flow) would be exported wrongly; every
export is therefore checked before it is moved into place: onnxruntime runs the written folder on a
second batch of another size (and, for text, other lengths) and must reproduce PyTorch's embeddings.

A text model is traced with eager attention and its graph then fused by onnxruntime's transformer optimizer
(:mod:`contrastlab.export.optimize`); the fused graph is checked the same way, and if a fusion changed the
embeddings the checked trace is kept instead (``onnx.json``'s ``fused`` is then ``{}``).

Nothing is half-written: the folder is built beside ``out`` under a temporary name and renamed onto
``out`` only when the check has passed.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from contrastlab.export.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    MODEL_FILE,
    OPSET,
    OUTPUTS,
    TEXT_INPUTS,
    TOKENIZER_DIR,
)
from contrastlab.export.optimize import eager_attention, fuse_transformer
from contrastlab.io import sha256_file, write_json_atomic
from contrastlab.losses._common import l2_normalize

__all__ = ["export_text_onnx", "export_tensor_onnx", "export_model"]


#: Texts of different lengths the text graphs are traced with and checked on.
_TRACE_TEXTS = ["a short text", "a longer text, with punctuation and a few more words in it than the first"]
_CHECK_TEXTS = [
    "x",
    "Return the square root of x, computed to the precision of the float type.",
    "open a file",
    " ".join(["many words make a long text"] * 12),
]
_CHECK_RTOL = 1e-4
"""The export check: |onnxruntime − PyTorch| ≤ 1e-4·(1 + max |PyTorch|) entrywise, two orders of magnitude
above float32 rounding of the graph (1e-6 relative, measured on MiniLM) and far below a wrongly traced
branch, which changes the embedding entirely."""


class _TensorGraph(nn.Module):
    """``model`` with its served and raw embeddings as the two outputs."""

    def __init__(self, model: nn.Module, normalizes: bool) -> None:
        super().__init__()
        self.model, self.normalizes = model, normalizes

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(embedding, raw_embedding)`` of ``x``."""
        raw = self.model(x)
        return (l2_normalize(raw) if self.normalizes else raw), raw


class _TextGraph(nn.Module):
    """sentence-transformers modules (input module first, no final ``Normalize``) from token tensors."""

    def __init__(self, modules: Sequence[nn.Module], input_names: Sequence[str], normalizes: bool) -> None:
        super().__init__()
        self.body = nn.ModuleList(modules)
        self.input_names, self.normalizes = list(input_names), normalizes

    def forward(self, *inputs: Tensor) -> tuple[Tensor, Tensor]:
        """``(embedding, raw_embedding)`` of the tokenised batch (inputs in ``input_names`` order)."""
        features: dict[str, Any] = dict(zip(self.input_names, inputs, strict=True))
        for module in self.body:
            features = module(features)
        raw = features["sentence_embedding"]
        return (l2_normalize(raw) if self.normalizes else raw), raw


def _require_onnx() -> None:
    """Raise a named error if the ``onnx`` extra (onnx, onnxruntime) is not installed."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        raise ValueError("onnx: ONNX export needs the onnx extra (pip install 'contrastlab[onnx]')") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return " ".join(text.splitlines()[0].split())[:300] if text else type(e).__name__


@contextlib.contextmanager
def _building(out: Path) -> Iterator[Path]:
    """A temporary folder beside ``out``, renamed onto ``out`` if the body succeeds, removed otherwise.

    Raises:
        ValueError: ``out`` exists and is not an empty folder (naming ``onnx``).
    """
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise ValueError(f"onnx: {out} already exists; give a new folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    tmp.chmod(0o755)  # mkdtemp makes it 0700; an export is meant to be read by others
    try:
        yield tmp
        if out.exists():
            out.rmdir()  # the empty folder checked above
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _trace(graph: nn.Module, args: tuple[Tensor, ...], path: Path, input_names: list[str], axes: dict) -> None:
    """``torch.onnx.export`` (TorchScript tracer) of ``graph`` on ``args`` into ``path``.

    Raises:
        ValueError: the exporter refuses the model (an operation without an ONNX form, ...), naming ``model``.
    """
    graph.eval()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the tracer's warnings; the check after export decides
            torch.onnx.export(
                graph,
                args,
                str(path),
                input_names=input_names,
                output_names=list(OUTPUTS),
                dynamic_axes={**axes, **{name: {0: "batch"} for name in OUTPUTS}},
                opset_version=OPSET,
                dynamo=False,
            )
    except Exception as e:  # the exporter raises errors of many classes (SymbolicValueError, RuntimeError, ...)
        raise ValueError(f"model: cannot be exported to ONNX ({type(e).__name__}: {_first_line(e)})") from None


def _check(got: Any, want: Tensor, what: str) -> None:
    """Refuse an export whose onnxruntime output differs from PyTorch's (see :data:`_CHECK_RTOL`)."""
    got_t = torch.as_tensor(got, dtype=torch.float32)
    if got_t.shape != want.shape:
        raise ValueError(
            f"model: the exported graph gives shape {tuple(got_t.shape)} where PyTorch gives "
            f"{tuple(want.shape)} ({what}); the trace fixed a size it should not have"
        )
    err = float((got_t - want).abs().max())
    if not err <= _CHECK_RTOL * (1.0 + float(want.abs().max())):
        raise ValueError(
            f"model: the exported graph differs from PyTorch by {err:.3g} ({what}); the model's operations "
            "depend on its input's values or sizes (data-dependent control flow), which a trace cannot export"
        )


def _write_meta(root: Path, meta: dict[str, Any]) -> None:
    """``onnx.json``: ``meta`` plus the size and SHA-256 of every file of the folder (sorted)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != META_FILE)
    listing = {p.relative_to(root).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)} for p in files}
    write_json_atomic(
        root / META_FILE, {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **meta, "files": listing}
    )


def _base_meta(kind: str, description: str, dim: int, normalizes: bool) -> dict[str, Any]:
    import contrastlab

    return {
        "kind": kind,
        "description": description,
        "dim": dim,
        "normalizes": normalizes,
        "outputs": list(OUTPUTS),
        "opset": OPSET,
        "torch_version": torch.__version__,
        "contrastlab_version": contrastlab.__version__,
    }


def export_tensor_onnx(
    model: nn.Module, example: Tensor, out: str | Path, *, normalizes: bool = True, description: str = ""
) -> Path:
    """Export an encoder of tensors (MLP, CNN, ResNet-18, ViT, with or without a projection head) to ``out``.

    Args:
        model: maps ``(B, *shape)`` float inputs to ``(B, D)`` embeddings; exported in eval mode (BatchNorm
            with its running statistics, no dropout) on the CPU, in float32.
        example: an input batch ``(B, *shape)``; its per-row shape is fixed in the graph, the batch axis is
            dynamic.
        out: the export folder (must not exist, or be empty).
        normalizes: the ``embedding`` output is L2-normalised (as the contrastive losses use the encoder);
            ``raw_embedding`` is always the model's own output.
        description: what was exported, for ``onnx.json``.

    Returns:
        The folder.

    Raises:
        TypeError: ``model`` is not a module or ``example`` not a floating-point tensor.
        ValueError: the model's output is not ``(B, D)``, it cannot be exported (an operation without an ONNX
            form, data-dependent control flow), ``out`` exists, or the onnx extra is missing; nothing is written.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example, Tensor) or not example.is_floating_point() or example.ndim < 2:
        raise TypeError("example must be a floating-point tensor of shape (B, ...)")
    _require_onnx()
    model = model.cpu().float().eval()
    example = example.detach().cpu().float()
    graph = _TensorGraph(model, normalizes)
    with torch.no_grad():
        raw = model(example)
    if not isinstance(raw, Tensor) or raw.ndim != 2 or raw.shape[0] != example.shape[0]:
        shape = tuple(raw.shape) if isinstance(raw, Tensor) else type(raw).__name__
        raise ValueError(f"model: gives {shape} for a batch of {example.shape[0]}, not a 2-D (B, D) embedding")
    check = torch.cat([example, example.flip(0) * 0.5])[: example.shape[0] + 1]  # another batch size
    out = Path(out)
    with _building(out) as tmp:
        _trace(graph, (example,), tmp / MODEL_FILE, ["input"], {"input": {0: "batch"}})
        meta = _base_meta("tensor", description or type(model).__name__, int(raw.shape[1]), normalizes)
        _write_meta(tmp, {**meta, "inputs": ["input"], "input_shape": list(example.shape[1:])})
        from contrastlab.export.runtime import OnnxTensorEncoder

        encoder = OnnxTensorEncoder(tmp)
        with torch.no_grad():
            want = graph(check)
        for got, ref, name in zip(encoder.run(check.numpy()), want, OUTPUTS, strict=True):
            _check(got, ref, f"{name} of a batch of {check.shape[0]}")
    return out


def _tokenize(modules: Sequence[nn.Module], texts: list[str]) -> dict[str, Any]:
    """sentence-transformers' own tokenisation (``preprocess``; ``tokenize`` before version 6)."""
    first: Any = modules[0]
    prepare = getattr(first, "preprocess", None) or first.tokenize
    features: dict[str, Any] = prepare(texts)
    return features


def export_text_onnx(
    modules: Sequence[nn.Module],
    out: str | Path,
    *,
    max_seq_length: int | None = None,
    normalizes: bool | None = None,
    description: str = "",
) -> Path:
    """Export a sentence-transformers pipeline (tokenising input module, pooling, ...) with its tokenizer.

    Args:
        modules: the pipeline's modules in order (``list(SentenceTransformer)``), the input module first
            (with a Hugging Face ``tokenizer``). A final ``Normalize`` is left out of the graph and turns
            ``normalizes`` on.
        out: the export folder (must not exist, or be empty).
        max_seq_length: tokens per text at run time (default: the input module's ``max_seq_length``).
        normalizes: L2-normalise the ``embedding`` output (default: whether the pipeline ends in ``Normalize``).
        description: what was exported, for ``onnx.json``.

    Returns:
        The folder.

    Raises:
        ValueError: the first module is not a tokenising transformer module, the pipeline gives no 2-D
            sentence embedding, it cannot be exported, ``out`` exists, or the onnx extra is missing;
            nothing is written.
    """
    mods = list(modules)
    first: Any = mods[0] if mods else None
    tokenizer = getattr(first, "tokenizer", None)
    if tokenizer is None or not callable(getattr(tokenizer, "save_pretrained", None)):
        raise ValueError("model: the first module must be a sentence-transformers Transformer with a tokenizer")
    if type(mods[-1]).__name__ == "Normalize":
        mods = mods[:-1]
        normalizes = True if normalizes is None else normalizes
    normalizes = bool(normalizes)
    if max_seq_length is not None:
        if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) or max_seq_length < 1:
            raise ValueError(f"max_seq_length must be a positive int, got {max_seq_length!r}")
        first.max_seq_length = max_seq_length
    length = int(getattr(first, "max_seq_length", None) or tokenizer.model_max_length)
    _require_onnx()
    for m in mods:
        m.cpu().float().eval()
    features = _tokenize(mods, _TRACE_TEXTS)
    names = [n for n in TEXT_INPUTS if isinstance(features.get(n), Tensor)]
    if "input_ids" not in names or "attention_mask" not in names:
        raise ValueError("model: its tokenizer gives no input_ids and attention_mask")
    graph = _TextGraph(mods, names, normalizes)
    with torch.no_grad():
        try:
            raw = graph(*(features[n] for n in names))[1]
        except (KeyError, TypeError, RuntimeError) as e:
            raise ValueError(f"model: gives no sentence embedding from token tensors ({_first_line(e)})") from None
    if raw.ndim != 2 or raw.shape[0] != len(_TRACE_TEXTS):
        raise ValueError(f"model: gives {tuple(raw.shape)} for {len(_TRACE_TEXTS)} texts, not a 2-D (N, D) embedding")
    out = Path(out)
    config = getattr(getattr(first, "auto_model", None), "config", None)
    with _building(out) as tmp:
        axes = {n: {0: "batch", 1: "sequence"} for n in names}
        with eager_attention(first):  # the attention that the optimizer's fusion recognises
            _trace(graph, tuple(features[n] for n in names), tmp / MODEL_FILE, names, axes)
        tokenizer.save_pretrained(str(tmp / TOKENIZER_DIR))
        meta = {**_base_meta("text", description or "text model", int(raw.shape[1]), normalizes)}
        meta.update(inputs=names, max_seq_length=length)
        _write_meta(tmp, {**meta, "fused": {}})
        _check_text(tmp, mods, graph, names)  # the trace itself
        traced = tmp.parent / f"{tmp.name}.traced.onnx"  # outside the folder: not listed in onnx.json
        shutil.copyfile(tmp / MODEL_FILE, traced)
        try:
            fused = fuse_transformer(
                tmp / MODEL_FILE,
                num_heads=int(getattr(config, "num_attention_heads", 0) or 0),
                hidden_size=int(getattr(config, "hidden_size", 0) or 0),
            )
            _write_meta(tmp, {**meta, "fused": fused})
            try:
                _check_text(tmp, mods, graph, names)
            except ValueError:  # a fusion that does not fit this model: serve the checked trace unfused
                traced.replace(tmp / MODEL_FILE)
                _write_meta(tmp, {**meta, "fused": {}})
        finally:
            traced.unlink(missing_ok=True)
    return out


def _check_text(root: Path, modules: Sequence[nn.Module], graph: nn.Module, names: list[str]) -> None:
    """Refuse the text export in ``root`` unless onnxruntime reproduces PyTorch on :data:`_CHECK_TEXTS`."""
    from contrastlab.export.runtime import OnnxTextEncoder

    encoder = OnnxTextEncoder(root)
    check = _tokenize(modules, _CHECK_TEXTS)
    with torch.no_grad():
        want = graph(*(check[n] for n in names))
    got = encoder.run_texts(_CHECK_TEXTS)
    for g, w, name in zip(got, want, OUTPUTS, strict=True):
        _check(g, w, f"{name} of {len(_CHECK_TEXTS)} texts of 1 to {check['input_ids'].shape[1]} tokens")


# ----------------------------------------------------------------------------------------- what to export


def _run_folder_encoder(path: Path) -> tuple[nn.Module, Tensor | None, bool, str]:
    """A contrastlab run's trained encoder: ``(model, example input or None for text, normalizes, description)``."""
    from contrastlab.config import from_dict
    from contrastlab.io import read_json_verified
    from contrastlab.train.job.config import JobConfig
    from contrastlab.train.job.runner import DATA_BUILDERS, build_encoder
    from contrastlab.train.loop.checkpoint import latest_checkpoint

    cfg = from_dict(JobConfig, read_json_verified(path / "config.json"))
    state = latest_checkpoint(path)
    if state is None:
        raise ValueError(f"model: {path} has no checkpoint")
    source = DATA_BUILDERS[cfg.data.name](cfg)
    model = build_encoder(cfg, source)
    model.load_state_dict(state["model"])
    what = f"the {cfg.encoder.name} encoder of the run {path} (step {int(state['step'])})"
    if source.kind == "texts":
        return model, None, cfg.loss.normalize, what
    example = source.eval_batch["anchor"][:4]
    example = example.float() / 255.0 if example.dtype == torch.uint8 else example.float()
    return model, example, cfg.loss.normalize, what


def export_model(model: str, out: str | Path, *, max_seq_length: int | None = None) -> Path:
    """``contrastlab export MODEL --onnx OUT``: export a named model to the folder ``out``.

    Args:
        model: ``minilm`` (the bundled all-MiniLM-L6-v2), a sentence-transformers or Hugging Face model
            folder, or a contrastlab run folder (``contrastlab train``'s output: its text encoder, or its
            MLP / CNN / ResNet-18 / ViT encoder with any projection head, on inputs of the run's shape).
        out: the export folder (must not exist, or be empty).
        max_seq_length: tokens per text for a text model (default: the model's own, or the run's).

    Returns:
        The folder.

    Raises:
        ValueError: a model that cannot be found, loaded or exported (naming ``model``), ``out`` exists
            (naming ``onnx``); nothing is written.
    """
    from contrastlab.models.text import TransformerTextEncoder, bundled_minilm_path, load_sentence_transformer

    p = Path(model).expanduser()
    if (
        p.is_dir()
        and (p / "config.json").is_file()
        and ((p / "checkpoint.pt").is_file() or (p / "checkpoints").is_dir())
    ):
        net, example, normalizes, what = _run_folder_encoder(p)
        if example is not None:
            return export_tensor_onnx(net, example, out, normalizes=normalizes, description=what)
        if not isinstance(net, TransformerTextEncoder):
            raise ValueError(f"model: the encoder of {p} is not a text model this version can export")
        return export_text_onnx(
            list(net.body),
            out,
            max_seq_length=max_seq_length or net.max_seq_length,
            normalizes=normalizes,
            description=what,
        )
    path = bundled_minilm_path() if model == "minilm" else str(p)
    try:
        st = load_sentence_transformer(path)
    except ValueError as e:
        raise ValueError(f"model: {str(e).removeprefix('path: ')}") from None
    what = "all-MiniLM-L6-v2 (bundled)" if model == "minilm" else str(p)
    # a final Normalize module makes the served embedding unit-norm (export_text_onnx leaves it out of the graph)
    return export_text_onnx(list(st), out, max_seq_length=max_seq_length or st.max_seq_length, description=what)
