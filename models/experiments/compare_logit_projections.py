#!/usr/bin/python3
"""How often the translator's two vocabulary projections (docs/MODEL_CONTRACT.md: the bfloat16
shortlist, exact_logit_candidates = K, and the exact float32 projection, 0) give the same
translation: the server runs the float32 one on CPUs without native bfloat16. Runs the Python
mirror of the server's search (odeserve_models.translation.beam_search, length_penalty 1) on the
first --n texts of a file, one text per call, at the model's full steps, greedy and beam 4, with
each projection.

  OPENBLAS_NUM_THREADS=1 PYTHONPATH=models /usr/bin/python3 -m experiments.compare_logit_projections \\
      --model models/repository/translate-en-de --texts tests/fixtures/descriptions-sample.txt --n 100
"""
import argparse
import sys

import torch

from odeserve_models.translation import beam_search, default_max_output_tokens
from odeserve_models.verify import load_model_dir


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/repository/translate-en-de", help="model folder")
    ap.add_argument("--texts", default="tests/fixtures/descriptions-sample.txt", help="one text a line")
    ap.add_argument("--n", type=int, default=100, help="texts to translate")
    return ap.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    cfg, tok, module = load_model_dir(args.model)
    exported = int(module.exact_logit_candidates)
    if exported == 0:
        sys.exit("%s has no shortlist (exact_logit_candidates 0)" % args.model)
    texts = [line.strip() for line in open(args.texts, encoding="utf-8") if line.strip()][: args.n]
    enc, dec = cfg["trained_depth"], module.decoder_depth
    with torch.inference_mode():
        for beam in (1, 4):
            outputs = {}
            for k in (exported, 0):
                module.exact_logit_candidates = k
                outputs[k] = []
                for text in texts:
                    x, mask = tok.batch([text])
                    limit = default_max_output_tokens(x.size(1), cfg["max_len"])
                    (ids, score), = beam_search(module, x, mask, enc, int(dec), beam, [limit])
                    outputs[k].append((ids, score))
            same = sum(a[0] == b[0] for a, b in zip(outputs[exported], outputs[0]))
            worst = max((abs(a[1] - b[1]) for a, b in zip(outputs[exported], outputs[0]) if a[0] == b[0]),
                        default=0.0)
            print("beam %d: %d of %d translations identical (shortlist K=%d vs float32); "
                  "largest score difference among them %.2e" % (beam, same, len(texts), exported, worst))


if __name__ == "__main__":
    main()
