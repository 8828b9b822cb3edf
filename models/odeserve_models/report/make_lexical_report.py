"""Writes the section of models/EVAL.md on the served classifier with a lexical expert (between
the classifier-lexical markers) from evaluation files in models/work/eval/:
  classify-sections-lexical.json  evaluate repo:classify-sections on the folder of commit
                              0bf224e (served 2026-12-04; its LEXICAL rows are the lexical expert alone)
  classify-sections-128.json  the same for the encoder alone (the classifier it extends)
  baselines.json              eval-baselines
  served-classify-lexical.json  evaluate-served --models classify-sections on that folder
and the selection lines of the run's log.txt (odeserve_models/train/train_lexical.py). Every figure is read from
those files.

  PYTHONPATH=models /usr/bin/python3 -m odeserve_models report-lexical --run models/work/runs/classify-lexical --command "..."
"""
import json
import os
import time

from odeserve_models.paths import ROOT
from odeserve_models.report.make_classifier_report import (baseline_language_row, both, english_baselines, english_solver_rows,
                                    index, language_row, load, report_main, run_arguments, served_table, targets_section,
                                    zero_shot_heading, zero_shot_rows)

BEGIN, END = "<!-- classifier-lexical:begin -->", "<!-- classifier-lexical:end -->"
ANCHOR = "<!-- classifier-latest:begin -->"


def selection_lines(log):
    """The grid's result lines from every run in the log (each run starts with a 'classifier'
    line; a setting run twice is shown once), then the last run's choices."""
    starts = [i for i, line in enumerate(log) if " classifier " in line[:20]]
    last = starts[-1] if starts else 0
    seen, grid = set(), []
    for line in log[:last]:
        if "best validation accuracy" in line and line[9:] not in seen:
            seen.add(line[9:])
            grid.append(line)
    final = [line for line in log[last:] if "best validation accuracy" in line or "chosen:" in line or
             "product weight" in line or ("validation set" in line and "lexical alone" in line)]
    return grid + final


def section(a):
    new_eval, old_eval = load("classify-sections-lexical"), load("classify-sections-128")
    new, old, base, served = index(new_eval), index(old_eval), load("baselines"), load("served-classify-lexical")
    args = json.load(open(os.path.join(a.run, "args.json")))
    lx = args["lexical"]
    L = new_eval["trained_depth"]
    selection = selection_lines(open(os.path.join(a.run, "log.txt")).read().splitlines())
    out = []
    W = out.append
    W(BEGIN)
    W("")
    W("## classify-sections: the encoder times a lexical expert (served since %s)" % a.date)
    W("")
    W("Generated %s by `PYTHONPATH=models /usr/bin/python3 -m odeserve_models report-lexical --run %s` from `models/work/eval/"
      "{classify-sections-lexical,classify-sections-128,baselines,served-classify-lexical}.json` and the run's `log.txt`. The "
      "next section describes the encoder alone: the classifier served from 2026-12-01 until %s, whose weights "
      "this model keeps unchanged." % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                       os.path.relpath(a.run, ROOT), a.date))
    W("")
    W("**What changed.** The encoder fits its English training descriptions far better than new ones (section "
      "\"Experiment, 2026-12-02\" below), while a linear model over words generalizes better in English. "
      "The classifier is now a product of two experts, `log_softmax(encoder) + %.2f * log_softmax(lexical)` "
      "(`odeserve_models/lexical.py`). The lexical expert is one linear layer over the %d piece unigrams and "
      "%d hashed piece bigrams of the same %d-token window, trained with cross-entropy on the English training "
      "descriptions only (L2 penalty %g, pooled scores divided by pieces^%g, epoch %d, Adam). It rides in "
      "%d extra channels of the ODE state, to which the vector field gives zero derivative, so the server's "
      "contract, solvers, batching and step choice are unchanged (`tests/models/test_lexical.py`; the C++ "
      "runtime and end-to-end suites serve a `tiny-lexical` model beside the other test models). The expert's "
      "L2 penalty, length normalization and epoch were chosen on the first half of the English validation split; "
      "the product weight and whether the expert keeps its bias (%s: the bias is its class prior, which it adds "
      "to every text it knows nothing about, such as a German one) by the mean over 1, 2, 4 and 8 steps of "
      "(English accuracy + mean zero-shot accuracy) / 2 on that half and on 400 translated descriptions of "
      "validation packages per language; the second English half checks the choice (`odeserve_models/train/train_lexical.py`; "
      "the test set was read only for the chosen model):" % (
          lx["weight"], args["vocab"], lx["buckets"], args["max_len"], lx["l2"], lx["length_power"], lx["epoch"],
          len(args["labels"]), "kept" if lx["keep_bias"] else "dropped"))
    W("")
    W("```")
    out.extend(selection)
    W("```")
    W("")
    W("`%s`" % a.command)
    W("")
    W("### English test (1,000), accuracy / macro-F1 (%)")
    W("")
    W("| solver | steps | field evals | encoder x lexical (served) | encoder alone (served until %s) |" % a.date)
    W("| --- | --- | --- | --- | --- |")
    out.extend(english_solver_rows(new, old))
    W("| lexical expert alone (as served: %s bias) | | 0 | %s | |" % ("with its" if lx["keep_bias"] else "no", both(new.get(("sections-test-en", "LEXICAL", 0)))))
    out.extend(english_baselines(base, [args["max_len"] - 2]))
    out.extend(zero_shot_heading())
    out.extend(zero_shot_rows(new, "encoder x lexical", L))
    W(language_row("encoder alone, Euler %d" % L, old, "EULER", L))
    W(language_row("lexical expert alone (as served)", new, "LEXICAL", 0))
    W(baseline_language_row("TF-IDF + LR (English-trained), full text", base, "tfidf_lr"))
    W("")
    out.extend(served_table(served, new))
    W("")
    sizes_new, sizes_old = new_eval["size_bytes"], old_eval["size_bytes"]
    W("Size: %d parameters, `model.pt` %.2f MB (the encoder alone: %d, %.2f MB); the lexical table is %d x %d." % (
        new_eval["parameters"], sizes_new["model.pt"] / 1e6, old_eval["parameters"], sizes_old["model.pt"] / 1e6,
        args["vocab"] + lx["buckets"], len(args["labels"])))
    W("")
    out.extend(targets_section(new, base, L))
    W(END)
    return "\n".join(out)


def arguments(ap):
    run_arguments(ap, "the odeserve_models/train/train_lexical.py")


def main(argv=None) -> int:
    return report_main("report-lexical", __doc__, argv, section, BEGIN, END, ANCHOR, arguments)
