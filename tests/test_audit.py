"""The judge audit: reading a labelled file, agreement per judge, kinds and the stratified draw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragcritic_lib.evaluation import audit, audit_draw
from ragcritic_lib.evaluation.stats import wilson_interval
from ragcritic_lib.mining.teachers import Rationale

FIXTURE = Path(__file__).parent / "data" / "audit_fixture.jsonl"
RULES = ("f1", "em", "acc", "truth")


def _rows():
    return audit.read_audit(FIXTURE)


def test_wilson_interval():
    lo, hi = wilson_interval(57, 60)
    assert (round(lo, 4), round(hi, 4)) == (0.863, 0.9829)
    assert wilson_interval(0, 0) is None
    lo, hi = wilson_interval(10, 10)
    assert hi == pytest.approx(1.0) and 0.69 < lo < 0.73
    with pytest.raises(ValueError, match="k must be in"):
        wilson_interval(3, 2)


def test_every_judge_against_the_hand_labels():
    report = audit.judge_audit(_rows(), metrics=RULES, threshold=0.5, source="tests/data/audit_fixture.jsonl")
    assert report["n"] == 10 and report["n_test"] == 4 and report["choosing"]["n"] == 6
    assert report["choosing"]["agreement"] == {"f1": 0.5, "em": 0.8333, "acc": 0.8333, "truth": 1.0}
    assert report["agreement"] == {"f1": 0.25, "em": 0.75, "acc": 0.75, "truth": 0.75}
    assert report["best_choosing"] == "truth"
    # F1 credits "A or B", the superseded hedge and the near-duplicate river; misses the sentence.
    assert report["confusion"]["f1"] == {"credited_right": 1, "credited_wrong": 2, "rejected_right": 1, "rejected_wrong": 0}
    assert report["wrong_rows"]["f1"] == ["t1", "t3", "t4"]
    assert report["wrong_by_kind"]["truth"] == {"verbose_gold": 1}   # "B ... later than A": the known blind spot
    assert report["wrong_by_kind"]["acc"] == {"superseded": 1}
    lo, hi = wilson_interval(3, 4)
    assert report["agreement_ci_low"]["truth"] == round(lo, 4) and report["agreement_ci_high"]["truth"] == round(hi, 4)
    assert report["choosing"]["labels"] == {"correct": 3, "wrong": 3}
    # How far the best judge stands from each other one, paired by row: truth against F1 on the six
    # choosing rows is +0.5 (three rows only truth gets right), with a paired bootstrap interval.
    versus = report["choosing"]["best_versus"]
    assert set(versus) == {"f1", "em", "acc"} and versus["f1"]["n"] == 6 and versus["f1"]["delta"] == 0.5
    assert versus["f1"]["ci_low"] <= 0.5 <= versus["f1"]["ci_high"] and 0 <= versus["f1"]["p_value"] <= 1
    assert report["best_versus"]["f1"]["n"] == 4 and report["best_versus"]["f1"]["delta"] == 0.5
    assert audit.best_versus(_rows(), {"f1": [True] * 10}, "test", None) == {}


def test_the_report_fits_notebook_02_s_metrics_schema():
    from ragcritic_lib.pipeline import metrics_schema as ms

    base = {"samples": 0, "source_statistics": [], "error_rate_by_member": {}}
    report = audit.judge_audit(_rows(), metrics=RULES, threshold=0.5, source="x")
    ms.validate("02_error_sampling", dict(base, judge={"metric": "truth", "threshold": 0.5, "audit": report}))
    ms.validate("02_error_sampling", dict(base, judge={"metric": "f1", "threshold": 0.5, "audit": audit.no_audit("x")}))
    report["agreement"]["truth"] = 1.2
    with pytest.raises(ms.MetricsSchemaError, match=r"judge.audit.agreement.truth = 1.2 is not in \[0, 1\]"):
        ms.validate("02_error_sampling", dict(base, judge={"metric": "truth", "threshold": 0.5, "audit": report}))


def test_the_llm_teacher_is_judged_where_it_parses():
    rows = _rows()

    def teacher(recs):
        return [Rationale("Correct" if i % 2 else "Error", "", True) if i < 8 else Rationale(None, "", False)
                for i, _ in enumerate(recs)]

    report = audit.judge_audit(rows, metrics=("acc",), threshold=0.5, teacher=teacher)
    assert report["choosing"]["judged"]["llm_teacher"] == 6 and report["judged"]["llm_teacher"] == 2
    assert report["choosing"]["agreement"]["llm_teacher"] == 0.0 and report["agreement"]["llm_teacher"] == 1.0
    assert report["best_choosing"] == "acc"
    assert audit.teacher_verdicts([Rationale("Error", "", True), Rationale("Correct", "", False)]) == [False, None]


def test_a_judge_missing_rows_is_not_chosen():
    rows = _rows()
    verdicts = {"acc": audit.rule_verdicts(rows, "acc", 0.5),
                "partial": [r["label"] == "correct" if r["role"] == "test" or i == 0 else None for i, r in enumerate(rows)]}
    report = audit.audit_report(rows, verdicts)
    assert report["choosing"]["agreement"]["partial"] == 1.0 and report["best_choosing"] == "acc"


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r.pop("reason"), ":3: missing key 'reason'"),
    (lambda r: r.update(label="right"), ":3: label must be one of correct | wrong, got 'right'"),
    (lambda r: r.update(reason="  "), ":3: reason must be a one-line reason"),
    (lambda r: r.update(reason="a\nb"), ":3: reason must be one line"),
    (lambda r: r.update(role="train"), ":3: role must be one of choosing | test"),
    (lambda r: r.update(kind="odd"), ":3: kind must be one of"),
    (lambda r: r.update(golden_answers=[]), ":3: golden_answers must be a non-empty list"),
    (lambda r: r.update(prediction=None), ":3: prediction must be a str, got NoneType"),
    (lambda r: r.update(audit_id="c1"), ":3: audit_id 'c1' already on line 1"),
])
def test_bad_rows_name_the_file_and_line(tmp_path, edit, message):
    lines = FIXTURE.read_text().splitlines()
    row = json.loads(lines[2])
    edit(row)
    lines[2] = json.dumps(row)
    bad = tmp_path / "audit.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(audit.AuditFormatError) as info:
        audit.read_audit(bad)
    assert str(info.value).startswith(f"{bad}{message}")


def test_unparsable_and_empty_files(tmp_path):
    bad = tmp_path / "a.jsonl"
    bad.write_text('{"audit_id": "x"}\n{oops\n')
    with pytest.raises(audit.AuditFormatError, match=r"a.jsonl:1: missing key 'role'"):
        audit.read_audit(bad)
    bad.write_text(FIXTURE.read_text().splitlines()[0] + "\n{oops\n")
    with pytest.raises(audit.AuditFormatError, match=r"a.jsonl:2: not JSON"):
        audit.read_audit(bad)
    bad.write_text("\n")
    with pytest.raises(audit.AuditFormatError, match="no audit rows"):
        audit.read_audit(bad)


def test_an_unlabelled_draw_reads_only_as_unlabelled(tmp_path):
    row = dict(json.loads(FIXTURE.read_text().splitlines()[0]), label=None, reason=None)
    f = tmp_path / "draw.jsonl"
    f.write_text(json.dumps(row) + "\n")
    assert audit.read_audit(f, labelled=False)[0]["label"] is None
    with pytest.raises(audit.AuditFormatError, match="label must be a str"):
        audit.read_audit(f)


@pytest.mark.parametrize(("record", "kind"), [
    ({"prediction": "", "golden_answers": ["x"]}, "empty"),
    ({"prediction": "I don't know", "golden_answers": ["insufficient information"]}, "abstain_unanswerable"),
    ({"prediction": "not mentioned", "golden_answers": ["1990"]}, "abstain_answerable"),
    ({"prediction": "1990", "golden_answers": ["insufficient information"]}, "answer_unanswerable"),
    ({"prediction": "Yellfield or Ruddale", "golden_answers": ["Yellfield"], "metadata": {"other_options": ["Ruddale"]}}, "both_options"),
    ({"prediction": "3,900", "golden_answers": ["4,300"], "metadata": {"outdated_answers": ["3,900"]}}, "superseded"),
    ({"prediction": "Douro", "golden_answers": ["Tagus"], "metadata": {"distractor_answers": ["Douro"]}}, "near_duplicate"),
    ({"prediction": "Yellfield Annual", "golden_answers": ["1990"], "passages": [{"contents": "Yellfield Annual\ntext"}]}, "title_copy"),
    ({"prediction": "It was founded in", "golden_answers": ["1990"], "truncated": True}, "truncated"),
    ({"prediction": "in 1990", "golden_answers": ["1990"]}, "terse_gold"),
    ({"prediction": "Yellfield was founded in 1990 by settlers", "golden_answers": ["1990"]}, "verbose_gold"),
    ({"prediction": "20 days", "golden_answers": ["627 days"]}, "number_mismatch"),
    ({"prediction": "Paris", "golden_answers": ["London"]}, "other"),
])
def test_answer_kinds_read_form_and_metadata(record, kind):
    assert audit.answer_kind(record) == kind
    assert audit.answer_kind(dict(record, label="correct", f1=1.0)) == kind   # labels and scores are not read


def _candidate(i: int, role: str, kind: str) -> dict:
    return {"audit_id": f"{role}{kind}{i}", "role": role, "kind": kind}


def test_stratified_draw_meets_its_floors_and_is_seeded():
    pool = ([_candidate(i, "choosing", "terse_gold") for i in range(400)]
            + [_candidate(i, "choosing", "both_options") for i in range(40)]
            + [_candidate(i, "test", "terse_gold") for i in range(200)]
            + [_candidate(i, "test", "superseded") for i in range(6)]
            + [_candidate(i, "choosing", "superseded") for i in range(30)])
    drawn = audit_draw.stratified_draw(pool, n=120, min_test=50, min_kind=15, seed=3)
    kinds = [r["kind"] for r in drawn]
    assert len(drawn) == 120 and len({r["audit_id"] for r in drawn}) == 120
    assert sum(r["role"] == "test" for r in drawn) >= 50
    assert kinds.count("superseded") >= 15 and kinds.count("both_options") >= 15
    assert sum(r["kind"] == "superseded" and r["role"] == "test" for r in drawn) == 6   # test rows first
    assert drawn == audit_draw.stratified_draw(pool, n=120, min_test=50, min_kind=15, seed=3)
    assert drawn != audit_draw.stratified_draw(pool, n=120, min_test=50, min_kind=15, seed=4)
    short = audit_draw.draw_summary(audit_draw.stratified_draw(pool[:410], n=30, min_test=0, min_kind=15), min_kind=15)
    assert short[-1].startswith("below 15") and "superseded" in short[-1]


def test_candidates_and_cli_write_an_unlabelled_draw(tmp_path):
    rec = {"id": "q1", "question": "When?", "golden_answers": ["1990"], "metadata": {"dataset": "testbed"},
           "prediction": "1990", "f1": 1.0, "em": 1.0, "acc": 1.0, "passages": [{"id": "p", "contents": "T\nx", "score": 2}]}
    (tmp_path / "data/error_sampling/samples").mkdir(parents=True)
    (tmp_path / "data/retrieval_rag/testbed").mkdir(parents=True)
    lines = [dict(rec, pool_member="m1"), dict(rec, pool_member="m2"), dict(rec, id="q2", prediction="x", generation_error="refused")]
    (tmp_path / "data/error_sampling/samples/testbed.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "data/retrieval_rag/testbed/test.jsonl").write_text(json.dumps(dict(rec, id="q3", prediction="2001")) + "\n")
    rows = audit_draw.candidates(tmp_path)
    assert [(r["role"], r["source"], r["kind"]) for r in rows] == [("choosing", "error_sampling", "terse_gold"),
                                                                 ("test", "retrieval_rag", "number_mismatch")]
    assert not {"f1", "em", "acc"} & set(rows[0]) and rows[0]["label"] is None and rows[0]["passages"] == [{"id": "p", "contents": "T\nx"}]
    out = tmp_path / "draw.jsonl"
    assert audit_draw.main(["--root", str(tmp_path), "--out", str(out), "--n", "5", "--min-test", "1"]) == 0
    assert len(audit.read_audit(out, labelled=False)) == 2
    assert audit_draw.main(["--root", str(tmp_path), "--out", str(tmp_path / "audit.jsonl")]) == 2
    assert audit_draw.main(["--root", str(tmp_path / "none"), "--out", str(out)]) == 1


def test_misled_answers_join_the_candidates_by_their_split_and_append_to_a_draw(tmp_path):
    base = {"question": "Where?", "golden_answers": ["Lanholm"], "passages": [{"id": "p", "contents": "T\nx"}],
            "metadata": {"dataset": "testbed", "distractor_answers": ["Corby"], "outdated_answers": ["Ulmford"]}}
    misled = [dict(base, id="testbed-test-1", split="test", prediction="Corby", pool_member="misled-near_duplicate"),
              dict(base, id="testbed-train-2", split="train", prediction="Ulmford", pool_member="misled-superseded"),
              dict(base, id="testbed-dev-3", split="dev", prediction="Corby", pool_member="misled-near_duplicate"),
              dict(base, id="testbed-x-4", split="", prediction="Corby")]  # no split: not drawn
    (tmp_path / "data/audit").mkdir(parents=True)
    (tmp_path / "data/audit/misled.jsonl").write_text("".join(json.dumps(x) + "\n" for x in misled))
    rows = audit_draw.candidates(tmp_path)
    assert [(r["role"], r["split"], r["source"], r["kind"]) for r in rows] == [
        ("test", "test", "misled", "near_duplicate"), ("choosing", "train", "misled", "superseded"),
        ("choosing", "dev", "misled", "near_duplicate")]
    drawn = [dict(rows[0])]
    extra = audit_draw.append_draw(drawn, rows, kinds=["near_duplicate", "superseded"], min_kind=2)
    assert sorted(r["audit_id"] for r in extra) == sorted(r["audit_id"] for r in rows[1:])  # the held row is not drawn again
    assert audit_draw.append_draw(drawn + extra, rows, kinds=["near_duplicate"], min_kind=2) == []
    out = tmp_path / "draw.jsonl"
    out.write_text(json.dumps(rows[0]) + "\n")
    assert audit_draw.main(["--root", str(tmp_path), "--out", str(out), "--append-kinds", "superseded",
                            "--min-kind", "3"]) == 0
    assert [r["kind"] for r in audit.read_audit(out, labelled=False)] == ["near_duplicate", "superseded"]
    assert audit_draw.main(["--root", str(tmp_path), "--out", str(out), "--append-kinds", "bogus"]) == 2


def test_misleading_passages_hand_over_the_twin_or_the_older_report_never_the_support():
    from ragcritic_lib.evaluation import audit_misled

    corpus = {"own-0": {"id": "own-0", "contents": "Ruddale\nRuddale has 103,341 inhabitants.", "metadata": {"entity_ids": ["t1"]}},
              "old-0": {"id": "old-0", "contents": "Census 2001: Ruddale\nRuddale had 132,800 inhabitants.",
                        "metadata": {"entity_ids": ["t1"]}},
              "far-0": {"id": "far-0", "contents": "Elsewhere\nSome town had 132,800 inhabitants.",
                        "metadata": {"entity_ids": ["t9"]}},
              "twin-0": {"id": "twin-0", "contents": "Rudmere\nRudmere lies on a river.", "metadata": {"entity_ids": ["t2"]}},
              "twin-1": {"id": "twin-1", "contents": "Rudmere\nRudmere has 81,901 inhabitants.", "metadata": {"entity_ids": ["t2"]}}}
    q = {"id": "testbed-test-7", "question": "How many people live in Ruddale?", "golden_answers": ["103,341"],
         "metadata": {"entity_ids": ["t1"], "supporting_ids": ["own-0"], "outdated_answers": ["132,800"],
                      "distractor_passage_ids": ["twin-0", "twin-1"], "distractor_answers": ["81,901"]}}
    by_value = audit_misled._value_index(list(corpus.values()), {"132,800"})
    assert [p["id"] for p in audit_misled.misleading_passages(q, corpus, by_value, "near_duplicate")] == ["twin-1", "twin-0"]
    assert [p["id"] for p in audit_misled.misleading_passages(q, corpus, by_value, "superseded")] == ["old-0"]
    bare = dict(q, metadata={"supporting_ids": ["own-0"]})
    assert audit_misled.misleading_passages(bare, corpus, by_value, "superseded") == []
    with pytest.raises(ValueError, match="unknown misleader"):
        audit_misled.misleading_passages(q, corpus, by_value, "typo")


def test_the_llm_teacher_judges_the_rows_it_is_given_spread_over_the_file():
    from ragcritic_lib.mining.teachers import Rationale

    assert audit.spread_rows(10, -1) == list(range(10)) and audit.spread_rows(10, 20) == list(range(10))
    assert audit.spread_rows(10, 3) == [0, 3, 6] and audit.spread_rows(10, 0) == []
    asked = []

    def teacher(rows):
        asked.append([r["audit_id"] for r in rows])
        return [Rationale("Correct", "", True) for _ in rows]

    rows = _rows()
    report = audit.judge_audit(rows, metrics=("acc",), threshold=0.5, teacher=teacher, teacher_rows=4)
    assert asked == [[rows[i]["audit_id"] for i in audit.spread_rows(len(rows), 4)]]
    assert report["judged"]["llm_teacher"] + report["choosing"]["judged"]["llm_teacher"] == 4
    assert report["judged"]["acc"] + report["choosing"]["judged"]["acc"] == len(rows)
    audit.judge_audit(rows, metrics=("acc",), threshold=0.5, teacher=teacher, teacher_rows=0)
    assert asked[-1] == [rows[i]["audit_id"] for i in audit.spread_rows(len(rows), 4)]  # 0 rows: never asked


def test_misled_answers_are_standard_rags_over_the_given_passages_named_by_variant():
    from ragcritic_lib.evaluation import audit_misled
    from ragcritic_lib.llm import CallableLLM

    seen = []

    def model(prompt, params):
        seen.append(prompt[-1]["content"])
        return "132,800"

    q = {"id": "testbed-dev-5", "question": "How many people live in Ruddale?", "golden_answers": ["103,341"],
         "metadata": {"outdated_answers": ["132,800"]}}
    chosen = [(q, "superseded", [{"id": "old-0", "contents": "Census 2001: Ruddale\nRuddale had 132,800 inhabitants."}])]
    rows = audit_misled.answer_misled(CallableLLM(model), chosen, variant="terse", max_passage_words=60,
                                      max_new_tokens=16, member_suffix="-terse")
    assert rows[0]["prediction"] == "132,800" and rows[0]["split"] == "dev" and rows[0]["misled_by"] == "superseded"
    assert rows[0]["pool_member"] == "misled-superseded-terse" and [p["id"] for p in rows[0]["passages"]] == ["old-0"]
    assert "132,800 inhabitants" in seen[0]
