"""sacreBLEU-compatible corpus BLEU and chrF / chrF++, pure Python 3 standard library.

A re-implementation of the scoring rules of sacreBLEU 2.x (https://github.com/mjpost/sacrebleu,
files sacrebleu/metrics/bleu.py, sacrebleu/metrics/chrf.py, sacrebleu/metrics/helpers.py,
sacrebleu/tokenizers/tokenizer_13a.py, sacrebleu/tokenizers/tokenizer_re.py), so that scores can be
computed where sacrebleu is not installed. Defaults are sacreBLEU's:

  BLEU: tokenizer 13a, case-sensitive, max n-gram order 4, smoothing 'exp', effective order off,
        brevity penalty against the closest reference length (ties -> the shorter reference).
  chrF: character order 6, word order 0 (2 = chrF++), beta 2, whitespace removed, effective-order
        averaging (eps_smoothing off); statistics are summed over the corpus and the F-score is
        computed once; with several references the one with the best sentence F-score is used.

References use sacreBLEU's layout: either one stream (a list of strings aligned with the
hypotheses) or several streams (refs[k][i] is the k-th reference of sentence i). A reference that
is '' or None is skipped for that sentence (variable number of references); a sentence with no
reference left is an error.

CLI:  python3 -m odeserve_models.mt_metrics --hyp FILE --ref FILE [--ref FILE ...]
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

MAX_NGRAM_ORDER = 4

# Defaults for smooth_value (Chen & Cherry 2014, as in sacreBLEU's BLEU.SMOOTH_DEFAULTS).
SMOOTH_DEFAULTS: Dict[str, Optional[float]] = {"none": None, "floor": 0.1, "add-k": 1, "exp": None}

References = Union[str, Sequence[Optional[str]], Sequence[Sequence[Optional[str]]]]

# --------------------------------------------------------------------------------------------
# Tokenization
# --------------------------------------------------------------------------------------------

# mteval-v13a's language-dependent rules, applied in this order (sacrebleu tokenizer_re.py).
_13A_RULES: List[Tuple["re.Pattern[str]", str]] = [
    # split out punctuation and symbols: { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    # period and comma unless preceded by a digit
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    # period and comma unless followed by a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    # dash when preceded by a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def tokenize_13a(line: str) -> str:
    """sacreBLEU's default '13a' tokenizer (mteval-v13a); tokens joined by single spaces."""
    line = line.replace("<skipped>", "")
    line = line.replace("-\n", "")
    line = line.replace("\n", " ")
    line = line.replace("&quot;", '"')
    line = line.replace("&amp;", "&")
    line = line.replace("&lt;", "<")
    line = line.replace("&gt;", ">")
    line = f" {line} "
    for pattern, repl in _13A_RULES:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def tokenize_none(line: str) -> str:
    """sacreBLEU's 'none' tokenizer: the line unchanged (n-grams are still split on whitespace)."""
    return line


TOKENIZERS: Dict[str, Callable[[str], str]] = {"13a": tokenize_13a, "none": tokenize_none}

# --------------------------------------------------------------------------------------------
# Input normalisation
# --------------------------------------------------------------------------------------------


def _as_hypotheses(hypotheses: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(hypotheses, str):
        return [hypotheses]
    hyps = list(hypotheses)
    for i, h in enumerate(hyps):
        if not isinstance(h, str):
            raise ValueError(f"hypothesis {i} is {type(h).__name__}, not str")
    return hyps


def _as_streams(references: References) -> List[List[Optional[str]]]:
    """Returns reference streams: streams[k][i] is the k-th reference of sentence i."""
    if isinstance(references, str):
        return [[references]]
    refs = list(references)
    if not refs:
        raise ValueError("no references given")
    if all(r is None or isinstance(r, str) for r in refs):
        return [refs]  # a single stream
    streams = []
    for k, stream in enumerate(refs):
        if isinstance(stream, str) or stream is None:
            raise ValueError("references mix strings and streams; pass a list of strings (one "
                             "stream) or a list of lists of strings (several streams)")
        streams.append(list(stream))
    return streams


def _segments(hypotheses, references) -> List[Tuple[str, List[str]]]:
    """Pairs each hypothesis with its defined, non-empty references (sacreBLEU's rule)."""
    hyps = _as_hypotheses(hypotheses)
    streams = _as_streams(references)
    for k, stream in enumerate(streams):
        if len(stream) != len(hyps):
            raise ValueError(f"reference stream {k} has {len(stream)} lines, "
                             f"hypotheses have {len(hyps)}")
    out = []
    for i, hyp in enumerate(hyps):
        refs = [s[i] for s in streams if s[i] is not None and s[i] != ""]
        if not refs:
            raise ValueError(f"sentence {i}: no non-empty reference")
        out.append((hyp, refs))
    return out


# --------------------------------------------------------------------------------------------
# BLEU
# --------------------------------------------------------------------------------------------


def _my_log(x: float) -> float:
    # sacrebleu.utils.my_log: log(0) is a very large negative number instead of an error
    return -9999999999 if x == 0.0 else math.log(x)


@dataclass
class BleuResult:
    score: float                  # 0-100
    counts: List[float]           # matching n-grams per order (add-k smoothing adds k, as sacreBLEU)
    totals: List[float]           # hypothesis n-grams per order
    precisions: List[float]       # percent, per order (smoothed)
    bp: float
    sys_len: int
    ref_len: int

    @property
    def ratio(self) -> float:
        return self.sys_len / self.ref_len if self.ref_len else 0.0

    def format(self, width: int = 2) -> str:
        prec = "/".join(f"{p:.1f}" for p in self.precisions)
        return (f"BLEU = {self.score:.{width}f} {prec} (BP = {self.bp:.3f} ratio = {self.ratio:.3f} "
                f"hyp_len = {self.sys_len:d} ref_len = {self.ref_len:d})")

    def __str__(self) -> str:
        return self.format()


def compute_bleu(correct: Sequence[float], total: Sequence[float], sys_len: int, ref_len: int,
                 smooth_method: str = "none", smooth_value: Optional[float] = None,
                 effective_order: bool = False,
                 max_ngram_order: int = MAX_NGRAM_ORDER) -> BleuResult:
    """BLEU from sufficient statistics (sacreBLEU's BLEU.compute_bleu; its default is 'none')."""
    if smooth_method not in SMOOTH_DEFAULTS:
        raise ValueError(f"unknown smooth_method {smooth_method!r}")
    if smooth_value is None:
        smooth_value = SMOOTH_DEFAULTS[smooth_method]
    correct, total = list(correct), list(total)

    if sys_len < ref_len:
        bp = math.exp(1 - ref_len / sys_len) if sys_len > 0 else 0.0
    else:
        bp = 1.0

    precisions = [0.0] * max_ngram_order
    if not any(correct):  # no match at all -> 0 whatever the smoothing (sacreBLEU #141)
        return BleuResult(0.0, correct, total, precisions, bp, sys_len, ref_len)

    smooth_mteval = 1.0
    eff_order = max_ngram_order
    for n in range(1, max_ngram_order + 1):
        if smooth_method == "add-k" and n > 1:
            correct[n - 1] += smooth_value
            total[n - 1] += smooth_value
        if total[n - 1] == 0:
            break
        if effective_order:
            eff_order = n
        if correct[n - 1] == 0:
            if smooth_method == "exp":
                smooth_mteval *= 2
                precisions[n - 1] = 100.0 / (smooth_mteval * total[n - 1])
            elif smooth_method == "floor":
                precisions[n - 1] = 100.0 * smooth_value / total[n - 1]
        else:
            precisions[n - 1] = 100.0 * correct[n - 1] / total[n - 1]

    score = bp * math.exp(sum(_my_log(p) for p in precisions[:eff_order]) / eff_order)
    return BleuResult(score, correct, total, precisions, bp, sys_len, ref_len)


def _word_ngrams(tokens: List[str], max_order: int) -> Counter:
    grams: Counter = Counter()
    for n in range(1, max_order + 1):
        for i in range(len(tokens) - n + 1):
            grams[tuple(tokens[i:i + n])] += 1
    return grams


def _closest_ref_len(hyp_len: int, ref_lens: List[int]) -> int:
    closest_diff, closest_len = -1, -1
    for ref_len in ref_lens:
        diff = abs(hyp_len - ref_len)
        if closest_diff == -1 or diff < closest_diff:
            closest_diff, closest_len = diff, ref_len
        elif diff == closest_diff and ref_len < closest_len:
            closest_len = ref_len
    return closest_len


def bleu_statistics(hypotheses, references, tokenize: str = "13a", lowercase: bool = False,
                    max_ngram_order: int = MAX_NGRAM_ORDER) -> List[List[int]]:
    """Per-sentence [hyp_len, ref_len, correct_1..N, total_1..N], as sacreBLEU collects them."""
    if tokenize not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenize!r} (have {sorted(TOKENIZERS)})")
    tok = TOKENIZERS[tokenize]

    def prep(s: str) -> List[str]:
        if lowercase:
            s = s.lower()
        return tok(s.rstrip()).split()

    stats = []
    for hyp, refs in _segments(hypotheses, references):
        ref_ngrams: Counter = Counter()
        ref_lens = []
        for ref in refs:
            ref_tokens = prep(ref)
            ref_lens.append(len(ref_tokens))
            for gram, count in _word_ngrams(ref_tokens, max_ngram_order).items():
                if count > ref_ngrams[gram]:
                    ref_ngrams[gram] = count
        hyp_tokens = prep(hyp)
        correct = [0] * max_ngram_order
        total = [0] * max_ngram_order
        for gram, count in _word_ngrams(hyp_tokens, max_ngram_order).items():
            total[len(gram) - 1] += count
            correct[len(gram) - 1] += min(count, ref_ngrams.get(gram, 0))
        stats.append([len(hyp_tokens), _closest_ref_len(len(hyp_tokens), ref_lens)] + correct + total)
    return stats


def corpus_bleu(hypotheses: Union[str, Sequence[str]], references: References, *,
                tokenize: str = "13a", lowercase: bool = False, smooth_method: str = "exp",
                smooth_value: Optional[float] = None, max_ngram_order: int = MAX_NGRAM_ORDER,
                effective_order: bool = False) -> BleuResult:
    """Corpus BLEU with sacreBLEU's defaults (sacrebleu.corpus_bleu / BLEU().corpus_score)."""
    if smooth_method not in SMOOTH_DEFAULTS:
        raise ValueError(f"unknown smooth_method {smooth_method!r}")
    stats = bleu_statistics(hypotheses, references, tokenize, lowercase, max_ngram_order)
    summed = [sum(col) for col in zip(*stats)] if stats else [0] * (2 + 2 * max_ngram_order)
    return compute_bleu(summed[2:2 + max_ngram_order], summed[2 + max_ngram_order:],
                        int(summed[0]), int(summed[1]), smooth_method=smooth_method,
                        smooth_value=smooth_value, effective_order=effective_order,
                        max_ngram_order=max_ngram_order)


def sentence_bleu(hypothesis: str, references: Union[str, Sequence[str]], *,
                  tokenize: str = "13a", lowercase: bool = False, smooth_method: str = "exp",
                  smooth_value: Optional[float] = None, max_ngram_order: int = MAX_NGRAM_ORDER,
                  effective_order: bool = True) -> BleuResult:
    """Sentence BLEU as sacrebleu.sentence_bleu: 'exp' smoothing with effective order on."""
    refs = [references] if isinstance(references, str) else list(references)
    return corpus_bleu([hypothesis], [[r] for r in refs], tokenize=tokenize, lowercase=lowercase,
                       smooth_method=smooth_method, smooth_value=smooth_value,
                       max_ngram_order=max_ngram_order, effective_order=effective_order)


# --------------------------------------------------------------------------------------------
# chrF / chrF++
# --------------------------------------------------------------------------------------------

_PUNCTS = set('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~')


@dataclass
class ChrfResult:
    score: float                  # 0-100
    char_order: int
    word_order: int
    beta: int
    statistics: List[int] = field(default_factory=list, repr=False)  # [hyp, ref, match] per order

    @property
    def name(self) -> str:
        return f"chrF{self.beta}" + "+" * self.word_order

    def format(self, width: int = 2) -> str:
        return f"{self.name} = {self.score:.{width}f}"

    def __str__(self) -> str:
        return self.format()


def _char_ngrams(line: str, max_order: int, whitespace: bool) -> List[Counter]:
    if not whitespace:
        line = "".join(line.split())
    return [Counter(line[i:i + n] for i in range(len(line) - n + 1))
            for n in range(1, max_order + 1)]


def _chrf_words(sent: str) -> List[str]:
    """chrF++'s primitive tokenization: split one punctuation mark off a word's end or start."""
    words: List[str] = []
    for w in sent.split():
        if len(w) == 1:
            words.append(w)
        elif w[-1] in _PUNCTS:
            words += [w[:-1], w[-1]]
        elif w[0] in _PUNCTS:
            words += [w[0], w[1:]]
        else:
            words.append(w)
    return words


def _word_ngrams_str(words: List[str], n: int) -> Counter:
    return Counter(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))


def _chrf_ngrams(sent: str, char_order: int, word_order: int, whitespace: bool) -> List[Counter]:
    grams = _char_ngrams(sent, char_order, whitespace)
    if word_order > 0:
        words = _chrf_words(sent)
        grams += [_word_ngrams_str(words, n) for n in range(1, word_order + 1)]
    return grams


def _chrf_f_score(stats: Sequence[int], order: int, beta: float, eps_smoothing: bool) -> float:
    eps = 1e-16
    factor = beta ** 2
    score = 0.0
    eff_order = 0
    avg_prec = avg_rec = 0.0
    for i in range(order):
        n_hyp, n_ref, n_match = stats[3 * i:3 * i + 3]
        prec = n_match / n_hyp if n_hyp > 0 else eps
        rec = n_match / n_ref if n_ref > 0 else eps
        denom = factor * prec + rec
        score += ((1 + factor) * prec * rec / denom) if denom > 0 else eps
        if n_hyp > 0 and n_ref > 0:
            avg_prec += prec
            avg_rec += rec
            eff_order += 1
    if eps_smoothing:
        return 100 * score / order
    if eff_order == 0:
        return 0.0
    avg_prec /= eff_order
    avg_rec /= eff_order
    if avg_prec + avg_rec:
        return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec)
    return 0.0


def chrf_statistics(hypotheses, references, char_order: int = 6, word_order: int = 0,
                    beta: int = 2, lowercase: bool = False, whitespace: bool = False,
                    eps_smoothing: bool = False) -> List[List[int]]:
    """Per-sentence [hyp, ref, match] x (char_order + word_order), best reference per sentence."""
    order = char_order + word_order
    out = []
    for hyp, refs in _segments(hypotheses, references):
        if lowercase:
            hyp, refs = hyp.lower(), [r.lower() for r in refs]
        hyp_grams = _chrf_ngrams(hyp, char_order, word_order, whitespace)
        best, best_f = [], -1.0
        for ref in refs:
            stats: List[int] = []
            for h, r in zip(hyp_grams, _chrf_ngrams(ref, char_order, word_order, whitespace)):
                match = sum(min(c, r[g]) for g, c in h.items() if g in r)
                # sacreBLEU does not count hypothesis n-grams when the reference has none
                stats += [sum(h.values()) if r else 0, sum(r.values()), match]
            f = _chrf_f_score(stats, order, beta, eps_smoothing)
            if f > best_f:
                best, best_f = stats, f
        out.append(best)
    return out


def corpus_chrf(hypotheses: Union[str, Sequence[str]], references: References,
                char_order: int = 6, word_order: int = 0, beta: int = 2, *,
                lowercase: bool = False, whitespace: bool = False,
                eps_smoothing: bool = False) -> ChrfResult:
    """Corpus chrF (word_order=2: chrF++) as sacreBLEU 2.x CHRF().corpus_score."""
    order = char_order + word_order
    stats = chrf_statistics(hypotheses, references, char_order, word_order, beta, lowercase,
                            whitespace, eps_smoothing)
    summed = [sum(col) for col in zip(*stats)] if stats else [0] * (3 * order)
    return ChrfResult(_chrf_f_score(summed, order, beta, eps_smoothing), char_order, word_order,
                      beta, summed)


def sentence_chrf(hypothesis: str, references: Union[str, Sequence[str]],
                  char_order: int = 6, word_order: int = 0, beta: int = 2, *,
                  lowercase: bool = False, whitespace: bool = False,
                  eps_smoothing: bool = False) -> ChrfResult:
    refs = [references] if isinstance(references, str) else list(references)
    return corpus_chrf([hypothesis], [[r] for r in refs], char_order, word_order, beta,
                       lowercase=lowercase, whitespace=whitespace, eps_smoothing=eps_smoothing)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _read_lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m odeserve_models.mt_metrics",
                                 description="sacreBLEU-compatible BLEU and chrF (stdlib only).")
    ap.add_argument("--hyp", required=True, help="hypotheses, one detokenized sentence per line")
    ap.add_argument("--ref", required=True, action="append",
                    help="references, aligned with --hyp; repeat for several reference streams")
    ap.add_argument("--tokenize", default="13a", choices=sorted(TOKENIZERS))
    ap.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU and chrF")
    ap.add_argument("--chrf-word-order", type=int, default=0, help="2 for chrF++ (default 0)")
    ap.add_argument("--width", type=int, default=2, help="decimals to print (default 2)")
    args = ap.parse_args(argv)

    hyps = _read_lines(args.hyp)
    refs = [_read_lines(r) for r in args.ref]
    try:
        bleu = corpus_bleu(hyps, refs, tokenize=args.tokenize, lowercase=args.lowercase)
        chrf = corpus_chrf(hyps, refs, word_order=args.chrf_word_order, lowercase=args.lowercase)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(bleu.format(args.width))
    print(chrf.format(args.width))
    return 0


if __name__ == "__main__":
    sys.exit(main())
