"""The opening every stage notebook shares: :func:`setup_stage`.

A notebook's first code cell after its ``parameters`` cell is one call,
``setup = setup_stage("<stage>")``, which gives what the stage starts from: the whole params, the
stage's own section, the seed, the datasets, the stage's output folder ``data/<stage>``, its
figures and tables folders (where dvc.yaml declares them) and its metrics file.

A stage that uses models opens with :func:`ragcritic_lib.pipeline.stage_models.setup_stage` instead: the same
call and the same object, plus the generator and retrievers loaded on first use. The two are
apart so that a stage's import closure, hence its DVC dependencies, holds the model code only
where the stage runs it. The method stages 09-13 open with
:func:`ragcritic_lib.baselines.stage_setup.setup_method`, which builds on that one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

class StageSetup:
    """What a stage starts from; see :func:`setup_stage`.

    Attributes:
        stage: the DVC stage (its params section and its folder under ``data/``), e.g. ``"retrieval_rag"``.
        params: the whole params.yaml.
    """

    def __init__(self, stage: str, params: Mapping[str, Any]) -> None:
        self.stage = stage
        self.params = params

    def __repr__(self) -> str:
        return f"{type(self).__name__}(stage={self.stage!r})"

    @property
    def section(self) -> Mapping[str, Any]:
        """The stage's own params section, ``params[stage]``.

        Raises:
            KeyError: params.yaml has no section for the stage.
        """
        if self.stage not in self.params:
            raise KeyError(f"params has no section {self.stage!r} (stage {self.stage})")
        return self.params[self.stage]

    @property
    def seed(self) -> Any:
        """``params["common"]["seed"]``."""
        return self.params["common"]["seed"]

    @property
    def datasets(self) -> list[str]:
        """The datasets of ``common.datasets``, in params order."""
        return list(self.params["common"]["datasets"])

    @property
    def out_dir(self) -> Path:
        """The stage's output folder, ``data/<stage>`` (not created here)."""
        from ragcritic_lib import paths

        return paths.stage_dir(self.stage)

    @property
    def stem(self) -> str:
        """The stage's notebook stem, e.g. ``"01_retrieval_rag"``: the name of its metrics file and of
        its figures and tables folders.

        Raises:
            KeyError: no notebook ``NN_<stage>.py`` exists.
        """
        from ragcritic_lib.pipeline.params import notebook_paths

        notebooks = notebook_paths()
        if self.stage not in notebooks:
            raise KeyError(f"no notebook NN_{self.stage}.py for stage {self.stage!r}")
        return notebooks[self.stage].stem

    @property
    def metrics_path(self) -> Path:
        """The stage's metrics file, ``reports/metrics/<stem>.json``."""
        from ragcritic_lib import paths

        return paths.METRICS_DIR / f"{self.stem}.json"

    @property
    def figures_dir(self) -> Path | None:
        """``reports/figures/<stem>`` where dvc.yaml declares it an output of the stage, else None."""
        return self._declared("figures")

    @property
    def tables_dir(self) -> Path | None:
        """``reports/tables/<stem>`` where dvc.yaml declares it an output of the stage, else None."""
        return self._declared("tables")

    def _declared(self, kind: str) -> Path | None:
        from ragcritic_lib import paths

        folder = {"figures": paths.FIGURES_DIR, "tables": paths.TABLES_DIR}[kind] / self.stem
        return folder if folder.relative_to(paths.ROOT).as_posix() in _declared_outs(self.stage) else None


def _declared_outs(stage: str) -> list[str]:
    """The outs, metrics and plots dvc.yaml declares for ``stage`` (none when it has no such stage)."""
    import yaml

    from ragcritic_lib import paths

    stages = (yaml.safe_load(paths.DVC_FILE.read_text(encoding="utf-8")) or {}).get("stages") or {}
    spec = stages.get(stage) or {}
    return [o if isinstance(o, str) else next(iter(o))
            for o in spec.get("outs", []) + spec.get("metrics", []) + spec.get("plots", [])]


def check_stage_name(stage: Any, caller: str = "setup_stage") -> str:
    """``stage`` if it is a stage name (non-empty, no folder separator).

    Raises:
        ValueError: naming ``caller``.
    """
    if not isinstance(stage, str) or not stage.strip() or "/" in stage:
        raise ValueError(f"{caller}: stage must be a stage name, got {stage!r}")
    return stage


def setup_stage(stage: str, params: Mapping[str, Any] | None = None) -> StageSetup:
    """What a stage starts from; see :class:`StageSetup`. Nothing is loaded until it is used.

    Args:
        stage: the DVC stage name, e.g. ``"retrieval_rag"``.
        params: the params (default: :func:`ragcritic_lib.pipeline.params.load_params`, validated).

    Raises:
        ValueError: ``stage`` is not a non-empty name.
        ragcritic_lib.pipeline.params.ParamsError: params.yaml is invalid.
    """
    from ragcritic_lib.pipeline import params as params_module

    check_stage_name(stage)
    return StageSetup(stage, params_module.load_params() if params is None else params)
