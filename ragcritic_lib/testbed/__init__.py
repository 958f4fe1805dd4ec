"""A controlled RAG testbed: a seeded fictional world rendered into a corpus and typed questions.

The generator is template-based (no LLM) and fully deterministic: one ``random.Random`` stream
per concern (world, rendering, questions), all derived from the seed; nothing depends on set
order or string hashing, so the same config gives the same bytes.

The world has five domains in the spirit of RAGEval's DragonBall (finance: companies; law: court
cases; medical: patients and hospitals; places: towns and people; sports: clubs). Entities have
typed attributes (years, dates, amounts, counts, names) and relations (founder, headquarters,
presiding judge, mayor, coach, hospital). Each entity is rendered into a profile document in
varied wording and order with filler sentences, then chunked into passages of about
``passage_words`` words. Difficulty knobs, each recorded per question:

- ``distractor``: a near-duplicate entity ("Veltrix Systems" / "Veltrix Instruments") with its
  own, different values;
- ``conflict``: an older, clearly dated report states a superseded value (the newest dated
  statement is the true one);
- ``split_fact``: a fact phrased so that its cue ends one passage and its value starts the next.

Questions follow DragonBall's types: factual, multi_hop (bridge), comparison, numerical, temporal,
summary and unanswerable (gold ``"insufficient information"``). Train/dev/test are split by
entity: every split has its own entities (towns and people included), so no fact of a test
entity is needed by a train question; the corpus is shared.

Entry points: :class:`TestbedConfig`, :func:`generate_testbed`, :func:`write_testbed`,
:func:`testbed_stats`, :func:`example_per_type`. The package's parts: ``world`` (config, entities,
value forms), ``builder`` (names and the seeded world builder), ``render`` (profiles and passages), ``questions`` (the typed
questions), and ``vocabulary`` (kinds and name pools, read from ``vocabulary.yaml``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from ragcritic_lib import io as rio
from ragcritic_lib.testbed.builder import _WorldBuilder
from ragcritic_lib.testbed.questions import _QuestionMaker
from ragcritic_lib.testbed.render import _render_corpus
from ragcritic_lib.testbed.vocabulary import _KINDS
from ragcritic_lib.testbed.world import (  # noqa: F401 (the package's public interface)
    DATASET_NAME,
    DOMAINS,
    QUESTION_TYPES,
    SPLITS,
    UNANSWERABLE_ANSWER,
    Entity,
    Event,
    Testbed,
    TestbedConfig,
    World,
    _date_forms,
    fact_key,
    gold_forms,
    normalize,
)

# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def generate_testbed(cfg: TestbedConfig | None = None) -> Testbed:
    """Build the world, render the corpus and write the question splits (all in memory).

    Deterministic: the same config gives identical records, in the same order.
    """
    cfg = cfg or TestbedConfig()
    entities = _WorldBuilder(cfg).build()
    corpus, world = _render_corpus(cfg, entities)
    maker = _QuestionMaker(cfg, world)
    splits = {split: maker.make_split(split, corpus) for split in SPLITS}
    return Testbed(config=cfg, corpus=corpus, splits=splits, world=world)


def fact_forms(world: World, key: str) -> list[str]:
    """Every accepted surface form of a fact's current value (``key`` = "entity_id|attribute")."""
    eid, attr = key.split("|", 1)
    ent = world.entities[eid]
    if attr.startswith("event:"):
        ev = next(e for e in ent.events if e.key == attr[6:])
        return _date_forms(ev.when) if isinstance(ev.when, dt.date) else [str(ev.when)]
    return gold_forms(_KINDS[ent.kind].attrs[attr].vtype, ent.attrs[attr])


def withheld_keywords(kind: str, attribute: str) -> tuple[str, ...]:
    """Words that any statement of a withholdable attribute contains (matched as word prefixes)."""
    return _KINDS[kind].attrs[attribute].withhold_keywords


def attribute_label(kind: str, attribute: str) -> str:
    """The human label of an attribute ("founding year"), as used in split-fact cues."""
    return _KINDS[kind].attrs[attribute].label


def testbed_stats(testbed: Testbed) -> dict[str, Any]:
    """Counts per split, type, domain and knob, and corpus sizes (the stage's metrics JSON)."""
    words = [len(p["contents"].split("\n", 1)[1].split()) for p in testbed.corpus]
    kinds: dict[str, int] = {}
    for e in testbed.world.entities.values():
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    questions: dict[str, Any] = {}
    for split, records in testbed.splits.items():
        by_type = {t: 0 for t in QUESTION_TYPES}
        by_domain: dict[str, int] = {}
        knobs = {"distractor": 0, "conflict": 0, "split_fact": 0, "multi_hop": 0}
        support = []
        for r in records:
            m = r["metadata"]
            by_type[m["type"]] += 1
            by_domain[m["domain"]] = by_domain.get(m["domain"], 0) + 1
            for k in ("distractor", "conflict", "split_fact"):
                knobs[k] += int(bool(m["knobs"][k]))
            knobs["multi_hop"] += int(m["knobs"]["hops"] > 1)
            if m["answerable"]:
                support.append(len(m["supporting_ids"]))
        questions[split] = {
            "n": len(records), "by_type": by_type, "by_domain": dict(sorted(by_domain.items())),
            "knobs": knobs,
            "mean_supporting_passages": round(sum(support) / len(support), 3) if support else 0.0,
            "n_entities": len({e for r in records for e in r["metadata"]["entity_ids"]}),
        }
    w = testbed.world
    return {
        "seed": testbed.config.seed,
        "corpus": {
            "passages": len(testbed.corpus),
            "documents": len(w.docs),
            "reports": sum(d["kind"] == "report" for d in w.docs),
            "words_mean": round(sum(words) / max(1, len(words)), 2),
            "words_min": min(words, default=0),
            "words_max": max(words, default=0),
        },
        "entities": dict(sorted(kinds.items())),
        "twins": sum(e.twin_of is not None for e in w.entities.values()),
        "conflicts": len(w.conflicts),
        "split_facts": len(w.split_facts),
        "questions": questions,
    }


def write_testbed(testbed: Testbed, out_dir: str | Path) -> dict[str, Path]:
    """Write corpus.jsonl, train/dev/test.jsonl, entities.jsonl and stats.json (atomically)."""
    out = Path(out_dir)
    written = {"corpus": rio.write_jsonl(out / "corpus.jsonl", testbed.corpus)}
    for split in SPLITS:
        written[split] = rio.write_jsonl(out / f"{split}.jsonl", testbed.splits[split])
    written["entities"] = rio.write_jsonl(out / "entities.jsonl",
                                          [e.to_record() for e in testbed.world.entities.values()])
    written["stats"] = rio.write_json(out / "stats.json", testbed_stats(testbed))
    return written


def example_per_type(testbed: Testbed, split: str = "test") -> list[dict[str, Any]]:
    """The first question of each type with its supporting passages (for the notebook)."""
    by_id = {p["id"]: p["contents"] for p in testbed.corpus}
    rows = []
    for qtype in QUESTION_TYPES:
        rec = next((r for r in testbed.splits[split] if r["metadata"]["type"] == qtype), None)
        if rec is None:
            continue
        m = rec["metadata"]
        rows.append({"type": qtype, "id": rec["id"], "question": rec["question"],
                     "golden_answers": rec["golden_answers"], "knobs": m["knobs"],
                     "supporting": [f"[{pid}] {by_id[pid]}" for pid in m["supporting_ids"]]})
    return rows
