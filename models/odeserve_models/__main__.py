"""odeserve's model tools, one entry point: `python3 -m odeserve_models <command> [options]`, run
from `models/` with Debian's /usr/bin/python3 (python3-torch, python3-sentencepiece).

Commands:
  import-albert   a Hugging Face ALBERT checkpoint folder -> an odeserve model folder
  profile         a served model's quality at every (solver, steps) on a labelled JSONL file
                  -> quality.pbtxt and the recommended default_steps
"""
import importlib
import sys

# command -> (module, one-line help); each module has main(argv) -> exit code.
COMMANDS = {
    "import-albert": ("odeserve_models.albert.cli", "import a Hugging Face ALBERT checkpoint"),
    "profile": ("odeserve_models.profile", "measure a served model's quality profile"),
}


def usage(stream):
    stream.write("usage: python3 -m odeserve_models <command> [options]\n\ncommands:\n")
    for name, (_, text) in COMMANDS.items():
        stream.write("  %-15s %s\n" % (name, text))
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
