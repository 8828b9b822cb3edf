"""Write the translation section of models/EVAL.md from models/work/eval/translation.json
(models/odeserve_models/evaluate/eval_translation.py). The section sits between the markers below and is replaced in
place; the rest of EVAL.md (report) is left alone.

    PYTHONPATH=models /usr/bin/python3 -m odeserve_models report-translation --served translate-en-de \
        --plain translate-en-de --uski translate-en-de-uski --fixed translate-en-de-fixed
"""
import json
import os

from odeserve_models.cli import parser, shell_line
from odeserve_models.paths import MODELS

BEGIN, END = "<!-- translation:begin -->", "<!-- translation:end -->"
# --latest: a subsection at the top of the translation section for the newest served model,
# leaving the rest of the section (earlier stages, measured then) as it is.
LATEST_BEGIN, LATEST_END = "<!-- translation-latest:begin -->", "<!-- translation-latest:end -->"


def grid_lines(res, get, model, L, half):
    """Greedy BLEU at every (encoder, decoder) step pair of `model`, then the L/2 decoder line."""
    out = []
    model_grid = sorted({r["encoder_steps"] for r in res if r["model"] == model and r["dataset"] == "test-short"})
    out.append("| enc \\ dec | " + " | ".join(str(d) for d in model_grid) + " |")
    out.append("| --- | " + " | ".join("---" for _ in model_grid) + " |")
    for e in model_grid:
        cells = []
        for d in model_grid:
            r = get(model, "test-short", e, d)
            cells.append("%.2f" % r["bleu"] if r else "-")
        out.append("| %d | %s |" % (e, " | ".join(cells)))
    out.append("")
    full, halfr = get(model, "test-short", L, L), get(model, "test-short", L, half)
    if full and halfr:
        tps = lambda r: r["output_tokens"] / max(1e-9, r["compute_s"])  # noqa: E731
        out.append("Decoder at L/2 = %d steps (encoder %d): BLEU %.2f vs %.2f at L (%+.2f); %.0f vs %.0f generated "
                   "tokens per second of server compute time over the whole test set in calls of 32 inputs, "
                   "encoder included (%.2fx)." % (half, L, halfr["bleu"], full["bleu"], halfr["bleu"] - full["bleu"],
                                                        tps(halfr), tps(full), tps(halfr) / tps(full)))
        out.append("")
    return out


def latest_section(a, ev, res, get, L, half):
    """The newest served model beside the systems of --latest (MODEL=LABEL;...), one eval run."""
    systems = [kv.split("=", 1) for kv in a.latest.split(";") if kv]
    out = [LATEST_BEGIN, "", "### Latest: `%s` (%s)" % (a.served, a.latest_date), ""]
    out.append("Measured with `%s` (test set: %d short descriptions, the first %d paragraphs)."
               % (shell_line(ev["command"].replace(MODELS + "/", "models/")), ev["test_short"], ev["test_paragraphs"]))
    out.append("")
    out.append("| system (encoder %d, decoder %d steps) | short BLEU greedy | short BLEU beam 4 | short chrF greedy "
               "| paragraphs BLEU greedy | paragraphs BLEU beam 4 | paragraphs length ratio greedy / beam 4 |" % (L, L))
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    cs = ev["copy_source"]
    out.append("| copy the source (baseline) | %.2f | - | %.2f | %.2f | - | - |"
               % (cs["short"]["bleu"], cs["short"]["chrf"], cs["paragraphs"]["bleu"]))
    fmt = lambda r, k: ("%.2f" % r[k] if k in r else "-") if r else "-"  # noqa: E731
    for model, label in systems:
        g, b = get(model, "test-short", L, L), get(model, "test-short", L, L, 4)
        pg, pb = get(model, "test-paragraphs", L, L), get(model, "test-paragraphs", L, L, 4)
        out.append("| %s (`%s`) | %s | %s | %s | %s | %s | %s / %s |" % (
            label, model, fmt(g, "bleu"), fmt(b, "bleu"), fmt(g, "chrf"), fmt(pg, "bleu"), fmt(pb, "bleu"),
            fmt(pg, "length_ratio"), fmt(pb, "length_ratio")))
    out.append("")
    out.append("**`%s`**, greedy BLEU on the test short descriptions: rows = encoder steps, columns = decoder steps." % a.served)
    out.append("")
    out += grid_lines(res, get, a.served, L, half)
    if a.latest_notes:
        out.append(a.latest_notes)
        out.append("")
    out.append(LATEST_END)
    return "\n".join(out)


def main(argv=None) -> int:
    ap = parser("report-translation", __doc__)
    ap.add_argument("--eval", default=os.path.join(MODELS, "work", "eval", "translation.json"),
                    help="evaluate-translation output; a comma list is merged (copy-source and counts from the first)")
    ap.add_argument("--served", required=True)
    ap.add_argument("--plain", default="")
    ap.add_argument("--uski", default="")
    ap.add_argument("--fixed", default="")
    ap.add_argument("--latest", default="",
                    help="MODEL=LABEL;...: write only the latest-model subsection (--served first among them) "
                         "and keep the rest of the section")
    ap.add_argument("--latest-date", default="")
    ap.add_argument("--latest-notes", default="")
    ap.add_argument("--continued", default="",
                    help="a model trained further from --plain's weights (a second stage), shown beside the equal-budget runs")
    ap.add_argument("--notes", default="", help="markdown appended to the section (training budget etc.)")
    a = ap.parse_args(argv)
    evals = [json.load(open(p, encoding="utf-8")) for p in a.eval.split(",")]
    ev = dict(evals[0], results=[r for e in evals for r in e["results"]],
              command="`; `".join(e["command"] for e in evals))
    manifest = json.load(open(os.path.join(MODELS, "data", "manifest-translation.json")))
    res = ev["results"]

    def get(model, dataset, enc, dec, beam=1):
        for r in res:
            if (r["model"], r["dataset"], r["encoder_steps"], r["decoder_steps"], r["beam"]) == (model, dataset, enc, dec, beam):
                return r
        return None

    grid = sorted({r["encoder_steps"] for r in res if r["model"] == a.served and r["dataset"] == "test-short"})
    L = max(grid)
    half = L // 2
    path = os.path.join(MODELS, "EVAL.md")
    if a.latest:
        section = latest_section(a, ev, res, get, L, half)
        text = open(path, encoding="utf-8").read()
        if LATEST_BEGIN in text:
            text = text[:text.index(LATEST_BEGIN)] + section + text[text.index(LATEST_END) + len(LATEST_END):]
        else:  # first time: before the first subsection of the translation section
            anchor = text.index("### ", text.index(BEGIN))
            text = text[:anchor] + section + "\n\n" + text[anchor:]
        open(path, "w", encoding="utf-8").write(text)
        print(section)
        return
    assert a.plain and a.uski and a.fixed, "--plain, --uski and --fixed are required for the whole section"
    files = manifest["files"]
    out = [BEGIN, "", "## Translation en -> de (`translate-en-de`), through the served C++ path", ""]
    out.append("Every figure below is BLEU (sacreBLEU-compatible: 13a tokenization, exp smoothing, our own "
               "`odeserve_models/mt_metrics.py`, checked against sacreBLEU's published values in "
               "`tests/models/test_mt_metrics.py`) or chrF (chrF2, character 6-grams) of translations produced by "
               "the running C++ server (`Translate` over gRPC), on held-out DDTP pairs of packages whose source "
               "package is in the test split. Test set: %d short descriptions, %d paragraphs evaluated "
               "(of %d). Training pairs: %d (%d short + %d aligned paragraphs). Command: `%s`."
               % (ev["test_short"], ev["test_paragraphs"], files["translate-test-en-de.jsonl"]["para"],
                  files["translate-train-en-de.jsonl"]["rows"], files["translate-train-en-de.jsonl"]["short"],
                  files["translate-train-en-de.jsonl"]["para"], shell_line(ev["command"].replace(MODELS + "/", "models/"))))
    out.append("")
    out.append("### At full steps (encoder %d, decoder %d)" % (L, L))
    out.append("")
    out.append("| system | short BLEU greedy | short BLEU beam 4 | short chrF greedy | paragraphs BLEU greedy | paragraphs BLEU beam 4 |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    cs = ev["copy_source"]
    out.append("| copy the source (baseline) | %.2f | - | %.2f | %.2f | - |" % (cs["short"]["bleu"], cs["short"]["chrf"], cs["paragraphs"]["bleu"]))
    systems = [("step-robust, plain", a.plain), ("step-robust, USKI pre-training", a.uski), ("fixed depth, plain", a.fixed)]
    if a.continued:
        systems.insert(0, ("step-robust, plain, continued training", a.continued))
    for label, model in systems:
        g, b = get(model, "test-short", L, L), get(model, "test-short", L, L, 4)
        pg, pb = get(model, "test-paragraphs", L, L), get(model, "test-paragraphs", L, L, 4)
        served = " (served as `%s`)" % a.served.split("/")[-1] if model == a.served else ""
        fmt = lambda r, k: "%.2f" % r[k] if r else "-"  # noqa: E731
        out.append("| %s%s | %s | %s | %s | %s | %s |" % (label, served, fmt(g, "bleu"), fmt(b, "bleu"), fmt(g, "chrf"),
                                                        fmt(pg, "bleu"), fmt(pb, "bleu")))
    out.append("")
    out.append("### BLEU at every (encoder steps, decoder steps), greedy, test short descriptions")
    out.append("")
    for label, model in systems:
        out.append("**%s** (`%s`): rows = encoder steps, columns = decoder steps." % (label, model))
        out.append("")
        out += grid_lines(res, get, model, L, half)
    out.append("### Samples (test set, %s, full steps, greedy)" % a.served)
    out.append("")
    out.append("| English | served translation | DDTP reference |")
    out.append("| --- | --- | --- |")
    r = get(a.served, "test-short", L, L)
    for en, hyp, ref in (r["samples"] if r else []):
        esc = lambda t: t.replace("|", "\\|")  # noqa: E731
        out.append("| %s | %s | %s |" % (esc(en), esc(hyp), esc(ref)))
    out.append("")
    if a.notes:
        out.append(a.notes)
        out.append("")
    out.append(END)
    section = "\n".join(out)
    text = open(path, encoding="utf-8").read()
    if BEGIN in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    open(path, "w", encoding="utf-8").write(text)
    print(section)
    return 0
