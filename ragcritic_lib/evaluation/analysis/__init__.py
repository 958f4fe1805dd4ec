"""Notebook 15: every stage's metrics gathered into the papers' tables and figures.

Each table or figure is an *item* of :data:`ITEMS`, named after its counterpart in the papers
(RAG-Critic Table 3, RAGEC Table 2, SIM-RAG Fig. 3, ...). A builder reads the stage outputs
through :class:`Inputs`, which records every input it could not find (file absent, key absent,
method absent) instead of failing, and returns a :class:`Table` or ``None``. :class:`Outputs`
writes tables as CSV (tidy, raw fractions) and Markdown (formatted, percentages like the
papers), figures as PNG and SVG, and ``index.json`` mapping each paper item to its files.
Nothing is ever filled in for a missing input: the item is reported under ``missing``.

The package's parts: ``items`` (the items, inputs, tables, formatting), ``data_tables``,
``comparison``, ``critics``, ``baselines`` (the builders by topic) and ``writing`` (outputs).

pandas and matplotlib are imported inside the functions that need them.
"""

from __future__ import annotations

from ragcritic_lib.evaluation.analysis.items import (  # noqa: F401 (the package's interface)
    ABLATION_ORDER,
    EXPECTED_ABLATIONS,
    EXPECTED_METHODS,
    ITEMS,
    Inputs,
    Item,
    METHOD_NAMES,
    METHOD_STAGES,
    STAGE_FILES,
    Table,
    _isnum,
    _method_rank,
    fmt_ci,
    fmt_score,
    method_name,
    plain,
    rel,
    to_markdown,
)
from ragcritic_lib.evaluation.analysis.data_tables import (  # noqa: F401 (the package's interface)
    datasets_table,
    plot_retrieval_recall,
    retrieval_recall_table,
    source_statistics_table,
    standard_rag_table,
)
from ragcritic_lib.evaluation.analysis.comparison import (  # noqa: F401 (the package's interface)
    COMPARISON_SOURCE,
    _COMPARISON_COLS,
    _comparison_rows,
    _overall_f1,
    ablation_table,
    by_type_table,
    correction_cost_table,
    fmt_p,
    iterations_table,
    main_comparison_table,
    method_cost_table,
    plot_ablations,
    plot_iterations,
    plot_main_comparison,
)
from ragcritic_lib.evaluation.analysis.critics import (  # noqa: F401 (the package's interface)
    _is_score,
    _label_rows,
    critic_benchmark_table,
    critic_per_label_table,
    critic_scores,
    critic_training_table,
    error_distribution_table,
    known_causes_table,
    plot_critic_benchmark,
    plot_critic_per_label,
    plot_tier1_distribution,
    plot_tier2_top,
    trained_critic_accuracy,
)
from ragcritic_lib.evaluation.analysis.baselines import (  # noqa: F401 (the package's interface)
    plot_ragec_types,
    plot_simrag_confusion,
    ragec_mode_frequency_table,
    ragec_stage_table,
    ragec_types_table,
    repair_action_usage_table,
    simrag_confusion_table,
)
from ragcritic_lib.evaluation.analysis.writing import (  # noqa: F401 (the package's interface)
    Outputs,
    _round,
    standard_rag_agreement,
    status_frame,
    summary_metrics,
)
