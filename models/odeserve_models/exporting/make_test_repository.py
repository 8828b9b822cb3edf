"""Build the tiny, deterministic test model repository used by the C++ tests.

    PYTHONPATH=models /usr/bin/python3 -m odeserve_models make-test-repository OUT_DIR [--no-verify]

Randomly initialised tiny models (H=32, 2 heads, FFN 64, L=4, max_sequence_length 32) of the
same family code as the real models, a SentencePiece tokenizer (vocab ~500) trained here from
tests/fixtures/descriptions-sample.txt. No network, no large data, < 60 s on one core.
Models: tiny-albert, tiny-sharebert, tiny-eelbert (EMBEDDING), tiny-classifier (CLASSIFICATION),
tiny-lexical (CLASSIFICATION: a ShareBERT encoder times a lexical expert riding in the ODE state),
tiny-probe (CLASSIFICATION: tiny-lexical's experts times a probe on an EELBERT embedder whose own
field runs in the same state over the first PROBE_WINDOW positions),
tiny-translator (TRANSLATION: shared encoder + shared decoder, L=4 each).
quality.pbtxt holds agreement with the L-step Euler output on the sample (not task quality).
"""
import os
import shutil
import tempfile

import torch

from odeserve_models import families
from odeserve_models.cli import parser, pin_hash_seed
from odeserve_models.export import config_text, export_model, quality_text
from odeserve_models.hashing import PieceHasher
from odeserve_models.lexical import EmbeddingProbeClassifier, LexicalClassifier, piece_feature_table
from odeserve_models.paths import ROOT
from odeserve_models.solvers import run
from odeserve_models.text import Tokenizer, train_sentencepiece
from odeserve_models.translation import SharedTranslator, beam_search

SAMPLE = os.path.join(ROOT, "tests", "fixtures", "descriptions-sample.txt")
H, HEADS, FFN, L, T, EMB = 32, 2, 64, 4, 32, 16
LANGS = ["en", "de", "fr", "it", "da"]
LABELS = ["libs", "python", "games", "other"]
HASH = dict(dim=16, seed=1234, orders=[2, 3, 4])
PROBE_WINDOW = 12  # shorter than T: the server must carry an expert that reads a prefix
BATCHING = dict(max_batch_size=16, max_batch_tokens=512, max_queue_delay_us=1000, max_queue_size=64)


@torch.no_grad()
def spread_head(model, tok, texts):
    """Random-init pooled vectors share a large common component; aim the random head at the
    input-dependent part so the test classifier predicts varied labels."""
    x, mask = tok.batch(texts)
    h = model.input_stage(x, mask)
    for _ in range(L):
        h = h + model.vector_field(h, mask)
    P = model.pool(h, mask)
    mu, sd = P.mean(0), P.std(0) + 1e-6
    g = torch.Generator().manual_seed(7)
    W = torch.randn(model.head.weight.shape, generator=g) / sd / (P.shape[1] ** 0.5)
    model.head.weight.copy_(W)
    model.head.bias.copy_(-(W @ mu))


@torch.no_grad()
def agreement_profile(model, tok, texts, task):
    x, mask = tok.batch(texts)
    ref = run(model, x, mask, L, "EULER")
    pts = []
    for solver in ("EULER", "HEUN", "RK4"):
        for n in range(1, 9):
            out = run(model, x, mask, n, solver)
            if task == "EMBEDDING":
                v = torch.nn.functional.cosine_similarity(out, ref, dim=-1).mean().item()
                metric = "cosine_to_full_depth"
            else:
                v = (out.argmax(-1) == ref.argmax(-1)).float().mean().item()
                metric = "top1_agreement_with_full_depth"
            pts.append(dict(solver=solver, steps=n, metric=metric, value=v,
                            dataset="descriptions-sample (random-init test model)"))
    return pts[0]["metric"], pts


@torch.no_grad()
def with_random_lexical_expert(encoder, vocab):
    """The classifier of models/odeserve_models/lexical.py: its state is wider than the encoder's
    (the lexical channels), which the server's batching, solvers and row exits must carry."""
    model = LexicalClassifier(encoder, vocab, len(LABELS), buckets=101, weight=0.8).eval()
    g = torch.Generator().manual_seed(11)
    model.lexical.copy_(torch.randn(model.lexical.shape, generator=g))
    return model


EOS_ID = 3  # train_sentencepiece's


@torch.no_grad()
def with_random_probe_expert(encoder, vocab, spm_file):
    """The served classifier's form (EmbeddingProbeClassifier): two fields in one state, one of
    them over a prefix of the window, and a lexical part neither field changes."""
    embedder = families.build("eelbert", hash_dim=HASH["dim"], hidden=H, heads=HEADS, ffn=FFN, trained_depth=L,
                              max_len=PROBE_WINDOW, out_dim=H).eval()
    for name in ("w_qkv", "w_o", "w_1", "w_2"):
        getattr(embedder, name).mul_(12.0)
    table = piece_feature_table(spm_file, HASH["seed"], HASH["dim"], HASH["orders"])
    model = EmbeddingProbeClassifier(encoder, vocab, len(LABELS), embedder, table, eos_id=EOS_ID, buckets=101,
                                     weight=0.8, probe_weight=1.2).eval()
    g = torch.Generator().manual_seed(13)
    model.lexical.copy_(torch.randn(model.lexical.shape, generator=g))
    model.probe.weight.copy_(torch.randn(model.probe.weight.shape, generator=g))
    return model


@torch.no_grad()
def export_tiny_translator(out, spm_file, texts):
    """Random-init translator; its EOS bias is set so that greedy outputs end at varied lengths
    (some by EOS, some at max_output_tokens), which is what the server's search must handle."""
    torch.manual_seed(1100)
    tok = Tokenizer(spm_file, T)
    sp = tok.sp
    model = SharedTranslator(sp.get_piece_size(), hidden=H, heads=HEADS, ffn=FFN, encoder_depth=L,
                             decoder_depth=L, max_len=T, pad_id=sp.pad_id(), bos_id=sp.bos_id(),
                             eos_id=sp.eos_id()).eval()
    for pn, p in model.named_parameters():  # a field strong enough that step counts matter
        if pn.startswith(("e_w_", "d_w_")):
            p.mul_(8.0)
    x, mask = tok.batch(texts)
    limits = [16] * len(texts)
    for bias in [0.5 * i for i in range(40)]:
        model.out_bias[sp.eos_id()] = bias
        ended = sum(len(t) < 15 for t, _ in beam_search(model, x, mask, L, L, 1, limits))
        if ended >= len(texts) // 3:
            break
    full = beam_search(model, x, mask, L, L, 1, limits)
    pts = []
    for n_enc in (1, 2, 4):
        for n_dec in (1, 2, 4):
            got = beam_search(model, x, mask, n_enc, n_dec, 1, limits)
            same = sum(a[0] == b[0] for a, b in zip(got, full)) / len(texts)
            pts.append(dict(solver="EULER", steps=n_enc, decoder_steps=n_dec, beam_size=1,
                            metric="exact_match_with_full_depth", value=same,
                            dataset="descriptions-sample (random-init test model)"))
    cfg = config_text("tiny-translator", model, "TRANSLATION",
                      "test model: shared encoder-decoder, random init", T, steps=(1, 8, 4),
                      solvers=("EULER",), languages=["en", "de"], batching=BATCHING,
                      max_inputs_per_request=32,
                      translation=dict(decoder_trained_depth=L, decoder_steps=(1, 8, 4), max_output_tokens=T,
                                       source_language="en", target_language="de",
                                       expected_output_ratio=1.5, max_beam_size=4))
    export_model(out, "tiny-translator", model, spm_file, cfg,
                 quality_text("exact_match_with_full_depth", pts))


def main(argv=None) -> int:
    ap = parser("make-test-repository", __doc__)
    ap.add_argument("out_dir")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args(argv)
    # TorchScript writes some module constants in set order, which depends on Python's string hash
    # seed: pinned, model.pt is byte-identical from run to run.
    pin_hash_seed("make-test-repository", argv)
    torch.set_num_threads(1)
    out = os.path.abspath(args.out_dir)
    os.makedirs(out, exist_ok=True)
    texts = [t for t in open(SAMPLE, encoding="utf-8").read().split("\n") if t.strip()]
    tmp = tempfile.mkdtemp(prefix="odeserve-tiny-")
    try:
        # relative model_prefix: the SentencePiece proto records it, and a random temp path would make
        # tokenizer.model differ from run to run
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            spm_file = os.path.join(tmp, train_sentencepiece(SAMPLE, "tiny", 500, shuffle_input_sentence=False))
        finally:
            os.chdir(cwd)
        eval_texts = texts[::14][:30]
        specs = [
            ("tiny-albert", "albert", "EMBEDDING", dict(vocab=None, emb=EMB), H, "test model: ALBERT-style, random init"),
            ("tiny-sharebert", "sharebert", "EMBEDDING", dict(vocab=None, emb=EMB), H, "test model: ShareBERT-style, random init"),
            ("tiny-eelbert", "eelbert", "EMBEDDING", dict(hash_dim=HASH["dim"]), H, "test model: EELBERT-style hashed n-grams, random init"),
            ("tiny-classifier", "albert", "CLASSIFICATION", dict(vocab=None, emb=EMB), len(LABELS), "test model: ALBERT-style classifier, random init"),
            ("tiny-lexical", "sharebert", "CLASSIFICATION", dict(vocab=None, emb=EMB), len(LABELS),
             "test model: ShareBERT-style classifier times a lexical expert (piece uni/bigrams), random init"),
            ("tiny-probe", "sharebert", "CLASSIFICATION", dict(vocab=None, emb=EMB), len(LABELS),
             "test model: tiny-lexical's experts times a probe on an EELBERT embedder over the first 12 pieces, random init"),
        ]
        for i, (name, fam, task, kw, out_dim, desc) in enumerate(specs):
            torch.manual_seed(1000 + i)
            hasher = None
            if "vocab" in kw:
                tok = Tokenizer(spm_file, T)
                kw = dict(kw, vocab=tok.sp.get_piece_size())
            else:
                hasher = PieceHasher(HASH["seed"], HASH["dim"], HASH["orders"])
                tok = Tokenizer(spm_file, T, hasher=hasher)
            model = families.build(fam, hidden=H, heads=HEADS, ffn=FFN, trained_depth=L, max_len=T,
                                   out_dim=out_dim, **kw).eval()
            with torch.no_grad():  # make the random field strong enough that step counts matter
                for pn, p in model.named_parameters():
                    if pn in ("w_qkv", "w_o", "w_1", "w_2", "W", "b_1", "b_2"):
                        p.mul_(12.0 if task == "EMBEDDING" else 2.0) if pn != "b_1" and pn != "b_2" else p.normal_(0, 0.1)
            if task == "CLASSIFICATION":
                spread_head(model, tok, texts)
            if name == "tiny-lexical":
                model = with_random_lexical_expert(model, tok.sp.get_piece_size())
            if name == "tiny-probe":
                model = with_random_probe_expert(model, tok.sp.get_piece_size(), spm_file)
            metric, pts = agreement_profile(model, tok, eval_texts, task)
            cfg = config_text(name, model, task, desc, T, steps=(1, 8, 4),
                              labels=LABELS if task == "CLASSIFICATION" else (), languages=LANGS,
                              hash_cfg=HASH if hasher else None, batching=BATCHING,
                              max_inputs_per_request=32)
            export_model(out, name, model, spm_file, cfg, quality_text(metric, pts))
        export_tiny_translator(out, spm_file, eval_texts)
        if not args.no_verify:
            from odeserve_models.verify import verify_model_dir
            for name in [spec[0] for spec in specs] + ["tiny-translator"]:
                msgs = verify_model_dir(os.path.join(out, name), eval_texts[:8],
                                        proto_root=os.path.join(ROOT, "proto"))
                print(name, "; ".join(msgs))
        print("test repository written to", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0
