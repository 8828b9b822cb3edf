"""Writes the section of models/EVAL.md on the served classifier with a cross-lingual expert
(between the classifier-probe markers) from evaluation files in models/work/eval/:
  classify-sections.json          evaluate repo:classify-sections (the served model; its
                                  PROBE rows are the cross-lingual expert alone, LEXICAL the lexical one)
  classify-sections-lexical.json  the same for the two-expert classifier it extends (commit 0bf224e)
  classify-sections-128.json      the same for the encoder alone
  baselines.json                  eval-baselines
  served-classify.json            evaluate-served --models classify-sections
and the selection lines of the run's log.txt (odeserve_models/train/train_embedding_probe.py). Every figure is
read from those files.

  PYTHONPATH=models /usr/bin/python3 -m odeserve_models report-probe --run models/work/runs/classify-probe --command "..."
"""
import ast
import json
import os
import time

from odeserve_models.paths import ROOT
from odeserve_models.report.make_classifier_report import (baseline_language_row, both, english_baselines, english_solver_rows,
                                    index, language_row, load, report_main, run_arguments, served_table, targets_section,
                                    zero_shot_heading, zero_shot_rows)

BEGIN, END = "<!-- classifier-probe:begin -->", "<!-- classifier-probe:end -->"
ANCHOR = "<!-- classifier-lexical:begin -->"
SELECTION = ("embedded ", "probe l2 ", "chosen:", "validation set ")


def section(a):
    new_eval, lexical_eval = load("classify-sections"), load("classify-sections-lexical")
    new, lexical, alone = index(new_eval), index(lexical_eval), index(load("classify-sections-128"))
    base, served = load("baselines"), load("served-classify")
    args = json.load(open(os.path.join(a.run, "args.json")))
    pr, lx = args["probe"], args["lexical"]
    L = new_eval["trained_depth"]
    log = open(os.path.join(a.run, "log.txt")).read().splitlines()
    starts = [i for i, line in enumerate(log) if line[9:].startswith("args ")]
    log = log[starts[-1]:]  # the last run in the log (a restarted run appends)
    selection = [line for line in log if line[9:].startswith(SELECTION)]
    tried = sorted(float(v) for v in ast.literal_eval(log[0].split(" args ", 1)[1])["l2"].split(","))
    lexical_before = json.load(open(os.path.join(a.run, "classifier-args.json")))["lexical"]["weight"]
    out = []
    W = out.append
    W(BEGIN)
    W("")
    W("## classify-sections: three experts, one of them cross-lingual (served since %s)" % a.date)
    W("")
    W("Generated %s by `PYTHONPATH=models /usr/bin/python3 -m odeserve_models report-probe --run %s` from `models/work/eval/"
      "{classify-sections,classify-sections-lexical,classify-sections-128,baselines,served-classify}.json` and the "
      "run's `log.txt`. The next section describes the two-expert classifier served before it, whose weights this "
      "model keeps unchanged." % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                  os.path.relpath(a.run, ROOT)))
    W("")
    W("**What changed.** The classifier's encoder was fine-tuned on English and its lexical expert reads "
      "English words, so both transfer to other languages only partly. `embed-eelbert` was trained to give a "
      "description and its translations the same vector. The classifier now adds a third expert: a linear probe, "
      "trained on the English training descriptions only, on embed-eelbert's normalized embedding (its encoder "
      "frozen, H=%d, L=%d):" % (pr["embedder_hidden"], L))
    W("")
    W("    log_softmax(encoder) + %.2f * log_softmax(lexical) + %.2f * log_softmax(probe)" % (lx["weight"], pr["product_weight"]))
    W("")
    W("(`EmbeddingProbeClassifier` in `odeserve_models/lexical.py`). The embedder's state rides in %d more "
      "channels of the ODE state and its own shared block evolves them at the same dt, over the window "
      "embed-eelbert's own tokenizer would read: the first %d ids, the last one replaced by `</s>` when the text "
      "goes on (`embedder_window`). It reads the classifier's token ids through a table of EELBERT's "
      "hashed n-gram features of every vocabulary piece, computed at export: the same features the server "
      "hashes for embed-eelbert, bit for bit, except for the unknown piece. The server's contract, solvers, "
      "batching and step choice are unchanged. Tests: `tests/models/test_embedding_probe.py`, and a `tiny-probe` "
      "model in the C++ runtime and end-to-end suites. The probe's L2 penalty (%g%s), its weight, whether it keeps "
      "its bias (%s) and the lexical weight (%.2f, was %.2f) were chosen together on the validation sets the lexical "
      "weight was chosen on, by the same objective: the mean over 1, 2, 4 and 8 steps of (English accuracy + mean "
      "zero-shot accuracy) / 2 on the first half of the English validation split and 400 translated validation "
      "descriptions per language. The second English half, which neither trainer chose anything on, checks the "
      "result (`odeserve_models/train/train_embedding_probe.py`). The test set was read only for the "
      "chosen model. Selection log (`before -> after` is the two-expert classifier against this one):" % (
          pr["embedder_hidden"], pr["window"], pr["l2"],
          ", the largest of the %s tried: a wider grid was not run" % ", ".join("%g" % v for v in tried)
          if pr["l2"] == tried[-1] else "", "kept" if pr["keep_bias"] else "dropped", lx["weight"], lexical_before))
    if a.note:
        W("")
        W(a.note)
    W("")
    W("```")
    out.extend(selection)
    W("```")
    W("")
    W("`%s`" % a.command)
    W("")
    W("### English test (1,000), accuracy / macro-F1 (%)")
    W("")
    W("| solver | steps | field evals | three experts (served) | encoder x lexical (served until %s) |" % a.date)
    W("| --- | --- | --- | --- | --- |")
    out.extend(english_solver_rows(new, lexical))
    W("| cross-lingual probe alone, Euler %d | | | %s | |" % (L, both(new.get(("sections-test-en", "PROBE", L)))))
    W("| lexical expert alone | | 0 | %s | |" % both(new.get(("sections-test-en", "LEXICAL", 0))))
    out.extend(english_baselines(base, [args["max_len"] - 2]))
    out.extend(zero_shot_heading())
    out.extend(zero_shot_rows(new, "three experts", L))
    for what, rows, solver, n in (("encoder x lexical (served until %s), Euler %d" % (a.date, L), lexical, "EULER", L),
                                  ("encoder alone, Euler %d" % L, alone, "EULER", L),
                                  ("cross-lingual probe alone, Euler %d" % L, new, "PROBE", L),
                                  ("lexical expert alone", new, "LEXICAL", 0)):
        W(language_row(what, rows, solver, n))
    W(baseline_language_row("TF-IDF + LR (English-trained), full text", base, "tfidf_lr"))
    W("")
    out.extend(served_table(served, new))
    W("")
    sizes, sizes_before = new_eval["size_bytes"], lexical_eval["size_bytes"]
    W("Size: %d trained parameters, `model.pt` %.2f MB (the two-expert classifier: %d, %.2f MB). The piece feature "
      "table (%d x %d float32, derived from the hash function, not trained) is a buffer in `model.pt`, not counted "
      "as parameters." % (new_eval["parameters"], sizes["model.pt"] / 1e6, lexical_eval["parameters"],
                          sizes_before["model.pt"] / 1e6, args["vocab"], pr["hash"]["dim"]))
    W("")
    out.extend(targets_section(new, base, L))
    W(END)
    return "\n".join(out)


def arguments(ap):
    run_arguments(ap, "the odeserve_models/train/train_embedding_probe.py")
    ap.add_argument("--note", default="", help="a paragraph placed before the selection log")


def main(argv=None) -> int:
    return report_main("report-probe", __doc__, argv, section, BEGIN, END, ANCHOR, arguments)
