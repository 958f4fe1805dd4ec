"""The opening of a stage that uses models: :func:`setup_stage`, as in :mod:`.setup`, plus the
generator and retrievers, each loaded on first use.

Apart from :mod:`.setup` so that a stage's import closure, hence its DVC dependencies, holds the
model code (:mod:`ragcritic_lib.runtime` and what it builds on) only where the stage runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragcritic_lib import runtime
from ragcritic_lib.pipeline.setup import StageSetup
from ragcritic_lib.pipeline.setup import setup_stage as base_setup_stage

_UNLOADED = object()


class ModelStageSetup(StageSetup):
    """A :class:`~ragcritic_lib.pipeline.setup.StageSetup` that also gives the stage's models, each
    loaded on first use: the generator (:attr:`llm`) and retrievers (:meth:`retriever`)."""

    def __init__(self, stage: str, params: Mapping[str, Any], *, llm: Any = _UNLOADED) -> None:
        super().__init__(stage, params)
        self._llm = llm  # loaded on first use of :attr:`llm` unless given

    def __repr__(self) -> str:
        loaded = "loaded" if self._llm is not _UNLOADED else "not loaded"
        return f"{type(self).__name__}(stage={self.stage!r}, generator {loaded})"

    @property
    def llm(self) -> Any:
        """The generator (:func:`ragcritic_lib.runtime.load_generator`), loaded on first use and kept."""
        if self._llm is _UNLOADED:
            self._llm = runtime.load_generator(self.params)
        return self._llm

    def retriever(self, dataset: str, **overrides: Any) -> Any:
        """The retriever of ``common.retriever`` (plus ``overrides``) over the dataset's corpus
        (:func:`ragcritic_lib.runtime.load_retriever`, which builds each one once per process)."""
        return runtime.load_retriever(self.params, dataset, **overrides)

    def load_retrievers(self) -> dict[str, Any]:
        """{dataset: the configured retriever for it}, over :attr:`datasets`."""
        return {ds: self.retriever(ds) for ds in self.datasets}


def setup_stage(stage: str, params: Mapping[str, Any] | None = None) -> ModelStageSetup:
    """:func:`ragcritic_lib.pipeline.setup.setup_stage` for a stage that uses models: the same
    params and paths, plus the generator and retrievers loaded on first use.

    Raises:
        ValueError: ``stage`` is not a non-empty name.
        ragcritic_lib.pipeline.params.ParamsError: params.yaml is invalid.
    """
    base = base_setup_stage(stage, params)
    return ModelStageSetup(base.stage, base.params)
