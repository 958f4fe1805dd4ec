"""Build the run-time objects a notebook needs from params.yaml: datasets, retrievers, LLMs.

Notebooks call these so that swapping a model, a server or a FlashRAG dataset is a params
change only. Retrievers and LLMs are memoized per process (a notebook builds each once).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.data.flashrag import dataset_paths, load_corpus_records, load_dataset_split


def dataset_names(params: Mapping[str, Any]) -> list[str]:
    """Names of the datasets in ``common.datasets`` (in params order)."""
    return list(params["common"]["datasets"])


def load_split(params: Mapping[str, Any], dataset: str, split: str, *, limit: int | None = None) -> list[dict]:
    """One split of a registered dataset; every record's metadata names its dataset."""
    records = load_dataset_split(dataset_paths(params["common"]["datasets"], dataset)[split], limit=limit)
    for r in records:
        r["metadata"].setdefault("dataset", dataset)
    return records


@lru_cache(maxsize=8)
def _corpus(path: str):
    from ragcritic_lib.retrieval import Corpus

    return Corpus.from_records(load_corpus_records(path))


def load_corpus(params: Mapping[str, Any], dataset: str):
    """The :class:`~ragcritic_lib.retrieval.Corpus` of a registered dataset (memoized)."""
    return _corpus(str(dataset_paths(params["common"]["datasets"], dataset)["corpus"]))


def retriever_config(params: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """``common.retriever`` with model paths resolved against the repository root."""
    cfg = dict(params["common"]["retriever"])
    cfg.update(overrides)
    for key in ("encoder", "reranker"):
        if isinstance(cfg.get(key), str):
            cfg[key] = str(paths.resolve(cfg[key]))
    return cfg


_RETRIEVERS: dict[tuple, Any] = {}
_RETRIEVERS_LOCK = threading.RLock()  # pool members sampled in threads share the memo


def load_retriever(params: Mapping[str, Any], dataset: str, **overrides: Any):
    """A retriever over the dataset's corpus built from ``common.retriever`` plus overrides; its
    indexes come from the ones stage retrieval_rag ships (``data/indexes``) when their content
    keys match, else from the index cache, else they are built."""
    from ragcritic_lib.retrieval import build_retriever

    cfg = retriever_config(params, **overrides)
    corpus_path = str(dataset_paths(params["common"]["datasets"], dataset)["corpus"])
    # Keyed by the corpus file too: the same dataset name may point at another corpus later.
    key = (dataset, corpus_path, tuple(sorted((k, str(v)) for k, v in cfg.items())))
    with _RETRIEVERS_LOCK:
        if key not in _RETRIEVERS:
            retriever = build_retriever(cfg, load_corpus(params, dataset), shipped_dirs=[paths.INDEXES_DIR])
            # What built it, so that samples drawn with it are keyed by config and corpus content.
            retriever.provenance = {"config": cfg, "corpus_path": corpus_path}
            _RETRIEVERS[key] = retriever
        return _RETRIEVERS[key]


def generator_config(params: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """``common.generator`` with local model/adapter paths resolved (server names are kept)."""
    cfg = dict(params["common"]["generator"])
    cfg.update({k: v for k, v in overrides.items()})
    return paths.resolve_llm_paths(cfg)


def build_llm(cfg: Mapping[str, Any]):
    """:func:`ragcritic_lib.llm.load_llm` on a config whose paths
    :func:`ragcritic_lib.paths.resolve_llm_paths` resolved."""
    from ragcritic_lib.llm import load_llm

    return load_llm(paths.resolve_llm_paths(cfg))


_LLMS: dict[tuple, Any] = {}


def _memoized_llm(cfg: Mapping[str, Any]):
    from ragcritic_lib.llm import load_llm

    key = tuple(sorted((k, str(v)) for k, v in cfg.items()))
    if key not in _LLMS:
        _LLMS[key] = load_llm(cfg)
    return _LLMS[key]


def load_generator(params: Mapping[str, Any], **overrides: Any):
    """The generator LLM of ``common.generator`` (memoized per config)."""
    return _memoized_llm(generator_config(params, **overrides))


# ---------------------------------------------------------------------------------------------
# Base models of trained critics and planners, and their checkpoints
# ---------------------------------------------------------------------------------------------
def resolve_base_model(params: Mapping[str, Any], override: str, *, key: str) -> str:
    """The local model folder a critic or planner is trained from.

    ``override`` (a params key such as ``critic_sft.base_model``, named by ``key`` in errors)
    wins when set; ``""`` means the generator's model, which must then be a local folder: a
    served generator (backend openai) or a model name that is no folder here cannot be trained.

    Raises:
        ValueError: naming ``key`` when neither gives a local model folder with a config.json.
    """
    if not isinstance(override, str):
        raise ValueError(f"{key}: expected a local model folder or \"\", got {override!r}")
    if override.strip():
        folder = paths.resolve(override.strip())
        if not folder.is_dir():
            raise ValueError(f"{key}: {override!r} is not a local model folder")
        from ragcritic_lib.critic import forms as model_forms

        if model_forms.is_shipped(folder) and not (folder / "adapter_config.json").is_file():
            return str(model_forms.materialize(folder))  # a shipped full fine-tune, rebuilt on its base
        if not (folder / "config.json").is_file():
            what = "a LoRA adapter (merge it into its base first)" if (folder / "adapter_config.json").is_file() \
                else "no model checkpoint (no config.json)"
            raise ValueError(f"{key}: {override!r} is {what}")
        return str(folder)
    gen = params["common"]["generator"]
    backend, model = gen.get("backend", "hf"), gen.get("model")
    if backend == "openai":
        raise ValueError(f"{key}: the generator is served (backend {backend}, model {model!r}); "
                         "set a local checkpoint folder to train from")
    folder = paths.resolve(model) if isinstance(model, str) and model else None
    if folder is None or not (folder / "config.json").is_file():
        raise ValueError(f"{key}: the generator's model {model!r} (backend {backend}) is not a local model "
                         "folder; set a local checkpoint folder to train from")
    return str(folder)


def checkpoint_kind(checkpoint: str | Path) -> str:
    """``"adapter"`` for a LoRA adapter folder (adapter_config.json, shipped or not), ``"shipped"``
    for a full fine-tune shipped in a compact form (``ship_manifest.json``, see
    :mod:`ragcritic_lib.critic.forms`), ``"full"`` for a model checkpoint (config.json).

    Raises:
        FileNotFoundError: the folder is missing or is none of these.
    """
    from ragcritic_lib.critic import forms as model_forms

    folder = Path(checkpoint)
    if (folder / "adapter_config.json").is_file():
        return "adapter"
    if (folder / model_forms.MANIFEST).is_file():
        return "shipped"
    if (folder / "config.json").is_file():
        return "full"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such checkpoint folder")
    raise FileNotFoundError(f"{folder}: neither a LoRA adapter (adapter_config.json), a shipped model "
                            f"({model_forms.MANIFEST}) nor a model checkpoint (config.json)")


def checkpoint_folder(checkpoint: str | Path, *, base_model: str | None = None) -> Path:
    """A folder a model loader reads: a shipped full form rebuilt on its base (hash checked) into
    ``.cache/models``, otherwise the folder itself."""
    from ragcritic_lib.critic import forms as model_forms

    folder = paths.resolve(checkpoint)
    if checkpoint_kind(folder) == "shipped":
        return model_forms.materialize(folder, base=paths.resolve(base_model) if base_model else None)
    return folder


def _read_json_object(path: Path) -> dict[str, Any]:
    import json

    from ragcritic_lib.io import DataFormatError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise DataFormatError(f"{path}: expected a JSON object")
    return data


def recorded_base_model(adapter_dir: str | Path) -> str:
    """The local base model a LoRA adapter was trained on.

    A shipped adapter's manifest names its base (checked by hash). Otherwise read from the
    training result that records it: ``train_result.json`` inside the adapter
    folder, or a ``*train_result.json`` beside it whose ``adapter_dir`` is this folder (repo-relative
    paths, so the record survives a move of the repository); else from peft's
    ``adapter_config.json`` (``base_model_name_or_path``, as given at training time).

    Raises:
        FileNotFoundError: naming the record, when the recorded base is no local folder, or the
            adapter folder when no base is recorded anywhere.
    """
    from ragcritic_lib.critic import forms as model_forms

    folder = paths.resolve(adapter_dir)
    if model_forms.is_shipped(folder):  # a shipped adapter names its base by path and hash
        return str(model_forms.manifest_base(folder))
    real = folder.resolve()
    records = [folder / "train_result.json"] + sorted(folder.parent.glob("*train_result.json"))
    for rec in records:
        if not rec.is_file():
            continue
        data = _read_json_object(rec)
        trained = data.get("adapter_dir")
        if rec.parent != folder and not (isinstance(trained, str) and paths.resolve(trained).resolve() == real):
            continue
        base = data.get("base_model")
        if not isinstance(base, str) or not base:
            raise FileNotFoundError(f"{rec}: records no base_model for the adapter {folder}")
        if not paths.resolve(base).is_dir():
            raise FileNotFoundError(f"{rec}: the base model {base!r} of the adapter {folder} is not a local folder")
        return str(paths.resolve(base))
    base = _read_json_object(folder / "adapter_config.json").get("base_model_name_or_path")
    if isinstance(base, str) and base and paths.resolve(base).is_dir():
        return str(paths.resolve(base))
    raise FileNotFoundError(f"{folder}: LoRA adapter without a local base model (no train_result.json records "
                            f"one; adapter_config.json names {base!r})")


def training_start(checkpoint: str | Path, *, base_model: str = "", key: str = "base_model") -> dict[str, str | None]:
    """Where further training (e.g. DPO) starts from a trained checkpoint: an adapter continues on
    its recorded base, a full checkpoint is its own base.

    ``base_model`` (the value of params key ``key``) may name the base too; it must then agree.

    Raises:
        ValueError: naming ``key`` when ``base_model`` disagrees with the checkpoint.
    """
    folder = paths.resolve(checkpoint)
    if checkpoint_kind(folder) in ("full", "shipped"):
        folder = checkpoint_folder(folder)
        if base_model:
            raise ValueError(f"{key}: set to {base_model!r}, but {folder} is a full checkpoint and training "
                             "continues from it; leave it empty")
        return {"base_model": str(folder), "init_adapter": None}
    base = recorded_base_model(folder)
    if base_model and paths.resolve(base_model).resolve() != Path(base).resolve():
        raise ValueError(f"{key}: {base_model!r} is not the base the adapter {folder} was trained on ({base})")
    return {"base_model": base, "init_adapter": str(folder)}


def trained_model_config(params: Mapping[str, Any], checkpoint: str | Path, *,
                         base_model: str | None = None) -> dict[str, Any]:
    """The LLM config of a trained critic or planner: ``common.generator``'s runtime settings with
    the checkpoint as the model (full fine-tuning; a shipped compact form is rebuilt on its base
    into ``.cache/models``) or as a LoRA adapter on its own base (recorded at training time, or
    ``base_model``), never on the generator unless that is the base.

    Trained weights are local, so with a served generator (backend openai) they run on the hf
    backend; the server settings are left out.
    """
    from ragcritic_lib.llm import _BACKEND_KEYS, _COMMON_KEYS

    folder = paths.resolve(checkpoint)
    kind = checkpoint_kind(folder)
    cfg = generator_config(params)
    if cfg.get("backend") == "openai":
        cfg = {k: v for k, v in cfg.items() if k in _COMMON_KEYS | _BACKEND_KEYS["hf"]}
        cfg["backend"] = "hf"
    if cfg.get("adapter"):  # the generator's own adapter belongs to the generator, not to a trained model
        del cfg["adapter"]
    if kind == "adapter":
        from ragcritic_lib.critic import forms as model_forms

        if base_model and model_forms.is_shipped(folder):
            model_forms.manifest_base(folder, paths.resolve(base_model))  # the given base must be the recorded one
        cfg["model"] = str(paths.resolve(base_model)) if base_model else recorded_base_model(folder)
        cfg["adapter"] = str(folder)
    else:
        cfg["model"] = str(checkpoint_folder(folder, base_model=base_model if kind == "shipped" else None))
    return cfg


def load_trained_model(params: Mapping[str, Any], checkpoint: str | Path, *, base_model: str | None = None):
    """The LLM of a trained checkpoint, full or adapter (see :func:`trained_model_config`; memoized)."""
    return _memoized_llm(trained_model_config(params, checkpoint, base_model=base_model))


def load_start_model(params: Mapping[str, Any], start: Mapping[str, Any]):
    """The model a training start describes (``{"base_model", "init_adapter"}``, from
    :func:`training_start` or :func:`ragcritic_lib.critic.training.dpo_start`): the adapter on that
    base, or the base model itself."""
    if start.get("init_adapter"):
        return load_trained_model(params, start["init_adapter"], base_model=start["base_model"])
    return load_trained_model(params, start["base_model"])


def release_llms() -> bool:
    """Free the process's vLLM engine and its GPU memory (before training in the same process, or
    when a stage is done with its model). Memoized LLMs stay usable: a vLLM backend rebuilds its
    engine on its next call. Returns True when an engine was freed."""
    import gc

    from ragcritic_lib.llm import release_vllm_engine

    freed = release_vllm_engine()
    gc.collect()
    return freed


def _locked(factory: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    lock = threading.Lock()

    def build(cfg: Mapping[str, Any]) -> Any:
        with lock:  # one backend per config even when members start at the same moment
            return factory(cfg)

    return build


def sample_pool(
    records: Sequence[Mapping[str, Any]],
    pool: Sequence[Any],
    retrievers: Any,
    *,
    out_path: str | Path,
    chunk_size: int = 32,
    parallel_members: int = 4,
    progress: bool = False,
    llm_factory: Callable[[Mapping[str, Any]], Any] | None = None,
) -> list[dict[str, Any]]:
    """:func:`ragcritic_lib.mining.sampling.sample_error_responses` with served pool members sampled at
    the same time.

    Members on an OpenAI-compatible server (``backend: openai``) spend their time waiting for
    the servers, so up to ``parallel_members`` of them run in threads, each writing its own
    resumable side log next to ``out_path`` (seeded with its rows already in ``out_path``).
    The side logs are then appended to ``out_path`` and ``sample_error_responses`` runs once over
    the whole pool: it finds the served members done (their fingerprints match), samples the
    local-model members (hf, vllm: one model at a time, so a vLLM engine is freed between base
    models), and compacts the log to exactly one record per (question, member). The vLLM engine
    is freed at the end.

    Returns:
        The records of every (question, member) pair, in member order, as
        ``sample_error_responses`` returns them.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ragcritic_lib.mining import sampling as mining
    from ragcritic_lib.io import append_jsonl, read_jsonl_tolerant, write_jsonl

    if isinstance(parallel_members, bool) or not isinstance(parallel_members, int) or parallel_members < 1:
        raise ValueError(f"parallel_members must be an int >= 1, got {parallel_members!r}")
    out_path = Path(out_path)
    factory = _locked(llm_factory or mining.shared_llm)
    served = [m for m in pool if m.llm.get("backend") == "openai"]
    parts: dict[str, Path] = {}
    if parallel_members > 1 and len(served) > 1:
        existing = read_jsonl_tolerant(out_path, repair=True)
        for i, m in enumerate(served):
            # Index + sanitised name: two members never share a side log.
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", m.name)
            parts[m.name] = out_path.with_name(f"{out_path.stem}.member{i}-{safe}.jsonl")
            if not parts[m.name].exists():
                write_jsonl(parts[m.name], [r for r in existing if r.get("pool_member") == m.name])
        with ThreadPoolExecutor(max_workers=min(parallel_members, len(served)), thread_name_prefix="pool") as ex:
            futures = [ex.submit(mining.sample_error_responses, records, [m], retrievers, out_path=parts[m.name],
                                 chunk_size=chunk_size, llm_factory=factory, progress=progress) for m in served]
            for fut in futures:
                fut.result()
        for m in served:
            append_jsonl(out_path, read_jsonl_tolerant(parts[m.name]))
    result = mining.sample_error_responses(records, pool, retrievers, out_path=out_path, chunk_size=chunk_size,
                                           llm_factory=factory, progress=progress)
    for part in parts.values():
        part.unlink(missing_ok=True)
    if any(m.llm.get("backend") == "vllm" for m in pool):
        release_llms()
    return result
