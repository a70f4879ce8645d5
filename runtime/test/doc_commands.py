"""The command lines of README.md and docs/ against the tools, so help and
docs cannot drift from the code.

  doc_commands.py --root SRC [--fixture MODEL.onnx] TOOL=PATH ...

TOOL is kiln, kiln-opt (or kiln_opt) or kiln-run; commands of tools not given are not
looked at (the compiler's and the runtime's builds each check their own).

Every command line (fenced blocks and inline `code`) is checked: the
subcommand exists, every flag is one the (sub)command accepts (kiln and
kiln-run: their hidden --list-options; kiln-opt: its --help), and a value
of an enumerated kiln flag (--emit=...) is one of its values.

Commands that can run on a CPU also run (exit 0 required), in a fresh
folder per fenced block, in order: kiln and kiln-opt (not kiln-run, which
needs a GPU for what the docs show) and scripts/llama_mlir.py, with
[optional] parts left out and these stand-ins: a path ending in model.onnx
and MODEL / MODEL.onnx are --fixture; <config> is "small"; an -o path's
folder is created; DIR as an -o value is a fresh folder; the kernel cache
($KILN_CACHE_DIR) is a fresh folder too. A command that
still holds a placeholder (FILE, STEP.kiln, REGEX, <x>, ..., a|b) is
checked only. Inline commands run only when they name an existing model.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

TOOLS = ("kiln", "kiln-opt", "kiln-run")
GENERIC = {"help", "h", "version"}
SCRIPTS = ("scripts/llama_mlir.py",)  # CPU-only generators the docs pipe


def sh(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120)


class Tools:
    """What each tool accepts, read from the tools themselves."""

    def __init__(self, paths):
        # Absolute: the commands run in their own folders.
        self.paths = {tool: os.path.abspath(shutil.which(path) or path)
                      for tool, path in paths.items()}
        paths = self.paths
        self.options = {}  # (tool, subcommand or "") -> set of names
        self.values = {}  # (tool, subcommand, option) -> set of values
        if "kiln" in paths:
            for line in sh(paths["kiln"], "--list-options").stdout.splitlines():
                sub, name = line.split()
                self.options.setdefault(("kiln", sub), set()).add(name)
            self.options[("kiln", "")] = set()
            for (tool, sub) in list(self.options):
                if sub:
                    self._enum_values(sub)
        if "kiln-run" in paths:
            for line in sh(paths["kiln-run"], "--list-options").stdout.splitlines():
                words = line.split()
                self.options[("kiln-run", words[0])] = {w[2:] for w in words[1:]}
            self.options[("kiln-run", "")] = set()
        if "kiln-opt" in paths:
            text = sh(paths["kiln-opt"], "--help").stdout
            self.options[("kiln-opt", "")] = set(re.findall(r"^\s+--?([\w-]+)", text, re.M))

    def _enum_values(self, sub):
        option = None
        for line in sh(self.paths["kiln"], sub, "--help").stdout.splitlines():
            start = re.match(r"^\s+--([\w-]+)=<value>", line)
            value = re.match(r"^\s+=([\w-]+)\s", line)
            if start:
                option = start.group(1)
            elif value and option:
                self.values.setdefault(("kiln", sub, option), set()).add(value.group(1))
            else:
                option = None

    def subcommands(self, tool):
        return {sub for (t, sub) in self.options if t == tool and sub}


def is_placeholder(token):
    return bool(re.search(r"(^|[/=])[A-Z][A-Z0-9_]*([./]|$)", token) or "<" in token
                or ">" in token or "..." in token or "…" in token or "|" in token)


def drop_optional(text):
    """Leaves out [optional] groups that start a word ([--x ...], [-o F])."""
    out, depth = [], 0
    for i, c in enumerate(text):
        if c == "[" and (depth or i == 0 or text[i - 1] == " "):
            depth += 1
            continue
        if c == "]" and depth:
            depth -= 1
            continue
        if not depth:
            out.append(c)
    return " ".join("".join(out).split())


def tokens_of(text):
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote in a synopsis
        return text.split()


def strip_comment(line):
    """A `# comment` after the command (not inside quotes or braces)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and i and line[i - 1] == " ":
            return line[:i].rstrip()
    return line


def extract(root):
    """(file, line, command, fenced, block) for every command line."""
    files = ["README.md"] + sorted(glob.glob("docs/**/*.md", root_dir=root, recursive=True))
    command_start = re.compile(r"^(/usr/bin/time -v )?(%s) " % "|".join(map(re.escape, TOOLS)))
    for name in files:
        lines = open(os.path.join(root, name), encoding="utf-8").read().split("\n")
        fenced, block, current = False, 0, None
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if stripped.startswith("```"):
                if current:
                    yield current
                    current = None
                fenced = not fenced
                block += 1
                continue
            if fenced:
                if current and (current[2].endswith("\\") or re.match(r"^[\[(]?--?\w", stripped)):
                    text = current[2].rstrip("\\").rstrip() + " " + strip_comment(stripped)
                    current = (current[0], current[1], text, True, block)
                    continue
                if current:
                    yield current
                    current = None
                if not stripped.isascii():
                    continue  # a diagram that names a command
                if command_start.match(stripped) or stripped.startswith(SCRIPTS):
                    current = (name, number, strip_comment(stripped), True, block)
                continue
            for span in re.findall(r"`([^`]+)`", line):
                span = span.replace("\\|", "|")
                if command_start.match(span):
                    yield (name, number, span, False, None)
        if current:
            yield current


def check_static(tools, command):
    """Problems of one command line: unknown subcommands, flags, values."""
    words = tokens_of(re.sub(r"^/usr/bin/time -v ", "", command))
    tool = words[0]
    if tool not in tools.paths:
        return None
    sub = ""
    if tool != "kiln-opt" and len(words) > 1 and not words[1].startswith("-"):
        sub = words[1]
        if sub not in tools.subcommands(tool):
            return [f"'{tool} {sub}': no such command (commands: "
                    f"{', '.join(sorted(tools.subcommands(tool)))})"]
    accepted = tools.options.get((tool, sub), set()) | GENERIC
    problems = []
    for word in words[1:]:
        flag = re.match(r"^[\[(]*(--?)([A-Za-z][\w-]*)(=([^\])]*))?", word)
        if not flag or word in ("-", "--"):
            continue
        name, value = flag.group(2), flag.group(4)
        if name not in accepted:
            problems.append(f"'{tool}{' ' + sub if sub else ''}' has no option '{flag.group(1)}{name}'")
            continue
        allowed = tools.values.get((tool, sub, name))
        if allowed and value:
            for alternative in value.split("|"):
                if alternative and not is_placeholder(alternative) and alternative not in allowed:
                    problems.append(f"--{name}={alternative} is not one of {sorted(allowed)}")
    return problems


def runnable(tools, command, fixture, fenced):
    """The argv to run `command` on a CPU, or None when it cannot run."""
    words = tokens_of(drop_optional(re.sub(r"^/usr/bin/time -v ", "", command)))
    if words[0] == "kiln-run" or (words[0] not in tools.paths and not words[0].startswith(SCRIPTS)):
        return None
    argv, names_model, made = [], False, []
    after_o = False
    for word in words:
        word = word.replace("<config>", "small")
        if re.fullmatch(r"MODEL(\.onnx)?", word) or word.endswith("model.onnx"):
            word, names_model = fixture, True
        elif after_o and word in ("DIR", "DIR2", "OUT"):
            word = word.lower()
        if after_o and os.path.dirname(word):
            made.append(os.path.dirname(word))
        after_o = word == "-o"
        if word != ">" and is_placeholder(word):
            return None
        argv.append(word)
    if not fenced and not names_model:
        return None  # an inline reference to a command, not one to run
    if argv[0] in tools.paths:
        argv[0] = tools.paths[argv[0]]
    else:
        argv = [sys.executable, os.path.join(ROOT, argv[0])] + argv[1:]
    return argv, made


def main():
    global ROOT
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--fixture")
    ap.add_argument("tools", nargs="+", help="TOOL=PATH")
    args = ap.parse_args()
    ROOT = os.path.abspath(args.root)
    # kiln_opt=... is kiln-opt (lit rewrites the word kiln-opt to its path).
    tools = Tools({tool.replace("_", "-"): path
                   for tool, path in (t.split("=", 1) for t in args.tools)})
    failures, ran, checked = [], 0, 0
    if args.fixture:
        args.fixture = os.path.abspath(args.fixture)
    folders = {}
    if not os.path.exists(os.path.join(ROOT, "README.md")):
        print(f"no README.md under {ROOT}: the runtime was built without the docs")
        return 77
    # The kernel cache of these runs is their own, not the user's.
    env = dict(os.environ, KILN_CACHE_DIR=tempfile.mkdtemp(prefix="doc-commands-cache-"))
    for name, line, command, fenced, block in extract(ROOT):
        where = f"{name}:{line}"
        problems = check_static(tools, command) if not command.startswith(SCRIPTS) else []
        if problems is None:
            continue
        checked += 1
        failures += [f"{where}: {p} in: {command}" for p in problems]
        if problems or not args.fixture:
            continue
        plan = runnable(tools, command, args.fixture, fenced)
        if not plan:
            print(f"checked {where}: {command}")
            continue
        argv, made = plan
        key = (name, block) if fenced else (name, line)
        if key not in folders:
            folders[key] = tempfile.mkdtemp(prefix="doc-commands-")
        cwd = folders[key]
        for folder in made:
            os.makedirs(os.path.join(cwd, folder), exist_ok=True)
        stdout = subprocess.DEVNULL
        if ">" in argv:
            at = argv.index(">")
            stdout = open(os.path.join(cwd, argv[at + 1]), "w")
            argv = argv[:at]
        result = subprocess.run(argv, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE,
                                text=True, timeout=600, env=env)
        ran += 1
        print(f"ran {where}: {command}")
        if result.returncode != 0:
            failures.append(f"{where}: exit {result.returncode}: {command}\n"
                            + result.stderr.strip()[-2000:])
    for failure in failures:
        print("FAIL:", failure)
    print(f"{checked} command lines checked, {ran} ran")
    return 1 if failures else 0


ROOT = "."
if __name__ == "__main__":
    sys.exit(main())
