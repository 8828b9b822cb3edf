"""Add a cross-lingual expert to the section classifier: a linear probe on embed-eelbert's
sentence embedding, trained on English sections only.

    cd models; nice /usr/bin/python3 -m odeserve_models train-embedding-probe --classifier-run work/runs/classify-lexical \
        --embedder repository/embed-eelbert --out work/runs/classify-probe

Why: the classifier's encoder was fine-tuned on English and transfers to other languages only
partly; embed-eelbert was trained to map a description and its translations to the same vector,
so a classifier that reads that vector (frozen) carries its English labels across languages.

1. The embedder reads the classifier's token ids through a table of EELBERT's hashed n-gram
   features of every vocabulary piece (odeserve_models.lexical.EmbeddingProbeClassifier), so the
   probe is trained on exactly the embeddings the served model computes: L Euler steps over the
   first embedder.max_len ids of each English training description.
2. The probe's L2 penalty, its weight in the product of experts, whether it keeps its bias, and
   the lexical expert's weight are chosen together on the validation sets train-lexical chose
   the lexical weight on, by the same objective: the mean over 1, 2, 4 and L Euler steps of
   (English accuracy on the first half of the English validation split + mean zero-shot accuracy
   on de/fr/it/da translations of validation packages) / 2. The second English half, unseen by
   both trainers' choices, checks the result.
3. Writes a run folder that export-repository reads: args.json, final.pt (the classifier run's
   weights, the lexical weight chosen here, the embedder and the probe) and a log.
"""
import json
import os
import shutil
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from odeserve_models import families
from odeserve_models.cli import parser
from odeserve_models.data import Encoded, classifier_validation_sets, load_jsonl, validation_objective
from odeserve_models.evaluation import Runner, load_run
from odeserve_models.lexical import embedder_window, piece_feature_table
from odeserve_models.progress import progress_log
from odeserve_models.verify import read_config

PROBE_SCALE = 10.0


def load_embedder(folder: str):
    """The eager EelbertEncoder of a served embedding folder, and its hashing settings."""
    cfg = read_config(os.path.join(folder, "config.pbtxt"))
    if cfg["family"] != "eelbert" or cfg["task"] != "EMBEDDING":
        raise SystemExit("%s: need an EELBERT embedding model, got family %s task %s" % (folder, cfg["family"], cfg["task"]))
    scripted = torch.jit.load(os.path.join(folder, "model.pt"), map_location="cpu")
    state = scripted.state_dict()
    hidden = int(scripted.hidden_size)
    embedder = families.build("eelbert", hash_dim=state["in1.weight"].shape[1], hidden=hidden,
                              heads=int(scripted.num_heads), ffn=state["w_1"].shape[0],
                              trained_depth=int(scripted.trained_depth), max_len=state["pos"].shape[0],
                              out_dim=state["head.weight"].shape[0])
    embedder.load_state_dict(state)
    embedder.eval()
    for p in embedder.parameters():
        p.requires_grad_(False)
    return embedder, cfg["hash"]


class EmbedderByIds(nn.Module):
    """The embedder exactly as EmbeddingProbeClassifier runs it, alone, for Runner: token ids in,
    its window out (the solver hands the full mask back, so each stage cuts it)."""

    def __init__(self, embedder, table: torch.Tensor, eos_id: int):
        super().__init__()
        self.embedder, self.table, self.window, self.eos_id = embedder, table, embedder.max_len, eos_id
        self.trained_depth = embedder.trained_depth

    def input_stage(self, x, mask):
        ids, window_mask = embedder_window(x, mask, self.window, self.eos_id)
        return self.embedder.input_stage(F.embedding(ids, self.table), window_mask)

    def vector_field(self, h, mask):
        return self.embedder.vector_field(h, mask[:, :h.size(1)])

    def output_stage(self, h, mask):
        return F.normalize(self.embedder.output_stage(h, mask[:, :h.size(1)]), dim=-1)


def train_probe(x, y, classes, l2, epochs, lr, batch, seed):
    g = torch.Generator().manual_seed(seed)
    probe = nn.Linear(x.size(1), classes)
    nn.init.zeros_(probe.weight); nn.init.zeros_(probe.bias)
    opt = torch.optim.Adam(probe.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            loss = F.cross_entropy(PROBE_SCALE * probe(x[idx]), y[idx]) + l2 * (probe.weight ** 2).sum()
            opt.zero_grad(); loss.backward(); opt.step()
    return probe


def main(argv=None) -> int:
    ap = parser("train-embedding-probe", __doc__)
    ap.add_argument("--classifier-run", required=True, help="a train-lexical run folder")
    ap.add_argument("--embedder", required=True, help="a served EELBERT embedding folder (models/repository/embed-eelbert)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--l2", default="0.001,0.003,0.01,0.03,0.1,0.3", help="probe L2 penalties to try")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--zero-shot-rows", type=int, default=400, help="validation translations per language")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=20261204, help="train-lexical's: it picks the same zero-shot rows")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    say = progress_log(os.path.join(a.out, "log.txt"))
    say("args %s" % vars(a))

    classifier, enc, run_args, labels = load_run(a.classifier_run, "CLASSIFICATION")
    if not hasattr(classifier, "experts"):
        raise SystemExit("%s is not a classifier with a lexical expert (train-lexical)" % a.classifier_run)
    tokenizer_file = run_args["tokenizer"]
    embedder, hash_cfg = load_embedder(a.embedder)
    if embedder.trained_depth != classifier.trained_depth:
        raise SystemExit("the embedder's trained depth %d differs from the classifier's %d" % (
            embedder.trained_depth, classifier.trained_depth))
    table = piece_feature_table(tokenizer_file, hash_cfg["seed"], hash_cfg["dim"], hash_cfg["orders"])
    depth = classifier.trained_depth
    lab_id = {l: i for i, l in enumerate(labels)}
    by_ids = Runner(EmbedderByIds(embedder, table, enc.tok.sp.eos_id()), Encoded(enc.tok), batch=128)

    train = load_jsonl("sections-train-en.jsonl")
    t = time.time()
    x_train = torch.from_numpy(by_ids.outputs([r["text"] for r in train], depth))
    y_train = torch.tensor([lab_id[r["label"]] for r in train])
    say("embedded %d English training descriptions at %d steps (%.0fs)" % (len(train), depth, time.time() - t))

    by_ids.cache.clear()  # the training set's input states (about 2.4 GB) are not needed again
    # The validation sets train-lexical chose the lexical weight on (same halves, same zero-shot
    # rows), so that the second English half stays unseen by every choice of either trainer.
    sets = classifier_validation_sets(lab_id, a.zero_shot_rows, a.seed)
    runner = Runner(classifier, enc)
    steps = sorted({1, 2, 4, depth})
    deep, lexical, embedded = {}, {}, {}
    for name, (texts, y) in sets.items():
        t = time.time()
        for n in steps:
            experts = runner.expert_outputs(texts, n)
            deep[name, n], lexical[name] = experts["encoder"], experts["lexical"]  # lexical: the same at every n
            embedded[name, n] = torch.from_numpy(by_ids.outputs(texts, n))
        say("validation set %s (%d): experts at steps %s (%.0fs)" % (name, len(y), steps, time.time() - t))

    candidates = []
    for l2 in [float(v) for v in a.l2.split(",")]:
        t = time.time()
        probe = train_probe(x_train, y_train, len(labels), l2, a.epochs, 0.01, 256, a.seed)
        with torch.no_grad():
            probes = {(keep_bias, name, n): F.log_softmax(
                PROBE_SCALE * (embedded[name, n] @ probe.weight.T + (probe.bias if keep_bias else 0)), -1).numpy()
                for keep_bias in (True, False) for name in sets for n in steps}
        alone = float((probes[True, "choose", depth].argmax(1) == sets["choose"][1]).mean())
        say("probe l2 %g: English validation half 1 alone %.4f at %d steps (%.0fs)" % (l2, alone, depth, time.time() - t))
        candidates.append((l2, probe, probes))

    def accuracy(probes, name, n, lexical_weight, probe_weight, keep_bias):
        logits = deep[name, n] + lexical_weight * lexical[name] + probe_weight * probes[keep_bias, name, n]
        return float((logits.argmax(1) == sets[name][1]).mean())

    def objective(probes, lexical_weight, probe_weight, keep_bias):
        return validation_objective(lambda name, n: accuracy(probes, name, n, lexical_weight, probe_weight, keep_bias), steps)

    best = None
    for l2, probe, probes in candidates:
        for lexical_weight in [0.25 * i for i in range(2, 13)]:
            for probe_weight in [0.25 * i for i in range(0, 21)]:
                for keep_bias in (True, False):
                    score = objective(probes, lexical_weight, probe_weight, keep_bias)
                    if best is None or score > best[0]:
                        best = (score, l2, probe, probes, lexical_weight, probe_weight, keep_bias)
    score, l2, probe, probes, lexical_weight, probe_weight, keep_bias = best
    baseline = objective(probes, classifier.weight, 0.0, True)
    say("chosen: probe l2 %g, probe weight %.2f, probe bias %s, lexical weight %.2f: objective %.4f "
        "(the classifier as served, lexical weight %.2f and no probe: %.4f)" % (
            l2, probe_weight, "kept" if keep_bias else "dropped", lexical_weight, score, classifier.weight, baseline))
    for name in sets:
        say("validation set %s: " % name + ", ".join(
            "%d steps %.4f -> %.4f" % (n, accuracy(probes, name, n, classifier.weight, 0.0, True),
                                         accuracy(probes, name, n, lexical_weight, probe_weight, keep_bias)) for n in steps))
    if not keep_bias:
        with torch.no_grad():
            probe.bias.zero_()

    shutil.copyfile(os.path.join(a.classifier_run, "args.json"), os.path.join(a.out, "classifier-args.json"))
    args = dict(run_args)
    args["lexical"] = dict(args["lexical"], weight=lexical_weight)
    args["probe"] = dict(embedder=os.path.abspath(a.embedder), l2=l2, product_weight=probe_weight, keep_bias=keep_bias,
                         scale=PROBE_SCALE, hash=hash_cfg, window=embedder.max_len, embedder_hidden=embedder.hidden_size)
    json.dump(args, open(os.path.join(a.out, "args.json"), "w"), indent=1)
    ck = torch.load(os.path.join(a.classifier_run, "final.pt"), map_location="cpu")
    ck["lexical"]["weight"] = lexical_weight
    ck["probe"] = dict(embedder=embedder.state_dict(), embedder_config=dict(
        hash_dim=embedder.hash_dim, hidden=embedder.hidden_size, heads=embedder.num_heads, ffn=embedder.ffn_size,
        trained_depth=embedder.trained_depth, max_len=embedder.max_len, out_dim=embedder.out_dim),
        hash=hash_cfg, linear=dict(weight=probe.weight.detach().clone(), bias=probe.bias.detach().clone()),
        product_weight=probe_weight, scale=PROBE_SCALE)
    ck["args"] = args
    torch.save(ck, os.path.join(a.out, "final.pt"))
    say("wrote %s" % a.out)
    return 0
