"""Writing a stage's metrics JSON with the facts that explain differences between machines.

Two runs of the same stage can differ because the generator ran in another dtype (``auto``
picks bf16 on CPUs with AVX512-BF16 or AMX and fp32 elsewhere), on another CPU class (the same
bf16 code gave other answers on an AMX CPU than on an AVX512-BF16 one without AMX) or under other
library versions. ``write_stage_metrics`` adds an ``environment`` block with those facts to every
metrics file, so a reader comparing two files sees why they may disagree: the generator's device
and dtype, the ``cpu_class`` (:func:`cpu_class`), and under ``upstream`` the dtype and CPU class
of each stage whose outputs this one read (from that stage's metrics file). Where an upstream's
differ from this stage's, ``provenance`` says so in plain sentences; the stage still runs. The
stage runner adds ``wall_seconds`` once the notebook has finished (:func:`record_wall_seconds`).

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
CPU_CLASSES = ("amx", "avx512_bf16", "avx2", "cuda", "other")
_CPUINFO = Path("/proc/cpuinfo")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_class(device: str = "cpu", cpuinfo: str | None = None) -> str:
    """The class of machine the generator's arithmetic ran on, one of :data:`CPU_CLASSES`.

    ``cuda`` for a generator on a GPU; otherwise the best of the CPU's flags ``amx_bf16``,
    ``avx512_bf16`` and ``avx2`` (``other`` when none, or when ``/proc/cpuinfo`` is unreadable).

    Args:
        device: the generator's resolved device.
        cpuinfo: the text of ``/proc/cpuinfo`` (default: read it).
    """
    if str(device).startswith("cuda"):
        return "cuda"
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "other"
    flags = {f for line in cpuinfo.splitlines() if line.split(":", 1)[0].strip() == "flags"
             for f in line.split(":", 1)[1].split()}
    return next((c for c, flag in (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("avx2", "avx2"))
                 if flag in flags), "other")


def environment(generator: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Python and package versions, the generator's resolved device and dtype, and the CPU class.

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
    env["cpu_class"] = cpu_class(device)
    return env


def producing_stages(stage: str, root: Path | None = None) -> dict[str, list[str]]:
    """``{upstream stage: [its outputs that stage reads]}`` from dvc.yaml (templates resolved)."""
    from ragcritic_lib.pipeline.deps import load_pipeline, stage_reads

    return stage_reads(load_pipeline(root)[1], stage)


def upstream_environments(stage: str, metrics_dir: Path | None = None,
                          root: Path | None = None) -> dict[str, dict[str, Any]]:
    """Per producing stage: what it read from there, and that stage's generator dtype and CPU class.

    Read from the producing stage's metrics file; a stage whose file is missing is left out, and a
    file written before ``cpu_class`` was recorded gives ``cpu_class`` None.
    """
    from ragcritic_lib.io import read_json
    from ragcritic_lib.pipeline.params import notebook_paths

    metrics_dir = Path(metrics_dir or paths.METRICS_DIR)
    notebooks = notebook_paths(Path(root or paths.ROOT) / "notebooks")
    out: dict[str, dict[str, Any]] = {}
    for producer, read in producing_stages(stage, root).items():
        file = metrics_dir / f"{notebooks[producer].stem}.json" if producer in notebooks else None
        if file is None or not file.exists():
            continue
        env = read_json(file).get(ENVIRONMENT_KEY) or {}
        out[producer] = {"read": read, "dtype": (env.get("generator") or {}).get("dtype"),
                         "cpu_class": env.get("cpu_class")}
    return out


def provenance(env: Mapping[str, Any], upstream: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One sentence per upstream stage made under another dtype or CPU class than ``env``'s.

    A CPU class that was not recorded (a file written before it was) counts as no difference.
    """
    dtype, cls = env["generator"]["dtype"], env.get("cpu_class")
    lines = []
    for up in upstream.values():
        other_dtype, other_cls = up.get("dtype"), up.get("cpu_class")
        if (other_dtype and other_dtype != dtype) or (other_cls and cls and other_cls != cls):
            lines.append(f"read {', '.join(up['read'])} made in {other_dtype or 'an unrecorded dtype'} on "
                         f"{other_cls or 'an unrecorded CPU class'}; this stage ran in {dtype} on {cls}")
    return lines


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
    env = environment(generator)
    stage = stem.split("_", 1)[1] if stem[:2].isdigit() and "_" in stem else stem
    env["upstream"] = upstream_environments(stage)
    if lines := provenance(env, env["upstream"]):
        env["provenance"] = lines
    data = {**metrics, ENVIRONMENT_KEY: env}
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


def record_wall_seconds(stem: str, seconds: float, *, metrics_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Add the stage's own wall time to ``environment.wall_seconds`` of its metrics file.

    Called by the stage runner after the notebook has finished; returns the file, or None when
    the notebook wrote none (nothing is created then).
    """
    from ragcritic_lib.io import read_json, write_json

    path = Path(metrics_dir if metrics_dir is not None else paths.METRICS_DIR) / f"{stem}.json"
    if not path.exists():
        return None
    data = read_json(path)
    if not isinstance(data.get(ENVIRONMENT_KEY), dict):
        return None
    data[ENVIRONMENT_KEY]["wall_seconds"] = round(float(seconds), 1)
    return write_json(path, data)
