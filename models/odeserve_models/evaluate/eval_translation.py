"""Evaluate translators through the served C++ path: every translation is produced by a running
odeserve (Translate over gRPC); BLEU (sacreBLEU-compatible 13a) and chrF are computed by
odeserve_models.mt_metrics on held-out DDTP en -> de pairs (split by source package).

  PYTHONPATH=models /usr/bin/python3 -m odeserve_models evaluate-translation --start build/server/odeserve \
      --model_repository models/work/mt-repo --models translate-en-de,translate-en-de-uski,translate-en-de-fixed \
      --write-quality translate-en-de=models/repository/translate-en-de

For each model: greedy BLEU/chrF on the test short descriptions at every (encoder, decoder) step
pair of --grid, beam 4 at --beam-points, paragraphs at --paragraph-points; beside them the
copy-the-source baseline. --write-quality replaces a model folder's quality.pbtxt with greedy
BLEU on the validation short descriptions measured the same way (the profile the server's step
choice ranks). Writes models/work/eval/translation.json.
"""
import json
import os
import time


from odeserve_models.cli import command_line, parser
from odeserve_models.data import translation_pairs
from odeserve_models.export import quality_text
from odeserve_models.mt_metrics import corpus_bleu, corpus_chrf
from odeserve_models.paths import MODELS
from odeserve_models.served import Served

def pairs_of(spec):
    return [tuple(int(v) for v in p.split(":")) for p in spec.split(",") if p]


def translate_all(served, model, texts, enc, dec, beam, per=32):
    pb = served.pb
    hyps, compute_s, output_tokens = [], 0.0, 0
    t0 = time.time()
    for i in range(0, len(texts), per):
        r = served.stub.Translate(pb.TranslateRequest(
            model=model, inputs=texts[i:i + per], beam_size=beam, truncate=True,
            compute=pb.ComputeOptions(steps=enc, decoder_steps=dec)), timeout=600)
        assert r.report.steps == enc and r.report.decoder_steps == dec and r.report.beam_size == beam
        hyps.extend(r.translations)
        compute_s += r.report.compute_time.ToTimedelta().total_seconds()
        output_tokens += r.report.output_tokens
    return hyps, dict(wall_s=round(time.time() - t0, 3), compute_s=round(compute_s, 3), output_tokens=output_tokens)


def score(hyps, refs):
    bleu = corpus_bleu(hyps, [refs])
    return dict(bleu=round(bleu.score, 2), chrf=round(corpus_chrf(hyps, [refs]).score, 2),
                length_ratio=round(bleu.sys_len / max(1, bleu.ref_len), 3))


def write_report(path, report):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
    print("wrote", path)


def main(argv=None) -> int:
    ap = parser("evaluate-translation", __doc__)
    ap.add_argument("--address", default="")
    ap.add_argument("--start", default="")
    ap.add_argument("--model_repository", default=os.path.join(MODELS, "repository"))
    ap.add_argument("--grpc_port", type=int, default=50081)
    ap.add_argument("--metrics_port", type=int, default=9181)
    ap.add_argument("--models", required=True)
    ap.add_argument("--grid", default="1,2,3,4,6")
    ap.add_argument("--comparison-grid", default="", help="grid for the models after the first (default --grid)")
    ap.add_argument("--beam-points", default="6:6,6:3,3:3")
    ap.add_argument("--paragraph-points", default="6:6,6:3")
    ap.add_argument("--n-paragraphs", type=int, default=400)
    ap.add_argument("--write-quality", default="", help="MODEL=FOLDER[,MODEL=FOLDER]")
    ap.add_argument("--out", default=os.path.join(MODELS, "work", "eval", "translation.json"))
    a = ap.parse_args(argv)
    grid = [int(s) for s in a.grid.split(",")]
    comparison_grid = [int(s) for s in (a.comparison_grid or a.grid).split(",")]
    test, valid = translation_pairs("test", "short"), translation_pairs("valid", "short")
    paragraphs = translation_pairs("test", "para")[:a.n_paragraphs]
    out = dict(command=command_line("evaluate-translation", argv), test_short=len(test), valid_short=len(valid),
               test_paragraphs=len(paragraphs), results=[])
    refs = [r["de"] for r in test]
    out["copy_source"] = dict(short=score([r["en"] for r in test], refs),
                              paragraphs=score([r["en"] for r in paragraphs], [r["de"] for r in paragraphs]))
    print("copy-the-source", out["copy_source"], flush=True)
    quality_targets = dict(kv.split("=", 1) for kv in a.write_quality.split(",") if kv)
    with Served(a.address, a.start, a.model_repository, a.grpc_port, a.metrics_port,
                log_path=os.path.join(MODELS, "work", "logs", "eval-translation-server.log")) as served:
        for model_index, model in enumerate(a.models.split(",")):
            info = served.models.get(model)
            model_grid = grid if model_index == 0 else comparison_grid
            assert info is not None and info.state == served.pb.READY, "%s not READY: %s" % (model, info and info.error)

            def run(dataset, rows, enc, dec, beam):
                hyps, timing = translate_all(served, model, [r["en"] for r in rows], enc, dec, beam)
                row = dict(model=model, dataset=dataset, encoder_steps=enc, decoder_steps=dec, beam=beam,
                           n=len(rows), **score(hyps, [r["de"] for r in rows]), **timing,
                           samples=[[rows[i]["en"], hyps[i], rows[i]["de"]] for i in range(3)])
                out["results"].append(row)
                print({k: v for k, v in row.items() if k != "samples"}, flush=True)
                return row

            for enc in model_grid:
                for dec in model_grid:
                    run("test-short", test, enc, dec, 1)
            for enc, dec in pairs_of(a.beam_points):
                run("test-short", test, enc, dec, 4)
            for enc, dec in pairs_of(a.paragraph_points):
                for beam in (1, 4):
                    run("test-paragraphs", paragraphs, enc, dec, beam)
            if model in quality_targets:
                points = []
                for enc in grid:
                    for dec in grid:
                        row = run("valid-short", valid, enc, dec, 1)
                        points.append(dict(solver="EULER", steps=enc, decoder_steps=dec, beam_size=1, metric="bleu",
                                           value=row["bleu"], dataset="translate-valid-en-de short (%d, served)" % len(valid)))
                path = os.path.join(quality_targets[model], "quality.pbtxt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(quality_text("bleu", points))
                print("wrote", path, flush=True)
    write_report(a.out, out)
    return 0
