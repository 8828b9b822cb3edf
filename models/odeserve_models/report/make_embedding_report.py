"""Writes the embedding models' latest section of models/EVAL.md (between the embedding-latest
markers) from evaluation files in models/work/eval/:
  NAME.json            evaluate repo:NAME (the served model), for each --models NAME
  NAME-previous.json   the same for the model it replaced (--repository OLD --out-name NAME-previous)
  baselines.json       eval-baselines (TF-IDF character n-gram retrieval)
  served-embed.json    evaluate-served --models NAME,...
the quality profiles (validation) of the new and the previous folders, and each training run's
args.json/train.log. Every figure is read from those files.

  PYTHONPATH=models /usr/bin/python3 -m odeserve_models report-embedding --models embed-eelbert,embed-sharebert \
      --runs models/work/runs/eelbert-cont,models/work/runs/sharebert-cont --previous /tmp/previous-repo
"""
import os
import re
import time

from odeserve_models.cli import shell_line
from odeserve_models.paths import MODELS
from odeserve_models.report.make_classifier_report import index, load, report_main, training_summary

BEGIN, END = "<!-- embedding-latest:begin -->", "<!-- embedding-latest:end -->"
ANCHOR = "## Retrieval en -> de among 1,000 candidates"  # the section is inserted before it on first use
SIZE_TARGETS_MB = {"embed-eelbert": 2.0, "embed-sharebert": 5.0}  # issue 3, tokenizer not counted


def profile_recall(folder, steps):
    """Validation recall@1 (Euler) per step count from a folder's quality.pbtxt."""
    out = {}
    for line in open(os.path.join(folder, "quality.pbtxt")):
        m = re.search(r'solver: EULER steps: (\d+) metric: "recall@1" value: ([0-9.]+)', line)
        if m and int(m.group(1)) in steps:
            out[int(m.group(1))] = float(m.group(2))
    return out


def pair(row):
    return "n/a / n/a" if row is None else "%.1f / %.1f" % (100 * row["recall@1"], 100 * row["recall@10"])


def section(a):
    names, runs = a.models.split(","), a.runs.split(",")
    new = {n: load(n) for n in names}
    old = {n: index(load(n + "-previous")) for n in names}
    base = load("baselines")
    served = load("served-embed")
    out = []
    W = out.append
    W(BEGIN)
    W("")
    W("## Embedding models: continued training (served since %s)" % a.date)
    W("")
    W("Generated %s by `PYTHONPATH=models /usr/bin/python3 -m odeserve_models report-embedding` from `models/work/eval/{%s,baselines,served-embed}.json`. "
      "The retrieval and retention tables after this section describe the models these replaced." % (
          time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), ",".join("%s,%s-previous" % (n, n) for n in names)))
    W("")
    W("**What changed.** Each model is its previous weights (read from the committed `model.pt`) trained "
      "further with the same objective (in-batch InfoNCE on en<->xx and long<->short description pairs, "
      "plus the auxiliary English section cross-entropy, whose head starts fresh), step-robust:")
    W("")
    for name, run in zip(names, runs):
        args, steps = training_summary(run)
        W("- `%s`: %d more optimizer steps of %d pairs, learning rate %.0e (%d warm-up steps, cosine "
          "decay to a tenth over the time budget), %.0f budgeted minutes on one thread while the other core trained the other model: "
          "`cd models; %s`." % (
              name, steps, args["batch"], args["lr"], args["warmup"], args["minutes"],
              a.commands.split(";;")[names.index(name)].strip()))
    W("")
    W("**Selection on validation** (`quality.pbtxt`, 300 en->de queries among 300 candidates, "
      "the exported files through the Python solver loop), recall@1 (%):")
    W("")
    W("| model | Euler 1 | Euler 2 | Euler 4 | Euler 8 (= L) | mean over 1..8 |")
    W("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        for label, folder in (("", os.path.join(a.repository, name)), (" (previous)", os.path.join(a.previous, name))):
            r = profile_recall(folder, range(1, 9))
            W("| %s%s | %s | %.1f |" % (name, label, " | ".join("%.1f" % (100 * r[n]) for n in (1, 2, 4, 8)),
                                       100 * sum(r.values()) / len(r)))
    W("")
    W("### Test: en -> de retrieval among 1,000 candidates, recall@1 / recall@10 (%)")
    W("")
    W("| solver | steps | " + " | ".join("%s | %s (previous)" % (n, n) for n in names) + " |")
    W("| --- | --- | " + " | ".join("--- | ---" for _ in names) + " |")
    first = index(new[names[0]])
    for (ds, solver, n) in first:
        if ds != "retrieval-test-en-de":
            continue
        cells = []
        for name in names:
            key = (ds, solver, n)
            cells += [pair(index(new[name]).get(key)), pair(old[name].get(key))]
        W("| %s | %d | %s |" % (solver, n, " | ".join(cells)))
    tfidf = base["tfidf_char/retrieval-test-en-de"]
    W("| baseline: TF-IDF char 2-4-gram cosine | | %s |" % " | ".join(
        [pair(tfidf)] + [""] * (2 * len(names) - 1)))
    W("")
    fr = ["%s %s (previous %s)" % (n, pair(index(new[n]).get(("retrieval-test-en-fr", "EULER", new[n]["trained_depth"]))),
                                   pair(old[n].get(("retrieval-test-en-fr", "EULER", new[n]["trained_depth"]))))
          for n in names]
    W("en -> fr at L: %s; TF-IDF char %s." % (", ".join(fr), pair(base["tfidf_char/retrieval-test-en-fr"])))
    W("")
    W("### Served path (C++ server over gRPC, the bundled config: compute_precision BFLOAT16)")
    W("")
    W("`%s`" % shell_line(served["command"]))
    W("")
    W("| model | steps | served recall@1 / @10 | Python path (fp32) |")
    W("| --- | --- | --- | --- |")
    for r in served["results"]:
        W("| %s | %d | %s | %s |" % (r["model"], r["steps"], pair(r),
                                    pair(index(new[r["model"]]).get((r["dataset"], "EULER", r["steps"])))))
    W("")
    W("### Targets (issue 3)")
    W("")
    for name in names:
        rows = index(new[name])
        L = new[name]["trained_depth"]
        at = {n: rows[("retrieval-test-en-de", "EULER", n)]["recall@1"] for n in (L // 4, L // 2, L)}
        mb = new[name]["size_bytes"]["model.pt"] / 1e6
        W("- `%s`: en->de recall@1 at L %.1f vs TF-IDF char %.1f + 10 -> %s; retention L/2 %.1f%%, L/4 %.1f%% "
          "(targets 97%%, 90%%); model.pt %.2f MB (target <= %.0f MB) -> %s" % (
              name, 100 * at[L], 100 * tfidf["recall@1"],
              "reached" if at[L] >= tfidf["recall@1"] + 0.10 else "NOT reached (%.1f points short)" % (
                  100 * (tfidf["recall@1"] + 0.10 - at[L])),
              100 * at[L // 2] / at[L], 100 * at[L // 4] / at[L], mb, SIZE_TARGETS_MB[name],
              "reached" if mb <= SIZE_TARGETS_MB[name] else "NOT reached"))
    W("")
    W(END)
    return "\n".join(out)


def arguments(ap):
    ap.add_argument("--models", required=True, help="comma list of served embedding models")
    ap.add_argument("--runs", required=True, help="their training runs, in the same order")
    ap.add_argument("--commands", required=True, help="the commands that trained them, ';;'-separated, same order")
    ap.add_argument("--previous", required=True, help="a repository holding the models they replaced")
    ap.add_argument("--repository", default=os.path.join(MODELS, "repository"))


def main(argv=None) -> int:
    return report_main("report-embedding", __doc__, argv, section, BEGIN, END, ANCHOR, arguments)
