"""Progress lines of a training script: printed and appended to the run's log, time-stamped."""
import time


def progress_log(path: str):
    """-> say(*parts): one time-stamped line to stdout and to the file at `path` (appended, so a
    resumed run keeps its history)."""
    log = open(path, "a")

    def say(*parts) -> None:
        line = time.strftime("%H:%M:%S ") + " ".join(str(p) for p in parts)
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    return say
