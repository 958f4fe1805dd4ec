"""RePAIR: plan grammar, execution with the restricted executor, rewards, pairs, inference."""

from __future__ import annotations

import pytest

from ragcritic_lib.agent.actions import (
    AUX_ACTIONS,
    ActionSet,
    action_stubs,
    count_action_calls,
)
from ragcritic_lib.agent.executor import validate_program
from ragcritic_lib.baselines import repair
from ragcritic_lib.llm import CallableLLM, GenParams
from ragcritic_lib.retrieval import Hit

REC = {"id": "q1", "question": "Which river flows through Vienna?", "golden_answers": ["Danube"],
       "metadata": {"dataset": "testbed"},
       "passages": [{"id": "p", "contents": "Paris\nParis lies on the Seine.", "score": 1.0}],
       "prediction": "Rhine", "raw_output": "I think Rhine.\nSo the final answer is: Rhine", "em": 0.0,
       "correct": False}
GOOD_PLAN = "found = Retrieval(query=question, topk=1)\nfinal_answer = GenerateAnswer(query=question, docs=found)"


class FakeRetriever:
    def search(self, queries, k):
        return [[Hit("d1", 1.0, "Vienna\nThe Danube flows through Vienna.")][:k] for _ in queries]


def model(prompt, params):
    system, last = prompt[0]["content"], prompt[-1]["content"]
    if system.startswith("You improve the output"):
        if "probably right" in last:
            return "no plan today"
        return f"```python\n{GOOD_PLAN}\n```\nDone."
    if system.startswith("You rewrite"):
        return "river Vienna Austria"
    if system.startswith("You split"):
        return "What river is in Vienna?\nWhich river is in Austria?"
    return "So the final answer is: Danube" if "Danube" in last else "So the final answer is: Rhine"


@pytest.fixture()
def llm():
    return CallableLLM(model)


@pytest.fixture()
def actions(llm):
    return ActionSet(llm, FakeRetriever(), gen_params=GenParams(max_new_tokens=16), topk=1)


def test_grammar_plans_are_valid_programs():
    grammar = repair.plan_grammar()
    assert [n for n, _ in grammar][:4] == ["regenerate", "retrieve_deeper", "clarify_retrieve", "refine_docs"]
    assert "topk=10" in grammar[1][1] and "topk=7" in repair.plan_grammar(deep_topk=7)[1][1]
    for _, src in grammar:
        validate_program(src, action_stubs(), variables=["question", "docs", "prediction"])
    used = count_action_calls([src for _, src in grammar])
    assert all(used[a] > 0 for a in AUX_ACTIONS)


def test_preference_pairs_by_reward_and_margin():
    c = [{"plan": "a", "reward": 0.2}, {"plan": "b", "reward": 1.0}, {"plan": "c", "reward": 0.0},
         {"plan": " b ", "reward": 1.0}]
    # The duplicate of "b" is dropped; best first, paired with the worst first.
    assert repair.build_preference_pairs(c, margin=0.5) == [(1, 2), (1, 0)]
    assert repair.build_preference_pairs(c, margin=0.0) == [(1, 2), (1, 0), (0, 2)]
    assert repair.build_preference_pairs(c, margin=0.2) == [(1, 2), (1, 0), (0, 2)]  # 0.2 - 0.0 >= 0.2
    assert repair.build_preference_pairs(c, margin=0.0, max_pairs=1) == [(1, 2)]
    ties = [{"plan": "x", "reward": 0.5}, {"plan": "y", "reward": 0.5}]
    assert repair.build_preference_pairs(ties) == []


def test_execute_plans_and_rewards(actions):
    variables = repair.planner_variables(REC)
    assert variables == {"question": REC["question"], "docs": ["Paris\nParis lies on the Seine."],
                         "prediction": "Rhine"}
    jobs = [(src, variables) for _, src in repair.plan_grammar(topk=1)[:2]] + [("import os\nfinal_answer = 'x'", variables)]
    res = repair.execute_plans(jobs, actions)
    assert [(r["answer"], r["ok"], r["error"]) for r in res] == [
        ("Rhine", True, None), ("Danube", True, None), (None, False, "import")]
    assert res[1]["n_calls"] == 2 and [t["call"] for t in res[1]["trace"]] == ["Retrieval", "GenerateAnswer"]
    assert [repair.plan_reward(r["answer"], REC) for r in res] == [0.0, 1.0, 0.0]
    assert repair.plan_reward(None, dict(REC, prediction="the Danube")) == 1.0


def test_off_policy_preferences(actions, llm):
    correct = dict(REC, id="q2", em=1.0, correct=True, prediction="Danube")
    pairs, log = repair.collect_preferences([REC, correct], actions, phase="off", n_grammar=2, planner=llm,
                                            n_sampled=1, temperature=0.7)
    # Only the failed record is a training state; the sampled plan equals no grammar plan.
    assert {row["qid"] for row in log} == {"q1"}
    assert [(row["source"], row["reward"]) for row in log] == [
        ("grammar:regenerate", 0.0), ("grammar:retrieve_deeper", 1.0), ("sampled", 1.0)]
    # Both retrieving plans beat regenerating; the tie between them gives no pair.
    assert [(p["chosen_reward"], p["rejected_reward"]) for p in pairs] == [(1.0, 0.0), (1.0, 0.0)]
    assert "Retrieval(query=question, topk=10)" in pairs[0]["chosen"] and pairs[1]["chosen"] == GOOD_PLAN
    assert pairs[0]["rejected"] == pairs[1]["rejected"] == repair.plan_grammar()[0][1]
    user = pairs[0]["prompt"][-1]["content"]
    assert "Check: the previous answer is wrong." in user and "Reasoning behind the previous answer: I think Rhine." in user
    assert repair.dpo_rows(pairs[:1]) == [{"prompt": pairs[0]["prompt"], "chosen": pairs[0]["chosen"],
                                           "rejected": pairs[0]["rejected"]}]


def test_on_policy_state_has_only_the_judge(actions, llm):
    with pytest.raises(ValueError, match="judged_correct"):
        repair.collect_preferences([REC], actions, phase="on")
    pairs, log = repair.collect_preferences([REC], actions, phase="on", judged_correct=[False], planner=llm,
                                            n_grammar=0, n_sampled=2, temperature=0.7)
    assert [row["source"] for row in log] == ["sampled"] and pairs == []  # one distinct plan: no pair
    msgs = repair.build_planner_messages(REC, correct=False)
    assert "A judge thinks the previous answer is probably wrong." in msgs[-1]["content"]
    assert "Reasoning" not in msgs[-1]["content"] and "Danube" not in msgs[-1]["content"]


def test_inference_executes_plan_or_keeps_answer(actions, llm):
    out = repair.repair_infer(llm, [REC, dict(REC, id="q3")], actions, judged_correct=[False, True])
    assert (out[0]["prediction"], out[0]["repair_ok"], out[0]["repair_plan"]) == ("Danube", True, GOOD_PLAN)
    # The planner writes no program for the second state: the previous answer stays.
    assert (out[1]["prediction"], out[1]["repair_ok"], out[1]["repair_error"]) == ("Rhine", False, "no_program")
    skipped = repair.repair_infer(llm, [REC], actions, judged_correct=[True], skip_judged_correct=True)
    assert (skipped[0]["prediction"], skipped[0]["repair_error"]) == ("Rhine", "skipped")


def test_action_calls_are_counted_per_program_text():
    progs = [GOOD_PLAN, "q = RewriteQuery(query=question, instruction='clarify')\n"
                        "d2 = [RefineDoc(query=question, doc=d, instruction='refine') for d in Retrieval(query=q[0])]\n"
                        "final_answer = GenerateAnswer(query=question, docs=d2)", None, ""]
    counts = count_action_calls(progs)
    assert counts == {"Retrieval": 2, "RewriteQuery": 1, "DecomposeQuery": 0, "RefineDoc": 1}
    assert list(counts) == list(AUX_ACTIONS)
    assert count_action_calls(progs, include_generate=True)["GenerateAnswer"] == 2
    assert count_action_calls(["x = MyRetrieval(query=question)"]) == dict.fromkeys(AUX_ACTIONS, 0)


def test_repair_summary_flags_untrained_phases_and_no_executed_plan(actions, llm):
    out = repair.repair_infer(llm, [REC, dict(REC, id="q3")], actions, judged_correct=[False, True])
    s = repair.repair_summary([{"chosen": "a"}], [{"chosen": "b"}], out)
    assert (s["plans"], s["executed"], s["executed_rate"], s["errors"]) == (2, 1, 0.5, {"ok": 1, "no_program": 1})
    assert s["degenerate"] == []
    failed = repair.repair_infer(llm, [dict(REC, id="q3")], actions, judged_correct=[True])
    bad = repair.repair_summary([], [{"chosen": "b"}], failed)
    assert bad["degenerate"] == [
        "repair: no off-policy preference pairs, so the off-policy DPO phase did not train the planner",
        "repair: none of the 1 test plans executed; every answer is standard RAG's"]


# ------------------------------------------------------------------- constrained decoding
def _prefers(index: int):
    """A planner whose log-probabilities favour option ``index`` of whatever it is offered."""
    return lambda prompt, opts: [0.0 if k == index else -5.0 for k in range(len(opts))]


def test_constrained_inference_always_runs_one_of_the_grammar_plans(actions):
    programs = repair.grammar_programs(3, topk=1)
    # A planner that writes no program at all: free decoding keeps the old answer ...
    silent = CallableLLM(lambda p, g: "no plan today")
    free = repair.repair_infer(silent, [REC], actions, judged_correct=[False])
    assert (free[0]["prediction"], free[0]["repair_error"]) == ("Rhine", "no_program")
    # ... constrained decoding can only write one of the candidate programs, so a plan always runs.
    nearest = CallableLLM(lambda p, g: programs[1])  # the fallback choice reads the nearest option
    out = repair.repair_infer(nearest, [REC], actions, judged_correct=[False], decoding="constrained",
                              programs=programs)
    assert out[0]["repair_plan"] == programs[1] and out[0]["repair_ok"] is True
    assert out[0]["prediction"] == "Danube"  # retrieve_deeper finds the Danube passage
    with pytest.raises(ValueError, match="candidate programs"):
        repair.repair_infer(nearest, [REC], actions, judged_correct=[False], decoding="constrained")
    with pytest.raises(ValueError, match="repair.decoding"):
        repair.repair_infer(nearest, [REC], actions, judged_correct=[False], decoding="beam")


def test_grammar_programs_bounds():
    assert repair.grammar_programs(2, topk=4) == [src for _, src in repair.plan_grammar(topk=4)[:2]]
    for bad in (0, len(repair.plan_grammar()) + 1):
        with pytest.raises(ValueError, match="repair.grammar_plans"):
            repair.grammar_programs(bad)


def test_sampling_from_scores_is_seeded_distinct_and_follows_the_policy():
    lps = [[0.0, -1.0, -2.0, -30.0]] * 200
    draws = repair.sample_from_scores(lps, n=2, temperature=1.0, seed=3)
    assert draws == repair.sample_from_scores(lps, n=2, temperature=1.0, seed=3)
    assert all(len(set(d)) == 2 for d in draws)
    firsts = [d[0] for d in draws]
    # softmax(0, -1, -2, -30): about 0.67, 0.24, 0.09, 0; the improbable option is never drawn first.
    assert 0.55 < firsts.count(0) / 200 < 0.8 and firsts.count(3) == 0
    assert repair.sample_from_scores([[-3.0, -1.0, -2.0]], n=2, temperature=0.0, seed=0) == [[1]]
    assert repair.sample_from_scores([[0.0]], n=3, temperature=1.0, seed=0) == [[0]]


def test_on_policy_constrained_draws_come_from_the_planner_scores(actions):
    programs = repair.grammar_programs(3, topk=1)
    planner = CallableLLM(lambda p, g: "unused", score_fn=_prefers(1))
    pairs, log = repair.collect_preferences([REC], actions, phase="on", judged_correct=[False], planner=planner,
                                            n_grammar=0, n_sampled=2, temperature=0.05, decoding="constrained",
                                            programs=programs)
    plans = [row["plan"] for row in log]
    assert plans[0] == programs[1] and len(plans) == 2 and set(plans) <= set(programs)
    assert all(row["source"] == "sampled" for row in log)
    with pytest.raises(ValueError, match="candidate programs"):
        repair.collect_preferences([REC], actions, phase="on", judged_correct=[False], planner=planner,
                                   n_grammar=0, n_sampled=2, decoding="constrained")


def test_params_and_library_name_the_same_decodings():
    from ragcritic_lib.pipeline.params import REPAIR_DECODINGS

    assert set(REPAIR_DECODINGS) == set(repair.DECODINGS)


def test_params_and_library_name_the_same_prompt_forms():
    from ragcritic_lib.pipeline.params import REPAIR_PROMPTS

    assert set(REPAIR_PROMPTS) == set(repair.PROMPTS)


def test_compact_prompt_keeps_the_state_and_lists_every_function_on_one_line():
    full = repair.build_planner_messages(REC, correct=False, reasoning="because", oracle=True, example=False)
    compact = repair.build_planner_messages(REC, correct=False, reasoning="because", oracle=True, example=False,
                                            prompt="compact")
    assert compact[-1] == full[-1]  # the state (question, passages, answer, check, reasoning) is the same
    assert len(compact[0]["content"]) < len(full[0]["content"]) - 200
    for fn in ("Retrieval(", "RewriteQuery(", "DecomposeQuery(", "RefineDoc(", "GenerateAnswer("):
        assert fn in compact[0]["content"]
    with pytest.raises(ValueError, match="repair.prompt"):
        repair.build_planner_messages(REC, correct=False, prompt="tiny")


def test_every_planner_prompt_of_a_run_takes_its_form(actions):
    class Planner:
        def __init__(self):
            self.seen = []

        def choose(self, prompts, options, desc=""):
            self.seen += prompts
            return [type("C", (), {"text": o[0]})() for o in options]

    planner, programs = Planner(), repair.grammar_programs(2)
    pairs, _ = repair.collect_preferences([REC], actions, phase="off", n_grammar=2, decoding="constrained",
                                          programs=programs, prompt="compact")
    repair.repair_infer(planner, [REC], actions, judged_correct=[False], decoding="constrained",
                        programs=programs, prompt="compact")
    compact = repair.build_planner_messages(REC, correct=False, example=False, prompt="compact")[0]
    assert pairs and all(p["prompt"][0] == compact for p in pairs)
    assert planner.seen and all(m[0] == compact for m in planner.seen)


def test_constrained_prompts_carry_no_worked_example(actions):
    programs = repair.grammar_programs(3, topk=1)
    with_example = repair.build_planner_messages(REC, correct=False)
    without = repair.build_planner_messages(REC, correct=False, example=False)
    assert [m["role"] for m in with_example] == ["system", "user", "assistant", "user"]
    assert [m["role"] for m in without] == ["system", "user"] and without[-1] == with_example[-1]
    seen = []

    def record_prompts(prompt, opts):
        seen.append(prompt)
        return [0.0] + [-5.0] * (len(opts) - 1)

    planner = CallableLLM(lambda p, g: programs[0], score_fn=record_prompts)
    repair.repair_infer(planner, [REC], actions, judged_correct=[False], decoding="constrained", programs=programs)
    repair.collect_preferences([REC], actions, phase="on", judged_correct=[False], planner=planner, n_grammar=0,
                               n_sampled=2, decoding="constrained", programs=programs)
    assert seen and all(not any(m["role"] == "assistant" for m in p) for p in seen)
    # Free decoding keeps the example: it is how the planner learns the program format.
    written = []
    free_planner = CallableLLM(lambda p, g: written.append(p) or programs[0])
    repair.repair_infer(free_planner, [REC], actions, judged_correct=[False])
    assert written and written[0][2] == {"role": "assistant", "content": with_example[2]["content"]}


def test_repair_training_sums_both_dpo_rounds():
    from ragcritic_lib.critic.training import TrainResult

    off = TrainResult("out/planner_off", True, "base", steps=17, seconds=300.04, examples=68)
    on = TrainResult("out/planner", True, "base", steps=6, seconds=33.8, examples=21)
    block = repair.repair_training({"calls": 569, "prompt_tokens": 10}, offpolicy_seconds=141.84, dpo_seconds=428.3,
                                   offpolicy_result=off, onpolicy_result=on,
                                   offpolicy_candidates=[{"dataset": "t", "qid": q} for q in "aabbc"],
                                   onpolicy_candidates=[{"dataset": "t", "qid": q} for q in "abcd"],
                                   offpolicy_pairs=[{"dataset": "t", "qid": "a"}, {"dataset": "t", "qid": "a"}],
                                   onpolicy_pairs=[])
    assert block == {"calls": 569, "seconds": 570.1, "dpo_steps": [17, 6],
                     "what": "train answers, executed candidate plans (the held-out dev states' included) and two DPO rounds",
                     "optimizer_seconds": 333.8,
                     "offpolicy_states": 3, "onpolicy_states": 4, "offpolicy_states_with_pair": 1,
                     "onpolicy_states_with_pair": 0}


def test_plan_rewards_give_each_plans_mean_and_the_per_state_ceiling():
    def cand(q, src, r):
        return {"dataset": "t", "qid": q, "source": f"grammar:{src}", "reward": r}

    cands = [cand("a", "x", 1.0), cand("a", "y", 0.0), cand("b", "x", 0.0), cand("b", "y", 0.5),
             cand("c", "x", 0.2), cand("c", "y", 0.2)]
    out = repair.plan_rewards(cands)
    assert out == {"states": 3, "by_plan": {"grammar:x": 0.4, "grammar:y": 0.2333}, "best_single": "grammar:x",
                   "best_single_reward": 0.4, "per_state_best_reward": round((1.0 + 0.5 + 0.2) / 3, 4),
                   "tied_states": 1}
    assert repair.plan_rewards([]) is None
    assert repair.plan_rewards([{"dataset": "t", "qid": "a"}]) is None  # unscored candidates are not counted
    block = repair.repair_training({"calls": 0}, offpolicy_seconds=0.0, dpo_seconds=0.0, offpolicy_result=None,
                                   onpolicy_result=None, offpolicy_candidates=cands)
    assert block["offpolicy_rewards"] == out


def test_repair_training_without_dpo_rounds():
    from ragcritic_lib.critic.training import TrainResult

    on = TrainResult("out/planner", True, "base", steps=2, seconds=1.26, examples=3)
    block = repair.repair_training({"calls": 0}, offpolicy_seconds=0.0, dpo_seconds=0.04,
                                   offpolicy_result=None, onpolicy_result=on)
    assert (block["calls"], block["seconds"], block["dpo_steps"], block["optimizer_seconds"]) == (0, 0.0, [0, 2], 1.3)
    none = repair.repair_training({"calls": 0}, offpolicy_seconds=0.0, dpo_seconds=0.0,
                                  offpolicy_result=None, onpolicy_result=None)
    assert (none["dpo_steps"], none["optimizer_seconds"]) == ([0, 0], 0)


def test_repair_info_adds_pair_counts_and_planner_start_after_the_summary():
    summary = repair.repair_summary([{"p": 1}], [], [{"repair_ok": True, "repair_error": None}])
    calls = {"Retrieval": 0, "RefineDoc": 1}
    info = repair.repair_info(summary, offpolicy_pairs=[1, 2, 3], onpolicy_pairs=[],
                              planner_start={"base_model": "base", "init_adapter": None}, action_calls=calls)
    assert info == {"repair": {**summary, "offpolicy_pairs": 3, "onpolicy_pairs": 0, "planner_start": "base model"},
                    "action_calls": calls}
    assert list(info) == ["repair", "action_calls"]
    assert list(info["repair"]) == [*summary, "planner_start"]  # the pair counts replace the summary's in place
    adapter = repair.repair_info({}, offpolicy_pairs=[], onpolicy_pairs=[],
                                 planner_start={"base_model": "base", "init_adapter": "data/correction/planner"},
                                 action_calls={}, test_plans={"executed": 0})
    assert adapter == {"repair": {"offpolicy_pairs": 0, "onpolicy_pairs": 0, "planner_start": "adapter"},
                       "action_calls": {}, "test": {"executed": 0}}

    class Meter:
        def __init__(self, calls):
            self.calls = calls

        def cost(self):
            return {"calls": self.calls}

    dev = {"start": {"chosen_reward": 0.1}, "offpolicy": None, "final": {"chosen_reward": 0.2}}
    with_dev = repair.repair_info({}, offpolicy_pairs=[], onpolicy_pairs=[], planner_start={"init_adapter": None},
                                  action_calls={}, dev=dev, dev_questions=30, dev_meters=[Meter(24), Meter(24)])
    assert with_dev["dev"] == {**dev, "questions": 30, "calls": 48, "changed_picks": {}}


def test_plan_shares_of_the_executed_test_plans():
    out = repair.plan_shares(["a =  1", "a = 1", "b = 2", "a = 1"])
    assert out == {"executed": 4, "distinct": 2, "top_share": 0.75, "plan_shares": {"a = 1": 0.75, "b = 2": 0.25}}
    empty = repair.plan_shares([])
    assert (empty["executed"], empty["distinct"], empty["plan_shares"]) == (0, 0, {})
    assert empty["top_share"] != empty["top_share"]   # nan: no plan ran


def test_balance_chosen_caps_the_plan_that_wins_everywhere():
    from ragcritic_lib.baselines.repair import balance_chosen

    def pairs(counts):
        return [{"chosen": plan, "rejected": "x", "qid": f"{plan}{i}"} for plan, n in counts.items() for i in range(n)]

    many = pairs({"A": 10, "B": 4, "C": 3, "D": 2})
    kept = balance_chosen(many, max_share=0.4, seed=0)
    counts = {p: sum(1 for x in kept if x["chosen"] == p) for p in "ABCD"}
    # cap c = 6: 6 <= 0.4 * (6 + 4 + 3 + 2) = 6; c = 7 would need 7 <= 6.4
    assert counts == {"A": 6, "B": 4, "C": 3, "D": 2}
    assert [x["qid"] for x in kept] == [x["qid"] for x in many if x in kept]  # input order kept
    assert balance_chosen(many, max_share=0.4, seed=0) == kept  # seeded
    assert balance_chosen(many, max_share=1.0) == many
    # two winners cannot meet 40%: the top one is cut to the next one's count
    two = balance_chosen(pairs({"A": 10, "B": 3}), max_share=0.4)
    assert sorted(x["chosen"] for x in two) == ["A"] * 3 + ["B"] * 3
    # whitespace does not make another plan
    spaced = balance_chosen([{"chosen": "a  =  1", "rejected": "x"}, {"chosen": "a = 1", "rejected": "y"},
                             {"chosen": "b = 2", "rejected": "x"}], max_share=0.5)
    assert len(spaced) == 2
    with pytest.raises(ValueError, match="max_share"):
        balance_chosen(many, max_share=0.0)


def test_dev_choice_scores_the_planners_picks_by_the_rewards_already_executed(actions):
    programs = repair.grammar_programs(3, topk=1)
    rec2 = {**REC, "id": "q2"}
    _, log = repair.collect_preferences([REC, rec2], actions, phase="off", n_grammar=3, n_sampled=0, topk=1)
    by_state = {(c["qid"], c["plan"]): c["reward"] for c in log}
    assert len(log) == 6 and by_state[("q1", programs[1])] == 1.0  # retrieve_deeper finds the Danube passage
    seen = []

    def pick_second(prompt, params):  # greedy choice reads the option nearest to what the model writes
        seen.append(prompt)
        return programs[1]

    planner = CallableLLM(pick_second)
    # a record with no executed candidates (answered right, so not a failed state) is passed over
    right = {**REC, "id": "q3", "correct": True, "prediction": "Danube"}
    dev = repair.dev_choice(planner, [REC, rec2, right], log, judged_correct=[False, False, True], programs=programs)
    assert (dev["states"], dev["chosen_reward"], dev["top_share"]) == (2, 1.0, 1.0)
    assert dev["picks"] == {"grammar:retrieve_deeper": 2}
    assert dev["best_single"] == "grammar:retrieve_deeper" and dev["per_state_best_reward"] == 1.0
    assert seen and all(not any(m["role"] == "assistant" for m in p) for p in seen)  # one prompt: the same state twice
    test_time = repair.build_planner_messages(REC, correct=False, example=False)
    assert seen[0] == test_time  # the prompt repair_infer gives the planner: no reasoning, no oracle wording
    assert repair.dev_choice(planner, [REC], [], judged_correct=[False], programs=programs) is None
    with pytest.raises(ValueError, match="1 judge flags for 2 records"):
        repair.dev_choice(planner, [REC, rec2], log, judged_correct=[False], programs=programs)


def test_the_replay_benchmark_rebuilds_the_stage_s_offpolicy_pairs(actions):
    from script_modules import load_script

    bench = load_script("benchmarks/bench_repair_replay.py")
    other = dict(REC, id="q2", question="Which river flows through Budapest?", golden_answers=["Danube"])
    programs = repair.grammar_programs(8)
    pairs, log = repair.collect_preferences([REC, other], actions, phase="off", n_grammar=8, decoding="constrained",
                                            programs=programs, prompt="compact", max_pairs=2)
    balanced = repair.balance_chosen(pairs, max_share=0.6, seed=3)
    replayed = bench.offpolicy_pairs([REC, other], log, prompt="compact", margin=0.0, max_pairs=2, max_share=0.6,
                                     seed=3)
    assert balanced and [(p["prompt"], p["chosen"], p["rejected"]) for p in balanced] == \
        [(p["prompt"], p["chosen"], p["rejected"]) for p in replayed]


def test_the_decoding_benchmark_reads_rewards_and_prompts_as_the_stage_does(actions):
    from script_modules import load_script

    bench = load_script("benchmarks/bench_repair_decoding.py")
    programs = repair.grammar_programs(3, topk=1)
    rec2 = {**REC, "id": "q2", "judged_correct": True}
    _, log = repair.collect_preferences([REC], actions, phase="off", n_grammar=3, n_sampled=0, topk=1)
    spaced = dict(log[1], plan=log[1]["plan"].replace(" = ", "  =  "))  # whitespace does not split a plan
    table = bench.reward_table([log[0], spaced, log[2], dict(log[0], qid="q2", reward=None)])
    assert set(table) == {("testbed", "q1")}  # an unscored candidate is no state
    assert table[("testbed", "q1")][" ".join(programs[1].split())] == 1.0  # retrieve_deeper finds the Danube
    recs, prompts = bench.state_prompts([REC, rec2], table, prompt="compact")
    assert [r["id"] for r in recs] == ["q1"]  # a state without executed plans is left out
    assert prompts == [repair.build_planner_messages(REC, correct=False, example=False, prompt="compact")]
    # the stage's calibration states keep their judge flag, as the stage's prior read them
    assert bench.calibration_prompts([REC, rec2], prompt="compact") == [
        repair.build_planner_messages(REC, correct=False, example=False, prompt="compact"),
        repair.build_planner_messages(rec2, correct=True, example=False, prompt="compact")]


# ------------------------------------------------------------------- calibrated decoding
def test_plan_prior_is_each_programs_mean_log_prob_over_the_test_time_prompts():
    programs = repair.grammar_programs(3, topk=1)
    seen = []

    def score(prompt, opts):
        seen.append(prompt)
        return [-4.0, -6.0, -7.0] if "Budapest" in prompt[-1]["content"] else [-2.0, -4.0, -9.0]

    planner = CallableLLM(lambda p, g: "unused", score_fn=score)
    rec2 = {**REC, "id": "q2", "question": "Which river flows through Budapest?"}
    prior = repair.plan_prior(planner, [REC, rec2], judged_correct=[False, False], programs=programs, prompt="compact")
    assert prior == pytest.approx([-3.0, -5.0, -8.0])
    # the prompt the planner sees at test time: the judge's estimate, no reasoning, no worked example
    assert seen[0] == repair.build_planner_messages(REC, correct=False, example=False, prompt="compact")
    with pytest.raises(ValueError, match="calibration state"):
        repair.plan_prior(planner, [], judged_correct=[], programs=programs)
    with pytest.raises(ValueError, match="1 judge flags for 2 calibration states"):
        repair.plan_prior(planner, [REC, rec2], judged_correct=[False], programs=programs)


def test_calibrated_pick_takes_the_plan_prior_out_and_breaks_ties_by_order():
    programs = repair.grammar_programs(3, topk=1)
    # Plan 0 is the most probable on every state; state "B" raises plan 2 above its usual level.
    planner = CallableLLM(lambda p, g: "unused", score_fn=lambda prompt, opts: (
        [-1.0, -4.0, -4.0] if "Budapest" in prompt[-1]["content"] else [-1.0, -4.0, -8.0]))
    a = repair.build_planner_messages(REC, correct=False, example=False)
    b = repair.build_planner_messages({**REC, "question": "Which river flows through Budapest?"}, correct=False,
                                      example=False)
    prior = [-1.0, -4.0, -8.0]
    assert repair.pick_plans(planner, [a, b], programs, decoding="calibrated", prior=prior) == [programs[0], programs[2]]
    # uncalibrated sequence scores would give plan 0 everywhere; equal calibrated scores go to the first plan
    assert repair.pick_plans(planner, [a], programs, decoding="calibrated", prior=[0.0, 0.0, 0.0]) == [programs[0]]
    assert repair.pick_plans(planner, [], programs, decoding="calibrated", prior=prior) == []
    with pytest.raises(ValueError, match="one prior value per program"):
        repair.pick_plans(planner, [a], programs, decoding="calibrated", prior=[0.0])
    with pytest.raises(ValueError, match="decoding must be one of"):
        repair.pick_plans(planner, [a], programs, decoding="free")
    with pytest.raises(ValueError, match="candidate programs"):
        repair.pick_plans(planner, [a], [], decoding="constrained")


def test_calibrated_inference_and_dev_choice_run_the_calibrated_pick(actions):
    programs = repair.grammar_programs(3, topk=1)
    # The raw scores favour plan 0 (regenerate, which keeps the wrong Rhine); against the prior,
    # plan 1 (retrieve_deeper, which finds the Danube) stands out on this state.
    planner = CallableLLM(lambda p, g: programs[0], score_fn=lambda prompt, opts: [-1.0, -2.0, -6.0])
    prior = [-1.0, -5.0, -6.0]
    out = repair.repair_infer(planner, [REC], actions, judged_correct=[False], decoding="calibrated",
                              programs=programs, prior=prior)
    assert out[0]["repair_plan"] == programs[1] and out[0]["prediction"] == "Danube"
    greedy = repair.repair_infer(planner, [REC], actions, judged_correct=[False], decoding="constrained",
                                 programs=programs)
    assert greedy[0]["repair_plan"] == programs[0]  # the trie rule follows what the model writes
    with pytest.raises(ValueError, match="one prior value per program"):
        repair.repair_infer(planner, [REC], actions, judged_correct=[False], decoding="calibrated", programs=programs)
    _, log = repair.collect_preferences([REC], actions, phase="off", n_grammar=3, n_sampled=0, topk=1)
    dev = repair.dev_choice(planner, [REC], log, judged_correct=[False], programs=programs, decoding="calibrated",
                            prior=prior)
    assert dev["picks"] == {"grammar:retrieve_deeper": 1} and dev["chosen_reward"] == 1.0
    # on-policy draws under calibrated decoding come from the planner's own (uncalibrated) distribution
    _, on_log = repair.collect_preferences([REC], actions, phase="on", judged_correct=[False], planner=planner,
                                           n_grammar=0, n_sampled=1, temperature=0.0, decoding="calibrated",
                                           programs=programs)
    assert [c["plan"] for c in on_log] == [programs[0]]


def test_the_replay_benchmark_keeps_the_same_k_plans_of_each_state():
    from script_modules import load_script

    bench = load_script("benchmarks/bench_repair_replay.py")
    cands = [{"dataset": "d", "qid": q, "plan": f"plan {i}", "reward": i / 10} for q in ("q1", "q2") for i in range(8)]
    cands.append({"dataset": "d", "qid": "q1", "plan": "plan  3", "reward": 0.3})  # the same plan again, spaced
    kept = bench.keep_plans(cands, 4, seed=7)
    for q in ("q1", "q2"):
        plans = {" ".join(c["plan"].split()) for c in kept if c["qid"] == q}
        assert len(plans) == 4
    assert kept == bench.keep_plans(cands, 4, seed=7)  # seeded per state
    assert [c for c in kept if c["qid"] == "q1" and c["plan"] in ("plan 3", "plan  3")] in ([], cands[3:4] + cands[-1:])
    assert bench.keep_plans(cands, 0, seed=7) == cands and bench.keep_plans(cands, 20, seed=7) == cands


def test_offpolicy_states_execute_a_seeded_draw_of_the_grammar_plans(actions):
    records = [dict(REC, id=f"q{i}") for i in range(6)]
    programs = repair.grammar_programs(8, topk=1)
    _, every = repair.collect_preferences(records, actions, phase="off", n_grammar=8, topk=1, seed=5)
    pairs, log = repair.collect_preferences(records, actions, phase="off", n_grammar=8, plans_per_state=3, topk=1,
                                            seed=5, max_pairs=1)
    by_state: dict[str, list[str]] = {}
    for c in log:
        by_state.setdefault(c["qid"], []).append(c["plan"])
    assert len(every) == 48 and sorted(by_state) == [f"q{i}" for i in range(6)]
    for qid, plans in by_state.items():
        assert len(plans) == 3 and set(plans) <= set(programs)
        # the stage's draw: the same plans for the same state and seed, in the grammar's order
        drawn = repair.draw_state_plans(programs, 3, seed=5, dataset="testbed", qid=qid)
        assert {repair._norm_plan(p) for p in plans} == drawn
        assert plans == [p for p in programs if repair._norm_plan(p) in drawn]
        # each kept plan earns what it earns when every plan runs
        assert {c["plan"]: c["reward"] for c in log if c["qid"] == qid} == \
            {c["plan"]: c["reward"] for c in every if c["qid"] == qid and c["plan"] in plans}
    assert len({tuple(p) for p in by_state.values()}) > 1  # the draw depends on the state
    assert len(pairs) <= 6  # max_pairs=1: one pair a state at most
    _, again = repair.collect_preferences(records, actions, phase="off", n_grammar=8, plans_per_state=3, topk=1,
                                          seed=5)
    assert [c["plan"] for c in again] == [c["plan"] for c in log]
    _, other_seed = repair.collect_preferences(records, actions, phase="off", n_grammar=8, plans_per_state=3, topk=1,
                                               seed=6)
    assert [c["plan"] for c in other_seed] != [c["plan"] for c in log]


def test_draw_state_plans_keeps_all_when_k_covers_them():
    plans = ["a = 1", "b  = 2", "c = 3"]
    assert repair.draw_state_plans(plans, 0, seed=1, dataset="d", qid="q") == {"a = 1", "b = 2", "c = 3"}
    assert repair.draw_state_plans(plans, 5, seed=1, dataset="d", qid="q") == {"a = 1", "b = 2", "c = 3"}
    two = repair.draw_state_plans(plans, 2, seed=1, dataset="d", qid="q")
    assert len(two) == 2 and two == repair.draw_state_plans(list(reversed(plans)), 2, seed=1, dataset="d", qid="q")


def test_dev_pick_changes_and_the_unmoved_training_line():
    start = {"state_picks": ["grammar:a", "grammar:b", "grammar:a"]}
    same = {"state_picks": ["grammar:a", "grammar:b", "grammar:a"]}
    moved = {"state_picks": ["grammar:a", "grammar:c", "grammar:c"]}
    assert repair.dev_pick_changes({"start": start, "offpolicy": moved, "final": same}) == {"offpolicy": 2, "final": 0}
    line = repair.unmoved_picks_line({"start": start, "offpolicy": moved, "final": same})
    assert line is not None and "all 3 held-out dev states" in line
    assert repair.unmoved_picks_line({"start": start, "final": moved}) is None
    assert repair.unmoved_picks_line({"start": None, "final": same}) is None  # no dev scores: nothing to say
    assert repair.dev_pick_changes({"start": start, "offpolicy": None}) == {}


def test_dev_choice_lists_each_states_pick_in_record_order(actions):
    programs = repair.grammar_programs(3, topk=1)
    rec2 = {**REC, "id": "q2"}
    _, log = repair.collect_preferences([REC, rec2], actions, phase="off", n_grammar=3, n_sampled=0, topk=1)
    planner = CallableLLM(lambda p, g: programs[1] if p[-1]["content"].count("q2") == 0 else programs[0])
    dev = repair.dev_choice(planner, [REC, rec2], log, judged_correct=[False, False], programs=programs)
    assert len(dev["state_picks"]) == 2 and all(s.startswith("grammar:") for s in dev["state_picks"])
    assert sum(dev["picks"].values()) == 2 and set(dev["state_picks"]) == set(dev["picks"])


class _Backend:
    """A scoring backend with the prefix option, recording its setting at each call."""

    def __init__(self):
        self.share_prompt_prefix = False
        self.seen: list[bool] = []

    def score(self, prompts, options, desc=None):
        self.seen.append(self.share_prompt_prefix)
        return [[-float(j) for j in range(len(o))] for o in options]


class _Wrapper:
    def __init__(self, llm):
        self.llm = llm

    def score(self, prompts, options, desc=None):
        return self.llm.score(prompts, options, desc=desc)


def test_plan_scoring_shares_the_prompt_prefix_only_inside_the_call():
    backend = _Backend()
    planner = _Wrapper(backend)
    programs = repair.grammar_programs(3)
    prompts = [repair.build_planner_messages(REC, correct=False, example=False, prompt="compact")] * 2
    prior = repair.plan_prior(planner, [REC, REC], judged_correct=[False, False], programs=programs, prompt="compact")
    picks = repair.pick_plans(planner, prompts, programs, decoding="calibrated", prior=prior)
    drawn = repair.sample_grammar_plans(planner, prompts, programs, n=2, seed=1)
    assert backend.seen == [True, True, True] and backend.share_prompt_prefix is False  # on for the call, then back
    assert picks == [programs[0]] * 2 and all(len(d) == 2 for d in drawn)
    plain = CallableLLM(model)  # a backend without the option is used as it is
    with repair.shared_prompt_prefix(plain) as same:
        assert same is plain and not hasattr(plain, "share_prompt_prefix")
    backend.share_prompt_prefix = True  # a backend already sharing keeps sharing after the block
    with repair.shared_prompt_prefix(planner):
        pass
    assert backend.share_prompt_prefix is True
