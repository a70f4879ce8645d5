"""Every subcommand's --help exits 0 and lists every option the tool accepts.

  check_help.py kiln PATH_TO_KILN
  check_help.py kiln-run PATH_TO_KILN_RUN

The accepted options come from the tool itself (the hidden --list-options,
printed from its option tables), not from a list here, so a flag added
without help fails this test.
"""
import re
import subprocess
import sys


def run(*args):
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout, result.stderr


def mentions(text, option):
    """--name (or -o for a one-letter option) as a flag, not inside a word."""
    spelled = ("-" if len(option) == 1 else "--") + option
    return re.search(r"(^|[\s,\[(])" + re.escape(spelled) + r"($|[\s=<,\])])", text, re.M)


def check(tool, path):
    failures = []
    rc, out, err = run(path, "--list-options")
    if rc != 0 or not out.strip():
        sys.exit(f"{tool} --list-options failed ({rc}): {err}")
    accepted = {}  # subcommand -> options
    for line in out.splitlines():
        words = line.split()
        if tool == "kiln":  # "SUBCOMMAND OPTION" per line
            accepted.setdefault(words[0], []).append(words[1])
        else:  # "COMMAND --flag --flag ..." per line
            accepted[words[0]] = [w[2:] for w in words[1:]]
    rc, top, err = run(path, "--help")
    if rc != 0:
        failures.append(f"{tool} --help exited {rc}")
    for command, options in sorted(accepted.items()):
        if not re.search(r"^\s+" + re.escape(command) + r"\b", top, re.M):
            failures.append(f"{tool} --help does not list the command '{command}'")
        rc, text, err = run(path, command, "--help")
        if rc != 0:
            failures.append(f"{tool} {command} --help exited {rc}: {err.strip()}")
            continue
        for option in options:
            if not mentions(text, option):
                failures.append(f"{tool} {command} --help does not mention '{option}'")
            elif tool == "kiln":
                # LLVM prints every option of Kiln's category; one without a
                # description would be a bare name.
                spelled = ("-" if len(option) == 1 else "--") + option
                table = text.split("\nOPTIONS:", 1)[-1]
                own = [l for l in table.splitlines()
                       if re.match(r"\s+" + re.escape(spelled) + r"($|[\s=<\[])", l)]
                if not own or not re.search(r"\s-\s+\S", own[0]):
                    failures.append(f"{tool} {command} --help: '{option}' has no description")
        print(f"{tool} {command}: --help lists {len(options)} options")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(check(sys.argv[1], sys.argv[2]))
