"""The opening every method stage shares (notebooks 09-13): :func:`setup_method`.

Each compared method runs with standard RAG's settings (``retrieval_rag``), the one answer
setting (:func:`ragcritic_lib.rag.answer_gen_params`), the pipeline's generator and the shared
test questions (:func:`ragcritic_lib.baselines.harness.shared_test_sets`). This module is apart
from :mod:`.harness` because it loads the generator and retrievers: the comparison stage
(notebook 14) reads runs back through the harness and should not depend on that code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragcritic_lib.baselines.harness import shared_test_sets


@dataclass
class MethodSetup:
    """What a method stage starts from.

    Attributes:
        stage: the DVC stage (its folder under ``data/``), e.g. ``"self_refine"``.
        params: the whole params.yaml.
        rag: ``params["retrieval_rag"]``, standard RAG's settings: every method reuses them.
        seed: ``params["common"]["seed"]``.
        gen: the default variant's answer setting, ``answer_gen_params("default",
            rag["max_new_tokens"])``, for free-form text (Self-Refine's feedback, SIM-RAG's
            rationale). A method's final answers use :attr:`answer_gen` with :attr:`variant`
            (Self-Refine and SIM-RAG do), or pass :attr:`variant` to code that builds standard
            RAG's prompt with ``gen``.
        llm: the generator (``runtime.load_generator(params)``).
        test: {dataset: the shared test records}, datasets in ``comparison.datasets`` order.
    """

    stage: str
    params: Mapping[str, Any]
    rag: Mapping[str, Any]
    seed: Any
    gen: Any
    llm: Any
    test: dict[str, list[dict]]

    @property
    def variant(self) -> str:
        """Standard RAG's prompt variant, ``rag["prompt_variant"]``: a method's final answers use
        it (:func:`ragcritic_lib.rag.build_rag_messages` and ``extract_answer``)."""
        return str(self.rag["prompt_variant"])

    @property
    def answer_gen(self) -> Any:
        """Standard RAG's answer setting for :attr:`variant`,
        ``answer_gen_params(variant, rag["max_new_tokens"])`` (for "prefill": cut at a newline):
        the decoding of a method's final answers, where :attr:`gen` serves free-form text."""
        from ragcritic_lib.rag import answer_gen_params

        return answer_gen_params(self.variant, self.rag["max_new_tokens"])

    @property
    def datasets(self) -> list[str]:
        """The datasets of :attr:`test`, in order."""
        return list(self.test)

    @property
    def out_dir(self) -> Path:
        """The stage's output folder, ``data/<stage>``."""
        from ragcritic_lib import paths

        return paths.stage_dir(self.stage)

    def load_retrievers(self) -> dict[str, Any]:
        """{dataset: standard RAG's retriever for it} (``runtime.load_retriever(params, ds)``)."""
        from ragcritic_lib import runtime

        return {ds: runtime.load_retriever(self.params, ds) for ds in self.datasets}


def setup_method(stage: str, params: Mapping[str, Any] | None = None) -> MethodSetup:
    """Load what a method stage starts from; see :class:`MethodSetup`.

    Args:
        stage: the DVC stage name, e.g. ``"crag"``.
        params: the params (default: :func:`ragcritic_lib.pipeline.params.load_params`).

    Raises:
        ValueError: ``stage`` is not a non-empty name.
        KeyError: a dataset of ``comparison.datasets`` that ``common.datasets`` does not register.
    """
    from ragcritic_lib import runtime
    from ragcritic_lib.pipeline.params import load_params
    from ragcritic_lib.rag import answer_gen_params

    if not isinstance(stage, str) or not stage.strip() or "/" in stage:
        raise ValueError(f"setup_method: stage must be a stage name, got {stage!r}")
    params = load_params() if params is None else params
    rag = params["retrieval_rag"]
    gen = answer_gen_params("default", rag["max_new_tokens"])
    llm = runtime.load_generator(params)
    test = shared_test_sets(params)
    return MethodSetup(stage=stage, params=params, rag=rag, seed=params["common"]["seed"], gen=gen, llm=llm,
                       test=test)
