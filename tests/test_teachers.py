"""Teacher parsing on malformed output, the LLM teacher on a scripted backend, the grounded
teacher's determinism and variety, and teacher agreement."""

import json

import pytest

from ragcritic_lib.llm import CallableLLM
from ragcritic_lib.mining.tagging import tag_key
from ragcritic_lib.mining.teachers import (
    CAUSE_NAMES, TAG_VOCABULARY, VERDICT_TOKENS, GroundedTeacher, LLMTeacher, Rationale, TagOutput, loads_lenient,
    parse_cluster_name, parse_rationale, parse_tag_output, teacher_agreement, vocabulary_size,
)

# -- lenient JSON -----------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}),
    ('```json\n{"a": [1, 2,],}\n```', {"a": [1, 2]}),
    ("Here you go: {'a': 'it's fine', 'b': None, 'c': True} -- hope this helps", {"a": "it's fine", "b": None, "c": True}),
    ('[{"tag": "x", "explanation": "cut', [{"tag": "x", "explanation": "cut"}]),
    ('{"a": 1, "b":', {"a": 1, "b": None}),
    ('{"a": 1, "b', {"a": 1}),
    ('{"a": "line\nbreak"}', {"a": "line\nbreak"}),
    ('{"a": "x"} {"b": 2}', {"a": "x"}),
])
def test_loads_lenient_repairs(text, expected):
    assert loads_lenient(text) == (expected, None)


@pytest.mark.parametrize("text, reason", [
    ("", "empty"), ("   ", "empty"), (None, "empty"), ("no json here", "no_json"),
    ("[" * 5000, "too_deep"), ('{"a": 1 "b": 2}', "invalid_json"),
])
def test_loads_lenient_failures(text, reason):
    assert loads_lenient(text) == (None, reason)


def test_huge_output_is_bounded():
    value, err = loads_lenient('[{"tag": "' + "x" * 1_000_000)
    assert err is None and len(value[0]["tag"]) < 20_001


# -- Stage-2 tag outputs -------------------------------------------------------------------


@pytest.mark.parametrize("text, tags", [
    ('[{"tag": "Missing evidence", "explanation": "why"}]', [("Missing evidence", "why")]),
    ('Sure! Tags:\n```json\n[{"tag": "A", "explanation": "x"}, {"tag": "B"}]\n```', [("A", "x"), ("B", "")]),
    ('{"tag": "A", "explanation": "x"}\n{"tag": "B", "explanation": "y"}', [("A", "x"), ("B", "y")]),
    ('{"tags": ["A", "a", "B"]}', [("A", ""), ("B", "")]),
    ('[{"title": "A", "description": "d"}, {"Missing  evidence": "e"}]', [("A", "d"), ("Missing evidence", "e")]),
    ('[{"tag": "A", "explanation": "trunc', [("A", "trunc")]),
    ('[{"tag": "__import__(\'os\').system(\'rm -rf /\')", "explanation": "x"}]',
     [("__import__('os').system('rm -rf /')", "x")]),
])
def test_parse_tag_output_accepts(text, tags):
    out = parse_tag_output(text)
    assert out.valid and out.error is None
    assert [(t["tag"], t["explanation"]) for t in out.tags] == tags


@pytest.mark.parametrize("text, reason", [
    ("", "empty"), ("I cannot tag this.", "no_json"), ("[]", "empty_list"), ('"just a string"', "no_json"),
    ("42", "no_json"), ("[1, 2, null]", "no_valid_tags"), ('[{"tag": ""}]', "no_valid_tags"),
    ('{"judgement": "Error"}', "wrong_shape"), ("[" * 3000 + "]" * 3000, "too_deep"),
])
def test_parse_tag_output_rejects(text, reason):
    out = parse_tag_output(text)
    assert not out.valid and out.error == reason and out.tags == [] and out.tag_names() is None


def test_tag_output_is_capped():
    text = json.dumps([{"tag": f"t{i}", "explanation": ""} for i in range(30)])
    assert len(parse_tag_output(text).tags) == 10


# -- Stage-1 rationales and cluster names -----------------------------------------------------


def test_parse_rationale_variants():
    r = parse_rationale('{"Judgement": "incorrect", "Error analysis": "Wrong  river."}')
    assert (r.judgement, r.analysis, r.valid) == ("Error", "Wrong river.", True)
    r = parse_rationale("{'Judgement': 'Correct', 'Error analysis': 'None'}")
    assert (r.judgement, r.analysis, r.valid) == ("Correct", "", True)
    assert parse_rationale('{"Judgement": "Error", "Error_analysis": ""}').error == "missing_analysis"
    assert parse_rationale('{"Judgement": "maybe", "Error_analysis": "x"}').error == "bad_judgement"
    assert parse_rationale('["a"]').error == "wrong_shape"
    assert parse_rationale("The answer is wrong.").error == "no_json"
    r = parse_rationale('[{"judgement": "wrong", "analysis": "x"}]')
    assert (r.judgement, r.analysis) == ("Error", "x")


def test_parse_cluster_name():
    assert parse_cluster_name('{"name": " Retrieval failures. "}').name == "Retrieval failures"
    plain = parse_cluster_name("Retrieval failures\nbecause ...")
    assert (plain.name, plain.valid, plain.error) == ("Retrieval failures", False, "plain_text")
    long = parse_cluster_name('{"name": "' + "word " * 20 + '"}')
    assert (long.name, long.error) == ("", "wrong_shape")
    assert parse_cluster_name("").error == "empty"


# -- LLM teacher on a scripted backend -----------------------------------------------------

RECORD = {
    "id": "q1", "dataset": "trivia", "pool_member": "m", "question": "Which river flows through Porto?",
    "golden_answers": ["Douro"], "prediction": "Tagus", "correct": False, "metadata": {},
    "passages": [{"id": "d1", "contents": "Porto\nPorto lies on the Douro.", "score": 1.0}],
    "rationale": "The model named the river of Lisbon.",
}


def test_llm_teacher_prompts_parsing_and_failure_counts():
    outputs = iter([
        '{"Judgement": "Error", "Error_analysis": "Named the wrong river."}',
        "not json at all",
        '[{"tag": "Confused cities", "explanation": "x"}]',
        "[]",
        '{"name": "City confusion"}',
        "",
    ])
    seen = []

    def fn(prompt, params):
        seen.append(prompt)
        return next(outputs)

    teacher = LLMTeacher(CallableLLM(fn), few_shot=2)
    rats = teacher.rationales([RECORD, {**RECORD, "id": "q2"}])
    assert [r.valid for r in rats] == [True, False] and rats[0].analysis == "Named the wrong river."
    last = seen[0][-1]["content"]
    assert "Which river flows through Porto?" in last and "Reference answer: Douro" in last
    assert "Model answer: Tagus" in last and "[1] Porto" in last
    assert len(seen[0]) == 1 + 2 * 2 + 1  # system, two worked examples, the task
    tags = teacher.tags([RECORD, {**RECORD, "rationale": "Another analysis."}])
    assert tags[0].tag_names() == ["Confused cities"] and tags[1].error == "empty_list"
    assert "The model named the river of Lisbon." in seen[2][-1]["content"]
    names = teacher.name_clusters([["a", "b"], ["Wrong river", "wrong river", "x"]])
    assert names[0].name == "City confusion"
    assert names[1].name == "Wrong river" and names[1].error == "empty"  # fallback: most common tag
    rep = teacher.parse_report()
    assert rep["rationale"] == {"calls": 2, "failures": 1, "failure_rate": 0.5, "by_reason": {"no_json": 1}}
    assert rep["tags"]["by_reason"] == {"empty_list": 1}
    assert rep["cluster_name"]["failures"] == 1


def test_llm_teacher_shares_the_prefix_for_its_own_calls_only_and_caps_on_request():
    seen = []

    def fn(prompt, params):
        seen.append((llm.share_generation_prefix, params.max_new_tokens))
        return '{"Judgement": "Error", "Error_analysis": "x"}'

    llm = CallableLLM(fn)
    llm.share_generation_prefix = False  # what a backend that offers it holds between calls
    shared = LLMTeacher(llm, few_shot=2, max_new_tokens=160, share_prefix=True)
    shared.rationales([RECORD])
    shared.verdicts([{**RECORD, "id": "q2"}])
    shared.tags([RECORD])
    assert seen == [(True, 160), (True, VERDICT_TOKENS), (True, 160)]
    LLMTeacher(llm, max_new_tokens=VERDICT_TOKENS // 2).verdicts([RECORD])
    assert seen[-1][1] == VERDICT_TOKENS // 2  # never past the teacher's own cap
    assert llm.share_generation_prefix is False  # the pool's generator is left as it was

    llm.share_generation_prefix = True  # another stage's setting ...
    LLMTeacher(llm, few_shot=2).name_clusters([["a", "b"]])
    assert seen[-1] == (False, 32) and llm.share_generation_prefix is True  # ... does not leak in or out

    def failing(prompt, params):
        raise RuntimeError("server down")

    broken = CallableLLM(failing)
    broken.share_generation_prefix = False
    with pytest.raises(RuntimeError):
        LLMTeacher(broken, share_prefix=True).rationales([RECORD])
    assert broken.share_generation_prefix is False
    # A backend without the setting (a served model) is called as it is.
    assert LLMTeacher(CallableLLM(lambda p, g: "{}"), share_prefix=True).rationales([RECORD])[0].valid is False


def test_build_teachers_names_a_bad_prefix_setting():
    from ragcritic_lib.mining.teachers import build_teachers

    with pytest.raises(ValueError, match="teacher_prefix"):
        build_teachers({"common": {"seed": 0}}, teacher="grounded", prefix="half")


def test_llm_teacher_few_shot_rotation_is_deterministic():
    t = LLMTeacher(CallableLLM(lambda p, g: "{}"), few_shot=1)
    a = t.rationale_messages(RECORD)
    assert a == t.rationale_messages(dict(RECORD))
    assert LLMTeacher(CallableLLM(lambda p, g: "{}"), few_shot=0).rationale_messages(RECORD)[1]["role"] == "user"
    firsts = {t.tag_messages({**RECORD, "id": f"q{i}"})[1]["content"] for i in range(20)}
    assert len(firsts) > 1  # different records see different worked examples


# -- grounded teacher -----------------------------------------------------------------------


def _records(n=30):
    recs = []
    for i in range(n):
        recs.append({**RECORD, "id": f"q{i}", "prediction": ["Tagus", "", "Porto", "Seine river"][i % 4],
                     "golden_answers": ["Douro"] if i % 3 else ["Garonne"]})
    return recs


def test_grounded_teacher_is_deterministic_and_varied():
    recs = _records()
    a = GroundedTeacher(seed=3)
    b = GroundedTeacher(seed=3)
    ta, tb = a.tags(recs), b.tags(recs)
    assert [t.tags for t in ta] == [t.tags for t in tb]
    assert [r.analysis for r in a.rationales(recs)] == [r.analysis for r in b.rationales(recs)]
    other = GroundedTeacher(seed=4).tags(recs)
    assert [t.tags for t in other] != [t.tags for t in ta]
    known = {tag_key(p) for ps in TAG_VOCABULARY.values() for p in ps}
    distinct = set()
    for out in ta:
        assert out.valid and 2 <= len(out.tags) <= 4
        assert all(tag_key(t["tag"]) in known and t["explanation"] for t in out.tags)
        distinct |= {t["tag"] for t in out.tags}
    assert len(distinct) >= 20
    assert a.parse_report()["tags"] == {"calls": 30, "failures": 0, "failure_rate": 0.0, "by_reason": {}}


def test_grounded_rationale_mentions_prediction_not_gold():
    rec = {**RECORD, "prediction": "Tagus"}
    text = GroundedTeacher(seed=0).rationales([rec])[0].analysis
    assert "Tagus" in text and "Douro" not in text
    assert GroundedTeacher().rationales([{**rec, "correct": True}])[0].judgement == "Correct"


def test_grounded_vocabulary_and_cluster_names():
    assert vocabulary_size() >= 150
    assert set(CAUSE_NAMES) == set(TAG_VOCABULARY)
    t = GroundedTeacher()
    names = t.name_clusters([
        ["Missing supporting evidence", "retrieval missed key document.", "overly verbose response"],
        ["something unseen", "Something unseen", "other"],
    ])
    assert names[0].name == CAUSE_NAMES["supporting_not_retrieved"]
    assert names[1].name == "Something unseen"


def test_invalid_grounded_settings():
    with pytest.raises(ValueError):
        GroundedTeacher(min_tags=3, max_tags=2)


# -- agreement ------------------------------------------------------------------------------


def test_teacher_agreement_exact():
    judged = [{"correct": False}, {"correct": False}, {"correct": True}]
    rats = [Rationale("Error", "a", True), Rationale(None, "", False, "no_json"), Rationale("Error", "c", True)]
    llm_tags = [TagOutput([{"tag": "Missing evidence", "explanation": ""}, {"tag": "wrong river", "explanation": ""}], True),
                TagOutput([], False, "empty"), None]
    grounded = [TagOutput([{"tag": "missing evidence.", "explanation": ""}, {"tag": "river confusion", "explanation": ""}], True),
                TagOutput([{"tag": "x", "explanation": ""}], True), None]
    agr = teacher_agreement(judged, rats, llm_tags, grounded)
    assert agr["judgement_agreement"] == round(1 / 3, 4)
    assert agr["judgement_agreement_on_errors"] == 0.5 and agr["judgement_agreement_on_correct"] == 0.0
    assert agr["rationale_parse_failure_rate"] == round(1 / 3, 4)
    assert agr["tagged_records"] == 2 and agr["tag_parse_failure_rate"] == 0.5
    assert agr["tag_exact_jaccard"] == round(1 / 3, 4)  # {missing evidence} of 3 distinct tags
    # content words: {missing, evidence, wrong, river} vs {missing, evidence, river, confusion}
    assert agr["tag_word_jaccard"] == 0.6


def test_teacher_config_file_with_a_bad_llm_config_names_the_file_and_key(tmp_path):
    from ragcritic_lib.io import DataFormatError
    from ragcritic_lib.mining.teachers import teacher_llm

    path = tmp_path / "teacher.yaml"
    path.write_text("backend: openai\nmodel: big\nurl: http://gpu-node:8000\n")
    with pytest.raises(DataFormatError, match=r"teacher.yaml: unknown key\(s\) \['url'\]"):
        teacher_llm({}, str(path))
    path.write_text("backend: openai\nmodel: big\nurls: http://gpu-node:8000\ntimeout_s: '120'\n")
    with pytest.raises(DataFormatError, match=r"teacher.yaml key 'timeout_s' must be a number"):
        teacher_llm({}, str(path))
