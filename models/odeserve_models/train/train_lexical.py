"""Train the lexical expert of a section classifier and combine it with the served encoder.

    cd models; nice /usr/bin/python3 -m odeserve_models train-lexical --classifier ENCODER_ONLY_FOLDER \
        --out work/runs/classify-lexical    (models/README.md: the folder of commit 4956593)

1. The lexical expert (odeserve_models/lexical.py): one linear layer over the piece unigrams and
   hashed piece bigrams of a description's first max_len pieces (the window the server reads),
   trained with cross-entropy on the English training descriptions only; its L2 penalty and
   length normalization are chosen on the first half of the English validation split.
2. The product-of-experts weight, and whether the lexical expert keeps its bias (its class prior,
   which it adds to every text it knows nothing about, such as a German one), are chosen from the
   encoder's log-probabilities at 1, 2, 4 and L Euler steps on that half and on zero-shot
   validation sets (the de/fr/it/da translations of validation packages): the mean over steps of
   (English accuracy + mean zero-shot accuracy) / 2. The second English half checks the choice.
3. Writes a run folder that export-repository reads: args.json, final.pt (encoder, head and
   the lexical expert) and a log. The encoder's weights are the classifier's, unchanged.
"""
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from odeserve_models import families
from odeserve_models.cli import parser
from odeserve_models.data import Encoded, classifier_validation_sets, load_jsonl, validation_objective
from odeserve_models.evaluation import Runner
from odeserve_models.lexical import DEFAULT_BUCKETS, feature_rows
from odeserve_models.progress import progress_log
from odeserve_models.verify import load_model_dir

def bags(seqs, vocab, buckets, length_power):
    """Per text: (table rows it sums, weight of each row) for an EmbeddingBag."""
    out = []
    for ids in seqs:
        rows = feature_rows(ids, vocab, buckets)
        out.append((torch.tensor(rows), torch.full((len(rows),), 1.0 / len(ids) ** length_power)))
    return out


def lexical_logits(table, bias, bag, index):
    chosen = [bag[i] for i in index.tolist()]
    lengths = torch.tensor([len(r) for r, _ in chosen])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    rows = torch.cat([r for r, _ in chosen])
    weights = torch.cat([w for _, w in chosen])
    return F.embedding_bag(rows, table, offsets, mode="sum", per_sample_weights=weights) + bias


def train_expert(train_bag, y, n_rows, classes, l2, epochs, lr, batch, seed, say, valid):
    """Adam on cross-entropy + l2 * mean squared table entry; returns the table and bias of the
    epoch with the best validation accuracy (valid = (bag, labels)) and that accuracy."""
    g = torch.Generator().manual_seed(seed)
    table = torch.zeros(n_rows, classes, requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.Adam([table, bias], lr=lr)
    n = len(y)
    best = (-1.0, None, None, 0)
    for epoch in range(1, epochs + 1):
        perm = torch.randperm(n, generator=g)
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            loss = F.cross_entropy(lexical_logits(table, bias, train_bag, idx), y[idx])
            loss = loss + l2 * table.pow(2).sum() / n
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            vb, vy = valid
            acc = float((lexical_logits(table, bias, vb, torch.arange(len(vy))).argmax(1) == vy).float().mean())
        say("  l2 %g epoch %d: validation accuracy %.4f" % (l2, epoch, acc))
        if acc > best[0]:
            best = (acc, table.detach().clone(), bias.detach().clone(), epoch)
    return best


def main(argv=None) -> int:
    ap = parser("train-lexical", __doc__)
    ap.add_argument("--classifier", required=True, help="an exported classifier folder (the encoder expert)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--buckets", type=int, default=DEFAULT_BUCKETS)
    ap.add_argument("--l2", default="0.3,1,3", help="L2 penalties tried (per training example)")
    ap.add_argument("--length-powers", default="0.5,1", help="length normalizations tried")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--zero-shot-rows", type=int, default=400, help="validation translations per language")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    say = progress_log(os.path.join(a.out, "log.txt"))

    # the encoder expert: the exported classifier, run through the Python mirror of the solver loop
    cfg, tok, encoder_module = load_model_dir(a.classifier)
    if cfg["task"] != "CLASSIFICATION" or cfg["family"] not in ("sharebert", "albert"):
        raise SystemExit("%s: a token-id classifier (ShareBERT or ALBERT) is needed" % a.classifier)
    if "lexical" in encoder_module.state_dict():
        raise SystemExit("%s already holds a lexical expert: give the encoder-only classifier" % a.classifier)
    max_len, depth, labels = cfg["max_len"], cfg["trained_depth"], cfg["labels"]
    tokenizer = os.path.join(a.classifier, "tokenizer.model")
    vocab = tok.sp.get_piece_size()
    lab_id = {l: i for i, l in enumerate(labels)}
    say("classifier", a.classifier, "window", max_len, "vocab", vocab, "labels", len(labels), "buckets", a.buckets)

    train = load_jsonl("sections-train-en.jsonl")
    valid = load_jsonl("sections-valid-en.jsonl")
    half = len(valid) // 2
    choose, check = valid[:half], valid[half:]
    t0 = time.time()
    train_ids = [tok.ids(r["text"]) for r in train]
    choose_ids = [tok.ids(r["text"]) for r in choose]
    y_train = torch.tensor([lab_id[r["label"]] for r in train])
    y_choose = torch.tensor([lab_id[r["label"]] for r in choose])
    say("tokenized %d train, %d + %d validation descriptions in %.0fs" % (
        len(train), len(choose), len(check), time.time() - t0))

    n_rows = vocab + a.buckets
    best = None
    for power in [float(p) for p in a.length_powers.split(",")]:
        train_bag = bags(train_ids, vocab, a.buckets, power)
        choose_bag = bags(choose_ids, vocab, a.buckets, power)
        for l2 in [float(v) for v in a.l2.split(",")]:
            acc, table, bias, epoch = train_expert(train_bag, y_train, n_rows, len(labels), l2, a.epochs,
                                                   a.lr, a.batch, a.seed, say, valid=(choose_bag, y_choose))
            say("length power %g, l2 %g: best validation accuracy %.4f at epoch %d" % (power, l2, acc, epoch))
            if best is None or acc > best["accuracy"]:
                best = dict(accuracy=acc, table=table, bias=bias, epoch=epoch, l2=l2, length_power=power)
    say("chosen: length power %g, l2 %g, epoch %d (validation half 1: %.4f)" % (
        best["length_power"], best["l2"], best["epoch"], best["accuracy"]))

    def lexical_logprobs(ids, keep_bias):
        bag = bags(ids, vocab, a.buckets, best["length_power"])
        bias = best["bias"] if keep_bias else torch.zeros_like(best["bias"])
        with torch.no_grad():
            return F.log_softmax(lexical_logits(best["table"], bias, bag, torch.arange(len(ids))), -1).numpy()

    # Validation sets of the product: the two English halves, and zero-shot sets (the translated
    # descriptions of validation packages, labelled with their package's section), because the
    # weight trades English accuracy against the encoder's cross-lingual transfer.
    sets = {name: (texts, [tok.ids(t) for t in texts], y) for name, (texts, y) in
            classifier_validation_sets(lab_id, a.zero_shot_rows, a.seed).items()}
    runner = Runner(encoder_module, Encoded(tok))
    steps = sorted({1, 2, 4, depth})
    deep, lex = {}, {}
    for name, (texts, ids, y) in sets.items():
        for n in steps:
            t = time.time()
            deep[name, n] = torch.log_softmax(torch.from_numpy(runner.outputs(texts, n)), -1).numpy()
            say("encoder expert on validation set %s at %d steps: %.4f (%.0fs)" % (
                name, n, (deep[name, n].argmax(1) == y).mean(), time.time() - t))
        for keep_bias in (True, False):
            lex[name, keep_bias] = lexical_logprobs(ids, keep_bias)

    def accuracy(name, weight, keep_bias, n):
        return float(((deep[name, n] + weight * lex[name, keep_bias]).argmax(1) == sets[name][2]).mean())

    def objective(weight, keep_bias):
        return validation_objective(lambda name, n: accuracy(name, weight, keep_bias, n), steps)

    grid = [(0.25 * i, keep_bias) for i in range(1, 25) for keep_bias in (True, False)]
    scores = {g: objective(*g) for g in grid}
    weight, keep_bias = max(grid, key=lambda g: (scores[g], -g[0]))
    say("product weight %.2f, lexical bias %s (objective over steps %s: %.4f; the English half alone "
        "would choose weight %.2f)" % (weight, "kept" if keep_bias else "dropped", steps, scores[weight, keep_bias],
                                       max(grid, key=lambda g: np.mean([accuracy("choose", g[0], g[1], n) for n in steps]))[0]))
    for name in sets:
        say("validation set %s: lexical alone %.4f;" % (name, float((lex[name, keep_bias].argmax(1) == sets[name][2]).mean())),
            ", ".join("%d steps encoder %.4f -> combined %.4f" % (
                n, float((deep[name, n].argmax(1) == sets[name][2]).mean()), accuracy(name, weight, keep_bias, n))
                for n in steps))
    if not keep_bias:
        best["bias"] = torch.zeros_like(best["bias"])

    stored = encoder_module.state_dict()
    encoder = {k: v for k, v in stored.items() if k not in families.PREPARED_MATRICES and not k.startswith("head.")}
    cls = {"weight": stored["head.weight"], "bias": stored["head.bias"]}
    lexical = dict(table=best["table"], bias=best["bias"], buckets=a.buckets, weight=weight, keep_bias=keep_bias,
                   length_power=best["length_power"], l2=best["l2"], epoch=best["epoch"])
    family = cfg["family"]
    emb = stored["E"].shape[1] if family == "sharebert" else stored["tok"].shape[1]
    args = dict(family=family, objective="classify", vocab=vocab, emb=emb, hidden=int(encoder_module.hidden_size),
                heads=int(encoder_module.num_heads), ffn=int(encoder_module.ffn_size),
                depth=depth, max_len=max_len, labels=labels, tokenizer=os.path.abspath(tokenizer),
                steps_mode="robust", init=os.path.abspath(os.path.join(a.classifier, "model.pt")),
                lexical=dict((k, v) for k, v in lexical.items() if k not in ("table", "bias")))
    json.dump(args, open(os.path.join(a.out, "args.json"), "w"), indent=1)
    torch.save(dict(model=encoder, cls=cls, lexical=lexical, labels=labels, args=args),
               os.path.join(a.out, "final.pt"))
    say("wrote", os.path.join(a.out, "final.pt"))
    return 0
