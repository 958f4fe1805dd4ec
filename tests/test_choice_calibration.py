"""Scoring and constrained choice of the LLM interface, the calibrated critic verdict and the
planner's constrained decoding."""

from __future__ import annotations

import json
import math

import pytest

from ragcritic_lib.critic.critics import (
    CORRECT,
    ERROR,
    ERROR_PREFILL,
    VERDICT_PREFIX,
    LLMCritic,
    calibrate_verdicts,
    fit_verdict_threshold,
    load_verdict_threshold,
)
from ragcritic_lib.io import DataFormatError
from ragcritic_lib.llm import CallableLLM, GenParams, nearest_option
from ragcritic_lib.mining.taxonomy import load_taxonomy

from test_llm import _write_tiny_model


# ---------------------------------------------------------------------------------------------
# Base interface with the deterministic backend
# ---------------------------------------------------------------------------------------------
def test_nearest_option_prefers_closest_and_first_on_ties():
    opts = ["new_docs = docs", "more = Retrieval(query=question, topk=3)", "new_docs = docs"]
    assert nearest_option("more = Retrieval(query=question, topk=5)", opts) == 1
    assert nearest_option("new_docs = docs", opts) == 0
    assert nearest_option("", ["a", "b"]) == 0


def test_choose_without_constrained_decoding_matches_free_text():
    llm = CallableLLM(lambda p, g: "final_answer = GenerateAnswer(query=question, docs=dcs)")
    opts = ["x = 1", "final_answer = GenerateAnswer(query=question, docs=docs)"]
    (choice,) = llm.choose(["prompt"], [opts])
    assert choice.index == 1 and choice.text == opts[1]
    assert choice.constrained is False and "dcs" in choice.raw


def test_choose_validates_options():
    llm = CallableLLM(lambda p, g: "a")
    with pytest.raises(ValueError, match="option lists"):
        llm.choose(["p", "q"], [["a"]])
    with pytest.raises(ValueError, match=r"options\[0\]"):
        llm.choose(["p"], [[]])
    with pytest.raises(ValueError, match=r"options\[0\]"):
        llm.choose(["p"], ["ab"])


def test_score_needs_a_scoring_backend_and_is_cached(tmp_path):
    from ragcritic_lib.llm.cache import LLMCache

    with pytest.raises(NotImplementedError, match="cannot score"):
        CallableLLM(lambda p, g: "x").score(["p"], [["a", "b"]])
    calls = []

    def score_fn(prompt, options):
        calls.append(prompt)
        return [-float(len(o)) for o in options]

    llm = CallableLLM(lambda p, g: "x", score_fn=score_fn, cache=LLMCache(tmp_path))
    assert llm.score(["p", "p", "q"], [["a", "bb"], ["a", "bb"], ["ccc"]]) == [[-1.0, -2.0], [-1.0, -2.0], [-3.0]]
    assert len(calls) == 2  # the duplicate prompt is scored once
    again = CallableLLM(lambda p, g: "x", score_fn=score_fn, cache=LLMCache(tmp_path))
    assert again.score(["q"], [["ccc"]]) == [[-3.0]] and len(calls) == 2
    assert again.stats.cached_calls == 1


# ---------------------------------------------------------------------------------------------
# transformers backend on a tiny random model
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from ragcritic_lib.llm import HFBackend

    return HFBackend(_write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama"), dtype="float32",
                     device="cpu", batch_size=2)


def _manual_logprob(tiny, prompt, option):
    import torch

    p = tiny.encode(tiny.render(prompt))
    o = tiny._option_ids(option)
    with torch.no_grad():
        lp = torch.log_softmax(tiny.hf_model(torch.tensor([p + o])).logits[0].float(), -1)
    return sum(float(lp[len(p) - 1 + k, t]) for k, t in enumerate(o))


def test_hf_score_matches_a_manual_forward_pass(tiny):
    prompt = [{"role": "user", "content": "capital?"}, {"role": "assistant", "content": "So the"}]
    single = [" final", " answer"]
    multi = [" final answer is: Paris", " capital of France", "yes"]
    assert all(len(tiny._option_ids(o)) == 1 for o in single)
    got = tiny.score([prompt, prompt], [single, multi])
    for opts, scores in zip([single, multi], got):
        for o, s in zip(opts, scores):
            assert s == pytest.approx(_manual_logprob(tiny, prompt, o), abs=1e-4)
            assert s < 0


def test_hf_score_encodes_the_prompt_once_and_feeds_each_batch_only_its_options(tiny, monkeypatch):
    # Five options of different lengths at batch size 2: one pass over the prompt, then one pass
    # a batch of options over its cache (three batches), each no wider than its longest option.
    prompt = [{"role": "user", "content": "Which city is the capital of France, and why is it known?"}]
    options = [" Paris", " Paris, on the Seine", " the city of Lyon", " Marseille", " it is not stated in the text"]
    n_prompt = len(tiny.encode(tiny.render(prompt)))
    widths = []
    model = tiny.hf_model
    real = model.forward

    def counting(*args, **kwargs):
        widths.append(int(kwargs["input_ids"].shape[1]) if "input_ids" in kwargs else int(args[0].shape[1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    (got,) = tiny.score([prompt], [options])
    lengths = [len(tiny._option_ids(o)) for o in options]
    assert widths == [n_prompt] + [max(lengths[i : i + 2]) - 1 for i in range(0, 5, 2)]
    monkeypatch.setattr(model, "forward", real)
    for o, s in zip(options, got):
        assert s == pytest.approx(_manual_logprob(tiny, prompt, o), abs=1e-4)


def test_hf_choose_always_returns_one_option_and_follows_greedy_trie(tiny):
    import torch

    prompts = [[{"role": "user", "content": "The capital of France is"}], "So the final answer is", "Paris"]
    options = [["Paris.", "yes, no.", "The capital"], ["yes", "no", "yes, no."], ["no"]]
    choices = tiny.choose(prompts, options)
    for opts, ch in zip(options, choices):
        assert ch.constrained and ch.text == opts[ch.index]
        assert ch.completion_tokens == len(tiny._option_ids(ch.text)) + 1  # + the end token
    assert choices[2].index == 0
    # First step of the trie: the chosen option starts with the best-scoring allowed first token.
    p = tiny.encode(tiny.render(prompts[0]))
    with torch.no_grad():
        logits = tiny.hf_model(torch.tensor([p])).logits[0, -1]
    firsts = {tiny._option_ids(o)[0] for o in options[0]}
    best = max(firsts, key=lambda t: float(logits[t]))
    assert tiny._option_ids(choices[0].text)[0] == best
    # Batched (batch_size=2 over 3 prompts) equals one at a time.
    assert [c.index for c in choices] == [tiny.choose([p], [o])[0].index for p, o in zip(prompts, options)]


def _greedy_trie_reference(llm, prompt, options):
    """Token-by-token greedy decoding over the options' trie, each step a full forward pass
    without a cache: what the choice must equal."""
    import torch

    end = int(llm.tokenizer.eos_token_id)
    seqs = {tuple(llm._option_ids(o)) + (end,): k for k, o in reversed(list(enumerate(options)))}
    ids, path = llm.encode(llm.render(prompt)), []
    while not path or path[-1] != end:
        allowed = sorted({s[len(path)] for s in seqs if s[: len(path)] == tuple(path)})
        with torch.no_grad():
            logits = llm.hf_model(torch.tensor([ids + path])).logits[0, -1]
        path.append(max(allowed, key=lambda t: (float(logits[t]), -t)))
    return seqs[tuple(path)]


def test_hf_choose_takes_the_greedy_path_through_branches_and_forced_runs(tiny):
    # Options that share long prefixes, branch late, end inside one another and differ in
    # length, in batches of two rows whose forced runs differ: the jumps over forced runs must
    # land where a token-by-token greedy decode lands.
    table = ["new_docs = Retrieval(query=question, topk=3)\nanswer = GenerateAnswer(question, new_docs)",
             "new_docs = Retrieval(query=question, topk=5)\nanswer = GenerateAnswer(question, new_docs)",
             "new_docs = Retrieval(query=question, topk=5)",
             "answer = GenerateAnswer(question, docs)",
             "answer = GenerateAnswer(question, RefineDoc(question, docs))"]
    prompts = ["Plan a fix for the answer.", [{"role": "user", "content": "The answer misses a date."}],
               "Which program?", "Retrieval", "x"]
    options = [table, table[::-1], table[:3], table[2:], [table[0], table[3]]]
    got = [c.index for c in tiny.choose(prompts, options)]
    assert got == [_greedy_trie_reference(tiny, p, o) for p, o in zip(prompts, options)]


def test_hf_choice_prefill_computes_next_token_logits_at_the_last_position_only(tiny):
    # The prompt's other positions need no logits: the head runs over one position per row in the
    # prefill, and the choice is the one a full-width prefill gives.
    forward, widths = tiny.hf_model.forward, []

    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        widths.append((kwargs["input_ids"].shape[1], out.logits.shape[1]))
        return out

    options = [["Paris.", "yes, no.", "The capital"]] * 2
    prompts = ["Name the largest city of Italy:", "Pick the reply that fits best:"]  # asked nowhere else: no cache hit
    tiny.hf_model.forward = spy
    try:
        got = [c.index for c in tiny.choose(prompts, options)]
    finally:
        tiny.hf_model.forward = forward
    prompt_width, logit_width = widths[0]
    assert prompt_width > 1 and logit_width == 1
    assert got == [_greedy_trie_reference(tiny, p, o) for p, o in zip(prompts, options)]


# ---------------------------------------------------------------------------------------------
# Calibrated critic verdicts
# ---------------------------------------------------------------------------------------------
def test_fit_verdict_threshold_separable_and_degenerate():
    rep = fit_verdict_threshold([-3.0, -2.5, -1.0, -0.5], [False, False, True, True])
    assert rep["fitted"] and -2.5 < rep["threshold"] < -1.0
    assert rep["avg_acc"] == 1.0 and rep["auroc"] == 1.0
    assert rep["argmax_error_acc"] == 0.0 and rep["argmax_correct_acc"] == 1.0  # all margins < 0
    one_class = fit_verdict_threshold([-1.0, 2.0], [True, True])
    assert not one_class["fitted"] and one_class["threshold"] == 0.0 and one_class["auroc"] is None
    json.dumps(one_class)  # no NaN in what gets written
    with pytest.raises(ValueError):
        fit_verdict_threshold([0.0], [True, False])


def test_fit_verdict_threshold_prefers_threshold_near_zero_on_ties():
    rep = fit_verdict_threshold([-5.0, 5.0], [False, True])
    assert rep["threshold"] == 0.0 and rep["avg_acc"] == 1.0


def _record(i, prediction):
    return {"id": f"r{i}", "question": f"Question {i}?", "passages": ["T\nSome passage."], "prediction": prediction}


def test_calibrated_critic_scores_verdicts_and_generates_error_critiques_only():
    taxonomy = load_taxonomy()
    tier1 = taxonomy.tier1[0]
    prompts_seen = []

    def fn(prompt, params):
        prompts_seen.append(prompt)
        assert prompt[-1] == {"role": "assistant", "content": ERROR_PREFILL}
        return f' ["{tier1}"], "tag2": [], "tag3": ["x"], "Error_analysis": "wrong"}}'

    def score_fn(prompt, options):
        assert options == [CORRECT, ERROR] and prompt[-1]["content"] == VERDICT_PREFIX
        margin = 1.0 if "bad" in prompt[-2]["content"] else -2.0
        return [0.0, margin]  # log P(Correct) = 0, log P(Error) = margin

    llm = CallableLLM(fn, score_fn=score_fn)
    critic = LLMCritic(llm, taxonomy, "trained", verdict="calibrated", threshold=-1.0)
    recs = [_record(0, "a bad answer"), _record(1, "fine"), _record(2, "bad again")]
    out = critic.critique(recs)
    assert [p.judgement for p in out] == [ERROR, CORRECT, ERROR]
    assert [p.margin for p in out] == [1.0, -2.0, 1.0]
    assert out[0].tag1 == [tier1] and out[0].analysis == "wrong"
    assert len(prompts_seen) == 2  # nothing generated for the Correct verdict
    critic.threshold = 2.0
    assert [p.judgement for p in critic.critique(recs)] == [CORRECT] * 3
    assert critic.verdict_margins(recs) == [1.0, -2.0, 1.0]
    with pytest.raises(ValueError, match="verdict mode"):
        LLMCritic(llm, taxonomy, "trained", verdict="vote")


def test_critique_errors_always_writes_an_error_critique():
    taxonomy = load_taxonomy()
    llm = CallableLLM(lambda p, g: ' [], "tag2": [], "Error_analysis": "x"}')
    critic = LLMCritic(llm, taxonomy, "trained")
    (parsed,) = critic.critique_errors([_record(0, "anything")])
    assert parsed.judgement == ERROR and parsed.analysis == "x"


def test_calibrate_verdicts_reads_gold_judgements_and_threshold_file(tmp_path):
    taxonomy = load_taxonomy()
    llm = CallableLLM(lambda p, g: "", score_fn=lambda p, o: [0.0, 0.5 if "bad" in p[-2]["content"] else -0.5])
    critic = LLMCritic(llm, taxonomy, "trained", verdict="calibrated")
    recs = [{**_record(0, "bad"), "judgement": "Error"}, {**_record(1, "good"), "judgement": "Correct"}]
    rep = calibrate_verdicts(critic, recs)
    assert rep["fitted"] and rep["avg_acc"] == 1.0 and rep["n"] == 2
    path = tmp_path / "verdict_calibration.json"
    path.write_text(json.dumps(rep))
    assert load_verdict_threshold(path) == rep["threshold"]
    with pytest.raises(DataFormatError, match="judgement"):
        calibrate_verdicts(critic, [_record(3, "x")])
    path.write_text("{}")
    with pytest.raises(DataFormatError, match="threshold"):
        load_verdict_threshold(path)
    with pytest.raises(FileNotFoundError, match="verdict calibration"):
        load_verdict_threshold(tmp_path / "missing.json")


def test_calibrated_critic_on_the_tiny_model_is_consistent_with_its_margins(tmp_path):
    pytest.importorskip("torch")
    from ragcritic_lib.llm import HFBackend

    tiny = HFBackend(_write_tiny_model(tmp_path / "m"), dtype="float32", device="cpu", batch_size=2)
    taxonomy = load_taxonomy()
    recs = [_record(i, p) for i, p in enumerate(["Paris", "yes", "no"])]
    margins = LLMCritic(tiny, taxonomy, "trained", verdict="calibrated").verdict_margins(recs)
    assert all(math.isfinite(m) for m in margins)
    mid = sorted(margins)[1]
    critic = LLMCritic(tiny, taxonomy, "trained", verdict="calibrated", threshold=mid, max_new_tokens=4)
    judged = [p.judgement for p in critic.critique(recs)]
    assert judged == [ERROR if m > mid else CORRECT for m in margins]
    assert GenParams(max_new_tokens=4)  # the critique budget is the critic's own
