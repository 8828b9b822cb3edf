"""Choose a translator's beam-search length penalty on validation data.

Beam search ranks finished hypotheses by log-probability / length ** alpha (alpha =
translation.length_penalty in config.pbtxt; 1.0 is the plain per-token mean). This runs the
server's search (odeserve_models.translation.beam_search, the Python mirror that the e2e parity
test holds to the C++ search) with beam --beam at --steps on validation short descriptions and
paragraphs for each alpha of --alphas, and prints corpus BLEU, chrF and the hypothesis/reference
length ratio next to greedy, as JSON lines. Test data is never read.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=models /usr/bin/python3 -m odeserve_models tune-length-penalty \
        --model models/repository/translate-en-de --alphas 1.0,1.2,1.4,1.6
"""
import json
import os
import time


import torch

from odeserve_models.cli import parser
from odeserve_models.data import translation_pairs
from odeserve_models.mt_metrics import corpus_bleu, corpus_chrf
from odeserve_models.text import Tokenizer
from odeserve_models.translation import SharedTranslator, beam_search, exported_weights

MAX_SOURCE_TOKENS = 128  # the served model's max_sequence_length


def load_exported(folder):
    """The Python translator with an exported folder's weights and its served logit setting."""
    tok = Tokenizer(os.path.join(folder, "tokenizer.model"), MAX_SOURCE_TOKENS)
    sp = tok.sp
    scripted = torch.jit.load(os.path.join(folder, "model.pt"))
    state = scripted.state_dict()
    hidden = state["embedding"].size(1)
    heads = int(scripted.num_heads)
    model = SharedTranslator(sp.vocab_size(), hidden, heads, int(scripted.ffn_size),
                             int(scripted.encoder_depth), int(scripted.decoder_depth),
                             state["enc_pos"].size(0), sp.pad_id(), sp.bos_id(), sp.eos_id())
    model.load_state_dict(exported_weights(scripted, model))
    model.exact_logit_candidates = int(scripted.exact_logit_candidates)
    model.eval().prepare()
    return model, tok


@torch.no_grad()
def translate(model, tok, texts, enc, dec, beam, alpha, batch=32):
    out = []
    for i in range(0, len(texts), batch):
        x, mask = tok.batch(texts[i:i + batch])
        found = beam_search(model, x, mask, enc, dec, beam, [0] * x.size(0), length_penalty=alpha)
        out += [tok.sp.decode(ids) for ids, _ in found]
    return out


def main(argv=None) -> int:
    ap = parser("tune-length-penalty", __doc__)
    ap.add_argument("--model", required=True, help="an exported translator folder")
    ap.add_argument("--alphas", default="1.0,1.2,1.4,1.6")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--steps", default="6:6", help="encoder:decoder steps")
    ap.add_argument("--n-short", type=int, default=400)
    ap.add_argument("--n-paragraphs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model, tok = load_exported(a.model)
    enc, dec = (int(v) for v in a.steps.split(":"))
    sets = {"valid-short": translation_pairs("valid", "short")[:a.n_short],
            "valid-paragraphs": translation_pairs("valid", "para")[:a.n_paragraphs]}
    runs = [("greedy", 1, 1.0)] + [("beam", a.beam, float(v)) for v in a.alphas.split(",")]
    for name, rows in sets.items():
        refs = [r["de"] for r in rows]
        for search, beam, alpha in runs:
            t0 = time.time()
            hyps = translate(model, tok, [r["en"] for r in rows], enc, dec, beam, alpha)
            bleu = corpus_bleu(hyps, [refs])
            print(json.dumps(dict(set=name, rows=len(rows), search=search, beam=beam, length_penalty=alpha,
                                  bleu=round(bleu.score, 2), chrf=round(corpus_chrf(hyps, [refs]).score, 2),
                                  length_ratio=round(bleu.sys_len / max(1, bleu.ref_len), 3),
                                  seconds=round(time.time() - t0, 1))), flush=True)
    return 0
