"""Tests of the controlled testbed generator (ragcritic_lib.testbed)."""

from __future__ import annotations

import ast
import datetime as dt
import re
from dataclasses import fields
from pathlib import Path

import pytest

from ragcritic_lib import testbed as tb
from ragcritic_lib.data.flashrag import load_corpus_records, load_dataset_split
from ragcritic_lib.evaluation.scoring import normalize_answer

SMALL = dict(n_entities_per_domain=12, frac_dev=0.25, frac_test=0.25, questions_per_type_train=8,
             questions_per_type_dev=4, questions_per_type_test=4)


@pytest.fixture(scope="module")
def bed() -> tb.Testbed:
    return tb.generate_testbed(tb.TestbedConfig())


def _has(text: str, forms: list[str]) -> bool:
    hay = f" {normalize_answer(text)} "
    return any(normalize_answer(f) and f" {normalize_answer(f)} " in hay for f in forms)


def _passages(bed: tb.Testbed) -> dict[str, dict]:
    return {p["id"]: p for p in bed.corpus}


def _all_questions(bed: tb.Testbed) -> list[dict]:
    return [q for split in tb.SPLITS for q in bed.splits[split]]


def _as_number(value: str) -> int | dt.date:
    for fmt in ("%d %B %Y", "%B %d, %Y", "%Y-%m-%d"):
        try:
            return dt.datetime.strptime(value, fmt).date()
        except ValueError:
            pass
    return int(re.sub(r"\D", "", value))


# --------------------------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------------------------


def test_same_seed_same_bytes_and_different_seed_differs(tmp_path: Path) -> None:
    cfg = tb.TestbedConfig(**SMALL)
    first = tb.write_testbed(tb.generate_testbed(cfg), tmp_path / "a")
    second = tb.write_testbed(tb.generate_testbed(cfg), tmp_path / "b")
    assert sorted(first) == ["corpus", "dev", "entities", "stats", "test", "train"]
    for name, path in first.items():
        assert path.read_bytes() == second[name].read_bytes(), name
        assert path.stat().st_size > 0
    other = tb.write_testbed(tb.generate_testbed(tb.TestbedConfig(**{**SMALL, "seed": 14})), tmp_path / "c")
    for name in ("corpus", "train", "test"):
        assert other[name].read_bytes() != first[name].read_bytes(), name


def test_question_counts_do_not_change_the_corpus() -> None:
    # Separate random streams: asking more questions leaves the world and its text untouched.
    a = tb.generate_testbed(tb.TestbedConfig(**SMALL))
    b = tb.generate_testbed(tb.TestbedConfig(**{**SMALL, "questions_per_type_train": 3}))
    assert a.corpus == b.corpus
    assert len(b.splits["train"]) == 21 and len(a.splits["train"]) == 56


# --------------------------------------------------------------------------------------------
# Schema and sizes
# --------------------------------------------------------------------------------------------


def test_flashrag_schema_and_loaders(bed: tb.Testbed, tmp_path: Path) -> None:
    written = tb.write_testbed(bed, tmp_path)
    corpus = load_corpus_records(written["corpus"])
    assert len(corpus) == len(bed.corpus)
    ids = [p["id"] for p in corpus]
    assert len(ids) == len(set(ids))
    by_doc: dict[str, list[int]] = {}
    for p in corpus:
        assert set(p) == {"id", "contents", "metadata"}
        title, sep, text = p["contents"].partition("\n")
        assert sep and title.strip() and text.strip()
        meta = p["metadata"]
        assert set(meta) == {"doc_id", "entity_ids", "domain", "chunk_index"}
        assert meta["domain"] in tb.DOMAINS
        assert meta["entity_ids"] == sorted(set(meta["entity_ids"])) and meta["entity_ids"]
        assert p["id"] == f"{meta['doc_id']}-{meta['chunk_index']}"
        by_doc.setdefault(meta["doc_id"], []).append(meta["chunk_index"])
    assert all(idx == list(range(len(idx))) for idx in by_doc.values())

    required = {"dataset", "type", "answerable", "supporting_ids", "key_points", "knobs", "causes",
                "entity_ids", "domain"}
    qids = []
    for split in tb.SPLITS:
        records = load_dataset_split(written[split])
        assert len(records) == len(bed.splits[split])
        for r in records:
            qids.append(r["id"])
            assert r["id"].startswith(f"testbed-{split}-")
            assert r["question"].endswith(("?", "."))
            assert r["golden_answers"] and all(isinstance(g, str) and g for g in r["golden_answers"])
            m = r["metadata"]
            assert required <= set(m)
            assert m["dataset"] == "testbed" and m["type"] in tb.QUESTION_TYPES
            assert m["answerable"] is (m["type"] != "unanswerable")
            assert m["causes"] == []
            assert set(m["knobs"]) >= {"distractor", "conflict", "split_fact", "hops"}
            assert all(s in set(ids) for s in m["supporting_ids"])
            assert m["domain"] in tb.DOMAINS
    assert len(qids) == len(set(qids))


def test_default_sizes_are_cpu_friendly(bed: tb.Testbed) -> None:
    stats = tb.testbed_stats(bed)
    assert 300 <= stats["corpus"]["passages"] <= 1500
    assert stats["twins"] > 0 and stats["conflicts"] > 0 and stats["split_facts"] > 0
    assert stats["questions"]["test"]["n"] == 7 * 40
    assert stats["questions"]["dev"]["n"] == 7 * 20
    assert stats["questions"]["train"]["n"] == 7 * 100


def test_passages_respect_the_word_limit(bed: tb.Testbed) -> None:
    limit = bed.config.passage_words
    lengths = [len(p["contents"].split("\n", 1)[1].split()) for p in bed.corpus]
    assert max(lengths) <= limit
    assert sum(lengths) / len(lengths) > limit / 2


# --------------------------------------------------------------------------------------------
# Balance and split hygiene
# --------------------------------------------------------------------------------------------


def test_types_and_domains_are_balanced(bed: tb.Testbed) -> None:
    cfg = bed.config
    for split, records in bed.splits.items():
        for qtype in tb.QUESTION_TYPES:
            of_type = [r for r in records if r["metadata"]["type"] == qtype]
            assert len(of_type) == cfg.n_questions(split, qtype), (split, qtype)
            per_domain = [sum(r["metadata"]["domain"] == d for r in of_type) for d in tb.DOMAINS]
            assert max(per_domain) - min(per_domain) <= 1, (split, qtype, per_domain)
        # Types are interleaved so any prefix of a split file is balanced.
        assert [r["metadata"]["type"] for r in records[:7]] == list(tb.QUESTION_TYPES)


def test_type_weights_and_domain_subset() -> None:
    cfg = tb.TestbedConfig(**{**SMALL, "domains": "finance,sports", "weight_summary": 0.0,
                              "weight_factual": 2.0})
    bed = tb.generate_testbed(cfg)
    test = bed.splits["test"]
    counts = {t: sum(r["metadata"]["type"] == t for r in test) for t in tb.QUESTION_TYPES}
    assert counts["summary"] == 0 and counts["factual"] == 8 and counts["numerical"] == 4
    assert {r["metadata"]["domain"] for r in test} == {"finance", "sports"}
    kinds = {e.kind for e in bed.world.entities.values()}
    assert "case" not in kinds and "patient" not in kinds and "company" in kinds


def test_splits_are_disjoint_by_entity(bed: tb.Testbed) -> None:
    ents = bed.world.entities
    per_split: dict[str, set[str]] = {}
    for split, records in bed.splits.items():
        seen: set[str] = set()
        for r in records:
            m = r["metadata"]
            needed = set(m["entity_ids"]) | {f["entity_id"] for f in m.get("facts", [])}
            assert all(ents[e].split == split for e in needed), r["id"]
            assert all(ents[e].split == split for e in m["distractor_entity_ids"])
            seen |= needed
        per_split[split] = seen
    assert not per_split["train"] & per_split["test"]
    assert not per_split["train"] & per_split["dev"]
    assert not per_split["dev"] & per_split["test"]
    # Every passage is about entities of one split (the corpus is shared, the facts are not).
    for p in bed.corpus:
        assert len({ents[e].split for e in p["metadata"]["entity_ids"]}) == 1, p["id"]


# --------------------------------------------------------------------------------------------
# Answer correctness by construction
# --------------------------------------------------------------------------------------------


def test_gold_answers_are_stated_in_supporting_passages(bed: tb.Testbed) -> None:
    passages = _passages(bed)
    checked = 0
    for r in _all_questions(bed):
        m = r["metadata"]
        if not m["answerable"]:
            continue
        support = [passages[s]["contents"] for s in m["supporting_ids"]]
        assert support, r["id"]
        union = "\n".join(support)
        for fact in m["facts"]:
            key = tb.fact_key(fact["entity_id"], fact["attribute"])
            assert _has(union, tb.fact_forms(bed.world, key)), (r["id"], fact)
        if m["type"] in ("factual", "multi_hop", "comparison", "temporal"):
            assert _has(union, r["golden_answers"]), r["id"]
        if m["type"] == "factual":
            assert any(_has(p, r["golden_answers"]) for p in support), r["id"]
        checked += 1
    assert checked == sum(len(v) for v in bed.splits.values()) * 6 // 7


def test_numerical_answers_are_the_arithmetic_of_the_stated_facts(bed: tb.Testbed) -> None:
    n = 0
    for r in _all_questions(bed):
        m = r["metadata"]
        if m["type"] != "numerical":
            continue
        a, b = (_as_number(f["value"]) for f in m["facts"])
        answer = int(re.sub(r"\D", "", r["golden_answers"][0]))
        if isinstance(a, dt.date):
            assert answer == abs((b - a).days), r["id"]
        elif "combined" in r["question"] or "together" in r["question"]:
            assert answer == a + b, r["id"]
        else:
            assert answer == abs(a - b), r["id"]
        n += 1
    assert n == 160


def test_comparison_answers_follow_the_values(bed: tb.Testbed) -> None:
    ents = bed.world.entities
    for r in _all_questions(bed):
        m = r["metadata"]
        if m["type"] != "comparison":
            continue
        values = {f["entity_id"]: _as_number(f["value"]) for f in m["facts"]}
        pick = min if " earlier" in r["question"] else max
        winner = pick(values, key=values.__getitem__)
        assert r["golden_answers"] == [ents[winner].name], r["id"]
        assert len(set(values.values())) == 2
        loser = next(e for e in values if e != winner)
        assert m["other_options"] == [ents[loser].name], r["id"]


def test_only_questions_offering_two_options_have_other_options(bed: tb.Testbed) -> None:
    """Comparisons name the losing entity; 'Which came first / happened later: the X or the Y?'
    names the losing event (with its aliases), so a judge can tell an answer that asserts it."""
    seen = 0
    for r in _all_questions(bed):
        m = r["metadata"]
        two = m["type"] == "comparison" or (m["type"] == "temporal" and " or the " in r["question"])
        assert bool(m["other_options"]) == two, r["id"]
        if m["type"] == "temporal" and two:
            seen += 1
            loser = m["other_options"][0]
            assert f"the {loser} or" in r["question"] or f"or the {loser}?" in r["question"], r["id"]
            assert loser not in r["golden_answers"] and m["key_points"][0] in r["golden_answers"], r["id"]
    assert seen > 0


def test_temporal_answers_follow_the_event_dates(bed: tb.Testbed) -> None:
    ents = bed.world.entities
    for r in _all_questions(bed):
        m = r["metadata"]
        if m["type"] != "temporal":
            continue
        ent = ents[m["entity_ids"][0]]
        events = sorted(ent.events, key=lambda e: e.when)
        gold = r["golden_answers"][0]
        if "came next" in r["question"]:
            prev = r["question"].split(" after the ", 1)[1].rstrip("?")
            i = [e.phrase for e in events].index(prev)
            assert gold == events[i + 1].phrase, r["id"]
        else:
            asked = [e for e in events if f"the {e.phrase}" in r["question"]]
            assert len(asked) == 2, r["id"]
            expected = asked[0] if "came first" in r["question"] else asked[1]
            assert gold == expected.phrase, r["id"]


def test_summary_lists_key_points_and_a_reference(bed: tb.Testbed) -> None:
    for r in _all_questions(bed):
        m = r["metadata"]
        if m["type"] != "summary":
            continue
        assert len(m["key_points"]) == len(m["facts"]) >= 3
        reference = r["golden_answers"][0]
        assert all(_has(reference, [kp]) for kp in m["key_points"]), r["id"]


def test_unanswerable_attributes_are_never_stated(bed: tb.Testbed) -> None:
    ents = bed.world.entities
    normalized = [f" {normalize_answer(p['contents'])} " for p in bed.corpus]
    n = 0
    for r in _all_questions(bed):
        m = r["metadata"]
        if m["type"] != "unanswerable":
            continue
        n += 1
        assert r["golden_answers"] == ["insufficient information"]
        assert m["answerable"] is False and m["supporting_ids"] == [] and m["facts"] == []
        ent = ents[m["entity_ids"][0]]
        attr = m["withheld_attribute"]
        assert attr in ent.withheld and attr not in ent.attrs
        assert tb.fact_key(ent.id, attr) not in bed.world.fact_locations
        keywords = tb.withheld_keywords(ent.kind, attr)
        name = f" {normalize_answer(ent.name)} "
        for p, norm in zip(bed.corpus, normalized):
            if ent.id in p["metadata"]["entity_ids"] or name in norm:
                low = p["contents"].lower()
                assert not any(re.search(rf"\b{re.escape(k)}", low) for k in keywords), (r["id"], p["id"])
        # The near-duplicate, when there is one, does state the attribute: a real trap.
        for twin in m["distractor_entity_ids"]:
            if attr in ents[twin].attrs:
                assert m["distractor_answers"], r["id"]
    assert n == 160


# --------------------------------------------------------------------------------------------
# Difficulty knobs
# --------------------------------------------------------------------------------------------


def test_split_fact_crosses_a_chunk_boundary(bed: tb.Testbed) -> None:
    passages = _passages(bed)
    by_key = {s["key"]: s for s in bed.world.split_facts}
    n = 0
    for r in _all_questions(bed):
        m = r["metadata"]
        keys = [tb.fact_key(f["entity_id"], f["attribute"]) for f in m.get("facts", [])]
        split_keys = [k for k in keys if k in by_key]
        assert m["knobs"]["split_fact"] == bool(split_keys), r["id"]
        for key in split_keys:
            sf = by_key[key]
            head, tail = passages[sf["head_id"]], passages[sf["tail_id"]]
            assert {sf["head_id"], sf["tail_id"]} <= set(m["supporting_ids"])
            assert head["metadata"]["doc_id"] == tail["metadata"]["doc_id"]
            assert tail["metadata"]["chunk_index"] == head["metadata"]["chunk_index"] + 1
            # The cue (entity + attribute) ends one passage; the value opens the next one.
            assert head["contents"].endswith(sf["head_text"])
            ent = bed.world.entities[sf["entity_id"]]
            assert ent.name in sf["head_text"]
            assert tb.attribute_label(ent.kind, sf["attribute"]) in sf["head_text"]
            body = tail["contents"].split("\n", 1)[1]
            assert body.startswith(sf["tail_text"])
            assert _has(sf["tail_text"], tb.fact_forms(bed.world, key))
            # Nowhere else is the fact stated.
            assert sorted(bed.world.fact_locations[key]) == sorted([sf["head_id"], sf["tail_id"]])
            n += 1
    assert n >= 20


def test_conflict_outdated_value_is_in_corpus_but_never_gold(bed: tb.Testbed) -> None:
    passages = _passages(bed)
    conflicts = {c["key"]: c for c in bed.world.conflicts}
    n = 0
    for r in _all_questions(bed):
        m = r["metadata"]
        keys = [tb.fact_key(f["entity_id"], f["attribute"]) for f in m.get("facts", [])]
        hits = [conflicts[k] for k in keys if k in conflicts]
        assert m["knobs"]["conflict"] == bool(hits), r["id"]
        golds = {normalize_answer(g) for g in r["golden_answers"]}
        for c in hits:
            assert c["outdated_passages"]
            for pid in c["outdated_passages"]:
                title = passages[pid]["contents"].split("\n", 1)[0]
                assert c["outdated_as_of"][-4:] in title
                assert _has(passages[pid]["contents"], c["outdated_forms"])
            assert not golds & {normalize_answer(f) for f in c["outdated_forms"]}, r["id"]
            # The true value is the newest dated statement.
            assert int(c["current_as_of"][-4:]) >= int(c["outdated_as_of"][-4:])
            assert c["outdated"] != c["current"]
            if m["type"] == "factual":
                assert m["outdated_answers"] == c["outdated_forms"]
            n += 1
    assert n >= 20


def test_distractors_are_near_duplicates_with_other_values(bed: tb.Testbed) -> None:
    ents = bed.world.entities
    n = 0
    for r in _all_questions(bed):
        m = r["metadata"]
        assert m["knobs"]["distractor"] == bool(m["distractor_entity_ids"])
        involved = set(m["entity_ids"]) | {f["entity_id"] for f in m["facts"]}
        for twin_id in m["distractor_entity_ids"]:
            twin = ents[twin_id]
            assert twin.twin_of in involved and twin.name != ents[twin.twin_of].name
            assert twin.kind == ents[twin.twin_of].kind
            n += 1
        golds = {normalize_answer(g) for g in r["golden_answers"]}
        assert not golds & {normalize_answer(a) for a in m["distractor_answers"]}, r["id"]
        assert all(pid.rsplit("-", 1)[0] for pid in m["distractor_passage_ids"])
    assert n >= 50


def test_multi_hop_questions_bridge_two_entities(bed: tb.Testbed) -> None:
    ents = bed.world.entities
    for r in _all_questions(bed):
        m = r["metadata"]
        if m["type"] != "multi_hop":
            continue
        first, bridge = m["entity_ids"]
        assert m["knobs"]["hops"] == 2
        assert bridge in ents[first].refs.values()
        assert ents[bridge].name not in r["question"]      # the bridge must be inferred
        assert m["key_points"][0] == ents[bridge].name


# --------------------------------------------------------------------------------------------
# Configuration and the notebook's parameters
# --------------------------------------------------------------------------------------------


def test_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValueError, match="passage_wordz"):
        tb.TestbedConfig.from_params({"passage_wordz": 50})
    with pytest.raises(ValueError, match="distractor_rate"):
        tb.TestbedConfig(distractor_rate=1.5)
    with pytest.raises(ValueError, match="domains"):
        tb.TestbedConfig(domains="finance,cooking")
    with pytest.raises(ValueError, match="seed"):
        tb.TestbedConfig(seed="13")  # type: ignore[arg-type]
    cfg = tb.TestbedConfig.from_params({"seed": 5, "domains": ["law", "medical"]})
    assert cfg.domain_list() == ["law", "medical"]
    assert tb.TestbedConfig.from_params(cfg.to_params()) == cfg


def test_notebook_parameters_match_the_config() -> None:
    nb = Path(__file__).resolve().parent.parent / "notebooks" / "00_testbed.py"
    cell = nb.read_text(encoding="utf-8").split('# %% tags=["parameters"]', 1)[1].split("# %%", 1)[0]
    params = {}
    for node in ast.parse(cell).body:
        assert isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        params[node.targets[0].id] = node.value.value
    assert list(params) == [f.name for f in fields(tb.TestbedConfig)]
    assert tb.TestbedConfig.from_params(params) == tb.TestbedConfig()


def test_withheld_focus_asks_withholdable_attributes_of_entities_that_state_them(bed: tb.Testbed) -> None:
    """At 0 the older questions come back; at 1 every factual question asks an attribute of the
    kind unanswerable questions ask, stated for its entity, and nothing else moves."""
    def asks(questions: list[dict]) -> int:
        kinds = {q["metadata"]["withheld_attribute"] for q in questions if not q["metadata"]["answerable"]}
        return sum(1 for q in questions if q["metadata"]["answerable"] and q["metadata"]["facts"]
                   and q["metadata"]["facts"][-1]["attribute"] in kinds)

    zero = tb.generate_testbed(tb.TestbedConfig(withheld_focus=0.0))
    assert zero.splits == bed.splits
    one = tb.generate_testbed(tb.TestbedConfig(withheld_focus=1.0))
    assert one.corpus == bed.corpus
    for split in tb.SPLITS:
        factual = [q for q in one.splits[split] if q["metadata"]["type"] == "factual"]
        facts = [q["metadata"]["facts"][0] for q in factual]
        assert facts and all(tb.withheld_keywords(_kind(one, f["entity_id"]), f["attribute"]) for f in facts)
        assert asks(one.splits[split]) > asks(bed.splits[split])
        assert [q for q in one.splits[split] if q["metadata"]["type"] != "factual"] == \
            [q for q in bed.splits[split] if q["metadata"]["type"] != "factual"]
    with pytest.raises(ValueError, match="testbed.withheld_focus: must be in"):
        tb.TestbedConfig(withheld_focus=1.5)


def _kind(bed: tb.Testbed, entity_id: str) -> str:
    return bed.world.entities[entity_id].kind
