"""docs/demo_report.png from the demo: the risk table (rows in the report's order) above the radar charts per subset.

Run from the repository root: `python docs/demo_report.py [RUN] [PNG]`. RUN (default runs/demo) is a folder that
`reward-auditor demo --out RUN` wrote; when it holds no results yet the demo is run there first, with the demo's
own settings. PNG defaults to docs/demo_report.png.
"""
import io
import sys
from pathlib import Path

import numpy as np


def demo_run(run: Path):
    "The demo's result in `run`, running `reward-auditor demo` there first when it has not been."
    from reward_auditor.audit import AuditResult
    from reward_auditor.cli import main
    if not (run / "results.parquet").exists():
        assert main(["demo", "--out", str(run), "--no-report", "-q"]) == 0
    return AuditResult.load(run)


def risk_cells(result):
    "Effect sizes, significance and cell text of the report's risk table (same rows, same order, same markers)."
    from reward_auditor import plots, report
    # a significant rise (two-sided audit) is shaded blue with the stars of its own adjusted p, as in the report
    shown = plots.improvements_marked(report.risk_display(result.table))
    eff = plots.risk_matrix(shown, rows=("model", "subset"))
    sig = plots.risk_matrix(shown, rows=("model", "subset"), value="significant").reindex_like(eff)
    stars = plots.risk_matrix(shown, rows=("model", "subset"), value="stars").reindex_like(eff)
    text = [[("" if np.isnan(e) else f"{e:+.2f}" + ("" if s in ("ns", None) else str(s)))
             for e, s in zip(er, sr)] for er, sr in zip(eff.to_numpy(float), stars.to_numpy(object))]
    return eff, sig.fillna(False).astype(bool), text


def risk_figure(result):
    "The risk table as a figure: red for a significant drop, blue for a significant rise, darker when larger."
    from reward_auditor.plots import _plt
    plt = _plt()
    eff, sig, text = risk_cells(result)
    e = eff.to_numpy(float)
    vmax = float(np.nanpercentile(np.abs(e[np.isfinite(e)]), 95)) or 1.0
    rgba = np.ones(e.shape + (4,))
    for (i, j), v in np.ndenumerate(e):
        if sig.iat[i, j] and np.isfinite(v):
            a = 0.15 + 0.7 * min(abs(v) / vmax, 1.0)
            rgba[i, j] = (0.84, 0.15, 0.16, a) if v > 0 else (0.12, 0.47, 0.71, a)
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * e.shape[1] + 2.6, 0.8 + 0.3 * e.shape[0]))
    ax.imshow(rgba, aspect="auto")
    for (i, j), t in np.ndenumerate(np.array(text, dtype=object)):
        ax.text(j, i, t, ha="center", va="center", fontsize=8, family="monospace",
                color="black" if sig.iat[i, j] else "#777777")
    ax.set_xticks(range(e.shape[1]), [p for _, p in eff.columns])
    ax.set_yticks(range(e.shape[0]), [f"{m} / {s}" for m, s in eff.index], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_title("Risk table: effect size d_z of the confidence drop, stars from the adjusted p-value", fontsize=10)
    for k in range(1, len(eff.index)):
        if eff.index[k][0] != eff.index[k - 1][0]:
            ax.axhline(k - 0.5, color="#333333", lw=0.8)
    fig.tight_layout()
    return fig


def _pixels(fig) -> np.ndarray:
    from reward_auditor.plots import _plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight", facecolor="white")
    _plt().close(fig)
    buf.seek(0)
    return _plt().imread(buf)[..., :3]


def stack(images: list) -> np.ndarray:
    "Images one above the other on white, left-aligned."
    w = max(im.shape[1] for im in images)
    return np.concatenate([np.pad(im, ((0, 8), (0, w - im.shape[1]), (0, 0)), constant_values=1.0) for im in images])


def main(run: Path, png: Path) -> Path:
    from reward_auditor.plots import _plt, radar
    result = demo_run(run)
    _plt().imsave(png, stack([_pixels(risk_figure(result)), _pixels(radar(result.table))]))
    return png


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    args = sys.argv[1:]
    print(main(Path(args[0]) if args else Path("runs/demo"), Path(args[1]) if len(args) > 1 else here / "demo_report.png"))
