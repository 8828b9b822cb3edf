"""Train a parameter-shared ODE encoder (step-robust or fixed depth), time-budgeted, resumable.

Objectives, --objective joint (the embedding models; per batch, one forward of 2B sequences):
  - contrastive InfoNCE (symmetric, in-batch negatives) on (English description, translation
    xx) pairs and (long English description, short description) pairs;
  - cross-entropy on the English side's Debian Section (labels only ever seen in English).
--objective classify (fine-tuning a classifier, usually from a joint run with --init): B English
section descriptions with cross-entropy, plus --align-pairs (English, translation) pairs whose
InfoNCE keeps the languages aligned, so zero-shot transfer is not traded away for English accuracy.
--objective mlm (pre-training): masked-LM on every distinct description of the corpus (English
and the 13 translation languages): 15% of the pieces masked BERT-style, predicted through the
family's tied embedding table (odeserve_models/mlm.py); a joint or classify run then starts
from it with --init.
Step-robust: per batch n ~ p(n) on 1..L, dt = L/n (Euler, as the server runs it);
fixed: n = L, dt = 1 always.

  PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models train --family sharebert --out models/work/runs/X \
      --minutes 50 --steps-mode robust
"""
import json
import math
import os
import random
import time


import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from odeserve_models import families
from odeserve_models.cli import parser
from odeserve_models.cpu import autocast_enabled
from odeserve_models.data import Encoded, load_jsonl
from odeserve_models.hashing import PieceHasher
from odeserve_models.mlm import MlmHead, integrate, mask_sequences, mlm_logits
from odeserve_models.paths import MODELS
from odeserve_models.progress import progress_log
from odeserve_models.text import Tokenizer

PAIR_LANGS = {"de": 3.0, "fr": 2.0, "it": 1.5, "da": 1.5, "es": 1, "pt": 1, "ru": 1, "pl": 1,
              "ja": 1, "cs": 1, "nl": 1, "fi": 1, "sv": 1}


def parse(argv=None):
    ap = parser("train", __doc__)
    ap.add_argument("--family", required=True, choices=["albert", "sharebert", "eelbert"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(MODELS, "work", "tok", "spm8k.model"))
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--steps-mode", default="robust", choices=["robust", "fixed"])
    ap.add_argument("--p-full", type=float, default=0.3, help="robust: P(n = L)")
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--emb", type=int, default=96)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--hash-dim", type=int, default=64)
    ap.add_argument("--hash-seed", type=int, default=20231030)
    ap.add_argument("--batch", type=int, default=48, help="pairs per batch (2x sequences)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--ce-weight", type=float, default=1.0)
    ap.add_argument("--nce-weight", type=float, default=1.0)
    ap.add_argument("--p-shortlong", type=float, default=0.25)
    ap.add_argument("--tau", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init", default="", help="weights to start from: a run's checkpoint, or an exported "
                    "classifier's or embedding model's model.pt; positions are extended when --max-len is longer")
    ap.add_argument("--amp", type=int, default=-1,
                    help="bf16 autocast: 1 on, 0 off, -1 on where bfloat16 is native (2-2.5x faster on a Zen 4, "
                         "about 22x slower where emulated, models/experiments/bench_autocast.py)")
    ap.add_argument("--ckpt-minutes", type=float, default=4)
    ap.add_argument("--objective", default="joint", choices=["joint", "classify", "mlm"])
    ap.add_argument("--mask-prob", type=float, default=0.15, help="mlm: share of the pieces masked")
    ap.add_argument("--max-steps", type=int, default=0,
                    help="a step budget (0 = none): the run stops there and its schedule follows it; "
                         "--minutes still caps the wall-clock time")
    ap.add_argument("--align-pairs", type=int, default=16, help="classify: cross-lingual pairs per batch")
    ap.add_argument("--token-dropout", type=float, default=0.0,
                    help="classify: share of each English text's pieces (bos kept) hidden from the encoder per batch")
    ap.add_argument("--pooled-dropout", type=float, default=0.0, help="classify: dropout on the classifier's input")
    ap.add_argument("--teacher", default="",
                    help="classify: out-of-fold teacher probabilities (odeserve_models/train/tfidf_teacher.py's .npz) to distil")
    ap.add_argument("--kd-weight", type=float, default=0.5,
                    help="classify with --teacher: the loss is (1 - w) CE(labels) + w T^2 KL(teacher_T || model_T)")
    ap.add_argument("--kd-temp", type=float, default=2.0, help="classify with --teacher: the temperature T")
    return ap.parse_args(argv)


def sample_steps(rng, L, mode, p_full):
    if mode == "fixed":
        return L
    if rng.random() < p_full:
        return L
    w = [1.0 / n for n in range(1, L)]  # biased to small n
    return rng.choices(range(1, L), weights=w)[0]


def masking_rules(tok, enc, rng):
    """mask_sequences' arguments for this tokenization: token ids, or EELBERT piece-table
    indices (mask = index 0, all-zero features; targets = the pieces' SentencePiece ids)."""
    sp = tok.sp
    special = {sp.bos_id(), sp.eos_id(), sp.pad_id()}
    if not enc.hashed:
        vocab = sp.get_piece_size()
        return dict(maskable=lambda v: v not in special, mask_input=sp.unk_id(),
                    random_input=lambda: rng.randrange(4, vocab), target_of=lambda v: v)
    pieces = [None] * len(enc.piece_index)
    for piece, index in enc.piece_index.items():
        pieces[index] = piece
    ids = [sp.piece_to_id(p) if p else sp.pad_id() for p in pieces]
    return dict(maskable=lambda i: i != 0 and ids[i] not in special, mask_input=0,
                random_input=lambda: rng.randrange(1, len(pieces)), target_of=lambda i: ids[i])


def build_model(a, vocab, n_labels):
    common = dict(hidden=a.hidden, heads=a.heads, ffn=a.ffn, trained_depth=a.depth, max_len=a.max_len,
                  out_dim=a.hidden)
    if a.family == "eelbert":
        m = families.build("eelbert", hash_dim=a.hash_dim, **common)
    else:
        m = families.build(a.family, vocab=vocab, emb=a.emb, **common)
    return m, nn.Linear(a.hidden, n_labels)


def with_positions(sd, max_len):
    """A state dict whose learned positions cover max_len: a checkpoint trained on shorter inputs
    is extended by repeating its table (as Longformer grew RoBERTa's), so that fine-tuning on
    longer inputs starts from positions the shared block has already seen."""
    pos = sd.get("pos")
    if pos is not None and pos.size(0) < max_len:
        reps = -(-max_len // pos.size(0))
        sd = dict(sd, pos=pos.repeat(reps, 1)[:max_len].clone())
    return sd


def init_weights(path, model, cls):
    """(encoder state dict, classifier state dict or None) of a training checkpoint, or of an
    exported model.pt: a classifier's head is the section classifier (its contrastive projection
    is not exported and keeps its fresh initialisation); an embedding model's head is the
    contrastive projection itself (its auxiliary section classifier is not exported)."""
    if not path.endswith("model.pt"):
        c = torch.load(path)
        keep_cls = c.get("args", {}).get("objective") != "mlm"  # an mlm run's classifier never trained
        return with_positions(c["model"], model.max_len), (c["cls"] if keep_cls else None)
    stored = torch.jit.load(path).state_dict()
    encoder = {k: v for k, v in stored.items() if k not in families.PREPARED_MATRICES}
    head = stored["head.weight"].shape
    if head == cls.weight.shape:
        encoder = {k: v for k, v in encoder.items() if not k.startswith("head.")}
        return with_positions(encoder, model.max_len), {"weight": stored["head.weight"], "bias": stored["head.bias"]}
    if head == model.head.weight.shape:
        return with_positions(encoder, model.max_len), None
    raise ValueError("%s: head %s is neither a %d-label classifier nor a %s embedding projection" % (
        path, tuple(head), cls.out_features, tuple(model.head.weight.shape)))


def drop_tokens(mask, rows, p):
    """The mask with a random share p of the first `rows` rows' pieces (never position 0, the bos)
    masked out: they are zeroed, unattended and unpooled, as padding is (word dropout)."""
    drop = torch.rand(rows, mask.size(1)) < p
    drop[:, 0] = False
    out = mask.clone()
    out[:rows] = mask[:rows] * (~drop).to(mask.dtype)
    return out


def load_teacher(path, rows, labels):
    """[len(rows), labels] teacher probabilities, in the order of rows (matched by md5)."""
    t = np.load(path)
    if list(t["labels"]) != list(labels):
        raise ValueError("%s: teacher labels %s differ from the manifest's" % (path, list(t["labels"])))
    at = {m: i for i, m in enumerate(t["md5"].tolist())}
    missing = [r["md5"] for r in rows if r["md5"] not in at]
    if missing:
        raise ValueError("%s: no teacher probabilities for %d training rows (first %s)" % (path, len(missing), missing[0]))
    return torch.from_numpy(t["probs"][[at[r["md5"]] for r in rows]].astype(np.float32))


def distillation_loss(logits, teacher_probs, temperature):
    """T^2 KL(teacher_T || model_T) (Hinton et al.), with the teacher's probabilities sharpened or
    softened by the same temperature: p_T ~ p^(1/T)."""
    target = F.log_softmax(torch.log(teacher_probs.clamp(min=1e-8)) / temperature, dim=-1)
    return temperature ** 2 * F.kl_div(F.log_softmax(logits / temperature, dim=-1), target,
                                       log_target=True, reduction="batchmean")


def encode_pooled(model, x, mask, n):
    return model.pool(integrate(model, x, mask, n), mask)


def main(argv=None) -> int:
    a = parse(argv)
    a.amp = int(autocast_enabled(a.amp))
    if a.teacher and a.objective != "classify":
        raise SystemExit("--teacher distils into the section classifier: it needs --objective classify")
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    say = progress_log(os.path.join(a.out, "train.log"))

    torch.manual_seed(a.seed); random.seed(a.seed); np.random.seed(a.seed)
    rng = random.Random(a.seed)
    manifest = json.load(open(os.path.join(MODELS, "data", "manifest.json")))
    labels = manifest["labels"]
    lab_id = {l: i for i, l in enumerate(labels)}
    hasher = PieceHasher(a.hash_seed, a.hash_dim, [2, 3, 4]) if a.family == "eelbert" else None
    tok = Tokenizer(a.tokenizer, a.max_len, hasher=hasher)
    enc = Encoded(tok)
    t0 = time.time()
    sec = load_jsonl("sections-train-en.jsonl")
    pairs = []  # (en_seq, other_seq, label)
    for r in sec:
        if r["long"]:
            pairs.append(("sl", r["text"], r["short"], lab_id[r["label"]]))
    n_sl = len(pairs)
    xl = []
    for lang in PAIR_LANGS:
        try:
            for r in load_jsonl("pairs-train-%s.jsonl" % lang):
                xl.append((lang, r["en"], r["xx"], lab_id[r["label"]]))
        except FileNotFoundError:
            pass
    say("loaded", n_sl, "short-long pairs,", len(xl), "cross-lingual pairs in %.0fs" % (time.time() - t0))
    # tokenize once
    t0 = time.time()
    labelled = [(r["text"], lab_id[r["label"]], i) for i, r in enumerate(sec)] if a.objective == "classify" else []
    teacher = load_teacher(a.teacher, sec, labels) if a.teacher else None
    if teacher is not None:
        agree = float((teacher.argmax(-1) == torch.tensor([y for _, y, _ in labelled])).float().mean())
        say("teacher", a.teacher, "agrees with the labels on %.4f of the training rows" % agree)
    texts = sorted({p[1] for p in pairs + xl} | {p[2] for p in pairs + xl} | {t for t, _, _ in labelled})
    seqs = dict(zip(texts, enc.encode(texts)))
    say("tokenized", len(texts), "texts in %.0fs" % (time.time() - t0),
        "distinct pieces %d" % len(enc.piece_index) if enc.hashed else "")
    by_lang = {}
    for p in xl:
        by_lang.setdefault(p[0], []).append(p)
    langs = sorted(by_lang)
    lang_w = [PAIR_LANGS[l] * math.sqrt(len(by_lang[l])) for l in langs]
    # validation sets
    val = load_jsonl("sections-valid-en.jsonl")[:400]
    val_x = enc.encode([r["text"] for r in val]); val_y = torch.tensor([lab_id[r["label"]] for r in val])
    vpairs = load_jsonl("pairs-valid-de.jsonl")[:300]
    vp_en = enc.encode([r["en"] for r in vpairs]); vp_de = enc.encode([r["xx"] for r in vpairs])

    model, cls = build_model(a, tok.sp.get_piece_size(), len(labels))
    mlm_head = MlmHead(model, tok.sp.get_piece_size()) if a.objective == "mlm" else None
    masking = masking_rules(tok, enc, rng) if a.objective == "mlm" else None
    params = list(model.parameters()) + list(cls.parameters()) + (list(mlm_head.parameters()) if mlm_head else [])
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    state = dict(step=0, elapsed=0.0)
    ck = os.path.join(a.out, "ckpt.pt")
    if os.path.exists(ck):
        c = torch.load(ck)
        model.load_state_dict(c["model"], strict=False); cls.load_state_dict(c["cls"])
        opt.load_state_dict(c["opt"]); state = c["state"]; rng.setstate(c["rng"])
        if mlm_head is not None:
            mlm_head.load_state_dict(c["mlm"])
        say("resumed at step", state["step"], "elapsed %.1f min" % (state["elapsed"] / 60))
    elif a.init:
        encoder, classifier = init_weights(a.init, model, cls)
        missing, unexpected = model.load_state_dict(encoder, strict=False)
        if unexpected or any(k not in families.PREPARED_MATRICES and not k.startswith("head.") for k in missing):
            raise ValueError("%s does not fit this model: missing %s, unexpected %s" % (a.init, missing, unexpected))
        if classifier is not None:
            cls.load_state_dict(classifier)
        say("initialised from", a.init)
    json.dump(dict(vars(a), labels=labels, vocab=tok.sp.get_piece_size(),
                   parameters=families.count_parameters(model)), open(os.path.join(a.out, "args.json"), "w"), indent=1)
    say("parameters", families.count_parameters(model), "(+ aux classifier", sum(p.numel() for p in cls.parameters()), ")")
    budget = a.minutes * 60

    @torch.no_grad()
    def evaluate(ns):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp)):
            return _evaluate(ns)

    def _evaluate(ns):
        model.eval()
        res = {}
        for n in ns:
            P = []
            for i in range(0, len(val_x), 100):
                x, m = enc.collate(val_x[i:i + 100]); P.append(encode_pooled(model, x, m, n))
            acc = (cls(torch.cat(P)).float().argmax(-1) == val_y).float().mean().item()
            E = []
            for s in (vp_en, vp_de):
                out = []
                for i in range(0, len(s), 100):
                    x, m = enc.collate(s[i:i + 100]); out.append(F.normalize(model.head(encode_pooled(model, x, m, n)).float(), dim=-1))
                E.append(torch.cat(out))
            r1 = ((E[0] @ E[1].T).argmax(-1) == torch.arange(len(vp_en))).float().mean().item()
            res[n] = (round(acc, 4), round(r1, 4))
        model.train()
        return res

    corpus = [seqs[t] for t in texts] if a.objective == "mlm" else []
    # A fixed masking of the validation pairs (both languages), the same at every evaluation.
    mlm_val = (mask_sequences(vp_en + vp_de, random.Random(12345), p=a.mask_prob,
                              **masking_rules(tok, enc, random.Random(54321)))
               if a.objective == "mlm" else None)

    @torch.no_grad()
    def mlm_evaluate(ns):
        """Masked-piece accuracy on the validation pairs at each step count."""
        model.eval()
        res = {}
        seqs_v, targets_v = mlm_val
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp)):
            for n in ns:
                correct = total = 0
                for i in range(0, len(seqs_v), 100):
                    part = [(r - i, c, t) for r, c, t in targets_v if i <= r < i + 100]
                    x, m = enc.collate(seqs_v[i:i + 100])
                    logits, tgt = mlm_logits(model, mlm_head, x, m, n, part)
                    correct += int((logits.float().argmax(-1) == tgt).sum())
                    total += len(part)
                res[n] = round(correct / max(1, total), 4)
        model.train()
        return res

    def draw_xl_pair():
        lang = rng.choices(langs, weights=lang_w)[0]
        return by_lang[lang][rng.randrange(len(by_lang[lang]))]

    def draw_pair():
        return pairs[rng.randrange(n_sl)] if rng.random() < a.p_shortlong else draw_xl_pair()

    def save_checkpoint():
        torch.save(dict(model=model.state_dict(), cls=cls.state_dict(), opt=opt.state_dict(), state=state,
                        rng=rng.getstate(), mlm=mlm_head.state_dict() if mlm_head else None), ck)

    model.train()
    last_ck = time.time()
    t_start = time.time() - state["elapsed"]
    losses = []
    while True:
        elapsed = time.time() - t_start
        if elapsed >= budget or (a.max_steps and state["step"] >= a.max_steps):
            break
        # The schedule follows the step budget when one is set (runs that share the machine
        # differently still compare step for step), else the wall-clock budget.
        frac = state["step"] / a.max_steps if a.max_steps else elapsed / budget
        lr = a.lr * min(1.0, (state["step"] + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        if a.objective == "mlm":
            n = sample_steps(rng, a.depth, a.steps_mode, a.p_full)
            masked, targets = mask_sequences([corpus[rng.randrange(len(corpus))] for _ in range(a.batch)], rng,
                                             p=a.mask_prob, **masking)
            x, m = enc.collate(masked)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp)):
                logits, tgt = mlm_logits(model, mlm_head, x, m, n, targets)
            logits = logits.float()
            loss = F.cross_entropy(logits, tgt)
            metrics = (loss.item(), (logits.argmax(-1) == tgt).float().mean().item())
        else:
            if a.objective == "joint":
                batch = [draw_pair() for _ in range(a.batch)]
                ce_texts, ce_labels = [], []
            else:
                picked = [labelled[rng.randrange(len(labelled))] for _ in range(a.batch)]
                ce_texts, ce_labels = [t for t, _, _ in picked], [y for _, y, _ in picked]
                ce_teacher = teacher[[i for _, _, i in picked]] if teacher is not None else None
                batch = [draw_xl_pair() for _ in range(a.align_pairs)]
            q = [seqs[b[1]] for b in batch]; d = [seqs[b[2]] for b in batch]
            if a.objective == "joint":  # the pairs' English side carries the labels
                n_ce, y = len(batch), torch.tensor([b[3] for b in batch])
            else:
                n_ce, y = len(ce_texts), torch.tensor(ce_labels)
            n = sample_steps(rng, a.depth, a.steps_mode, a.p_full)
            x, m = enc.collate([seqs[t] for t in ce_texts] + q + d)
            if a.token_dropout > 0 and ce_texts:
                m = drop_tokens(m, len(ce_texts), a.token_dropout)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp)):
                pooled = encode_pooled(model, x, m, n)
                logits = cls(F.dropout(pooled[:n_ce], a.pooled_dropout, training=True))
                e = model.head(pooled[len(ce_texts):])
            e, logits = e.float(), logits.float()
            B = len(batch)
            e = F.normalize(e, dim=-1)
            sim = e[:B] @ e[B:].T / a.tau
            tgt = torch.arange(B)
            nce = 0.5 * (F.cross_entropy(sim, tgt) + F.cross_entropy(sim.T, tgt))
            ce = F.cross_entropy(logits, y)
            if teacher is not None:
                ce = (1 - a.kd_weight) * ce + a.kd_weight * distillation_loss(logits, ce_teacher, a.kd_temp)
            loss = a.nce_weight * nce + a.ce_weight * ce
            metrics = (nce.item(), ce.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        state["step"] += 1
        losses.append((*metrics, n))
        if state["step"] % 25 == 0:
            ln = np.array([l[:2] for l in losses[-25:]]).mean(0)
            names = ("mlm", "acc") if a.objective == "mlm" else ("nce", "ce+kd" if teacher is not None else "ce")
            say("step %d  %.1f/%.0f min  lr %.2e  %s %.3f  %s %.3f  mean n %.1f  %.2f s/step" % (
                state["step"], elapsed / 60, a.minutes, lr, names[0], ln[0], names[1], ln[1],
                np.mean([l[2] for l in losses[-25:]]), elapsed / max(1, state["step"])))
        if time.time() - last_ck > a.ckpt_minutes * 60:
            state["elapsed"] = time.time() - t_start
            if isinstance(model, families.ShareBertEncoder):
                model.clear_prepared()
            save_checkpoint()
            last_ck = time.time()
            quarter = [a.depth // 4, a.depth // 2, a.depth]
            if a.objective == "mlm":
                say("ckpt; valid masked-piece accuracy by steps:", mlm_evaluate(quarter))
            else:
                say("ckpt; valid (acc, en->de r@1 of 300) by steps:", evaluate(quarter))
    state["elapsed"] = time.time() - t_start
    if isinstance(model, families.ShareBertEncoder):
        model.clear_prepared()
    save_checkpoint()
    torch.save(dict(model=model.state_dict(), cls=cls.state_dict(), state=state, args=vars(a), labels=labels),
               os.path.join(a.out, "final.pt"))
    if a.objective == "mlm":
        say("final valid masked-piece accuracy by steps:", mlm_evaluate(list(range(1, a.depth + 1))))
    else:
        say("final valid (acc, en->de r@1 of 300):", evaluate(list(range(1, a.depth + 1))))
    say("done", state["step"], "steps")
    return 0
