#!/usr/bin/env python3
"""Check that the docs name only things that exist (mechanical drift).

The manual is README.md, CONTRIBUTING.md and the book's chapters (docs/src/**/*.md).

1. Commands: every `gpuctl …`, `gpuplane-server …` and `gpuplane-agent …`
   (also after `sudo [-u USER]`)
   command line in the manual (code blocks, and inline `code` in prose) names
   real subcommands, and each -f/--flag it uses is an option in that
   command's --help. Words after a literal `--` are the job's own command;
   UPPERCASE placeholders and other positionals are not checked.
2. Settings: every key of a ```toml block in the manual is a key (commented
   out or not) of `gpuplane-server config example` or, in a job spec (a block
   with a `command` key), a field of `JobSpec` in api/src/job.rs. Every
   GPUPLANE_*/GPUCTL_* variable the manual names appears in the binaries'
   --help or in the repo's *.rs, *.sh or *.py files.
3. Paths: every path in inline `code` in the manual, SECURITY.md and
   ARCHITECTURE.md (with a slash, or a bare *.rs/.toml/.sql/.py/.ts/.sh name)
   is a file or folder of the repo or the tail of one (`jobs/plan.rs`), and
   in `file.rs::name` (or a `…::name` after it) the file defines `name` (a
   Rust fn, const or static; a Python def).
   Skipped: URLs, routes (`/…`, `{id}`), globs, `~/…`, placeholders
   (`DATA_DIR/…`, `<n>`, `$VAR`) and paths git ignores (`target/site`).
4. Service units: the `ExecStart=` command of each dist/systemd/*.service
   is checked as in 1, and where `systemd-analyze` is installed, `verify`
   (with the binaries of --bin-dir in place of /opt/gpuplane/bin) reports
   nothing: no unknown key, no bad value.
5. The command-line reference (docs/src/reference/cli.md) is every
   command's --help as the binaries print it; `--bless` rewrites it.
Exits 1 with one line per problem, else prints a one-line summary.
"""
import argparse
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARIES = ("gpuctl", "gpuplane-server", "gpuplane-agent")
SHELL_BLOCKS = ("", "sh", "bash", "shell", "console", "text")
CODE_EXTS = (".rs", ".toml", ".sql", ".py", ".ts", ".sh")
# Words with a slash that are not paths: metric keys, cargo features, bundle URLs.
# Not repo paths: metric prefixes, build outputs, and the files of a user's
# experiment folder (`gpuctl exp init`).
NOT_PATHS = re.compile(r"^(train|eval)/|^app/(ssr|hydrate)$|^pkg/|^(experiment\.toml|train\.sh)$")
BIN_DIR = "target/debug"  # --bin-dir
README = "README.md"  # --readme
BOOK = "docs/src"
CLI_REFERENCE = "docs/src/reference/cli.md"
problems = []


def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    return done.returncode, done.stdout + done.stderr


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def split_markdown(text):
    """The fenced blocks as (language, lines), and the prose without them."""
    blocks, prose, block = [], [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if block is None:
                block = (line.strip()[3:].strip(), [])
            else:
                blocks.append(block)
                block = None
        elif block is not None:
            block[1].append(line)
        else:
            prose.append(line)
    return blocks, "\n".join(prose)


def inline_code(prose):
    return [m.group(1).replace("\n", " ").strip() for m in re.finditer(r"`([^`]+)`", prose)]


@functools.cache
def helps(binary, path=()):
    """`binary *path --help`: its text, its subcommands and its options."""
    code, out = run(os.path.join(BIN_DIR, binary), *path, "--help")
    if code != 0:
        sys.exit(f"check-docs: `{' '.join((binary, *path))} --help` exited {code}:\n{out}")
    commands = re.search(r"^Commands:\n((?:  .*\n)+)", out, re.M)
    subs = set(re.findall(r"^  (\S+)", commands.group(1), re.M)) if commands else set()
    options = re.findall(r"^\s+(-\w)?(?:, )?(--[\w-]+)?", out, re.M)
    return out, subs, {flag for pair in options for flag in pair if flag}


def check_command(line, source=None):
    """Check one shell command; return 1 when it runs one of ours with arguments."""
    source = source or README
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
        words.pop(0)  # VAR=value before the command
    if words[:1] == ["sudo"]:
        words = words[3:] if words[1:2] == ["-u"] else words[1:]  # sudo [-u USER] COMMAND
    if not words or os.path.basename(words[0]) not in BINARIES:
        return 0
    binary, path, unmatched = os.path.basename(words[0]), [], []
    _, subs, flags = helps(binary)
    for word in (w.strip("[]") for w in words[1:]):
        if word == "--" or word.startswith((">", "<", "2>")):
            break  # the job's own command, or a redirection
        if re.match(r"^--?[A-Za-z]", word):
            flag = word.split("=")[0]
            if flag not in flags and not (subs and unmatched):  # else reported below
                problems.append(f"{source}: `{line}`: {flag} is not an option of `{' '.join([binary, *path])}`")
        elif word in subs:
            path.append(word)
            unmatched = []
            _, subs, flags = helps(binary, tuple(path))
        elif subs:
            unmatched.append(word)
    if subs and unmatched:
        problems.append(f"{source}: `{line}`: `{' '.join([binary, *path])}` has no subcommand {unmatched[0]!r}")
    return int(len(words) > 1)  # a bare name is a mention, not a command


def check_commands(blocks, prose, source):
    lines = [line for lang, body in blocks if lang in SHELL_BLOCKS for line in body]
    count = 0
    for line in lines + inline_code(prose):
        line = re.sub(r"^\s*\$ ", "", line)
        line = re.sub(r"(^|\s)#.*", "", line)  # a shell comment
        for command in re.split(r"\s(?:&&|\|\||\||;)\s|;$", line):
            count += check_command(command.strip(), source)
    return count


@functools.cache
def known_settings():
    """The server's config keys and the job spec's fields."""
    _, example = run(os.path.join(BIN_DIR, "gpuplane-server"), "config", "example")
    config_keys = set(re.findall(r"^#? ?([a-z_]+) = ", example, re.M))
    job_spec = re.search(r"pub struct JobSpec \{(.*?)\n\}", read("api/src/job.rs"), re.S)
    return config_keys, set(re.findall(r"pub (\w+):", job_spec.group(1)))


@functools.cache
def variable_sources(files):
    """Where an environment variable may be defined: --help texts and sources."""
    sources = [helps("gpuplane-server")[0], helps("gpuplane-server", ("serve",))[0], helps("gpuplane-agent")[0]]
    sources += [read(f) for f in files if f.endswith((".rs", ".sh", ".py")) and f != "scripts/check-docs.py"]
    return "\n".join(sources)


def check_settings(blocks, text, files, source):
    config_keys, spec_keys = known_settings()
    count = 0
    for body in (body for lang, body in blocks if lang == "toml"):
        keys = re.findall(r"^#?\s*([A-Za-z_][\w-]*)\s*=", "\n".join(body), re.M)
        if "runtime_id" in keys:
            continue  # a recipe file: recipe/tests/recipes.rs parses the manual's
        known, what = (spec_keys, "JobSpec field") if "command" in keys else (config_keys, "server config key")
        count += len(keys)
        problems.extend(f"{source}: ```toml: {key!r} is not a {what}" for key in keys if key not in known)
    names = sorted(set(re.findall(r"\b(?:GPUPLANE|GPUCTL)_[A-Z0-9_]*[A-Z0-9]\b", text)))
    for name in names:
        if not re.search(rf"\b{name}\b", variable_sources(files)):
            problems.append(f"{source}: environment variable {name} appears in no --help and no source file")
    return count, len(names)


def book_chapters():
    """The book's chapters, but the generated reference."""
    chapters = []
    for folder, _, names in os.walk(os.path.join(ROOT, BOOK)):
        for name in names:
            path = os.path.relpath(os.path.join(folder, name), ROOT)
            if name.endswith(".md") and name != "SUMMARY.md" and path != CLI_REFERENCE:
                chapters.append(path)
    return sorted(chapters)


def clean_help(binary, path):
    """`binary *path --help` in an empty environment (no `[env: X=value]`)."""
    done = subprocess.run([os.path.join(BIN_DIR, binary), *path, "--help"], capture_output=True, text=True,
                          cwd=ROOT, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    if done.returncode != 0:
        sys.exit(f"check-docs: `{' '.join((binary, *path))} --help` exited {done.returncode}:\n{done.stderr}")
    commands = re.search(r"^Commands:\n((?:  .*\n)+)", done.stdout, re.M)
    subs = re.findall(r"^  (\S+)", commands.group(1), re.M) if commands else []
    return done.stdout, [sub for sub in subs if sub != "help"]


def cli_reference():
    """The command-line reference: every command's --help, in the order the binaries list them."""
    parts = ["# Command line\n",
             "Every command of `gpuctl`, `gpuplane-server` and `gpuplane-agent`, with its\n"
             "`--help`. Generated from the binaries by `python3 scripts/check-docs.py --bless`;\n"
             "the test command checks that it is current.\n"]

    def walk(binary, path):
        text, subs = clean_help(binary, path)
        heading = "#" * min(2 + len(path), 6)
        parts.append(f"{heading} {' '.join((binary, *path))}\n\n```text\n{text.rstrip()}\n```\n")
        for sub in subs:
            walk(binary, (*path, sub))

    for binary in BINARIES:
        walk(binary, ())
    return "\n".join(parts)


def check_cli_reference(bless):
    reference = cli_reference()
    if bless:
        with open(os.path.join(ROOT, CLI_REFERENCE), "w", encoding="utf-8") as f:
            f.write(reference)
    elif not os.path.exists(os.path.join(ROOT, CLI_REFERENCE)) or read(CLI_REFERENCE) != reference:
        problems.append(f"{CLI_REFERENCE} is not what the binaries' --help say: "
                        "run `python3 scripts/check-docs.py --bless` and commit it")
    return reference.count("```text")


def repo_files():
    """The files git lists (tracked, or untracked and not ignored), and their folders."""
    code, out = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if code != 0:
        sys.exit(f"check-docs: cannot list the repo's files with git:\n{out}")
    files = {f for f in out.split("\0") if f and os.path.lexists(os.path.join(ROOT, f))}
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    return files, folders


# What names a definition in a source file: a Rust fn, const or static, a Python def.
DEFINITION = r"\b(fn|const|static|def) {name}\b"


def path_tokens(doc):
    """(token, path, function) for each path-like inline `code` of a document."""
    previous = None  # the file of the last `file.rs::name`, for `…::name`
    for token in inline_code(split_markdown(read(doc))[1]):
        token = token.removeprefix("./")
        if token.startswith("…::") and previous:
            token = previous + token[1:]
        path, _, function = token.partition("::")
        if (" " in token or "://" in token or path.startswith(("/", "~", "-")) or NOT_PATHS.search(path)
                or re.search(r"[{*<$…]", path) or re.search(r"(^|/)[A-Z][A-Z_]+(/|$)", path)
                or not ("/" in path or path.endswith(CODE_EXTS))):
            continue
        previous = path if function else None
        yield token, path.rstrip("/"), function


def check_paths(docs, files, folders):
    tails = {}  # each trailing run of a repo path's components -> those paths
    for path in sorted(files | folders):
        parts = path.split("/")
        for i in range(len(parts)):
            tails.setdefault("/".join(parts[i:]), []).append(path)
    candidates = []
    for doc in docs:
        for token, path, function in path_tokens(doc):
            if ".." in path.split("/"):
                # git cannot answer for it, and a fresh clone does not have it.
                problems.append(f"{doc}: `{token}` points outside the repo")
            else:
                candidates.append((doc, token, path, function))
    # Paths the repo ignores (build outputs, a local venv) are named in docs
    # but are not files of the repo. git answers 1 when none is ignored.
    code, out = run("git", "check-ignore", "--no-index", *sorted({c[2] for c in candidates}))
    if code not in (0, 1):
        problems.append(f"git check-ignore failed ({code}): {out.strip()}")
    ignored = set(out.split()) if code == 0 else set()
    candidates = [c for c in candidates if c[2] not in ignored]
    for doc, token, path, function in candidates:
        found = tails.get(path)
        if not found:
            problems.append(f"{doc}: `{token}` names no file or folder of the repo")
        elif function and not any(re.search(DEFINITION.format(name=re.escape(function)), read(f))
                                  for f in found if f in files):
            problems.append(f"{doc}: `{token}`: no `{function}` defined in {' or '.join(found)}")
    return len(candidates)


UNITS = "dist/systemd"
INSTALLED_BIN = "/opt/gpuplane/bin"


def check_units():
    """Check each service unit's command, and the unit itself where systemd can."""
    names = sorted(n for n in os.listdir(os.path.join(ROOT, UNITS)) if n.endswith(".service"))
    verify = shutil.which("systemd-analyze")
    with tempfile.TemporaryDirectory() as copies:
        for name in names:
            text = read(os.path.join(UNITS, name))
            commands = re.findall(r"^ExecStart=(.*)$", text, re.M)
            if len(commands) != 1:
                problems.append(f"{UNITS}/{name}: {len(commands)} ExecStart= lines, not one")
            for command in commands:
                if not command.startswith(INSTALLED_BIN + "/") or not check_command(command, f"{UNITS}/{name}"):
                    problems.append(f"{UNITS}/{name}: ExecStart= does not run one of ours from {INSTALLED_BIN}")
            with open(os.path.join(copies, name), "w", encoding="utf-8") as f:
                f.write(text.replace(INSTALLED_BIN, BIN_DIR))
        if verify and names:
            _, out = run(verify, "verify", *(os.path.join(copies, n) for n in names))
            problems.extend(f"{UNITS}: systemd-analyze verify: {line}" for line in out.splitlines() if line.strip())
    return len(names), bool(verify)


def main():
    global BIN_DIR, README
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", default=BIN_DIR, help="where gpuctl, gpuplane-server, gpuplane-agent are")
    parser.add_argument("--readme", default=README, help="the README to check (e.g. a temporary copy)")
    parser.add_argument("--docs", nargs="*", default=["README.md", "SECURITY.md", "ARCHITECTURE.md"],
                        help="documents whose paths are checked, besides the book (README.md stands for --readme)")
    parser.add_argument("--bless", action="store_true", help=f"rewrite {CLI_REFERENCE} from the binaries")
    args = parser.parse_args()
    BIN_DIR, README = os.path.abspath(args.bin_dir), args.readme
    missing = [b for b in BINARIES if not os.access(os.path.join(BIN_DIR, b), os.X_OK)]
    if missing:
        sys.exit(f"check-docs: no {', '.join(missing)} in {BIN_DIR} (build them first, or pass --bin-dir)")
    files, folders = repo_files()
    files = frozenset(files)
    manual = [README, "CONTRIBUTING.md", *book_chapters()]
    commands = keys = variables = 0
    for doc in manual:
        text = read(doc)
        blocks, prose = split_markdown(text)
        commands += check_commands(blocks, prose, doc)
        found = check_settings(blocks, text, files, doc)
        keys, variables = keys + found[0], variables + found[1]
    docs = [README if d == "README.md" else d for d in args.docs]
    paths = check_paths(docs + manual[1:], files, folders)
    units, verified = check_units()
    references = check_cli_reference(args.bless)
    if problems:
        print(f"docs: {len(problems)} problem(s):", *problems, sep="\n  ", file=sys.stderr)
        return 1
    print(f"docs: {len(manual)} manual files, {commands} commands, {keys} toml keys, {variables} variables, "
          f"{paths} paths, {references} commands' --help in the reference, {units} service units ({'verified by systemd-analyze' if verified else 'no systemd-analyze here'}) checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
