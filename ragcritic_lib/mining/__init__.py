"""Error mining (RAG-Critic §3.1): sample answers from a pool of LLM configurations, judge them
with an error rationale, tag errors open-set, and cluster the tags into a three-tier taxonomy.

Modules: :mod:`sampling` (the pool and its judged samples, D_error), :mod:`evidence` (what a
judge sees of the retrieved passages), :mod:`teachers` (the judges and taggers), :mod:`tagging`
(open-set tags, normalized) and :mod:`taxonomy` (Ward clustering into the three tiers).
"""
