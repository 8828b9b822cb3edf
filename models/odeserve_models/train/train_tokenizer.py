"""Train the multilingual SentencePiece model (8k unigram) on the training-split corpus
(models/data/raw/datasets/tokenizer-corpus.txt, written by `build-datasets`).

    cd models; nice -n 10 /usr/bin/python3 -m odeserve_models train-tokenizer   # -> models/work/tok/spm8k.model
"""
import os
import time

from odeserve_models.cli import parser
from odeserve_models.paths import MODELS
from odeserve_models.text import train_sentencepiece


def main(argv=None) -> int:
    parser("train-tokenizer", __doc__).parse_args(argv)
    t = time.time()
    out = train_sentencepiece(os.path.join(MODELS, "data", "raw", "datasets", "tokenizer-corpus.txt"),
                              os.path.join(MODELS, "work", "tok", "spm8k"), 8000,
                              input_sentence_size=120000, shuffle_input_sentence=True, seed_sentencepiece_size=400000,
                              max_sentence_length=8192, num_threads=2)
    print("wrote", out, "in %.0f s" % (time.time() - t))
    return 0
