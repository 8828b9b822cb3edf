"""Baselines by our own code: majority class, TF-IDF + softmax logistic regression (numpy, with
scipy.sparse for the sparse products), TF-IDF character n-gram cosine retrieval."""
import math
import re
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

WORD = re.compile(r"\w+", re.UNICODE)


def word_features(text: str) -> List[str]:
    toks = WORD.findall(text.lower())
    return toks + [a + " " + b for a, b in zip(toks, toks[1:])]


def char_features(text: str, orders=(2, 3, 4)) -> List[str]:
    out = []
    for w in WORD.findall(text.lower()):
        w = "<" + w + ">"
        for n in orders:
            out.extend(w[i:i + n] for i in range(0, max(0, len(w) - n + 1)))
    return out


class Tfidf:
    def __init__(self, featurize, min_df=2, max_features=100000):
        self.featurize, self.min_df, self.max_features = featurize, min_df, max_features

    def fit(self, texts: Sequence[str]):
        df = Counter()
        for t in texts:
            df.update(set(self.featurize(t)))
        items = [(f, c) for f, c in df.items() if c >= self.min_df]
        items.sort(key=lambda x: (-x[1], x[0]))
        items = items[: self.max_features]
        self.vocab = {f: i for i, (f, _) in enumerate(items)}
        n = len(texts)
        self.idf = np.array([math.log((1 + n) / (1 + c)) + 1 for _, c in items], dtype=np.float32)
        return self

    def transform(self, texts: Sequence[str]) -> sp.csr_matrix:
        rows, cols, vals = [], [], []
        for r, t in enumerate(texts):
            c = Counter(f for f in self.featurize(t) if f in self.vocab)
            if not c:
                continue
            idx = np.array([self.vocab[f] for f in c], dtype=np.int64)
            tf = 1.0 + np.log(np.array(list(c.values()), dtype=np.float32))
            v = tf * self.idf[idx]
            v /= np.linalg.norm(v) + 1e-12
            rows.extend([r] * len(idx)); cols.extend(idx.tolist()); vals.extend(v.tolist())
        return sp.csr_matrix((np.array(vals, np.float32), (rows, cols)), shape=(len(texts), len(self.vocab)))


def train_logreg(X: sp.csr_matrix, y: np.ndarray, n_classes: int, epochs=8, lr=0.05, l2=1e-6,
                 batch=256, seed=0, X_val=None, y_val=None, log=print) -> Tuple[np.ndarray, np.ndarray]:
    """Softmax regression trained with Adam on minibatches (numpy). Returns (W, b) of the epoch
    with the best validation accuracy when a validation set is given."""
    rng = np.random.RandomState(seed)
    d = X.shape[1]
    W = np.zeros((d, n_classes), np.float32); b = np.zeros(n_classes, np.float32)
    mW = np.zeros_like(W); vW = np.zeros_like(W); mb = np.zeros_like(b); vb = np.zeros_like(b)
    t = 0
    best = (-1.0, W.copy(), b.copy())
    for ep in range(epochs):
        order = rng.permutation(X.shape[0])
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            Xb = X[idx]
            z = Xb @ W + b
            z -= z.max(1, keepdims=True)
            p = np.exp(z); p /= p.sum(1, keepdims=True)
            p[np.arange(len(idx)), y[idx]] -= 1.0
            p /= len(idx)
            gW = np.asarray(Xb.T @ p) + l2 * W
            gb = p.sum(0)
            t += 1
            for g, m, v, w in ((gW, mW, vW, W), (gb, mb, vb, b)):
                m *= 0.9; m += 0.1 * g
                v *= 0.999; v += 0.001 * g * g
                w -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        if X_val is not None:
            acc = float((predict(X_val, W, b) == y_val).mean())
            log("  logreg epoch %d valid acc %.4f" % (ep + 1, acc))
            if acc > best[0]:
                best = (acc, W.copy(), b.copy())
    if X_val is not None:
        return best[1], best[2]
    return W, b


def fit_tfidf_lr(train_texts: Sequence[str], y: np.ndarray, valid_texts: Sequence[str], y_val: np.ndarray,
                 n_classes: int, log=print) -> Tuple[Tfidf, np.ndarray, np.ndarray]:
    """The classification baseline, TF-IDF word 1-2-grams + softmax regression: features fitted on
    train_texts, the regression's epoch chosen on the validation texts. Returns (features, W, b)."""
    vec = Tfidf(word_features, min_df=2, max_features=200000).fit(train_texts)
    X = vec.transform(train_texts)
    log("tfidf features %s" % (X.shape,))
    W, b = train_logreg(X, y, n_classes, epochs=6, X_val=vec.transform(valid_texts), y_val=y_val, log=log)
    return vec, W, b


def predict(X, W, b):
    return np.asarray(X @ W + b).argmax(1)


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> float:
    f1s = []
    for c in range(n_classes):
        tp = int(((y_pred == c) & (y_true == c)).sum())
        fp = int(((y_pred == c) & (y_true != c)).sum())
        fn = int(((y_pred != c) & (y_true == c)).sum())
        if tp + fp + fn == 0:
            continue  # class absent from both: not counted
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1s))


def recall_at_k(sim: np.ndarray, ks=(1, 10)) -> Dict[int, float]:
    """sim[i, j]: query i vs candidate j; the right candidate of query i is j = i. Candidates tied
    with the right one are broken at random, in expectation: with g strictly better and t tied,
    the right one lands in the top k with probability clip((k - g) / (t + 1), 0, 1). (Counting
    ties as hits would give a collapsed model, all similarities equal, recall 1.)"""
    diag = np.diag(sim)[:, None]
    better = (sim > diag).sum(1)
    tied = (sim == diag).sum(1) - 1  # the right candidate is tied with itself
    return {k: float(np.clip((k - better) / (tied + 1), 0, 1).mean()) for k in ks}


def char_tfidf_retrieval(queries: Sequence[str], cands: Sequence[str],
                         fit_texts: Optional[Sequence[str]] = None) -> Dict[int, float]:
    """TF-IDF char 2-4-gram cosine retrieval. The vocabulary and IDF come from `fit_texts`
    (training pairs, both languages); fitting them on the test queries and candidates themselves
    would keep exactly the rare n-grams a query shares with its own translation."""
    vec = Tfidf(char_features, min_df=2, max_features=200000).fit(
        list(fit_texts) if fit_texts is not None else list(queries) + list(cands))
    Q = vec.transform(queries); C = vec.transform(cands)
    return recall_at_k((Q @ C.T).toarray())
