"""odeserve's model tools, one entry point: `python3 -m odeserve_models <command> [options]`, run
from `models/` with Debian's /usr/bin/python3 (python3-torch, python3-sentencepiece).

Commands:
  import-albert   a Hugging Face ALBERT checkpoint folder -> an odeserve model folder
  profile         a served model's quality at every (solver, steps) on a labelled JSONL file
                  -> quality.pbtxt and the recommended default_steps
  export-onnx     a model folder's encoder at a fixed step count -> model.onnx, for the
                  ONNX Runtime side of the runtime benchmark
and the pipeline that builds, evaluates and reports the bundled models, by stage (the modules live
in datasets/, train/, exporting/, evaluate/, report/; models/README.md runs them in order):
  data      fetch-data, build-datasets, build-translation-pairs, make-fixture-sample
  train     train-tokenizer, train, train-translation, train-lexical, train-embedding-probe,
            train-albert, tfidf-teacher
  export    export-repository, export-translation, make-test-repository, make-hash-test-vectors,
            count-bf16-weights, declare-native-field
  evaluate  evaluate, eval-baselines, evaluate-served, check-served-parity, evaluate-translation,
            tune-length-penalty
  report    report, report-classifier, report-embedding, report-lexical, report-probe,
            report-translation, plot-steps
"""
import importlib
import sys

# command -> (module, one-line help); each module has main(argv) -> exit code.
COMMANDS = {
    "import-albert": ("odeserve_models.albert.cli", "import a Hugging Face ALBERT checkpoint"),
    "profile": ("odeserve_models.profile", "measure a served model's quality profile"),
    "export-onnx": ("odeserve_models.onnx_export", "export a model folder's encoder to ONNX (benchmarks)"),
    # data
    "fetch-data": ("odeserve_models.datasets.fetch_data", "fetch Debian's package lists and DDTP translations (apt)"),
    "build-datasets": ("odeserve_models.datasets.build_datasets", "fetched lists -> section and retrieval datasets"),
    "build-translation-pairs": ("odeserve_models.datasets.build_translation_pairs", "fetched lists -> en -> de translation pairs"),
    "make-fixture-sample": ("odeserve_models.datasets.make_fixture_sample", "the committed text sample of the tests"),
    # train
    "train-tokenizer": ("odeserve_models.train.train_tokenizer", "the 8k multilingual SentencePiece model"),
    "train": ("odeserve_models.train.train", "an encoder: embedding, classifier or masked LM (resumable)"),
    "train-translation": ("odeserve_models.train.train_translation", "the en -> de translator"),
    "train-lexical": ("odeserve_models.train.train_lexical", "the section classifier's lexical expert"),
    "train-embedding-probe": ("odeserve_models.train.train_embedding_probe", "the section classifier's cross-lingual expert"),
    "train-albert": ("odeserve_models.train.train_albert", "a small ALBERT, masked LM then step-robust sections, as an HF checkpoint"),
    "tfidf-teacher": ("odeserve_models.train.tfidf_teacher", "out-of-fold TF-IDF + LR probabilities (train --teacher)"),
    # export
    "export-repository": ("odeserve_models.exporting.export_repository", "a trained encoder run -> a model folder with its profile"),
    "export-translation": ("odeserve_models.exporting.export_translation", "a trained translator run -> a model folder"),
    "make-test-repository": ("odeserve_models.exporting.make_test_repository", "the tiny deterministic test repository (C++ tests)"),
    "make-hash-test-vectors": ("odeserve_models.exporting.make_hash_test_vectors", "models/hash_test_vectors.json (C++ tests)"),
    "count-bf16-weights": ("odeserve_models.exporting.count_bf16_product_weights", "tensors the server stores in bfloat16 at load"),
    "declare-native-field": ("odeserve_models.exporting.declare_native_field", "mark an older export's pre-LN block for the server's native path"),
    # evaluate
    "evaluate": ("odeserve_models.evaluate.evaluate", "test sets through the Python mirror of the server"),
    "eval-baselines": ("odeserve_models.evaluate.eval_baselines", "majority, TF-IDF + LR and TF-IDF retrieval baselines"),
    "evaluate-served": ("odeserve_models.evaluate.eval_served", "test sets through the running C++ server (gRPC)"),
    "check-served-parity": ("odeserve_models.evaluate.check_served_parity", "served outputs against the Python mirror"),
    "evaluate-translation": ("odeserve_models.evaluate.eval_translation", "BLEU/chrF through the running C++ server"),
    "tune-length-penalty": ("odeserve_models.evaluate.tune_length_penalty", "a translator's beam length penalty (validation)"),
    # report
    "report": ("odeserve_models.report.make_report", "models/EVAL.md: tables, served path, notes"),
    "report-classifier": ("odeserve_models.report.make_classifier_report", "EVAL.md: the 128-token classifier's section"),
    "report-embedding": ("odeserve_models.report.make_embedding_report", "EVAL.md: the embedding models' section"),
    "report-lexical": ("odeserve_models.report.make_lexical_report", "EVAL.md: the classifier with a lexical expert"),
    "report-probe": ("odeserve_models.report.make_probe_report", "EVAL.md: the classifier with a cross-lingual expert"),
    "report-translation": ("odeserve_models.report.make_translation_report", "EVAL.md: the translation section"),
    "plot-steps": ("odeserve_models.report.plot_steps", "models/eval_steps.svg: quality against ODE steps"),
}


def usage(stream):
    stream.write("usage: python3 -m odeserve_models <command> [options]\n\ncommands:\n")
    width = max(len(name) for name in COMMANDS)
    for name, (_, text) in COMMANDS.items():
        stream.write("  %-*s %s\n" % (width, name, text))
    stream.write("\n`python3 -m odeserve_models <command> --help` lists a command's options.\n")


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        usage(sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        sys.stderr.write("odeserve_models: unknown command '%s'\n" % command)
        usage(sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
