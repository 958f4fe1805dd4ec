"""The opening every method stage shares (notebooks 09-13): :func:`setup_method`.

Each compared method runs with standard RAG's settings (``retrieval_rag``), the one answer
setting (:func:`ragcritic_lib.retrieval.rag.answer_gen_params`), the pipeline's generator and the shared
test questions (:func:`ragcritic_lib.baselines.harness.shared_test_sets`). It builds on
:func:`ragcritic_lib.pipeline.setup.setup_stage`, the opening of every notebook, and is apart from
:mod:`.harness`, through which the comparison stage (notebook 14) reads the runs back without
depending on how a method stage opens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragcritic_lib.baselines.harness import shared_test_sets
from ragcritic_lib.pipeline.setup import check_stage_name
from ragcritic_lib.pipeline.stage_models import ModelStageSetup, setup_stage


class MethodSetup(ModelStageSetup):
    """What a method stage starts from: a :class:`~ragcritic_lib.pipeline.stage_models.ModelStageSetup`
    (params, seed, ``out_dir``, ``llm``, ``retriever``, ...) with standard RAG's settings and the
    shared test questions.

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
        llm: the generator (``runtime.load_generator(params)``), loaded by :func:`setup_method`.
        test: {dataset: the shared test records}, datasets in ``comparison.datasets`` order.
    """

    def __init__(self, stage: str, params: Mapping[str, Any], *, gen: Any, test: dict[str, list[dict]],
                 llm: Any) -> None:
        super().__init__(stage, params, llm=llm)
        self.rag = params["retrieval_rag"]
        self.gen = gen
        self.test = test

    @property
    def variant(self) -> str:
        """Standard RAG's prompt variant, ``rag["prompt_variant"]``: a method's final answers use
        it (:func:`ragcritic_lib.retrieval.rag.build_rag_messages` and ``extract_answer``)."""
        return str(self.rag["prompt_variant"])

    @property
    def answer_gen(self) -> Any:
        """Standard RAG's answer setting for :attr:`variant`,
        ``answer_gen_params(variant, rag["max_new_tokens"])`` (for "prefill": cut at a newline):
        the decoding of a method's final answers, where :attr:`gen` serves free-form text."""
        from ragcritic_lib.retrieval.rag import answer_gen_params

        return answer_gen_params(self.variant, self.rag["max_new_tokens"])

    @property
    def datasets(self) -> list[str]:
        """The datasets of :attr:`test` (``comparison.datasets``), in order."""
        return list(self.test)


def setup_method(stage: str, params: Mapping[str, Any] | None = None) -> MethodSetup:
    """Load what a method stage starts from; see :class:`MethodSetup`.

    :func:`~ragcritic_lib.pipeline.stage_models.setup_stage` gives the params and the stage's paths; this
    adds standard RAG's settings and the shared test questions, and loads the generator (every
    method stage uses it).

    Args:
        stage: the DVC stage name, e.g. ``"crag"``.
        params: the params (default: :func:`ragcritic_lib.pipeline.params.load_params`).

    Raises:
        ValueError: ``stage`` is not a non-empty name.
        KeyError: a dataset of ``comparison.datasets`` that ``common.datasets`` does not register.
    """
    from ragcritic_lib.retrieval.rag import answer_gen_params

    base = setup_stage(check_stage_name(stage, "setup_method"), params)
    gen = answer_gen_params("default", base.params["retrieval_rag"]["max_new_tokens"])
    llm = base.llm  # every method stage uses the generator: loaded now
    return MethodSetup(stage, base.params, gen=gen, test=shared_test_sets(base.params), llm=llm)
