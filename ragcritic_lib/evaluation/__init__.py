"""Scoring and reporting results: answer and retrieval scores (``scoring``), per-stage summaries
(``summaries``), paired statistics (``stats``), the "Reading the numbers" texts (``readings``) and
the papers' tables and figures gathered from every stage (``analysis``)."""
