"""Taxonomy file consistency, clustering, cluster -> tier-2 mapping and reverse mapping."""

import json

import numpy as np
import pytest

from ragcritic_lib.mining.evidence import EVIDENCE_CAUSES, KNOWN_CAUSES
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.mining.taxonomy import (
    Overrides, assign_tiers, build_error_qa, cluster_tags, critic_error_target, known_cause_agreement,
    label_distribution, label_key, load_known_causes, load_overrides, load_taxonomy,
    map_clusters_to_tier2, sample_cluster_tags, tag_to_tier2, taxonomy_from_dict, validate_taxonomy,
)

# Every spelling of a tier-1/tier-2 label found in the paper's prompt, scorer and taxonomy file.
PAPER_LABELS = {
    "Incomplete Information": "Incomplete Information",
    "Irrelevant Information": "Irrelevant Information",
    "Erroneous Information": "Erroneous Information",
    "Incomplete or Missing Response": "Incomplete or Missing Response",
    "Incomplete Response": "Incomplete or Missing Response",
    "Inaccurate or Misunderstood Response": "Inaccurate or Misunderstood Response",
    "Inaccurate Response": "Inaccurate or Misunderstood Response",
    "Irrelevant or Off-Topic Response": "Irrelevant or Off-Topic Response",
    "Off-Topic Response": "Irrelevant or Off-Topic Response",
    "Overly Verbose Response": "Overly Verbose Response",
    "Insufficient or Incomplete Information Retrieval": "Insufficient or Incomplete Information Retrieval",
    "Data Insufficiency in Retrieval": "Data Insufficiency in Retrieval",
    "Relevance Gaps in Retrieval": "Relevance Gaps in Retrieval",
    "Irrelevant Information Retrieval": "Irrelevant Information Retrieval",
    "Erroneous Information Retrieval": "Erroneous Information Retrieval",
    "Omission of Key Information": "Omission of Key Information",
    "Lack of Specificity": "Lack of Specificity",
    "Specificity and Precision Errors": "Specificity and Precision Errors",
    "Partial Coverage and Temporal Issues": "Partial Coverage and Temporal Issues",
    "Lack of Practicality": "Lack of Practicality",
    "Contextual Understanding Errors": "Contextual Understanding Errors",
    "Factual Inaccuracies": "Factual Inaccuracies",
    "Incorrect and Incomplete Answers": "Incorrect and Incomplete Answers",
    "Golden Answer Misalignment": "Incorrect and Incomplete Answers",
    "Misinterpretation of Queries and Information": "Misinterpretation of Queries and Information",
    "Entity and Concept Confusion": "Entity and Concept Confusion",
    "Irrelevant Content and Topic Drift": "Irrelevant Content and Topic Drift",
    "Off-Topic and Redundant Responses": "Off-Topic and Redundant Responses",
    "Content and Context Misalignment": "Content and Context Misalignment",
    "Overly Complex and Redundant Response": "Overly Complex and Redundant Response",
}


@pytest.fixture(scope="module")
def tax():
    return load_taxonomy()


# -- the file ----------------------------------------------------------------------------------


def test_taxonomy_file_is_consistent(tax):
    assert len(tax.tier1) == 7 and len(tax.tier2) == 19
    keys = [label_key(x) for x in tax.tier1 + tax.tier2]
    assert len(set(keys)) == len(keys)
    assert sorted(tax.parents) == sorted(tax.tier2)
    assert all(tax.parents[t2] in tax.tier1 for t2 in tax.tier2)
    assert sum(len(tax.children(t1)) for t1 in tax.tier1) == 19
    assert all(len(tax.definition(x).split()) >= 8 for x in tax.tier1 + tax.tier2)
    assert set(tax.stages.values()) == {"retrieval", "generation"}


def test_every_paper_spelling_resolves(tax):
    for spelling, canonical in PAPER_LABELS.items():
        assert tax.canonical(spelling) == canonical, spelling
        assert tax.canonical(spelling.upper() + " ") == canonical
    assert tax.canonical("entity-and-concept   confusion") == "Entity and Concept Confusion"
    assert tax.canonical("Something Else") is None
    assert tax.canonical(None) is None
    assert tax.parent("Golden Answer Misalignment") == "Inaccurate or Misunderstood Response"
    assert tax.children("Off-Topic Response") == [
        "Irrelevant Content and Topic Drift", "Off-Topic and Redundant Responses", "Content and Context Misalignment"]
    assert tax.tier_of("Incomplete Response") == 1 and tax.tier_of("Lack of Specificity") == 2
    with pytest.raises(KeyError):
        tax.parent("Incomplete Information")  # a tier-1 label has no parent
    assert tax.canonical_list(["incomplete response", "Lack of Specificity", "bogus", "Incomplete Response"], tier=1) == [
        "Incomplete or Missing Response"]


def test_validation_reports_each_problem():
    raw = {
        "tier1": [
            {"name": "A", "definition": "a", "tier2": [{"name": "X", "definition": "x"}]},
            {"name": "B", "definition": "b", "tier2": [{"name": "x.", "definition": "dup"}]},
            {"name": "C", "definition": "", "tier2": []},
        ],
        "aliases": {"Y": "Nope", "a": "X"},
    }
    problems = validate_taxonomy(raw)
    text = " | ".join(problems)
    assert "duplicate label 'x.'" in text
    assert "tier1[2] (C): missing definition" in text
    assert "tier1[2] (C): needs a non-empty 'tier2' list" in text
    assert "'Y' points to unknown label 'Nope'" in text
    assert "'a' collides with a canonical label" in text
    with pytest.raises(DataFormatError, match="invalid taxonomy"):
        taxonomy_from_dict(raw)


def test_known_causes_cover_every_cause_the_code_emits(tax):
    kc = load_known_causes(taxonomy=tax)
    assert set(kc) == set(KNOWN_CAUSES) | set(EVIDENCE_CAUSES)
    assert kc["supporting_not_retrieved"]["tier1"] == ["Incomplete Information"]
    assert "Entity and Concept Confusion" in kc["distractor_entity"]["tier2"]


def test_overrides_file_loads_and_bad_targets_fail(tax, tmp_path):
    load_overrides(taxonomy=tax)  # the reviewed file in the repository
    p = tmp_path / "o.yaml"
    p.write_text("clusters:\n  Retrieval failures: Golden Answer Misalignment\ntags:\n  x: Incomplete Information\n")
    with pytest.raises(DataFormatError, match="tags.'x'.*not a tier-2 label"):
        load_overrides(p, tax)
    p.write_text("clusters:\n  Retrieval FAILURES!: Golden Answer Misalignment\n")
    ov = load_overrides(p, tax)
    assert ov.for_cluster("retrieval failures") == "Incorrect and Incomplete Answers"


def test_critic_target_keys_match_the_critic_schema(tax):
    critic = pytest.importorskip("ragcritic_lib.critic.critics")
    target = critic_error_target("why", ["Incomplete Information"], ["Data Insufficiency in Retrieval"], ["t"])
    assert list(target) == ["Judgement", "Error_analysis", "tag1", "tag2", "tag3"]
    assert set(target) == set(critic.TARGET_KEYS)
    parsed = critic.parse_critic_output(json.dumps(target), tax)
    assert parsed.judgement == "Error" and parsed.tag1 == target["tag1"] and parsed.tag2 == target["tag2"]


# -- clustering with a deterministic fake encoder ---------------------------------------------

VOCAB = ["retrieval", "missing", "document", "evidence", "entity", "confusion", "name", "similar",
         "verbose", "long", "answer", "rambling"]


def fake_encode(texts):
    out = np.zeros((len(texts), len(VOCAB)))
    for i, t in enumerate(texts):
        for w in t.lower().replace(":", " ").split():
            if w in VOCAB:
                out[i, VOCAB.index(w)] += 1
    norm = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norm == 0, 1, norm)


TAGS = ["retrieval missing", "missing document", "missing evidence", "retrieval missing evidence",
        "entity confusion", "similar entity name", "name confusion",
        "verbose long answer", "long rambling answer", "verbose answer"]

SMALL_TAX = {
    "tier1": [
        {"name": "Retrieval Problem", "definition": "d", "tier2": [
            {"name": "Missing Evidence", "definition": "retrieval missing document evidence"}]},
        {"name": "Answer Problem", "definition": "d", "tier2": [
            {"name": "Entity Confusion", "definition": "entity confusion similar name"},
            {"name": "Verbose Answer", "definition": "verbose long rambling answer"}]},
    ],
}


def test_ward_clustering_exact_groups():
    c = cluster_tags(TAGS + ["missing evidence", ""], fake_encode, 3)  # duplicates and empties ignored
    assert c.n_clusters == 3 and len(c.tags) == 10
    assert c.members(0) == ["missing document", "missing evidence", "retrieval missing", "retrieval missing evidence"]
    assert c.members(1) == ["entity confusion", "name confusion", "similar entity name"]
    assert c.members(2) == ["long rambling answer", "verbose answer", "verbose long answer"]
    assert c.linkage.shape == (9, 4)
    assert c.sizes() == [4, 3, 3]
    assert c.sizes({"missing evidence": 5, "verbose answer": 2}) == [5, 0, 2]
    assert c.cluster_of()["name confusion"] == 1
    assert cluster_tags(TAGS, fake_encode, 50).n_clusters == 10  # K capped at unique tags
    single = cluster_tags(["only"], fake_encode, 5)
    assert single.labels == [0] and single.n_clusters == 1


def test_sample_cluster_tags_caps_and_is_seeded():
    c = cluster_tags(TAGS, fake_encode, 3)
    a = sample_cluster_tags(c, max_tags=2, seed=1)
    assert [len(x) for x in a] == [2, 2, 2]
    assert a == sample_cluster_tags(c, max_tags=2, seed=1)
    assert all(set(x) <= set(c.members(i)) for i, x in enumerate(a))
    assert sample_cluster_tags(c, max_tags=50)[0] == c.members(0)


def test_mapping_to_tier2_and_overrides():
    tax = taxonomy_from_dict(SMALL_TAX)
    c = cluster_tags(TAGS, fake_encode, 3)
    names = ["missing evidence", "entity confusion", "verbose answer"]
    maps = map_clusters_to_tier2(c, names, tax, fake_encode)
    assert [m.tier2 for m in maps] == ["Missing Evidence", "Entity Confusion", "Verbose Answer"]
    assert [m.tier1 for m in maps] == ["Retrieval Problem", "Answer Problem", "Answer Problem"]
    assert all(m.source == "similarity" and m.similarity > 0.5 for m in maps)
    ov = Overrides(clusters={label_key("Verbose Answer"): "Entity Confusion"},
                   tags={label_key("name confusion"): "Missing Evidence"})
    maps2 = map_clusters_to_tier2(c, names, tax, fake_encode, overrides=ov)
    assert maps2[2].tier2 == "Entity Confusion" and maps2[2].source == "override"
    tmap = tag_to_tier2(c, maps2, ov)
    assert tmap["name confusion"] == "Missing Evidence"
    assert tmap["verbose answer"] == "Entity Confusion"
    assert tmap["entity confusion"] == "Entity Confusion"
    with pytest.raises(ValueError):
        map_clusters_to_tier2(c, names[:2], tax, fake_encode)


def test_reverse_mapping_builds_critic_targets():
    tax = taxonomy_from_dict(SMALL_TAX)
    tmap = {"missing evidence": "Missing Evidence", "entity confusion": "Entity Confusion",
            "verbose answer": "Verbose Answer"}
    assert assign_tiers(["verbose answer", "unknown", "entity confusion", "verbose answer"], tmap, tax) == (
        ["Answer Problem"], ["Verbose Answer", "Entity Confusion"], ["verbose answer", "entity confusion"])
    records = [
        {"id": "q1", "question": "Q?", "prediction": "p", "rationale": "why 1", "pool_member": "m1",
         "metadata": {"type": "factual"}, "messages": ["dropped"]},
        {"id": "q2", "question": "Q2?", "prediction": "p2", "rationale": "why 2", "pool_member": "m2",
         "metadata": {"type": "multi_hop"}},
    ]
    out, rep = build_error_qa(records, [["missing evidence", "verbose answer"], ["rare"]], tmap, tax)
    assert rep == {"input": 2, "kept": 1, "dropped_no_tags": 1}
    assert out[0]["critic_target"] == {
        "Judgement": "Error", "Error_analysis": "why 1",
        "tag1": ["Retrieval Problem", "Answer Problem"],
        "tag2": ["Missing Evidence", "Verbose Answer"],
        "tag3": ["missing evidence", "verbose answer"],
    }
    assert "messages" not in out[0]
    assert label_distribution(out, 1) == {"all": {"Answer Problem": 1, "Retrieval Problem": 1}}
    assert label_distribution(out, 2, by="type") == {"factual": {"Missing Evidence": 1, "Verbose Answer": 1}}
    with pytest.raises(ValueError):
        build_error_qa(records, [["x"]], tmap, tax)


def test_known_cause_agreement_exact():
    kc = {
        "supporting_not_retrieved": {"tier1": ["Incomplete Information"],
                                     "tier2": ["Insufficient or Incomplete Information Retrieval"]},
        "verbose_or_truncated": {"tier1": ["Overly Verbose Response"], "tier2": []},
    }

    def rec(causes, tag1, tag2):
        return {"evidence": {"known_causes": causes}, "critic_target": {"tag1": tag1, "tag2": tag2}}

    records = [
        rec(["supporting_not_retrieved"], ["Incomplete Information"], ["Data Insufficiency in Retrieval"]),
        rec(["supporting_not_retrieved", "verbose_or_truncated"], ["Overly Verbose Response"],
            ["Overly Complex and Redundant Response"]),
        rec(["split_fact"], ["Incomplete Information"], []),
        rec([], ["Incomplete Information"], []),
    ]
    agr = known_cause_agreement(records, kc)
    assert agr["pairs"] == 3 and agr["records"] == 3
    assert agr["tier1_hit_rate"] == round(2 / 3, 4)
    assert agr["tier2_hit_rate"] == 0.0
    assert agr["records_all_tier1_hit"] == round(2 / 3, 4)  # the split_fact record has no known mapping
    assert agr["per_cause"]["supporting_not_retrieved"]["tier1_hit_rate"] == 0.5
    assert agr["per_cause"]["verbose_or_truncated"]["tier2_hit_rate"] is None
    assert agr["unknown_causes"] == {"split_fact": 1}


def test_dendrogram_leaves_are_labelled_with_cluster_names():
    from scipy.cluster.hierarchy import dendrogram

    from ragcritic_lib.mining.taxonomy import dendrogram_leaf_labels

    c = cluster_tags(TAGS, fake_encode, 3)
    out = dendrogram(c.linkage, truncate_mode="lastp", p=3, no_plot=True,
                     leaf_label_func=dendrogram_leaf_labels(c, ["evidence", "entity", "verbose"]))
    assert sorted(out["ivl"]) == ["0: evidence (4)", "1: entity (3)", "2: verbose (3)"]
