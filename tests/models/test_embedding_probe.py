#!/usr/bin/env python3
"""The section classifier's cross-lingual expert (EmbeddingProbeClassifier in
models/odeserve_models/lexical.py): the embedder reads token ids through a table that holds
exactly the features embed-eelbert hashes from piece strings; each expert's channels follow its
own field; a row never depends on padding or on the rows batched with it; the trainer's embedder
is the one the model runs; the output is the product of the three experts.

  PYTHONPATH=models /usr/bin/python3 -m unittest discover -s tests/models -p 'test_embedding_probe.py'
"""
import json
import os
import pathlib
import tempfile
import unittest

import torch
import torch.nn.functional as F

from odeserve_models import families
from odeserve_models.hashing import PieceHasher
from odeserve_models.evaluation import Runner, load_run
from odeserve_models.lexical import EmbeddingProbeClassifier, embedder_window, piece_feature_table
from odeserve_models.solvers import solve
from odeserve_models.text import Tokenizer

from odeserve_models.train import train_embedding_probe as trainer

ROOT = pathlib.Path(__file__).resolve().parents[2]

VOCAB, CLASSES, BUCKETS, DEPTH, HASH_DIM, WINDOW, EOS = 40, 5, 31, 4, 6, 7, 3
H, HE = 16, 12
TOKENIZER = ROOT / "models" / "repository" / "embed-eelbert" / "tokenizer.model"


def classifier():
    torch.manual_seed(5)
    encoder = families.build("sharebert", vocab=VOCAB, emb=8, hidden=H, heads=2, ffn=32, trained_depth=DEPTH,
                             max_len=12, out_dim=CLASSES)
    embedder = families.build("eelbert", hash_dim=HASH_DIM, hidden=HE, heads=2, ffn=24, trained_depth=DEPTH,
                              max_len=WINDOW, out_dim=HE)
    model = EmbeddingProbeClassifier(encoder, VOCAB, CLASSES, embedder, torch.randn(VOCAB, HASH_DIM), eos_id=EOS,
                                     buckets=BUCKETS, weight=0.7, probe_weight=1.3)
    with torch.no_grad():
        model.lexical.copy_(torch.randn(VOCAB + BUCKETS, CLASSES))
        torch.nn.init.normal_(model.probe.weight)
        torch.nn.init.normal_(model.probe.bias)
        for name in ("w_qkv", "w_o", "w_1", "w_2"):  # a field strong enough that steps matter
            getattr(embedder, name).mul_(8.0)
    model.eval()
    model.prepare()
    return model


def batch(seqs, width=0):
    T = max(width, max(len(s) for s in seqs))
    x = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1.0
    return x, mask


# the first is longer than the embedder's window of 7
SEQS = [[2, 7, 9, 11, 13, 17, 19, 23, 29, 31, 3], [2, 30, 3], [2, 5, 5, 8, 39, 3]]


class EmbeddingProbeExpert(unittest.TestCase):
    def test_the_table_holds_the_features_embed_eelbert_hashes(self):
        tok = Tokenizer(str(TOKENIZER), 64)
        hasher = PieceHasher(20231030, 64, [2, 3, 4])
        table = piece_feature_table(str(TOKENIZER), 20231030, 64, [2, 3, 4])
        text = "Python bindings for the GTK toolkit, Bibliothek zum Komprimieren"
        ids, pieces = tok.ids(text), tok.pieces(text)
        self.assertEqual(len(ids), len(pieces))
        self.assertNotIn(tok.sp.unk_id(), ids)
        served = torch.from_numpy(hasher.features([pieces], len(pieces)))[0]
        self.assertTrue(torch.equal(table[torch.tensor(ids)], served))  # bit for bit
        self.assertTrue(torch.equal(table[tok.pad], torch.zeros(64)))

    def test_each_expert_follows_its_own_field(self):
        model = classifier()
        x, mask = batch(SEQS)
        offset = H + CLASSES
        with torch.no_grad():
            h0 = model.input_stage(x, mask)
            self.assertEqual(h0.shape, (3, 11, H + CLASSES + HE))
            window_ids = x[:, :WINDOW].clone()
            window_ids[0, WINDOW - 1] = EOS  # the first row goes on past the window
            features = F.embedding(window_ids, model.piece_features)
            g0 = model.embedder.input_stage(features, mask[:, :WINDOW])
            torch.testing.assert_close(h0[:, :WINDOW, offset:], g0)
            self.assertTrue(torch.equal(h0[:, WINDOW:, offset:], torch.zeros(3, 11 - WINDOW, HE)))
            for solver, n in (("EULER", 1), ("EULER", DEPTH), ("HEUN", 2), ("RK4", 1)):
                h = solve(model, h0, mask, n, solver)
                self.assertTrue(torch.equal(h[:, :, H:offset], h0[:, :, H:offset]), solver)  # lexical: kept
                torch.testing.assert_close(h[:, :, :H], solve(model.encoder, h0[:, :, :H], mask, n, solver))
                g = solve(model.embedder, g0, mask[:, :WINDOW], n, solver)
                torch.testing.assert_close(h[:, :WINDOW, offset:], g)
                self.assertFalse(torch.allclose(g, g0), solver)
                self.assertTrue(torch.equal(h[:, WINDOW:, offset:], torch.zeros(3, 11 - WINDOW, HE)), solver)

    def test_rows_do_not_depend_on_padding_or_neighbours(self):
        model = torch.jit.script(classifier())
        with torch.no_grad():
            together = model.forward(*batch(SEQS))
            padded = model.forward(*batch(SEQS, width=12))
            for i, s in enumerate(SEQS):
                alone = model.forward(*batch([s]))
                torch.testing.assert_close(together[i:i + 1], alone, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(padded[i:i + 1], alone, atol=1e-5, rtol=1e-5)

    def test_the_output_is_the_product_of_three_experts(self):
        model = classifier()
        x, mask = batch(SEQS)
        with torch.no_grad():
            h = solve(model, model.input_stage(x, mask), mask, 2, "EULER")
            deep = F.log_softmax(model.encoder.output_stage(h[:, :, :H], mask), -1)
            m = mask.unsqueeze(-1)
            pooled = (h[:, :, H:H + CLASSES] * m).sum(1) / m.sum(1).pow(0.5)
            lexical = F.log_softmax(pooled + model.lexical_bias, -1)
            g = h[:, :WINDOW, H + CLASSES:]
            e = F.normalize(model.embedder.output_stage(g, mask[:, :WINDOW]), dim=-1)
            probe = F.log_softmax(10.0 * model.probe(e), -1)
            torch.testing.assert_close(model.output_stage(h, mask), deep + 0.7 * lexical + 1.3 * probe)

    def test_the_trainer_embeds_what_the_model_runs(self):
        model = classifier()
        by_ids = trainer.EmbedderByIds(model.embedder, model.piece_features, EOS)
        x, mask = batch(SEQS)
        with torch.no_grad():
            for n in (1, 3):
                embedded = by_ids.output_stage(solve(by_ids, by_ids.input_stage(x, mask), mask, n, "EULER"), mask)
                h = solve(model, model.input_stage(x, mask), mask, n, "EULER")
                torch.testing.assert_close(F.log_softmax(10.0 * model.probe(embedded), -1), model.probe_logprobs(h, mask))

    def test_the_experts_must_share_a_depth(self):
        encoder = families.build("sharebert", vocab=VOCAB, emb=8, hidden=H, heads=2, ffn=32, trained_depth=DEPTH,
                                 max_len=12, out_dim=CLASSES)
        embedder = families.build("eelbert", hash_dim=HASH_DIM, hidden=HE, heads=2, ffn=24, trained_depth=DEPTH + 2,
                                  max_len=WINDOW, out_dim=HE)
        with self.assertRaises(AssertionError):
            EmbeddingProbeClassifier(encoder, VOCAB, CLASSES, embedder, torch.randn(VOCAB, HASH_DIM), eos_id=EOS)

    def test_the_window_is_the_text_as_the_embedders_tokenizer_cuts_it(self):
        long_text = " ".join("package%d provides tool number %d for the archive" % (i, i) for i in range(20))
        texts = [long_text, "a short description", long_text[:150]]
        classifier_tok, embedder_tok = Tokenizer(str(TOKENIZER), 128), Tokenizer(str(TOKENIZER), 64)
        self.assertGreater(len(classifier_tok.ids(long_text)), 64)
        x, mask = classifier_tok.batch(texts)
        ids, window_mask = embedder_window(x, mask, 64, classifier_tok.sp.eos_id())
        for i, text in enumerate(texts):
            expected = embedder_tok.ids(text)
            self.assertEqual(ids[i, :len(expected)].tolist(), expected, text[:40])
            self.assertEqual(int(window_mask[i].sum()), len(expected))
            alone = embedder_window(*classifier_tok.batch([text]), 64, classifier_tok.sp.eos_id())[0]
            self.assertEqual(alone[0].tolist(), ids[i, :alone.size(1)].tolist())

    def test_the_runner_gives_each_experts_rows_in_text_order(self):
        model = classifier()
        texts = ["eleven pieces", "three pieces", "six pieces"]  # SEQS; Runner batches them by length

        class Ids:  # stand-in for data.Encoded: the texts' ids are given
            def encode(self, batch_texts):
                return [SEQS[texts.index(t)] for t in batch_texts]

            def collate(self, seqs):
                return batch(seqs)

        runner = Runner(model, Ids(), batch=2)
        experts, product = runner.expert_outputs(texts, 2), runner.outputs(texts, 2)
        self.assertEqual(sorted(experts), ["encoder", "lexical", "probe"])
        with torch.no_grad():
            for i, seq in enumerate(SEQS):
                x, mask = batch([seq])
                h = solve(model, model.input_stage(x, mask), mask, 2, "EULER")
                deep, lexical = model.experts(h, mask)
                for name, alone in (("encoder", deep), ("lexical", lexical), ("probe", model.probe_logprobs(h, mask))):
                    torch.testing.assert_close(torch.from_numpy(experts[name][i]), alone[0], atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(torch.from_numpy(product[i]), model.output_stage(h, mask)[0], atol=1e-5, rtol=1e-5)

    def test_a_training_run_loads_as_the_model_it_trained(self):
        torch.manual_seed(9)
        labels = ["l%d" % i for i in range(CLASSES)]
        vocab = Tokenizer(str(TOKENIZER), 8).sp.get_piece_size()
        encoder = families.build("sharebert", vocab=vocab, emb=8, hidden=H, heads=2, ffn=32, trained_depth=DEPTH,
                                 max_len=12, out_dim=CLASSES)
        embedder = families.build("eelbert", hash_dim=8, hidden=HE, heads=2, ffn=24, trained_depth=DEPTH,
                                  max_len=WINDOW, out_dim=HE)
        hash_cfg = dict(seed=77, dim=8, orders=[2, 3])
        table = piece_feature_table(str(TOKENIZER), 77, 8, [2, 3])
        reference = EmbeddingProbeClassifier(encoder, vocab, CLASSES, embedder, table, eos_id=EOS, buckets=BUCKETS,
                                             weight=0.6, length_power=0.5, probe_weight=2.5, probe_scale=7.0)
        with torch.no_grad():
            reference.lexical.normal_(); reference.lexical_bias.normal_()
            reference.probe.weight.normal_(); reference.probe.bias.normal_()
        state = {k: v for k, v in encoder.state_dict().items() if not k.startswith("head.")}
        ck = dict(model=state, cls=dict(weight=encoder.head.weight, bias=encoder.head.bias),
                  lexical=dict(table=reference.lexical.data, bias=reference.lexical_bias.data, buckets=BUCKETS,
                               weight=0.6, length_power=0.5),
                  probe=dict(embedder=embedder.state_dict(), hash=hash_cfg, product_weight=2.5, scale=7.0,
                             embedder_config=dict(hash_dim=8, hidden=HE, heads=2, ffn=24, trained_depth=DEPTH,
                                                  max_len=WINDOW, out_dim=HE),
                             linear=dict(weight=reference.probe.weight.data, bias=reference.probe.bias.data)))
        args = dict(family="sharebert", vocab=vocab, emb=8, hidden=H, heads=2, ffn=32, depth=DEPTH, max_len=12,
                    labels=labels, tokenizer=str(TOKENIZER))
        with tempfile.TemporaryDirectory() as run:
            with open(os.path.join(run, "args.json"), "w") as f:
                json.dump(args, f)
            torch.save(ck, os.path.join(run, "final.pt"))
            loaded, _, _, loaded_labels = load_run(run, "CLASSIFICATION")
        self.assertIsInstance(loaded, EmbeddingProbeClassifier)
        self.assertEqual(loaded_labels, labels)
        reference.eval()
        reference.prepare()
        x, mask = batch([[2, 700, 31, 4000, 9, 3], [2, 5, 3]])
        with torch.no_grad():
            torch.testing.assert_close(loaded.forward(x, mask), reference.forward(x, mask))


if __name__ == "__main__":
    unittest.main()
