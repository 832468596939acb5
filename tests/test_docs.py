"""Every code block in docs/*.md and README.md that a reader would run, runs.

```python blocks: the blocks of one page run in order in one namespace (a page
reads as one session), with the repository root as the working directory.

```sh / ```bash / ```shell blocks, and the `$ ` lines of ```console blocks:
the blocks of one page run in order with bash (`set -e`), in a fresh
temporary directory holding the files the docs name (FIXTURES below), with
`emel-*`, `python` and `python3` mapped to this test's interpreter and the
emel it imports. Each must exit 0, and every file it names after `-o`,
`--json` or `--plot` must exist afterwards. A block that must not or cannot
run says so in the Markdown source, just above its fence:

    <!-- not run: REASON -->                   the whole block
    <!-- not run "LINE PREFIX": REASON -->     its lines starting with the prefix
    <!-- run instead (REASON): COMMAND -->     COMMAND, a fast variant, instead
    <!-- exit: N -->                           the block's documented exit status

A shell block that fails and carries no such marker fails the test, and an
untagged block that holds commands (not a synopsis with [options]) must be
tagged. C programs (```c blocks with a main) are compiled against the C API
and run; "It prints `...`" after one is checked.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import emel

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.MULTILINE | re.DOTALL)
SHELL_LANGS = ("sh", "bash", "shell", "console")
# Subprocesses import the emel this test imports (a checkout's python/ or the installed wheel).
PACKAGE_ROOT = str(Path(emel.__file__).resolve().parents[1])


def code_blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, line number of the first code line, dedented code) of each fenced block."""
    return [(m.group("lang"), text.count("\n", 0, m.start()) + 2, textwrap.dedent(m.group("body")))
            for m in FENCE.finditer(text)]


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, dedented code) of each ```python block, indented ones (in lists) too."""
    return [(line, code) for lang, line, code in code_blocks(text) if lang == "python"]


def test_block_extraction():
    text = "a\n```python\nx = 1\n```\n- item\n  ```python\n  y = x\n  ```\n```sh\nls\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (7, "y = x\n")]
    assert code_blocks(text)[2] == ("sh", 10, "ls\n")


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[p.name for p in PAGES_WITH_CODE])
def test_page_code_runs(page, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": f"docs_{page.stem}"}
    for line, code in python_blocks(page.read_text(encoding="utf-8")):
        try:
            exec(compile(code, f"{page.relative_to(ROOT)}:{line}", "exec"), namespace)
        except Exception as e:  # name the block in the failure
            raise AssertionError(f"{page.relative_to(ROOT)}, block at line {line}: "
                                 f"{type(e).__name__}: {e}") from e


# ---------------------------------------------------------------- shell blocks

MARKER = re.compile(r"<!--\s*(?P<text>.*?)\s*-->", re.DOTALL)
NOT_RUN = re.compile(r'not run(?:\s+"(?P<prefix>[^"]+)")?\s*:\s*(?P<reason>\S.*)', re.DOTALL)
RUN_INSTEAD = re.compile(r"run instead \((?P<reason>[^)]+)\)\s*:\s*(?P<command>\S.*)", re.DOTALL)
EXIT = re.compile(r"exit\s*:\s*(?P<status>\d+)")
OUTPUT_OPTION = re.compile(r"(?:^|\s)(?:-o|--output|--out|--json|--plot)\s+(?P<file>[^\s;&|#]+)")
COMMAND_WORDS = ("$", "python", "python3", "pip", "cc", "emel-plan", "emel-import", "emel-sweep",
                 "emel-trace")


def markers_before(text: str, fence_start: int) -> list[str]:
    """The HTML comments between the previous non-blank, non-comment text and a fence."""
    head = text[:fence_start].rstrip()
    found = []
    while head.endswith("-->"):
        start = head.rfind("<!--")
        assert start >= 0, f"unterminated comment before offset {fence_start}"
        found.insert(0, MARKER.fullmatch(head[start:]).group("text"))
        head = head[:start].rstrip()
    return found


class ShellBlock:
    """One shell block as the test runs it: its script, or why not."""

    def __init__(self, page: Path, lang: str, line: int, body: str, markers: list[str]):
        self.where = f"{page.relative_to(ROOT)}:{line}"
        self.lang, self.body, self.exit_status = lang, body, 0
        self.not_run_reason = None
        self.notes = []  # what of the block runs differently, and why
        lines = ([ln[2:] for ln in body.splitlines() if ln.startswith("$ ")] if lang == "console"
                 else body.splitlines())
        for marker in markers:
            if m := NOT_RUN.fullmatch(marker):
                if m.group("prefix") is None:
                    self.not_run_reason = m.group("reason")
                    continue
                kept = [ln for ln in lines if not ln.lstrip().startswith(m.group("prefix"))]
                assert len(kept) < len(lines), \
                    f"{self.where}: no line starts with {m.group('prefix')!r} (stale marker)"
                lines = kept
                self.notes.append(f"lines {m.group('prefix')!r} not run: {m.group('reason')}")
            elif m := RUN_INSTEAD.fullmatch(marker):
                lines = [m.group("command")]
                self.notes.append(f"runs {m.group('command')!r} instead: {m.group('reason')}")
            elif m := EXIT.fullmatch(marker):
                self.exit_status = int(m.group("status"))
            else:  # a misspelt marker would otherwise be ignored
                raise AssertionError(f"{self.where}: unknown marker <!-- {marker} -->")
        self.script = "\n".join(lines) + "\n"

    def __repr__(self):
        return self.where


# The README must start with exactly its two commands (install + example,
# install + tests), so its first block carries no marker: it is kept out here.
README_COMMANDS = "not run: the README's install-and-test commands; CI runs them (.ci/run)"


def shell_blocks(page: Path) -> list[ShellBlock]:
    text = page.read_text(encoding="utf-8")
    blocks = [m for m in FENCE.finditer(text) if m.group("lang") in SHELL_LANGS]
    return [ShellBlock(page, m.group("lang"), text.count("\n", 0, m.start()) + 2,
                       textwrap.dedent(m.group("body")),
                       markers_before(text, m.start())
                       + ([README_COMMANDS] if page.name == "README.md" and k == 0 else []))
            for k, m in enumerate(blocks)]


def looks_like_commands(body: str) -> bool:
    """Lines a reader would type (a synopsis, with its [options], is not)."""
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    return (bool(lines) and not any(" [" in ln for ln in lines)
            and any(ln.split()[0] in COMMAND_WORDS for ln in lines))


def test_shell_block_markers():
    text = ("x\n\n<!-- not run: installs -->\n```sh\npip install .\n```\n"
            "<!-- not run \"pip\": changes the environment -->\n<!-- exit: 1 -->\n"
            "```bash\npip install x\nemel-plan --example\n```\n"
            "```console\n$ emel-sweep dir\ngraph mode\n```\n"
            "<!-- run instead (fast): python s.py --seeds 1 -->\n```sh\npython s.py\n```\n")
    page = ROOT / "docs" / "example.md"
    page_blocks = [ShellBlock(page, m.group("lang"), 0, m.group("body"), markers_before(text, m.start()))
                   for m in FENCE.finditer(text)]
    assert [(b.not_run_reason, b.script, b.exit_status) for b in page_blocks] == [
        ("installs", "pip install .\n", 0),
        (None, "emel-plan --example\n", 1),
        (None, "emel-sweep dir\n", 0),
        (None, "python s.py --seeds 1\n", 0)]
    with pytest.raises(AssertionError, match="unknown marker"):
        ShellBlock(page, "sh", 1, "ls\n", ["not-run: typo"])
    assert looks_like_commands("python bench/speed.py   # --max 10\n")
    assert not looks_like_commands("emel-plan GRAPH.json [--mode M]\npython -m emel.memory ...\n")


def test_command_blocks_are_tagged():
    """An untagged block of commands would silently escape the test below."""
    untagged = [f"{page.relative_to(ROOT)}:{line}" for page in PAGES
                for lang, line, body in code_blocks(page.read_text(encoding="utf-8"))
                if lang == "" and looks_like_commands(body)]
    assert not untagged, f"tag these command blocks ```sh (or mark them not run): {untagged}"


def entry_points() -> dict[str, str]:
    """console script -> 'module:function', from pyproject.toml's [project.scripts]."""
    section = (ROOT / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    scripts = dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.:]+)"', section, re.MULTILINE))
    assert {"emel-plan", "emel-import", "emel-sweep", "emel-trace"} <= set(scripts)
    return scripts


def make_shims(bin_dir: Path) -> None:
    """`python`, `python3` and the console scripts, all on this test's interpreter."""
    bin_dir.mkdir()
    python = sys.executable

    def shim(name: str, args: str) -> None:
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec "{python}" {args} "$@"\n')
        path.chmod(0o755)

    shim("python", "")
    shim("python3", "")
    for name, target in entry_points().items():
        module, function = target.split(":")
        shim(name, f"-c 'import sys; sys.argv[0] = \"{name}\"; "
                   f"from {module} import {function}; sys.exit({function}())'")


def c_programs(text: str) -> list[tuple[int, str, str | None]]:
    """(line, source, what the text says it prints or None) of each ```c block with a main."""
    found = []
    for m in FENCE.finditer(text):
        if m.group("lang") == "c" and re.search(r"\bint main\s*\(", m.group("body")):
            prints = re.match(r"\s*It prints `([^`]*)`", text[m.end():])
            found.append((text.count("\n", 0, m.start()) + 2, textwrap.dedent(m.group("body")),
                          prints.group(1) if prints else None))
    return found


def write_fixtures(work: Path, page: Path) -> None:
    """The page's own C program as app.c (the page shows it; `cc app.c` compiles
    it). Every other file a command names, the page makes with a command shown
    before it: a user has nothing else."""
    programs = c_programs(page.read_text(encoding="utf-8"))
    if programs:  # cc app.c: the page's first C program
        (work / "app.c").write_text(programs[0][1])
    # Paths relative to a checkout: its scripts and benchmarks.
    for directory in ("scripts", "bench"):
        (work / directory).symlink_to(ROOT / directory, target_is_directory=True)


def c_toolchain(build_dir_too: bool = False) -> tuple[list[str], str, str] | str:
    """(compiler, include dir, library) for the C API, or why there is none.

    build_dir_too: a CMake build tree named by EMEL_C_API_BUILD_DIR, as in
    tests/test_c_api.py, instead of the installed package's files."""
    from emel.memory import native
    cc = os.environ.get("CC", "").split() or [p for p in [shutil.which("cc")] if p]
    if not cc:
        return "no C compiler (cc) on PATH"
    build = os.environ.get("EMEL_C_API_BUILD_DIR")
    if build_dir_too and build:
        library = os.path.join(os.path.abspath(build), "libemel_memory_c.so")
        assert os.path.isfile(library), f"EMEL_C_API_BUILD_DIR: no {library}"
        return cc, str(ROOT / "include"), library
    try:
        return cc, native.include_dir(), native.library_path()
    except FileNotFoundError as e:
        if os.environ.get("CI"):
            raise  # the installed wheel must carry the C API
        return f"emel.memory imported from {PACKAGE_ROOT} has no C API files: {e}"


def needs_c_api(block: ShellBlock) -> bool:
    return "emel.memory.native" in block.script or re.search(r"^\s*cc\s", block.script, re.M) is not None


PAGES_WITH_SHELL = [p for p in PAGES if shell_blocks(p)]
PAGES_TO_RUN = [p for p in PAGES_WITH_SHELL if any(b.not_run_reason is None for b in shell_blocks(p))]


@pytest.mark.skipif(sys.platform == "win32" or shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("page", PAGES_TO_RUN, ids=[p.name for p in PAGES_TO_RUN])
def test_page_shell_blocks_run(page, tmp_path):
    for module in ("onnx", "torch", "matplotlib"):  # the test extras the commands use
        if importlib.util.find_spec(module) is None:  # (found, not imported: torch is slow to)
            pytest.skip(f"the docs' commands need {module}")
    work = tmp_path / "work"
    work.mkdir()
    write_fixtures(work, page)
    make_shims(tmp_path / "bin")
    env = dict(os.environ, MPLBACKEND="Agg",
               PATH=os.pathsep.join([str(tmp_path / "bin"), os.environ.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join(
                   [PACKAGE_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("EMEL_C_API_BUILD_DIR", None)  # the docs' commands use the installed package's files
    skipped = []
    for block in shell_blocks(page):
        if block.not_run_reason is not None:
            continue
        if needs_c_api(block) and isinstance(why := c_toolchain(), str):
            skipped.append(f"{block.where}: {why}")
            continue
        run = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", block.script],
                             cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == block.exit_status, (
            f"{block.where}: exit {run.returncode}, the docs say {block.exit_status}; to keep it "
            f"out of the test, mark it <!-- not run: REASON -->\n$ {block.script}\n"
            f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        missing = [f for f in OUTPUT_OPTION.findall(block.script) if not (work / f).exists()]
        assert not missing, f"{block.where}: wrote no {missing}"
        if block.lang == "console":  # every output line shown is one the command prints today
            shown = [ln for ln in block.body.splitlines()
                     if ln.strip() and not ln.startswith("$ ") and ln.strip() != "..."]
            printed = {sample_shape(ln) for ln in run.stdout.splitlines() if ln.strip()}
            stale = [ln for ln in shown if sample_shape(ln) not in printed]
            assert not stale, (f"{block.where}: the sample shows lines the command no longer prints "
                               f"(numbers aside): {stale}\nit prints:\n{run.stdout[-3000:]}")
    if skipped:
        pytest.skip("; ".join(skipped))


def sample_shape(line: str) -> str:
    """A printed line with its numbers, hashes and spacing blurred: what a
    sample output must keep (the words, the columns) while timings change."""
    line = re.sub(r"\b[0-9a-f]{16,}\b", "HASH", line)
    line = re.sub(r"\d[\d,.]*", "#", line)
    return " ".join(line.split())


def test_sample_shape():
    assert sample_shape("activations   31.8 MiB  1.000  best_fit") == sample_shape("activations 9 MiB 1.256 best_fit")
    assert sample_shape("arena size lower bound slots") != sample_shape("arena size lower bound method slots")
    assert sample_shape("plan hash " + "ab" * 32) == "plan hash HASH"


def test_not_run_blocks_say_why():
    """The blocks kept out of the test, each with its reason (shown with -rA / -v)."""
    not_run = [(b.where, b.not_run_reason) for page in PAGES_WITH_SHELL for b in shell_blocks(page)
               if b.not_run_reason is not None]
    for where, reason in not_run:
        assert len(reason.split()) >= 2, f"{where}: say why it is not run, not just {reason!r}"
    print("\n".join(f"not run: {where}: {reason}" for where, reason in not_run))
    print("\n".join(f"partly: {b.where}: {note}" for page in PAGES_WITH_SHELL for b in shell_blocks(page)
                    for note in b.notes))


# ---------------------------------------------------------------- C programs

C_PROGRAMS = [(page, line, source, prints) for page in PAGES
              for line, source, prints in c_programs(page.read_text(encoding="utf-8"))]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX compiler driver flags")
@pytest.mark.parametrize("page,line,source,prints", C_PROGRAMS,
                         ids=[f"{p.name}:{line}" for p, line, _, _ in C_PROGRAMS])
def test_c_program_runs(page, line, source, prints, tmp_path):
    toolchain = c_toolchain(build_dir_too=True)
    if isinstance(toolchain, str):
        pytest.skip(toolchain)
    cc, include, library = toolchain
    (tmp_path / "app.c").write_text(source)
    lib_dir = os.path.dirname(library)
    build = subprocess.run(cc + ["-std=c99", "-Wall", "-Wextra", "-Werror", "app.c", "-I", include,
                                 "-L", lib_dir, "-lemel_memory_c", f"-Wl,-rpath,{lib_dir}", "-o", "app"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, f"{page.name}:{line} does not compile:\n{build.stderr}"
    run = subprocess.run([str(tmp_path / "app")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"{page.name}:{line} exits {run.returncode}: {run.stderr}"
    if prints is not None:
        assert run.stdout.strip() == prints


def test_python_blocks_paste_into_a_fresh_interpreter():
    """A reader pastes a block as it stands: no block is indented (a list's
    indentation breaks the paste), and the first block of a page that uses
    ``mm`` imports it."""
    for page in PAGES_WITH_CODE:
        text = page.read_text(encoding="utf-8")
        indented = [m for m in FENCE.finditer(text) if m.group("lang") == "python" and m.group("indent")]
        assert not indented, f"{page.name}: indented python block at line " \
                             f"{text.count(chr(10), 0, indented[0].start()) + 1}"
        first = next((code for _, code in python_blocks(text) if "mm." in code), None)
        if first is not None:
            assert "import emel.memory as mm" in first, f"{page.name}: the first block using mm imports it"
