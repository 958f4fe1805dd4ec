"""Text sanitising at the model-output boundary (ragcritic_lib.text) and where it is applied:
the backends' Generation text, parsed critic JSON and the JSON/JSONL writers."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ragcritic_lib.critic.critics import parse_critic_output
from ragcritic_lib.io import append_jsonl, dumps_jsonl, read_json, read_jsonl, write_json, write_jsonl
from ragcritic_lib.llm import CallableLLM, GenParams, Generation, HFBackend, OpenAIBackend
from ragcritic_lib.text import REPLACEMENT, clean_text, clean_value, has_unencodable

LONE = json.loads('"\\ud83d"')  # what a JSON string cut inside an escaped emoji pair decodes to


def encodable(value: Any) -> bool:
    return not has_unencodable(json.dumps(value, ensure_ascii=False))


# --------------------------------------------------------------------------------------------
# clean_text / clean_value
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("plain ascii", "plain ascii"),
        ("caf\u00e9 \U0001f600", "caf\u00e9 \U0001f600"),
        ("a" + LONE, "a\ufffd"),
        ("\udc00b", "\ufffdb"),
        ("\ud83d\ude00", "\U0001f600"),  # a high+low pair written as two code points
        ("\ude00\ud83d", "\ufffd\ufffd"),
        ("\ud83d\ud83d\ude00", "\ufffd\U0001f600"),
        ("x\ud800y\udfffz", "x\ufffdy\ufffdz"),
    ],
)
def test_clean_text(text: str, expected: str) -> None:
    assert clean_text(text) == expected
    clean_text(text).encode("utf-8")


def test_clean_text_returns_clean_text_itself_and_rejects_non_str() -> None:
    text = "no surrogates here"
    assert clean_text(text) is text
    assert REPLACEMENT == "\ufffd"
    with pytest.raises(TypeError, match="expects a str, got bytes"):
        clean_text(b"abc")  # type: ignore[arg-type]


def test_has_unencodable() -> None:
    assert has_unencodable("a" + LONE) and has_unencodable("\ud83d\ude00")
    assert not has_unencodable("\U0001f600 \ufffd")


def test_clean_value_cleans_keys_values_and_keeps_kinds() -> None:
    value = {"k" + LONE: [("a", LONE, 1, 2.5, None, True), {"inner": ["\ud83d\ude00"]}], "n": 0}
    assert clean_value(value) == {"k\ufffd": [("a", "\ufffd", 1, 2.5, None, True), {"inner": ["\U0001f600"]}], "n": 0}
    assert type(clean_value(value)["k\ufffd"][0]) is tuple
    assert value["k" + LONE][0][1] == LONE  # the input is not modified
    assert clean_value(LONE) == "\ufffd" and clean_value(7) == 7 and clean_value(None) is None


def test_clean_value_shared_deep_and_cyclic() -> None:
    shared = ["x" + LONE]
    assert clean_value([shared, shared]) == [["x\ufffd"], ["x\ufffd"]]
    deep: list[Any] = [LONE]
    for _ in range(5000):  # deeper than the recursion limit
        deep = [deep]
    out = clean_value(deep)
    for _ in range(5000):
        out = out[0]
    assert out == ["\ufffd"]
    cyclic: list[Any] = ["a"]
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="contains itself"):
        clean_value(cyclic)


# --------------------------------------------------------------------------------------------
# Writers: the last line of defence
# --------------------------------------------------------------------------------------------
def test_jsonl_writers_never_fail_on_lone_surrogates(tmp_path: Path) -> None:
    records = [{"answer": "cut " + LONE, LONE: ["\ud83d\ude00"]}, {"ok": "fine"}]
    assert dumps_jsonl(records) == '{"answer": "cut \ufffd", "\ufffd": ["\U0001f600"]}\n{"ok": "fine"}\n'
    write_jsonl(tmp_path / "a.jsonl", records)
    assert read_jsonl(tmp_path / "a.jsonl") == [{"answer": "cut \ufffd", "\ufffd": ["\U0001f600"]}, {"ok": "fine"}]
    append_jsonl(tmp_path / "b.jsonl", records[:1])
    append_jsonl(tmp_path / "b.jsonl", [{"more": LONE}])
    assert read_jsonl(tmp_path / "b.jsonl") == [{"answer": "cut \ufffd", "\ufffd": ["\U0001f600"]}, {"more": "\ufffd"}]


def test_write_json_never_fails_on_lone_surrogates(tmp_path: Path) -> None:
    write_json(tmp_path / "m.json", {"b": [LONE], "a": "ok"})
    assert (tmp_path / "m.json").read_text(encoding="utf-8") == '{\n  "a": "ok",\n  "b": [\n    "\ufffd"\n  ]\n}\n'
    assert read_json(tmp_path / "m.json") == {"a": "ok", "b": ["\ufffd"]}


# --------------------------------------------------------------------------------------------
# Critic JSON
# --------------------------------------------------------------------------------------------
def test_critic_json_cut_inside_a_surrogate_pair_is_cleaned() -> None:
    text = ('{"Judgement": "Error", "Error_analysis": "The answer \\ud83d", "tag1": ["Bad\\udc00 label"], '
            '"tag3": "cut \\ud83d"}')
    parse = parse_critic_output(text)
    assert parse.judgement == "Error"
    assert parse.analysis == "The answer \ufffd"
    assert parse.tag1 == ["Bad\ufffd label"]
    assert parse.tag3 == ["cut \ufffd"]
    assert encodable(parse.to_dict())


def test_critic_label_list_inside_a_string_is_cleaned() -> None:
    parse = parse_critic_output('{"Judgement": "Error", "tag2": "[\\"x\\\\ud83d\\"]"}')
    assert parse.tag2 == ["x\ufffd"]
    assert encodable(parse.to_dict())


def test_critic_raw_text_with_a_lone_surrogate_is_cleaned() -> None:
    parse = parse_critic_output('{"Judgement": "Correct"} ' + LONE)
    assert parse.judgement == "Correct" and parse.raw == '{"Judgement": "Correct"} \ufffd'
    assert encodable(parse.to_dict())


# --------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------
def test_callable_backend_cleans_str_and_generation_output() -> None:
    llm = CallableLLM(lambda prompt, params: f"{prompt} {LONE}")
    assert [g.text for g in llm.generate(["a", "b"])] == ["a \ufffd", "b \ufffd"]
    llm2 = CallableLLM(lambda prompt, params: Generation("x" + LONE + " STOP y", 1, 3, "length"))
    out = llm2.generate(["p"], GenParams(stop=("STOP",)))
    assert out[0].text == "x\ufffd " and out[0].finish_reason == "stop"


def test_hf_backend_cleans_decoded_text() -> None:
    class Tokenizer:
        def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
            return "".join({0: "", 1: "a", 2: LONE, 3: "b"}[i] for i in ids)  # 0: the end token

    backend = HFBackend.__new__(HFBackend)  # only the decoding step, no model is loaded
    backend.tokenizer = Tokenizer()
    backend.eos_token_ids = [0]
    gen = backend._finish([5, 6], [1, 2, 3, 0, 0], GenParams(max_new_tokens=5), None)
    assert gen == Generation("a\ufffdb", 2, 4, "stop")


def test_openai_backend_cleans_an_escaped_lone_surrogate() -> None:
    body = b'{"choices": [{"text": "Paris \\ud83d", "finish_reason": "stop"}], ' \
           b'"usage": {"prompt_tokens": 3, "completion_tokens": 2}}'

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        llm = OpenAIBackend("tiny", urls=[f"http://127.0.0.1:{server.server_port}/v1"], max_retries=0)
        out = llm.generate(["Capital of France?"])
    finally:
        server.shutdown()
        server.server_close()
    assert out[0] == Generation("Paris \ufffd", 3, 2, "stop")


# --------------------------------------------------------------------------------------------
# Stopword lists: each module filters with exactly the set it held before the lists moved to
# ragcritic_lib.text (the literals below are copied from the modules as they were).
# --------------------------------------------------------------------------------------------
OLD_ACTIONS_STOPWORDS = frozenset(
    """a an the of in on at to for by with from and or but nor is are was were be been being am
    what which who whom whose when where why how did does do done doing this that these those it its
    as than then there their theirs his her hers him they them he she we us you your i me my our
    has have had having not no yes into about after before during over under between most more
    many much some any each every all both either neither can could would should will shall may
    might must also only just so such very too s t ll ve d re m name named called one
    tell give find list please question answer""".split()
)
OLD_ACTIONS_NAME_STOP = frozenset(
    "the a an it its in on at he she they this that these those there his her their what which "
    "who when where how why was is are were did does do for from by with and or but as of "
    "passage passages question answer final so".split()
)
OLD_BASELINES_STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom whose why will with would you your yours yourself
    yourselves name named called known one first many much did does tell give find list""".split()
)
OLD_CRITIC_STOP = frozenset(
    "of in on at to for by with from and or is are was were be been being what which who whom whose "
    "when where why how did does do this that these those it its as than then there their his her they he she "
    "has have had not no yes into about after before during over under between most more many much".split()
)
OLD_TEACHERS_STOP = frozenset("a an the of to in on for and or by with from is was not no as at be it its than".split())


def test_stopword_lists_equal_the_sets_each_module_used_before() -> None:
    from ragcritic_lib import baselines
    from ragcritic_lib.critic import critics as critic
    from ragcritic_lib.mining import teachers
    from ragcritic_lib import text as text_module
    from ragcritic_lib.agent import actions

    assert actions.QUERY_STOPWORDS == OLD_ACTIONS_STOPWORDS
    assert actions.NOT_NAME_WORDS == OLD_ACTIONS_NAME_STOP
    assert baselines.STOPWORDS == OLD_BASELINES_STOPWORDS
    assert critic.FEATURE_STOPWORDS == OLD_CRITIC_STOP
    assert teachers.TAG_STOPWORDS == OLD_TEACHERS_STOP
    # The modules use the shared objects, not copies.
    assert actions.QUERY_STOPWORDS is text_module.QUERY_STOPWORDS
    assert actions.NOT_NAME_WORDS is text_module.NOT_NAME_WORDS
    assert baselines.STOPWORDS is text_module.CONCEPT_STOPWORDS
    assert critic.FEATURE_STOPWORDS is text_module.FEATURE_STOPWORDS
    assert teachers.TAG_STOPWORDS is text_module.TAG_STOPWORDS


def test_stopword_lists_are_built_as_documented() -> None:
    from ragcritic_lib import text as t

    every = (t.QUERY_STOPWORDS, t.CONCEPT_STOPWORDS, t.FEATURE_STOPWORDS, t.TAG_STOPWORDS, t.NOT_NAME_WORDS)
    assert all(isinstance(s, frozenset) for s in every)
    assert all(w == w.lower() and w.isalpha() for s in every for w in s)
    # The two content-word lists hold the base and the question filler.
    for s in (t.QUERY_STOPWORDS, t.CONCEPT_STOPWORDS):
        assert t.ENGLISH_STOPWORDS | t.QUESTION_FILLER_WORDS <= s
    assert t.CONTRACTION_PIECES <= t.QUERY_STOPWORDS
    # The narrower lists: function words from the base (and "yes"; the prompt's own words).
    assert t.FEATURE_STOPWORDS - t.ENGLISH_STOPWORDS == {"yes"}
    assert t.TAG_STOPWORDS < t.ENGLISH_STOPWORDS
    assert t.NOT_NAME_WORDS - t.ENGLISH_STOPWORDS == t.PROMPT_WORDS
    assert not t.QUESTION_FILLER_WORDS & t.ENGLISH_STOPWORDS
