"""Train a small ALBERT whose quality rises with its ODE steps; write it as a Hugging Face checkpoint.

The model is Hugging Face's ALBERT (post-LN, one shared layer, `AlbertForSequenceClassification`)
with nothing added: the same module names, so `state_dict()` keys are HF's keys. Read as an ODE,
one layer is one Euler step of dt = 1 of the field `layer(h) - h`; a call may run n steps of
dt = L/n, `h <- h + (L/n) * (layer(h) - h)`, and n = L is exactly the L-layer ALBERT.

Two phases, time-budgeted (`--max-minutes` covers everything, setup and final write included):

1. Masked-LM pre-training (`--pretrain-frac` of the training time, default 0.4) on every distinct
   description of the training split in every DDTP language (English + 13 translations): 15% of
   the pieces masked BERT-style ([MASK] 80%, random piece 10%, unchanged 10%), predicted by HF's
   `AlbertMLMHead` (dense, gelu_new, LayerNorm, decoder tied to the word embeddings), at n = L.
2. Fine-tuning for Debian section classification (28 labels, English training split), depth-first
   and step-robust: every batch takes the cross-entropy at n = L (what the model is trained for);
   one smaller n per batch, drawn from `--small-steps` (default 1, 2, L/2), is trained toward the
   detached L-step result: T^2 KL(softmax(z_L / T) || softmax(z_n / T)) on the logits
   (`--kd-weight`, `--kd-temp`) plus `--mse-weight` times the mean squared distance of its final
   token states to the L-step ones, their weight ramped up over the first `--robust-ramp` steps.
   Fewer steps approximate L; nothing asks L to approximate them.
   `--recipe sampled` fine-tunes instead as `train` does (one n per batch, cross-entropy at n):
   the comparison at equal wall-clock. Fork one pre-trained checkpoint for it: run with
   `--stop-after-pretraining`, copy the --out folder, then resume each copy with its --recipe
   and the same --max-minutes.

Tokenizer: a SentencePiece unigram model trained here on the same multilingual training split, in
ALBERT's layout (<pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4 as control symbols, nmt_nfkc), on
text preprocessed as HF's AlbertTokenizer does (whitespace collapsed, `` and '' -> ", NFKD with
accents stripped, lower-cased); inputs are [CLS] pieces [SEP], truncated to --max-len.

Output, in --out (default models/work/albert):
  ckpt.pt         resumable checkpoint (every --ckpt-minutes, at the phase switch and at the end)
  hf/             the HF folder, rewritten at every checkpoint: config.json, pytorch_model.bin,
                  spiece.model, tokenizer_config.json, special_tokens_map.json, and
                  odeserve_training.json (phase, steps, data counts, validation accuracy by steps)
  hf-mlm/         AlbertForMaskedLM folder of the pre-trained encoder (written at the phase switch)
  spiece.model, tokens.pt   the tokenizer and the tokenized corpus (cached for --resume)
Progress: --log (default models/work/logs/train_albert.log): step, losses, lr, elapsed; validation
accuracy at n = 1, 2, L/2, L on --val-rows English validation descriptions at every evaluation
(masked-piece accuracy during pre-training).

Run (from models/; 1 thread, lowest priority, in the background):

  cd models && mkdir -p work/logs && OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 nohup nice -n 19 \\
      /usr/bin/python3 -m odeserve_models train-albert --max-minutes 128 > work/logs/train_albert.out 2>&1 &
  echo 19 > /proc/$!/autogroup   # nice alone does not yield to builds started from another session

(Linux schedules each session's autogroup fairly before nice is looked at, so a job niced in
one shell still takes a full core from a build started in another; the autogroup's own nice
value fixes that.)

Resume after an interruption (the same command with --resume; --max-minutes then counts from the
new start, and the remaining plan of both phases is shrunk proportionally if it no longer fits;
training settings given on the command line, e.g. --lr, replace the checkpoint's):

  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 nohup nice -n 19 /usr/bin/python3 -m odeserve_models train-albert \\
      --resume --max-minutes 60 > work/logs/train_albert.out 2>&1 &

Check an HF folder against an independent functional re-implementation of HF's ALBERT forward
(sequential layers, read only from the folder's files):

  /usr/bin/python3 -m odeserve_models train-albert --check-hf work/albert/hf

Smoke test (about a minute, tiny sizes, a separate folder):

  /usr/bin/python3 -m odeserve_models train-albert --out work/albert-smoke --log work/logs/albert-smoke.log \\
      --max-minutes 1 --reserve-minutes 0.2 --corpus-limit 3000 --vocab 1000 --emb 32 --hidden 64 --ffn 128 --heads 2 \\
      --depth 4 --max-len 64 --val-rows 100 --eval-minutes 0.2 --ckpt-minutes 0.3

Data: models/data/raw/datasets (python3 -m odeserve_models fetch-data; python3 -m odeserve_models build-datasets).
"""
import argparse
import collections
import json
import math
import os
import random
import shutil
import signal
import time


import numpy as np
import sentencepiece as spm
import torch
import torch.nn as nn
import torch.nn.functional as F

from odeserve_models.albert.tokenization import preprocess_text, split_digit_comma
from odeserve_models.cpu import autocast_enabled
from odeserve_models.data import load_jsonl
from odeserve_models.mlm import mask_sequences
from odeserve_models.paths import DATA_DIR, WORK
from odeserve_models.progress import progress_log

PAIR_LANGS = ["de", "fr", "it", "da", "es", "pt", "ru", "pl", "ja", "cs", "nl", "fi", "sv"]
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
PER_INVOCATION = ("resume", "check_hf", "max_minutes", "reserve_minutes", "log", "out", "stop_after_pretraining",
                  "pretrain_minutes")
FIXED_ON_RESUME = ("vocab", "emb", "hidden", "heads", "ffn", "depth", "max_len", "corpus_limit", "spm_sentences",
                   "spm_max_chars", "val_rows", "seed", "pretrain_frac")
TOKENIZER_CONFIG = {"do_lower_case": True, "keep_accents": False, "remove_space": True,
                    "tokenizer_class": "AlbertTokenizer"}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(WORK, "albert"))
    ap.add_argument("--log", default=os.path.join(WORK, "logs", "train_albert.log"))
    ap.add_argument("--resume", action="store_true", help="continue from <out>/ckpt.pt")
    ap.add_argument("--check-hf", default="", metavar="DIR",
                    help="only check an HF folder against the functional reference forward, then exit")
    # time
    ap.add_argument("--max-minutes", type=float, default=130, help="wall clock of this invocation, all included")
    ap.add_argument("--pretrain-frac", type=float, default=0.4, help="share of the training time for masked-LM")
    ap.add_argument("--reserve-minutes", type=float, default=4, help="kept for the final evaluation and write")
    ap.add_argument("--ckpt-minutes", type=float, default=10)
    ap.add_argument("--eval-minutes", type=float, default=6, help="validation every so often (and at checkpoints)")
    # model (HF AlbertConfig names in comments)
    ap.add_argument("--vocab", type=int, default=8000, help="vocab_size (SentencePiece pieces)")
    ap.add_argument("--emb", type=int, default=128, help="embedding_size")
    ap.add_argument("--hidden", type=int, default=256, help="hidden_size")
    ap.add_argument("--heads", type=int, default=4, help="num_attention_heads")
    ap.add_argument("--ffn", type=int, default=1024, help="intermediate_size")
    ap.add_argument("--depth", type=int, default=8, help="num_hidden_layers = L")
    ap.add_argument("--max-len", type=int, default=128, help="max_position_embeddings and the input window")
    ap.add_argument("--classifier-dropout", type=float, default=0.1, help="classifier_dropout_prob")
    # data and tokenizer
    ap.add_argument("--corpus-limit", type=int, default=0, help="use only this many texts (smoke tests)")
    ap.add_argument("--spm-sentences", type=int, default=150000, help="SentencePiece input_sentence_size")
    ap.add_argument("--spm-max-chars", type=int, default=1500, help="texts cut to this many characters for SentencePiece")
    ap.add_argument("--val-rows", type=int, default=600, help="English validation descriptions evaluated")
    # pre-training
    ap.add_argument("--pretrain-batch", type=int, default=64)
    ap.add_argument("--pretrain-lr", type=float, default=1e-3)
    ap.add_argument("--pretrain-warmup", type=int, default=100)
    ap.add_argument("--mask-prob", type=float, default=0.15)
    # fine-tuning
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--small-steps", default="", help="comma list of n < L trained toward n = L (default 1,2,L/2)")
    ap.add_argument("--kd-weight", type=float, default=1.0)
    ap.add_argument("--kd-temp", type=float, default=1.0)
    ap.add_argument("--mse-weight", type=float, default=0.1)
    ap.add_argument("--recipe", default="depth-first", choices=["depth-first", "sampled"],
                    help="fine-tuning: depth-first (above), or sampled, the recipe of `train` (odeserve_models/train/"
                         "train.py) for the comparison at equal wall-clock: one n per batch, n = L with "
                         "--p-full, else 1..L-1 weighted 1/n, cross-entropy at n only")
    ap.add_argument("--p-full", type=float, default=0.3, help="sampled recipe: P(n = L)")
    ap.add_argument("--stop-after-pretraining", action="store_true",
                    help="save and exit at the switch to fine-tuning (fork the checkpoint there to compare recipes)")
    ap.add_argument("--pretrain-minutes", type=float, default=0,
                    help="on --resume in pre-training: end pre-training after this many of its minutes in all "
                         "(replaces the checkpoint's plan; the learning-rate schedule follows the new length)")
    ap.add_argument("--robust-ramp", type=int, default=200,
                    help="fine-tuning steps over which the small-step terms' weight grows from 0 to --kd-weight "
                         "(they would otherwise pull toward a trivial field before the L-step classifier has learnt anything)")
    # misc
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--amp", type=int, default=-1, help="bf16 autocast: 1 on, 0 off, -1 where bfloat16 is native")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=20)
    a = ap.parse_args(argv)
    if a.small_steps:
        a.small_steps = sorted({int(s) for s in a.small_steps.split(",")})
    else:
        a.small_steps = sorted({1, 2, max(1, a.depth // 2)})
    a.small_steps = [n for n in a.small_steps if 1 <= n < a.depth]
    return a


def resumed_plan(budget, elapsed, phase, available, pretrain_seconds=0.0, stop_after_pretraining=False):
    """The phases' time budgets (seconds) for a resumed run, and the factor its remaining plan was
    shrunk by (1.0: it fits). `pretrain_seconds` > 0 replaces pre-training's total while in it.
    The phases this invocation runs (pre-training only with `stop_after_pretraining`; fine-tuning
    only once in it) are shrunk proportionally to fit `available`; the others keep their plan."""
    budget = dict(budget)
    if pretrain_seconds > 0 and phase == "pretrain":
        budget["pretrain"] = max(elapsed["pretrain"], pretrain_seconds)
    left = {p: max(0.0, budget[p] - elapsed[p]) for p in ("pretrain", "finetune")}
    if phase == "finetune":
        left["pretrain"] = 0.0
    if stop_after_pretraining:
        left["finetune"] = 0.0  # not run by this invocation: its plan is shrunk when it is
    if sum(left.values()) <= available:
        return budget, 1.0
    scale = max(0.0, available) / sum(left.values())
    for p in (p for p in left if left[p] > 0):
        budget[p] = elapsed[p] + scale * left[p]
    return budget, scale


# ----------------------------------------------------------------------------------------------
# Tokenization as HF's AlbertTokenizer (do_lower_case, keep_accents False, remove_space)

class AlbertPieces:
    """[CLS] pieces [SEP] ids of a text, as AlbertTokenizer(text, truncation=True, max_length)."""

    def __init__(self, model_file: str, max_len: int):
        self.sp = spm.SentencePieceProcessor(model_file=model_file)
        self.max_len = max_len

    def pieces(self, text: str, limit: int = 0):
        """AlbertTokenizer._tokenize (its split of pieces like "12," into "12" ","); only the
        first `limit` pieces are produced when limit > 0 (later ones cannot change them)."""
        pieces = split_digit_comma(self.sp, self.sp.encode(preprocess_text(text), out_type=str))
        return pieces[:limit] if limit else pieces

    def ids(self, text: str):
        room = self.max_len - 2
        return [CLS] + [self.sp.piece_to_id(p) for p in self.pieces(text, room)] + [SEP]


def train_spiece(texts, prefix: str, vocab: int, sentences: int, max_chars: int, say) -> str:
    """ALBERT's piece layout: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4, no bos/eos, nmt_nfkc."""
    corpus = prefix + ".corpus.txt"
    with open(corpus, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(preprocess_text(t)[:max_chars] + "\n")
    t0 = time.time()
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=vocab, model_type="unigram",
        character_coverage=0.9995, normalization_rule_name="nmt_nfkc",
        pad_id=PAD, unk_id=UNK, bos_id=-1, eos_id=-1, pad_piece="<pad>", unk_piece="<unk>",
        control_symbols=["[CLS]", "[SEP]", "[MASK]"], input_sentence_size=sentences,
        shuffle_input_sentence=True, max_sentence_length=8192, num_threads=1, minloglevel=2,
        hard_vocab_limit=False)
    os.remove(corpus)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    layout = [sp.id_to_piece(i) for i in range(5)]
    if layout != ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"] or not all(sp.is_control(i) for i in (0, 2, 3, 4)):
        raise RuntimeError("unexpected SentencePiece layout %s" % layout)
    say("trained SentencePiece: %d pieces in %.0fs" % (sp.get_piece_size(), time.time() - t0))
    return prefix + ".model"


# ----------------------------------------------------------------------------------------------
# HF ALBERT, module for module (state_dict keys are HF's), with the Euler integration

def gelu_new(x):
    return F.gelu(x, approximate="tanh")


class AlbertEmbeddings(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.word_embeddings = nn.Embedding(a.vocab, a.emb, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(a.max_len, a.emb)
        self.token_type_embeddings = nn.Embedding(2, a.emb)
        self.LayerNorm = nn.LayerNorm(a.emb, eps=1e-12)

    def forward(self, ids):
        T = ids.size(1)
        e = self.word_embeddings(ids) + self.position_embeddings.weight[:T] + self.token_type_embeddings.weight[0]
        return self.LayerNorm(e)


class AlbertAttention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.heads = a.heads
        self.query, self.key, self.value, self.dense = (nn.Linear(a.hidden, a.hidden) for _ in range(4))
        self.LayerNorm = nn.LayerNorm(a.hidden, eps=1e-12)

    def forward(self, h, bias):
        B, T, H = h.shape
        d = H // self.heads

        def split(x):
            return x.view(B, T, self.heads, d).transpose(1, 2)

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d) + bias
        ctx = (scores.float().softmax(-1).to(v.dtype) @ v).transpose(1, 2).reshape(B, T, H)
        return self.LayerNorm(h + self.dense(ctx).float())


class AlbertLayer(nn.Module):
    """HF AlbertLayer: a = LN(h + dense(attn(h))); h' = full_layer_layer_norm(ffn_output(gelu_new(ffn(a))) + a)."""

    def __init__(self, a):
        super().__init__()
        self.full_layer_layer_norm = nn.LayerNorm(a.hidden, eps=1e-12)
        self.attention = AlbertAttention(a)
        self.ffn = nn.Linear(a.hidden, a.ffn)
        self.ffn_output = nn.Linear(a.ffn, a.hidden)

    def forward(self, h, bias):
        att = self.attention(h, bias).float()
        return self.full_layer_layer_norm(self.ffn_output(gelu_new(self.ffn(att))).float() + att).float()


class AlbertLayerGroup(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.albert_layers = nn.ModuleList([AlbertLayer(a)])


class AlbertTransformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embedding_hidden_mapping_in = nn.Linear(a.emb, a.hidden)
        self.albert_layer_groups = nn.ModuleList([AlbertLayerGroup(a)])


class AlbertModel(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embeddings = AlbertEmbeddings(a)
        self.encoder = AlbertTransformer(a)
        self.pooler = nn.Linear(a.hidden, a.hidden)


class AlbertMLMHead(nn.Module):
    """HF AlbertMLMHead; the decoder's weight is the word embedding table (tied), its bias `bias`."""

    def __init__(self, a):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(a.emb, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(a.vocab))
        self.dense = nn.Linear(a.hidden, a.emb)


class AlbertOde(nn.Module):
    """AlbertForSequenceClassification (+ the MLM head `predictions`, used only in pre-training)."""

    def __init__(self, a, num_labels: int):
        super().__init__()
        self.depth = a.depth
        self.albert = AlbertModel(a)
        self.classifier = nn.Linear(a.hidden, num_labels)
        self.predictions = AlbertMLMHead(a)
        self.classifier_dropout = a.classifier_dropout
        for m in self.modules():  # HF AlbertPreTrainedModel._init_weights, initializer_range 0.02
            if isinstance(m, nn.Linear):
                m.weight.data.normal_(0.0, 0.02)
                m.bias.data.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.data.normal_(0.0, 0.02)
                if m.padding_idx is not None:
                    m.weight.data[m.padding_idx].zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.data.fill_(1.0)
                m.bias.data.zero_()

    @property
    def layer(self) -> AlbertLayer:
        return self.albert.encoder.albert_layer_groups[0].albert_layers[0]

    def input_stage(self, ids):
        return self.albert.encoder.embedding_hidden_mapping_in(self.albert.embeddings(ids)).float()

    @staticmethod
    def mask_bias(mask):
        return ((1.0 - mask) * -1e9)[:, None, None, :]

    def integrate(self, h, bias, n: int):
        """n Euler steps of dt = L/n of the field layer(h) - h (n = L: h <- layer(h), the L-layer ALBERT)."""
        if n == self.depth:
            for _ in range(n):
                h = self.layer(h, bias)
            return h
        dt = self.depth / n
        for _ in range(n):
            h = h + dt * (self.layer(h, bias) - h)
        return h

    def classify(self, h, dropout: bool = False):
        pooled = torch.tanh(self.albert.pooler(h[:, 0]))
        if dropout and self.classifier_dropout > 0:
            pooled = F.dropout(pooled, self.classifier_dropout, training=True)
        return self.classifier(pooled).float()

    def mlm_logits(self, states):
        p = self.predictions
        z = p.LayerNorm(gelu_new(p.dense(states)).float())
        return (z @ self.albert.embeddings.word_embeddings.weight.t().to(z.dtype)).float() + p.bias

    def classifier_state_dict(self):
        return collections.OrderedDict((k, v.detach().clone().contiguous()) for k, v in self.state_dict().items()
                                       if not k.startswith("predictions."))

    def mlm_state_dict(self):
        sd = collections.OrderedDict((k, v.detach().clone().contiguous()) for k, v in self.state_dict().items()
                                     if not k.startswith("classifier."))
        sd["predictions.decoder.weight"] = self.albert.embeddings.word_embeddings.weight.detach().clone()
        sd["predictions.decoder.bias"] = self.predictions.bias.detach().clone()
        return sd


# ----------------------------------------------------------------------------------------------
# The HF folder, and an independent check of it

def hf_config(a, vocab: int, labels, architecture: str):
    cfg = collections.OrderedDict(
        architectures=[architecture], model_type="albert", vocab_size=vocab, embedding_size=a.emb,
        hidden_size=a.hidden, num_hidden_layers=a.depth, num_hidden_groups=1, num_attention_heads=a.heads,
        intermediate_size=a.ffn, inner_group_num=1, hidden_act="gelu_new", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, max_position_embeddings=a.max_len, type_vocab_size=2,
        initializer_range=0.02, layer_norm_eps=1e-12, classifier_dropout_prob=a.classifier_dropout,
        position_embedding_type="absolute", pad_token_id=PAD, bos_token_id=CLS, eos_token_id=SEP,
        torch_dtype="float32")
    if architecture == "AlbertForSequenceClassification":
        cfg["id2label"] = {str(i): l for i, l in enumerate(labels)}
        cfg["label2id"] = {l: i for i, l in enumerate(labels)}
        cfg["problem_type"] = "single_label_classification"
    return cfg


def write_hf_folder(folder, state_dict, config, spiece, info):
    """Written beside, then swapped in, so a reader never sees a half-written folder."""
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    torch.save(state_dict, os.path.join(tmp, "pytorch_model.bin"))
    shutil.copyfile(spiece, os.path.join(tmp, "spiece.model"))
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump(dict(TOKENIZER_CONFIG, model_max_length=config["max_position_embeddings"]), f, indent=2)
        f.write("\n")
    with open(os.path.join(tmp, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "<unk>", "sep_token": "[SEP]",
                   "pad_token": "<pad>", "cls_token": "[CLS]", "mask_token": "[MASK]"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(tmp, "odeserve_training.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    old = folder + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(folder):
        os.rename(folder, old)
    os.rename(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def hf_reference_logits(folder, texts, steps=None):
    """Classifier logits of an HF ALBERT folder, written from HF's modeling_albert.py as plain
    functions of the stored tensors (no module of this script): L sequential layers, or, with
    `steps`, Euler steps of dt = L/steps of layer(h) - h. float32, one text at a time. The pieces
    are AlbertTokenizer's (AlbertPieces: HF's preprocessing and its split of pieces like "12,");
    their ids are looked up in the folder's spiece.model, [CLS] and [SEP] by name."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    W = torch.load(os.path.join(folder, "pytorch_model.bin"), map_location="cpu")
    tcfg = json.load(open(os.path.join(folder, "tokenizer_config.json")))
    assert tcfg["do_lower_case"] and not tcfg["keep_accents"] and tcfg["remove_space"]
    sp = spm.SentencePieceProcessor(model_file=os.path.join(folder, "spiece.model"))
    eps, H, nh, L = cfg["layer_norm_eps"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    p = "albert.encoder.albert_layer_groups.0.albert_layers.0."

    def lin(x, name):
        return x @ W[name + ".weight"].t() + W[name + ".bias"]

    def ln(x, name):
        return F.layer_norm(x, [x.size(-1)], W[name + ".weight"], W[name + ".bias"], eps)

    def layer(h):
        T = h.size(0)
        q, k, v = (lin(h, p + "attention." + s).view(T, nh, H // nh).transpose(0, 1) for s in ("query", "key", "value"))
        ctx = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(H // nh), -1) @ v
        att = ln(h + lin(ctx.transpose(0, 1).reshape(T, H), p + "attention.dense"), p + "attention.LayerNorm")
        x = lin(att, p + "ffn")
        x = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        return ln(lin(x, p + "ffn_output") + att, p + "full_layer_layer_norm")

    pieces_of = AlbertPieces(os.path.join(folder, "spiece.model"), cfg["max_position_embeddings"]).pieces
    out = []
    for text in texts:
        pieces = pieces_of(text)[:cfg["max_position_embeddings"] - 2]
        ids = torch.tensor([sp.piece_to_id("[CLS]")] + [sp.piece_to_id(x) for x in pieces] + [sp.piece_to_id("[SEP]")])
        e = (W["albert.embeddings.word_embeddings.weight"][ids] + W["albert.embeddings.position_embeddings.weight"][:len(ids)]
             + W["albert.embeddings.token_type_embeddings.weight"][0])
        h = lin(ln(e, "albert.embeddings.LayerNorm"), "albert.encoder.embedding_hidden_mapping_in")
        if steps is None:
            for _ in range(L):
                h = layer(h)
        else:
            for _ in range(steps):
                h = h + (L / steps) * (layer(h) - h)
        out.append(lin(torch.tanh(lin(h[0], "albert.pooler")), "classifier"))
    return torch.stack(out), cfg


def check_hf(folder):
    texts = [r["text"] for r in load_jsonl("sections-valid-en.jsonl", limit=8)]
    texts.append("Ein  Paket mit ``Umlauten'': Grüße, café, 1,5 MB, 12, 13,")
    ref, cfg = hf_reference_logits(folder, texts)
    a = argparse.Namespace(vocab=cfg["vocab_size"], emb=cfg["embedding_size"], hidden=cfg["hidden_size"],
                           heads=cfg["num_attention_heads"], ffn=cfg["intermediate_size"], depth=cfg["num_hidden_layers"],
                           max_len=cfg["max_position_embeddings"], classifier_dropout=0.0)
    model = AlbertOde(a, len(cfg["id2label"]))
    missing, unexpected = model.load_state_dict(torch.load(os.path.join(folder, "pytorch_model.bin")), strict=False)
    assert not unexpected and all(k.startswith("predictions.") for k in missing), (missing, unexpected)
    model.eval()
    tok = AlbertPieces(os.path.join(folder, "spiece.model"), a.max_len)
    worst = {}
    with torch.no_grad():
        for n in sorted({1, 2, a.depth // 2, a.depth}):
            ref_n = ref if n == a.depth else hf_reference_logits(folder, texts, steps=n)[0]
            mine = []
            for t in texts:
                ids = torch.tensor([tok.ids(t)])
                h = model.integrate(model.input_stage(ids), model.mask_bias(torch.ones(1, ids.size(1))), n)
                mine.append(model.classify(h)[0])
            worst[n] = float((torch.stack(mine) - ref_n).abs().max())
    # padding must not matter: the same texts batched
    ids = [tok.ids(t) for t in texts]
    T = max(map(len, ids))
    x = torch.tensor([s + [PAD] * (T - len(s)) for s in ids])
    m = torch.tensor([[1.0] * len(s) + [0.0] * (T - len(s)) for s in ids])
    with torch.no_grad():
        batched = float((model.classify(model.integrate(model.input_stage(x), model.mask_bias(m), a.depth)) - ref).abs().max())
    sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}
    print("config:", {k: cfg[k] for k in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                                          "num_attention_heads", "intermediate_size", "max_position_embeddings")})
    print("files:", sizes)
    print("max |logit difference| against the reference, by Euler steps:", worst, "batched with padding at L:", batched)
    ok = max(worst.values()) < 1e-3 and batched < 1e-3 and max(sizes.values()) < 20e6
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------
# Data

def load_data(a, say):
    """Training-split texts of every language (MLM), English section rows, validation sets."""
    t0 = time.time()
    sec = load_jsonl("sections-train-en.jsonl", limit=a.corpus_limit or None)
    seen, corpus = set(), []
    for t in [r["text"] for r in sec]:
        if t not in seen:
            seen.add(t); corpus.append(t)
    per_lang = {"en": len(corpus)}
    for lang in PAIR_LANGS:
        path = "pairs-train-%s.jsonl" % lang
        k0 = len(corpus)
        for r in load_jsonl(path, limit=a.corpus_limit or None):
            if r["xx"] not in seen:
                seen.add(r["xx"]); corpus.append(r["xx"])
        per_lang[lang] = len(corpus) - k0
    val = load_jsonl("sections-valid-en.jsonl")[:a.val_rows]
    mlm_val = [r["text"] for r in load_jsonl("sections-valid-en.jsonl")[a.val_rows:a.val_rows + 200]]
    for lang in ("de", "fr", "it", "da"):
        mlm_val += [r["xx"] for r in load_jsonl("pairs-valid-%s.jsonl" % lang, limit=50)]
    say("data: %d section rows (English training split), %d distinct MLM texts %s, %d validation rows, "
        "%d MLM validation texts (%.0fs)" % (len(sec), len(corpus), per_lang, len(val), len(mlm_val), time.time() - t0))
    return sec, corpus, val, mlm_val, per_lang


def tokenize_all(tok, texts, cache, say):
    """ids of every text, cached (keyed by the tokenizer and window) for --resume."""
    key = dict(spiece=tok.sp.serialized_model_proto(), max_len=tok.max_len, n=len(texts))
    if os.path.exists(cache):
        c = torch.load(cache)
        if c["key"] == key:
            flat, offsets = c["flat"].tolist(), c["offsets"].tolist()
            return [flat[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    t0 = time.time()
    seqs = [tok.ids(t) for t in texts]
    offsets = np.cumsum([0] + [len(s) for s in seqs])
    torch.save(dict(key=key, flat=torch.tensor([i for s in seqs for i in s], dtype=torch.int32),
                    offsets=torch.from_numpy(offsets)), cache)
    say("tokenized %d texts in %.0fs (mean %.1f ids, %.1f%% at the %d window)" % (
        len(seqs), time.time() - t0, np.mean([len(s) for s in seqs]),
        100 * np.mean([len(s) == tok.max_len for s in seqs]), tok.max_len))
    return seqs


def collate(seqs):
    T = max(len(s) for s in seqs)
    x = torch.full((len(seqs), T), PAD, dtype=torch.long)
    m = torch.zeros(len(seqs), T)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        m[i, :len(s)] = 1.0
    return x, m


class LengthBatches:
    """Batches of similar length: a pool of 16 batches' worth of random rows (without replacement
    within the pool), sorted by length, cut into batches, served in random order."""

    def __init__(self, lengths, batch, rng, pool_batches=16):
        self.lengths, self.batch, self.rng, self.pool_batches = lengths, batch, rng, pool_batches
        self.queue = []

    def next(self):
        if not self.queue:
            k = min(len(self.lengths), self.batch * self.pool_batches)
            pool = sorted(self.rng.sample(range(len(self.lengths)), k), key=lambda i: self.lengths[i])
            self.queue = [pool[i:i + self.batch] for i in range(0, k, self.batch)]
            self.rng.shuffle(self.queue)
        return self.queue.pop()


# ----------------------------------------------------------------------------------------------
# Training

def main(argv=None) -> int:
    a = parse(argv)
    if a.check_hf:
        return check_hf(a.check_hf)
    t_start = time.time()
    deadline = t_start + a.max_minutes * 60
    reserve = a.reserve_minutes * 60
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.log)), exist_ok=True)
    say = progress_log(a.log)
    ck_path = os.path.join(a.out, "ckpt.pt")
    if os.path.exists(ck_path) and not a.resume:
        raise SystemExit("%s exists: pass --resume to continue it, or choose another --out" % ck_path)
    if a.resume and not os.path.exists(ck_path):
        raise SystemExit("--resume: no %s" % ck_path)
    ck = torch.load(ck_path) if a.resume else None
    say_later = ""
    if ck is not None:
        # The checkpoint's settings, except those given on this command line (any value other than
        # the default): training settings (learning rates, losses, batch, evaluation) may change on
        # resume; the model's shape, tokenizer and data may not.
        defaults = vars(parse([]))
        given = {k: v for k, v in vars(a).items() if v != defaults[k]}
        fixed = [k for k in given if k in FIXED_ON_RESUME and given[k] != ck["args"].get(k)]
        if fixed:
            raise SystemExit("--resume: %s cannot change (the checkpoint has %s)" % (
                fixed, {k: ck["args"].get(k) for k in fixed}))
        this_call = {k: getattr(a, k) for k in PER_INVOCATION}
        for k, v in ck["args"].items():
            setattr(a, k, v)
        for k, v in dict(given, **this_call).items():
            setattr(a, k, v)
        if given:
            say_later = "settings given on resume: %s" % {k: v for k, v in given.items() if k not in PER_INVOCATION}
    a.amp = int(autocast_enabled(a.amp))
    # After the checkpoint's settings are restored: a resumed run keeps the thread count it began with.
    torch.set_num_threads(a.threads)
    say("train_albert.py %s; pid %d; amp %d; threads %d; deadline in %.1f min" % (
        "resuming" if ck else "starting", os.getpid(), a.amp, a.threads, a.max_minutes))
    if say_later:
        say(say_later)

    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    random.seed(a.seed); np.random.seed(a.seed); torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    labels = json.load(open(os.path.join(DATA_DIR, "manifest.json")))["labels"]
    lab_id = {l: i for i, l in enumerate(labels)}
    sec, corpus, val, mlm_val_texts, per_lang = load_data(a, say)

    spiece = os.path.join(a.out, "spiece.model")
    if not os.path.exists(spiece):
        train_spiece(corpus, os.path.join(a.out, "spiece"), a.vocab, a.spm_sentences, a.spm_max_chars, say)
    tok = AlbertPieces(spiece, a.max_len)
    vocab = tok.sp.get_piece_size()
    a.vocab = vocab
    corpus_ids = tokenize_all(tok, corpus, os.path.join(a.out, "tokens.pt"), say)
    text_index = {t: i for i, t in enumerate(corpus)}
    sec_ids = [corpus_ids[text_index[r["text"]]] for r in sec]
    sec_y = [lab_id[r["label"]] for r in sec]
    val_ids = [tok.ids(r["text"]) for r in val]
    val_y = torch.tensor([lab_id[r["label"]] for r in val])
    masking = dict(maskable=lambda v: v == UNK or v > MASK, mask_input=MASK,
                   random_input=lambda: rng.randrange(MASK + 1, vocab), target_of=lambda v: v)
    mlm_val = mask_sequences([tok.ids(t) for t in mlm_val_texts], random.Random(12345), p=a.mask_prob,
                             **dict(masking, random_input=lambda r=random.Random(54321): r.randrange(MASK + 1, vocab)))

    model = AlbertOde(a, len(labels))
    n_params = sum(p.numel() for k, p in model.named_parameters() if not k.startswith("predictions."))
    say("model: vocab %d, E %d, H %d, heads %d, FFN %d, L %d, window %d; %d parameters in the classifier "
        "(%.2f MB float32), + %d in the MLM head; small steps %s" % (
            vocab, a.emb, a.hidden, a.heads, a.ffn, a.depth, a.max_len, n_params, 4 * n_params / 1e6,
            sum(p.numel() for k, p in model.named_parameters() if k.startswith("predictions.")), a.small_steps))
    L = a.depth
    eval_ns = sorted({1, 2, max(1, L // 2), L})

    def make_opt(phase):
        names = [(k, p) for k, p in model.named_parameters() if phase == "pretrain" or not k.startswith("predictions.")]
        decay = [p for k, p in names if p.dim() >= 2]
        no_decay = [p for k, p in names if p.dim() < 2]
        return torch.optim.AdamW([dict(params=decay, weight_decay=a.weight_decay), dict(params=no_decay, weight_decay=0.0)],
                                 lr=a.pretrain_lr if phase == "pretrain" else a.lr)

    if ck is None:
        avail = deadline - time.time() - reserve
        state = dict(phase="pretrain" if a.pretrain_frac > 0 else "finetune", step=0, phase_step=0,
                     budget=dict(pretrain=a.pretrain_frac * avail, finetune=(1 - a.pretrain_frac) * avail),
                     elapsed=dict(pretrain=0.0, finetune=0.0), history=[])
        opt = make_opt(state["phase"])
    else:
        model.load_state_dict(ck["model"])
        state = ck["state"]
        opt = make_opt(state["phase"])
        opt.load_state_dict(ck["opt"])
        rng.setstate(ck["rng"]); torch.set_rng_state(ck["torch_rng"])
        if a.pretrain_minutes > 0 and state["phase"] == "pretrain":
            say("pre-training plan set to %.1f min (--pretrain-minutes)" % a.pretrain_minutes)
        state["budget"], scale = resumed_plan(state["budget"], state["elapsed"], state["phase"],
                                              deadline - time.time() - reserve, 60 * a.pretrain_minutes,
                                              a.stop_after_pretraining)
        if scale < 1.0:
            say("remaining plan shrunk by %.2f to fit --max-minutes" % scale)
        say("resumed in %s at step %d (phase step %d)" % (state["phase"], state["step"], state["phase_step"]))
    say("plan: pre-training %.1f min, fine-tuning %.1f min (elapsed %.1f / %.1f), reserve %.1f min" % (
        state["budget"]["pretrain"] / 60, state["budget"]["finetune"] / 60, state["elapsed"]["pretrain"] / 60,
        state["elapsed"]["finetune"] / 60, reserve / 60))

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp))

    @torch.no_grad()
    def evaluate_classifier(ns, rows=None, amp=True):
        model.eval()
        ids, y = (val_ids, val_y) if rows is None else (val_ids[:rows], val_y[:rows])
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        res = {}
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp) and amp):
            logits = {n: torch.zeros(len(ids), len(labels)) for n in ns}
            for i in range(0, len(order), 64):
                part = order[i:i + 64]
                x, m = collate([ids[j] for j in part])
                h0, bias = model.input_stage(x), model.mask_bias(m)
                for n in ns:
                    logits[n][part] = model.classify(model.integrate(h0, bias, n))
            for n in ns:
                res[n] = round(float((logits[n].argmax(-1) == y).float().mean()), 4)
        model.train()
        return res

    @torch.no_grad()
    def evaluate_mlm(ns):
        model.eval()
        seqs, targets = mlm_val
        res = {}
        with autocast():
            for n in ns:
                correct = 0
                for i in range(0, len(seqs), 64):
                    part = [(r - i, c, t) for r, c, t in targets if i <= r < i + 64]
                    x, m = collate(seqs[i:i + 64])
                    h = model.integrate(model.input_stage(x), model.mask_bias(m), n)
                    rows, cols, tgt = (torch.tensor(v) for v in zip(*part))
                    correct += int((model.mlm_logits(h[rows, cols]).argmax(-1) == tgt).sum())
                res[n] = round(correct / max(1, len(targets)), 4)
        model.train()
        return res

    def info():
        return dict(phase=state["phase"], step=state["step"], phase_step=state["phase_step"],
                    elapsed_minutes={k: round(v / 60, 2) for k, v in state["elapsed"].items()},
                    args={k: v for k, v in vars(a).items() if k not in ("resume", "check_hf")},
                    data=dict(mlm_texts=len(corpus), mlm_texts_by_language=per_lang, section_train_rows=len(sec),
                              validation_rows=len(val_ids)),
                    classifier_head_trained=state["phase"] == "finetune" and state["phase_step"] > 0,
                    history=state["history"],
                    ode="n Euler steps of dt = L/n of layer(h) - h; n = L is the L-layer ALBERT")

    def save(reason):
        t0 = time.time()
        tmp = ck_path + ".tmp"
        torch.save(dict(model=model.state_dict(), opt=opt.state_dict(), state=state, rng=rng.getstate(),
                        torch_rng=torch.get_rng_state(), args=vars(a), labels=labels), tmp)
        os.replace(tmp, ck_path)
        write_hf_folder(os.path.join(a.out, "hf"), model.classifier_state_dict(),
                        hf_config(a, vocab, labels, "AlbertForSequenceClassification"), spiece, info())
        say("checkpoint (%s): %s and %s/hf (%.1fs)" % (reason, ck_path, a.out, time.time() - t0))

    def evaluate(tag):
        t0 = time.time()
        if state["phase"] == "pretrain":
            res = evaluate_mlm(eval_ns)
            say("valid masked-piece accuracy by steps %s (%s, %.0fs)" % (res, tag, time.time() - t0))
        else:
            res = evaluate_classifier(eval_ns)
            say("valid section accuracy (%d rows) by steps %s (%s, %.0fs)" % (len(val_ids), res, tag, time.time() - t0))
        state["history"].append(dict(phase=state["phase"], step=state["step"], phase_step=state["phase_step"],
                                     minutes=round((time.time() - t_start) / 60, 1), accuracy={str(k): v for k, v in res.items()}))

    pre_batches = LengthBatches([len(s) for s in corpus_ids], a.pretrain_batch, rng)
    ft_batches = LengthBatches([len(s) for s in sec_ids], a.batch, rng)
    model.train()
    last_ck = last_eval = time.time()
    window, t_phase = [], time.time() - state["elapsed"][state["phase"]]

    while True:
        now = time.time()
        phase = state["phase"]
        state["elapsed"][phase] = now - t_phase
        if stop["signal"] is not None:
            say("signal %d: saving and stopping" % stop["signal"])
            save("signal")
            return 1
        if now > deadline - reserve or (phase == "finetune" and state["elapsed"][phase] >= state["budget"][phase]):
            break
        if phase == "pretrain" and state["elapsed"][phase] >= state["budget"][phase]:
            evaluate("end of pre-training")
            write_hf_folder(os.path.join(a.out, "hf-mlm"), model.mlm_state_dict(),
                            hf_config(a, vocab, labels, "AlbertForMaskedLM"), spiece, info())
            state.update(phase="finetune", phase_step=0)
            opt = make_opt("finetune")
            save("pre-training done")
            if a.stop_after_pretraining:
                say("pre-training done: stopping (--stop-after-pretraining); resume to fine-tune")
                return 0
            say("fine-tuning: batch %d, lr %.1e, small steps %s, kd %.2f (T %.1f) ramped over %d steps, mse %.2f" % (
                a.batch, a.lr, a.small_steps, a.kd_weight, a.kd_temp, a.robust_ramp, a.mse_weight))
            window, t_phase = [], time.time()
            last_eval = last_ck = time.time()
            continue
        warmup = a.pretrain_warmup if phase == "pretrain" else a.warmup
        base_lr = a.pretrain_lr if phase == "pretrain" else a.lr
        frac = min(1.0, state["elapsed"][phase] / max(1.0, state["budget"][phase]))
        lr = base_lr * min(1.0, (state["phase_step"] + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr

        if phase == "pretrain":
            idx = pre_batches.next()
            masked, targets = mask_sequences([corpus_ids[i] for i in idx], rng, p=a.mask_prob, **masking)
            x, m = collate(masked)
            rows, cols, tgt = (torch.tensor(v) for v in zip(*targets))
            with autocast():
                h = model.integrate(model.input_stage(x), model.mask_bias(m), L)
                logits = model.mlm_logits(h[rows, cols])
            loss = F.cross_entropy(logits, tgt)
            metrics = dict(mlm=loss.item(), acc=float((logits.argmax(-1) == tgt).float().mean()), tokens=x.numel())
        elif a.recipe == "sampled":
            idx = ft_batches.next()
            x, m = collate([sec_ids[i] for i in idx])
            y = torch.tensor([sec_y[i] for i in idx])
            n = L if L == 1 or rng.random() < a.p_full else rng.choices(range(1, L), weights=[1.0 / k for k in range(1, L)])[0]
            with autocast():
                z = model.classify(model.integrate(model.input_stage(x), model.mask_bias(m), n), dropout=True)
                loss = ce = F.cross_entropy(z, y)
            metrics = dict(ce=ce.item(), acc=float((z.argmax(-1) == y).float().mean()), n=n, tokens=x.numel())
        else:
            idx = ft_batches.next()
            x, m = collate([sec_ids[i] for i in idx])
            y = torch.tensor([sec_y[i] for i in idx])
            n = rng.choice(a.small_steps) if a.small_steps else L
            w_small = a.kd_weight * min(1.0, state["phase_step"] / max(1, a.robust_ramp))
            with autocast():
                h0, bias = model.input_stage(x), model.mask_bias(m)
                h_full = model.integrate(h0, bias, L)
                z_full = model.classify(h_full, dropout=True)
                ce = F.cross_entropy(z_full, y)
                loss = ce
                kd = mse = torch.zeros(())
                if n < L:
                    with torch.no_grad():
                        teacher = model.classify(h_full.detach()).float()  # no dropout: the clean L-step logits
                    h_n = model.integrate(h0, bias, n)
                    z_n = model.classify(h_n, dropout=True)
                    T = a.kd_temp
                    kd = T * T * F.kl_div(F.log_softmax(z_n / T, -1), F.log_softmax(teacher / T, -1),
                                          log_target=True, reduction="batchmean")
                    mse = (((h_n - h_full.detach()) ** 2).mean(-1) * m).sum() / m.sum()
                    loss = ce + w_small * (kd + a.mse_weight * mse)
            metrics = dict(ce=ce.item(), acc=float((z_full.argmax(-1) == y).float().mean()), kd=kd.item(),
                           mse=mse.item(), w=w_small, n=n, tokens=x.numel())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
        opt.step()
        state["step"] += 1
        state["phase_step"] += 1
        window.append(metrics)
        if state["phase_step"] % a.log_every == 0:
            keys = [k for k in window[0] if k not in ("n", "tokens")]
            mean = {k: np.mean([w[k] for w in window]) for k in keys}
            el = state["elapsed"][phase]
            extra = ("  n %s" % dict(sorted(collections.Counter(w["n"] for w in window).items()))) if phase == "finetune" else ""
            say("%s step %d (total %d)  %.1f/%.1f min  lr %.2e  %s%s  %.0f tok/batch  %.2f s/step  [%.1f min since start]" % (
                phase, state["phase_step"], state["step"], el / 60, state["budget"][phase] / 60, lr,
                "  ".join("%s %.4f" % (k, v) for k, v in mean.items()), extra,
                np.mean([w["tokens"] for w in window]), el / max(1, state["phase_step"]), (time.time() - t_start) / 60))
            window = []
        if time.time() - last_ck > a.ckpt_minutes * 60:
            evaluate("checkpoint")
            save("periodic")
            last_ck = last_eval = time.time()
        elif time.time() - last_eval > a.eval_minutes * 60:
            evaluate("periodic")
            last_eval = time.time()

    # the end: the full step profile on the validation rows, then the final folder
    state["elapsed"][state["phase"]] = time.time() - t_phase
    t0 = time.time()
    if state["phase"] == "finetune":
        ns = list(range(1, L + 1)) + [2 * L]
        res = evaluate_classifier(ns)
        say("final valid section accuracy (%d rows, bf16 autocast %d) by steps %s (%.0fs)" % (
            len(val_ids), a.amp, res, time.time() - t0))
        state["history"].append(dict(phase="final", step=state["step"], minutes=round((time.time() - t_start) / 60, 1),
                                     accuracy={str(k): v for k, v in res.items()}, bf16_autocast=bool(a.amp)))
    else:
        evaluate("end (still pre-training)")
    save("final")
    say("done: %d steps (%d in %s) in %.1f min" % (state["step"], state["phase_step"], state["phase"],
                                                   (time.time() - t_start) / 60))
    return 0

