"""Static HTML report of the pipeline: ``python -m ragcritic_lib.pipeline.html_report`` (``make report``).

Renders every executed notebook of ``reports/notebooks/`` to HTML (nbconvert, images embedded,
no script fetched from the network: the report reads offline), copies the figures of
``reports/figures/<NN_stage>/`` and ``reports/analysis/figures/``, renders the tables of
``reports/tables/<NN_stage>/`` and ``reports/analysis/tables/`` (Markdown, or CSV
where a table has no Markdown twin) and the metrics JSON, and writes ``reports/html/index.html``
linking everything, with the paper counterpart of each analysis item (``reports/analysis/index.json``)
and a list of what is missing: stage notebooks not executed (or failed), analysis items not
built. It works on a partial run (e.g. after the smoke run) and says what is absent.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragcritic_lib import paths
from ragcritic_lib.io import atomic_write_text

# Remote scripts nbconvert's lab template references (require.js, MathJax): not needed to read a
# rendered notebook, and never fetched, so the report is fully offline.
_REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", re.IGNORECASE)
_STAGE_NB = re.compile(r"^(\d\d)_([a-z0-9_]+)$")

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1, h2, h3 { line-height: 1.2; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2rem; margin-top: 2.2rem; }
table { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .88rem; }
th, td { border: 1px solid #ccc; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.missing { color: #a33; } .failed { color: #b60; } .ok { color: #276; } .partial { color: #b60; }
.gallery { display: grid; grid-template-columns: repeat(auto-fill, minmax(22rem, 1fr)); gap: 1rem; }
.gallery figure { margin: 0; border: 1px solid #ddd; padding: .5rem; }
.gallery img { max-width: 100%; height: auto; } figcaption { font-size: .85rem; }
pre { background: #f7f7f7; padding: .6rem; overflow-x: auto; font-size: .8rem; }
.banner { background: #fff3e0; border: 1px solid #b60; padding: .6rem; margin-bottom: 1rem; }
"""


@dataclass
class ReportSummary:
    """What :func:`build_report` wrote and what it found missing (paths relative to ``out_dir``)."""

    out_dir: Path
    notebooks: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    missing_notebooks: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    missing_items: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def strip_remote_scripts(text: str) -> str:
    """Remove ``<script src="http(s)://...">`` tags (the report must not load anything remote)."""
    return _REMOTE_SCRIPT.sub("", text)


def notebook_title(nb: Any, fallback: str) -> str:
    """The first Markdown heading of a notebook (its title cell), else ``fallback``."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def render_notebook(nb_path: Path, out_path: Path, *, banner: str | None = None) -> str:
    """Render one executed notebook to a standalone HTML file; returns the notebook's title."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(nb_path, as_version=4)
    exporter = HTMLExporter(template_name="lab", embed_images=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": nb_path.stem}})
    body = strip_remote_scripts(body)
    if banner:
        body = re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + f"<div class=\"banner\">{html.escape(banner)}</div>",
                      body, count=1)
    _write(out_path, body)
    return notebook_title(nb, nb_path.stem)


def markdown_to_html(text: str) -> str:
    """Markdown (with pipe tables) to HTML; raw HTML in the source is escaped, never passed on."""
    try:
        import mistune
    except ImportError:  # mistune comes with nbconvert; plain text is the fallback
        return f"<pre>{html.escape(text)}</pre>"
    return mistune.create_markdown(escape=True, plugins=["table"])(text)


def csv_to_html(path: Path, *, max_rows: int = 200) -> str:
    """A CSV file as an HTML table (first ``max_rows`` rows)."""
    import csv

    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return "<p><em>(empty)</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1 : max_rows + 1])
    more = f"<p><em>{len(rows) - 1 - max_rows} more rows in the CSV.</em></p>" if len(rows) - 1 > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def expected_notebooks(notebooks_dir: Path) -> list[str]:
    """Stems of the stage notebooks (``NN_name.py``) the pipeline should have executed."""
    return sorted(p.stem for p in notebooks_dir.glob("*.py") if _STAGE_NB.match(p.stem))


def _anchor(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _write(path: Path, text: str) -> None:
    # Readable by everyone (a report is meant to be served or shared), written atomically.
    atomic_write_text(path, text)
    path.chmod(0o644)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def _shown(path: Path, base: Path) -> str:
    return path.relative_to(base).as_posix() if path.is_relative_to(base) else path.as_posix()


def _link(href: str, text: str) -> str:
    return f"<a href=\"{html.escape(href, quote=True)}\">{html.escape(text)}</a>"


def build_report(
    reports_dir: Path = paths.REPORTS_DIR,
    out_dir: Path | None = None,
    *,
    notebooks_dir: Path = paths.NOTEBOOKS_DIR,
) -> ReportSummary:
    """Write the static report under ``out_dir`` (default ``reports_dir / "html"``).

    Args:
        reports_dir: holds ``notebooks/`` (executed), ``figures/<NN_stage>/``, ``tables/<NN_stage>/``,
            ``metrics/`` and ``analysis/`` (stage 15: ``figures/``, ``tables/``, ``index.json``).
        notebooks_dir: the notebook sources, which say which stages should have run.
    """
    reports_dir, notebooks_dir = Path(reports_dir), Path(notebooks_dir)
    out_dir = Path(out_dir) if out_dir is not None else reports_dir / "html"
    for sub in ("notebooks", "figures", "tables"):
        shutil.rmtree(out_dir / sub, ignore_errors=True)  # our own output: start from a clean slate
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = ReportSummary(out_dir)

    nb_rows = _render_notebooks(reports_dir / "notebooks", out_dir, expected_notebooks(notebooks_dir), summary)
    analysis_index = _read_json(reports_dir / "analysis" / "index.json")
    fig_groups = {"analysis": reports_dir / "analysis" / "figures", "stages": reports_dir / "figures"}
    figures = _copy_figures(fig_groups, out_dir, summary, base=reports_dir.parent)
    _tables_page(reports_dir, out_dir, summary)
    metrics = _metrics_page(reports_dir / "metrics", out_dir)

    body = ["<h1>ragcritic: reproducibility report</h1>",
            "<p>Generated by <code>python -m ragcritic_lib.pipeline.html_report</code> from <code>reports/</code>. Tables: "
            f"{_link('tables.html', 'all tables')}; metrics: {_link('metrics.html', f'{metrics} metrics files')}.</p>"]
    body += ["<h2 id=\"notebooks\">Executed notebooks</h2>", nb_rows]
    body += ["<h2 id=\"paper\">Paper tables and figures</h2>", _paper_items(analysis_index, summary)]
    body += ["<h2 id=\"figures\">Figures</h2>", figures]
    _write(out_dir / "index.html", _page("ragcritic report", "\n".join(body)))
    return summary


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    except json.JSONDecodeError:
        return None


def _render_notebooks(executed_dir: Path, out_dir: Path, expected: Sequence[str], summary: ReportSummary) -> str:
    present = {p.stem: p for p in sorted(executed_dir.glob("*.ipynb")) if not p.name.startswith(".")} \
        if executed_dir.exists() else {}
    stems = sorted(set(expected) | {s.removesuffix(".failed") for s in present})
    rows = []
    for stem in stems:
        ok, failed = present.get(stem), present.get(f"{stem}.failed")
        if ok is not None:
            title = render_notebook(ok, out_dir / "notebooks" / f"{stem}.html")
            summary.notebooks.append(f"notebooks/{stem}.html")
            status = "<span class=\"ok\">executed</span>"
            name = _link(f"notebooks/{stem}.html", stem)
        elif failed is not None:
            title = render_notebook(failed, out_dir / "notebooks" / f"{stem}.failed.html",
                                    banner=f"{stem} failed: this is the partially executed notebook papermill kept.")
            summary.failed.append(stem)
            status = "<span class=\"failed\">failed</span>"
            name = _link(f"notebooks/{stem}.failed.html", stem)
        else:
            summary.missing_notebooks.append(stem)
            rows.append(f"<tr><td>{html.escape(stem)}</td><td></td><td><span class=\"missing\">missing: "
                        f"reports/notebooks/{html.escape(stem)}.ipynb not found (stage not run)</span></td></tr>")
            continue
        rows.append(f"<tr><td>{name}</td><td>{html.escape(title)}</td><td>{status}</td></tr>")
    note = ""
    if summary.missing_notebooks:
        note = f"<p class=\"missing\">Missing: {html.escape(', '.join(summary.missing_notebooks))}.</p>"
    return ("<table><thead><tr><th>notebook</th><th>title</th><th>status</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>" + note)


def _copy_figures(groups: Mapping[str, Path], out_dir: Path, summary: ReportSummary, *, base: Path) -> str:
    parts = []
    for group, src in groups.items():
        # The stages write into one folder each (reports/figures/<NN_stage>/); analysis is flat.
        files = sorted(src.rglob("*.png")) + sorted(f for f in src.rglob("*.svg") if not f.with_suffix(".png").exists()) \
            if src.exists() else []
        parts.append(f"<h3>{html.escape(group)} <small>({html.escape(_shown(src, base))})</small></h3>")
        if not files:
            parts.append("<p class=\"missing\">No figures.</p>")
            continue
        cards = []
        for f in files:
            name = f.relative_to(src)
            stem = name.with_suffix("").as_posix()  # "<NN_stage>/<name>" for a stage, "<item>" for analysis
            rel = f"figures/{group}/{name.as_posix()}"
            _copy(f, out_dir / rel)
            summary.figures.append(rel)
            svg = f.with_suffix(".svg")
            extra = ""
            if f.suffix == ".png" and svg.exists():
                svg_rel = f"figures/{group}/{name.with_suffix('.svg').as_posix()}"
                _copy(svg, out_dir / svg_rel)
                extra = " · " + _link(svg_rel, "SVG")
            cards.append(f"<figure id=\"fig-{_anchor(stem)}\"><a href=\"{html.escape(rel)}\"><img src=\"{html.escape(rel)}\" "
                         f"alt=\"{html.escape(stem)}\" loading=\"lazy\"></a><figcaption>{html.escape(stem)}{extra}"
                         f"</figcaption></figure>")
        parts.append("<div class=\"gallery\">" + "".join(cards) + "</div>")
    return "\n".join(parts)


def _tables_page(reports_dir: Path, out_dir: Path, summary: ReportSummary) -> int:
    groups = {"analysis": reports_dir / "analysis" / "tables", "stages": reports_dir / "tables"}
    sections, toc = [], []
    for group, src in groups.items():
        files = sorted(src.rglob("*")) if src.exists() else []
        stems = sorted({f.relative_to(src).with_suffix("").as_posix() for f in files if f.suffix in (".md", ".csv")})
        sections.append(f"<h2 id=\"{group}\">{html.escape(group)} tables <small>({html.escape(_shown(src, reports_dir.parent))})</small></h2>")
        if not stems:
            sections.append("<p class=\"missing\">No tables.</p>")
        for stem in stems:
            md, csv = src / f"{stem}.md", src / f"{stem}.csv"
            anchor = f"{group}-{_anchor(stem)}"
            links = []
            if csv.exists():
                _copy(csv, out_dir / "tables" / group / f"{stem}.csv")
                links.append(_link(f"tables/{group}/{stem}.csv", "CSV"))
            content = markdown_to_html(md.read_text(encoding="utf-8")) if md.exists() else csv_to_html(csv)
            sections.append(f"<section id=\"{anchor}\"><h3>{html.escape(stem)}</h3><p>{' · '.join(links)}</p>{content}</section>")
            toc.append(f"<li>{_link('#' + anchor, f'{group}/{stem}')}</li>")
            summary.tables.append(f"tables.html#{anchor}")
    body = ["<p>" + _link("index.html", "← report index") + "</p><h1>Tables</h1>",
            "<ul>" + "".join(toc) + "</ul>" if toc else "<p class=\"missing\">No tables found.</p>"] + sections
    _write(out_dir / "tables.html", _page("ragcritic tables", "\n".join(body)))
    return len(toc)


def _metrics_page(metrics_dir: Path, out_dir: Path) -> int:
    files = sorted(metrics_dir.glob("*.json")) if metrics_dir.exists() else []
    body = ["<p>" + _link("index.html", "← report index") + "</p><h1>Metrics</h1>"]
    for f in files:
        body.append(f"<details id=\"{_anchor(f.stem)}\"><summary>{html.escape(f.name)}</summary>"
                    f"<pre>{html.escape(f.read_text(encoding='utf-8'))}</pre></details>")
    if not files:
        body.append("<p class=\"missing\">No metrics files.</p>")
    _write(out_dir / "metrics.html", _page("ragcritic metrics", "\n".join(body)))
    return len(files)


def _paper_items(index: Any, summary: ReportSummary) -> str:
    if not isinstance(index, Mapping) or "items" not in index:
        summary.missing_items.append("reports/analysis/index.json")
        return ("<p class=\"missing\">reports/analysis/index.json not found: the analysis stage (notebook 15) "
                "has not run, so the papers' tables and figures are not assembled.</p>")
    rows = []
    for item in index["items"]:
        links = []
        for f in item.get("files", []):
            name = Path(f).name
            if name.endswith(".md"):
                links.append(_link(f"tables.html#analysis-{_anchor(Path(f).stem)}", "table"))
            elif name.endswith(".png"):
                links.append(_link(f"#fig-{_anchor(Path(f).stem)}", "figure"))
        status = item.get("status", "missing")
        if status != "built":
            summary.missing_items.append(item["id"])
        why = "; ".join(f"{m.get('input')}{' [' + m['key'] + ']' if m.get('key') else ''}: {m.get('reason')}"
                        for m in item.get("missing", []))
        rows.append(f"<tr><td>{html.escape(item.get('paper', ''))}</td><td>{html.escape(item.get('title', ''))}</td>"
                    f"<td>{' · '.join(links)}</td><td><span class=\"{html.escape(status)}\">{html.escape(status)}</span>"
                    f"{'<br><small>' + html.escape(why) + '</small>' if why else ''}</td></tr>")
    return ("<table><thead><tr><th>paper counterpart</th><th>what</th><th>files</th><th>status / missing inputs</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragcritic_lib.pipeline.html_report", description=__doc__.split("\n")[0])
    parser.add_argument("--reports-dir", type=Path, default=paths.REPORTS_DIR)
    parser.add_argument("--out", type=Path, default=None, help="default: <reports-dir>/html")
    args = parser.parse_args(argv)
    s = build_report(args.reports_dir, args.out)
    print(f"report: {s.out_dir / 'index.html'}\n  notebooks rendered: {len(s.notebooks)}, failed: {len(s.failed)}, "
          f"missing: {', '.join(s.missing_notebooks) or 'none'}\n  figures: {len(s.figures)}, tables: {len(s.tables)}, "
          f"paper items not (fully) built: {', '.join(s.missing_items) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
