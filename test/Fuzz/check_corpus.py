#!/usr/bin/env python3
"""Runs `kiln import` on every model of a corpus: check_corpus.py KILN DIR...

The name of each file says what must happen (see make_corpus.py):
  ok-*    exit 0, no `kiln: error` line;
  bad-*   exit 1 and stderr is exactly one `kiln: error: <file>: ...` line;
  other   (any-*, crash reproducers kept from fuzzing) either of the above.
Anything else (a signal, an abort, a sanitizer report, a multi-line error)
fails. Prints one line per failing model and a summary; exits 1 on failure.
"""
import pathlib
import subprocess
import sys


def check(kiln, path):
    proc = subprocess.run([kiln, "import", str(path), "-o", "/dev/null"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=120)
    err = proc.stderr.decode(errors="replace")
    lines = err.splitlines()
    errors = [l for l in lines if l.startswith("kiln: error:")]
    one_line_error = (proc.returncode == 1 and len(lines) == 1 and
                      lines[0].startswith(f"kiln: error: {path}: "))
    accepted = proc.returncode == 0 and not errors
    name = path.name
    if name.startswith("ok-"):
        good, want = accepted, "exit 0"
    elif name.startswith("bad-"):
        good, want = one_line_error, "one-line error, exit 1"
    else:
        good, want = accepted or one_line_error, "exit 0 or a one-line error"
    if good:
        return None
    shown = err.strip().replace("\n", " | ")[:400]
    return f"FAIL {name}: want {want}, got exit {proc.returncode}: {shown}"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    kiln = sys.argv[1]
    models = sorted(p for d in sys.argv[2:] for p in pathlib.Path(d).iterdir()
                    if p.is_file())
    failures = [f for f in (check(kiln, m) for m in models) if f]
    for f in failures:
        print(f)
    print(f"{'FAILED' if failures else 'OK'}: {len(models) - len(failures)} of "
          f"{len(models)} models behave")
    return 1 if failures or not models else 0


if __name__ == "__main__":
    sys.exit(main())
