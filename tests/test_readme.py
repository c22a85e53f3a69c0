"""The README's commands and Python blocks run, so that the README cannot rot; so do the
runnable examples of the pages in docs/, and the links between the pages resolve.

Each fenced ``bash``, ``console`` or ``python`` block runs, in document order, in a folder that
holds a copy of ``examples/``: a ``sqltree`` command in process (``sqltree.cli.main``), any other
shell line in bash (where ``sqltree`` runs this checkout's ``python -m sqltree.cli``), the
Python blocks one after another in one namespace, as in a notebook. An HTML comment on the line
before a block changes that:

- ``<!-- not run: why -->``: skipped (few, each with its reason);
- ``<!-- test: setup ... -->``: the fresh-machine command; its ``sqltree`` steps run;
- ``<!-- test: ci ... -->``: the command that runs ``.ci/run``;
- ``<!-- test: the test command of .ci/run -->``: must be the test command ``.ci/run`` runs;
- ``<!-- test: postgres ... -->`` / ``<!-- test: spark ... -->``: run on the test cluster or the
  test Spark session.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from sqlglot import exp

from sqltree.cli import main
from tests.helpers import DATA, GOLF, ROOT

README = ROOT / "README.md"
RUN = ("bash", "console", "python")
COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->$")
SHELL = re.compile(r"&&|\|\||[|;<>`$]")
POSTGRES_URL = "postgresql://me@localhost/shop"
"""The URL the README's PostgreSQL block trains on; the test serves its ``golf`` table."""


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    mark: str | None
    line: int


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the HTML comment just before it."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        comment = COMMENT.match(before)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        blocks.append(Block(lines[i][3:].strip(), "\n".join(lines[i + 1:end]) + "\n",
                            comment.group(1) if comment else None, i + 1))
        i = end + 1
    return blocks


def marked(mark: str) -> list[Block]:
    return [b for b in fenced_blocks(README) if b.mark is not None and b.mark.startswith(mark)]


def commands(block: Block) -> list[str]:
    """The block's command lines, continuation lines joined, ``$ `` prompts removed."""
    text = block.text.replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    if block.language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    return [line for line in lines if line and not line.startswith("#")]


def run_command(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    words = shlex.split(line, comments=True)
    if words[0] == "sqltree" and not SHELL.search(line):
        status = main(words[1:])
        out, err = capsys.readouterr()
        assert status == 0, f"{line}\n{err}"
        assert out or "-o" in words, line  # it printed, or wrote its file
        return
    shell = f'sqltree() {{ "{sys.executable}" -m sqltree.cli "$@"; }}\nset -e\n{line}\n'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"{line}\n{done.stderr}"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with the bundled examples, as in a checkout."""
    shutil.copytree(DATA, tmp_path / "examples" / "data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


# -- the blocks ---------------------------------------------------------------------------------
def test_every_block_is_run_or_says_why_not() -> None:
    blocks = fenced_blocks(README)
    kinds = ("not run: ", "test: setup", "test: ci", "test: the test command of .ci/run",
             "test: postgres", "test: spark")
    for block in blocks:
        assert block.mark is None or block.mark.startswith(kinds), (block.line, block.mark)
        assert block.language in (*RUN, "text"), (block.line, block.language)
    not_run = [b for b in blocks if b.mark and b.mark.startswith("not run: ")]
    assert all(len(b.mark) > len("not run: ") + 10 for b in not_run)
    assert len(not_run) <= 2
    assert sum(b.mark is None and b.language in RUN for b in blocks) >= 8


def run_page(page: Path, capsys: pytest.CaptureFixture[str]) -> int:
    """Run a page's unmarked blocks in document order; returns how many ran."""
    namespace: dict[str, object] = {"__name__": "readme"}
    ran = 0
    for block in fenced_blocks(page):
        if block.mark is not None or block.language not in RUN:
            continue
        if block.language == "python":
            exec(compile(block.text, f"{page.name}:{block.line}", "exec"), namespace)
            capsys.readouterr()
        else:
            for line in commands(block):
                run_command(line, capsys)
        ran += 1
    return ran


def test_the_readme_runs(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_page(README, capsys) >= 8
    assert (folder / "golf.json").exists() and (folder / "golf.svg").exists()
    # no block overwrites the tour's model with one trained on fewer rows
    assert json.loads((folder / "golf.json").read_text())["stats"]["rows"] == 14
    assert "{{ ref('sales') }}" in (folder / "scored_sales.sql").read_text()
    assert len(pd.read_csv(folder / "scored.csv")) == 14


def test_installation_is_from_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    assert "not on\nPyPI" in text and "PyPI distribution is" not in text
    installs = re.findall(r"pip install [^`\n]*", text)
    assert installs and all(i.startswith("pip install -e ") for i in installs), installs


EXTRAS_NEEDED = {"sklearn": re.compile(r"^from sklearn", re.M),
                 "pictures": re.compile(r"^sqltree dot .* -o ", re.M),
                 "postgres": re.compile(r"postgresql://"),
                 "spark": re.compile(r"^from pyspark", re.M)}


def test_each_step_that_needs_an_extra_says_so() -> None:
    text = README.read_text(encoding="utf-8")
    run = ("", "test: postgres", "test: spark")
    for block in fenced_blocks(README):
        at = text.index(block.text)
        # said in the block's section, before it or in the paragraph after it
        near = text[text.rfind("\n#", 0, at):at + len(block.text) + 400]
        for extra, needs in EXTRAS_NEEDED.items():
            if (block.mark or "").split(";")[0] in run and needs.search(block.text):
                assert f"`{extra}` extra" in near, (block.line, extra)


DOCS = sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("page", [p for p in DOCS if any(
    b.mark is None and b.language in RUN for b in fenced_blocks(p))], ids=lambda p: p.name)
def test_the_docs_examples_run(page: Path, folder: Path, capsys) -> None:
    assert run_page(page, capsys) >= 1
    for block in fenced_blocks(page):
        assert block.mark is None or block.mark.startswith("not run: "), block.line


def test_the_first_command_sets_up_and_runs_the_main_job(folder: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    (block,) = marked("test: setup")
    (line,) = commands(block)
    steps = [step.strip() for step in line.split("&&")]
    assert steps[:3] == ["python3 -m venv .venv", ". .venv/bin/activate", "pip install -e ."]
    jobs = [step for step in steps[3:] if step.startswith("sqltree ")]
    assert jobs == steps[3:] and [shlex.split(j)[1] for j in jobs] == ["train", "predict"]
    for job in jobs:
        run_command(job, capsys)
    assert (folder / "golf.json").exists()


def test_the_test_command_is_the_one_ci_runs() -> None:
    (setup,) = marked("test: ci")
    assert commands(setup) == [
        "python3 -m venv .venv && . .venv/bin/activate && bash .ci/run"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    run_by_ci = [line.strip() for line in ci if line.strip().startswith("python -m pytest")]
    (command,) = marked("test: the test command of .ci/run")
    assert commands(command) == run_by_ci and len(run_by_ci) == 1


# -- links ------------------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#+ (.*)$", path.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_links_between_pages_resolve(page: Path) -> None:
    links = LINK.findall(page.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local
    for link in local:
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), link
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), link


# -- blocks for the other engines ---------------------------------------------------------------
@pytest.mark.postgres
def test_the_postgres_block(postgres_url: str, postgres_admin, folder: Path) -> None:
    from sqltree.engines.postgres import PostgresEngine

    (block,) = marked("test: postgres")
    assert POSTGRES_URL in block.text
    table = exp.Table(this=exp.to_identifier("golf", quoted=True))
    PostgresEngine(postgres_admin).load_dataframe(pd.read_csv(GOLF, dtype=str), table)
    try:
        namespace: dict[str, object] = {}
        exec(compile(block.text.replace(POSTGRES_URL, postgres_url),
                     f"README.md:{block.line}", "exec"), namespace)
        assert namespace["model"].n_leaves == 5
    finally:
        postgres_admin.execute(exp.Drop(tables=[table], kind="TABLE").sql("postgres"))


@pytest.mark.spark
@pytest.mark.slow  # a Spark training, as the engines' Spark cases (tests/conftest.py, ENGINES)
def test_the_spark_block(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = marked("test: spark")
    # Spark resolves a relative path against the folder its JVM started in, not Python's.
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {}
    exec(compile(block.text, f"README.md:{block.line}", "exec"), namespace)
    assert namespace["spark"] is spark and namespace["model"].n_leaves == 5
