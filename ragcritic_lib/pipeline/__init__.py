"""The pipeline's own tooling, apart from the research code.

``stage`` runs one notebook as a DVC stage; ``setup`` is the one call every notebook opens with
(params, the stage's paths, its models loaded on first use); ``params`` and ``profiles`` read and
check params.yaml before any compute; ``deps`` keeps dvc.yaml's dependencies equal to each notebook's import
closure; ``stage_metrics`` and ``metrics_schema`` write and check the metrics files;
``outputs`` writes figures and tables; ``notebooks`` and ``exercises`` keep the ``.ipynb`` twins and
the exercise notebooks in step; ``html_report`` renders the executed notebooks; ``workspace``
copies the repository for isolated runs; ``readme`` writes README's result tables from the
metrics files.
"""
