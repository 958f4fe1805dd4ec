"""The correction ladder: oracle critique from known causes, fixed action, paired statistics."""

from __future__ import annotations

import pytest

from ragcritic_lib.agent.ladder import (
    AlwaysErrorCritic, KnownCauseCritic, ladder_records, ladder_table, plan_shares,
)
from ragcritic_lib.agent.planner import RuleBasedPlanner, load_error_actions
from ragcritic_lib.agent.workflow import critic_feedback
from ragcritic_lib.mining.taxonomy import load_known_causes
from word_retriever import WordOverlapRetriever

PASSAGE = "Kestrel Bridge\nThe Kestrel Bridge crosses the Aldor river. It was completed in 1887."


def rec(rid, f1, qtype="a"):
    return {"id": rid, "metadata": {"type": qtype}, "f1": f1, "em": f1, "acc": f1}


def test_ladder_table_exact_values():
    rows = {"standard RAG": [rec("q1", 0.0), rec("q2", 0.0), rec("q3", 1.0, "b")],
            "fixed action": [rec("q1", 1.0), rec("q2", 1.0), rec("q3", 1.0, "b")]}
    table = ladder_table(rows, n_boot=1000, n_perm=1000)
    assert table["all"]["standard RAG"] == {"n": 3, "em": 0.3333, "f1": 0.3333, "acc": 0.3333, "delta_f1": 0.0,
                                            "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}
    # Differences 1, 1, 0: exact bootstrap over 27 resamples spans 0..1; two non-zero signs -> p 2/4.
    assert table["all"]["fixed action"] == {"n": 3, "em": 1.0, "f1": 1.0, "acc": 1.0, "delta_f1": 0.6667,
                                            "ci_low": 0.0, "ci_high": 1.0, "p_value": 0.5}
    # Type "b" has one question: no per-type row; type "a" has two.
    assert list(table["by_type"]) == ["a"]
    assert table["by_type"]["a"]["fixed action"]["delta_f1"] == 1.0
    assert table["by_type"]["a"]["fixed action"]["p_value"] == 0.5
    # Paired: SD of (1, 1, 0) = sqrt(1/3); 2.801585 * 0.57735 / sqrt(3) = 0.9339.
    assert table["paired_mde_f1"] == {"fixed action": 0.9339}
    # Pilot: standard RAG's F1 SD sqrt(1/3), times sqrt(2): 2.801585 * 0.816497 / sqrt(3) = 1.3207.
    assert table["mde_f1"] == 1.3207


def test_ladder_table_counts_the_judges_verdicts_and_the_answers_each_row_changed():
    def judged(rid, f1, prediction, correct):
        return {**rec(rid, f1), "prediction": prediction, "correct": correct}

    base = [judged("q1", 0.0, "1850", False), judged("q2", 1.0, "1887", True), judged("q3", 1.0, "Aldor", True),
            judged("q4", 0.0, "x", False)]
    row = [judged("q1", 1.0, "1887", True), judged("q2", 0.0, "unknown", False), judged("q3", 1.0, " Aldor ", True),
           judged("q4", 0.5, "x y", False)]
    table = ladder_table({"standard RAG": base, "row": row}, n_boot=1000, n_perm=1000)
    out = table["all"]["row"]
    # Judged right: 2 of 4 before, 2 of 4 after (q1 gained, q2 lost): no change, a CI around 0.
    assert out["judge_acc"] == 0.5 and out["delta_judge_acc"] == 0.0
    assert out["delta_judge_acc_ci_low"] < 0 < out["delta_judge_acc_ci_high"]
    assert out["delta_judge_acc_p_value"] == 1.0
    # q1, q2 and q4 changed (q3 only by whitespace); q2 of them was right before.
    assert (out["corrected"], out["corrected_delta_f1"]) == (3, round((1.0 - 1.0 + 0.5) / 3, 4))
    assert (out["corrected_right"], out["corrected_right_delta_f1"]) == (1, -1.0)
    assert table["all"]["standard RAG"]["corrected"] == 0
    assert table["all"]["standard RAG"]["corrected_delta_f1"] is None
    # Records without the judge's verdict or the answer give the F1 columns only.
    assert "delta_judge_acc" not in ladder_table({"standard RAG": [rec("q1", 0.0), rec("q2", 1.0)],
                                                  "x": [rec("q1", 1.0), rec("q2", 1.0)]})["all"]["x"]


def test_ladder_records_carry_the_judges_verdict():
    run = [{"id": "q1", "golden_answers": ["1887"], "metadata": {"outdated_answers": ["1850"]},
            "predictions": ["1850 or 1887", "It was completed in 1887.", "1887"], "steps": []}]
    out = ladder_records({"RAG-Critic": run}, {"standard RAG": ("RAG-Critic", 0), "one": ("RAG-Critic", 1)},
                         judge_metric="truth")
    # The truth judge: asserting the superseded value beside the gold is wrong; the whole sentence is right.
    assert [out["standard RAG"][0]["correct"], out["one"][0]["correct"]] == [False, True]
    assert out["one"][0]["f1"] < 0.5  # an F1 judge would have called the right sentence wrong
    assert "correct" not in ladder_records({"RAG-Critic": run}, {"one": ("RAG-Critic", 1)})["one"][0]


def test_ladder_table_rejects_rows_on_other_questions():
    rows = {"standard RAG": [rec("q1", 0.0), rec("q2", 0.0)], "x": [rec("q2", 0.0), rec("q1", 0.0)]}
    with pytest.raises(ValueError, match="'x' does not cover the same questions"):
        ladder_table(rows)
    with pytest.raises(KeyError, match="baseline row"):
        ladder_table({"x": rows["x"]})


def test_ladder_records_picks_rounds():
    run = [{"id": "q1", "golden_answers": ["1887"], "predictions": ["1850", "1887", "1887"], "steps": []}]
    out = ladder_records({"RAG-Critic": run}, {"standard RAG": ("RAG-Critic", 0), "RAG-Critic (1 iter)": ("RAG-Critic", 1)})
    assert [r["f1"] for r in out["standard RAG"]] == [0.0]
    assert [r["f1"] for r in out["RAG-Critic (1 iter)"]] == [1.0]
    with pytest.raises(KeyError, match="no run named 'other'"):
        ladder_records({"RAG-Critic": run}, {"x": ("other", 1)})


def make_testbed_record(prediction, gold, passage_ids, *, answerable=True, supporting=("p9",)):
    return {"id": "q1", "question": "When was the Kestrel Bridge completed?", "golden_answers": [gold],
            "metadata": {"type": "temporal", "answerable": answerable, "knobs": {}, "supporting_ids": list(supporting)},
            "passages": [{"id": pid, "contents": PASSAGE, "score": 1.0} for pid in passage_ids],
            "prediction": prediction, "followed_prefix": True, "truncated": False}


def test_known_cause_critic_labels_from_causes():
    known = load_known_causes()
    critic = KnownCauseCritic(known)
    right = make_testbed_record("1887", "1887", ["p9"])
    unanswerable = make_testbed_record("1887", "insufficient information", ["p9"], answerable=False, supporting=())
    ok, bad = critic.critique([right, unanswerable])
    assert critic_feedback(ok)["judgement"] == "Correct"
    fb = critic_feedback(bad)
    causes = critic.causes(unanswerable)
    assert causes[0] == "unanswerable_answered"
    # Labels are the union over causes, in cause order.
    assert fb["tag1"][:2] == known["unanswerable_answered"]["tier1"]
    assert fb["tag2"][:2] == known["unanswerable_answered"]["tier2"]
    assert "Factual Inaccuracies" in fb["tag2"]
    assert fb["analysis"] == "Known causes: " + ", ".join(causes) + "."


def test_known_cause_critic_never_steers_an_answerable_question_to_abstain():
    from ragcritic_lib.agent.actions import UNSUPPORTED_LABELS

    critic = KnownCauseCritic(load_known_causes())
    # "1850 or so" occurs in no passage: the evidence calls it unsupported on either question.
    answerable = make_testbed_record("1850 or so", "1887", ["p9"])
    unanswerable = make_testbed_record("1850 or so", "insufficient information", ["p9"], answerable=False,
                                       supporting=())
    assert "unsupported_answer" not in critic.causes(answerable)
    assert critic.causes(answerable) == ["temporal_error"]  # the rest of the diagnosis stays
    fb_answerable, fb_unanswerable = (critic_feedback(p) for p in critic.critique([answerable, unanswerable]))
    assert not set(fb_answerable["tag2"]) & UNSUPPORTED_LABELS
    assert set(fb_unanswerable["tag2"]) & UNSUPPORTED_LABELS
    assert "unsupported_answer" in critic.causes(unanswerable)  # kept where abstaining is right
    # Nothing left after dropping: the generic cause stands in.
    only_unsupported = make_testbed_record("Velta", "Orun", ["p9"])
    assert critic.causes(only_unsupported) == ["wrong_answer"]
    # The dataset's own answerability flag decides over the wording of the reference ("Unknown"
    # is a real answer here, not an abstention).
    named_unknown = make_testbed_record("Velta", "Unknown", ["p9"])
    assert KnownCauseCritic.answerable(named_unknown) is True
    assert "unsupported_answer" not in critic.causes(named_unknown)
    no_flag = {k: v for k, v in only_unsupported.items() if k != "metadata"}
    assert KnownCauseCritic.answerable(no_flag) is True
    assert KnownCauseCritic.answerable(dict(no_flag, golden_answers=["insufficient information"])) is False
    assert KnownCauseCritic.answerable(dict(no_flag, golden_answers=[])) is None
    # The pilot's comparison row: every cause reported.
    assert "unsupported_answer" in KnownCauseCritic(load_known_causes(), answerable_aware=False).causes(answerable)


def test_known_cause_critic_diagnoses_on_the_source_record():
    source = make_testbed_record("1850", "1887", ["p9"])
    state = dict(source, passages=[{"id": "", "contents": PASSAGE, "score": 0.0}])
    with_source = KnownCauseCritic(load_known_causes(), source_records=[source])
    without = KnownCauseCritic(load_known_causes())
    # With the ids the supporting passage was retrieved; without them it looks missing.
    assert "supporting_not_retrieved" not in with_source.causes(state)
    assert "supporting_not_retrieved" in without.causes(state)
    # A later answer is diagnosed on the state itself.
    assert "supporting_not_retrieved" in with_source.causes(dict(state, prediction="1900"))


def test_fixed_action_is_one_program_and_flagged_degenerate():
    table = load_error_actions()
    planner = RuleBasedPlanner(table)
    parses = AlwaysErrorCritic().critique([{}, {}, {}])
    programs = {planner.program_for(critic_feedback(p))[0] for p in parses}
    assert [critic_feedback(p)["judgement"] for p in parses] == ["Error"] * 3
    assert programs == {planner.program_for({"judgement": "Error", "tag1": [table.default_tier1]})[0]}
    results = [{"steps": [{"program": "a"}]}, {"steps": [{"program": "a"}, {"program": "b"}]}, {"steps": []}]
    assert plan_shares(results) == {"plans": 3, "distinct": 2, "top_share": 0.6667, "degenerate": True}
    results[0]["steps"][0]["program"] = "c"
    assert plan_shares(results)["degenerate"] is False  # top share 1/3
    assert plan_shares([])["degenerate"] is False


def test_fixed_action_and_oracle_critique_through_the_workflow():
    from ragcritic_lib.agent.actions import ActionSet
    from ragcritic_lib.agent.workflow import run_methods
    from ragcritic_lib.llm import CallableLLM, GenParams

    corpus = {"d1": PASSAGE, "d2": "Aldor\nThe Aldor is a river in the northern lowlands.",
              "d3": "Velta\nThe Velta is a river that flows 640 km to the sea."}


    def generator(prompt, params):
        text = prompt[-1]["content"]
        if "Query:" in text:
            return "Kestrel Bridge completion year"
        if "Question: When was the Kestrel Bridge completed?" in text:
            return "So the final answer is: " + ("1887" if "completed in 1887" in text else "insufficient information")
        return ""

    def record(rid, question, gold, pid, prediction, qtype):
        return {"id": rid, "question": question, "golden_answers": [gold], "prediction": prediction,
                "metadata": {"type": qtype, "answerable": True, "knobs": {}, "supporting_ids": ["d1" if rid == "q1" else pid]},
                "passages": [{"id": pid, "contents": corpus[pid], "score": 1.0}], "followed_prefix": True, "truncated": False}

    recs = [record("q1", "When was the Kestrel Bridge completed?", "1887", "d2", "insufficient information", "temporal"),
            record("q2", "How long is the Velta?", "640 km", "d3", "640 km", "numerical")]
    table = load_error_actions()
    rule = RuleBasedPlanner(table)
    acts = ActionSet(CallableLLM(generator, name="gen"), WordOverlapRetriever(corpus), gen_params=GenParams(max_new_tokens=16),
                     topk=3, table=table)
    methods = {"fixed action": {"critic": AlwaysErrorCritic(), "planner": rule},
               "oracle critique": {"critic": KnownCauseCritic(load_known_causes(), source_records=recs), "planner": rule}}
    runs, _ = run_methods(recs, methods, actions=acts)
    # The oracle leaves the correct answer alone; the fixed action rewrites both (q2 keeps its answer
    # because the scripted generator returns nothing for it).
    assert [len(r["steps"][0].get("program") or "") > 0 for r in runs["oracle critique"]] == [True, False]
    assert [r["final_prediction"] for r in runs["fixed action"]] == ["1887", "640 km"]
    # An abstention on an answerable question whose supporting passage was not retrieved.
    assert runs["oracle critique"][0]["steps"][0]["critic"]["tag1"][:2] == ["Incomplete or Missing Response",
                                                                             "Incomplete Information"]
    assert runs["oracle critique"][0]["final_prediction"] == "1887"
    rows = ladder_records(runs, {"standard RAG": ("fixed action", 0), "fixed action": ("fixed action", 1),
                                 "oracle critique": ("oracle critique", 1)})
    table_ = ladder_table(rows, n_perm=100)
    assert {k: table_["all"][k]["delta_f1"] for k in rows} == {"standard RAG": 0.0, "fixed action": 0.5,
                                                              "oracle critique": 0.5}
    assert plan_shares(runs["fixed action"])["degenerate"] is True


def test_verdict_shares_flag_a_critic_with_one_verdict():
    from ragcritic_lib.agent.ladder import verdict_shares

    def rec(*verdicts):
        return {"steps": [{"iteration": i + 1, "critic": {"judgement": v}} for i, v in enumerate(verdicts)]}

    mixed = verdict_shares([rec("Error", "Correct"), rec("Correct"), rec(None)])
    assert mixed == {"counts": {"Error": 1, "Correct": 1, "unparsed": 1}, "error_share": 0.5, "degenerate": False}
    assert verdict_shares([rec("Error"), rec("Error", "Error")])["degenerate"] is True
    assert verdict_shares([rec("Error", "Correct"), rec("Error")], iteration=2)["degenerate"] is False  # one verdict seen
    assert verdict_shares([])["error_share"] is None


def test_verdict_quality_separates_the_judge_label_from_accuracy():
    from ragcritic_lib.agent.ladder import verdict_quality

    def rec(answer, margin, after=None, gold="Paris"):
        step = {"iteration": 1, "critic": {"margin": margin}, "answer_before": answer,
                "status": "corrected" if after is not None else "skipped_correct"}
        if after is not None:
            step["answer_after"] = after
        return {"golden_answers": [gold], "prediction": answer, "steps": [step]}

    rows = [
        rec("Paris", -2.0),                                              # right by both labels, left alone
        rec("The capital of France is the city of Paris", 2.0,          # right by accuracy only (F1 < 0.5) ...
            after="insufficient information"),                          # ... and the correction abstains
        rec("Lyon", 1.0, after="Paris"),                                 # wrong by both, fixed
        rec("Marseille", -1.0),                                          # wrong by both, missed
        {"golden_answers": ["x"], "prediction": "x", "steps": [{"iteration": 1, "critic": {}}]},  # no margin: skipped
    ]
    q = verdict_quality(rows, judge_metric="f1", judge_threshold=0.5, seed=0, n_boot=50)
    assert q["n"] == 4 and q["wrong_judge"] == 3 and q["wrong_acc"] == 2
    # judge label: wrong = {verbose, Lyon, Marseille} with margins {2, 1, -1} against right {-2}
    assert q["auroc_judge"] == 1.0
    # accuracy: wrong = {Lyon (1), Marseille (-1)} against right {Paris (-2), verbose (2)}: 2 of 4 pairs
    assert q["auroc_acc"] == 0.5
    assert (q["acted"], q["acted_right_judge"], q["acted_right_acc"], q["abstained_after"]) == (2, 0, 1, 1)
    assert q["delta_f1_acted_wrong_acc"] == 1.0 and q["delta_f1_acted_right_acc"] < 0
    assert len(q["auroc_judge_ci"]) == 2
    assert verdict_quality([rows[-1]], judge_metric="f1", judge_threshold=0.5) is None


# ------------------------------------------------------------------- acting threshold on dev
def test_fit_act_threshold_picks_the_margin_whose_corrections_pay():
    from ragcritic_lib.agent.ladder import fit_act_threshold

    # Corrections help the two answers the critic is surest about and hurt the others.
    margins = [2.0, 1.0, 0.0, -1.0]
    before, after = [0.0, 0.0, 1.0, 0.5], [1.0, 0.5, 0.0, 0.0]
    fit = fit_act_threshold(margins, before, after)
    assert fit["threshold"] == 0.5 and fit["acted"] == 2 and fit["acts"] is True
    assert (fit["f1_before"], fit["f1_at_threshold"], fit["f1_all"]) == (0.375, 0.75, 0.375)
    # When no correction ever helps, the critic acts on nothing (threshold +inf).
    none = fit_act_threshold(margins, [1.0] * 4, [0.0] * 4)
    assert none["threshold"] == float("inf") and none["acted"] == 0 and none["acts"] is False
    # A tie between acting on more and on fewer answers goes to fewer.
    tie = fit_act_threshold([1.0, 0.0], [0.0, 0.5], [1.0, 0.5])
    assert tie["threshold"] == 0.5 and tie["acted"] == 1
    # Everything helps: act on everything.
    assert fit_act_threshold([1.0, 0.0], [0.0, 0.0], [1.0, 1.0])["threshold"] == float("-inf")
    with pytest.raises(ValueError, match="2 margins, 1 F1 before"):
        fit_act_threshold([1.0, 0.0], [0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="at least one"):
        fit_act_threshold([], [], [])


class _AnswerAgain:
    """A planner stand-in: every critique gets the program that answers again from the same passages."""

    llm = None
    table = None

    def plan(self, contexts):
        from ragcritic_lib.agent.planner import Plan

        return [Plan(program='final_answer = GenerateAnswer(query=question, docs=docs)', raw="", source="rule")
                for _ in contexts]


class _RiverActions:
    llm = None

    def functions(self):
        return {"GenerateAnswer": lambda query, docs, **kw: {"q1": "Danube", "q2": "Seine"}[query]}


def _river_records(copies=1):
    """q1's answer is wrong and its correction right; q2's answer is right and its correction wrong
    (``copies`` of each pair, so that a dev difference can lie beyond its CI)."""
    out = []
    for c in range(copies):
        tail = "" if c == 0 else f".{c}"
        out += [{"id": f"1{tail}", "question": "q1", "golden_answers": ["Danube"], "prediction": "Rhine", "passages": []},
                {"id": f"2{tail}", "question": "q2", "golden_answers": ["Loire"], "prediction": "Loire", "passages": []}]
    return out


def test_fit_critic_act_threshold_corrects_every_dev_answer_once_and_restores_the_critic():
    from ragcritic_lib.agent.ladder import fit_critic_act_threshold
    from ragcritic_lib.critic.critics import ERROR, CriticParse

    class Margins:
        """A calibrated critic stand-in: fixed margins, judgement by its threshold."""
        llm = None

        def __init__(self, margins):
            self.margins, self.threshold, self.seen = margins, 0.7, []
            self.last_generations = []

        def critique(self, records):
            self.seen.append(self.threshold)
            return [CriticParse(judgement=ERROR if self.margins[r["question"]] > self.threshold else "Correct",
                                valid_json=True, margin=self.margins[r["question"]]) for r in records]

    critic = Margins({"q1": 1.5, "q2": -0.3})
    fit, runs = fit_critic_act_threshold(_river_records(), critic=critic, planner=_AnswerAgain(), actions=_RiverActions(),
                                         prefetch=False)
    assert critic.seen == [float("-inf")] and critic.threshold == 0.7  # every answer corrected; threshold restored
    assert [r["final_prediction"] for r in runs] == ["Danube", "Seine"]
    # On 2 answers the best threshold (0.6) cannot beat acting on none beyond its CI, so the fit acts
    # on none; that does no better than the calibrated threshold (0.7) either: the default stays.
    assert fit["best_threshold"] == pytest.approx(0.6) and fit["f1_at_best"] == 1.0
    assert fit["vs_none"]["delta"] == 0.5 and fit["vs_none"]["ci_low"] <= 0 and fit["vs_none"]["acts"] is False
    assert fit["fitted_threshold"] == float("inf") and fit["f1_at_fitted"] == 0.5
    assert fit["vs_default"]["delta"] == -0.5 and fit["vs_default"]["kept_default"] is True
    assert fit["threshold"] == 0.7 and fit["acted"] == 1 and fit["f1_at_threshold"] == 1.0 and fit["acts"] is True
    assert fit["calibrated_threshold"] == 0.7 and fit["f1_at_calibrated"] == 1.0 and fit["f1_before"] == 0.5
    # On 20 answers the same best threshold wins beyond its CI and is the fit's; it ties the calibrated one.
    fit, _ = fit_critic_act_threshold(_river_records(copies=10), critic=Margins({"q1": 1.5, "q2": -0.3}),
                                      planner=_AnswerAgain(), actions=_RiverActions(), prefetch=False)
    assert fit["vs_none"]["ci_low"] > 0 and fit["vs_none"]["acts"] is True
    assert fit["fitted_threshold"] == pytest.approx(0.6) and fit["vs_default"]["kept_default"] is True
    # q1's wrong answers lie below the calibrated threshold: on 20 dev answers acting on them wins beyond the CI.
    critic = Margins({"q1": 0.5, "q2": -0.3})
    fit, _ = fit_critic_act_threshold(_river_records(copies=10), critic=critic, planner=_AnswerAgain(),
                                      actions=_RiverActions(), prefetch=False)
    assert fit["threshold"] == pytest.approx(0.1) and fit["f1_at_threshold"] == 1.0 and fit["f1_at_calibrated"] == 0.5
    assert fit["vs_default"]["delta"] == 0.5 and fit["vs_default"]["ci_low"] > 0
    assert fit["vs_default"]["kept_default"] is False
    # The same difference on 2 answers is inside its CI: the calibrated threshold stays.
    small, _ = fit_critic_act_threshold(_river_records(), critic=critic, planner=_AnswerAgain(),
                                        actions=_RiverActions(), prefetch=False)
    assert small["vs_default"]["kept_default"] is True and small["threshold"] == 0.7 and small["acts"] is False


def test_dev_fit_acts_on_none_when_its_best_threshold_wins_by_one_answer():
    """One fixed answer among 40 is a gain the dev questions cannot tell from luck: the fit acts on
    none, and acting on none beats a calibrated threshold that breaks the 39 right answers."""
    from ragcritic_lib.agent.ladder import fit_critic_act_threshold
    from ragcritic_lib.critic.critics import ERROR, CriticParse

    recs = _river_records()[:1] + [{**_river_records()[1], "id": f"2.{c}"} for c in range(39)]
    margins = {"1": 2.0, **{f"2.{c}": -1.0 for c in range(39)}}

    class Critic:
        llm = None
        threshold = -2.0
        last_generations: list = []

        def critique(self, records):
            return [CriticParse(judgement=ERROR if margins[r["id"]] > self.threshold else "Correct",
                                valid_json=True, margin=margins[r["id"]]) for r in records]

    critic = Critic()
    fit, runs = fit_critic_act_threshold(recs, critic=critic, planner=_AnswerAgain(), actions=_RiverActions(),
                                         prefetch=False)
    assert critic.threshold == -2.0 and [r["final_prediction"] for r in runs[:2]] == ["Danube", "Seine"]
    assert fit["best_threshold"] == pytest.approx(0.5) and fit["f1_at_best"] == 1.0 and fit["f1_before"] == 0.975
    assert fit["vs_none"]["delta"] == 0.025 and fit["vs_none"]["ci_low"] == 0.0 and fit["vs_none"]["acts"] is False
    assert fit["fitted_threshold"] == float("inf") and fit["f1_at_calibrated"] == 0.025
    assert fit["vs_default"]["ci_low"] > 0 and fit["vs_default"]["kept_default"] is False
    assert fit["threshold"] == float("inf") and fit["acted"] == 0 and fit["acts"] is False


def _verify_fit(verify, later, copies=10):
    """Two dev answers: q1 (wrong) is fixed by its correction, q2 (right) is broken by it; the
    critic's margin for q2's new answer is ``later``."""
    from ragcritic_lib.agent.ladder import fit_critic_act_threshold
    from ragcritic_lib.critic.critics import ERROR, CriticParse

    margins = {"Rhine": 0.4, "Loire": 1.5, "Danube": -1.0, "Seine": later}

    class Critic:
        llm = None
        threshold = 0.7
        last_generations: list = []

        def critique(self, records):
            return [CriticParse(judgement=ERROR if margins[r["prediction"]] > self.threshold else "Correct",
                                valid_json=True, margin=margins[r["prediction"]]) for r in records]

        def verdict_margins(self, records):
            return [margins[r["prediction"]] for r in records]

    recs = _river_records(copies)
    critic, planner, actions = Critic(), _AnswerAgain(), _RiverActions()
    _verify_fit.last = (critic, planner, actions, recs)
    return fit_critic_act_threshold(recs, critic=critic, planner=planner, actions=actions, prefetch=False,
                                    verify=verify)


def test_dev_fit_chooses_verification_only_when_it_wins_on_dev_f1():
    # the wrong answer q1 has the lower margin, so no threshold acts on it without also breaking q2:
    # unverified, correcting nothing is best (0.5); the critic prefers q2's old answer, so with
    # verification correcting both pays (1.0)
    # (20 dev answers: every difference here lies beyond its CI)
    fit, runs = _verify_fit("dev_f1", later=1.9)
    assert fit["verify"] is True and fit["f1_at_threshold"] == 1.0 and fit["threshold"] == float("-inf")
    assert fit["fits"]["unverified"]["f1_at_threshold"] == 0.5 and fit["fits"]["unverified"]["acts"] is False
    assert fit["fits"]["verified"]["f1_at_threshold"] == 1.0 and fit["fits"]["verified"]["acted"] == 20
    assert fit["verify_vs_default"]["delta"] == 0.5 and fit["verify_vs_default"]["ci_low"] > 0
    assert runs[1]["steps"][0]["verification"] == {"margin_before": 1.5, "margin_after": 1.9, "kept": False}
    assert runs[0]["steps"][0]["verification"]["kept"] is True
    # the critic prefers q2's broken answer: verification changes nothing, and a tie keeps Algorithm 1 as written
    tie, _ = _verify_fit("dev_f1", later=-3.0)
    assert tie["verify"] is False and tie["f1_at_threshold"] == tie["fits"]["verified"]["f1_at_threshold"] == 0.5
    assert tie["verify_vs_default"] == {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "kept_default": True}
    # on 2 dev answers neither the fitted thresholds nor verification beat their defaults beyond the CI
    small, _ = _verify_fit("dev_f1", later=1.9, copies=1)
    assert small["verify"] is False and small["verify_vs_default"]["kept_default"] is True
    assert small["threshold"] == 0.7 and small["fits"]["unverified"]["vs_default"]["kept_default"] is True


def test_the_verified_dev_fit_is_what_a_verified_run_gives_at_its_threshold():
    """The property the dev choice rests on: the verified fit's F1 at its threshold is the mean F1
    of one verified round run at that threshold, with the critic as its own verifier (the
    critique's margin reused for the old answer)."""
    from ragcritic_lib.agent.workflow import CostMeter, run_correction, unverified_round
    from ragcritic_lib.evaluation.scoring import score_prediction

    fit, _ = _verify_fit("always", later=1.9)
    critic, planner, actions, recs = _verify_fit.last
    critic.threshold = fit["threshold"]
    meter = CostMeter()
    out = run_correction(recs, critic=critic, planner=planner, actions=actions, verifier=critic, prefetch=False,
                         meter=meter)
    f1 = sum(score_prediction(r["final_prediction"], r["golden_answers"])["f1"] for r in out) / len(out)
    assert f1 == pytest.approx(fit["f1_at_threshold"]) == 1.0
    assert [s["status"] for r in out for s in r["steps"]] == ["corrected", "not_verified"] * 10
    assert [r["final_prediction"] for r in unverified_round(out)] == ["Danube", "Seine"] * 10
    # read at the unverified fit's own threshold (+inf here: correcting nothing) instead
    own = fit["fits"]["unverified"]["threshold"]
    assert [r["final_prediction"] for r in unverified_round(out, threshold=own)] == ["Rhine", "Loire"] * 10
    # a threshold below the run's asks for corrections the run did not make
    critic.threshold = 1.0
    partial = run_correction(recs, critic=critic, planner=planner, actions=actions, verifier=critic, prefetch=False)
    with pytest.raises(ValueError, match="'1' has margin 0.4 above threshold 0.0 but the run did not correct it"):
        unverified_round(partial, threshold=0.0)
    # one scoring call per correction (20): the old answer's margin is the critique's
    assert meter.phases["critic"]["score_calls"] == 20


def test_dev_fit_verify_modes():
    never, _ = _verify_fit("never", later=1.9)
    assert never["verify"] is False and "fits" not in never and never["f1_at_threshold"] == 0.5
    always, runs = _verify_fit("always", later=-3.0)
    assert always["verify"] is True and runs[1]["steps"][0]["verification"]["kept"] is True
    with pytest.raises(ValueError, match="verify must be one of never | always | dev_f1"):
        _verify_fit("sometimes", later=0.0)


# ---------------------------------------------------------------------- the stage's metrics
def _result(rid, gold, qtype, predictions, steps):
    return {"id": rid, "golden_answers": [gold], "metadata": {"type": qtype}, "predictions": predictions,
            "final_prediction": predictions[-1], "steps": steps}


P1 = "d = Retrieval(query=question, topk=3)\nfinal_answer = GenerateAnswer(query=question, docs=docs + d)"
P2 = ("q = RewriteQuery(query=question, instruction='clarify')\n"
      "d2 = [RefineDoc(query=question, doc=x, instruction='refine') for x in Retrieval(query=q[0])]\n"
      "final_answer = GenerateAnswer(query=question, docs=d2)")


def _correction_inputs():
    from ragcritic_lib.agent.planner import LLMPlanner
    from ragcritic_lib.llm import CallableLLM
    from ragcritic_lib.critic.training import TrainResult

    rc = [_result("q1", "1887", "temporal", ["1850", "1887", "1887"], [
              {"iteration": 1, "status": "corrected", "program": P1, "critic": {"judgement": "Error"},
               "events": [{"action": "RetrieveDocuments"}, {"action": "RewriteQuery", "fallback": "keywords"}]},
              {"iteration": 2, "status": "rejected", "reason": "unsafe", "program": P2, "events": []}]),
          _result("q2", "640 km", "numerical", ["640 km", "640 km", "640 km"], [
              {"iteration": 1, "status": "skipped_correct", "critic": {"judgement": "Correct"}}])]
    fixed = [_result("q1", "1887", "temporal", ["1850", "1850"], [{"iteration": 1, "status": "no_program", "events": []}]),
             _result("q2", "640 km", "numerical", ["640 km", "12 km"], [
                 {"iteration": 1, "status": "corrected", "program": "P3", "events": [{"action": "GenerateAnswer"}]}])]
    runs = {"tb": {"RAG-Critic": rc, "fixed action": fixed}}
    planner = LLMPlanner(CallableLLM(lambda prompt, params: "", name="gen"), name="trained")
    planner.stats.update(plans=2, no_program=1)
    table = load_error_actions()
    methods = {"RAG-Critic": {"critic": None, "planner": planner},
               "fixed action": {"critic": AlwaysErrorCritic(), "planner": RuleBasedPlanner(table)}}
    ladders = {"tb": ladder_table(ladder_records(runs["tb"], {"standard RAG": ("RAG-Critic", 0),
                                                              "RAG-Critic (1 iter)": ("RAG-Critic", 1)}),
                                  n_boot=100, n_perm=100)}
    trained = TrainResult(adapter_dir="data/planner_data/planner_adapter", is_adapter=True, base_model="base", steps=24,
                          seconds=812.44, log_history=[{"loss": 1.0}], examples=160, recipe={"lr": 1e-4})
    costs = {"tb": {"RAG-Critic": {"critic": {"calls": 2.0, "wall_s": 1.5, "generated_calls": 2.0},
                                   "total": {"calls": 2.0, "wall_s_per_sample": 0.75, "generation_s": 0.2}}}}
    return dict(test_sets={"tb": [{"id": "q1"}, {"id": "q2"}]}, runs=runs, costs=costs, methods=methods,
                ladders=ladders, answer_recall={"tb": 0.5}, shares={"tb": {"RAG-Critic": plan_shares(rc)}},
                verdicts={"tb": {"counts": {"Error": 1, "Correct": 1}}}, degenerate=["critic:tb/x"],
                planner_run=trained, planner_sft_examples=160, critic_verdict="dev_f1", threshold=1.23456,
                act_fit={"threshold": float("-inf"), "acted": 2, "n": 2, "f1_all": 0.5, "acts": True},
                planner_decoding="constrained")


def test_correction_metrics_gathers_the_stage_metrics_exactly():
    from ragcritic_lib.agent.ladder import correction_metrics

    inputs = _correction_inputs()
    m = correction_metrics(**inputs)
    assert list(m) == ["n_questions", "comparison", "by_type", "iterations", "cost", "status", "rejections",
                       "action_usage", "program_calls", "planner_training", "planner_sft_examples", "critic_verdict", "planner_decoding",
                       "planner_stats", "plan_shares", "verdict_shares", "ladder", "degenerate"]
    assert m["n_questions"] == {"tb": 2}
    # Round 0 of the first method is standard RAG; "12 km" against "640 km" has token F1 0.5.
    assert m["comparison"] == {"tb": {
        "standard RAG": {"em": 0.5, "f1": 0.5, "acc": 0.5, "n": 2},
        "RAG-Critic (1 iter)": {"em": 1.0, "f1": 1.0, "acc": 1.0, "n": 2},
        "RAG-Critic (2 iter)": {"em": 1.0, "f1": 1.0, "acc": 1.0, "n": 2},
        "fixed action": {"em": 0.0, "f1": 0.25, "acc": 0.0, "n": 2}}}
    assert [(r["method"], r["group"], r["f1"]) for r in m["by_type"]["tb"]] == [
        ("standard RAG", "numerical", 1.0), ("standard RAG", "temporal", 0.0),
        ("RAG-Critic (1 iter)", "numerical", 1.0), ("RAG-Critic (1 iter)", "temporal", 1.0),
        ("RAG-Critic (2 iter)", "numerical", 1.0), ("RAG-Critic (2 iter)", "temporal", 1.0),
        ("fixed action", "numerical", 0.5), ("fixed action", "temporal", 0.0)]
    assert m["iterations"] == {"tb": {"iter0": {"em": 0.5, "f1": 0.5, "acc": 0.5, "n": 2},
                                      "iter1": {"em": 1.0, "f1": 1.0, "acc": 1.0, "n": 2},
                                      "iter2": {"em": 1.0, "f1": 1.0, "acc": 1.0, "n": 2}}}
    # Wall times and this run's generated calls stay out of the file.
    assert m["cost"] == {"tb": {"RAG-Critic": {"critic": {"calls": 2.0}, "total": {"calls": 2.0}}}}
    assert m["status"] == {"tb": {"RAG-Critic": {"iter1": {"corrected": 1, "skipped_correct": 1}, "iter2": {"rejected": 1}},
                                  "fixed action": {"iter1": {"corrected": 1, "no_program": 1}}}}
    assert m["rejections"] == {"tb": {"RAG-Critic": {"rejected:unsafe": 1}, "fixed action": {"no_program:no_program": 1}}}
    assert m["action_usage"] == {"tb": {
        "RAG-Critic": {"RetrieveDocuments": 1, "RewriteQuery": 1, "RewriteQuery.fallback:keywords": 1},
        "fixed action": {"GenerateAnswer": 1}}}
    # Calls written in the programs of both rounds (a rejected program counts: it was written),
    # the comprehension's RefineDoc once; "P3" is no program text.
    assert m["program_calls"] == {"tb": {
        "RAG-Critic": {"Retrieval": 2, "RewriteQuery": 1, "DecomposeQuery": 0, "RefineDoc": 1},
        "fixed action": {"Retrieval": 0, "RewriteQuery": 0, "DecomposeQuery": 0, "RefineDoc": 0}}}
    # The training record without its log, recipe and per-step timing; the wall time to 0.1 s.
    assert m["planner_training"] == {"adapter_dir": "data/planner_data/planner_adapter", "is_adapter": True,
                                     "base_model": "base", "steps": 24, "examples": 160, "dropped_too_long": 0,
                                     "device": "cpu", "seconds": 812.4}
    assert m["planner_sft_examples"] == 160 and m["planner_decoding"] == "constrained"
    assert m["critic_verdict"] == {"mode": "dev_f1", "threshold": 1.2346, "verify": False, "verify_mode": "never", "dev_fit": {
        "threshold": None, "acted": 2, "n": 2, "f1_all": 0.5, "acts": True}}
    # Only the LLM planners report statistics (the rule-based one has none to give).
    assert m["planner_stats"] == {"trained": {"plans": 2, "no_program": 1}}
    assert m["plan_shares"] == inputs["shares"] and m["verdict_shares"] == inputs["verdicts"]
    ladder = inputs["ladders"]["tb"]
    assert m["ladder"] == {"tb": ladder["all"], "tb_by_type": ladder["by_type"], "tb_mde_f1": ladder["mde_f1"],
                           "tb_paired_mde_f1": ladder["paired_mde_f1"], "tb_answer_recall": 0.5}
    assert m["degenerate"] == ["critic:tb/x"]
    from ragcritic_lib.pipeline.metrics_schema import problems

    assert problems("08_correction", m) == []  # what write_stage_metrics checks before writing


def test_correction_metrics_without_a_dev_fit_or_a_finite_threshold():
    from ragcritic_lib.agent.ladder import correction_metrics

    m = correction_metrics(**{**_correction_inputs(), "critic_verdict": "calibrated", "threshold": float("inf"),
                              "act_fit": None})
    assert m["critic_verdict"] == {"mode": "calibrated", "threshold": None, "verify": False, "verify_mode": "never"}
