"""Pool files, resumable sampling (including a really killed run), judging and summaries."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragcritic_lib import paths
from ragcritic_lib.io import DataFormatError, read_jsonl_tolerant
from ragcritic_lib.llm import CallableLLM
from ragcritic_lib.mining.sampling import (
    PoolMember, attach_rationales, is_correct, judge_records, load_pool, pool_from_dict, pool_summary,
    record_key, sample_error_responses, source_statistics, split_pools,
)
from ragcritic_lib.mining.teachers import GroundedTeacher, LLMTeacher

# A fake retriever and a deterministic "model", shared by the in-process tests and by the
# subprocess that gets killed (which imports them from this module).


class FakeRetriever:
    name = "fake"

    def search(self, queries, k):
        from ragcritic_lib.retrieval import Hit

        return [[Hit(f"d{len(q) % 7}-{i}", 1.0 / (i + 1), f"Title {i}\nAbout {q}") for i in range(k)]
                for q in queries]


def answer(prompt, params, delay=0.0):
    time.sleep(delay)
    question = prompt[-1]["content"].rsplit("Question: ", 1)[-1]
    n = int(question.split()[-1].rstrip("?"))
    return f"Reasoning. So the final answer is: answer {n % 3}"


def make_records(n):
    return [{"id": f"q{i}", "question": f"What is item {i}?", "golden_answers": ["answer 0"],
             "metadata": {"dataset": "toy"}} for i in range(n)]


def make_pool():
    return [PoolMember(name="m-greedy", llm={"backend": "hf", "model": "fake"}, top_k=2),
            PoolMember(name="m-k1", llm={"backend": "hf", "model": "fake"}, top_k=1, prompt_variant="terse")]


def _factory(counter=None, delay=0.0):
    def fn(prompt, params):
        if counter is not None:
            counter.append(1)
        return answer(prompt, params, delay)
    return lambda cfg: CallableLLM(fn, name=cfg["model"])


def _check_complete(path, n_questions, members):
    rows = read_jsonl_tolerant(path)
    keys = [record_key(r) for r in rows]
    assert len(keys) == len(set(keys)), "duplicated records"
    assert set(keys) == {("toy", f"q{i}", m) for i in range(n_questions) for m in members}
    for r in rows:
        n = int(r["id"][1:])
        assert r["prediction"] == f"answer {n % 3}" and r["followed_prefix"] is True
    return rows


# -- pool files -----------------------------------------------------------------------------------


def test_repository_pool_files_load():
    base = {"backend": "hf", "model": "data/assets/models/smollm2-135m-instruct", "dtype": "bfloat16"}
    emb = load_pool(paths.CONFIGS_DIR / "pools" / "embedded.yaml", base_llm=base)
    assert len(emb) >= 4 and len({m.name for m in emb}) == len(emb)
    assert {m.retriever.get("kind") for m in emb} >= {"bm25", "dense", "hybrid"}
    assert any(m.temperature > 0 for m in emb) and any(m.top_k == 1 for m in emb)
    assert all(m.llm["backend"] == "hf" and m.model_label == "smollm2-135m-instruct" for m in emb)
    paper = paths.CONFIGS_DIR / "pools" / "paper_vllm.yaml"
    members = load_pool(paper, check_placeholders=False)
    assert len(members) == 18 and all(m.llm["backend"] == "openai" for m in members)
    with pytest.raises(DataFormatError, match="USER_TO_FILL"):
        load_pool(paper)


HF = {"backend": "hf", "model": "m"}


@pytest.mark.parametrize("raw, message", [
    ({"members": []}, "non-empty 'members'"),
    ({"members": [{"name": "a", "llm": {"model": "m"}, "topk": 3}]}, "unknown key 'topk'"),
    ({"members": [{"name": "a", "llm": HF}, {"name": "a", "llm": HF}]}, "duplicate name"),
    ({"members": [{"name": "a"}]}, "llm.model is missing"),
    ({"members": [{"name": "a", "llm": {"model": "m"}, "prompt_variant": "fancy"}]}, "prompt_variant"),
    ({"members": [{"name": "a", "llm": HF, "top_k": 0}]}, "top_k"),
    ({"members": [{"name": "a", "llm": HF, "retriever": {"kind": "magic"}}]}, "retriever"),
    ({"members": [{"name": "a", "llm": {"model": "m"}}], "extra": 1}, "unknown top-level key"),
    # The llm block is checked as load_llm reads it, before any member samples.
    ({"members": [{"name": "a", "llm": {**HF, "url": "http://x"}}]}, r"member 'a': llm: unknown key\(s\) \['url'\]"),
    ({"members": [{"name": "a", "llm": {"model": "m"}}]}, r"member 'a': llm key 'backend'"),
    ({"members": [{"name": "a", "llm": "Qwen/Qwen2.5-7B"}]}, r"members\[0\]: 'llm' must be a mapping"),
    ({"members": [{"name": "a", "llm": HF, "retriever": "bm25"}]}, r"'retriever' must be a mapping"),
    ({"defaults": {"llm": "m"}, "members": [{"name": "a", "llm": HF}]}, r"defaults: 'llm' must be a mapping"),
    ({"members": [{"name": "a", "llm": HF, "stop": "\nQuestion:"}]}, "'stop' must be a list of strings"),
    ({"members": [{"name": "a", "llm": HF, "top_p": 5}]}, r"top_p must lie in \(0, 1\]"),
    ({"members": [{"name": "a", "llm": HF, "seed": 1.7}]}, "'seed' must be an integer"),
    ({"inherit_generator": "false", "members": [{"name": "a", "llm": HF}]}, "'inherit_generator' must be true or false"),
    ({"members": [{"name": "a", "llm": {"backend": "openai", "model": "m", "urls": 8000}}]}, "'urls' must be a URL"),
])
def test_pool_validation_errors(raw, message):
    with pytest.raises(DataFormatError, match=message):
        pool_from_dict(raw, base_retriever={"kind": "bm25"}, source="pool.yaml")


def test_inherit_generator_merges_configs():
    raw = {"inherit_generator": True, "defaults": {"llm": {"batch_size": 4}, "top_k": 3},
           "members": [{"name": "a", "llm": {"dtype": "float32"}}, {"name": "b", "top_k": 7}]}
    a, b = pool_from_dict(raw, base_llm={"backend": "hf", "model": "x", "dtype": "bfloat16"})
    assert a.llm == {"backend": "hf", "model": "x", "dtype": "float32", "batch_size": 4}
    assert (a.top_k, b.top_k) == (3, 7)


# -- resumable sampling ------------------------------------------------------------------------


def test_sampling_writes_every_pair_once_and_shares_retrieval(tmp_path):
    out = tmp_path / "samples.jsonl"
    calls = []
    recs = make_records(10)
    rows = sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out,
                                  chunk_size=3, llm_factory=_factory(calls))
    assert len(rows) == 20 and len(calls) == 20
    assert [r["pool_member"] for r in rows] == ["m-greedy"] * 10 + ["m-k1"] * 10
    assert len(rows[0]["passages"]) == 2 and len(rows[10]["passages"]) == 1
    assert rows[0]["messages"][-1]["content"].endswith("What is item 0?")
    assert rows[0]["sampling"] == {"temperature": 0.0, "top_k": 2, "retriever": "default", "model": "fake"}
    assert rows[0]["dataset"] == "toy" and rows[0]["em"] == 1.0 and rows[1]["em"] == 0.0
    _check_complete(out, 10, ["m-greedy", "m-k1"])
    # A second run finds everything done: no model calls, same records.
    again = sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out,
                                   llm_factory=_factory(calls))
    assert len(calls) == 20 and again == rows


def test_resume_after_log_truncated_mid_line(tmp_path):
    out = tmp_path / "samples.jsonl"
    recs = make_records(12)
    sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out,
                           chunk_size=5, llm_factory=_factory())
    data = out.read_bytes()
    lines = data.splitlines(keepends=True)
    keep = b"".join(lines[:9]) + lines[9][: len(lines[9]) // 2]  # 9 whole records and a torn one
    out.write_bytes(keep)
    calls = []
    rows = sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out,
                                  chunk_size=5, llm_factory=_factory(calls))
    assert len(calls) == 24 - 9 and len(rows) == 24
    _check_complete(out, 12, ["m-greedy", "m-k1"])
    assert all(json.loads(line) for line in out.read_text().splitlines())


def test_complete_last_record_without_newline_is_kept(tmp_path):
    out = tmp_path / "samples.jsonl"
    recs = make_records(3)
    sample_error_responses(recs, make_pool()[:1], {"default": FakeRetriever()}, out_path=out, llm_factory=_factory())
    out.write_bytes(out.read_bytes().rstrip(b"\n"))
    calls = []
    sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out, llm_factory=_factory(calls))
    assert len(calls) == 3
    _check_complete(out, 3, ["m-greedy", "m-k1"])


SCRIPT = """
import sys
sys.path.insert(0, sys.argv[3])
from test_mining import FakeRetriever, answer, make_pool, make_records
from ragcritic_lib.llm import CallableLLM
from ragcritic_lib.mining.sampling import sample_error_responses
fn = lambda p, g: answer(p, g, delay=float(sys.argv[2]))
sample_error_responses(make_records(40), make_pool(), {"default": FakeRetriever()}, out_path=sys.argv[1],
                       chunk_size=4, llm_factory=lambda cfg: CallableLLM(fn, name="fake"))
print("finished")
"""


def test_resume_after_killed_subprocess(tmp_path):
    script = tmp_path / "sample.py"
    script.write_text(SCRIPT)
    out = tmp_path / "samples.jsonl"
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT), "RAGCRITIC_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, str(script), str(out), "0.02", str(Path(__file__).parent)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") >= 12:
            break
        if proc.poll() is not None:
            pytest.fail(f"sampler ended early: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    n_before = len(read_jsonl_tolerant(out))
    assert 12 <= n_before < 80, "the kill must land mid-run"
    with out.open("ab") as fh:  # as if the kill had torn a record in half
        fh.write(b'{"id": "q39", "question": "What is ite')
    done = subprocess.run([sys.executable, str(script), str(out), "0", str(Path(__file__).parent)], env=env, capture_output=True,
                          timeout=300, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _check_complete(out, 40, ["m-greedy", "m-k1"])
    assert len(rows) == 80


def test_sampling_rejects_duplicate_inputs(tmp_path):
    recs = make_records(2) + make_records(1)
    with pytest.raises(ValueError, match="duplicate"):
        sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=tmp_path / "x.jsonl",
                               llm_factory=_factory())
    with pytest.raises(KeyError, match="no retriever"):
        sample_error_responses(make_records(1), make_pool(), {"other": FakeRetriever()},
                               out_path=tmp_path / "y.jsonl", llm_factory=_factory())


def test_callable_retriever_source_and_closed_book(tmp_path):
    pool = [PoolMember(name="cb", llm={"model": "fake"}, prompt_variant="closed_book"),
            PoolMember(name="bm", llm={"model": "fake"}, retriever={"kind": "bm25"}, top_k=1)]
    asked = []
    rows = sample_error_responses(make_records(2), pool, lambda m: asked.append(m.name) or FakeRetriever(),
                                  out_path=tmp_path / "z.jsonl", llm_factory=_factory())
    assert asked == ["bm"]
    assert rows[0]["passages"] == [] and rows[0]["sampling"]["retriever"] == "none"
    assert rows[2]["sampling"]["retriever"] == "bm25"


# -- judging ---------------------------------------------------------------------------------------


def _rec(i, pred, golds, **meta):
    from ragcritic_lib.evaluation.scoring import score_prediction

    r = {"id": f"q{i}", "question": "Q?", "golden_answers": golds, "prediction": pred, "pool_member": "m",
         "dataset": "toy", "metadata": {"dataset": "toy", **meta}, "passages": [
             {"id": "p1", "contents": "Douro\nPorto lies on the Douro.", "score": 1.0}],
         "followed_prefix": True, "truncated": False}
    r.update(score_prediction(pred, golds))
    return r


def test_is_correct_metrics_thresholds_and_abstention():
    r = _rec(0, "the river Douro", ["Douro river"])
    assert r["em"] == 0.0 and r["f1"] == 1.0 and r["acc"] == 0.0
    assert is_correct(r, metric="f1", threshold=0.5) and not is_correct(r, metric="em", threshold=1.0)
    partial = _rec(1, "Douro valley wine", ["Douro river"])  # f1 = 0.4
    assert not is_correct(partial, metric="f1", threshold=0.5) and is_correct(partial, metric="f1", threshold=0.4)
    unans = _rec(2, "I don't know", ["insufficient information"], answerable=False)
    assert is_correct(unans) and not is_correct(unans, abstain_ok_if_unanswerable=False)
    trivia_gold_not_in_corpus = _rec(3, "I don't know", ["NyQuil"], answerable=False)
    assert not is_correct(trivia_gold_not_in_corpus)
    no_scores = {k: v for k, v in partial.items() if k not in ("em", "f1", "acc")}
    assert is_correct(no_scores, metric="f1", threshold=0.4)
    with pytest.raises(ValueError):
        is_correct(r, metric="bleu")


def test_judge_attach_rationales_and_split():
    recs = [_rec(0, "Douro", ["Douro"]), _rec(1, "Tagus", ["Douro"]), _rec(2, "Seine", ["Douro"])]
    judged = judge_records(recs, metric="em", threshold=1.0)
    assert [r["correct"] for r in judged] == [True, False, False]
    assert judged[1]["evidence"]["gold_in_passages"] is True
    outputs = {"Tagus": '{"Judgement": "Error", "Error_analysis": "Wrong river."}', "Seine": "garbage"}

    def fn(prompt, params):
        return next(v for k, v in outputs.items() if f"Model answer: {k}" in prompt[-1]["content"])

    teacher = LLMTeacher(CallableLLM(fn), few_shot=0)
    out, report = attach_rationales(judged, teacher, fallback=GroundedTeacher(seed=0))
    assert [r["rationale_source"] for r in out] == ["none", "llm", "grounded"]
    assert out[1]["rationale"] == "Wrong river." and "Seine" in out[2]["rationale"]
    assert out[0]["rationale"] == "" and out[2]["teacher_judgement"] is None
    assert report == {"fallback_no_json": 1, "source_grounded": 1, "source_llm": 1, "source_none": 1}
    errors, correct = split_pools(out)
    assert [r["id"] for r in errors] == ["q1", "q2"] and [r["id"] for r in correct] == ["q0"]


def test_pool_summary_and_source_statistics():
    recs = judge_records([_rec(0, "Douro", ["Douro"], type="factual"), _rec(1, "x", ["Douro"], type="factual"),
                          _rec(2, "y", ["Douro"], type="multi_hop")], metric="em", threshold=1.0)
    recs[2]["pool_member"] = "n"
    summ = pool_summary(recs)
    assert summ["m"]["n"] == 2 and summ["m"]["errors"] == 1 and summ["m"]["error_rate"] == 0.5
    assert summ["n"]["error_rate"] == 1.0 and summ["m"]["followed_prefix"] == 1.0
    stats = source_statistics(recs)
    assert stats == [
        {"dataset": "toy", "type": "factual", "questions": 2, "samples": 2, "errors": 1, "correct": 1, "error_rate": 0.5},
        {"dataset": "toy", "type": "multi_hop", "questions": 1, "samples": 1, "errors": 1, "correct": 0, "error_rate": 1.0},
    ]


def test_member_gen_params():
    m = PoolMember(name="x", llm={"model": "m"}, temperature=0.7, top_p=0.9, seed=5, max_new_tokens=10)
    g = m.gen_params()
    assert (g.temperature, g.top_p, g.seed, g.max_new_tokens) == (0.7, 0.9, 5, 10)
    assert Path(m.describe()["model"]).name == "m"


def test_changed_member_config_is_resampled_and_log_compacted(tmp_path):
    out = tmp_path / "samples.jsonl"
    recs = make_records(4)
    sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out, llm_factory=_factory())
    changed = [make_pool()[0], PoolMember(name="m-k1", llm={"backend": "hf", "model": "fake"}, top_k=3,
                                          prompt_variant="terse")]
    calls = []
    rows = sample_error_responses(recs, changed, {"default": FakeRetriever()}, out_path=out,
                                  llm_factory=_factory(calls))
    assert len(calls) == 4  # only the edited member
    assert all(len(r["passages"]) == 3 for r in rows[4:])
    assert read_jsonl_tolerant(out) == rows  # stale rows of the old m-k1 are gone
    # Fewer questions later: the log is compacted to the requested ones.
    fewer = sample_error_responses(recs[:2], changed, {"default": FakeRetriever()}, out_path=out,
                                   llm_factory=_factory(calls))
    assert len(calls) == 4 and len(read_jsonl_tolerant(out)) == 4 == len(fewer)


def test_stratified_subset():
    from ragcritic_lib.mining.sampling import stratified_subset

    judged = [{"id": f"q{i}", "dataset": "a" if i % 2 else "b", "pool_member": "m", "correct": i % 3 == 0}
              for i in range(30)]
    sub = stratified_subset(judged, 8, seed=1)
    assert len(sub) == 8 and len({r["id"] for r in sub}) == 8
    assert sum(r["correct"] for r in sub) == 4
    assert {r["dataset"] for r in sub} == {"a", "b"}
    assert sub == stratified_subset(judged, 8, seed=1)
    assert len(stratified_subset(judged, 100)) == 30


# -- what makes a logged sample reusable ---------------------------------------------------------


def _fresh_process():
    """Forget the per-process memos (retrievers, corpora, file digests), as a new DVC run would."""
    from ragcritic_lib import io, runtime

    runtime._RETRIEVERS.clear()
    runtime._corpus.cache_clear()
    io._DIGESTS.clear()


def _corpus_lines():
    return [{"id": f"p{i}", "contents": f"Item {i}\nItem {i} is answer {i % 3}."} for i in range(6)]


def _identity_setup(tmp_path):
    from ragcritic_lib.io import write_jsonl

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"layers": 2}')
    (model / "model.safetensors").write_bytes(b"weights-v1")
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, _corpus_lines())
    params = {"common": {"datasets": {"toy": {"corpus": str(corpus), "splits": str(tmp_path)}},
                         "retriever": {"kind": "bm25", "cache": False}}}
    pool = [PoolMember(name="m", llm={"backend": "hf", "model": str(model)}, top_k=2)]
    return model, corpus, params, pool


def _sample_via_runtime(params, pool, out, calls):
    from ragcritic_lib import runtime

    return sample_error_responses(make_records(4), pool,
                                  lambda m: runtime.load_retriever(params, "toy", **m.retriever),
                                  out_path=out, llm_factory=_factory(calls))


@pytest.mark.parametrize("change", ["nothing", "retriever", "corpus", "weights", "template"])
def test_samples_are_redrawn_when_what_shapes_them_changes(tmp_path, monkeypatch, change):
    from ragcritic_lib.retrieval import rag

    model, corpus, params, pool = _identity_setup(tmp_path)
    out = tmp_path / "samples.jsonl"
    _fresh_process()
    first_calls = []
    first = _sample_via_runtime(params, pool, out, first_calls)
    assert len(first_calls) == 4
    if change == "retriever":
        params["common"]["retriever"]["bm25_k1"] = 0.9
    elif change == "corpus":  # rebuilt with the same size and mtime: only the content tells
        st = corpus.stat()
        corpus.write_bytes(corpus.read_bytes().replace(b"Item 2 is answer 2.", b"item item item item"))
        os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert corpus.stat().st_size == st.st_size
    elif change == "weights":  # new weights at the same path, same size
        (model / "model.safetensors").write_bytes(b"weights-v2")
    elif change == "template":
        monkeypatch.setattr(rag, "_SYSTEM", rag._SYSTEM + " Be brief.")
    _fresh_process()
    calls = []
    rows = _sample_via_runtime(params, pool, out, calls)
    assert len(calls) == (0 if change == "nothing" else 4)
    assert read_jsonl_tolerant(out) == rows and len(rows) == 4
    if change == "nothing":
        assert rows == first
    else:
        assert {r["sample_fingerprint"] for r in rows}.isdisjoint(r["sample_fingerprint"] for r in first)
    if change == "corpus":
        passages = [p["contents"] for r in rows for p in r["passages"]]
        assert "Item 2\nitem item item item" in passages  # the new passage ranks first for "item"
    if change == "template":
        assert all(r["messages"][0]["content"].endswith(" Be brief.") for r in rows)


def test_retriever_identity_ignores_cosmetic_settings_and_unused_models(tmp_path):
    from ragcritic_lib.io import write_jsonl
    from ragcritic_lib.mining.sampling import retriever_identity

    corpus = write_jsonl(tmp_path / "c.jsonl", _corpus_lines())

    class Built:
        def __init__(self, **cfg):
            self.provenance = {"config": {"kind": "bm25", **cfg}, "corpus_path": str(corpus)}

    base = retriever_identity(Built())
    assert base == retriever_identity(Built(show_progress=True, num_threads=2, cache=False,
                                            encoder="elsewhere/encoder", reranker="elsewhere/reranker"))
    assert base["corpus"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert base["config"]["bm25_k1"] == 1.5 and "encoder" not in base["config"]
    assert base != retriever_identity(Built(bm25_k1=1.2))
    assert base != retriever_identity(Built(rerank=True))
    assert retriever_identity(Built(rerank=True, reranker="a")) != retriever_identity(Built(rerank=True, reranker="b"))


def test_log_with_line_separator_characters_resumes(tmp_path):
    out = tmp_path / "samples.jsonl"
    recs = make_records(3)
    for r in recs:  # characters that str.splitlines() treats as line breaks, and multi-byte text
        r["metadata"]["note"] = "a\u2028b\u2029c\u0085d 東京 🙂"
    calls = []
    rows = sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out,
                                  llm_factory=_factory(calls))
    assert "\u2028".encode() in out.read_bytes()  # written raw, not escaped
    again = sample_error_responses(recs, make_pool(), {"default": FakeRetriever()}, out_path=out,
                                   llm_factory=_factory(calls))
    assert len(calls) == 6 and again == rows
    assert again[0]["metadata"]["note"] == "a\u2028b\u2029c\u0085d 東京 🙂"


def test_member_fingerprint_ignores_where_a_local_model_folder_lives(tmp_path):
    # A clone at another path finds its logged samples: the folder's name counts, not its path
    # (its weights are hashed by content in the sampling context).
    a, b = tmp_path / "a" / "SmolLM2", tmp_path / "b" / "SmolLM2"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    fp = [PoolMember(name="m", llm={"backend": "hf", "model": str(d)}).fingerprint for d in (a, b)]
    assert fp[0] == fp[1]
    other = tmp_path / "b" / "Qwen"
    other.mkdir()
    assert PoolMember(name="m", llm={"backend": "hf", "model": str(other)}).fingerprint != fp[0]
    # Served models keep their whole name: there is no folder to hash.
    served = [PoolMember(name="m", llm={"backend": "openai", "model": f"{p}/SmolLM2"}).fingerprint for p in "xy"]
    assert served[0] != served[1]


def test_a_refused_prompt_is_marked_and_asked_again_on_the_next_run(tmp_path):
    """A served model that refuses one prompt gives no answer for it: the row says so
    (generation_error) and a re-run asks again instead of keeping the empty prediction."""
    from ragcritic_lib.llm import Generation

    out = tmp_path / "samples.jsonl"
    recs = make_records(4)
    calls = []

    def refusing(prompt, params):
        calls.append(1)
        if prompt[-1]["content"].endswith("item 2?"):
            return Generation("", prompt_tokens=0, completion_tokens=0, finish_reason="error",
                              error="HTTP 400: prompt is too long")
        return answer(prompt, params)

    pool = make_pool()[:1]
    rows = sample_error_responses(recs, pool, {"default": FakeRetriever()}, out_path=out,
                                  llm_factory=lambda cfg: CallableLLM(refusing, name="fake"))
    assert [r.get("generation_error") for r in rows] == [None, None, "HTTP 400: prompt is too long", None]
    assert rows[2]["prediction"] == "" and len(calls) == 4
    errors, correct = split_pools(judge_records(rows))
    assert sorted(r["id"] for r in errors + correct) == ["q0", "q1", "q3"]  # no answer, no sample
    rows = sample_error_responses(recs, pool, {"default": FakeRetriever()}, out_path=out, llm_factory=_factory(calls))
    assert len(calls) == 5 and all("generation_error" not in r for r in rows)
    assert rows[2]["prediction"] == "answer 2"
    _check_complete(out, 4, ["m-greedy"])
