"""JupyterLab as a student meets it, in a real browser.

`make lab` itself starts the server, in a copy of the repository whose ``.venv`` is the project's
virtual environment: the same recipe (jupytext sync, then ``jupyter lab``, with --allow-root when
run as root), headless (--no-browser), on 127.0.0.1 only, on a free port, with a token set here.
Debian's Chromium, driven by Playwright, then does what a student does: opens a notebook's ``.py``
twin as a notebook (a double click: jupytext's contents manager and viewer),
runs all its cells from the Run menu, checks the kernel in a cell of its own, and saves (jupytext
writes the ``.py`` and its ``.ipynb`` twin). What must appear in every notebook: every code cell
run, no error output, the project's virtual environment as the kernel, progress bars as widgets
(no text fallback), and the "Reading the numbers" text.

Two notebooks, each in its own copy of the repository:
- 01_retrieval_rag, on the ``assets`` and ``testbed`` stages: a matplotlib figure must appear.
- 07_benchmark, the cheaper of the two notebooks that read a trained critic (07, 08): everything up
  to ``critic_dpo`` is built headlessly first, then the student's run must show the benchmark table
  with both trained critics (SFT, SFT+DPO) scored, and the reading must name them.

Inputs: each notebook's upstream at the smoke profile's sizes (``dvc repro`` in the copy; the
fixture prints each upstream stage's papermill seconds). When the smoke run of ``make test`` left a
built copy of this very source (``RAGCRITIC_SMOKE_WORKSPACE``, set by ``.ci/run``), the copy starts
from it and its ``dvc repro`` of the upstream redoes only what is not up to date there (it prints
which stages ran): the same inputs, without building stages 00-06 a second time. In JupyterLab a notebook runs with the
literals of its parameters cell, so the copy's parameters cell gets the smoke profile's values,
smaller still where the generator would take minutes (as ``make exercises`` writes a profile into a
class's notebooks).

Slow, and needs Chromium and Playwright: it runs only through ``make test-browser`` (which installs
requirements-browser.txt and sets RAGCRITIC_BROWSER_TEST=1); ``make test`` skips it. Every wait is
bounded; the server (with its kernels) and the browser are stopped whatever happens; on failure a
screenshot is saved under the test's tmp dir and named in the message.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from ragcritic_lib.pipeline.exercises import set_parameters
from ragcritic_lib.pipeline.shipping import stages_run
from ragcritic_lib.pipeline.workspace import (SMOKE_WORKSPACE_ENV, built_workspace, copy_built, copy_repository,
                                              pipeline_env, run_timed, source_fingerprint)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(os.environ.get("RAGCRITIC_BROWSER_TEST") != "1",
                       reason="JupyterLab in Chromium: run with `make test-browser`"),
]


@dataclass(frozen=True)
class Notebook:
    """A stage notebook as a student runs it here."""

    name: str                                   # notebooks/<name>.py
    section: str                                # its params.yaml section
    upstream: tuple[str, ...]                   # `dvc repro` targets built headlessly first
    smaller: tuple[tuple[str, object], ...] = ()  # parameters cell values below the smoke profile's
    run_all_s: int = 600                        # bound on Run All Cells


# Has a figure; its upstream (assets, testbed) is cheap on smoke.
RETRIEVAL = Notebook("01_retrieval_rag", "retrieval_rag", ("assets", "testbed"),
                     (("recall_questions", 4), ("eval_questions", 1), ("variant_probe_questions", 1)))
# Reads both trained critics (stages 05 and 06); `dvc repro critic_dpo` builds all it reads
# (assets, testbed, retrieval_rag, error_sampling, tagging, taxonomy, critic_sft, critic_dpo).
# Chosen over 08_correction, which reads the same upstream, because it costs less: 406 s against
# 482 s in the workshop profile on 2 AVX2-only cores (docs/workshop.md), where 08 also trains a
# planner first. Cost at smoke sizes on 2 AVX2-only cores under a load average of 3-10 (28 November
# 2026), papermill's seconds: 00_assets 152, 00_testbed 14, 01 225, 02 1,220, 03 16, 04 101, 05 62,
# 06 32 (1,822 in all); Run All Cells in the browser 61 s. The fixture prints them all.
BENCHMARK = Notebook("07_benchmark", "benchmark", ("critic_dpo",), run_all_s=900)

VENV = Path(sys.prefix)             # the project's virtual environment (the test runs in it)
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Root needs --no-sandbox; the rest keeps Chromium from reaching out of a closed network (no name
# but the loopback's resolves).
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"]
SERVER_START_S = 180
UI_S = 120
KERNEL_CHECK = "import sys; print('KERNEL', sys.prefix, sys.executable, sep='|')"


@dataclass
class Lab:
    base: str
    token: str
    root: Path
    log: Path
    notebook: Notebook

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def api(self, path: str):
        import httpx

        r = httpx.get(f"{self.base}{path}", headers=self.headers, timeout=10.0)
        r.raise_for_status()
        return r.json()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


def _papermill_seconds(root: Path) -> dict[str, float]:
    """Each executed notebook's run time, as papermill recorded it (reports/notebooks/)."""
    found = {}
    for nb in sorted((root / "reports" / "notebooks").glob("*.ipynb")):
        duration = json.loads(nb.read_text()).get("metadata", {}).get("papermill", {}).get("duration")
        if duration is not None:
            found[nb.stem] = float(duration)
    return found


@pytest.fixture(scope="module")
def lab_repo(request, tmp_path_factory):
    """A repository copy with the notebook's upstream built at smoke sizes, its parameters cell
    set to them, and ``.venv`` pointing at the project's virtual environment."""
    notebook: Notebook = request.param
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: `apt-get install -y chromium` (or CHROMIUM=path)")
    start = time.perf_counter()
    dest = tmp_path_factory.mktemp(f"lab-{notebook.name}") / "repo"
    built = built_workspace(os.environ.get(SMOKE_WORKSPACE_ENV), profile="smoke", fingerprint=source_fingerprint())
    root = copy_built(built, dest) if built else copy_repository(dest)
    (root / ".venv").symlink_to(VENV, target_is_directory=True)
    env = pipeline_env(root, root / ".cache")
    run_timed([sys.executable, "-m", "ragcritic_lib.pipeline.profiles", "smoke"], root, env)
    repro_s, out = run_timed(["dvc", "repro", *notebook.upstream], root, env, log=root / "repro.log")
    values = {**yaml.safe_load((root / "params.yaml").read_text())[notebook.section], **dict(notebook.smaller)}
    py = root / "notebooks" / f"{notebook.name}.py"
    py.write_text(set_parameters(py.read_text(), values, where=str(py)))
    stages = ", ".join(f"{name} {s:.1f}" for name, s in _papermill_seconds(root).items())
    origin = f"the smoke run's built copy {built}" if built else "a fresh copy"
    print(f"\n[browser] {notebook.name}: from {origin}; upstream `dvc repro {' '.join(notebook.upstream)}` at "
          f"smoke sizes {repro_s:.1f} s, stages run: {', '.join(stages_run(out)) or 'none'} "
          f"({time.perf_counter() - start:.1f} s with the copy); papermill s: {stages}")
    return root, env, notebook


def _wait_ready(lab: Lab, proc: subprocess.Popen) -> None:
    import httpx

    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"`make lab` exited with {proc.returncode}:\n{_tail(lab.log)}")
        try:
            if httpx.get(f"{lab.base}/api/status", headers=lab.headers, timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"JupyterLab at {lab.base} not ready after {SERVER_START_S} s:\n{_tail(lab.log)}")


def _stop(proc: subprocess.Popen, lab: Lab) -> None:
    """Shut the server down through its API (it stops its kernels), then make sure: the process
    group of `make lab`, and every process it started (kernels run in sessions of their own)."""
    import httpx
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    try:
        httpx.post(f"{lab.base}/api/shutdown", headers=lab.headers, timeout=10.0)
    except httpx.HTTPError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=15)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(family, timeout=10)


@pytest.fixture
def lab(lab_repo, tmp_path):
    """`make lab` in the copy, headless, on 127.0.0.1 and a free port, with a token of the test's."""
    root, env, notebook = lab_repo
    env = dict(env)
    for var in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MPLBACKEND"):
        env.pop(var, None)  # as a user typing `make lab` in a shell
    # A fresh Jupyter configuration, settings and workspace: nothing of this machine's own.
    for var, sub in (("JUPYTER_CONFIG_DIR", "jupyter-config"), ("JUPYTER_RUNTIME_DIR", "jupyter-runtime"),
                     ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"), ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces")):
        env[var] = str(tmp_path / sub)
    lab = Lab(f"http://127.0.0.1:{_free_port()}", secrets.token_hex(24), root, tmp_path / "lab.log", notebook)
    port = urlsplit(lab.base).port
    args = (f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={lab.token}")
    # -o: the project's environment is installed already (the copy's .venv is a link to it).
    cmd = ["make", "--no-print-directory", "-o", ".venv/.installed", "lab", f"LAB_ARGS={args}"]
    start = time.perf_counter()
    with lab.log.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_ready(lab, proc)
        print(f"[browser] `make lab` serving in {time.perf_counter() - start:.1f} s")
        yield lab
    finally:
        _stop(proc, lab)


# What the page shows, read from the DOM (textContent: cells out of view are in the DOM too).
_DONE = """() => {
  const panel = document.querySelector('.jp-NotebookPanel');
  if (!panel) return false;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent);
  const status = panel.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status;
  return prompts.some(t => /\\[\\d+\\]/.test(t)) && !prompts.some(t => t.includes('*')) && status === 'idle';
}"""
_KERNEL_READY = """() => {
  const status = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')?.dataset.status;
  const bar = document.querySelector('#jp-main-statusbar')?.textContent || '';
  return status === 'idle' && /\\|\\s*Idle/.test(bar);
}"""
_STARTED = """() => document.querySelector('.jp-Dialog') !== null ||
  [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')].some(e => /\\[(\\*|\\d+)\\]/.test(e.textContent))"""
_SEEN = """() => {
  const panel = document.querySelector('.jp-NotebookPanel');
  const cells = [...panel.querySelectorAll('.jp-Cell')];
  const text = el => (el ? el.textContent : '');
  const outputs = cell => [...cell.querySelectorAll('.jp-OutputArea-output')];
  const heading = cells.findIndex(c => c.classList.contains('jp-MarkdownCell') &&
                                       text(c.querySelector('h2')).includes('Reading the numbers'));
  const reading = heading < 0 ? null : cells.slice(heading + 1).find(c => c.classList.contains('jp-CodeCell'));
  const figures = [...panel.querySelectorAll('.jp-OutputArea-output img')]
    .filter(img => img.src.startsWith('data:image/png') && img.complete && img.naturalWidth > 0);
  const tables = [...panel.querySelectorAll('.jp-OutputArea-output table')].map(text);
  const stderr = [...panel.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
    .map(text);
  if (reading) reading.scrollIntoView();
  return {
    prompts: [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent.trim()),
    kernel_name: text(panel.querySelector('.jp-Toolbar-kernelName')).trim(),
    figures: figures.length,
    tables: tables,
    heading: heading >= 0,
    reading: reading ? outputs(reading).map(o => o.textContent).join('\\n').trim() : '',
    tracebacks: stderr.filter(t => t.includes('Traceback (most recent call last)')),
    stderr: stderr,
  };
}"""


def _menu(page, *labels: str, bar: bool = False) -> None:
    """Click menu items by their whole label (a label may hold a mnemonic's <span>)."""
    for label in labels:
        cls = ".lm-MenuBar-itemLabel" if bar else ".lm-Menu-itemLabel"
        page.locator(cls).filter(has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")).click()
        bar = False


def _student_session(page, lab: Lab, timings: dict[str, float]) -> dict:
    from playwright.sync_api import expect

    name = f"{lab.notebook.name}.py"
    start = time.perf_counter()
    page.goto(f"{lab.base}/lab?token={lab.token}")
    # A double click, as a student opens a file: `make lab` makes the notebook view the default
    # for .py files (configs/jupyterlab/overrides.json).
    page.locator(".jp-DirListing-itemText").get_by_text(name, exact=True).dblclick()
    page.locator(".jp-NotebookPanel, .jp-FileEditor").first.wait_for()
    assert page.locator(".jp-NotebookPanel").count() == 1, f"{name} did not open as a notebook"
    expect(page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")).to_have_text(name)
    # The kernel is up when the server has it idle and the page says so (a Run All before that
    # asks which kernel to start).
    deadline = time.monotonic() + UI_S
    while not any(s["path"].endswith(name) and s["kernel"]["execution_state"] == "idle"
                  for s in lab.api("/api/sessions")):
        assert time.monotonic() < deadline, f"no idle kernel for {name} after {UI_S} s"
        page.wait_for_timeout(500)
    page.wait_for_function(_KERNEL_READY, polling=500)
    timings["open"] = time.perf_counter() - start

    start = time.perf_counter()
    _menu(page, "Run", "Run All Cells", bar=True)
    page.wait_for_function(_STARTED, polling=500)
    if page.locator(".jp-Dialog").count():
        text = page.locator(".jp-Dialog").inner_text()
        page.locator(".jp-Dialog .jp-mod-accept").click()  # as a student would: accept the kernel offered
        print(f"[browser] Run All asked: {' '.join(text.split())!r}; accepted")
    page.wait_for_function(_DONE, polling=1000, timeout=lab.notebook.run_all_s * 1000)
    timings["run all"] = time.perf_counter() - start
    seen = page.evaluate(_SEEN)

    # The student's own check: which Python runs this notebook?
    page.locator(".jp-NotebookPanel .jp-Cell").last.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.type(KERNEL_CHECK)
    page.keyboard.press("Shift+Enter")
    out = page.locator(".jp-NotebookPanel .jp-OutputArea-output", has_text="KERNEL|").last
    seen["kernel_check"] = out.text_content().strip()

    # Save: jupytext writes the .py and its paired .ipynb (the outputs go to the .ipynb).
    page.keyboard.press("Control+s")
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current:not(.jp-mod-dirty)").wait_for()
    return seen


def _in_browser(lab: Lab, tmp_path: Path) -> tuple[dict, str]:
    """The student's session in headless Chromium; returns what the page showed and the text
    that assertion messages end with (where the screenshot is)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    shot = tmp_path / "jupyterlab.png"
    outside: list[str] = []
    timings: dict[str, float] = {}

    def note_outside(request):
        if urlsplit(request.url).hostname not in ("127.0.0.1", "localhost", None):
            outside.append(request.url)

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900}, timeout=UI_S * 1000)
        try:
            ctx.set_default_timeout(UI_S * 1000)
            ctx.on("request", note_outside)
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            try:
                seen = _student_session(page, lab, timings)
                if seen["figures"]:
                    page.evaluate("() => document.querySelector('.jp-NotebookPanel .jp-OutputArea-output img')"
                                  ".scrollIntoView({block: 'center'})")
                    page.screenshot(path=str(shot.with_name("jupyterlab-figure.png")))
                page.evaluate(_SEEN)  # scrolls the reading into view
                page.screenshot(path=str(shot))
            except (AssertionError, PlaywrightError) as exc:
                try:
                    page.screenshot(path=str(shot))
                except PlaywrightError:
                    pass
                pytest.fail(f"{exc}\nscreenshot: {shot}\nserver log: {lab.log}\n{_tail(lab.log, 1500)}")
        finally:
            ctx.close()
    print(f"[browser] {lab.notebook.name}: open {timings['open']:.1f} s, run all {timings['run all']:.1f} s; "
          f"screenshot: {shot}")
    if outside:
        print(f"[browser] the page asked for addresses off the machine: {sorted(set(outside))}")
    return seen, f" (screenshot: {shot})"


def _check_student_run(seen: dict, lab: Lab, why: str) -> None:
    """What every notebook must show: every cell run without error, widgets for progress bars,
    the reading, the project's environment as the kernel, and a save through jupytext."""
    import nbformat

    name = lab.notebook.name
    fallback = [t for t in seen["stderr"] if "IProgress not found" in t]
    assert seen["tracebacks"] == [], f"error output in the page: {seen['tracebacks'][0][:1500]}{why}"
    assert seen["prompts"] and all(p.startswith("[") and p[1:-2].isdigit() for p in seen["prompts"]), \
        f"not every code cell ran: {seen['prompts']}{why}"
    assert not fallback, f"progress bars fell back to text (ipywidgets missing?): {fallback[0][:300]}{why}"
    assert seen["heading"], f"no 'Reading the numbers' heading in the page{why}"
    assert len(seen["reading"]) > 40, f"the 'Reading the numbers' cell shows no reading: {seen['reading']!r}{why}"

    # The kernel is the project's virtual environment: in the page, in the session, in its spec.
    _, prefix, executable = seen["kernel_check"].split("|")
    assert Path(prefix).resolve() == VENV.resolve(), f"kernel runs {executable}, not {VENV}{why}"
    assert Path(executable).parent == Path(prefix) / "bin", f"kernel runs {executable}{why}"
    sessions = [s for s in lab.api("/api/sessions") if s["path"].endswith(f"{name}.py")]
    assert len(sessions) == 1, sessions
    kernel = sessions[0]["kernel"]["name"]
    spec = lab.api("/api/kernelspecs")["kernelspecs"][kernel]["spec"]
    assert seen["kernel_name"] == spec["display_name"], (seen["kernel_name"], spec["display_name"])
    # "python" in a spec is the server's own interpreter (jupyter_client), here the venv's.
    argv0 = spec["argv"][0]
    assert argv0 in ("python", "python3") or Path(argv0).parent.parent.resolve() == VENV.resolve(), spec["argv"]

    # Saved through jupytext: the .py keeps the code, the paired .ipynb the outputs (no error among them).
    assert KERNEL_CHECK in (lab.root / "notebooks" / f"{name}.py").read_text()
    saved = nbformat.read(lab.root / "notebooks" / f"{name}.ipynb", as_version=4)
    errors = [o for c in saved.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == [], f"saved notebook has an error output: {errors[0].get('ename')}: {errors[0].get('evalue')}{why}"


@pytest.mark.parametrize("lab_repo", [RETRIEVAL], ids=[RETRIEVAL.name], indirect=True)
def test_student_runs_a_stage_notebook_in_jupyterlab(lab, tmp_path):
    import nbformat

    seen, why = _in_browser(lab, tmp_path)
    _check_student_run(seen, lab, why)
    assert seen["figures"] >= 1, f"no matplotlib figure (PNG <img>) in the page{why}"
    saved = nbformat.read(lab.root / "notebooks" / f"{lab.notebook.name}.ipynb", as_version=4)
    assert any(o.get("data", {}).get("image/png") for c in saved.cells if c.cell_type == "code" for o in c.get("outputs", []))

    # `make lab` printed the URL to open and, run as root, allowed root.
    log = lab.log.read_text(errors="replace")
    assert f"{lab.base}/lab?token=" in log, f"`make lab` did not print its URL:\n{_tail(lab.log)}"
    if os.geteuid() == 0:
        assert "--allow-root" in log, "`make lab` as root without --allow-root"


@pytest.mark.parametrize("lab_repo", [BENCHMARK], ids=[BENCHMARK.name], indirect=True)
def test_student_runs_the_benchmark_on_the_trained_critics(lab, tmp_path):
    """07_benchmark on the critics that stages 05 and 06 trained headlessly in the copy: the table
    scores both, and the reading written from the metrics the run just wrote names them."""
    seen, why = _in_browser(lab, tmp_path)
    _check_student_run(seen, lab, why)
    # The per-label figure shows in the page: a plot function that switched the kernel's backend to
    # Agg left it blank in JupyterLab and in the executed notebook.
    assert seen["figures"] >= 1, f"no matplotlib figure (PNG <img>) in the page{why}"
    critics = [t for t in seen["tables"] if "SFT critic" in t and "SFT+DPO critic" in t]
    assert critics, f"no table scores both trained critics; tables seen: {[t[:200] for t in seen['tables']]}{why}"
    for name in ("SFT critic", "SFT+DPO critic"):
        assert name in seen["reading"], f"the reading does not name the {name}: {seen['reading'][:800]!r}{why}"
    metrics = json.loads((lab.root / "reports" / "metrics" / "07_benchmark.json").read_text())
    assert {"SFT critic", "SFT+DPO critic"} <= set(metrics["critics"]), sorted(metrics["critics"])
