"""Low-rank adapters (LoRA, Hu et al. 2021, arXiv 2106.09685) on a text encoder, through ``peft``.

LoRA freezes a pretrained weight W and trains a low-rank update: a targeted linear layer computes
``W x + (α/r) · B A x`` with ``A`` of shape ``(r, d_in)`` (Kaiming-uniform), ``B`` of shape ``(d_out, r)``
initialised to zero (Hu et al. §4.1), so at step 0 the adapted model *is* the base model, and only ``A``
and ``B`` train. :func:`apply_lora` injects peft's LoRA layers in place (:func:`peft.inject_adapter_in_model`)
into every linear layer whose name ends in one of ``targets`` (e.g. BERT's ``query``, ``value``) and that
takes part in the forward pass, and leaves every other parameter frozen. A layer takes part unless all its
parameters are already frozen when the adapters go in: the text encoder freezes what its embedding never
reaches (:meth:`~contrastlab.models.text.TransformerTextEncoder.probe`; BERT's pooler under mean pooling),
and an adapter there would never receive a gradient (``DistributedDataParallel`` refuses such parameters).
:func:`merge_lora` folds ``(α/r) B A`` into ``W`` and puts the plain layers back, so a merged model needs
no peft (peft is the optional extra ``contrastlab[lora]``).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

__all__ = ["apply_lora", "merge_lora", "lora_targets", "count_parameters"]


def _linear_layers(model: nn.Module) -> dict[str, bool]:
    """``name -> in the forward pass`` for every linear layer of ``model`` (some parameter of it requires grad)."""
    return {
        name: any(p.requires_grad for p in m.parameters())
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
    }


def lora_targets(model: nn.Module, targets: Sequence[str]) -> dict[str, list[str]]:
    """The linear layers of ``model`` each target names that take part in the forward pass (adapters go there).

    A target names a layer by its full name or its last parts (peft's rule). A layer whose parameters are all
    frozen (``requires_grad=False``) is outside the forward pass the loss sees and is left out.

    Returns:
        ``target -> [module names]`` (an empty list for a target that names no such layer).
    """
    used = [name for name, in_use in _linear_layers(model).items() if in_use]
    return {t: [n for n in used if n == t or n.endswith(f".{t}")] for t in targets}


def apply_lora(model: nn.Module, *, r: int, alpha: float, dropout: float, targets: Sequence[str]) -> nn.Module:
    """Inject LoRA adapters into ``model`` in place and freeze everything else; return ``model``.

    Args:
        model: a module holding the targeted ``nn.Linear`` layers (a text encoder).
        r: the adapters' rank (>= 1).
        alpha: the scale α (the update is ``(α/r) B A``).
        dropout: dropout on the adapters' input (training only).
        targets: names of linear layers (the full name or its last parts, e.g. ``query``); a named layer whose
            parameters are all frozen gets no adapter (see :func:`lora_targets`).

    Raises:
        ValueError: a target that names no linear layer of ``model`` (named ``targets``, with the layers'
            short names), or only frozen ones.
        ImportError: peft is not installed.
    """
    layers = _linear_layers(model)
    found = lora_targets(model, targets)
    missing = [t for t, names in found.items() if not names]
    if missing:
        frozen = {
            t: [n for n, in_use in layers.items() if not in_use and (n == t or n.endswith(f".{t}"))] for t in missing
        }
        if all(frozen.values()):
            named = "; ".join(f"{t!r}: {', '.join(frozen[t])}" for t in missing)
            raise ValueError(
                f"targets: only frozen linear layers, outside the forward pass, are named ({named}); an adapter "
                "there would never train"
            )
        short = sorted({n.rsplit(".", 1)[-1] for n in layers})
        raise ValueError(
            f"targets: {', '.join(repr(t) for t in missing if not frozen[t])} names no linear layer of the model; "
            f"its linear layers: {', '.join(short) or '(none)'}"
        )
    import peft

    config = peft.LoraConfig(
        r=r,
        lora_alpha=alpha,  # type: ignore[arg-type]  # annotated int; peft computes the scale α/r in float
        lora_dropout=dropout,
        target_modules=sorted({n for names in found.values() for n in names}),  # full names: exact matches
        bias="none",
    )
    peft.inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA adapter of ``model`` into its base layer and put the plain layer back; return ``model``.

    A model without adapters is returned unchanged (peft need not be installed then).
    """
    layers = [(name, m) for name, m in model.named_modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer")]
    for name, layer in layers:
        layer.merge()  # type: ignore[operator]
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer.get_base_layer())  # type: ignore[operator]
    return model


def count_parameters(model: nn.Module) -> dict[str, int]:
    """``{"trainable": …, "total": …}`` parameter counts of ``model`` (shared tensors counted once)."""
    seen: dict[int, tuple[int, bool]] = {}
    for p in model.parameters():
        seen[id(p)] = (p.numel(), p.requires_grad)
    return {"trainable": sum(n for n, t in seen.values() if t), "total": sum(n for n, _ in seen.values())}
