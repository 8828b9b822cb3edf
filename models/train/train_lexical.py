#!/usr/bin/env python3
"""Train the lexical expert of a section classifier and combine it with the served encoder.

    cd models; nice /usr/bin/python3 train/train_lexical.py --classifier repository/classify-sections \
        --out work/runs/classify-lexical

1. The lexical expert (odeserve_models/lexical.py): one linear layer over the piece unigrams and
   hashed piece bigrams of a description's first max_len pieces (the window the server reads),
   trained with cross-entropy on the English training descriptions only; its L2 penalty and
   length normalization are chosen on the first half of the English validation split.
2. The product-of-experts weight is chosen on the same half, from the encoder's validation
   log-probabilities at 1, 2, 4 and L Euler steps (mean accuracy), and checked on the second half.
3. Writes a run folder that export_repository.py reads: args.json, final.pt (encoder, head and
   the lexical expert) and a log. The encoder's weights are the classifier's, unchanged.
"""
import argparse
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from odeserve_models import families  # noqa: E402
from odeserve_models.data import Encoded, load_jsonl  # noqa: E402
from odeserve_models.evaluation import Runner  # noqa: E402
from odeserve_models.lexical import DEFAULT_BUCKETS, feature_rows  # noqa: E402
from odeserve_models.progress import progress_log  # noqa: E402
from odeserve_models.text import Tokenizer  # noqa: E402


def config_value(text, key):
    m = re.search(r"^%s: (\S+)" % key, text, re.M)
    if not m:
        raise ValueError("config.pbtxt has no %s" % key)
    return m.group(1).strip('"')


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


def train_expert(train_bag, y, n_rows, classes, l2, epochs, lr, batch, seed, say, valid=None):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    say = progress_log(os.path.join(a.out, "log.txt"))

    cfg = open(os.path.join(a.classifier, "config.pbtxt")).read()
    max_len = int(config_value(cfg, "max_sequence_length"))
    depth = int(config_value(cfg, "trained_depth"))
    labels = re.findall(r'^labels: "([^"]+)"', cfg, re.M)
    tokenizer = os.path.join(a.classifier, "tokenizer.model")
    tok = Tokenizer(tokenizer, max_len)
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
    check_ids = [tok.ids(r["text"]) for r in check]
    y_train = torch.tensor([lab_id[r["label"]] for r in train])
    y_choose = torch.tensor([lab_id[r["label"]] for r in choose])
    y_check = torch.tensor([lab_id[r["label"]] for r in check])
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

    def lexical_logprobs(ids):
        bag = bags(ids, vocab, a.buckets, best["length_power"])
        with torch.no_grad():
            return F.log_softmax(lexical_logits(best["table"], best["bias"], bag, torch.arange(len(ids))), -1).numpy()

    # the encoder expert: the exported classifier through the Python mirror of the solver loop
    encoder_module = torch.jit.load(os.path.join(a.classifier, "model.pt"))
    runner = Runner(encoder_module, Encoded(tok))
    steps = sorted({1, 2, 4, depth})
    deep = {}
    for name, rows in (("choose", choose), ("check", check)):
        texts = [r["text"] for r in rows]
        for n in steps:
            t = time.time()
            deep[name, n] = torch.log_softmax(torch.from_numpy(runner.outputs(texts, n)), -1).numpy()
            say("encoder expert on validation half %s at %d steps: %.4f (%.0fs)" % (
                name, n, (deep[name, n].argmax(1) == (y_choose if name == "choose" else y_check).numpy()).mean(),
                time.time() - t))
    lex = {"choose": lexical_logprobs(choose_ids), "check": lexical_logprobs(check_ids)}
    ys = {"choose": y_choose.numpy(), "check": y_check.numpy()}

    def combined_accuracy(name, weight, n):
        return float(((deep[name, n] + weight * lex[name]).argmax(1) == ys[name]).mean())

    weights = [0.25 * i for i in range(1, 17)]
    scores = {w: np.mean([combined_accuracy("choose", w, n) for n in steps]) for w in weights}
    weight = max(weights, key=lambda w: (scores[w], -w))
    say("product weight %.2f (mean validation-half-1 accuracy over steps %s: %.4f)" % (weight, steps, scores[weight]))
    for name in ("choose", "check"):
        say("validation half %s: lexical alone %.4f;" % (name, float((lex[name].argmax(1) == ys[name]).mean())),
            ", ".join("%d steps encoder %.4f -> combined %.4f" % (
                n, float((deep[name, n].argmax(1) == ys[name]).mean()), combined_accuracy(name, weight, n))
                for n in steps))

    stored = encoder_module.state_dict()
    encoder = {k: v for k, v in stored.items() if k not in families.PREPARED_MATRICES and not k.startswith("head.")}
    cls = {"weight": stored["head.weight"], "bias": stored["head.bias"]}
    lexical = dict(table=best["table"], bias=best["bias"], buckets=a.buckets, weight=weight,
                   length_power=best["length_power"], l2=best["l2"], epoch=best["epoch"])
    family = config_value(cfg, "family")
    hidden = int(config_value(cfg, "hidden_size"))
    emb = stored["E"].shape[1] if family == "sharebert" else stored["tok"].shape[1]
    ffn = stored["b_1"].shape[0]
    heads = int(re.search(r"(\d+) heads", cfg).group(1))
    args = dict(family=family, objective="classify", vocab=vocab, emb=emb, hidden=hidden, heads=heads, ffn=ffn,
                depth=depth, max_len=max_len, labels=labels, tokenizer=os.path.abspath(tokenizer),
                steps_mode="robust", init=os.path.abspath(os.path.join(a.classifier, "model.pt")),
                lexical=dict((k, v) for k, v in lexical.items() if k not in ("table", "bias")))
    json.dump(args, open(os.path.join(a.out, "args.json"), "w"), indent=1)
    torch.save(dict(model=encoder, cls=cls, lexical=lexical, labels=labels, args=args),
               os.path.join(a.out, "final.pt"))
    say("wrote", os.path.join(a.out, "final.pt"))


if __name__ == "__main__":
    main()
