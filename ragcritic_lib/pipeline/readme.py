"""README's result tables, written from ``reports/metrics`` so that no number is copied by hand.

README.md and the pages of docs/ listed by :func:`target_files` hold blocks delimited by HTML comments::

    <!-- BEGIN generated: ladder -->
    ...
    <!-- END generated: ladder -->

``python -m ragcritic_lib.pipeline.readme`` (``make readme``) rewrites every such block from the
metrics files it reads; ``--check`` rewrites nothing and exits 1 naming each block whose text
differs from what the metrics give (tests/test_readme.py runs the same check). Each block says
where its numbers come from: the metrics file, the generator's backend, device and dtype from
that file's ``environment`` block, and the question counts. A missing file or key is one
:class:`ReadmeDataError` naming the file and the key path.

Functions take data and return data: :func:`render_block` maps a block name and the loaded
metrics (``{stem: dict}``) to Markdown; :func:`rewrite_blocks` returns a file's text with its
blocks replaced; :func:`differing_blocks` names those that would change.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import atomic_write_text, read_json

__all__ = [
    "BLOCK_SOURCES", "ReadmeDataError", "block_names", "check", "differing_blocks", "environment_line",
    "load_metrics", "main", "render_block", "rewrite_blocks", "target_files",
]

BASELINE = "standard RAG"
_BLOCK = re.compile(r"<!-- BEGIN generated: (?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)<!-- END generated: (?P=name) -->",
                    re.DOTALL)
_BEGIN = re.compile(r"<!-- BEGIN generated: ([^ ]*) -->")
_DASH = "–"

# The metrics files (stems of reports/metrics/<stem>.json) each block reads.
BLOCK_SOURCES: dict[str, tuple[str, ...]] = {
    "ladder": ("08_correction", "14_comparison"),
    "benchmark": ("07_benchmark", "05_critic_sft", "06_critic_dpo"),
    "comparison": ("14_comparison",),
    "ladder_by_type": ("08_correction",),
    "ladder_trivia": ("08_correction",),
    "standard_rag": ("01_retrieval_rag",),
    "judge": ("02_error_sampling", "08_correction"),
    "comparison_details": ("14_comparison",),
    "answerability": ("14_comparison",),
    "ladder_steps": ("14_comparison",),
    "baselines": ("09_self_refine", "10_crag", "11_simrag", "12_repair", "13_ragec"),
    "papers": ("01_retrieval_rag", "02_error_sampling", "03_tagging", "04_taxonomy", "05_critic_sft",
               "06_critic_dpo", "07_benchmark", "08_correction", "13_ragec", "14_comparison"),
}
def _pipeline_order() -> tuple[str, ...]:
    """Every stage notebook's stem by its number, and within one number in dvc.yaml's order (two
    stages may share a number, as 08_planner_data and 08_correction: their names would not order them)."""
    notebooks = sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.py"))
    dvc_text = (paths.ROOT / "dvc.yaml").read_text(encoding="utf-8") if (paths.ROOT / "dvc.yaml").exists() else ""
    def position(nb: Path) -> tuple[str, int, int]:
        at = dvc_text.find(f"notebooks/{nb.name}")
        return (nb.name[:2], at if at >= 0 else len(dvc_text), notebooks.index(nb))
    return tuple(nb.stem for nb in sorted(notebooks, key=position))


# Every stage's metrics file, in pipeline order (the per-stage time table reads them all).
_STAGE_STEMS = _pipeline_order()
BLOCK_SOURCES["stage_times"] = _STAGE_STEMS
OPTIONAL_SOURCE_BLOCKS = frozenset({"stage_times"})  # blocks that show a missing metrics file as "not run"
BLOCK_SOURCES["ci_times"] = ()   # reads reports/benchmarks/ci_runs.json (check() loads it), no metrics file
BLOCK_SOURCES["command_times"] = ()   # the same file
BLOCK_SOURCES["smoke_times"] = ()     # the same file
BLOCK_SOURCES["critic_recipes"] = ()  # reads reports/benchmarks/critic_recipes.json (check() loads it)
BLOCK_SOURCES["probe_layers"] = ()    # reads reports/benchmarks/probe_layers.json (check() loads it)
BLOCK_SOURCES["probe_layers_train_cv"] = ()  # reads reports/benchmarks/probe_layers_train_cv.json (check() loads it)
# The trained critic each critic stage calibrates, for the verdict AUROC on its dev samples.
_CALIBRATED_CRITICS = {"05_critic_sft": "SFT critic", "06_critic_dpo": "SFT+DPO critic"}


class ReadmeDataError(ValueError):
    """A metrics file or key that a generated block needs is missing or malformed."""


def _file(stem: str) -> str:
    return f"reports/metrics/{stem}.json"


# ------------------------------------------------------------------------------ reading metrics
def load_metrics(stems: Iterable[str], metrics_dir: str | Path = paths.METRICS_DIR, *,
                 optional: Iterable[str] = ()) -> dict[str, Any]:
    """Read ``<metrics_dir>/<stem>.json`` for each stem.

    Args:
        stems: metrics file stems, e.g. ``"08_correction"``.
        metrics_dir: the folder holding them.
        optional: stems whose file may be missing (a stage that has not run yet): left out.

    Returns:
        ``{stem: parsed JSON}``.

    Raises:
        ReadmeDataError: a file is missing (and not optional) or not valid JSON (the message names it).
    """
    out: dict[str, Any] = {}
    optional = set(optional)
    for stem in dict.fromkeys(stems):
        if stem in optional and not (Path(metrics_dir) / f"{stem}.json").exists():
            continue
        try:
            out[stem] = read_json(Path(metrics_dir) / f"{stem}.json")
        except (OSError, ValueError) as exc:
            raise ReadmeDataError(f"{_file(stem)}: cannot be read for README: {exc}") from None
    return out


def _get(metrics: Mapping[str, Any], stem: str, *keys: str) -> Any:
    """``metrics[stem][k1][k2]...``, or one error naming the file and the missing key path."""
    if stem not in metrics:
        raise ReadmeDataError(f"{_file(stem)}: missing (no such metrics file was loaded)")
    node = metrics[stem]
    for i, key in enumerate(keys):
        if not isinstance(node, Mapping) or key not in node:
            raise ReadmeDataError(f"{_file(stem)}: missing key {'.'.join(keys[:i + 1])}")
        node = node[key]
    return node


def _number(metrics: Mapping[str, Any], stem: str, *keys: str, nullable: bool = False) -> float | None:
    value = _get(metrics, stem, *keys)
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ReadmeDataError(f"{_file(stem)}: key {'.'.join(keys)} is {value!r}, not a number")
    return value


# ------------------------------------------------------------------------------------ formatting
def _clean(x: float, digits: int) -> float:
    """``x`` rounded half away from zero as its shortest decimal reads (0.0075 -> 0.008, not binary's
    0.007); -0.0 becomes 0.0, so a zero change prints as +0.000."""
    exact = Decimal(repr(float(x))).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return float(exact) + 0.0


def _f(x: float | None, digits: int = 3) -> str:
    return _DASH if x is None else f"{_clean(x, digits):.{digits}f}"


def _signed(x: float | None, digits: int = 3) -> str:
    return _DASH if x is None else f"{_clean(x, digits):+.{digits}f}"


def _pct(x: float | None) -> str:
    return _DASH if x is None else f"{_clean(100 * x, 1):.1f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _ordered(names: Iterable[str]) -> list[str]:
    """The baseline first, RAG-Critic rows next, oracle rows last, the rest in file order."""
    def rank(name: str) -> int:
        if name == BASELINE:
            return 0
        if name.startswith("RAG-Critic"):
            return 1
        return 3 if "oracle" in name.lower() else 2
    return sorted(names, key=rank)


# environment keys that are not package versions
_NOT_VERSIONS = ("generator", "cpu_class", "wall_seconds", "upstream", "provenance")


def environment_line(metrics: Mapping[str, Any], stem: str) -> str:
    """Where a metrics file was computed: the generator's backend, device and dtype, and versions.

    Args:
        metrics: the loaded metrics (``{stem: dict}``).
        stem: the file whose ``environment`` block is described.

    Returns:
        One Markdown sentence, e.g. "Generator: backend `hf`, device `cpu`, dtype `bfloat16`, CPU class
        `amx`; ...", followed by one sentence per ``provenance`` entry of the file.
    """
    gen = [f"{key} `{_get(metrics, stem, 'environment', 'generator', key)}`" for key in ("backend", "device", "dtype")]
    env = _get(metrics, stem, "environment")
    if "cpu_class" in env:
        gen.append(f"CPU class `{env['cpu_class']}`")
    versions = [f"{k} {v}" for k, v in env.items()
                if k not in _NOT_VERSIONS and isinstance(v, (str, int, float))]
    line = "Generator: " + ", ".join(gen)
    line += ("; " + ", ".join(versions) if versions else "") + f" (`{_file(stem)}`)."
    stale = [] if _recorded_by_runner(env) else [
        f"**Not up to date:** `{stem}` comes from a run older than the stage runner that records the CPU class "
        "and wall time; `dvc status` names its stage until it re-runs."]
    late = (metrics.get(LOCK_STALE_KEY) or {}).get(stem) or {}
    why = []
    if late.get("replaced"):
        why.append(f"outputs of {', '.join(f'`{m}`' for m in late['replaced'])} that "
                   f"{'has' if len(late['replaced']) == 1 else 'have'} since run again")
    if late.get("behind"):
        why.append(f"outputs of {', '.join(f'`{m}`' for m in late['behind'])}, "
                   f"{'itself' if len(late['behind']) == 1 else 'themselves'} not up to date")
    if why:
        stale.append(f"**Not up to date:** `{stem}` read {' and '.join(why)} (`dvc.lock`); its numbers are those "
                     "of its last run until it and the stages before it re-run (`dvc repro`).")
    return " ".join([line] + [f"Provenance: {p}." for p in grouped_provenance(env.get("provenance") or [])] + stale)


_PROVENANCE_ENTRY = re.compile(r"read (?P<read>.+) made in (?P<made>.+); this stage ran in (?P<ran>.+)")


def grouped_provenance(entries: Sequence[Any]) -> list[str]:
    """``environment.provenance`` with the entries that name the same making and running classes
    joined into one ("read a, b made in bfloat16 on amx; this stage ran in float32 on avx2"), in the
    order each group first appears; an entry of another form stays as it is."""
    out: list[str | tuple[str, str]] = []  # an entry as it is, or the key of its group
    groups: dict[tuple[str, str], list[str]] = {}
    for entry in entries:
        if not isinstance(entry, str):
            continue
        m = _PROVENANCE_ENTRY.fullmatch(entry)
        if m is None:
            out.append(entry)
            continue
        key = (m["made"], m["ran"])
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key] += [r for r in m["read"].split(", ") if r not in groups[key]]
    return [f"read {', '.join(groups[e])} made in {e[0]}; this stage ran in {e[1]}" if isinstance(e, tuple) else e
            for e in out]


LOCK_STALE_KEY = "dvc_lock_stale"  # where check() puts stale_in_lock()


def _store_objects(root: Path) -> Path:
    """The shipped store's object folder: remote ``store`` of ``.dvc/config`` when it is a local
    folder (relative to ``.dvc/``, as DVC reads it), else the default ``dvc-store/``."""
    import configparser

    url = "../dvc-store"
    cfg = configparser.ConfigParser()
    try:
        cfg.read(root / ".dvc" / "config", encoding="utf-8")
        url = cfg.get('remote "store"', "url", fallback=url)
    except configparser.Error:
        pass
    if "://" in url:  # a remote store: its manifests are not on this disk
        return root / ".dvc" / "no-local-store"
    return (root / ".dvc" / url).resolve() / "files" / "md5"


def stale_in_lock(root: str | Path) -> dict[str, dict[str, list[str]]]:
    """The stages whose recorded run read outputs that another stage has since replaced, from the
    committed ``dvc.lock`` alone: a dependency inside (or equal to) another stage's output whose
    md5 differs from that output's current one. A file or folder inside an output folder is
    looked up in the folder's manifest in the shipped store (:func:`_store_objects`); an output
    whose manifest is not there (a rebuilt output, a store elsewhere) is not judged. A stage that
    read a stage which is itself not up to date is not up to date either.

    Returns:
        ``{metrics stem: {"replaced": [upstream stages whose outputs it read have changed since],
        "behind": [upstream stages it read that are themselves not up to date]}}`` for the stages
        the stage runner runs (their stem is the notebook's name).
    """
    import hashlib

    import yaml

    lock_file = Path(root) / "dvc.lock"
    if not lock_file.is_file():
        return {}
    objects = _store_objects(Path(root))
    stages = (yaml.safe_load(lock_file.read_text(encoding="utf-8")) or {}).get("stages") or {}
    outs = {o["path"]: (name, str(o.get("md5", ""))) for name, st in stages.items() for o in st.get("outs") or []}
    manifests: dict[str, list[dict[str, str]] | None] = {}

    def manifest(md5: str) -> list[dict[str, str]] | None:
        if md5 not in manifests:
            f = objects / md5[:2] / md5[2:]
            try:
                manifests[md5] = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                manifests[md5] = None
        return manifests[md5]

    def current(dep: str) -> tuple[str, str | None] | None:
        """(the stage that writes it, its md5 there now) for a path inside some stage's output."""
        for out, (name, md5) in outs.items():
            if dep == out:
                return name, md5
            if dep.startswith(out + "/") and md5.endswith(".dir"):
                entries = manifest(md5)
                if entries is None:
                    return name, None
                rel = dep[len(out) + 1:]
                hit = [e for e in entries if e["relpath"] == rel]
                if hit:
                    return name, hit[0]["md5"]
                inner = sorted(({"md5": e["md5"], "relpath": e["relpath"][len(rel) + 1:]} for e in entries
                                if e["relpath"].startswith(rel + "/")), key=lambda e: e["relpath"])
                if not inner:
                    return name, ""
                return name, hashlib.md5(json.dumps(inner).encode()).hexdigest() + ".dir"
        return None

    replaced: dict[str, set[str]] = {}
    reads: dict[str, set[str]] = {}
    for name, st in stages.items():
        replaced[name], reads[name] = set(), set()
        for dep in st.get("deps") or []:
            found = current(str(dep.get("path", "")))
            if found and found[0] != name:
                reads[name].add(found[0])
                if found[1] is not None and found[1] != str(dep.get("md5", "")):
                    replaced[name].add(found[0])
    behind = {name: set() for name in stages}  # upstream stages that are themselves not up to date
    changed = True
    while changed:
        changed = False
        for name in stages:
            late = {u for u in reads[name] if replaced[u] or behind[u]} - behind[name]
            if late:
                behind[name] |= late
                changed = True
    stale: dict[str, dict[str, list[str]]] = {}
    for name, st in stages.items():
        nb = re.search(r"notebooks/([0-9][0-9]_\w+)\.py", str(st.get("cmd", "")))
        if nb and (replaced[name] or behind[name]):
            stale[nb.group(1)] = {"replaced": sorted(replaced[name]), "behind": sorted(behind[name] - replaced[name])}
    return stale


def _recorded_by_runner(env: Mapping[str, Any]) -> bool:
    """Whether an ``environment`` block was written by the current stage runner (CPU class and wall time)."""
    seconds = env.get("wall_seconds")
    return isinstance(env.get("cpu_class"), str) and isinstance(seconds, (int, float)) and not isinstance(seconds, bool)


def _flags_line(flags: Sequence[str]) -> str:
    if not flags:
        return "Flagged as degenerate (`degenerate`): none."
    return "Flagged as degenerate (`degenerate`): " + "; ".join(f"`{f}`" for f in flags) + "."


_PLANNER_FLAG = re.compile(r"planner:(?P<dataset>[^/]+)/(?P<row>.+)")


def _planner_flag(metrics: Mapping[str, Any], flag: str) -> str:
    """A ``planner:<dataset>/<row>`` flag of notebook 08 with where its plans concentrate
    (``14_comparison.json`` ``planner_choices``), or the flag alone where 14 did not count that row."""
    m = _PLANNER_FLAG.fullmatch(flag)
    if not m or "14_comparison" not in metrics:
        return f"`{flag}`"
    block = ((_get(metrics, "14_comparison").get("planner_choices") or {}).get(m["dataset"]) or {}).get(m["row"])
    if not isinstance(block, Mapping):
        return f"`{flag}`"
    key = ("planner_choices", m["dataset"], m["row"])
    def count(field: str, noun: str) -> str:
        n = int(_number(metrics, "14_comparison", *key, field))
        return f"{n} {noun}" + ("" if n == 1 else "s")

    said = (f"{count('plans', 'plan')} of {count('distinct', 'program')}, the top "
            f"{_pct(_number(metrics, '14_comparison', *key, 'top_share', nullable=True))}%; the critiques named "
            f"{count('label_sets', 'label set')} (the top "
            f"{_pct(_number(metrics, '14_comparison', *key, 'top_label_share', nullable=True))}%), and "
            f"{_pct(_number(metrics, '14_comparison', *key, 'label_fixed_share', nullable=True))}% of plans are "
            "their label set's usual program")
    if block.get("chooses"):
        forced, chosen = (int(_number(metrics, "14_comparison", *key, k)) for k in ("forced", "chosen"))
        top = _number(metrics, "14_comparison", *key, "chosen_top_share", nullable=True)
        said += (f"; the labels left one option for {forced}" + (
            f", and of the {chosen} plans chosen among several the top program is {_pct(top)}%" if chosen
            else ", so the planner chose none"))
    return f"`{flag}` ({said})"


def _flags(metrics: Mapping[str, Any], stem: str) -> list[str]:
    flags = _get(metrics, stem, "degenerate")
    if not isinstance(flags, list):
        raise ReadmeDataError(f"{_file(stem)}: key degenerate is {flags!r}, not a list")
    return [str(f) for f in flags]


def _ci_sentence(metrics: Mapping[str, Any], stem: str, group: Sequence[str], names: Iterable[str], *,
                 what: str = "ΔF1", ends: tuple[str, str] = ("ci_low", "ci_high")) -> str:
    """Which rows' 95% CI of the F1 change (or of ``what`` read from ``ends``) lies wholly above 0
    and which wholly below."""
    above, below = [], []
    for name in names:
        if name == BASELINE:
            continue
        low, high = (_number(metrics, stem, *group, name, k) for k in ends)
        if low > 0:
            above.append(name)
        elif high < 0:
            below.append(name)
    return (f"95% CI of {what} wholly above 0: {', '.join(above) or 'none'}; "
            f"wholly below 0: {', '.join(below) or 'none'}.")


def _change(metrics: Mapping[str, Any], stem: str, *keys: str,
            fields: tuple[str, str, str] = ("delta_f1", "ci_low", "ci_high")) -> str:
    d, lo, hi = (_number(metrics, stem, *keys, k) for k in fields)
    return f"{_signed(d)} ({_signed(lo)}, {_signed(hi)})"


# ------------------------------------------------------------------------------------- the blocks
def _count_with_change(row: Mapping[str, Any], count: str, change: str) -> str:
    """``12 (+0.050)``: a count of answers and their mean F1 change; a dash when not recorded."""
    if not isinstance(row.get(count), int):
        return _DASH
    mean = row.get(change)
    return f"{row[count]}" + (f" ({_signed(mean)})" if isinstance(mean, (int, float)) else "")


def _ladder_rows(metrics: Mapping[str, Any], dataset: str) -> list[list[str]]:
    stem = "08_correction"
    rows = _get(metrics, stem, "ladder", dataset)
    mdes = _get(metrics, stem, "ladder").get(f"{dataset}_paired_mde_f1", {})
    out = []
    for name in _without_repeated_round(_ordered(rows), rows):
        key = ("ladder", dataset, name)
        base = name == BASELINE
        row = rows[name]
        judged = "delta_judge_acc" in row
        out.append([
            name,
            str(int(_number(metrics, stem, *key, "n"))),
            _f(_number(metrics, stem, *key, "f1")),
            _DASH if base else _change(metrics, stem, *key),
            _DASH if base else _f(_number(metrics, stem, *key, "p_value"), 4),
            _DASH if base or name not in mdes else _f(mdes[name]),
            _f(_number(metrics, stem, *key, "judge_acc")) if judged else _DASH,
            _DASH if base or not judged else _change(metrics, stem, *key, fields=(
                "delta_judge_acc", "delta_judge_acc_ci_low", "delta_judge_acc_ci_high")),
            _DASH if base else _count_with_change(row, "corrected", "corrected_delta_f1"),
            _DASH if base else _count_with_change(row, "corrected_right", "corrected_right_delta_f1"),
        ])
    return out


def _without_repeated_round(names: Sequence[str], ladder: Mapping[str, Any]) -> list[str]:
    """``names`` without the unverified round at the verified threshold ("..., same threshold)")
    where its ladder row equals the row named before it (the unverified fit chose the verified
    threshold too): the same answers read twice, shown once in every table of the ladder."""
    return [name for i, name in enumerate(names)
            if not (i and name.endswith(", same threshold)") and ladder.get(name) == ladder.get(names[i - 1]))]


_LADDER_HEADER = ("row", "n", "F1", "ΔF1 (95% CI)", "p", "paired MDE", "right", "Δ right (95% CI)",
                  "changed (ΔF1)", "of them right before (ΔF1)")


def _compose(intro: str, header: Sequence[str], rows: Iterable[Sequence[str]], notes: Iterable[str]) -> str:
    """A block: one introductory paragraph, the table, then one bullet per note."""
    return "\n".join([intro, "", *_table(header, rows), "", *(f"- {note}" for note in notes)])


def render_ladder(metrics: Mapping[str, Any]) -> str:
    """The correction ladder on the testbed (``08_correction.json`` ``ladder.testbed``)."""
    stem = "08_correction"
    rows = _get(metrics, stem, "ladder", "testbed")
    n = int(_number(metrics, stem, "ladder", "testbed", BASELINE, "n"))
    judged = [name for name in rows if isinstance(rows[name], Mapping) and "delta_judge_acc" in rows[name]]
    notes = [
        _ci_sentence(metrics, stem, ("ladder", "testbed"), rows),
        *([_ci_sentence(metrics, stem, ("ladder", "testbed"), judged, what="the change in the share judged right",
                        ends=("delta_judge_acc_ci_low", "delta_judge_acc_ci_high"))] if judged else []),
        (f"Minimum detectable F1 change at n = {n} (80% power, conservative): "
         f"{_f(_number(metrics, stem, 'ladder', 'testbed_mde_f1'))}."),
    ]
    fit = _get(metrics, stem).get("critic_verdict", {}).get("dev_fit")
    if isinstance(fit, Mapping) and {"n", "threshold", "f1_before"} <= fit.keys():
        vs = fit.get("vs_default")
        if isinstance(vs, Mapping) and {"delta", "ci_low", "ci_high", "kept_default"} <= vs.keys():
            none = fit.get("fitted_threshold") is None
            chosen = ("so the calibrated threshold stays" if vs["kept_default"]
                      else "so RAG-Critic corrects no test answer" if none else "so the fitted threshold replaces it")
            best = "acting on no answer" if none else _f(fit.get("fitted_threshold"))
            vn = fit.get("vs_none")
            if isinstance(vn, Mapping) and {"delta", "ci_low", "ci_high", "acts"} <= vn.keys() \
                    and fit.get("best_threshold") is not None:
                # four digits: the difference a one-answer fit makes is often below 0.001
                notes.append(f"RAG-Critic's best dev threshold, {_f(fit['best_threshold'])} (dev F1 "
                             f"{_f(fit.get('f1_at_best'), 4)}), against acting on no dev answer: "
                             f"{_signed(vn['delta'], 4)} (95% CI {_signed(vn['ci_low'], 4)}, "
                             f"{_signed(vn['ci_high'], 4)}), "
                             + ("so the fit keeps it." if vn["acts"] else
                                "inside its CI, so the fit picks acting on none (a fit must win beyond its CI), "
                                "then meets the calibrated threshold (next line)."))
            notes.append(f"RAG-Critic's acting threshold on {fit['n']} dev questions: the fit, "
                         f"{best} (dev F1 {_f(fit.get('f1_at_fitted'))}), against the "
                         f"critic's calibrated {_f(fit.get('calibrated_threshold'))} ({_f(fit.get('f1_at_calibrated'))}): "
                         f"a dev difference of {_signed(vs['delta'])} (95% CI {_signed(vs['ci_low'])}, "
                         f"{_signed(vs['ci_high'])}), {chosen}; dev F1 uncorrected {_f(fit['f1_before'])}.")
        elif fit["threshold"] is None:
            notes.append(f"RAG-Critic's acting threshold, fitted on {fit['n']} dev questions: none raised dev F1 "
                         f"above {_f(fit['f1_before'])}, so it corrects no test answer.")
        else:
            notes.append(f"RAG-Critic's acting threshold, fitted on {fit['n']} dev questions: "
                         f"{_f(fit['threshold'])} (dev F1 {_f(fit['f1_before'])} -> "
                         f"{_f(fit.get('f1_at_threshold'))}).")
        fits = fit.get("fits")
        if isinstance(fits, Mapping) and {"verified", "unverified"} <= fits.keys():
            v, u = fits["verified"], fits["unverified"]
            mode = _get(metrics, stem).get("critic_verdict", {}).get("verify_mode")
            if fit.get("verify"):
                how = ("set on (`verify_corrections: always`)" if mode == "always"
                       else "chosen on the same dev corrections")
                notes.append("RAG-Critic's critic also verifies its corrections (a new answer is kept only when "
                             f"the critic judges it less likely wrong than the old one), {how}: dev F1 "
                             f"{_f(v.get('f1_at_threshold'))} verified (threshold {_f(v.get('threshold'))}) against "
                             f"{_f(u.get('f1_at_threshold'))} unverified (threshold {_f(u.get('threshold'))}). "
                             + ("The \"unverified\" row is the same run's first round with every new answer kept, as "
                                "Algorithm 1 reads, at the unverified fit's threshold, here the verified one's too."
                                if u.get("threshold") == v.get("threshold") else
                                "The \"unverified\" rows are the same run's first round with every new answer kept, as "
                                "Algorithm 1 reads, at the unverified fit's threshold and at the verified one."))
            else:
                notes.append(f"Verifying corrections with the critic did not win on dev (dev F1 "
                             f"{_f(v.get('f1_at_threshold'))} verified, {_f(u.get('f1_at_threshold'))} unverified), "
                             "so RAG-Critic keeps every new answer, as Algorithm 1 reads.")
            vv = fit.get("verify_vs_default")
            if isinstance(vv, Mapping) and {"delta", "ci_low", "ci_high"} <= vv.keys():
                notes[-1] = notes[-1][:-1] + (f" (verified minus unverified: {_signed(vv['delta'])}, 95% CI "
                                              f"{_signed(vv['ci_low'])}, {_signed(vv['ci_high'])}; verification "
                                              "must win beyond its CI).")
    q = _get(metrics, stem).get("critic_verdict", {}).get("test", {}).get("testbed")
    if isinstance(q, Mapping) and q.get("auroc_judge") is not None:
        notes.append(
            f"What RAG-Critic's first-round verdicts did on these questions (scored with the gold answers after the "
            f"run): margin AUROC {_f(q['auroc_judge'])} (CI {_f(q['auroc_judge_ci'][0])}..{_f(q['auroc_judge_ci'][1])}) "
            f"against the judge's label it was trained on ({q['judge']}; {q['wrong_judge']} of {q['n']} wrong), "
            f"{_f(q['auroc_acc'])} ({_f(q['auroc_acc_ci'][0])}..{_f(q['auroc_acc_ci'][1])}) against accuracy "
            f"({q['wrong_acc']} wrong). "
            + (f"It corrected {q['acted']} answers: {q['acted_right_judge']} right by the judge, "
               f"{q['acted_right_acc']} right by accuracy (mean F1 change {_signed(q['delta_f1_acted_right_acc'])}), "
               f"{q['acted'] - q['acted_right_acc']} wrong by accuracy "
               f"({_signed(q['delta_f1_acted_wrong_acc'])}); {q['abstained_after']} corrections turned an answer "
               "into an abstention." if q["acted"] else "It corrected no answer.")
            + (f" The critic refused {q['not_verified']} further corrections (their old answers stay)."
               if q.get("not_verified") else ""))
    # The comparison's "RAG-Critic" is the ladder's last round (its final answers); the other
    # RAG-Critic rows have no answerability split.
    final = _final_round_row(rows)
    ladder_note = _answerability_note(metrics, ["RAG-Critic" if name == final else _LADDER_PREFIX + name
                                                for name in _ordered(rows)],
                                      prefix=_LADDER_PREFIX, labels={"RAG-Critic": final} if final else None)
    steps_note = _ladder_steps_note(metrics)
    flags = _flags(metrics, stem)
    located = [_planner_flag(metrics, f) for f in flags]
    flags_line = (_flags_line(flags) if located == [f"`{f}`" for f in flags] else
                  "Flagged as degenerate (`degenerate`; where a flagged planner's plans concentrate: "
                  "`reports/metrics/14_comparison.json` `planner_choices`): " + "; ".join(located) + ".")
    notes += [*filter(None, [ladder_note, steps_note]), flags_line, environment_line(metrics, stem)]
    intro = (f"Every row answers the same {n} testbed test questions; ΔF1 is the change against standard RAG "
             "with a paired bootstrap 95% CI and a paired permutation p; the paired MDE is the smallest change "
             "its paired differences could detect (0 for a row that changed no answer). \"right\" is the share "
             "of answers the audited judge calls right, with its paired change; \"changed\" counts the answers "
             "the row changed and \"of them right before\" those the judge called right before the change, each "
             "with its mean F1 change.")
    return _compose(intro, _LADDER_HEADER, _ladder_rows(metrics, "testbed"), notes)


def _ci(metrics: Mapping[str, Any], stem: str, *keys: str) -> str:
    lo, hi = (_number(metrics, stem, *keys, f"verdict_auroc_ci_{end}", nullable=True) for end in ("low", "high"))
    return _DASH if lo is None or hi is None else f"{_f(lo)}..{_f(hi)}"


def _within_kind(metrics: Mapping[str, Any], stem: str, *keys: str) -> str:
    """The verdict AUROC within kinds of question and its CI, or a dash where the run did not score
    it (a critic without scores, or metrics written before it was scored)."""
    node = _get(metrics, stem, *keys)
    if node.get("verdict_auroc_within_kind") is None:
        return _DASH
    value = _f(_number(metrics, stem, *keys, "verdict_auroc_within_kind"))
    lo, hi = (_number(metrics, stem, *keys, f"verdict_auroc_within_kind_ci_{end}", nullable=True)
              for end in ("low", "high"))
    return value if lo is None or hi is None else f"{value} ({_f(lo)}..{_f(hi)})"


def _minus_question_only(metrics: Mapping[str, Any], stem: str, critic: str) -> str:
    """A critic's verdict AUROC minus the question-only baseline's, with its paired CI, or a dash
    where the run did not compare them (no baseline, or metrics written before the comparison)."""
    keys = ("question_baseline", "critics_minus_baseline", critic)
    paired = ((_get(metrics, stem).get("question_baseline") or {}).get("critics_minus_baseline") or {}).get(critic)
    if not isinstance(paired, Mapping) or paired.get("diff") is None:
        return _DASH
    diff = _number(metrics, stem, *keys, "diff")
    lo, hi = (_number(metrics, stem, *keys, f"ci_{end}", nullable=True) for end in ("low", "high"))
    return f"{diff:+.3f}" if lo is None or hi is None else f"{diff:+.3f} ({lo:+.3f}..{hi:+.3f})"


def _minus_label_prior(metrics: Mapping[str, Any], stem: str, critic: str, tier: str = "tag1") -> str:
    """A critic's ``tier`` micro F1 minus the label prior's on its own verdicts, in points, with the
    paired CI, or a dash where the run did not score the prior (metrics written before it)."""
    prior = (_get(metrics, stem).get("benchmark") or {}).get("label_prior") or {}
    row = ((prior.get("critics") or {}).get(critic) or {}).get(tier)
    if not isinstance(row, Mapping) or row.get("micro_f1_minus_prior") is None:
        return _DASH
    keys = ("benchmark", "label_prior", "critics", critic, tier)
    diff = 100 * _number(metrics, stem, *keys, "micro_f1_minus_prior")
    lo, hi = (_number(metrics, stem, *keys, f"ci_{end}", nullable=True) for end in ("low", "high"))
    return f"{diff:+.1f}" if lo is None or hi is None else f"{diff:+.1f} ({100 * lo:+.1f}..{100 * hi:+.1f})"


def _label_prior_note(metrics: Mapping[str, Any], stem: str, critics: Mapping[str, Any]) -> str:
    """The sentence that says what the label prior names and how each critic's tier-2 labels fare
    against it; empty where the run did not score the prior."""
    fit = ((_get(metrics, stem).get("benchmark") or {}).get("label_prior") or {}).get("fit")
    if not isinstance(fit, Mapping):
        return ""
    labels = {tier: ", ".join(str(x) for x in (fit.get(tier) or {}).get("labels") or []) for tier in ("tag1", "tag2")}
    tier2 = "; ".join(f"{name} {_minus_label_prior(metrics, stem, name, 'tag2')}" for name in critics)
    return (" Minus prior is a critic's tier-1 F1 less the label prior's on the critic's own verdicts, in points, "
            "with a paired CI: the label prior names, on every answer the critic calls wrong, the tier-1 labels the "
            f"training targets name most often ({labels['tag1']}) and likewise at tier 2 ({labels['tag2']}), as many "
            f"as fit the training targets best (`label_prior` in the metrics); tier-2 F1 minus prior: {tier2}.")


def render_benchmark(metrics: Mapping[str, Any]) -> str:
    """The RAG-Error benchmark: every critic in ``07_benchmark.json`` ``critics``, in file order,
    with verdict AUROC and its CI, overall and within kinds of question, then the style-only and
    (where the run scored it) the question-only baseline."""
    stem = "07_benchmark"
    critics = _get(metrics, stem, "critics")
    header = ["critic", "n", "verdict AUROC", "95% CI", "within kinds (95% CI)", "minus question-only (95% CI)",
              "identification", "on right", "on wrong", "tier-1 F1", "tier-2 F1", "tier-1 F1 minus prior (95% CI)",
              "verdicts: Error / Correct / none"]
    rows = []
    for name in critics:
        c = ("critics", name)
        said = (_get(metrics, stem, *c, "predicted_judgements", k) for k in ("Error", "Correct", "none"))
        rows.append([name, str(int(_number(metrics, stem, *c, "n"))),
                     _f(_number(metrics, stem, *c, "verdict_auroc", nullable=True)), _ci(metrics, stem, *c),
                     _within_kind(metrics, stem, *c), _minus_question_only(metrics, stem, name), *(_pct(_number(metrics, stem, *c, "identification", k, nullable=True))
                       for k in ("acc_avg", "acc_correct", "acc_error")),
                     *(_pct(_number(metrics, stem, *c, "classification", k)) for k in ("tag1_f1", "tag2_f1")),
                     _minus_label_prior(metrics, stem, name), " / ".join(str(s) for s in said)])
    baselines = [("style_baseline", "style-only baseline (answer surface; fit on dev)")]
    if "question_baseline" in _get(metrics, stem):
        baselines.append(("question_baseline", "question-only baseline (question text; fit on train)"))
    for key, label in baselines:
        rows.append([label, _DASH, _f(_number(metrics, stem, key, "verdict_auroc", nullable=True)),
                     _ci(metrics, stem, key), _within_kind(metrics, stem, key), *([_DASH] * 8)])
    n_err, n_ok = (int(_number(metrics, stem, "benchmark", k)) for k in ("n_error", "n_correct"))
    n_q = int(_number(metrics, stem, "benchmark", "questions", "test"))
    aurocs = []
    for critic_stem, critic in _CALIBRATED_CRITICS.items():
        cal = ("verdict_calibration",)
        aurocs.append(f"{critic} {_f(_number(metrics, critic_stem, *cal, 'auroc', nullable=True))} (n = "
                      f"{int(_number(metrics, critic_stem, *cal, 'n'))}: "
                      f"{int(_number(metrics, critic_stem, *cal, 'n_error'))} wrong, "
                      f"{int(_number(metrics, critic_stem, *cal, 'n_correct'))} right; `{_file(critic_stem)}`)")
    zs = ("benchmark", "zeroshot_calibration")
    if "zeroshot_calibration" in _get(metrics, stem, "benchmark"):
        aurocs.append(f"base zero-shot {_f(_number(metrics, stem, *zs, 'auroc', nullable=True))} (the same "
                      f"{int(_number(metrics, stem, *zs, 'n'))}, threshold {_f(_number(metrics, stem, *zs, 'threshold'))}; "
                      f"`{_file(stem)}`)")
    notes = ["Verdict AUROC on the dev answers the threshold was fitted on: " + "; ".join(aurocs) + "."]
    notes += _rerun_notes(metrics) + _identification_bound_notes(metrics)
    if "degenerate" in _get(metrics, stem):
        notes.append(_flags_line(_flags(metrics, stem)))
    notes.append(environment_line(metrics, stem))
    intro = (f"{n_err + n_ok} benchmark samples: real answers to {n_q} test questions (no training question), "
             f"{n_err} wrong and {n_ok} right. Verdict AUROC ranks answers by the critic's \"wrong\" score (the "
             "trained critics' verdict body, the log-probability margin of a zero-shot model, a verdict alone "
             "for the heuristic critic), with a bootstrap 95% CI; within kinds it counts only pairs of answers to "
             "questions of one kind (dataset and question type), whose error rates differ widely; minus question-only "
             "is the critic's AUROC less the question-only baseline's on the same answers, with a paired CI. "
             "Identification is the mean of the accuracies on right and on wrong answers; tier-1 and tier-2 F1 are "
             "micro F1 of the error labels (from each wrong answer's observed cause) on the wrong answers; in %. "
             "The trained critics read their verdict off the threshold fitted on dev, as RAG-Critic uses them, and "
             "write labels only for the answers that verdict calls wrong, so a missed wrong answer counts "
             "against their tier F1; the base model zero-shot does the same with its own margin and "
             "threshold, continuing its critiques from the trained critics' JSON opening.")
    breadth = _label_breadth(metrics, stem, critics)
    if breadth:
        intro += (" Micro F1 rewards naming the common labels on many answers; the tier-1 labels each critic names "
                  f"and its macro F1: {breadth}.")
    intro += _label_prior_note(metrics, stem, critics)
    return _compose(intro, header, rows, notes)


def _label_breadth(metrics: Mapping[str, Any], stem: str, critics: Mapping[str, Any]) -> str:
    """'<critic> <k> of <n>, <macro F1 in %>' (tier-1 labels it names of those scored) for every
    critic whose tier-1 scores have per-label counts."""
    parts = []
    for name in critics:
        tier = critics[name].get("tag1") if isinstance(critics[name], Mapping) else None
        if not isinstance(tier, Mapping) or not isinstance(tier.get("per_label"), Mapping):
            continue
        labels = tier["per_label"]
        named = sum(1 for v in labels.values() if isinstance(v, Mapping) and (v.get("predicted") or 0) > 0)
        macro = _pct(_number(metrics, stem, "critics", name, "tag1", "macro", "f1", nullable=True))
        parts.append(f"{name} {named} of {len(labels)}, {macro}")
    return "; ".join(parts)


RERUNS_KEY = "critic_reruns"   # where check() puts reports/benchmarks/critic_reruns.json
_RERUNS_FILE = "reports/benchmarks/critic_reruns.json"


def _rerun_notes(metrics: Mapping[str, Any]) -> list[str]:
    """One line per recorded re-run of stage 05 on another machine (``scripts/record_critic_rerun.py``):
    its dev verdict AUROC against the shipped run's and the stage's seconds on each."""
    out = []
    now = (metrics.get("05_critic_sft") or {}).get("verdict_calibration") or {}
    for r in (metrics.get(RERUNS_KEY) or {}).get("reruns", []):
        old = r.get("shipped") or {}
        # an entry recorded against a critic that has since been replaced says so
        then = ("" if not now or (old.get("dev_auroc"), old.get("threshold")) == (now.get("auroc"), now.get("threshold"))
                else " then, since replaced")
        secs = (f"; the stage's cells took {_f(r.get('wall_seconds'), 0)} s against {_f(old.get('wall_seconds'), 0)} s"
                if r.get("wall_seconds") is not None and old.get("wall_seconds") is not None else "")
        out.append(f"Stage 05 re-run on {r.get('machine', '?')} (class `{r.get('cpu_class', '?')}`, `{_RERUNS_FILE}`): "
                   f"dev verdict AUROC {_f(r.get('dev_auroc'))} against {_f(old.get('dev_auroc'))} shipped{then} "
                   f"(`{old.get('cpu_class', '?')}`), a difference of {_signed(r.get('dev_auroc_diff'), 4)} "
                   f"({'within' if r.get('within_tolerance') else 'outside'} {_f(r.get('tolerance'), 2)}); threshold "
                   f"{_f(r.get('threshold'))} against {_f(old.get('threshold'))}, dev tier-1 F1 {_f(r.get('dev_tag1_f1'))} "
                   f"against {_f(old.get('dev_tag1_f1'))}{secs}.")
    return out


BOUND_KEY = "identification_bound"   # where check() puts reports/benchmarks/identification_bound.json
_BOUND_FILE = "reports/benchmarks/identification_bound.json"


def _identification_bound_notes(metrics: Mapping[str, Any]) -> list[str]:
    """One line from ``benchmarks/bench_identification_bound.py``: the best identification any
    threshold gives the trained critics' verdict scores on the benchmark (an oracle that reads the
    test labels), beside the identification at the dev threshold, and the AUROC an equal-variance
    binormal model needs for the target. Critics with the same row are named together; a record
    whose AUROC is not the current benchmark's says it is out of date."""
    data = metrics.get(BOUND_KEY) or {}
    rows: dict[tuple[Any, ...], list[str]] = {}
    for name, r in (data.get("critics") or {}).items():
        key = tuple(r.get(k) for k in ("auroc", "identification", "oracle_identification"))
        rows.setdefault((key, tuple(r.get("oracle_identification_ci") or ())), []).append(name)
    said, below = [], True
    current = (metrics.get("07_benchmark") or {}).get("critics") or {}
    order = {name: i for i, name in enumerate(current)}
    target = data.get("target")
    for ((area, shipped, best), ci), names in rows.items():
        names = sorted(names, key=lambda n: order.get(n, len(order)))
        stale = any(abs((current.get(n) or {}).get("verdict_auroc", -1) - area) > 5e-4 for n in names)
        if stale:
            return [f"`{_BOUND_FILE}` was written for another benchmark run; re-run "
                    "`benchmarks/bench_identification_bound.py` to read the identification ceiling."]
        lo, hi = ci if len(ci) == 2 else (None, None)
        below = below and isinstance(best, (int, float)) and isinstance(target, (int, float)) and best < target
        said.append(f"{' and '.join(names)} {_pct1(best)} ({_pct1(lo)}..{_pct1(hi)}) against {_pct1(shipped)} at the "
                    "dev threshold")
    if not said:
        return []
    need = next(iter((data.get("critics") or {}).values())).get("auroc_for_target")
    goal = f"{100 * target:g}%" if isinstance(target, (int, float)) else "the target"
    return [f"The best identification any threshold gives these verdict scores (`{_BOUND_FILE}`; an oracle that reads "
            f"the test labels, a ceiling and never a setting): " + "; ".join(said)
            + (f". On these answers no threshold reaches {goal}" if below else f". The target is {goal}")
            + f"; with equal-variance normal scores {goal} needs a verdict AUROC of about {_f(need, 2)}."]


def _pct1(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) and not isinstance(x, bool) else "n/a"


def _training_cost(row: Mapping[str, Any]) -> str:
    calls, steps, seconds = (row.get(k) for k in ("training_calls", "training_steps", "training_seconds"))
    if calls is None or steps is None or seconds is None:
        return _DASH
    return f"{int(calls)} calls, {int(steps)} steps, {_f(seconds / 60, 1)} min"


_COMPARISON_HEADER = ("method", "n", "F1", "ΔF1 (95% CI)", "p (Holm)", "right", "Δ right (95% CI)", "p (Holm)",
                      "calls / question", "training: LLM calls, optimizer steps, time", "flagged")


def _comparison_rows(metrics: Mapping[str, Any], methods: Sequence[str], extra: Sequence[str]) -> list[list[str]]:
    """Rows of ``14_comparison.json`` for the named methods, then the named oracle and ablation rows."""
    stem = "14_comparison"
    by_method = _get(metrics, stem).get("degenerate_by_method", {})
    rows = []
    for group, names in (("comparison", methods), ("oracle_and_ablation_rows", extra)):
        for name in names:
            key = (group, "testbed", name)
            base = name == BASELINE
            judged = "delta_judge_acc" in _get(metrics, stem, *key)
            rows.append([
                name if group == "comparison" else f"*{name}*",
                str(int(_number(metrics, stem, *key, "n"))),
                _f(_number(metrics, stem, *key, "f1")),
                _DASH if base else _change(metrics, stem, *key),
                _DASH if base else _f(_number(metrics, stem, *key, "p_holm", nullable=True), 4),
                _f(_number(metrics, stem, *key, "judge_acc")) if judged else _DASH,
                _DASH if base or not judged else _change(metrics, stem, *key, fields=(
                    "delta_judge_acc", "judge_ci_low", "judge_ci_high")),
                _DASH if base or not judged else _f(_number(metrics, stem, *key, "judge_p_holm", nullable=True), 4),
                _f(_number(metrics, stem, *key, "calls_per_question", nullable=True), 2),
                _training_cost(_get(metrics, stem, *key)) if group == "comparison" else _DASH,
                "yes" if by_method.get(name) else "",
            ])
    return rows


def render_comparison(metrics: Mapping[str, Any]) -> str:
    """Every method on the ladder's questions (``14_comparison.json``), oracle and ablation rows last."""
    stem = "14_comparison"
    methods = _get(metrics, stem, "comparison", "testbed")
    extra = _get(metrics, stem).get("oracle_and_ablation_rows", {}).get("testbed", {})
    by_method = _get(metrics, stem).get("degenerate_by_method", {})
    header = _COMPARISON_HEADER
    rows = _comparison_rows(metrics, _ordered(methods), list(extra))
    significant = _get(metrics, stem, "summary", "testbed").get("significant_after_holm", [])
    n_family = len(methods) - (BASELINE in methods)
    n = int(_number(metrics, stem, "comparison", "testbed", BASELINE, "n"))
    judged = [m for m in methods if "delta_judge_acc" in methods[m]]
    notes = [
        "Methods: " + _ci_sentence(metrics, stem, ("comparison", "testbed"), methods)
        + " Significant after Holm: " + (", ".join(significant) if significant else "none") + ".",
        *(["Methods, judged right: " + _ci_sentence(metrics, stem, ("comparison", "testbed"), judged,
                                                     what="the change in the share judged right",
                                                     ends=("judge_ci_low", "judge_ci_high"))
           + " Significant after Holm: " + (", ".join(
               m for m in judged if m != BASELINE and isinstance(methods[m].get("judge_p_holm"), (int, float))
               and methods[m]["judge_p_holm"] < 0.05) or "none") + "."] if judged else []),
        "Oracle and ablation rows: " + _ci_sentence(metrics, stem, ("oracle_and_ablation_rows", "testbed"), extra),
        (f"Minimum detectable F1 change at n = {n} (80% power, conservative): "
         f"{_f(_number(metrics, stem, 'summary', 'testbed', 'mde_conservative'))}."),
        *filter(None, [_answerability_note(metrics, [*_ordered(methods), *extra])]),
        _flags_line(_flags(metrics, stem)),
        environment_line(metrics, stem),
    ]
    intro = (f"Standard RAG and {n_family} methods on the ladder's {n} testbed test questions, with the same "
             f"generator, retriever and passages. \"right\" is the share of answers the audited judge calls right. "
             f"Each p (Holm) is a paired permutation p corrected across the {n_family} methods; the rows in "
             "italics (oracle and ablation) are outside that family. Calls per question count every LLM call at "
             "test time; training counts what each method spent before it.")
    return _compose(intro, header, rows, notes)


def render_comparison_details(metrics: Mapping[str, Any]) -> str:
    """Accuracy, per-question F1 SD and paired MDE of every row of ``14_comparison.json``."""
    stem = "14_comparison"
    rows = []
    for group in ("comparison", "oracle_and_ablation_rows"):
        names = _get(metrics, stem, group, "testbed")
        for name in (_ordered(names) if group == "comparison" else names):
            key = (group, "testbed", name)
            rows.append([name if group == "comparison" else f"*{name}*", str(int(_number(metrics, stem, *key, "n"))),
                         *(_f(_number(metrics, stem, *key, k)) for k in ("em", "acc")),
                         _f(_number(metrics, stem, *key, "f1_sd", nullable=True)),
                         _DASH if name == BASELINE else _f(_number(metrics, stem, *key, "p", nullable=True), 4),
                         _DASH if name == BASELINE else _f(_number(metrics, stem, *key, "mde", nullable=True))])
    intro = ("The comparison's rows with their EM and accuracy, the SD of per-question F1, the F1 change's paired "
             "permutation p before the Holm correction and the paired minimum detectable F1 change (80% power) "
             "from each row's paired differences with standard RAG.")
    return _compose(intro, ["method", "n", "EM", "acc", "F1 SD", "p", "paired MDE"], rows,
                    [environment_line(metrics, stem)])


def render_ladder_by_type(metrics: Mapping[str, Any]) -> str:
    """The ladder's F1 change per question type (``08_correction.json`` ``ladder.testbed_by_type``)."""
    stem = "08_correction"
    by_type = ("ladder", "testbed_by_type")
    ladder = _get(metrics, stem, "ladder", "testbed")
    names = _without_repeated_round([n for n in _ordered(ladder) if n != BASELINE], ladder)
    rows = []
    for qtype in _get(metrics, stem, *by_type):
        rows.append([qtype, str(int(_number(metrics, stem, *by_type, qtype, BASELINE, "n"))),
                     _f(_number(metrics, stem, *by_type, qtype, BASELINE, "f1"))]
                    + [_signed(_number(metrics, stem, *by_type, qtype, name, "delta_f1")) for name in names])
    intro = "F1 of standard RAG and each row's F1 change against it, per question type of the testbed test split."
    return _compose(intro, ["type", "n", "standard RAG F1", *names], rows, [environment_line(metrics, stem)])


def render_ladder_trivia(metrics: Mapping[str, Any]) -> str:
    """The ladder's rows on trivia (``08_correction.json`` ``ladder.trivia``), beside its answer recall."""
    stem = "08_correction"
    intro = (f"Trivia rows: the answer recall of the retrieved passages is "
             f"{_f(_number(metrics, stem, 'ladder', 'trivia_answer_recall'))}, too low for any effect to be claimed; "
             f"minimum detectable F1 change {_f(_number(metrics, stem, 'ladder', 'trivia_mde_f1'))}.")
    return _compose(intro, _LADDER_HEADER, _ladder_rows(metrics, "trivia"), [environment_line(metrics, stem)])


def render_standard_rag(metrics: Mapping[str, Any]) -> str:
    """Standard RAG and closed-book answers per testbed question type (``01_retrieval_rag.json``)."""
    stem = "01_retrieval_rag"
    rag = ("rag", "testbed", "test")
    closed = ("closed_book", "testbed", "test")
    rows = []
    for qtype in _get(metrics, stem, *rag, "by_type"):
        t = (*rag, "by_type", qtype)
        rows.append([qtype, str(int(_number(metrics, stem, *t, "n"))),
                     *(_f(_number(metrics, stem, *t, k)) for k in ("em", "f1", "acc")),
                     _f(_number(metrics, stem, *closed, "by_type", qtype, "f1"))])
    rows.append(["all", str(int(_number(metrics, stem, *rag, "n"))),
                 *(_f(_number(metrics, stem, *rag, k)) for k in ("em", "f1", "acc")),
                 _f(_number(metrics, stem, *closed, "f1"))])
    intro = ("Standard RAG on the testbed test split, per question type, beside closed-book answers of the same "
             f"generator. Abstain rate {_f(_number(metrics, stem, *rag, 'abstain_rate'))}.")
    return _compose(intro, ["type", "n", "EM", "F1", "acc", "closed-book F1"], rows, [environment_line(metrics, stem)])


_JUDGE_NAMES = {"f1": "F1", "em": "EM", "acc": "accuracy", "truth": "truth", "llm_teacher": "LLM teacher"}


def render_judge(metrics: Mapping[str, Any]) -> str:
    """Every judge of ``correct`` against the hand audit (``02_error_sampling.json`` ``judge``)."""
    stem = "02_error_sampling"
    judge = _get(metrics, stem, "judge")
    metric, threshold = _get(metrics, stem, "judge", "metric"), _number(metrics, stem, "judge", "threshold")
    audit = judge.get("audit") or {}
    if not audit.get("exists"):
        return (f"Notebook 02 judged answers with `{metric}` >= {_f(threshold, 2)}; no hand audit was read "
                f"(`data/audit/audit.jsonl`), so no judge's agreement with people is measured.\n\n"
                f"- {environment_line(metrics, stem)}")
    choosing = _get(metrics, stem, "judge", "audit", "choosing")

    def cell(part: Mapping[str, Any], j: str, rows: int) -> str:
        a, lo, hi = (part.get(k, {}).get(j) for k in ("agreement", "agreement_ci_low", "agreement_ci_high"))
        if a is None:
            return _DASH
        n = part.get("judged", {}).get(j, rows)
        partial = "" if n == rows else f", {n} judged"
        return f"{_pct(a)}% ({_pct(lo)}..{_pct(hi)}{partial})"

    rows = []
    for j in audit["agreement"]:
        conf = audit["confusion"].get(j) or {}
        rows.append([_JUDGE_NAMES.get(j, j) + (" **(used)**" if j == metric else ""),
                     cell(audit, j, int(audit["n_test"])), cell(choosing, j, int(choosing["n"])),
                     str(conf.get("credited_wrong", _DASH)), str(conf.get("rejected_right", _DASH))])
    labels = audit.get("labels", {})
    intro = (f"Who decides that an answer is right: notebook 02 measures every judge of `correct` against "
             f"{int(audit['n'])} real answers labelled by hand ([data/audit](data/audit/README.md)): "
             f"{int(audit['n_test'])} test answers ({labels.get('correct', 0)} right), which only report, and "
             f"{int(choosing['n'])} train and dev answers, which choose the default. Agreement with Wilson 95% "
             "intervals; the last two columns count the judge's errors on the test rows.")
    best = audit.get("best_choosing")
    versus = choosing.get("best_versus") or {}
    margins = "; ".join(f"{_JUDGE_NAMES.get(j, j)} {_signed(100 * v['delta'], 1)} points "
                        f"({_signed(100 * v['ci_low'], 1)}..{_signed(100 * v['ci_high'], 1)})"
                        for j, v in sorted(versus.items(), key=lambda kv: kv[1]["delta"]))
    tied = [_JUDGE_NAMES.get(j, j) for j, v in versus.items() if v["ci_low"] <= 0]
    notes = [f"Best on the choosing rows: `{best}`; this run judged with "
             f"`{metric}`{'' if metric == 'truth' or metric == 'acc' else f' >= {_f(threshold, 2)}'}."
             + (f" Its lead on those rows, paired by row with bootstrap 95% CIs: {margins}"
                + (f"; not separable from {', '.join(tied)} at this size." if tied else ".") if versus else "")]
    later = ((metrics.get("08_correction") or {}).get("critic_verdict") or {}).get("test", {}).get("testbed", {}).get("judge")
    if isinstance(later, str) and not later.startswith(metric):
        notes.append(f"The correction ladder (08) last ran with the judge `{later}`: its tables, and those of every "
                     "stage marked not up to date, come from that run until they are re-run on this one.")
    notes.append(environment_line(metrics, stem))
    return _compose(intro, ["judge", "test rows", "choosing rows", "credits a wrong answer", "rejects a right one"],
                    rows, notes)


def _rate_ci(metrics: Mapping[str, Any], stem: str, *keys: str) -> str:
    """A rate in % with its interval (``<key>_ci``), or "unmeasured" when it is null."""
    *head, last = keys
    return _pct_ci(_number(metrics, stem, *keys, nullable=True), _get(metrics, stem, *head).get(f"{last}_ci"))


def _pct_ci(rate: float | None, ci: Sequence[float] | None) -> str:
    """A rate in % with its interval (Wilson), or "unmeasured" when it is null."""
    if rate is None:
        return "unmeasured"
    return f"{_pct(rate)}%" + (f" ({_pct(ci[0])}..{_pct(ci[1])}%)" if ci else "")


def _separation(block: Mapping[str, Any]) -> str:
    """Whether the accept rates on right and on wrong answers have Wilson intervals apart."""
    right, wrong = block.get("accept_rate_correct_ci"), block.get("accept_rate_wrong_ci")
    if not right or not wrong:
        return ""
    if right[0] > wrong[1]:
        return " (intervals apart)"
    return " (intervals overlap)" if right[1] >= wrong[0] else " (wrong answers accepted more)"


SIMRAG_BENCH_KEY = "simrag_critic_bench"   # where check() puts reports/benchmarks/simrag_critic.json
_SIMRAG_BENCH_FILE = "reports/benchmarks/simrag_critic.json"


def _simrag_heldout(metrics: Mapping[str, Any], sr: str) -> str:
    """SIM-RAG's held-out accept rates: the test run's critic, then every other critic checked."""
    held = ("critic", "heldout")
    name = _get(metrics, sr, "critic").get("name")
    out = (f"held out, {f'the {name} critic ' if name else ''}accepts "
           f"{_rate_ci(metrics, sr, *held, 'accept_rate_correct')} of {int(_number(metrics, sr, *held, 'n_correct'))} "
           f"right and {_rate_ci(metrics, sr, *held, 'accept_rate_wrong')} of "
           f"{int(_number(metrics, sr, *held, 'n_wrong'))} wrong answers{_separation(_get(metrics, sr, *held))}")
    others = _get(metrics, sr).get("heldout_confusion_by_critic") or {}
    for other in sorted(k for k in others if k != name):
        keys = ("heldout_confusion_by_critic", other)
        out += (f"; the {other} critic {_rate_ci(metrics, sr, *keys, 'accept_rate_correct')} and "
                f"{_rate_ci(metrics, sr, *keys, 'accept_rate_wrong')}{_separation(others[other])}")
    bench = metrics.get(SIMRAG_BENCH_KEY) or {}
    extra = [c for c in bench.get("critics", []) if c.get("name") not in {name, *others}]
    if extra:
        same = (bench.get("heldout") == int(_number(metrics, sr, *held, "n_correct")) + int(_number(metrics, sr, *held, "n_wrong"))
                and bench.get("heldout_accept") == int(_number(metrics, sr, *held, "n_correct")))
        out += (f"; on {'the same' if same else 'its own'} held-out examples, `{_SIMRAG_BENCH_FILE}`: "
                + "; ".join(f"the {c['name']} critic {_pct_ci(c['accept_rate_correct'], c.get('accept_rate_correct_ci'))} "
                            f"and {_pct_ci(c['accept_rate_wrong'], c.get('accept_rate_wrong_ci'))}{_separation(c)}"
                            for c in extra))
    return out


def _baseline_rows(metrics: Mapping[str, Any]) -> list[list[str]]:
    """One row a baseline: name, what it learned from, its own diagnostics (``09``-``13`` metrics)."""
    def count(stem: str, *keys: str) -> int:
        return int(_number(metrics, stem, *keys))

    rp, sr, rg = "12_repair", "11_simrag", "13_ragec"
    plans = _get(metrics, rp, "test")
    top = max(plans["plan_shares"].items(), key=lambda kv: kv[1], default=None)  # JSON keys come sorted
    answers = _get(metrics, rg, "answers")
    wrong = sum(int(v["wrong"]) for v in answers.values())
    undiagnosed = _get(metrics, rg).get("undiagnosed") or {}
    feedback = _get(metrics, "09_self_refine", "self_refine")
    kinds: dict[str, int] = {}
    for row in (feedback.get("feedback_by_type") or {}).values():
        for k, v in row.get("kinds", {}).items():
            kinds[k] = kinds.get(k, 0) + int(v)
    crag_actions: dict[str, int] = {}
    for block in _get(metrics, "10_crag", "crag").values():
        for a, v in (block.get("test_actions") or {}).items():
            crag_actions[a] = crag_actions.get(a, 0) + int(v)
    return [
        ["RePAIR",
         f"{count(rp, 'training', 'offpolicy_states')} off-policy and {count(rp, 'training', 'onpolicy_states')} "
         f"on-policy states ({count(rp, 'training', 'offpolicy_states_with_pair')} and "
         f"{count(rp, 'training', 'onpolicy_states_with_pair')} with a preference pair)",
         f"{count(rp, 'test', 'executed')} test plans ran, {count(rp, 'test', 'distinct')} distinct"
         + (f"; the most common is {_pct(top[1])}% of them" if top else "")
         + (f"; off-policy, the plan with the best mean F1 over the states it ran on earns "
            f"{_f(pr['best_single_reward'])} ({pr['best_single'].split(':')[-1]}), and the best of the plans each "
            f"state ran {_f(pr['per_state_best_reward'])} ({pr['tied_states']} of {pr['states']} states tie)"
            if isinstance(pr := _get(metrics, rp, "training").get("offpolicy_rewards"), Mapping) else "")],
        ["SIM-RAG",
         f"{count(sr, 'critic', 'balanced_train')} balanced examples ({count(sr, 'critic', 'distinct_train')} distinct, "
         f"{count(sr, 'critic', 'train_accept')} right answers)",
         _simrag_heldout(metrics, sr)],
        ["RAGEC", "no training (K votes per error)",
         f"{int(_number(metrics, rg, 'errors'))} of {wrong} wrong answers diagnosed"
         + ("; undiagnosed: " + ", ".join(f"{k} {v}" for k, v in undiagnosed.items()) if undiagnosed else "")
         + "; blamed stages: " + ", ".join(f"{k} {v}" for k, v in _get(metrics, rg, "stages").items())],
        ["Self-Refine", "no training",
         f"feedback approves {count('09_self_refine', 'self_refine', 'approved')} of "
         f"{count('09_self_refine', 'self_refine', 'questions')} answers; first-round feedback: "
         + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])) or "none")],
        ["CRAG", "a retrieval evaluator and two thresholds tuned on dev",
         "test actions: " + ", ".join(f"{k} {v}" for k, v in crag_actions.items())],
    ]


def render_baselines(metrics: Mapping[str, Any]) -> str:
    """What each baseline learned from and what its own diagnostics show (``09``-``13`` metrics)."""
    rp = "12_repair"
    rows = _baseline_rows(metrics)
    intro = ("What each baseline learned from and what its own diagnostics show; per question type in the stages' "
             "metrics (`feedback_by_type`, `test_actions_by_type`, `stage_types`). Intervals are Wilson 95%.")
    notes = [_flags_line([d for stem in BLOCK_SOURCES["baselines"] for d in _flags(metrics, stem)]),
             environment_line(metrics, rp)]
    return _compose(intro, ["method", "trained on", "diagnostics"], rows, notes)


# What the papers report for each row of the "papers" block (facts from the papers, not ours).
_PAPER_FIGURES = {
    "pool": "15 models x 9 datasets",
    "tags": "> 20,000 -> ~4,000",
    "taxonomy": "7 / 19 / 4,000+",
    "clusters": "20",
    "critic": "identification 96.2%, tier-1 / tier-2 F1 65.2 / 42.4 (RAG-Critic 3B, Table 5)",
    "correction": "+2-6 points over standard RAG (RAG-Critic, Table 3)",
    "baselines": "RePAIR, CRAG, SIM-RAG and Self-Refine gain in their papers",
    "rag": "EM/F1 of 7B-70B generators",
    "ragec": "57.8% stage, 40.3% type (RAGEC, with human annotators)",
}
_BENCHMARK_CRITIC = "SFT+DPO critic"


def _share(x: float | None) -> str:
    """A share in %, or "unmeasured" when the file holds null."""
    return "unmeasured" if x is None else f"{_pct(x)}%"


def render_papers(metrics: Mapping[str, Any]) -> str:
    """Our numbers beside the papers': one row per stage of the story, each read from its metrics file."""
    es, tg, tx = "02_error_sampling", "03_tagging", "04_taxonomy"
    by_dataset = _get(metrics, es, "by_dataset")
    pool = (f"{len(_get(metrics, es, 'by_member'))} configurations of the generator x {len(by_dataset)} datasets, "
            f"{int(_number(metrics, es, 'samples'))} answers, error rate {_f(_number(metrics, es, 'error_rate'))} "
            f"({int(_number(metrics, es, 'errors'))} wrong, {int(_number(metrics, es, 'correct'))} right)")
    tags = (f"{int(_number(metrics, tg, 'tags_before_normalization'))} tags "
            f"({int(_number(metrics, tg, 'unique_tags_before_normalization'))} unique) -> "
            f"{int(_number(metrics, tg, 'unique_tags_after_normalization'))} unique")
    taxonomy = (f"{int(_number(metrics, tx, 'taxonomy', 'tier1'))} / {int(_number(metrics, tx, 'taxonomy', 'tier2'))} "
                f"/ {int(_number(metrics, tx, 'tags_clustered'))} (tier 3: the normalized tags)")

    bm = "07_benchmark"
    critics = _get(metrics, bm, "critics")
    ident = ", ".join(f"{name} {_share(_number(metrics, bm, 'critics', name, 'identification', 'acc_avg', nullable=True))}"
                      for name in critics)
    c = ("critics", _BENCHMARK_CRITIC)
    n_bench = int(_number(metrics, bm, "benchmark", "n_error") + _number(metrics, bm, "benchmark", "n_correct"))
    critic = (f"identification {ident} ({n_bench} samples); the {_BENCHMARK_CRITIC}'s verdict AUROC "
              f"{_f(_number(metrics, bm, *c, 'verdict_auroc', nullable=True))} ({_ci(metrics, bm, *c)}), style-only "
              f"baseline {_f(_number(metrics, bm, 'style_baseline', 'verdict_auroc', nullable=True))}; tier-1 / tier-2 F1 "
              f"{' / '.join(_pct(_number(metrics, bm, *c, 'classification', k)) for k in ('tag1_f1', 'tag2_f1'))}; trained on "
              f"{int(_number(metrics, '05_critic_sft', 'train', 'examples'))} SFT examples and "
              f"{int(_number(metrics, '06_critic_dpo', 'pairs', 'total'))} DPO pairs")

    lad = ("ladder", "testbed")
    ladder = _get(metrics, "08_correction", *lad)
    shown = _without_repeated_round([name for name in ladder if name.startswith("RAG-Critic")
                                     or name == "oracle critique"], ladder)
    correction = "; ".join(f"{name} {_change(metrics, '08_correction', *lad, name)}" for name in shown)
    correction += f" on {int(_number(metrics, '08_correction', *lad, BASELINE, 'n'))} test questions"

    cmp_ = "14_comparison"
    methods = [m for m in _ordered(_get(metrics, cmp_, "comparison", "testbed")) if m != BASELINE]
    significant = _get(metrics, cmp_, "summary", "testbed").get("significant_after_holm", [])
    baselines = ", ".join(f"{m} {_signed(_number(metrics, cmp_, 'comparison', 'testbed', m, 'delta_f1'))}"
                          for m in methods if not m.startswith("RAG-Critic"))
    baselines += "; significant after Holm: " + (", ".join(significant) if significant else "none")

    rr = ("rag",)
    rag_ds = _get(metrics, "01_retrieval_rag", *rr)
    rag = "; ".join(f"{ds} F1 {_f(_number(metrics, '01_retrieval_rag', *rr, ds, 'test', 'f1'))} "
                    f"(EM {_f(_number(metrics, '01_retrieval_rag', *rr, ds, 'test', 'em'))})"
                    for ds in rag_ds if "test" in rag_ds[ds])

    ag = ("agreement",)
    n_ag = int(_number(metrics, "13_ragec", *ag, "n"))
    ragec = (f"no human labels; agreement with RAG-Critic's tier-1 labels on {n_ag} answers: side "
             f"{_share(_number(metrics, '13_ragec', *ag, 'side_agreement', nullable=True))}, type "
             f"{_share(_number(metrics, '13_ragec', *ag, 'type_agreement', nullable=True))}")
    if n_ag == 0:  # say why nothing was shared
        ragec += (f" (of RAGEC's wrong answers, {int(_number(metrics, '13_ragec', *ag, 'n_missing'))} differ from "
                  f"those RAG-Critic judged and it called the other "
                  f"{int(_number(metrics, '13_ragec', *ag, 'n_critic_correct'))} right)")

    rows = [
        ["error pool", _PAPER_FIGURES["pool"], pool],
        ["atomic error tags after normalization", _PAPER_FIGURES["tags"], tags],
        ["taxonomy tiers 1 / 2 / 3", _PAPER_FIGURES["taxonomy"], taxonomy],
        ["Ward clusters", _PAPER_FIGURES["clusters"], str(int(_number(metrics, tx, "clusters")))],
        ["critic on the RAG-Error benchmark (identification: mean of right and wrong)", _PAPER_FIGURES["critic"],
         critic],
        ["critic-guided correction, ΔF1 (95% CI)", _PAPER_FIGURES["correction"], correction],
        ["the baselines, ΔF1 vs standard RAG", _PAPER_FIGURES["baselines"], baselines],
        ["standard RAG (test)", _PAPER_FIGURES["rag"], rag],
        ["RAGEC stage and type agreement", _PAPER_FIGURES["ragec"], ragec],
    ]
    intro = ("The papers use 3B-72B models on GPUs. The numbers here come from the generator, device and dtype in the "
             "environment line below (the embedded default: one 135M model, also the base of the critic and the "
             "planner, on a CPU); they show that every stage runs and can be read, not that a small model matches the "
             "papers. Each cell on the right is read from its stage's metrics file.")
    notes = [environment_line(metrics, "08_correction")]
    return _compose(intro, ["what", "paper", "here"], rows, notes)


STAGE_COPIES_KEY = "stage_copies"   # where check() puts the timed copies and the lock's stage fingerprints


def _copy_times(metrics: Mapping[str, Any]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(stem, cpu class) -> the latest timed copy of that stage on that class whose fingerprint is the
    committed dvc.lock's for the stage (a copy of older code or inputs is left out) and that ran
    cold: a stage with ``persist: true`` outputs counts only where the copy deleted them first
    (its ``cleared``), since restored they let the stage resume instead of running."""
    data = metrics.get(STAGE_COPIES_KEY) or {}
    prints, persisted = data.get("fingerprints") or {}, data.get("persisted") or {}
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for entry in sorted(data.get("copies") or [], key=lambda e: str(e.get("date"))):
        cold = set(persisted.get(entry.get("stage")) or ()) <= set(entry.get("cleared") or ())
        if prints.get(entry.get("stage")) == entry.get("fingerprint") and isinstance(entry.get("cpu_class"), str) and cold:
            out[(str(entry["stem"]), entry["cpu_class"])] = entry
    return out


def render_stage_times(metrics: Mapping[str, Any]) -> str:
    """Each stage's wall time, one column per CPU class the metrics files (or timed copies) record.

    Read from ``environment.wall_seconds`` and ``environment.cpu_class`` (the stage runner writes
    them); a stage without them reads "not recorded", a stage without a metrics file "not run yet",
    and the total "not recorded" while any stage does either; a further row then sums, per class,
    the stages recorded on it (how many, and their minutes): a lower bound on a cold run there. The
    stage's cold run in a restored copy (``reports/benchmarks/stage_copies.json``), when one of the
    committed code and inputs exists on a class, is shown for that class, marked "(copy)", in place
    of the committed run's time: a copy always starts from empty caches, a committed run may not.
    """
    envs = {stem: (metrics.get(stem) or {}).get("environment") or {} for stem in _STAGE_STEMS}
    copies = _copy_times(metrics)
    classes = sorted({env["cpu_class"] for env in envs.values() if isinstance(env.get("cpu_class"), str)}
                     | {cls for stem, cls in copies if stem in envs})
    columns = classes or ["CPU class not recorded"]
    dtypes = {cls: sorted({str((env.get("generator") or {}).get("dtype")) for env in envs.values()
                           if env.get("cpu_class") == cls}
                          | {str(c.get("dtype")) for (stem, c_cls), c in copies.items() if c_cls == cls and stem in envs})
              for cls in classes}

    def minutes(stem: str, env: Mapping[str, Any], cls: str) -> tuple[float | None, bool]:
        seconds = env.get("wall_seconds")
        if (stem, cls) in copies:
            return copies[(stem, cls)]["wall_seconds"] / 60, True
        if env.get("cpu_class") == cls and isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            return seconds / 60, False
        return None, False

    rows, totals, copy_dates = [], {cls: 0.0 for cls in columns}, set()
    for stem, env in envs.items():
        if stem not in metrics:
            totals = {cls: None for cls in columns}
            rows.append([f"`{stem}`"] + ["not run yet"] * len(columns))
            continue
        cells = []
        for cls in columns:
            m, copied = minutes(stem, env, cls)
            if copied:
                copy_dates.add(str(copies[(stem, cls)]["date"]))
            totals[cls] = totals[cls] + m if m is not None and totals[cls] is not None else None
            cells.append((f"{m:.1f} min" + (" (copy)" if copied else "")) if m is not None else "not recorded")
        rows.append([f"`{stem}`"] + cells)
    rows.append(["all stages"] + [f"{t:.1f} min" if t is not None else "not recorded" for t in totals.values()])
    if any(t is None for t in totals.values()):  # a chain of mixed classes: what each class holds, summed
        found = {cls: [minutes(stem, env, cls) for stem, env in envs.items() if stem in metrics] for cls in columns}
        found = {cls: [(m, c) for m, c in vals if m is not None] for cls, vals in found.items()}
        if any(found.values()):
            def cell(vals: list[tuple[float, bool]]) -> str:
                n_copies = sum(c for _, c in vals)
                return (f"{len(vals)} of {len(envs)}: {sum(m for m, _ in vals):.1f} min"
                        + (f" ({n_copies} in copies)" if n_copies else ""))
            rows.append(["the stages recorded"] + [cell(found[cls]) for cls in columns])
    header = ["stage"] + [f"{cls} ({', '.join(dtypes[cls])})" if cls in dtypes else cls for cls in columns]
    group = _bf16_group_line(envs, metrics, copies)
    intro = ("Each stage's own wall time in the committed run, from `environment.wall_seconds` of its "
             "`reports/metrics/<stem>.json` (written by the stage runner), per CPU class (`environment.cpu_class`; "
             "amx, avx512_bf16, avx2 or cuda) with the generator's dtype.")
    note = []
    if copy_dates:
        note = ["", "(copy): the stage alone, cold, in a restored copy of the repository on that class "
                "(`benchmarks/bench_stage_copy.py`, `reports/benchmarks/stage_copies.json`; "
                + ", ".join(sorted(copy_dates)) + "), reading the committed outputs of the stages before it, with the code, "
                "inputs and params of the committed run; its outputs were not kept. A stage that appends to a "
                "`persist: true` log is shown only from a copy that deleted the log first: restored with the "
                "shipped outputs, the log lets the stage resume instead of generating."]
        hosts = _copy_hosts({key: c for key, c in copies.items() if key[0] in metrics})
        if hosts:
            note += ["", hosts]
        agreement = [_copy_agreement(stem, cls, c["vs_committed"]) for (stem, cls), c in sorted(copies.items())
                     if stem in metrics and isinstance(c.get("vs_committed"), Mapping)]
        if agreement:
            note += ["", "How a copy's metrics compare with the committed run's (`vs_committed` in the record; "
                     "times left out): " + "; ".join(agreement) + "."]
    return "\n".join([intro, ""] + _table(header, rows) + ([""] + group if group else []) + note)


BF16_CLASSES = ("amx", "avx512_bf16")
"""The CPU classes whose generator runs in bfloat16; the budgets speak of them together."""
COLD_REPRO_BUDGET_MIN = 150   # docs/reproduce.md's budget table: a cold `dvc repro` on either class


def _bf16_group_line(envs: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, Any],
                     copies: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[str]:
    """One sentence: a cold run's time on AVX512-BF16 or AMX, summed per stage over both classes.

    Each stage counts with the slowest of its times on either class: its timed copies (cold by
    construction) and its committed run there (which may have found warm caches, so it is taken
    only where it is the slower: hosts of one class differ in speed, and a copy on a fast host must
    not hide a slower cold run). The sentence says how many stages each kind gave and which are
    missing. Empty when neither class holds a time.
    """
    picked: dict[str, tuple[float, bool]] = {}
    for stem, env in envs.items():
        if stem not in metrics:
            continue
        times = [(copies[(stem, c)]["wall_seconds"] / 60, True) for c in BF16_CLASSES if (stem, c) in copies]
        seconds = env.get("wall_seconds")
        if env.get("cpu_class") in BF16_CLASSES and isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            times.append((seconds / 60, False))
        if times:
            picked[stem] = max(times, key=lambda t: (t[0], t[1]))
    if not picked:
        return []
    n_cold = sum(c for _, c in picked.values())
    missing = [f"`{stem}`" for stem in envs if stem not in picked]
    text = (f"On AVX512-BF16 or AMX together (the classes whose generator runs in bfloat16, which the budgets "
            f"name together), per stage the slowest of its copies and its committed run on either class: "
            f"{len(picked)} of {len(envs)} stages, {sum(m for m, _ in picked.values()):.1f} min "
            f"({n_cold} from copies, {len(picked) - n_cold} from committed runs)")
    text += f"; not timed on either class: {', '.join(missing)}" if missing else ""
    return [text + f". The budget of a cold `dvc repro` there is {COLD_REPRO_BUDGET_MIN} min; a committed run may "
            "have found its LLM calls cached, a copy never does."]


def _copy_hosts(copies: Mapping[tuple[str, str], Mapping[str, Any]]) -> str:
    """One line on the machines behind the copies shown: per CPU class, the host probe's seconds
    (``host.generate_seconds`` of a record, :func:`ragcritic_lib.pipeline.workspace.host_speed`; lower
    is faster) as a range, and how many of the class's copies were probed; "" when none was."""
    parts = []
    for cls in sorted({c for _, c in copies}):
        shown = [c for (_, c_cls), c in copies.items() if c_cls == cls]
        probes = sorted(float(s) for s in ((c.get("host") or {}).get("generate_seconds") for c in shown)
                        if isinstance(s, (int, float)) and not isinstance(s, bool))
        if probes:
            span = f"{probes[0]:.1f} s" if probes[0] == probes[-1] else f"{probes[0]:.1f}-{probes[-1]:.1f} s"
            parts.append(f"{cls} {span} ({len(probes)} of its {len(shown)} copies probed)")
    if not parts:
        return ""
    return ("The machines behind the copies (`benchmarks/bench_host_speed.py`: seconds for the generator to answer "
            "16 fixed standard RAG prompts on that host, lower is faster; copies made before the probe existed have "
            "none): " + "; ".join(parts) + ".")


def _copy_agreement(stem: str, cls: str, vs: Mapping[str, Any]) -> str:
    """One copy's agreement with the committed metrics, in words: equal numbers, the largest change."""
    heads = [f"`{h.get('key')}` {h.get('committed')} → {h.get('copy')}" for h in vs.get("headline") or []]
    text = (f"`{stem}` on {cls}, " + (", ".join(heads) + "; " if heads else "")
            + f"{vs.get('equal', 0)} of {vs.get('numbers', 0)} numbers equal ({vs.get('within_0.01', 0)} within 0.01)")
    largest = vs.get("largest") or []
    if largest:
        top = largest[0]
        text += f", the largest change `{top.get('key')}` {top.get('committed')} → {top.get('copy')}"
    if vs.get("texts"):
        text += f", {vs.get('texts_equal', 0)} of {vs.get('texts')} other values equal"
    return text


# docs/methods/<page>.md: one block a method, "method_<key>", with the method's rows of the comparison
# (14), its own stage's diagnostics and flags. (method name in the comparison or None, its stage's
# metrics stem, its row in the baselines block or None, its oracle and ablation rows' prefix or None)
METHOD_CARDS: dict[str, tuple[str | None, str, str | None]] = {
    "method_rag_critic": ("RAG-Critic", "08_correction", None),
    "method_self_refine": ("Self-Refine", "09_self_refine", "Self-Refine"),
    "method_crag": ("CRAG", "10_crag", "CRAG"),
    "method_simrag": ("SIM-RAG", "11_simrag", "SIM-RAG"),
    "method_repair": ("RePAIR", "12_repair", "RePAIR"),
    "method_ragec": (None, "13_ragec", "RAGEC"),
}
for _card, (_name, _stem, _row) in METHOD_CARDS.items():
    BLOCK_SOURCES[_card] = tuple(dict.fromkeys(
        (("14_comparison",) if _name else ()) + ((_stem,) if not _row else BLOCK_SOURCES["baselines"]) + (_stem,)))


def _run_caption(metrics: Mapping[str, Any], stems: Sequence[str], said: Sequence[str] = ()) -> str:
    """Which run a card's numbers come from: each file's CPU class and wall time, or that it predates
    the stage runner that records them (an older run whose stage is due to re-run); not again for
    the stems in ``said``, whose environment line says so already."""
    old, seen = [], []
    for stem in stems:
        env = _get(metrics, stem, "environment")
        if _recorded_by_runner(env):
            seen.append(f"`{stem}` ran on `{env['cpu_class']}` in {env['wall_seconds'] / 60:.1f} min")
        elif stem not in said:
            old.append(f"`{stem}`")
    parts = []
    if old:
        many = len(old) > 1
        parts.append("**Not up to date:** " + ", ".join(old) + (" come" if many else " comes")
                     + " from a run older than the stage runner that records the CPU class and wall time; `dvc status` "
                     + ("names their stages until they re-run." if many else "names its stage until it re-runs."))
    if seen:
        parts.append("; ".join(seen) + ".")
    return " ".join(parts)


def render_method_card(block: str, metrics: Mapping[str, Any]) -> str:
    """One method's current result: its comparison rows beside standard RAG, its diagnostics, its flags."""
    name, stem, row = METHOD_CARDS[block]
    out, stems = [], []
    if name:
        extra = [k for k in _get(metrics, "14_comparison").get("oracle_and_ablation_rows", {}).get("testbed", {})
                 if k.startswith(name + " (")]
        out += [f"{name} beside standard RAG on the ladder's testbed test questions (`reports/metrics/14_comparison.json`; "
                "p (Holm) is corrected across the comparison's methods).", "",
                *_table(_COMPARISON_HEADER, _comparison_rows(metrics, [BASELINE, name], extra)), ""]
        flags = _get(metrics, "14_comparison").get("degenerate_by_method", {}).get(name, [])
        stems.append("14_comparison")
    else:
        flags = _flags(metrics, stem)
    if row:
        found = next(r for r in _baseline_rows(metrics) if r[0] == row)
        out += [f"- Trained on: {found[1]}.", f"- Diagnostics: {found[2]}."]
    out += [f"- {_flags_line([str(f) for f in flags])}", f"- {environment_line(metrics, stem)}"]
    stems.append(stem)
    caption = _run_caption(metrics, list(dict.fromkeys(stems)), said=(stem,))
    return "\n".join(out + ([f"- {caption}"] if caption else []))


# A block of the recorded `.ci/run`s names their file only once it holds a run (and so exists).
_NO_RUN = ("No `.ci/run` recorded yet: `python3 -m ragcritic_lib.pipeline.ci_budget record .cache/ci-budget.json` "
           "keeps one after a run on a fresh clone.")
CI_RUNS_KEY = "ci_runs"   # where check() puts reports/benchmarks/ci_runs.json's runs for the ci_times block
_CI_RUNS_FILE = "reports/benchmarks/ci_runs.json"


def render_ci_times(metrics: Mapping[str, Any]) -> str:
    """`.ci/run` part by part, one column per CPU class with a measured run (``ci_runs.json``)."""
    runs = metrics.get(CI_RUNS_KEY)
    intro = (f"`.ci/run` on a fresh clone, part by part, from `{_CI_RUNS_FILE}` (the budget line that `.ci/run` "
             "prints, kept with `python3 -m ragcritic_lib.pipeline.ci_budget record .cache/ci-budget.json`; one run "
             "per CPU class, alone on a 2-core machine). Parts marked \"beside\" wait on the network while the "
             "other parts use the CPU; they add nothing to the total unless they outlast it.")
    if not runs:
        return _NO_RUN
    names = list(dict.fromkeys(p["name"] for run in runs for p in run["parts"]))
    beside = {p["name"] for run in runs for p in run["parts"] if p.get("beside")}
    rows = []
    for name in names:
        cells = []
        for run in runs:
            secs = [p["seconds"] for p in run["parts"] if p["name"] == name]
            cells.append(f"{secs[0] / 60:.1f} min" if secs else "not run")
        rows.append([f"{name} (beside)" if name in beside else name] + cells)
    rows.append(["**total**"] + [f"**{run['total_s'] / 60:.1f} min**" for run in runs])
    header = ["part"] + [f"{run['cpu_class']} ({run['cores']} cores, {run['date']})" for run in runs]
    notes = [f"- {run['cpu_class']}: {run['note']}" for run in runs if run.get("note")]
    return "\n".join([intro, ""] + _table(header, rows) + ([""] + notes if notes else []))


# The commands a newcomer types, and the `.ci/run` part that times each.
_COMMAND_PARTS = (("`make install` (the virtual environment)", "install"), ("`make restore`", "restore"),
                  ("`make test` (its tests, after the restore)", "pytest"), ("`make test-browser`", "test-browser"))


def render_command_times(metrics: Mapping[str, Any]) -> str:
    """What each command took on a fresh clone, one column per CPU class with a recorded `.ci/run`."""
    runs = metrics.get(CI_RUNS_KEY) or []
    if not runs:
        return _NO_RUN
    n_stages = max(len(run.get("smoke_stages") or {}) for run in runs)
    intro = (f"Measured in `.ci/run` on a fresh clone ({_CI_RUNS_FILE}), 2 cores alone on the machine; `make test` "
             "includes the smoke run's cold `dvc repro` of "
             + (f"all {n_stages} stages" if n_stages else "every stage") + " at its small sizes.")
    rows = []
    for label, part in _COMMAND_PARTS:
        cells = []
        for run in runs:
            secs = [p["seconds"] for p in run["parts"] if p["name"] == part]
            cells.append(f"{secs[0] / 60:.1f} min" if secs else "not run")
        rows.append([label] + cells)
    header = ["command"] + [f"{run['cpu_class']} ({run['date']})" for run in runs]
    return "\n".join([intro, ""] + _table(header, rows))


def render_smoke_times(metrics: Mapping[str, Any]) -> str:
    """Each notebook's seconds in the smoke run of a recorded `.ci/run`, one column per CPU class."""
    runs = [run for run in metrics.get(CI_RUNS_KEY) or [] if run.get("smoke_stages")]
    intro = ("Each notebook's own seconds at the smoke profile, as papermill recorded them in the smoke run's cold "
             f"`dvc repro` of a `.ci/run` on a fresh clone ({_CI_RUNS_FILE}, `smoke_stages`), 2 cores.")
    if not runs:
        return _NO_RUN
    stems = list(dict.fromkeys(stem for run in runs for stem in run["smoke_stages"]))
    rows = [[f"`{stem}`"] + [f"{run['smoke_stages'][stem]:.0f}" if stem in run["smoke_stages"] else "not run"
                             for run in runs] for stem in stems]
    rows.append(["all stages"] + [f"{sum(run['smoke_stages'].values()):.0f}" for run in runs])
    header = ["notebook"] + [f"{run['cpu_class']}, s ({run['date']})" for run in runs]
    return "\n".join([intro, ""] + _table(header, rows))


RECIPES_KEY = "critic_recipes"   # where check() puts reports/benchmarks/critic_recipes.json
_RECIPES_FILE = "reports/benchmarks/critic_recipes.json"


def render_critic_recipes(metrics: Mapping[str, Any]) -> str:
    """The critic's recipe frontier (``benchmarks/bench_critic_recipes.py``'s file): each recipe's dev
    AUROC with its interval, its cost on the subset and projected on the full set, and the choice."""
    data = metrics.get(RECIPES_KEY)
    if not data:
        return ("No recipe frontier recorded yet: `.venv/bin/python benchmarks/bench_critic_recipes.py` writes "
                "one after stage `critic_data` has run.")
    sub = data.get("subset") or {}
    pools = "; ".join(f"{k}: {v}" for k, v in (sub.get("pools") or {}).items())
    intro = (f"Every recipe trained on {sub.get('train', '?')} training examples, a fixed random subset of the samples "
             f"of its sources ({pools}), and was scored on the same {sub.get('dev', '?')} dev answers "
             f"({sub.get('dev_wrong', '?')} wrong), on one {data.get('cpu_class', '?')} CPU (`{_RECIPES_FILE}`, "
             "`benchmarks/bench_critic_recipes.py`). Minutes on the subset include the frozen-layer cache; the "
             "projected stage minutes scale each recipe's measured seconds per example to the full training set "
             "(a verifier or probe adds the generative critic that writes the tags).")
    rows = [[f"`{r['name']}`", r.get("body", "?"), "+".join(r["sources"]) if isinstance(r.get("sources"), list)
             else str(r.get("sources", "all")), str(r.get("train_layers", "?")), _f(r.get("passes"), 1),
             _f(r["dev_auroc"]), f"{_f(r.get('ci_low'))}..{_f(r.get('ci_high'))}",
             _f(r["train_seconds"] / 60.0, 1), _f(r.get("projected_stage_minutes"), 1)]
            for r in data["recipes"]]
    header = ["recipe", "body", "sources", "trained layers", "passes", "dev AUROC", "95% CI", "minutes on the subset",
              "projected stage minutes"]
    choice = data.get("choice") or {}
    notes = [f"- Budget for training in a stage on this CPU: {_f(data.get('budget_minutes'), 0)} min. "
             f"Chosen: {('`' + choice['name'] + '`') if choice.get('name') else 'none'} ({choice.get('reason', '')}).",
             "- Figure (dev AUROC against minutes): `reports/benchmarks/critic_recipes.png`."]
    return "\n".join([intro, ""] + _table(header, rows) + [""] + notes)


PROBE_LAYERS_KEY = "probe_layers"   # where check() puts reports/benchmarks/probe_layers.json
_PROBE_LAYERS_FILE = "reports/benchmarks/probe_layers.json"


def render_probe_layers(metrics: Mapping[str, Any]) -> str:
    """The verdict probe's layer sets on dev (``benchmarks/bench_probe_layers.py``'s file): each
    set's dev AUROC with its interval, its paired difference to the shipped set, and the spread
    over the sample orders that the cross-validated choice of C follows."""
    data = metrics.get(PROBE_LAYERS_KEY)
    if not data:
        return ("No probe-layer benchmark recorded yet: `.venv/bin/python benchmarks/bench_probe_layers.py` writes "
                "one after stage `critic_data` has run.")
    shipped = data.get("shipped", "?")
    sources = ", ".join(data["sources"]) if isinstance(data.get("sources"), list) else data.get("sources", "all")
    intro = (f"The verdict probe fitted on {data.get('probe_samples', '?')} training samples ({sources}; "
             f"{data.get('probe_errors', '?')} wrong) on the states of each layer set at the verdict position, scored on "
             f"{data.get('dev', '?')} dev answers ({data.get('dev_errors', '?')} wrong); `last` is the final normed "
             f"state, a number that layer's output (`{_PROBE_LAYERS_FILE}`, `benchmarks/bench_probe_layers.py`; the "
             f"forward passes on `{data.get('cpu_class', '?')}`). Δ is the paired bootstrap difference to "
             f"`{shipped}`, the set the stage read when this was measured; the last column is the dev AUROC under "
             f"{data.get('orders', 1)} sample orders, which decide the cross-validation folds that pick the probe's C.")
    rows = []
    for r in data["rows"]:
        vs = r.get("vs_shipped") or {}
        orders = r.get("dev_auroc_orders") or []
        rows.append([f"`{r['name']}`", str(r.get("features", "?")), _f(r.get("dev_auroc")),
                     f"{_f(r.get('ci_low'))}..{_f(r.get('ci_high'))}",
                     _DASH if r["name"] == shipped else f"{_signed(vs.get('diff'))} ({_signed(vs.get('low'))}, "
                                                        f"{_signed(vs.get('high'))})",
                     f"{_f(min(orders))}..{_f(max(orders))}" if orders else _DASH])
    header = ["layers", "features", "dev AUROC", "95% CI", f"Δ vs `{shipped}` (95% CI)", "over sample orders"]
    clear = data.get("clearly_above_shipped") or []
    notes = [f"- Best on dev: `{data.get('best_on_dev', '?')}`; with a difference to `{shipped}` whose CI lies above "
             f"0: {', '.join(f'`{c}`' for c in clear) if clear else 'none'}. Chosen among {len(data['rows'])} sets on "
             "the same dev answers, the best row's dev AUROC is optimistic."]
    return "\n".join([intro, ""] + _table(header, rows) + [""] + notes)


PROBE_TRAIN_CV_KEY = "probe_layers_train_cv"   # where check() puts reports/benchmarks/probe_layers_train_cv.json
_PROBE_TRAIN_CV_FILE = "reports/benchmarks/probe_layers_train_cv.json"


def render_probe_layers_train_cv(metrics: Mapping[str, Any]) -> str:
    """The probe's layer sets chosen without dev (``bench_probe_layers.py --select train``): each
    set's out-of-fold AUROC on the probe samples with its interval over questions, its paired
    difference to the shipped set there, and its dev AUROC beside; then the set the probe samples
    choose and whether dev agrees."""
    data = metrics.get(PROBE_TRAIN_CV_KEY)
    if not data:
        return ("No choice on the probe samples recorded yet: `.venv/bin/python benchmarks/bench_probe_layers.py "
                f"--select train --out {_PROBE_TRAIN_CV_FILE}` writes one after stage `critic_data` has run.")
    shipped = data.get("shipped", "?")
    intro = (f"The same layer sets scored without dev: out of fold on the {data.get('probe_samples', '?')} probe "
             f"samples ({data.get('probe_errors', '?')} wrong; 5 folds that keep the answers to one question together, "
             "each fold's probe the stage's), with 95% intervals from resampling questions; Δ is the paired difference "
             f"to `{shipped}`, the set the stage read when this was measured, on the same out-of-fold scores. The dev "
             f"AUROC ({data.get('dev', '?')} answers, {data.get('dev_errors', '?')} wrong) is beside it, not part of the "
             f"choice (`{_PROBE_TRAIN_CV_FILE}`; forward passes on `{data.get('cpu_class', '?')}`, "
             f"{_f(data.get('feature_seconds'), 0)} s).")
    rows = []
    for r in data["rows"]:
        vs = r.get("train_vs_shipped") or {}
        ci = r.get("train_oof_ci") or [None, None]
        rows.append([f"`{r['name']}`", str(r.get("features", "?")), _f(r.get("train_oof_auroc")),
                     f"{_f(ci[0])}..{_f(ci[1])}",
                     _DASH if r["name"] == shipped else f"{_signed(vs.get('diff'))} ({_signed(vs.get('low'))}, "
                                                        f"{_signed(vs.get('high'))})",
                     _f(r.get("dev_auroc"))])
    header = ["layers", "features", "out-of-fold AUROC", "95% CI", f"Δ vs `{shipped}` (95% CI)", "dev AUROC"]
    clear = data.get("clearly_above_shipped_on_train") or []
    chosen = data.get("chosen_by_train", shipped)
    dev_vs = data.get("chosen_dev_vs_shipped") or {}
    confirm = ("it stays, so dev has nothing to confirm" if chosen == shipped else
               f"on dev it scores {_f(data.get('chosen_dev_auroc'))} against {_f(data.get('shipped_dev_auroc'))}, "
               f"Δ {_signed(dev_vs.get('diff'))} ({_signed(dev_vs.get('low'))}, {_signed(dev_vs.get('high'))})")
    notes = [f"- Best out of fold: `{data.get('best_on_train', '?')}`; with a difference to `{shipped}` whose CI lies "
             f"above 0 there: {', '.join(f'`{c}`' for c in clear) if clear else 'none'}. Chosen without dev: "
             f"`{chosen}`; {confirm}."]
    return "\n".join([intro, ""] + _table(header, rows) + [""] + notes)


# ------------------------------------------------------------------- answerable and unanswerable
_LADDER_PREFIX = "ladder: "  # how the comparison stage names the correction ladder's rows in ``answerability``


_ROUND_ROW = re.compile(r"RAG-Critic \((\d+) iter\)")


def _final_round_row(rows: Iterable[str]) -> str | None:
    """The ladder's RAG-Critic row of the most rounds ("RAG-Critic (2 iter)"), whose answers are the
    comparison's "RAG-Critic" row (its final answers), or None when the ladder names no round."""
    rounds = {name: int(m[1]) for name in rows if (m := _ROUND_ROW.fullmatch(name))}
    return max(rounds, key=lambda name: rounds[name]) if rounds else None


def _answerability(metrics: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``14_comparison.json`` ``answerability.testbed`` when both parts are there, else None."""
    if "14_comparison" not in metrics:
        return None
    parts = (_get(metrics, "14_comparison").get("answerability") or {}).get("testbed")
    if not isinstance(parts, Mapping) or not {"answerable", "unanswerable"} <= parts.keys():
        return None
    return parts


def _answerability_note(metrics: Mapping[str, Any], names: Sequence[str], *, prefix: str = "",
                        labels: Mapping[str, str] | None = None) -> str | None:
    """One sentence: which rows' ΔF1 (and change in the share judged right) lies wholly above or
    below 0 on the answerable questions, and how much of each row's whole ΔF1 the unanswerable
    questions carry. ``names`` are rows as the comparison stage names them; ``prefix`` is cut
    from the names shown, and ``labels`` gives a row another name to show."""
    parts = _answerability(metrics)
    if parts is None:
        return None
    stem, group = "14_comparison", ("answerability", "testbed")
    names = [n for n in names if n in parts["answerable"]["rows"] and n in parts["unanswerable"]["rows"]]
    if not names:
        return None
    shown = {n: (labels or {}).get(n) or (n[len(prefix):] if prefix and n.startswith(prefix) else n) for n in names}

    def which(fields: tuple[str, str]) -> str:
        above, below = [], []
        for n in names:
            low, high = (_number(metrics, stem, *group, "answerable", "rows", n, k) for k in fields)
            (above if low > 0 else below if high < 0 else []).append(shown[n])
        return f"wholly above 0: {', '.join(above) or 'none'}; wholly below 0: {', '.join(below) or 'none'}"

    carried = []
    for n in names:
        shares = [_number(metrics, stem, *group, part, "rows", n, "share_f1") for part in ("answerable", "unanswerable")]
        if abs(sum(shares)) >= 0.0005 or abs(shares[1]) >= 0.0005:
            carried.append(f"{shown[n]} {_signed(shares[1])} of {_signed(sum(shares))}")
    n_a, n_u = (int(_number(metrics, stem, *group, part, "n")) for part in ("answerable", "unanswerable"))
    return (f"Answerable and unanswerable questions apart (descriptive; `reports/metrics/14_comparison.json` "
            f"`answerability`): on the {n_a} answerable questions, 95% CI of ΔF1 {which(('ci_low', 'ci_high'))}; "
            f"of the change in the share judged right {which(('judge_ci_low', 'judge_ci_high'))}. "
            f"Of each row's ΔF1, the {n_u} unanswerable questions (every gold answer an abstention) carry: "
            + ("; ".join(carried) or "nothing") + ".")


def _ladder_steps(metrics: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """``14_comparison.json`` ``ladder_steps.testbed.steps`` when there are any, else None."""
    if "14_comparison" not in metrics:
        return None
    steps = ((_get(metrics, "14_comparison").get("ladder_steps") or {}).get("testbed") or {}).get("steps")
    return steps if isinstance(steps, list) and steps else None


_STEP_PARTS = ("all", "answerable", "unanswerable")


def _step_part(metrics: Mapping[str, Any], i: int, part: str) -> dict[str, Any]:
    """Step ``i``'s block on ``part`` as ``{"14_comparison": {"p": block}}``, ready for :func:`_number`
    and :func:`_change`, or one error naming the step's real key path."""
    block = ((_ladder_steps(metrics) or [{}])[i].get("parts") or {}).get(part)
    if not isinstance(block, Mapping):
        raise ReadmeDataError(f"{_file('14_comparison')}: missing key ladder_steps.testbed.steps.{i}.parts.{part}")
    return {"14_comparison": {"p": block}}


def _abstaining(metrics: Mapping[str, Any], row: str, parts: Sequence[str] = ("answerable", "unanswerable")) -> str:
    """``126 / 31``: the row's answers that are abstentions on each of ``parts``."""
    key = ("ladder_steps", "testbed", "abstentions", row)
    return " / ".join(str(int(_number(metrics, "14_comparison", *key, part))) for part in parts)


def _ladder_steps_note(metrics: Mapping[str, Any]) -> str | None:
    """One sentence: what each one-part step of the ladder does to F1, on all, answerable and
    unanswerable questions, and how the answers left abstaining move (README's ladder)."""
    steps = _ladder_steps(metrics)
    if steps is None:
        return None
    said = []
    for i, st in enumerate(steps):
        changes = [_change(_step_part(metrics, i, part), "14_comparison", "p") for part in _STEP_PARTS]
        said.append(f"the {st['changes']} ({st['from']} → {st['to']}) {changes[0]}, answerable {changes[1]}, "
                    f"unanswerable {changes[2]}, abstaining {_abstaining(metrics, st['from'])} → "
                    f"{_abstaining(metrics, st['to'])}")
    baseline = BASELINE in (_get(metrics, "14_comparison", "ladder_steps", "testbed").get("abstentions") or {})
    return ("One part at a time (descriptive; `reports/metrics/14_comparison.json` `ladder_steps`): the row after a "
            "step against the row before it, ΔF1 (95% CI) on all, answerable and unanswerable questions, and the "
            "answers it leaves abstaining on answerable / unanswerable ones: " + "; ".join(said) + "."
            + (f" Standard RAG abstains on {_abstaining(metrics, BASELINE)}." if baseline else ""))


def render_ladder_steps(metrics: Mapping[str, Any]) -> str:
    """The correction ladder one part at a time: each step's paired change, on all, answerable
    and unanswerable questions (``14_comparison.json`` ``ladder_steps.testbed``)."""
    stem = "14_comparison"
    steps = _ladder_steps(metrics)
    if steps is None:
        raise ReadmeDataError(f"{_file(stem)}: missing key ladder_steps.testbed.steps")
    rows = []
    for i, st in enumerate(steps):
        for part in _STEP_PARTS:
            block = _step_part(metrics, i, part)
            rows.append([f"{st['changes']}: {st['from']} → {st['to']}" if part == "all" else "", part,
                         str(int(_number(block, stem, "p", "n"))), _change(block, stem, "p"),
                         _change(block, stem, "p", fields=("delta_judge_acc", "judge_ci_low", "judge_ci_high")),
                         f"{_abstaining(metrics, st['from'], (part,))} → {_abstaining(metrics, st['to'], (part,))}"])
    intro = ("The correction ladder one part at a time: two of its rows that differ in one part answer the same "
             "testbed test questions, so the later row against the earlier one, paired per question, is what that "
             "part alone does (bootstrap 95% CIs). The verdict step gives the rule-planned critic the judge's verdict; "
             "the labels step gives it the known causes in place of the critic's labels; the planner step swaps the "
             "trained planner for the rule planner under the judge's verdict. Split by answerability after the run "
             "(no method sees it); the last column counts the answers each row leaves as an abstention. Descriptive: "
             "no correction across steps.")
    header = ["step", "questions", "n", "ΔF1 (95% CI)", "Δ right (95% CI)", "abstentions"]
    return _compose(intro, header, rows, [environment_line(metrics, stem)])


def render_answerability(metrics: Mapping[str, Any]) -> str:
    """Every row of the comparison and of the correction ladder on the answerable and the
    unanswerable questions apart (``14_comparison.json`` ``answerability.testbed``)."""
    stem, group = "14_comparison", ("answerability", "testbed")
    parts = _answerability(metrics)
    if parts is None:
        raise ReadmeDataError(f"{_file(stem)}: missing key answerability.testbed.answerable / .unanswerable")
    rows = []
    for name in parts["answerable"]["rows"]:
        if name not in parts["unanswerable"]["rows"]:
            continue
        cells = [name]
        for part in ("answerable", "unanswerable"):
            key = (*group, part, "rows", name)
            cells += [_change(metrics, stem, *key),
                      _change(metrics, stem, *key, fields=("delta_judge_acc", "judge_ci_low", "judge_ci_high"))]
        shares = [_number(metrics, stem, *group, part, "rows", name, "share_f1") for part in ("answerable", "unanswerable")]
        rows.append(cells + [f"{_signed(shares[1])} of {_signed(sum(shares))}"])
    n_a, n_u = (int(_number(metrics, stem, *group, part, "n")) for part in ("answerable", "unanswerable"))
    intro = (f"Each row's change against standard RAG on the {n_a} answerable and the {n_u} unanswerable testbed "
             "test questions apart (a question is unanswerable when every gold answer is an abstention; the split "
             "is made after the run, no method sees it), with paired bootstrap 95% CIs, and the share of the row's "
             "whole F1 change that the unanswerable questions carry (their count over all, times their change). "
             "Rows: the comparison's, its oracle and ablation rows, and the correction ladder's (\"ladder:\"). "
             "Descriptive: no correction across rows.")
    header = ["row", f"answerable ΔF1 (95% CI)", "answerable Δ right (95% CI)", "unanswerable ΔF1 (95% CI)",
              "unanswerable Δ right (95% CI)", "unanswerable share of ΔF1"]
    return _compose(intro, header, rows, [environment_line(metrics, stem)])


_RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "ladder": render_ladder,
    "benchmark": render_benchmark,
    "comparison": render_comparison,
    "ladder_by_type": render_ladder_by_type,
    "ladder_trivia": render_ladder_trivia,
    "standard_rag": render_standard_rag,
    "judge": render_judge,
    "comparison_details": render_comparison_details,
    "baselines": render_baselines,
    "papers": render_papers,
    "stage_times": render_stage_times,
    "ci_times": render_ci_times,
    "critic_recipes": render_critic_recipes,
    "probe_layers": render_probe_layers,
    "probe_layers_train_cv": render_probe_layers_train_cv,
    "command_times": render_command_times,
    "smoke_times": render_smoke_times,
    "answerability": render_answerability,
    "ladder_steps": render_ladder_steps,
    **{card: (lambda metrics, card=card: render_method_card(card, metrics)) for card in METHOD_CARDS},
}


def render_block(name: str, metrics: Mapping[str, Any]) -> str:
    """The Markdown of one generated block.

    Args:
        name: a key of :data:`BLOCK_SOURCES`, e.g. ``"ladder"``.
        metrics: ``{stem: parsed metrics JSON}`` holding at least the block's sources.

    Returns:
        The block's text, ending with a newline (the markers are not included).

    Raises:
        ReadmeDataError: an unknown block name, or a file or key the block needs is missing.
    """
    if name not in _RENDERERS:
        raise ReadmeDataError(f"unknown generated block {name!r} (known: {', '.join(_RENDERERS)})")
    return _RENDERERS[name](metrics) + "\n"


# ------------------------------------------------------------------------------ files and blocks
def block_names(text: str, source: str = "text") -> list[str]:
    """The names of the generated blocks in ``text``, in order.

    Args:
        text: a Markdown file's text.
        source: the file's name for error messages.

    Raises:
        ReadmeDataError: a BEGIN marker without its END marker, a name given twice, or a name
            no renderer knows.
    """
    names = [m.group("name") for m in _BLOCK.finditer(text)]
    begun = _BEGIN.findall(text)
    if len(begun) != len(names):
        unmatched = [b for b in begun if b not in names]
        raise ReadmeDataError(f"{source}: generated block(s) {', '.join(unmatched) or begun} lack a matching "
                              "<!-- END generated: NAME --> marker")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ReadmeDataError(f"{source}: generated block(s) {', '.join(twice)} appear more than once")
    unknown = [n for n in names if n not in _RENDERERS]
    if unknown:
        raise ReadmeDataError(f"{source}: unknown generated block(s) {', '.join(unknown)} "
                              f"(known: {', '.join(_RENDERERS)})")
    return names


def rewrite_blocks(text: str, metrics: Mapping[str, Any], source: str = "text") -> str:
    """``text`` with every generated block's body replaced by :func:`render_block`."""
    block_names(text, source)
    return _BLOCK.sub(lambda m: (f"<!-- BEGIN generated: {m.group('name')} -->\n"
                                 f"{render_block(m.group('name'), metrics)}"
                                 f"<!-- END generated: {m.group('name')} -->"), text)


def differing_blocks(text: str, metrics: Mapping[str, Any], source: str = "text") -> list[str]:
    """Names of the generated blocks of ``text`` whose body differs from what the metrics give."""
    block_names(text, source)
    return [m.group("name") for m in _BLOCK.finditer(text) if m.group("body") != render_block(m.group("name"), metrics)]


def target_files(root: str | Path = paths.ROOT) -> list[Path]:
    """The files with generated blocks: README.md, docs/results.md, docs/reproduce.md, docs/workshop.md
    (where present) and every page of docs/methods/."""
    root = Path(root)
    fixed = [p for p in (root / "README.md", root / "docs" / "results.md", root / "docs" / "reproduce.md",
                         root / "docs" / "workshop.md") if p.exists()]
    return fixed + sorted((root / "docs" / "methods").glob("*.md"))


def check(files: Sequence[Path], metrics_dir: str | Path = paths.METRICS_DIR,
          root: str | Path = paths.ROOT, write: bool = False) -> list[str]:
    """Compare (or, with ``write``, rewrite) each file's generated blocks against the metrics.

    Args:
        files: files holding generated blocks.
        metrics_dir: where the metrics JSON files are.
        root: the folder file names in messages are relative to.
        write: rewrite the files instead of only comparing.

    Returns:
        One line per block that differed (and, with ``write``, was rewritten).
    """
    texts = {f: Path(f).read_text(encoding="utf-8") for f in files}
    shown = {f: (Path(f).relative_to(root).as_posix() if Path(f).is_relative_to(root) else str(f)) for f in files}
    names = [name for f, text in texts.items() for name in block_names(text, shown[f])]
    needed = [stem for name in names for stem in BLOCK_SOURCES.get(name, ())]
    # The per-stage time table lists a stage that has not run yet as such; every other block needs its files.
    required = {stem for name in names if name not in OPTIONAL_SOURCE_BLOCKS for stem in BLOCK_SOURCES.get(name, ())}
    metrics = load_metrics(needed, metrics_dir, optional=set(needed) - required)
    if any({"ci_times", "command_times", "smoke_times"} & set(block_names(text, shown[f])) for f, text in texts.items()):
        from ragcritic_lib.pipeline.ci_budget import BudgetError, load_runs

        try:
            metrics[CI_RUNS_KEY] = load_runs(Path(metrics_dir).parent / "benchmarks" / "ci_runs.json")
        except BudgetError as exc:
            raise ReadmeDataError(str(exc)) from None
    # Benchmark files some blocks read beside the metrics, when they exist: (blocks, file, key).
    for blocks, file_name, key in (({"baselines", "method_simrag"}, "simrag_critic.json", SIMRAG_BENCH_KEY),
                                   ({"critic_recipes"}, "critic_recipes.json", RECIPES_KEY),
                                   ({"benchmark"}, "critic_reruns.json", RERUNS_KEY),
                                   ({"benchmark"}, "identification_bound.json", BOUND_KEY),
                                   ({"probe_layers"}, "probe_layers.json", PROBE_LAYERS_KEY),
                                   ({"probe_layers_train_cv"}, "probe_layers_train_cv.json", PROBE_TRAIN_CV_KEY)):
        bfile = Path(metrics_dir).parent / "benchmarks" / file_name
        if bfile.exists() and any(blocks & set(block_names(text, shown[f])) for f, text in texts.items()):
            try:
                metrics[key] = json.loads(bfile.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ReadmeDataError(f"{bfile}: not JSON ({exc})") from None
    if any("stage_times" in block_names(text, shown[f]) for f, text in texts.items()):
        from ragcritic_lib.pipeline.workspace import CopyRecordError, load_copies, lock_fingerprints, persisted_outputs

        try:
            copies = load_copies(Path(metrics_dir).parent / "benchmarks" / "stage_copies.json")
        except CopyRecordError as exc:
            raise ReadmeDataError(str(exc)) from None
        metrics[STAGE_COPIES_KEY] = {"copies": copies, "fingerprints": lock_fingerprints(Path(root)) if copies else {},
                                     "persisted": persisted_outputs(Path(root)) if copies else {}}
    metrics[LOCK_STALE_KEY] = stale_in_lock(root)
    report = []
    for f, text in texts.items():
        differing = differing_blocks(text, metrics, shown[f])
        report += [f"{shown[f]}: generated block '{name}' differs from what reports/metrics gives" for name in differing]
        if write and differing:
            atomic_write_text(f, rewrite_blocks(text, metrics, shown[f]))
    return report


def main(argv: list[str] | None = None) -> int:
    """Rewrite README's generated blocks (``--check``: only compare, exit 1 when one differs)."""
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.readme", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 naming each block that differs")
    parser.add_argument("files", nargs="*", type=Path, help="files with generated blocks (default: README.md, "
                                                            "docs/results.md, docs/reproduce.md)")
    args = parser.parse_args(argv)
    files = [f.resolve() for f in args.files] or target_files()
    try:
        report = check(files, write=not args.check)
    except ReadmeDataError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.check:
        for line in report:
            print(f"{line}: run `make readme`", file=sys.stderr)
        return 1 if report else 0
    for line in report:
        print(line.replace("differs from", "rewritten from"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
