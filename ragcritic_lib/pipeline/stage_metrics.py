"""Writing a stage's metrics JSON with the facts that explain differences between machines.

Two runs of the same stage can differ because the generator ran in another dtype (``auto``
picks bf16 on CPUs with AVX512-BF16 or AMX and fp32 elsewhere) or under other library versions.
``write_stage_metrics`` adds an ``environment`` block with those facts to every metrics file,
so a reader comparing two files sees why they may disagree.

Every file is checked against its stem's schema (:mod:`ragcritic_lib.pipeline.metrics_schema`): before it
is written, so a stage never leaves a file its readers cannot rely on, and after it is read back
by :func:`load_stage_metrics`.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from ragcritic_lib import paths
from ragcritic_lib.pipeline.metrics_schema import validate

ENVIRONMENT_KEY = "environment"
_PACKAGES = ("torch", "transformers", "peft", "trl", "vllm")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment(generator: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Python and package versions, and the generator's resolved device and dtype.

    Args:
        generator: the ``common.generator`` params (default: read from params.yaml). Only the hf
            backend resolves ``auto`` here; a served or vLLM generator reports what was asked.
    """
    if generator is None:
        from ragcritic_lib.pipeline.params import load_params

        generator = load_params()["common"]["generator"]
    env: dict[str, Any] = {"python": platform.python_version()}
    env.update({pkg: v for pkg in _PACKAGES if (v := _version(pkg)) is not None})
    dtype, device = str(generator.get("dtype", "auto")), str(generator.get("device", "cpu"))
    if generator.get("backend", "hf") == "hf":
        from ragcritic_lib.llm import _resolve_device, _resolve_dtype

        device = _resolve_device(device)
        dtype = _resolve_dtype(dtype, device)
    env["generator"] = {"backend": generator.get("backend", "hf"), "device": device, "dtype": dtype}
    return env


def write_stage_metrics(stem: str, metrics: Mapping[str, Any], *,
                        generator: Mapping[str, Any] | None = None) -> Path:
    """Write ``reports/metrics/<stem>.json`` with the environment block added.

    Args:
        stem: the notebook's stem, e.g. ``"01_retrieval_rag"``.
        metrics: the stage's metrics; must not use the key ``environment`` itself.
        generator: see :func:`environment`.

    Raises:
        ragcritic_lib.pipeline.metrics_schema.MetricsSchemaError: the metrics do not match the stem's
            schema (naming the file and each key path); nothing is written then.
    """
    from ragcritic_lib.io import write_json

    if ENVIRONMENT_KEY in metrics:
        raise ValueError(f"metrics of {stem}: the key {ENVIRONMENT_KEY!r} is reserved for the environment block")
    path = paths.METRICS_DIR / f"{stem}.json"
    data = {**metrics, ENVIRONMENT_KEY: environment(generator)}
    validate(stem, data, source=path)
    return write_json(path, data)


def load_stage_metrics(stem: str, *, metrics_dir: str | os.PathLike[str] | None = None,
                       partial: bool = False) -> dict[str, Any]:
    """The validated contents of ``<metrics_dir>/<stem>.json`` (default ``reports/metrics``).

    The dict matches the stem's schema, e.g. ``ragcritic_lib.pipeline.metrics_schema.CorrectionMetrics``
    for ``"08_correction"`` (``typing.cast`` it to that ``TypedDict`` for a typed view).

    Args:
        partial: allow absent keys (present ones are still checked); for readers that report
            each absent key themselves, like notebook 15's ``analysis.Inputs``.

    Raises:
        ragcritic_lib.paths.MissingUpstreamError: the file is missing; names the stage to
            ``dvc repro`` (a plain FileNotFoundError outside the repository's metrics folder).
        ragcritic_lib.io.DataFormatError: the file is not JSON (naming file and line).
        ragcritic_lib.pipeline.metrics_schema.MetricsSchemaError: it does not match its schema.
    """
    from ragcritic_lib.io import read_json

    path = paths.require(Path(metrics_dir if metrics_dir is not None else paths.METRICS_DIR) / f"{stem}.json")
    data = read_json(path)
    validate(stem, data, source=path, partial=partial)
    return data
