"""The error critic (RAG-Critic §3.2): its prompt, target and parser (:mod:`critics`), the
evidence it sees (:mod:`evidence`), its training data (:mod:`data`, :mod:`corpus`), SFT and
coarse-to-fine DPO (:mod:`train`, on the trainers of :mod:`training`), and the balanced RAG-Error
benchmark it is scored on (:mod:`benchmark`).
"""
