"""Load a repository script that is not part of the package (benchmarks/, .ci/) as a module."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from ragcritic_lib import paths


def load_script(relative_path: str) -> ModuleType:
    """The script at ``relative_path`` (from the repository root), executed as a fresh module."""
    path = paths.ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a loadable Python script")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
