#!/usr/bin/env python3
"""Train the multilingual SentencePiece model (8k unigram) on the training-split corpus.
    /usr/bin/python3 models/train/train_tokenizer.py   -> models/work/tok/spm8k.model"""
import os, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from odeserve_models.text import train_sentencepiece  # noqa: E402

t = time.time()
out = train_sentencepiece(os.path.join(HERE, "..", "data", "raw", "datasets", "tokenizer-corpus.txt"),
                          os.path.join(HERE, "..", "work", "tok", "spm8k"), 8000,
                          input_sentence_size=120000, shuffle_input_sentence=True, seed_sentencepiece_size=400000,
                          max_sentence_length=8192, num_threads=2)
print("wrote", out, "in %.0f s" % (time.time() - t))
