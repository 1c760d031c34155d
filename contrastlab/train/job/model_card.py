"""The README model card of an exported sentence-transformers folder, from what its run recorded.

A short Markdown template (the Hugging Face card layout: YAML front matter, then sections) rather than
sentence-transformers' own card generator, which collects its facts from ``SentenceTransformerTrainer``'s
callbacks and datasets that a contrastlab run does not use. Every value comes from the run's resolved
config and its results: the base model, the data (its name and content hash), the loss and its parameters,
LoRA if any, the budget, the exported step and the held-out metrics measured at that step (with their
intervals where the run computed any). A number the run did not measure is never written: without
metrics at the exported step the card says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["model_card", "run_card_from_results", "base_model_name"]


def base_model_name(encoder: Mapping[str, Any]) -> str:
    """The base model a run's ``encoder`` config names (the bundled MiniLM, or the local folder)."""
    if encoder.get("name") == "minilm":
        return "sentence-transformers/all-MiniLM-L6-v2"
    return str(encoder.get("path"))


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v) or "(none)"
    if isinstance(v, Mapping):
        return ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) or "(none)"
    return str(v)


def _metric_rows(metrics: Mapping[str, Any]) -> list[str]:
    """Table rows ``| name | value | interval |``; a value is a float or ``{"value", "low", "high", "level"}``."""
    rows = []
    for name, m in metrics.items():
        if isinstance(m, Mapping):
            interval = f"[{m['low']:.4f}, {m['high']:.4f}] ({m.get('level', 0.95):.0%})"
            rows.append(f"| {name} | {m['value']:.4f} | {interval} |")
        else:
            rows.append(f"| {name} | {float(m):.4f} | not computed |")
    return rows


def model_card(
    *,
    config: Mapping[str, Any],
    step: int,
    metrics: Mapping[str, Any] | None,
    version: str,
    similarity: str,
    data_provenance: Mapping[str, Any] | None = None,
    parameters: Mapping[str, int] | None = None,
    learned: Mapping[str, float] | None = None,
    runtime_s: float | None = None,
) -> str:
    """The README.md text of a run's exported model.

    Args:
        config: the run's resolved config (``config.json``: ``encoder``, ``data``, ``loss``, ``train``, …).
        step: the optimiser step whose weights the folder holds.
        metrics: held-out metrics measured at ``step`` (name → value, or ``{"value", "low", "high",
            "level"}`` with an interval); None or empty: the card says none were measured at that step.
        version: contrastlab's version.
        similarity: the folder's similarity function (``cosine`` or ``dot``).
        data_provenance: the data's provenance (``results.json``'s ``data_provenance``: path, rows, sha256).
        parameters: ``{"trainable", "total"}`` parameter counts of the run.
        learned: learned loss parameters at ``step`` (τ, bias).
        runtime_s: the training's wall-clock seconds.

    Returns:
        Markdown with YAML front matter.
    """
    enc, data, loss = config.get("encoder", {}), config.get("data", {}), config.get("loss", {})
    train, optim = config.get("train", {}), config.get("train", {}).get("optim", {})
    base = base_model_name(enc)
    prov = dict(data_provenance or {})
    lines = [
        "---",
        "library_name: sentence-transformers",
        f"base_model: {base}",
        "pipeline_tag: sentence-similarity",
        "tags: [sentence-transformers, feature-extraction, contrastlab]",
        "---",
        "",
        f"# {base}, fine-tuned with contrastlab",
        "",
        f"A sentence-transformers model ({similarity} similarity) written by contrastlab {version} from one "
        f"`contrastlab train` run. Every number below was recorded by that run.",
        "",
        "## Base model",
        "",
        f"- {base} (encoder `{enc.get('name')}`, max_seq_length {enc.get('max_seq_length')})",
    ]
    lora = enc.get("lora") or {}
    if int(lora.get("r", 0)) > 0:
        lines.append(
            f"- LoRA adapters (Hu et al. 2021, arXiv 2106.09685): r = {lora['r']}, alpha = {_value(lora['alpha'])}, "
            f"dropout = {_value(lora['dropout'])}, targets {_value(lora['targets'])}; merged into the weights "
            "of this folder (it loads without peft)"
        )
    if parameters:
        lines.append(f"- parameters trained: {parameters['trainable']:,} of {parameters['total']:,}")
    lines += ["", "## Training data", ""]
    lines.append(f"- `{data.get('name')}`" + (f" ({prov['kind']})" if "kind" in prov else ""))
    for key in ("path", "rows", "columns", "sha256"):
        if key in prov:
            lines.append(f"- {key}: `{_value(prov[key])}`")
    if "sha256" not in prov:
        lines.append("- content hash: not recorded by the run")
    scored = prov.get("teacher_scores")
    if isinstance(scored, Mapping):
        lines.append(
            f"- teacher scores: `{scored.get('path')}` (teacher `{scored.get('teacher')}`, "
            f"sha256 `{scored.get('sha256')}`)"
        )
    lines += ["", "## Loss", ""]
    lines.append(f"- `{loss.get('name')}`, temperature {_value(loss.get('temperature'))}" + (
        " (learned; its start value)" if loss.get("learnable_temperature") else ""
    ))  # fmt: skip
    lines.append(f"- symmetric: {loss.get('symmetric')}, normalize: {loss.get('normalize')}")
    if loss.get("options"):
        lines.append(f"- options: {_value(loss['options'])}")
    if loss.get("bias") is not None or loss.get("learnable_bias"):
        lines.append(
            f"- bias: {_value(loss.get('bias'))}"
            + (" (learned; its start value)" if loss.get("learnable_bias") else "")
        )
    for key, value in (learned or {}).items():
        lines.append(f"- learned {key} at step {step}: {value:.6g}")
    dims = (config.get("matryoshka") or {}).get("dims") or []
    if dims:
        lines.append(f"- Matryoshka prefixes: {_value(dims)}")
    neg = config.get("negatives") or {}
    columns = [c for c in prov.get("columns") or [] if str(c).startswith("negative")]
    if columns and isinstance(scored, Mapping):
        lines.append(
            f"- candidates: each row's positive and its {len(columns)} negative column(s), scored by the teacher"
        )
    elif columns:
        lines.append(f"- negatives: each row's {len(columns)} negative column(s) (per anchor)")
    elif neg:
        lines.append(f"- negatives: {neg.get('kind')}")
    lines += ["", "## Budget", ""]
    lines.append(
        f"- {train.get('steps')} steps of batch {data.get('batch_size')}, seed {train.get('seed')}, "
        f"precision {train.get('precision')}, device {train.get('device')}"
    )
    lines.append(
        f"- optimiser {optim.get('name')}, lr {_value(optim.get('lr'))}, weight decay "
        f"{_value(optim.get('weight_decay'))}, warm-up {optim.get('warmup_steps')} steps, schedule {optim.get('schedule')}"
    )
    if runtime_s is not None:
        lines.append(f"- training time: {runtime_s:.0f} s")
    lines += ["", "## Selected step and held-out metrics", "", f"The folder holds the weights of step {step}."]
    if metrics:
        lines += [
            "Metrics on the run's held-out set at that step:",
            "",
            "| metric | value | interval |",
            "|---|---|---|",
            *_metric_rows(metrics),
        ]
    else:
        lines.append("No held-out metric was measured at that step.")
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        'model = SentenceTransformer("PATH/TO/THIS/FOLDER")',
        'embeddings = model.encode(["a sentence", "another one"])',
        "```",
        "",
    ]
    return "\n".join(lines)


def run_card_from_results(config: Mapping[str, Any], results: Mapping[str, Any], step: int) -> str:
    """:func:`model_card` of a run at ``step`` from its config and ``results.json`` dict (possibly empty).

    The held-out metrics are the row of the results' evaluation table at exactly ``step``; the learned loss
    parameters and the training time are used only when the results were written for the model at ``step``
    (``model_step``). A step the run did not evaluate gets a card that says no metric was measured.
    """
    import contrastlab

    metrics: dict[str, Any] = {}
    for table in results.get("tables", []):
        cols = table.get("columns", [])
        for row in table.get("rows", []):
            if cols[:1] == ["step"] and row[0] == step:
                metrics = {c.removeprefix("eval/"): v for c, v in zip(cols[1:], row[1:], strict=True) if v is not None}
    same_step = results.get("model_step") == step
    return model_card(
        config=config,
        step=step,
        metrics=metrics,
        version=contrastlab.__version__,
        similarity="cosine" if (config.get("loss") or {}).get("normalize", True) else "dot",
        data_provenance=results.get("data_provenance"),
        parameters=results.get("parameters"),
        learned=results.get("learned") if same_step else None,
        runtime_s=results.get("runtime_s") if same_step else None,
    )
