"""onnxruntime encoders of export folders (:mod:`contrastlab.export.onnx`), verified before they are parsed.

:func:`read_export` reads ``onnx.json`` (its own checksum verified) and checks the size and SHA-256 of
every file it lists; only then is ``model.onnx`` handed to onnxruntime, as the bytes that were hashed (so
the file cannot change in between). A truncated or corrupted file is refused with
:class:`~contrastlab.io.CorruptFileError`, whose message starts with the file's path.

:class:`OnnxTextEncoder` is a drop-in for the audit's text encoder (:mod:`contrastlab.audit.inputs`):
called on a list of texts it returns their raw (pre-normalisation) embeddings as a float32 tensor, so
``contrastlab audit EXPORT_FOLDER`` audits the exported model. :class:`OnnxTensorEncoder` runs an exported
MLP / CNN / ResNet-18 / ViT on arrays of the shape it was exported for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from contrastlab.export.layout import FORMAT_NAME, FORMAT_VERSION, META_FILE, MODEL_FILE, OUTPUTS, TOKENIZER_DIR
from contrastlab.io import CorruptFileError, read_json_verified, sha256_file

__all__ = ["OnnxTextEncoder", "OnnxTensorEncoder", "is_export_folder", "load_onnx", "read_export"]


def is_export_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding an ``onnx.json`` (an ONNX export, to be verified on loading)."""
    p = Path(path).expanduser()
    return p.is_dir() and (p / META_FILE).is_file()


def read_export(path: str | Path) -> tuple[dict[str, Any], bytes]:
    """``(onnx.json's contents, model.onnx's bytes)`` of an export folder, every listed file verified.

    Raises:
        ValueError: ``path`` is not an export folder (naming ``model``).
        CorruptFileError: ``onnx.json`` fails its checksum or is not an export's, a listed file is missing,
            truncated (its size differs) or corrupted (its SHA-256 differs); the message names the file.
    """
    root = Path(path).expanduser()
    meta_path = root / META_FILE
    if not meta_path.is_file():
        raise ValueError(f"model: {root} holds no {META_FILE} (not a contrastlab ONNX export)")
    meta = read_json_verified(meta_path)
    if meta.get("format") != FORMAT_NAME or meta.get("format_version") != FORMAT_VERSION:
        raise CorruptFileError(
            f"{meta_path} is not a {FORMAT_NAME} version {FORMAT_VERSION} sidecar "
            f"(format {meta.get('format')!r}, version {meta.get('format_version')!r})"
        )
    files = meta.get("files")
    if not isinstance(files, dict) or MODEL_FILE not in files:
        raise CorruptFileError(f"{meta_path} lists no {MODEL_FILE}")
    model_bytes = b""
    for name, info in sorted(files.items()):
        rel = Path(str(name))
        # only files inside the folder are ever opened: a listed "../x" or "/dev/zero" would be read
        if rel.is_absolute() or ".." in rel.parts or not isinstance(info, dict):
            raise CorruptFileError(f"{meta_path} lists a file outside the export folder: {str(name)[:80]!r}")
        f = root / rel
        if not f.is_file():
            raise CorruptFileError(f"{f} is missing (listed in {META_FILE})")
        size = f.stat().st_size
        if size != info.get("bytes"):
            raise CorruptFileError(
                f"{f} is truncated or changed: {size} bytes where {META_FILE} lists {info.get('bytes')}"
            )
        if name == MODEL_FILE:
            import hashlib

            model_bytes = f.read_bytes()
            digest = hashlib.sha256(model_bytes).hexdigest()
        else:
            digest = sha256_file(f)
        if digest != info.get("sha256"):
            raise CorruptFileError(f"{f} is corrupted: its SHA-256 does not match {META_FILE}")
    return meta, model_bytes


def _session(model_bytes: bytes, where: Path, threads: int | None) -> Any:
    """An onnxruntime CPU session of the verified bytes.

    Raises:
        ValueError: onnxruntime is not installed (naming ``onnx``), ``threads`` < 1.
        CorruptFileError: onnxruntime cannot parse the graph.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise ValueError("onnx: running an export needs the onnx extra (pip install 'contrastlab[onnx]')") from None
    options = ort.SessionOptions()
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int or None, got {threads!r}")
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no per-session warnings on stderr
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # every level, this CPU's too
    try:
        return ort.InferenceSession(model_bytes, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception classes
        first = " ".join(str(e).split())[:200]
        raise CorruptFileError(f"{where / MODEL_FILE} cannot be loaded by onnxruntime ({first})") from None


class _OnnxEncoder:
    """What both encoders share: the verified folder, its sidecar and an onnxruntime session."""

    def __init__(self, path: str | Path, kind: str, threads: int | None) -> None:
        self.path = Path(path).expanduser()
        self.meta, model_bytes = read_export(self.path)
        if self.meta.get("kind") != kind:
            raise ValueError(f"model: {self.path} is an ONNX export of a {self.meta.get('kind')} encoder, not {kind}")
        self.session = _session(model_bytes, self.path, threads)
        self.dim = int(self.meta["dim"])
        self.normalizes = bool(self.meta["normalizes"])
        self.description = f"{self.meta.get('description', self.path)} (ONNX, {self.path})"
        self.input_names = [i.name for i in self.session.get_inputs()]

    def _run(self, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        embedding, raw = self.session.run(list(OUTPUTS), feeds)
        return embedding, raw


class OnnxTextEncoder(_OnnxEncoder):
    """An exported text model: tokenises as sentence-transformers does, then runs the graph.

    Args:
        path: the export folder.
        max_seq_length: tokens per text (default: the exported model's ``max_seq_length``).
        threads: onnxruntime's intra-op threads (default: onnxruntime's choice, one per core).

    Raises:
        ValueError, CorruptFileError: see :func:`read_export`; a folder of another kind of encoder.
    """

    def __init__(self, path: str | Path, *, max_seq_length: int | None = None, threads: int | None = None) -> None:
        super().__init__(path, "text", threads)
        if max_seq_length is not None and (
            isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) or max_seq_length < 1
        ):
            raise ValueError(f"max_seq_length must be a positive int, got {max_seq_length!r}")
        self.max_seq_length = max_seq_length or int(self.meta["max_seq_length"])
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path / TOKENIZER_DIR), local_files_only=True)

    def tokenize(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The graph's int64 inputs: padded to the longest text, truncated to ``max_seq_length`` tokens."""
        enc = self.tokenizer(
            list(texts), padding=True, truncation="longest_first", max_length=self.max_seq_length, return_tensors="np"
        )
        return {n: np.asarray(enc[n], dtype=np.int64) for n in self.input_names}

    def run_texts(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(embedding, raw_embedding)``, each ``(len(texts), D)`` float32."""
        if not texts:
            raise ValueError("texts: no text to encode")
        return self._run(self.tokenize(texts))

    def encode(self, texts: list[str], *, normalize: bool | None = None) -> np.ndarray:
        """``(len(texts), D)`` float32 embeddings: the served ones, or explicitly normalised or raw."""
        embedding, raw = self.run_texts(texts)
        if normalize is None:
            return embedding
        if not normalize:
            return raw
        norm = np.linalg.norm(raw, axis=1, keepdims=True)
        return raw / np.where(norm > 0, norm, 1.0)

    def __call__(self, texts: list[str]) -> Tensor:
        """Raw (pre-normalisation) embeddings of ``texts``: ``(len(texts), D)`` float32 (the audit's encoder)."""
        return torch.from_numpy(np.ascontiguousarray(self.run_texts(texts)[1]))


class OnnxTensorEncoder(_OnnxEncoder):
    """An exported MLP / CNN / ResNet-18 / ViT: float inputs of the exported per-row shape.

    Raises:
        ValueError, CorruptFileError: see :func:`read_export`; a folder of another kind of encoder.
    """

    def __init__(self, path: str | Path, *, threads: int | None = None) -> None:
        super().__init__(path, "tensor", threads)
        self.input_shape = tuple(int(s) for s in self.meta["input_shape"])

    def run(self, x: np.ndarray | Tensor) -> tuple[np.ndarray, np.ndarray]:
        """``(embedding, raw_embedding)`` of ``x`` of shape ``(B, *input_shape)``, each ``(B, D)`` float32.

        Raises:
            ValueError: ``x`` has another per-row shape.
        """
        arr = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
        if arr.ndim != len(self.input_shape) + 1 or tuple(arr.shape[1:]) != self.input_shape:
            raise ValueError(f"x must have shape (B, {', '.join(map(str, self.input_shape))}), got {arr.shape}")
        return self._run({"input": np.ascontiguousarray(arr, dtype=np.float32)})

    def __call__(self, x: np.ndarray | Tensor) -> Tensor:
        """The served embeddings of ``x`` as a float32 tensor ``(B, D)``."""
        return torch.from_numpy(np.ascontiguousarray(self.run(x)[0]))


def load_onnx(
    path: str | Path, *, max_seq_length: int | None = None, threads: int | None = None
) -> OnnxTextEncoder | OnnxTensorEncoder:
    """The onnxruntime encoder of an export folder (text or tensor, as ``onnx.json`` says), verified first.

    Raises:
        ValueError, CorruptFileError: see :func:`read_export`.
    """
    meta_path = Path(path).expanduser() / META_FILE
    if not meta_path.is_file():
        raise ValueError(f"model: {Path(path).expanduser()} holds no {META_FILE} (not a contrastlab ONNX export)")
    if read_json_verified(meta_path).get("kind") == "text":  # each encoder then verifies every file
        return OnnxTextEncoder(path, max_seq_length=max_seq_length, threads=threads)
    return OnnxTensorEncoder(path, threads=threads)
