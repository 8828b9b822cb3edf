"""Export a trained translator (models/odeserve_models/train/train_translation.py) as a model folder of the
artifact contract: model.pt (TorchScript), config.pbtxt, tokenizer.model, quality.pbtxt.

    PYTHONPATH=models /usr/bin/python3 -m odeserve_models export-translation --run models/work/runs/mt-robust \
        --name translate-en-de --out models/repository

quality.pbtxt is measured here, in Python, with the server's search (beam_search, greedy) on
--profile-rows validation short descriptions at every (encoder, decoder) step pair of
--profile-steps: corpus BLEU (odeserve_models.mt_metrics). models/odeserve_models/evaluate/eval_translation.py later
replaces it with the same measurement through the running C++ server on the whole validation
set (--write-quality).
"""
import os

import torch

from odeserve_models.cli import parser, pin_hash_seed
from odeserve_models.data import translation_pairs
from odeserve_models.export import config_text, export_model, quality_text
from odeserve_models.mt_metrics import corpus_bleu
from odeserve_models.paths import ROOT
from odeserve_models.text import Tokenizer
from odeserve_models.translation import SharedTranslator, beam_search
from odeserve_models.verify import verify_model_dir

MAX_SOURCE_TOKENS = 128
MAX_BEAM_SIZE = 8


def load_run(run_dir):
    path = os.path.join(run_dir, "final.pt")
    ck = torch.load(path if os.path.exists(path) else os.path.join(run_dir, "last.pt"))
    a = ck["args"]
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=a["tokenizer"])
    model = SharedTranslator(sp.vocab_size(), a["hidden"], a["heads"], a["ffn"], a["encoder_depth"],
                             a["decoder_depth"], a["max_len"], sp.pad_id(), sp.bos_id(), sp.eos_id())
    model.load_state_dict(ck["model"])
    return model.eval(), sp, a, ck.get("step")


@torch.no_grad()
def translate(model, tok, texts, enc, dec, beam=1, batch=32):
    """The server's tokenization (Tokenizer.batch: bos, truncation, eos, padding) and search."""
    out = []
    for i in range(0, len(texts), batch):
        x, mask = tok.batch(texts[i:i + batch])
        limits = [0] * x.size(0)  # 0: the server's default output limit per row
        out += [tok.sp.decode(ids) for ids, _ in beam_search(model, x, mask, enc, dec, beam, limits)]
    return out


def expected_output_ratio(sp):
    src = tgt = 0
    for r in translation_pairs("train"):
        src += len(sp.encode(r["en"]))
        tgt += len(sp.encode(r["de"]))
    return tgt / src


def main(argv=None) -> int:
    ap = parser("export-translation", __doc__)
    ap.add_argument("--run", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--description", default="")
    ap.add_argument("--profile-rows", type=int, default=300)
    ap.add_argument("--profile-steps", default="1,2,3,4,6")
    ap.add_argument("--compute-precision", default="FLOAT32", choices=["FLOAT32", "BFLOAT16"],
                    help="config.pbtxt compute_precision (the server's bfloat16 autocast option)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--exact-logit-candidates", type=int, default=2 * MAX_BEAM_SIZE,
                    help="0: float32 vocabulary projection; K: bfloat16 ranking, the K best logits of "
                         "each row recomputed in float32 (K >= 2 x max_beam_size keeps every search "
                         "candidate exact)")
    ap.add_argument("--length-penalty", type=float, default=1.0,
                    help="config translation.length_penalty: beam search ranks finished hypotheses by "
                         "log-prob / tokens ^ this (chosen on validation data: models/odeserve_models/evaluate/tune_length_penalty.py)")
    a = ap.parse_args(argv)
    pin_hash_seed("export-translation", argv)  # byte-identical TorchScript from run to run
    torch.set_num_threads(a.threads)
    model, sp, targs, step = load_run(a.run)
    for p in model.parameters():
        p.requires_grad_(False)
    # The profile is measured with the projection the server will run (prepare() at load).
    model.exact_logit_candidates = a.exact_logit_candidates
    model.prepare()
    L, Ld = targs["encoder_depth"], targs["decoder_depth"]
    steps = [int(s) for s in a.profile_steps.split(",")]
    valid = translation_pairs("valid", "short")[:a.profile_rows]
    tok = Tokenizer(targs["tokenizer"], MAX_SOURCE_TOKENS)
    refs = [r["de"] for r in valid]
    points = []
    for enc in steps:
        for dec in steps:
            hyps = translate(model, tok, [r["en"] for r in valid], enc, dec)
            bleu = corpus_bleu(hyps, [refs]).score
            points.append(dict(solver="EULER", steps=enc, decoder_steps=dec, beam_size=1, metric="bleu",
                               value=bleu, dataset="translate-valid-en-de short[:%d] (Python search)" % len(valid)))
            print("profile enc=%d dec=%d BLEU %.2f" % (enc, dec, bleu), flush=True)
    ratio = expected_output_ratio(sp)
    mode = "step-robust (encoder and decoder steps sampled per batch)" if targs["steps_mode"] == "robust" \
        else "fixed depth (always L steps)"
    uski = " after USKI key-token pre-training on %d%% of the steps" % round(100 * targs["uski_fraction"]) \
        if targs["uski_fraction"] > 0 else ""
    description = a.description or (
        "Parameter-shared encoder-decoder en->de: one shared pre-LN encoder block (L=%d) and one shared "
        "decoder block (self-attention with a KV cache per step index, cross-attention, FFN; L=%d), "
        "tied 8k SentencePiece embeddings, H=%d, %d heads, FFN %d; trained %s%s on DDTP en->de short "
        "descriptions and aligned paragraphs (%d optimizer steps%s)"
        % (L, Ld, targs["hidden"], targs["heads"], targs["ffn"], mode, uski, step or -1,
           ", continuing the weights of %s under a new schedule" % os.path.basename(os.path.dirname(targs["init"]))
           if targs.get("init") else ""))
    cfg = config_text(a.name, model, "TRANSLATION", description, MAX_SOURCE_TOKENS,
                      steps=(1, 2 * L, L), solvers=("EULER",), languages=["en", "de"],
                      batching=dict(max_batch_size=32, max_batch_tokens=4096, max_queue_delay_us=2000,
                                    max_queue_size=256),
                      max_inputs_per_request=32,
                      translation=dict(decoder_trained_depth=Ld, decoder_steps=(1, 2 * Ld, Ld),
                                       max_output_tokens=targs["max_len"], source_language="en",
                                       target_language="de", expected_output_ratio=ratio,
                                       max_beam_size=MAX_BEAM_SIZE, length_penalty=a.length_penalty),
                      compute_precision=a.compute_precision)
    model.projection_bf16 = torch.zeros(0, dtype=torch.bfloat16)  # made again by prepare() at load
    d = export_model(a.out, a.name, model, targs["tokenizer"], cfg, quality_text("bleu", points))
    print("\n".join(verify_model_dir(d, [r["en"] for r in valid[:8]],
                                     proto_root=os.path.join(ROOT, "proto"))))
    print("exported", d, "size", sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)))
    return 0
