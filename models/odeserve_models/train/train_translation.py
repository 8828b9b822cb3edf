"""Train the parameter-shared en -> de translator (models/odeserve_models/translation.py).

Step-robust (--steps-mode robust): per batch the encoder and decoder Euler step counts are
sampled independently (P(n = L) = --p-full, else n in 1..L-1 weighted 1/n), dt = L/n, exactly
as the server runs them. Fixed depth (--steps-mode fixed): n = L always.
USKI (--uski-fraction > 0, research/papers.md section 4): the first fraction of the optimizer
steps pre-trains on unaligned cross pairs (x_i, y_j), j a random derangement inside the batch,
teacher-forced on y_j with a loss only on target positions whose token also occurs in the true
translation y_i (key tokens), weighted by the token's IDF; the rest trains on aligned pairs.
Label-smoothed cross entropy, AdamW, linear warm-up then cosine decay over --total-steps,
bf16 autocast where the CPU has native bfloat16 (--amp), a checkpoint every --ckpt-minutes (resumes from out/last.pt), log lines as JSON.
--init continues an earlier run's weights under a new schedule (a second stage).

  PYTHONPATH=models nice -n 10 /usr/bin/python3 -m odeserve_models train-translation --out models/work/runs/mt-robust \
      --total-steps 3000 --steps-mode robust
"""
import json
import math
import os
import random
import time


import torch

from odeserve_models.cli import parser
from odeserve_models.cpu import autocast_enabled
from odeserve_models.data import translation_pairs
from odeserve_models.paths import MODELS
from odeserve_models.translation import SharedTranslator, beam_search, exported_weights
import sentencepiece as spm
from odeserve_models.mt_metrics import corpus_bleu



def parse(argv=None):
    ap = parser("train-translation", __doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(MODELS, "work", "tok", "spm8k.model"))
    ap.add_argument("--total-steps", type=int, default=3000)
    ap.add_argument("--steps-mode", default="robust", choices=["robust", "fixed"])
    ap.add_argument("--p-full", type=float, default=0.35)
    ap.add_argument("--uski-fraction", type=float, default=0.0)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--encoder-depth", type=int, default=6)
    ap.add_argument("--decoder-depth", type=int, default=6)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--max-train-tokens", type=int, default=96, help="drop pairs longer than this")
    ap.add_argument("--short-repeats", type=int, default=2,
                    help="short descriptions (the BLEU target) appear this many times per epoch")
    ap.add_argument("--batch-tokens", type=int, default=3000, help="target tokens per batch")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--amp", type=int, default=-1,
                    help="bf16 autocast: 1 on, 0 off, -1 on where bfloat16 is native (emulated elsewhere, and slow)")
    ap.add_argument("--ckpt-minutes", type=float, default=5)
    ap.add_argument("--init", default="",
                    help="final.pt of an earlier run, or an exported model.pt (TorchScript): start from "
                         "its weights with a fresh optimizer and schedule (continued training); "
                         "ignored when out/last.pt exists")
    return ap.parse_args(argv)


class Pieces:
    """The served SentencePiece model: ids without BOS/EOS (added by collate)."""

    def __init__(self, path):
        self.sp = spm.SentencePieceProcessor(model_file=path)
        self.vocab_size = self.sp.vocab_size()
        self.pad_id, self.bos_id, self.eos_id = self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id()

    def encode_ids(self, text):
        return self.sp.encode(text, out_type=int)

    def decode_ids(self, ids):
        return self.sp.decode(ids)


def load_pairs(tok, split, max_tokens):
    out = []
    for r in translation_pairs(split):
        src = tok.encode_ids(r["en"])
        tgt = tok.encode_ids(r["de"])
        if max_tokens and (len(src) + 2 > max_tokens or len(tgt) + 1 > max_tokens):
            continue
        out.append(dict(src=src, tgt=tgt, kind=r["kind"], en=r["en"], de=r["de"]))
    return out


def batches(pairs, batch_tokens, rng):
    """Length-bucketed batches of about batch_tokens target tokens, in random order."""
    idx = list(range(len(pairs)))
    rng.shuffle(idx)
    chunks = [idx[i:i + 2000] for i in range(0, len(idx), 2000)]
    out = []
    for ch in chunks:
        ch.sort(key=lambda i: len(pairs[i]["tgt"]))
        cur, longest = [], 0
        for i in ch:
            L = len(pairs[i]["tgt"]) + 1
            if cur and max(longest, L) * (len(cur) + 1) > batch_tokens:
                out.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, L)
        if cur:
            out.append(cur)
    rng.shuffle(out)
    return out


def collate(pairs, ids, bos, eos, pad):
    S = max(len(pairs[i]["src"]) for i in ids) + 2
    T = max(len(pairs[i]["tgt"]) for i in ids) + 1
    src = torch.full((len(ids), S), pad, dtype=torch.long)
    tin = torch.full((len(ids), T), pad, dtype=torch.long)
    tout = torch.full((len(ids), T), pad, dtype=torch.long)
    for b, i in enumerate(ids):
        s = [bos] + pairs[i]["src"] + [eos]
        t = pairs[i]["tgt"]
        src[b, :len(s)] = torch.tensor(s)
        tin[b, :len(t) + 1] = torch.tensor([bos] + t)
        tout[b, :len(t) + 1] = torch.tensor(t + [eos])
    return src, (src != pad).float(), tin, tout


def sample_steps(rng, L, mode, p_full):
    if mode == "fixed" or rng.random() < p_full:
        return L
    return rng.choices(range(1, L), weights=[1.0 / n for n in range(1, L)])[0]


def idf_table(pairs, vocab):
    df = torch.zeros(vocab)
    for p in pairs:
        for t in set(p["tgt"]):
            df[t] += 1
    return torch.log(len(pairs) / (df + 1.0)).clamp(min=0.0)


def uski_batch(tout, pad, idf, rng):
    """Cross pairs: source i is paired with target j = perm[i] (a derangement). Key-token
    weights: position of y_j carries idf[token] if that token occurs in y_i, else 0."""
    B = tout.size(0)
    perm = list(range(B))
    if B > 1:
        while any(perm[i] == i for i in range(B)):
            rng.shuffle(perm)
    perm_t = torch.tensor(perm)
    tgt_j = tout[perm_t]
    weights = torch.zeros(tgt_j.shape)
    for i in range(B):
        true_tokens = set(int(t) for t in tout[i] if int(t) != pad)
        for pos, t in enumerate(tgt_j[i].tolist()):
            if t != pad and t in true_tokens:
                weights[i, pos] = float(idf[t])
    return perm_t, weights


def loss_fn(logits, target, weights, smoothing):
    lp = torch.log_softmax(logits.float(), dim=-1)
    nll = -lp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lp.mean(-1)
    per_tok = (1 - smoothing) * nll + smoothing * smooth
    return (per_tok * weights).sum() / weights.sum().clamp(min=1e-6), (nll * weights).sum(), weights.sum()


def evaluate(model, valid, a, tok, steps_pairs, n_bleu=150):
    model.eval()
    out = {}
    rng = random.Random(0)
    with torch.inference_mode():
        for es, ds in steps_pairs:
            tot, cnt = 0.0, 0.0
            for ids in batches(valid, a.batch_tokens, rng):
                src, mask, tin, tout = collate(valid, ids, tok.bos_id, tok.eos_id, tok.pad_id)
                w = (tout != tok.pad_id).float()
                mem = model.encode(src, mask, es)
                logits = model.decode_logits(mem, mask, tin, ds)
                _, nll, n = loss_fn(logits, tout, w, 0.0)
                tot += float(nll); cnt += float(n)
            out["valid_nll_e%d_d%d" % (es, ds)] = round(tot / cnt, 4)
        shorts = [p for p in valid if p["kind"] == "short"][:n_bleu]
        hyps = []
        for i in range(0, len(shorts), 32):
            ids = list(range(i, min(i + 32, len(shorts))))
            src, mask, _, _ = collate(shorts, ids, tok.bos_id, tok.eos_id, tok.pad_id)
            for o, _ in beam_search(model, src, mask, a.encoder_depth, a.decoder_depth, 1, [64] * len(ids)):
                hyps.append(tok.decode_ids(o))
        out["valid_short_bleu_greedy"] = round(corpus_bleu(hyps, [[p["de"] for p in shorts]]).score, 2)
        out["sample"] = [shorts[0]["en"], hyps[0]]
    model.train()
    return out


def init_weights(path, model):
    """Weights of a training checkpoint, or of an exported TorchScript translator (its
    buffers made by prepare(), such as the bfloat16 projection, are not parameters: dropped)."""
    if path.endswith("model.pt"):  # the artifact contract's TorchScript file
        return exported_weights(torch.jit.load(path), model)
    return torch.load(path)["model"]


def main(argv=None) -> int:
    a = parse(argv)
    a.amp = int(autocast_enabled(a.amp))
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "train.log"), "a")

    def emit(d):
        line = json.dumps(d, ensure_ascii=False)
        print(line, flush=True)
        log.write(line + "\n"); log.flush()

    tok = Pieces(a.tokenizer)
    train = load_pairs(tok, "train", a.max_train_tokens)
    train += [p for p in train if p["kind"] == "short"] * (a.short_repeats - 1)
    valid = load_pairs(tok, "valid", a.max_train_tokens)[:600]
    model = SharedTranslator(tok.vocab_size, a.hidden, a.heads, a.ffn, a.encoder_depth,
                             a.decoder_depth, a.max_len, tok.pad_id, tok.bos_id, tok.eos_id)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), weight_decay=0.01)
    idf = idf_table(train, tok.vocab_size)
    step, epoch, elapsed = 0, 0, 0.0
    last = os.path.join(a.out, "last.pt")
    if os.path.exists(last):
        ck = torch.load(last)
        model.load_state_dict(ck["model"]); opt.load_state_dict(ck["opt"])
        step, epoch, elapsed = ck["step"], ck["epoch"], ck["elapsed"]
        rng.setstate(ck["rng"]); torch.set_rng_state(ck["torch_rng"])
        emit(dict(event="resume", step=step))
    elif a.init:
        model.load_state_dict(init_weights(a.init, model))
        emit(dict(event="init", weights=a.init))
    emit(dict(event="start", args=vars(a), train_pairs=len(train), valid_pairs=len(valid),
              parameters=sum(p.numel() for p in model.parameters())))
    uski_steps = int(a.uski_fraction * a.total_steps)
    t_ck = time.time()
    t0 = time.time() - elapsed
    tok_seen, loss_acc, n_acc = 0, 0.0, 0
    while step < a.total_steps:
        order = batches(train, a.batch_tokens, random.Random(a.seed * 1000 + epoch))
        for ids in order:
            if step >= a.total_steps:
                break
            src, mask, tin, tout = collate(train, ids, tok.bos_id, tok.eos_id, tok.pad_id)
            weights = (tout != tok.pad_id).float()
            uski = step < uski_steps
            if uski:
                perm, weights = uski_batch(tout, tok.pad_id, idf, rng)
                tin, tout = tin[perm], tout[perm]
            es = sample_steps(rng, a.encoder_depth, a.steps_mode, a.p_full)
            ds = sample_steps(rng, a.decoder_depth, a.steps_mode, a.p_full)
            lr = a.lr * min(1.0, (step + 1) / a.warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / a.total_steps)))
            for gr in opt.param_groups:
                gr["lr"] = lr
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp)):
                mem = model.encode(src, mask, es)
                logits = model.decode_logits(mem, mask, tin, ds)
            loss, _, _ = loss_fn(logits, tout, weights, a.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            tok_seen += int((tout != tok.pad_id).sum())
            loss_acc += float(loss); n_acc += 1
            if step % 50 == 0:
                emit(dict(step=step, epoch=epoch, phase="uski" if uski else "plain", loss=round(loss_acc / n_acc, 4),
                          lr=round(lr, 6), tgt_tokens_per_s=round(tok_seen / max(1e-6, time.time() - t_ck), 1),
                          minutes=round((time.time() - t0) / 60, 2)))
                loss_acc, n_acc = 0.0, 0
            if time.time() - t_ck > a.ckpt_minutes * 60:
                torch.save(dict(model=model.state_dict(), opt=opt.state_dict(), step=step, epoch=epoch,
                                elapsed=time.time() - t0, rng=rng.getstate(), torch_rng=torch.get_rng_state(),
                                args=vars(a)), last)
                t_ck, tok_seen = time.time(), 0
        epoch += 1
    L = a.decoder_depth
    ev = evaluate(model, valid, a, tok, [(a.encoder_depth, L), (a.encoder_depth, max(1, L // 2)), (max(1, a.encoder_depth // 2), max(1, L // 2))])
    emit(dict(event="done", step=step, minutes=round((time.time() - t0) / 60, 2), **ev))
    torch.save(dict(model=model.state_dict(), args=vars(a), step=step), os.path.join(a.out, "final.pt"))
    return 0
