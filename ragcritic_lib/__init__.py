"""ragcritic_lib: the shared library behind the RAG-Critic notebooks.

Importing the package is cheap: torch, transformers and vllm are imported only inside the
functions that need them.
"""

__version__ = "0.1.0"
