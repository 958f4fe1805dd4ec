"""Contract between notebooks, params.yaml and dvc.yaml."""

import copy
import re

import pytest
import yaml

from ragcritic_lib import paths
from ragcritic_lib.pipeline.notebooks import out_of_sync
from ragcritic_lib.pipeline.params import (
    ParamsError,
    load_params,
    notebook_parameters,
    notebook_paths,
    validate_params,
)
from ragcritic_lib.pipeline.profiles import apply_profile
from ragcritic_lib.pipeline.stage import stage_name


@pytest.fixture(scope="module")
def params():
    return load_params()


@pytest.fixture(scope="module")
def dvc():
    return yaml.safe_load(paths.DVC_FILE.read_text())


def test_every_notebook_has_a_stage_and_vice_versa(dvc):
    notebooks = notebook_paths()
    stages = dvc["stages"]
    assert set(stages) == set(notebooks)
    for name, stage in stages.items():
        nb = notebooks[name].relative_to(paths.ROOT).as_posix()
        assert stage["cmd"] == f"python -m ragcritic_lib.pipeline.stage {nb}"
        assert nb in stage["deps"], f"stage {name} must depend on its notebook source"
        assert not any(str(d).endswith(".ipynb") for d in stage["deps"]), "never depend on an executed notebook"
        assert f"reports/notebooks/{notebooks[name].stem}.ipynb" in [
            o if isinstance(o, str) else next(iter(o)) for o in stage["outs"]]


# Modules every stage runs through (the stage runner, params, atomic io, paths), and the ones
# that build datasets, retrievers and LLMs for the model stages: a change to any of them must
# re-run the stages, so each is a declared dependency.
_CORE_MODULES = ("ragcritic_lib/pipeline/stage.py", "ragcritic_lib/pipeline/params.py", "ragcritic_lib/io.py", "ragcritic_lib/paths.py")


def test_every_stage_depends_on_the_shared_modules(dvc):
    # The runner and what it reads params with; the rest of each stage's library deps is its
    # import closure exactly (tests/test_deps.py).
    for name, stage in dvc["stages"].items():
        missing = [m for m in _CORE_MODULES if m not in stage["deps"]]
        assert not missing, f"stage {name} does not depend on {missing}"


def test_notebook_parameters_equal_params_sections(params):
    for name, nb in notebook_paths().items():
        assert set(notebook_parameters(nb)) == set(params[name]), nb.name
    assert stage_name(paths.NOTEBOOKS_DIR / "01_retrieval_rag.py") == "retrieval_rag"


def test_notebook_defaults_equal_params_by_value(params):
    from ragcritic_lib.pipeline.notebooks import defaults_drift

    assert defaults_drift(params) == [], "run `make notebooks` to take the defaults from params.yaml"


def test_sync_defaults_rewrites_only_the_parameters_cell(tmp_path):
    from ragcritic_lib.pipeline.notebooks import defaults_drift, sync_defaults

    nb = tmp_path / "05_x.py"
    nb.write_text('# %% [markdown]\n# # T\n# %% tags=["parameters"]\nsteps = 40  # LoRA steps\n'
                  'name = "a"\nrate = 0.5\n\n# %%\nsteps = 3\n')
    params = {"x": {"steps": 30, "name": "b \\ \"q\"", "rate": 0.25}}
    assert len(defaults_drift(params, tmp_path)) == 3
    assert sync_defaults(params, tmp_path) == [nb]
    assert defaults_drift(params, tmp_path) == []
    text = nb.read_text()
    assert "steps = 30  # LoRA steps\n" in text and text.endswith("# %%\nsteps = 3\n")
    assert sync_defaults(params, tmp_path) == []


def test_stage_params_declared_in_dvc(dvc):
    for name, stage in dvc["stages"].items():
        declared = [p if isinstance(p, str) else next(iter(p)) for p in stage.get("params", [])]
        assert name in declared, f"stage {name} must declare its own params section"


def test_notebooks_follow_the_reading_order():
    for name, nb in notebook_paths().items():
        text = nb.read_text()
        cells = re.split(r"^# %%", text, flags=re.MULTILINE)[1:]
        assert cells[0].startswith(" [markdown]") and "\n# # " in cells[0], f"{nb.name}: title cell first"
        assert "tags=[\"parameters\"]" in cells[1].splitlines()[0], f"{nb.name}: parameters cell second"
        assert "os.chdir" not in text
        assert not re.search(r"^def .*\n(?:    .*\n){12,}", text, flags=re.MULTILINE), f"{nb.name}: long function"


def test_every_stage_notebook_ends_its_sections_with_a_reading(dvc):
    # A "## Reading the numbers" markdown cell, then a code cell that writes the sentences from
    # the numbers just computed and shows them as Markdown.
    notebooks = notebook_paths()
    for name in dvc["stages"]:
        cells = re.split(r"^# %%", notebooks[name].read_text(), flags=re.MULTILINE)[1:]
        at = [i for i, c in enumerate(cells) if c.startswith(" [markdown]\n# ## Reading the numbers")]
        assert at, f"{notebooks[name].name}: no '## Reading the numbers' markdown cell"
        after = cells[at[-1] + 1] if at[-1] + 1 < len(cells) else ""
        assert after.startswith("\n") and "Markdown(" in after, f"{notebooks[name].name}: the reading needs a code cell after it"


def test_ipynb_twins_in_sync_and_stripped():
    assert out_of_sync() == []


def test_unknown_key_and_wrong_type_rejected_together(params):
    bad = copy.deepcopy(params)
    bad["retrieval_rag"]["top_kk"] = 5
    bad["retrieval_rag"]["eval_questions"] = "many"
    bad["common"]["generator"]["batchsize"] = 4
    bad["nonsense"] = {}
    bad["common"]["retriever"]["kindd"] = "x"
    with pytest.raises(ParamsError) as err:
        validate_params(bad)
    msg = str(err.value)
    for needle in ("retrieval_rag.top_kk: unknown key", "retrieval_rag.eval_questions: expected int",
                   "common.generator.batchsize: unknown key", "common.retriever.kindd: unknown key", "nonsense: unknown section"):
        assert needle in msg
    missing = copy.deepcopy(params)
    del missing["retrieval_rag"]["top_k"]
    with pytest.raises(ParamsError, match="retrieval_rag.top_k: missing"):
        validate_params(missing)


def test_profiles_validate(tmp_path, params):
    for prof in sorted((paths.CONFIGS_DIR / "profiles").glob("*.yaml")):
        target = tmp_path / "params.yaml"
        target.write_text(yaml.safe_dump(params))
        merged = apply_profile(prof.stem, params_path=target)
        assert yaml.safe_load(target.read_text()) == merged


def test_parameters_cell_rules(tmp_path):
    nb = tmp_path / "05_x.py"
    nb.write_text('# %% [markdown]\n# # T\n# %% tags=["parameters"]\na = [1, 2]\n')
    with pytest.raises(ParamsError, match="scalar literal"):
        notebook_parameters(nb)
    nb.write_text('# %% tags=["parameters"]\na = 1\n# %% tags=["parameters"]\nb = 2\n')
    with pytest.raises(ParamsError, match="exactly one cell"):
        notebook_parameters(nb)


def test_exercise_notebooks_are_valid_python(tmp_path):
    import ast

    import nbformat

    from ragcritic_lib.pipeline.exercises import main as exercises_main

    assert exercises_main(["build", "--out-dir", str(tmp_path)]) == 0
    built = sorted(tmp_path.glob("*.ipynb"))
    assert {p.stem for p in built} >= {nb.stem for nb in notebook_paths().values()}
    for nb_path in built:
        for cell in nbformat.read(nb_path, as_version=4).cells:
            if cell.cell_type == "code":
                ast.parse(cell.source)


# --------------------------------------------------------------------------------------------
# Every notebook opens and ends the same way: one setup call, one write_stage_metrics call, a
# "Reading the numbers" written by the library.
# --------------------------------------------------------------------------------------------
def _cells(nb):
    """(header, source) of each ``# %%`` cell of a jupytext percent notebook."""
    cells = re.split(r"^# %%", nb.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]
    return [(c.split("\n", 1)[0], c.split("\n", 1)[1] if "\n" in c else "") for c in cells]


def _calls(source):
    """Names of the functions a piece of code calls (``f(...)`` and ``x.f(...)``)."""
    import ast

    return [node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))]


def _stage_notebooks():
    return sorted(notebook_paths().items())


@pytest.mark.parametrize("stage, nb", _stage_notebooks(), ids=lambda x: getattr(x, "stem", x))
def test_every_notebook_opens_with_one_setup_call(stage, nb):
    cells = _cells(nb)
    at = next(i for i, (head, _) in enumerate(cells) if 'tags=["parameters"]' in head)
    first = next(src for head, src in cells[at + 1:] if "[markdown]" not in head)
    assert re.search(rf'^setup = setup_(stage|method)\("{stage}"\)', first, flags=re.MULTILINE), \
        f"{nb.name}: the first code cell after the parameters must open with setup_stage/setup_method(\"{stage}\")"
    assert _calls(first).count("setup_stage") + _calls(first).count("setup_method") == 1, nb.name
    text = nb.read_text(encoding="utf-8")
    # Params, the stage's own folder and the models come from the setup, not built by hand.
    for hand_built in ("load_params(", "runtime.load_generator(", "runtime.load_retriever(", f'stage_dir("{stage}")'):
        assert hand_built not in text, f"{nb.name}: {hand_built} (use the setup)"
    assert sum(_calls(src).count("setup_stage") + _calls(src).count("setup_method") for _, src in cells) == 1, nb.name


@pytest.mark.parametrize("stage, nb", _stage_notebooks(), ids=lambda x: getattr(x, "stem", x))
def test_every_notebook_writes_its_metrics_once_then_reads_them(stage, nb):
    cells = _cells(nb)
    calls = [_calls(src) if "[markdown]" not in head else [] for head, src in cells]
    writes = [i for i, c in enumerate(calls) for name in c if name == "write_stage_metrics"]
    assert len(writes) == 1, f"{nb.name}: {len(writes)} write_stage_metrics calls (one, in sight, is the rule)"
    # save_method_run writes the metrics file itself: method notebooks use save_method_answers.
    assert not any("save_method_run" in c for c in calls), nb.name
    at = [i for i, (head, src) in enumerate(cells) if "[markdown]" in head and src.startswith("# ## Reading the numbers")]
    assert at, f"{nb.name}: no '## Reading the numbers' cell"
    reading = cells[at[-1] + 1][1]
    assert writes[0] < at[-1], f"{nb.name}: the reading comes after the metrics are written"
    assert f"reading_{stage}" in _calls(reading), f"{nb.name}: the reading must call readings.reading_{stage}"
    assert f"from ragcritic_lib.evaluation.readings import reading_{stage}" in reading, nb.name
    import ast

    tree = ast.parse(reading)
    assert not any(isinstance(node, ast.JoinedStr) for node in ast.walk(tree)), f"{nb.name}: f-string in the reading"
    assert not any(isinstance(node, ast.FunctionDef) for node in ast.walk(tree)), f"{nb.name}: function in the reading"
    assert cells[at[-1] + 1:] == [cells[-1]], f"{nb.name}: the reading is the notebook's last cell"


# --------------------------------------------------------------------------------------------
# No notebook assembles its metrics dict by hand: the library gathers it from what the stage
# computed, and the notebook passes that on.
#
# The rule, on the notebook's code:
# 1. write_stage_metrics's metrics argument is a call into ragcritic_lib (a name imported from
#    it, or an attribute of one), or a name whose every binding in the notebook is such a call.
#    That name, and any name `metrics`, is never bound to anything else, never changed after
#    (no item assignment or deletion, no augmented assignment, no update/setdefault/pop/clear).
# 2. The arguments of those calls hold no comprehension, and a dict display among them only
#    labels values the notebook holds: constant keys, values that are names, constants,
#    attributes, subscripts or such dict displays (no `**`, no call, no arithmetic, no rounding).
# --------------------------------------------------------------------------------------------
_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _library_names(tree):
    import ast

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ragcritic_lib":
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "ragcritic_lib")
    return names


def _root_name(node):
    import ast

    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_library_call(node, library):
    import ast

    return isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and _root_name(node.func) in library


def _bindings(tree, name):
    """(kind, value) of each binding of ``name``: ("assign", value) for a plain ``name = value``,
    ("other", node) for anything else (unpacking, loops, with, walrus, del, def, import, ...)."""
    import ast

    plain = {id(t): node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.append(("assign", plain[id(node)]) if id(node) in plain else ("other", node))
        elif (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name) or (
                isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names)):
            out.append(("other", node))
    return out


def _changes(tree, name):
    """Statements that change the object ``name`` is bound to in place."""
    import ast

    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            out += [node for t in targets if isinstance(t, (ast.Subscript, ast.Attribute)) and _root_name(t) == name]
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                out.append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
              and _root_name(node.func.value) == name):
            out.append(node)
    return out


def _hand_built(call):
    """Parts of a call's arguments that assemble metrics by hand (rule 2), as source snippets."""
    import ast

    def labels_only(value):
        if isinstance(value, ast.Dict):
            return all(k is not None and isinstance(k, ast.Constant) for k in value.keys) and all(map(labels_only, value.values))
        if isinstance(value, ast.Subscript):
            return labels_only(value.value) and isinstance(value.slice, (ast.Constant, ast.Name))
        if isinstance(value, ast.Attribute):
            return labels_only(value.value)
        return isinstance(value, (ast.Name, ast.Constant))

    found = []
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        for node in ast.walk(arg):
            if isinstance(node, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)) or (
                    isinstance(node, ast.Dict) and not labels_only(node)):
                found.append(ast.unparse(node))
    return found


def _metrics_calls(tree, library):
    """The library calls the metrics come from, and the rule-1 problems met on the way."""
    import ast

    writes = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
              and (getattr(n.func, "id", None) or getattr(n.func, "attr", None)) == "write_stage_metrics"]
    problems, calls, names = [], [], {"metrics"}
    for write in writes:
        arg = write.args[1] if len(write.args) > 1 else next((k.value for k in write.keywords if k.arg == "metrics"), None)
        if _is_library_call(arg, library):
            calls.append(arg)
            # jsonable(metrics): the name inside is held to the same rule
            names.update(a.id for a in arg.args if isinstance(a, ast.Name))
        elif isinstance(arg, ast.Name):
            names.add(arg.id)
        else:
            problems.append(f"write_stage_metrics gets {ast.unparse(arg) if arg else 'no metrics'}, not a library call")
    for name in sorted(names):
        for kind, value in _bindings(tree, name):
            if kind == "assign" and _is_library_call(value, library):
                calls.append(value)
            elif kind == "assign":
                problems.append(f"{name} is bound to {ast.unparse(value)[:80]!r}, not a library call")
            else:
                problems.append(f"{name} is bound on line {value.lineno} other than by `{name} = <library call>`")
        problems += [f"{name} is changed in place: {ast.unparse(n)[:80]!r}" for n in _changes(tree, name)]
    return calls, problems


@pytest.mark.parametrize("stage, nb", _stage_notebooks(), ids=lambda x: getattr(x, "stem", x))
def test_no_notebook_assembles_its_metrics_by_hand(stage, nb):
    import ast

    tree = ast.parse(nb.read_text(encoding="utf-8"))
    calls, problems = _metrics_calls(tree, _library_names(tree))
    assert calls and not problems, f"{nb.name}: " + "; ".join(problems or ["no library call gives the metrics"])
    inline = [snippet for call in calls for snippet in _hand_built(call)]
    assert not inline, f"{nb.name}: metrics assembled in the notebook: {inline[:3]}"


def test_the_metrics_rule_catches_hand_built_dicts():
    import ast

    def check(src):
        tree = ast.parse("from ragcritic_lib.pipeline.stage_metrics import write_stage_metrics\n"
                         "from ragcritic_lib import ragec\nfrom ragcritic_lib.baselines import jsonable, save\n" + src)
        calls, problems = _metrics_calls(tree, _library_names(tree))
        return problems + [s for c in calls for s in _hand_built(c)]

    assert check('write_stage_metrics("x", ragec.ragec_metrics(info, seconds=t["s"]))') == []
    assert check('m = save(a, seconds={"test": t["s"]}, info={"k": info})\nwrite_stage_metrics("x", jsonable(m))') == []
    assert check('metrics = ragec.f(a)\nwrite_stage_metrics("x", metrics)\nmetrics["comparison"]') == []
    assert check('write_stage_metrics("x", {"a": 1})') == ["write_stage_metrics gets {'a': 1}, not a library call"]
    assert check('metrics = {"a": round(x, 1)}\nwrite_stage_metrics("x", jsonable(metrics))') == [
        "metrics is bound to \"{'a': round(x, 1)}\", not a library call"]
    assert check('metrics = ragec.f(a)\nmetrics["b"] = 2\nwrite_stage_metrics("x", metrics)') == [
        "metrics is changed in place: \"metrics['b'] = 2\""]
    assert check('metrics = ragec.f(a)\nmetrics.update(b=2)\nwrite_stage_metrics("x", metrics)') == [
        "metrics is changed in place: 'metrics.update(b=2)'"]
    assert check('s = dict(a=1)\nwrite_stage_metrics("x", s)') == ["s is bound to 'dict(a=1)', not a library call"]
    assert check('metrics, n = ragec.f(a)\nwrite_stage_metrics("x", metrics)') == [
        "metrics is bound on line 4 other than by `metrics = <library call>`"]
    assert check('write_stage_metrics("x", ragec.f(a, b={"n": round(x, 1)}))') == ["{'n': round(x, 1)}"]
    assert check('write_stage_metrics("x", ragec.f(a, b={k: v for k, v in c.items()}))') == ["{k: v for k, v in c.items()}"]
    assert check('write_stage_metrics("x", ragec.f(a, b={**c, "n": 1}))') == ["{**c, 'n': 1}"]
