"""Trained models in a form small enough to clone: an adapter, or what changed against the base.

A trained critic used to leave a merged bf16 checkpoint (~270 MB for a 135M model). What it
ships instead depends on how it was trained:

- ``adapter``: a LoRA result is its peft adapter (``adapter_config.json`` +
  ``adapter_model.safetensors``, bf16); loaders put it on the base model.
- a full fine-tune ships the most faithful of these that fits ``ship_max_mb``:
  ``layers`` (every tensor that differs from the base, in bf16: exactly the merged checkpoint's
  weights), ``delta8`` (the difference to the base, int8 with one float32 scale per row) or
  ``lowrank`` (a truncated SVD of each changed matrix's difference at the largest rank that
  fits, bf16 factors). Vectors that changed (norm weights) ship whole in bf16 in every form.

Every form carries ``ship_manifest.json``: the form, the base model by the sha256 of its
safetensors file(s) and by its folder (repository-relative, with the params key that names
it), the dtype the model is rebuilt in and one entry per shipped tensor. :func:`rebuild_model`
puts the shipped tensors on the base in memory; :func:`materialize` writes the rebuilt model to
``.cache/models/<hash>`` for a backend that loads a folder. Both refuse a base whose hash
differs, naming the manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragcritic_lib import paths

MANIFEST = "ship_manifest.json"
WEIGHTS = "weights.safetensors"
FULL_FORMS = ("layers", "delta8", "lowrank")  # most faithful first
FORMS = ("adapter", *FULL_FORMS)
_OVERHEAD = 64 * 1024  # safetensors header and manifest, reserved inside the budget
_HASHES: dict[tuple[str, int, int], str] = {}


class BaseMismatch(ValueError):
    """The base model on disk is not the one a shipped form was made against."""


# --------------------------------------------------------------------------------------------
# Base identity
# --------------------------------------------------------------------------------------------
def _file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def base_sha256(folder: str | os.PathLike[str]) -> str:
    """The content hash of a model folder's weights: the sha256 of its one safetensors file, or of
    the lines ``<name> <sha256>`` of several (sorted by name).

    Raises:
        FileNotFoundError: the folder holds no ``*.safetensors`` file.
    """
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors weights to identify the base model by")
    if len(files) == 1:
        return _file_sha256(files[0])
    return hashlib.sha256("".join(f"{f.name} {_file_sha256(f)}\n" for f in files).encode()).hexdigest()


def _repo_relative(folder: str | os.PathLike[str]) -> str:
    p = Path(folder).absolute()
    return str(p.relative_to(paths.ROOT)) if p.is_relative_to(paths.ROOT) else str(p)


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a shipped model folder.

    Raises:
        FileNotFoundError: no manifest; ValueError: naming the manifest when it is not one.
    """
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such manifest (not a shipped model folder)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("form") not in FORMS or not isinstance(data.get("base"), dict):
        raise ValueError(f"{path}: expected an object with 'form' (one of {FORMS}) and 'base'")
    return data


def is_shipped(folder: str | os.PathLike[str]) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def manifest_base(folder: str | os.PathLike[str], base: str | os.PathLike[str] | None = None) -> Path:
    """The base folder of a shipped form (``base``, else the recorded path), its hash checked.

    Raises:
        BaseMismatch: naming the manifest when the base's weights are not the recorded ones, or
            the recorded base folder is missing.
    """
    manifest_path = Path(folder) / MANIFEST
    m = read_manifest(folder)
    rec = m["base"]
    where = paths.resolve(base) if base else paths.resolve(rec.get("path", ""))
    if not where.is_dir():
        raise BaseMismatch(f"{manifest_path}: its base model {rec.get('path')!r} (params {rec.get('params_key')}) "
                           "is not a local folder here")
    got = base_sha256(where)
    if got != rec.get("sha256"):
        raise BaseMismatch(f"{manifest_path}: the base model {where} has weights sha256 {got[:12]}..., but this "
                           f"form was made against {str(rec.get('sha256'))[:12]}... (params {rec.get('params_key')}); "
                           "restore that base or retrain")
    return where


# --------------------------------------------------------------------------------------------
# Sizes and choice of form
# --------------------------------------------------------------------------------------------
def changed_tensors(trained: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """Names of the tensors of ``trained`` that differ from ``base`` (bitwise, in float32)."""
    import torch

    out = []
    for name, t in trained.items():
        b = base.get(name)
        if b is None or tuple(b.shape) != tuple(t.shape):
            raise ValueError(f"tensor {name!r}: not in the base model with the same shape")
        if not torch.equal(t.detach().float(), b.detach().float()):
            out.append(name)
    return out


def form_bytes(shapes: Mapping[str, Sequence[int]], form: str, rank: int = 0) -> int:
    """Bytes of tensor data a form of the changed tensors ``shapes`` takes (no header)."""
    total = 0
    for shape in shapes.values():
        n = 1
        for d in shape:
            n *= int(d)
        if len(shape) != 2 or form == "layers":
            total += 2 * n
        elif form == "delta8":
            total += n + 4 * int(shape[0])
        elif form == "lowrank":
            total += 2 * min(rank, *map(int, shape)) * (int(shape[0]) + int(shape[1]))
        else:
            raise ValueError(f"unknown form {form!r} (expected one of {FULL_FORMS})")
    return total


def largest_rank(shapes: Mapping[str, Sequence[int]], max_bytes: int) -> int:
    """The largest rank whose ``lowrank`` form fits ``max_bytes`` (0 when not even rank 1 does)."""
    top = max((min(map(int, s)) for s in shapes.values() if len(s) == 2), default=0)
    lo, hi = 0, top
    while lo < hi:  # form_bytes grows with the rank
        mid = (lo + hi + 1) // 2
        if form_bytes(shapes, "lowrank", mid) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def choose_form(shapes: Mapping[str, Sequence[int]], max_mb: float,
                forms: Sequence[str] = FULL_FORMS) -> tuple[str, int]:
    """(form, rank) of the most faithful form within ``max_mb`` (MB = 10^6 bytes): layers, then
    delta8, then lowrank at the largest rank that fits (rank 0 for the other forms).

    Raises:
        ValueError: naming ``ship_max_mb`` when not even rank 1 fits.
    """
    budget = int(max_mb * 1e6) - _OVERHEAD
    for form in forms:
        if form == "lowrank":
            r = largest_rank(shapes, budget)
            if r >= 1:
                return form, r
        elif form_bytes(shapes, form) <= budget:
            return form, 0
    need = form_bytes(shapes, "lowrank", 1) + _OVERHEAD
    raise ValueError(f"ship_max_mb {max_mb}: no form of the {len(shapes)} changed tensors fits "
                     f"(rank-1 low-rank needs {need / 1e6:.2f} MB)")


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------
def encode(trained: Mapping[str, Any], base: Mapping[str, Any], names: Sequence[str], form: str,
           rank: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(tensors to store, manifest entries) of ``names`` in ``form``."""
    import torch

    tensors: dict[str, Any] = {}
    entries: list[dict[str, Any]] = []
    for name in names:
        t = trained[name].detach().float()
        entry: dict[str, Any] = {"name": name, "shape": list(t.shape)}
        if t.dim() != 2 or form == "layers":
            entry["encoding"] = "value"
            tensors[name] = t.to(torch.bfloat16).contiguous()
        else:
            delta = t - base[name].detach().float()
            if form == "delta8":
                scale = delta.abs().amax(dim=1) / 127.0
                q = torch.where(scale[:, None] > 0, delta / scale.clamp_min(1e-30)[:, None], torch.zeros_like(delta))
                entry["encoding"] = "delta8"
                tensors[name + ".q"] = q.round().clamp(-127, 127).to(torch.int8).contiguous()
                tensors[name + ".scale"] = scale.contiguous()
            elif form == "lowrank":
                r = min(rank, *t.shape)
                u, s, vh = torch.linalg.svd(delta, full_matrices=False)
                entry.update(encoding="lowrank", rank=r)
                tensors[name + ".a"] = (u[:, :r] * s[:r]).to(torch.bfloat16).contiguous()
                tensors[name + ".b"] = vh[:r].to(torch.bfloat16).contiguous()
            else:
                raise ValueError(f"unknown form {form!r} (expected one of {FULL_FORMS})")
        entries.append(entry)
    return tensors, entries


def decode(entry: Mapping[str, Any], tensors: Mapping[str, Any], base: Any) -> Any:
    """The float32 weight of one manifest entry, given the base's tensor."""
    name, enc = entry["name"], entry["encoding"]
    if enc == "value":
        return tensors[name].float()
    if enc == "delta8":
        return base.float() + tensors[name + ".q"].float() * tensors[name + ".scale"].float()[:, None]
    if enc == "lowrank":
        return base.float() + tensors[name + ".a"].float() @ tensors[name + ".b"].float()
    raise ValueError(f"tensor {name!r}: unknown encoding {enc!r}")


def _base_record(base_folder: str | os.PathLike[str], base_key: str) -> dict[str, str]:
    return {"sha256": base_sha256(base_folder), "path": _repo_relative(base_folder), "params_key": base_key}


def folder_mb(folder: str | os.PathLike[str]) -> float:
    """Size of the files in a folder, MB (10^6 bytes)."""
    return round(sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 1e6, 2)


def _write_manifest(out: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def _fresh(out_dir: str | os.PathLike[str]) -> Path:
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


def ship_full(trained: Mapping[str, Any], base_folder: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
              max_mb: float, base_key: str, dtype: str = "bfloat16", forms: Sequence[str] = FULL_FORMS,
              base_state: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write a fully fine-tuned model's state dict ``trained`` in the most faithful form within
    ``max_mb`` to ``out_dir`` (emptied first); returns the manifest.

    Args:
        base_folder: the model it was trained from (the manifest records its hash and path).
        base_key: the params key that names that base (e.g. ``critic_sft.base_model``).
        dtype: the dtype the model is rebuilt in.
        base_state: the base's state dict when already loaded.
    """
    from safetensors.torch import save_file

    base = dict(base_state) if base_state is not None else _load_state(base_folder)
    names = changed_tensors(trained, base)
    shapes = {n: list(trained[n].shape) for n in names}
    form, rank = choose_form(shapes, max_mb, forms) if names else ("layers", 0)
    tensors, entries = encode(trained, base, names, form, rank)
    out = _fresh(out_dir)
    save_file(tensors, str(out / WEIGHTS))
    manifest = {"form": form, "rank": rank, "dtype": dtype, "ship_max_mb": max_mb,
                "base": _base_record(base_folder, base_key), "tensors": entries}
    _write_manifest(out, manifest)
    manifest["mb"] = folder_mb(out)
    return _write_manifest(out, manifest)


def ship_adapter(model: Any, out_dir: str | os.PathLike[str], *, base_folder: str | os.PathLike[str], base_key: str,
                 lora_config: Any, dtype: str = "bfloat16") -> dict[str, Any]:
    """Write the LoRA weights injected into ``model`` (peft ``inject_adapter_in_model``, adapter
    "default") in bf16 as a peft adapter folder with its manifest; returns the manifest."""
    import torch
    from safetensors.torch import save_file

    out = _fresh(out_dir)
    state = {"base_model.model." + n.replace(".default.", "."): p.detach().to(torch.bfloat16).contiguous()
             for n, p in model.named_parameters() if "lora_" in n}
    if not state:
        raise ValueError(f"{out}: the model carries no LoRA weights to ship as an adapter")
    cfg = copy_config(lora_config, base_folder)
    cfg.save_pretrained(str(out))
    save_file(state, str(out / "adapter_model.safetensors"))
    manifest = {"form": "adapter", "rank": int(cfg.r), "dtype": dtype, "base": _base_record(base_folder, base_key),
                "tensors": [{"name": n, "shape": list(t.shape), "encoding": "lora"} for n, t in state.items()]}
    _write_manifest(out, manifest)
    manifest["mb"] = folder_mb(out)
    return _write_manifest(out, manifest)


def ship_adapter_dir(adapter_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                     base_folder: str | os.PathLike[str], base_key: str, dtype: str = "bfloat16") -> dict[str, Any]:
    """Ship a saved peft adapter folder (e.g. TRL's): its config (base recorded repository-relative)
    and weights in bf16, without checkpoints or optimizer state; returns the manifest."""
    import torch
    from peft import LoraConfig
    from safetensors.torch import load_file, save_file

    src = Path(adapter_dir)
    weights = src / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: no adapter weights to ship")
    cfg = copy_config(LoraConfig.from_pretrained(str(src)), base_folder)
    out = _fresh(out_dir)
    cfg.save_pretrained(str(out))
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(str(weights)).items()}
    save_file(state, str(out / "adapter_model.safetensors"))
    manifest = {"form": "adapter", "rank": int(cfg.r), "dtype": dtype, "base": _base_record(base_folder, base_key),
                "tensors": [{"name": n, "shape": list(t.shape), "encoding": "lora"} for n, t in sorted(state.items())]}
    _write_manifest(out, manifest)
    manifest["mb"] = folder_mb(out)
    return _write_manifest(out, manifest)


def load_adapter_into(model: Any, adapter_dir: str | os.PathLike[str]) -> Any:
    """Inject a saved peft adapter into ``model`` (adapter "default", weights trainable later)
    and return its LoraConfig: the cached trainer continues an adapter this way."""
    import torch
    from peft import LoraConfig, inject_adapter_in_model
    from safetensors.torch import load_file

    cfg = LoraConfig.from_pretrained(str(adapter_dir))
    inject_adapter_in_model(cfg, model)
    named = dict(model.named_parameters())
    with torch.no_grad():
        for key, value in load_file(str(Path(adapter_dir) / "adapter_model.safetensors")).items():
            name = key.removeprefix("base_model.model.")
            for part in ("lora_A", "lora_B"):
                name = name.replace(f".{part}.", f".{part}.default.")
            if name not in named:
                raise ValueError(f"{adapter_dir}: adapter tensor {key!r} has no place in the model")
            named[name].copy_(value.to(named[name].dtype))
    return cfg


def copy_config(lora_config: Any, base_folder: str | os.PathLike[str]) -> Any:
    """``lora_config`` for a saved adapter: causal LM task, base recorded repository-relative."""
    import copy

    cfg = copy.deepcopy(lora_config)
    cfg.base_model_name_or_path = _repo_relative(base_folder)
    cfg.task_type = "CAUSAL_LM"
    return cfg


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------
def _load_state(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The float32 state dict of a model folder, as the model sees it (tied weights under both names)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).state_dict()


def plain_config(model: Any, dtype: str) -> None:
    """Describe ``model`` as a plain checkpoint in ``dtype``: a base converted from GGUF may still
    carry its quantization config, which a rebuilt or merged model no longer has."""
    if getattr(model.config, "quantization_config", None) is not None:
        model.config.quantization_config = None
        try:
            delattr(model.config, "quantization_config")
        except AttributeError:
            pass
    model.config.dtype = dtype


def apply_form(model: Any, folder: str | os.PathLike[str]) -> Any:
    """Put a full form's tensors onto ``model`` (the base, loaded) in place; returns it."""
    import torch
    from safetensors.torch import load_file

    m = read_manifest(folder)
    if m["form"] == "adapter":
        raise ValueError(f"{Path(folder) / MANIFEST}: an adapter is put on its base by peft, not by apply_form")
    tensors = load_file(str(Path(folder) / WEIGHTS))
    state = model.state_dict()
    with torch.no_grad():
        for entry in m["tensors"]:
            if entry["name"] not in state:
                raise ValueError(f"{Path(folder) / MANIFEST}: tensor {entry['name']!r} is not in the base model")
            target = state[entry["name"]]
            target.copy_(decode(entry, tensors, target).to(target.dtype))
    return model


def rebuild_model(folder: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None,
                  dtype: str | None = None) -> Any:
    """The trained model a shipped folder stands for, in memory: the base (hash checked) with the
    adapter merged in or the shipped tensors put on, in ``dtype`` (default: the manifest's)."""
    import torch
    from transformers import AutoModelForCausalLM

    m = read_manifest(folder)
    base_dir = manifest_base(folder, base)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    if m["form"] == "adapter":
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    else:
        apply_form(model, folder)
    out_dtype = dtype or m.get("dtype", "bfloat16")
    model = model.to(getattr(torch, out_dtype))
    plain_config(model, out_dtype)
    return model


def cache_root() -> Path:
    """Where rebuilt models are written (outside data/, git-ignored): ``.cache/models``."""
    return Path(os.environ.get("RAGCRITIC_MODEL_CACHE", paths.ROOT / ".cache" / "models"))


def content_key(folder: str | os.PathLike[str]) -> str:
    """A hash of a shipped folder's files (names and contents): the name of its rebuilt copy."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        h.update(f"{f.relative_to(folder)} {_file_sha256(f)}\n".encode())
    return h.hexdigest()[:24]


def materialize(folder: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None,
                root: str | os.PathLike[str] | None = None) -> Path:
    """A model folder (config, safetensors, tokenizer) of a shipped full form, rebuilt once into
    ``<root>/<content hash>`` (default :func:`cache_root`) and reused while the form and the base
    are unchanged. The base hash is checked on every call."""
    from transformers import AutoTokenizer

    base_dir = manifest_base(folder, base)
    key = content_key(folder)
    out = Path(root or cache_root()) / key
    if (out / "config.json").is_file() and (out / ".complete").is_file():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    model = rebuild_model(folder, base=base_dir)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok_src = folder if (Path(folder) / "tokenizer_config.json").is_file() else base_dir
    AutoTokenizer.from_pretrained(str(tok_src)).save_pretrained(str(tmp))
    (tmp / ".complete").write_text(str(Path(folder).absolute()) + "\n", encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def model_folder(folder: str | os.PathLike[str], *, base: str | os.PathLike[str] | None = None) -> Path:
    """A folder a backend can load: a shipped full form's rebuilt copy, otherwise ``folder``
    itself (a checkpoint, or an adapter whose base hash is checked when it has a manifest)."""
    folder = Path(folder)
    if not is_shipped(folder):
        return folder
    if read_manifest(folder)["form"] == "adapter":
        manifest_base(folder, base)
        return folder
    return materialize(folder, base=base)


def ship_check(trained_scores: Sequence[float], shipped_scores: Sequence[float], labels: Sequence[bool], *,
               auroc: Callable[[Sequence[float], Sequence[bool]], float | None], tolerance: float = 0.02
               ) -> dict[str, Any]:
    """How far the shipped form's dev scores are from the trained model's: both AUROCs, the mean
    absolute score difference, and ``flag`` when the shipped AUROC is more than ``tolerance`` lower."""
    a, b = auroc(trained_scores, labels), auroc(shipped_scores, labels)
    diff = sum(abs(x - y) for x, y in zip(trained_scores, shipped_scores)) / max(1, len(labels))
    loss = None if a is None or b is None else round(a - b, 4)
    return {"dev_auroc_trained": None if a is None else round(a, 4),
            "dev_auroc_shipped": None if b is None else round(b, 4),
            "auroc_loss": loss, "mean_abs_margin_diff": round(diff, 4),
            "flag": bool(loss is not None and loss > tolerance)}
