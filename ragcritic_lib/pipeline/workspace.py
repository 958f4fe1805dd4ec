"""Copies of the repository for isolated pipeline runs (the smoke test, the browser tests and the
repro benchmark), and the hand-over of one built copy to later tests.

A cold `dvc repro` at the smoke profile is the costliest thing the test suite does. The smoke test
builds one; the browser tests need the same stages at the same sizes. When ``RAGCRITIC_SMOKE_WORKSPACE``
names a folder (``.ci/run`` sets it), the smoke test builds its copy there and marks it with the
fingerprint of the source it was copied from (:func:`mark_built`); a later test copies it
(:func:`copy_built`) only when the fingerprint still matches the source, and then runs its own
`dvc repro` on it, which redoes whatever is not up to date. Unset, every test builds its own copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ragcritic_lib import paths


SMOKE_WORKSPACE_ENV = "RAGCRITIC_SMOKE_WORKSPACE"
BUILT_MARKER = ".git/ragcritic-built.json"  # inside .git: no commit of the copy takes it along


def _listed_files(src: Path) -> list[str]:
    """The files git would see (tracked + untracked-not-ignored), sorted, as paths relative to ``src``."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=src,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted(rel for rel in set(filter(None, listed)) if (src / rel).is_file())


def copy_repository(dest: Path, src: Path = paths.ROOT) -> Path:
    """Copy the files git would see (tracked + untracked-not-ignored) into ``dest`` and make it a
    git repository of its own, so DVC runs there exactly as in a fresh clone."""
    for rel in _listed_files(src):
        d = dest / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(src / rel, d)
        except FileNotFoundError:   # an untracked file another process removed after the listing
            continue
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest


def source_fingerprint(src: Path = paths.ROOT) -> str:
    """SHA-256 over the names and contents of the files :func:`copy_repository` copies: two copies
    with one fingerprint started from the same source."""
    digest = hashlib.sha256()
    for rel in _listed_files(src):
        try:
            with (src / rel).open("rb") as fh:
                digest.update(rel.encode() + b"\0")
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except FileNotFoundError:   # removed after the listing: not part of what a copy holds
            continue
        digest.update(b"\0")
    return digest.hexdigest()


def mark_built(root: Path, *, fingerprint: str, profile: str, targets: list[str] | None = None) -> Path:
    """Record that ``root`` holds a finished `dvc repro` of ``targets`` (None: every stage) at
    ``profile``, copied from the source whose fingerprint is given; returns the marker's path."""
    marker = root / BUILT_MARKER
    marker.write_text(json.dumps({"fingerprint": fingerprint, "profile": profile, "targets": targets},
                                 indent=1) + "\n")
    return marker


def built_workspace(where: str | os.PathLike | None, *, profile: str, fingerprint: str) -> Path | None:
    """The built copy at ``where`` when its marker says it holds every stage at ``profile`` from
    the source with ``fingerprint``; None when ``where`` is unset or empty, the marker missing or
    unreadable, or any of them differs (a copy of other code or sizes is never reused)."""
    if not where:
        return None
    root = Path(where)
    try:
        marker = json.loads((root / BUILT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict):
        return None
    if marker.get("fingerprint") != fingerprint or marker.get("profile") != profile or marker.get("targets") is not None:
        return None
    return root


def copy_built(src: Path, dest: Path) -> Path:
    """A copy of the built copy ``src`` at ``dest``: its files, outputs, caches and git history,
    without its marker (the copy is the caller's to change) and without links being followed."""
    marker = src / BUILT_MARKER
    shutil.copytree(src, dest, symlinks=True,
                    ignore=lambda d, names: [marker.name] if Path(d) == marker.parent else [])
    return dest


def pipeline_env(root: Path, cache_dir: Path) -> dict[str, str]:
    """Environment for running the pipeline of a repository copy with its own caches; the
    asset wheels already downloaded are shared."""
    env = dict(os.environ)
    venv_bin = Path(os.sys.executable).parent
    env.update({
        "RAGCRITIC_ROOT": str(root),
        "RAGCRITIC_CACHE_DIR": str(cache_dir),
        "RAGCRITIC_WHEELS_DIR": str(paths.WHEELS_DIR),
        "DVC_NO_ANALYTICS": "1",
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(root),
    })
    return env


@contextlib.contextmanager
def temporary_copy(prefix: str, *, keep: bool = False) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A copy of the repository (:func:`copy_repository`) in a new temporary folder, with caches of
    its own (:func:`pipeline_env`): yields (the folder, the copy's root, the environment to run it
    with); the folder is removed afterwards unless ``keep``, which prints where it is."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        root = copy_repository(tmp / "repo")
        yield tmp, root, pipeline_env(root, tmp / "cache")
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path | None = None) -> tuple[float, str]:
    """Run a command, return (seconds, combined output); raises with the output tail on failure.

    With ``log`` the output goes to that file as the command writes it (stdout and stderr
    interleaved), so a long run can be followed with ``tail -f``; without it, to a temporary file.
    """
    with contextlib.ExitStack() as stack:
        if log is None:
            sink = stack.enter_context(tempfile.TemporaryFile(mode="w+", encoding="utf-8"))
        else:
            sink = stack.enter_context(open(log, "w+", encoding="utf-8"))
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True)
        seconds = time.perf_counter() - start
        sink.seek(0)
        output = sink.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-6000:]}")
    return seconds, output


# ---------------------------------------------------------------------------------------------
# How fast the machine at hand is (benchmarks/bench_host_speed.py): hosts of one CPU class run the
# same stage up to about twice as fast as each other, so a timed copy or run keeps this beside its time.

HOST_PROMPTS = 16          # standard RAG prompts answered a probe, one generate call
HOST_NEW_TOKENS = 24       # greedy tokens each (most answers stop earlier; the longest sets the decode)
HOST_REPEATS = 3           # timed calls; the fastest counts (one call alone varied by about 15%)
_HOST_WORDS = ("harbour museum founded century railway station northern island river capital author novel "
               "bridge festival population mountain company revenue employees director season").split()


def host_prompts(n: int = HOST_PROMPTS) -> list[list[dict[str, str]]]:
    """``n`` fixed standard RAG prompts (prefill variant, three passages of 40-60 words each):
    the same text on every machine, so only the machine's speed differs between probes."""
    from ragcritic_lib.retrieval.rag import build_rag_messages

    out = []
    for i in range(n):
        passages = [" ".join(_HOST_WORDS[(i * 7 + j * 3 + k) % len(_HOST_WORDS)] for k in range(40 + 10 * j)) + "."
                    for j in range(3)]
        question = f"Which {_HOST_WORDS[i % len(_HOST_WORDS)]} was {_HOST_WORDS[(i + 5) % len(_HOST_WORDS)]} first?"
        out.append(build_rag_messages(question, passages, variant="prefill"))
    return out


def host_speed(params: dict | None = None, *, cpuinfo: str | None = None) -> dict:
    """This machine's speed at the pipeline's own work: the seconds the generator of params.yaml
    (``common.generator``, in the dtype its CPU class resolves to, its LLM cache off) takes to answer
    :func:`host_prompts` in one call, the fastest of ``HOST_REPEATS`` calls after an unmeasured
    warm-up; lower is faster. About half a minute on 2 cores. Returns ``cpu_model`` (from
    /proc/cpuinfo), ``cpu_class``, ``dtype``, ``prompts``, ``new_tokens``, ``prompt_tokens``,
    ``generate_seconds`` and every call's seconds (``runs``); a generator that cannot load (no
    assets yet) gives ``generate_seconds`` None and ``why``."""
    from ragcritic_lib.pipeline.stage_metrics import cpu_class

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.lower().startswith("model name") and ":" in line), "unknown")
    out: dict = {"cpu_model": model, "cpu_class": cpu_class("cpu", cpuinfo), "prompts": HOST_PROMPTS,
                 "new_tokens": HOST_NEW_TOKENS}
    try:
        from ragcritic_lib import runtime
        from ragcritic_lib.llm import GenParams
        from ragcritic_lib.pipeline.params import load_params

        llm = runtime.load_generator(params or load_params(), cache=False)
    except Exception as exc:  # noqa: BLE001 - the probe reports why it could not run, and the caller goes on
        return {**out, "dtype": None, "prompt_tokens": None, "generate_seconds": None,
                "why": f"{type(exc).__name__}: {exc}"[:300]}
    prompts, gen = host_prompts(), GenParams(max_new_tokens=HOST_NEW_TOKENS, temperature=0.0)
    llm.generate(prompts[:2], gen)
    runs = []
    for _ in range(HOST_REPEATS):
        start = time.perf_counter()
        answers = llm.generate(prompts, gen)
        runs.append(round(time.perf_counter() - start, 2))
    return {**out, "dtype": getattr(llm, "dtype", None), "prompt_tokens": sum(a.prompt_tokens or 0 for a in answers),
            "generate_seconds": min(runs), "runs": runs}


def probe_host(root: Path = paths.ROOT) -> dict:
    """:func:`host_speed` in a process of its own (``benchmarks/bench_host_speed.py --json`` in
    ``root``), so its model does not stay in the caller's memory; a probe that fails gives a record
    with ``generate_seconds`` None and ``why``, never an exception."""
    import sys

    proc = subprocess.run([sys.executable, "benchmarks/bench_host_speed.py", "--json"], cwd=root,
                          capture_output=True, text=True)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"generate_seconds": None, "why": (proc.stderr or proc.stdout or "no output")[-300:]}


# ---------------------------------------------------------------------------------------------
# One stage timed cold in a restored copy (benchmarks/bench_stage_copy.py): a stage's time on a CPU
# class that its committed run was not made on, without replacing the committed outputs.

STAGE_COPIES_FILE = "reports/benchmarks/stage_copies.json"
COPY_KEYS = ("stage", "stem", "date", "cpu_class", "dtype", "wall_seconds", "fingerprint")


class CopyRecordError(ValueError):
    """A stage-copy record file or entry that cannot be read; the message names the file and key."""


def lock_fingerprints(root: Path = paths.ROOT) -> dict[str, str]:
    """Per stage of ``dvc.lock``: a short sha256 of its command, its dependencies' paths and md5s,
    and its params as recorded, i.e. of what a run of the stage read. Two runs with one fingerprint
    ran the same code on the same inputs and settings; outputs do not enter."""
    import yaml

    lock = Path(root) / "dvc.lock"
    if not lock.is_file():
        return {}
    stages = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages") or {}
    out = {}
    for name, st in stages.items():
        deps = sorted([str(d.get("path")), str(d.get("md5") or d.get("hash") or "")] for d in st.get("deps") or [])
        key = json.dumps({"cmd": st.get("cmd"), "deps": deps, "params": st.get("params") or {}},
                         sort_keys=True, ensure_ascii=False, default=str)
        out[name] = hashlib.sha256(key.encode()).hexdigest()[:16]
    return out


def persisted_outputs(root: Path = paths.ROOT) -> dict[str, list[str]]:
    """Per stage of ``dvc.yaml`` with any: its ``persist: true`` outputs (logs the stage appends to
    and resumes from, which ``dvc repro --force`` keeps). A timed copy of such a stage is cold only
    when they were deleted first (``shipping clear-persisted --stage``). A plain YAML read, so the
    README's writer need not load DVC; ``clear-persisted`` reads the same outputs through DVC, and
    a test holds the two equal on the project's dvc.yaml."""
    import yaml

    spec = Path(root) / "dvc.yaml"
    stages = (yaml.safe_load(spec.read_text(encoding="utf-8")) or {}).get("stages") or {} if spec.is_file() else {}
    out: dict[str, list[str]] = {}
    for name, st in stages.items():
        kept = [next(iter(o)) for o in (st or {}).get("outs") or []
                if isinstance(o, dict) and isinstance(next(iter(o.values())), dict) and next(iter(o.values())).get("persist")]
        if kept:
            out[name] = kept
    return out


def load_copies(file: Path) -> list[dict]:
    """The entries of a stage-copy record file (``{"copies": [...]}``); [] when the file is absent.
    Raises :class:`CopyRecordError` naming the file and the entry or key that is wrong."""
    file = Path(file)
    if not file.exists():
        return []
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CopyRecordError(f"{file}: not JSON ({exc})") from None
    copies = data.get("copies") if isinstance(data, dict) else None
    if not isinstance(copies, list):
        raise CopyRecordError(f"{file}: want an object with a list under 'copies'")
    for i, entry in enumerate(copies):
        missing = [k for k in COPY_KEYS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise CopyRecordError(f"{file}: copies[{i}] lacks {', '.join(missing)}")
        secs = entry["wall_seconds"]
        if not isinstance(secs, (int, float)) or isinstance(secs, bool) or secs <= 0:
            raise CopyRecordError(f"{file}: copies[{i}].wall_seconds must be a positive number, not {secs!r}")
    return copies


def record_copy(file: Path, entry: dict) -> list[dict]:
    """Append one timed copy to the record file (created when absent); returns every entry."""
    file = Path(file)
    copies = load_copies(file)
    missing = [k for k in COPY_KEYS if k not in entry]
    if missing:
        raise CopyRecordError(f"a stage-copy entry lacks {', '.join(missing)}")
    copies.append(dict(entry))
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"copies": copies}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return copies


def _leaves(obj: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, value) for every scalar in nested dicts and lists; list items as ``key[i]``."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _leaves(value, f"{prefix}[{i}]")
    else:
        yield prefix, obj


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def compare_metrics(committed: dict, copy: dict, *, shown: int = 5, headline: Sequence[str] = ()) -> dict:
    """How a copy's stage metrics differ from the committed run's: a stage run on another CPU class
    (or the same one) gives slightly different answers, and this says how many.

    Every scalar is compared except the ``environment`` block and keys with a part ending in
    ``seconds`` (times differ on every run): ``numbers`` (numeric keys in both), how many are
    ``equal`` and within 0.01, the ``max_abs_diff``, the ``largest`` differences relative to the
    larger of the two values, so that counts and rates rank alike (key, committed, copy, relative;
    at most ``shown``), ``texts`` and ``texts_equal`` for the other scalars (strings, flags, nulls)
    with the first ``changed_texts``, and how many keys only one side has (``only_committed``,
    ``only_copy``).
    ``headline`` names the stage's main results (dotted keys, as ``largest`` writes them): each one
    both sides hold goes under ``headline`` with its two values, whatever its difference.
    """
    def keep(key: str) -> bool:
        parts = [part.split("[", 1)[0] for part in key.split(".")]
        return parts[0] != "environment" and not any(part.endswith("seconds") for part in parts)

    ours = {k: v for k, v in _leaves(committed) if keep(k)}
    theirs = {k: v for k, v in _leaves(copy) if keep(k)}
    both = [k for k in ours if k in theirs]
    numeric = [k for k in both if _is_number(ours[k]) and _is_number(theirs[k])]
    diffs = [(abs(float(theirs[k]) - float(ours[k])), k) for k in numeric]
    relative = sorted(((d / max(abs(float(ours[k])), abs(float(theirs[k]))), k) for d, k in diffs if d > 0),
                      key=lambda r: (-r[0], r[1]))
    texts = [k for k in both if not (_is_number(ours[k]) and _is_number(theirs[k]))]
    changed = [k for k in texts if ours[k] != theirs[k]]
    return {
        "headline": [{"key": k, "committed": ours[k], "copy": theirs[k]} for k in headline if k in ours and k in theirs],
        "numbers": len(numeric),
        "equal": sum(d == 0 for d, _ in diffs),
        "within_0.01": sum(d <= 0.01 for d, _ in diffs),
        "max_abs_diff": round(max((d for d, _ in diffs), default=0.0), 6),
        "largest": [{"key": k, "committed": ours[k], "copy": theirs[k], "relative": round(r, 4)}
                    for r, k in relative[:shown]],
        "texts": len(texts),
        "texts_equal": len(texts) - len(changed),
        "changed_texts": [{"key": k, "committed": ours[k], "copy": theirs[k]} for k in changed[:shown]],
        "only_committed": len(set(ours) - set(theirs)),
        "only_copy": len(set(theirs) - set(ours)),
    }
