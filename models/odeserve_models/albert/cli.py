"""python3 -m odeserve_models import-albert CHECKPOINT_DIR OUT_MODEL_DIR --task embedding|classification
    [--pooling mean|cls|pooler] [--name NAME] [--precision float32|bfloat16] [--force]

Turns a Hugging Face ALBERT checkpoint folder (config.json, model.safetensors or
pytorch_model.bin, spiece.model, optional tokenizer_config.json) into an odeserve model folder
(model.pt, tokenizer.model, config.pbtxt), then loads the written model.pt back and checks that
forward equals L Euler steps through input_stage / vector_field / output_stage.
"""
import argparse
import os
import sys
from typing import List, Optional

SAMPLE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Café Zürich: Straße, Größe und   Übersetzung ``quoted'' text.",
    "In 1998, about 1,234 people came; 東京 😀",
    "",
]
CHECK_TOLERANCE = 1e-4


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python3 -m odeserve_models import-albert",
        description="Import a Hugging Face ALBERT checkpoint (AlbertModel, AlbertForMaskedLM, AlbertForPreTraining "
                    "or AlbertForSequenceClassification) as an odeserve model folder.")
    ap.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR",
                    help="folder with config.json, model.safetensors or pytorch_model.bin, spiece.model")
    ap.add_argument("out_dir", metavar="OUT_MODEL_DIR",
                    help="model folder to write (inside a model repository); its name is the model's name")
    ap.add_argument("--task", required=True, choices=["embedding", "classification"])
    ap.add_argument("--pooling", choices=["mean", "cls", "pooler"],
                    help="embedding: mean (default) over the tokens, cls (the [CLS] state) or pooler "
                         "(tanh(dense([CLS] state))); classification: pooler only (the checkpoint's head)")
    ap.add_argument("--name", help="model name; must equal OUT_MODEL_DIR's folder name (the server's rule)")
    ap.add_argument("--precision", choices=["float32", "bfloat16"], default="float32",
                    help="config compute_precision; the weights stay float32, bfloat16 makes the server run "
                         "the model under autocast")
    ap.add_argument("--force", action="store_true", help="overwrite a non-empty OUT_MODEL_DIR")
    return ap


def check_saved_model(out_dir: str, ck, eager_module) -> dict:
    """model.pt loaded back: forward vs Euler(L) through the stages, and vs the eager module."""
    import torch
    from .tokenization import AlbertTokenizerReference
    tok = AlbertTokenizerReference.from_options(os.path.join(out_dir, "tokenizer.model"), ck.tokenizer_options)
    max_len = min(ck.config["max_position_embeddings"], 8192)
    x, mask = tok.batch(SAMPLE_TEXTS, max_len)
    m = torch.jit.load(os.path.join(out_dir, "model.pt"), map_location="cpu")
    m.eval()
    with torch.no_grad():
        m.prepare()
        ref = m.forward(x, mask)
        h = m.input_stage(x, mask)
        for _ in range(int(m.trained_depth)):
            h = h + m.vector_field(h, mask)
        stages = m.output_stage(h, mask)
        eager = eager_module(x, mask)
    return dict(stages=(ref - stages).abs().max().item(), eager=(ref - eager).abs().max().item(),
                shape=list(ref.shape), finite=bool(torch.isfinite(ref).all()), tokens=int(mask.sum().item()))


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    from .checkpoint import CheckpointError
    from .importer import import_albert

    import torch
    with torch.no_grad():  # scoped: main() may run inside another program's process (tests)
        try:
            r = import_albert(args.checkpoint_dir, args.out_dir, args.task, pooling=args.pooling, name=args.name,
                              precision=args.precision, force=args.force)
        except CheckpointError as e:
            sys.stderr.write("import-albert: %s\n" % e)
            return 1
        check = check_saved_model(args.out_dir, r["checkpoint"], r["module"])
    ck, opts = r["checkpoint"], r["options"]
    c = ck.config
    ok = check["finite"] and check["stages"] < CHECK_TOLERANCE and check["eager"] < CHECK_TOLERANCE
    out = os.path.abspath(args.out_dir)
    print("import-albert: %s -> %s" % (os.path.abspath(args.checkpoint_dir), out))
    print("  weights:   %s (%s keys%s), %s dtype" % (
        ck.weights_file, "'albert.'-prefixed" if ck.prefix else "unprefixed",
        "; ignored: " + r["ignored"] if r["ignored"] else "",
        "/".join(sorted(set(ck.source_dtypes.values())))))
    print("  model:     %s %s, E=%d H=%d heads=%d FFN=%d L=%d %s, vocab %d, %d parameters" % (
        opts["name"], opts["task"], c["embedding_size"], c["hidden_size"], c["num_attention_heads"],
        c["intermediate_size"], c["num_hidden_layers"], c["hidden_act"], c["vocab_size"], r["parameters"]))
    print("  output:    %s pooling, %s [%d]%s" % (
        opts["pooling"], "logits" if opts["task"] == "classification" else "embedding",
        check["shape"][1], (": " + ", ".join(ck.labels)) if opts["task"] == "classification" else ""))
    t = ck.tokenizer_options
    print("  tokenizer: [CLS]=%d [SEP]=%d, do_lower_case=%s keep_accents=%s remove_space=%s" % (
        ck.cls_id, ck.sep_id, t["do_lower_case"], t["keep_accents"], t["remove_space"]))
    print("  precision: %s" % opts["precision"])
    print("  check:     forward vs Euler(L) through the stages of the saved model.pt on %d sample texts: "
          "max abs diff %.3g (vs the eager module %.3g; limit %g)" % (
              len(SAMPLE_TEXTS), check["stages"], check["eager"], CHECK_TOLERANCE))
    if r["leftovers"]:
        print("  note:      %s left in place from before (config.pbtxt does not reference them)"
              % ", ".join(r["leftovers"]))
    if not ok:
        sys.stderr.write("import-albert: the saved model failed its check (max abs diff %.3g / %.3g, finite=%s)\n"
                         % (check["stages"], check["eager"], check["finite"]))
        return 1
    repo = os.path.dirname(out)
    print("next steps:")
    print("  serve:   ./build/server/odeserve --model_repository %s" % repo)
    print("  profile: python3 -m odeserve_models profile --help   (measure quality at each solver/steps; "
          "without a profile the server runs %d steps by default)" % c["num_hidden_layers"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
