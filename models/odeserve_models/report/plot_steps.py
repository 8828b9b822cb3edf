"""Draws models/eval_steps.svg, quality against ODE steps for the served models, from
models/work/eval/*.json (evaluate, eval-baselines):
  classify-sections.json       evaluate repo:classify-sections (the served classifier)
  classify-sections-lexical.json  the same for the two-expert classifier served before it (optional)
  classify-sections-128.json   the same for its encoder expert alone (optional: drawn if present)
  embed-sharebert.json         evaluate repo:embed-sharebert
  embed-eelbert.json           evaluate repo:embed-eelbert
  baselines.json               eval-baselines
    PYTHONPATH=models /usr/bin/python3 -m odeserve_models plot-steps"""
import os

from odeserve_models.cli import parser
from odeserve_models.paths import MODELS
from odeserve_models.report.make_classifier_report import EVAL as EV, index, load

OUT = os.path.join(MODELS, "eval_steps.svg")
REQUIRED = ("classify-sections", "embed-sharebert", "embed-eelbert", "baselines")
LANGS = (("de", "tab:blue"), ("fr", "tab:orange"), ("it", "tab:green"), ("da", "tab:red"))
SOLVER_MARKS = (("HEUN", "^", "Heun (2 field evals a step)"), ("RK4", "v", "RK4 (4 field evals a step)"))


def points(res, dataset, solver, key):
    """[(steps, metric)] of one model's rows for dataset and solver, by steps."""
    return sorted((n, row[key]) for (ds, s, n), row in index(res).items() if ds == dataset and s == solver and key in row)


def need(pts, what):
    if not pts:
        raise SystemExit("plot-steps: no %s in models/work/eval (rerun the command that writes it)" % what)
    return pts


def line(ax, pts, fmt, **kw):
    ax.plot([n for n, _ in pts], [100 * v for _, v in pts], fmt, **kw)


def baseline(base, key, metric):
    if key not in base or metric not in base[key]:
        raise SystemExit("plot-steps: baselines.json has no %s %s (rerun eval-baselines)" % (key, metric))
    return 100 * base[key][metric]


def solver_series(ax, res, dataset, metric, label, short, colour, fmt):
    """One model's Euler line and its Heun/RK4 markers on `dataset`; returns the step counts drawn."""
    pts = need(points(res, dataset, "EULER", metric), "Euler %s %s of %s" % (dataset, metric, label))
    line(ax, pts, fmt, color=colour, label=label + ", Euler")
    for solver, mark, what in SOLVER_MARKS:
        marks = points(res, dataset, solver, metric)
        if marks:
            line(ax, marks, mark, color=colour, markersize=8, label="%s, %s" % (short, what))
    return {n for n, _ in pts}


def steps_axis(ax, ns, depths):
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("solver steps n (dt = L/n, L = %s)" % "/".join(str(d) for d in sorted(depths)))
    ax.grid(True, alpha=0.3)


def main(argv=None) -> int:
    parser("plot-steps", __doc__).parse_args(argv)
    missing = [n + ".json" for n in REQUIRED if not os.path.exists(os.path.join(EV, n + ".json"))]
    if missing:
        raise SystemExit("plot-steps: missing %s in %s; write them first: evaluate repo:classify-sections, "
                         "repo:embed-sharebert, repo:embed-eelbert; eval-baselines"
                         % (", ".join(missing), EV))
    cls, esb, eel, base = (load(n) for n in REQUIRED)
    optional = {n: load(n) if os.path.exists(os.path.join(EV, n + ".json")) else None
                for n in ("classify-sections-lexical", "classify-sections-128")}
    two, enc = optional["classify-sections-lexical"], optional["classify-sections-128"]
    import matplotlib  # python3-matplotlib: only this command needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.hashsalt"] = "odeserve-eval-steps"
    fig, ax = plt.subplots(1, 3, figsize=(16, 6.2))

    # (a) English section accuracy
    a = ax[0]
    en = "sections-test-en"
    models = [(cls, "classify-sections (served)", "classify-sections", "tab:blue", "o-")]
    if two is not None:
        models.append((two, "encoder x lexical (classify-sections-lexical)", "encoder x lexical", "tab:orange", "^--"))
    if enc is not None:
        models.append((enc, "encoder alone (classify-sections-128)", "encoder alone", "tab:purple", "s--"))
    ns = set()
    for res, label, short, colour, fmt in models:
        ns.update(solver_series(a, res, en, "accuracy", label, short, colour, fmt))
    lexical = points(cls, en, "LEXICAL", "accuracy")
    if lexical:
        a.axhline(100 * lexical[0][1], color="tab:brown", ls="-.", label="lexical expert alone (0 steps)")
    a.axhline(baseline(base, "tfidf_lr/" + en, "accuracy"), color="gray", ls=":", label="TF-IDF + LR (full text)")
    steps_axis(a, sorted(ns), {r["trained_depth"] for r, *_ in models})
    a.set_ylabel("accuracy (%)")
    a.set_title("(a) Section classification, English test (1,000):\naccuracy vs steps", fontsize=10)
    a.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))

    # (b) zero-shot accuracy, Euler
    b = ax[1]
    ns = set()
    for lang, colour in LANGS:
        ds = "sections-test-" + lang
        pts = need(points(cls, ds, "EULER", "accuracy"), "Euler %s accuracy of classify-sections" % lang)
        ns.update(n for n, _ in pts)
        line(b, pts, "o-", color=colour, label="%s: classify-sections" % lang)
        b.axhline(baseline(base, "tfidf_lr/" + ds, "accuracy"), color=colour, ls=":", label="%s: TF-IDF + LR" % lang)
    steps_axis(b, sorted(ns), {cls["trained_depth"]})
    b.set_xlabel("Euler " + b.get_xlabel())
    b.set_ylabel("accuracy (%)")
    b.set_title("(b) Zero-shot section classification (trained on English labels),\n"
                "500 descriptions per language: accuracy vs Euler steps", fontsize=10)
    b.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))

    # (c) en -> de retrieval
    c = ax[2]
    ds = "retrieval-test-en-de"
    ns = set()
    for res, label, colour, fmt in ((esb, "embed-sharebert", "tab:blue", "o-"), (eel, "embed-eelbert", "tab:green", "d-")):
        ns.update(solver_series(c, res, ds, "recall@1", label, label, colour, fmt))
    c.axhline(baseline(base, "tfidf_char/" + ds, "recall@1"), color="gray", ls=":",
              label="TF-IDF char 2-4-grams (fitted on training pairs)")
    steps_axis(c, sorted(ns), {esb["trained_depth"], eel["trained_depth"]})
    c.set_ylabel("recall@1 (%)")
    c.set_title("(c) Retrieval en -> de: recall@1 among 1,000 candidates\nvs steps", fontsize=10)
    c.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))

    fig.tight_layout()
    fig.savefig(OUT, metadata={"Date": None})
    print("wrote", OUT)
    return 0
