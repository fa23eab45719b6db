"""What the tools write (issue 26, `compiler.cli.outputs`): the report's format is --format,
else its file's extension, the same way in `prover check -o` and `npuc compile --report`;
an unknown extension is bad usage before any work; the files of one run are written
together or not at all; each file written is named on a "wrote" line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
from cli_helpers import EXAMPLES, assert_one_line_error, npuc, prover
from models import matmul_activation

from compiler.cli.common import UsageError
from compiler.cli.outputs import Staged, report_format

SHOWCASE = str(EXAMPLES / "showcase.onnx")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("m") / "m.onnx"
    onnx.save(matmul_activation(), p)
    return str(p)


@pytest.mark.parametrize(
    "name, start",
    [
        ("r.md", "### Fusion check"),
        pytest.param("r.sarif", "{", marks=pytest.mark.slow),  # the default run keeps .md
        pytest.param("r.txt", "/", marks=pytest.mark.slow),  # (npuc's test reads .txt)
    ],
)  # fmt: skip
def test_prover_format_follows_the_extension(model, tmp_path, name, start):
    out = tmp_path / name
    r = prover("check", model, "--no-progress", "-o", out)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith(start), text[:80]
    if name == "r.sarif":
        assert json.loads(text)["version"] == "2.1.0"
    assert r.stdout == ""
    assert f"prover: wrote {out} (" in r.stderr


@pytest.mark.slow  # npuc's --format test covers the rule in the default run
def test_explicit_format_wins_over_the_extension(model, tmp_path):
    out = tmp_path / "r.txt"
    r = prover("check", model, "--no-progress", "--format", "json", "-o", out)
    assert r.returncode == 0 and json.loads(out.read_text())["summary"]["candidates"] == 1


@pytest.mark.parametrize("name", ["r.pdf", "report"])
def test_unknown_extension_is_bad_usage_before_any_work(model, tmp_path, name):
    out = tmp_path / name
    r = prover("check", model, "--no-progress", "-o", out)
    assert_one_line_error(r, "names no report format", "--format")
    assert not out.exists()
    prog = tmp_path / "p.npuprog"
    r = npuc("compile", model, "-o", prog, "--report", out, "--no-progress")
    assert_one_line_error(r, "--report", "names no report format")
    assert not prog.exists() and not out.exists()


def test_npuc_report_format_follows_the_extension(model, tmp_path):
    prog = tmp_path / "p.npuprog"
    rep = tmp_path / "r.txt"  # was silently JSON
    r = npuc("compile", model, "-o", prog, "--report", rep, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert rep.read_text().startswith(model)  # the text report's first line names the model
    assert f"wrote {rep} (text report, " in r.stdout
    assert r.stdout.startswith(f"wrote {prog} (NPU program, ")
    rep2 = tmp_path / "r.out"
    r = npuc("compile", model, "-o", prog, "--report", rep2, "--format", "json", "--no-progress")
    assert r.returncode == 0 and json.loads(rep2.read_text())["program"] == str(prog)


def test_npuc_format_needs_a_report(model, tmp_path):
    r = npuc("compile", model, "-o", tmp_path / "p", "--format", "json", "--no-progress")
    assert_one_line_error(r, "--format applies to --report")


def test_a_report_that_cannot_be_written_leaves_no_program(model, tmp_path):
    prog = tmp_path / "p.npuprog"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = npuc("compile", model, "-o", prog, "--report", blocker / "r.json", "--no-progress")
    assert_one_line_error(r, "--report", "is not a directory")
    assert not prog.exists()
    # a destination that passes the checks but fails when written (/proc takes no files)
    if Path("/proc").is_dir():
        r = npuc("compile", model, "-o", prog, "--report", "/proc/r.json", "--no-progress")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert not prog.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".p.npuprog")]  # no temp


def test_a_missing_directory_is_created_and_said(model, tmp_path):
    out = tmp_path / "new" / "sub" / "r.json"
    r = prover("check", model, "--no-progress", "-o", out)
    assert r.returncode == 0 and out.is_file()
    assert f"wrote {out} (json report, " in r.stderr
    assert f"created directory {tmp_path / 'new'}" in r.stderr


def test_emit_tests_says_what_it_wrote(tmp_path, model):
    d = tmp_path / "t"
    r = prover("check", SHOWCASE, "--no-progress", "--emit-tests", d)
    assert r.returncode == 1
    assert f"prover: wrote 1 replay test (pytest modules and .npz data) to {d}" in r.stderr
    r = prover("check", model, "--no-progress", "--emit-tests", d)
    assert r.returncode == 0 and "--emit-tests: no refuted site, nothing written" in r.stderr


def test_report_format_rule():
    assert report_format(None, None, "-o", "text") == "text"
    assert report_format(None, "a/b.SARIF.json", "-o", "text") == "sarif"
    assert report_format(None, "b.HTM", "-o", "text") == "html"
    assert report_format("md", "b.json", "-o", "text") == "md"
    with pytest.raises(UsageError, match=r"extension \(none\)"):
        report_format(None, "b", "-o", "text")


def test_staged_files_are_written_together_or_not_at_all(tmp_path):
    st = Staged()
    st.add(tmp_path / "a.bin", b"a", "first")
    st.add(tmp_path / "missing" / "x" / "b.txt", "b", "second")
    (tmp_path / "missing").write_text("a file where a directory is needed")
    with pytest.raises(OSError):
        st.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["missing"]  # no a.bin, no temp
    ok = Staged()
    ok.add(tmp_path / "d" / "a.txt", "hello", "greeting")
    lines = ok.commit()
    assert lines == [
        f"wrote {tmp_path / 'd' / 'a.txt'} (greeting, 5 bytes; created directory {tmp_path / 'd'})"
    ]
    assert (tmp_path / "d" / "a.txt").read_text() == "hello"
    assert oct((tmp_path / "d" / "a.txt").stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_a_staged_writer_is_called_at_commit_and_a_failing_one_leaves_nothing(tmp_path):
    """A file staged as a writer (the NPU program, streamed) is written by it at commit and
    its size read back for the wrote line; a writer that fails midway leaves no file, no
    temporary file and none of the other staged files."""
    ok = Staged()
    ok.add(tmp_path / "p.bin", lambda f: [f.write(b"x" * 1500) for _ in range(2)], "program")
    assert ok.commit() == [f"wrote {tmp_path / 'p.bin'} (program, 3000 bytes)"]
    assert (tmp_path / "p.bin").read_bytes() == b"x" * 3000

    def broken(f):
        f.write(b"half")
        raise ValueError("encoding failed")

    bad = Staged()
    bad.add(tmp_path / "r.txt", "report", "report")
    bad.add(tmp_path / "q.bin", broken, "program")
    with pytest.raises(ValueError, match="encoding failed"):
        bad.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.bin"]


def _umask() -> int:
    m = os.umask(0o22)
    os.umask(m)
    return m


def test_one_check_writes_several_reports(model, tmp_path):
    """`--also-write FILE` (repeatable): the same check's report in the format each file's
    extension names, beside -o's file or stdout; each written file is named."""
    sarif, md, js = tmp_path / "r.sarif", tmp_path / "out" / "r.md", tmp_path / "r.json"
    r = prover("check", model, "--no-progress", "--format", "github", "--also-write", sarif,
               "--also-write", md, "--also-write", js)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(sarif.read_text())["version"] == "2.1.0"
    assert md.read_text().startswith("### Fusion check")
    assert json.loads(js.read_text())["summary"]["candidates"] == 1
    assert all(f"prover: wrote {p} (" in r.stderr for p in (sarif, md, js))
    assert "sarif report" in r.stderr and "created directory" in r.stderr


@pytest.mark.parametrize("bad", ["r.pdf", "-"])
def test_also_write_needs_a_file_whose_extension_names_a_format(model, tmp_path, bad):
    out = tmp_path / "r.json"
    path = bad if bad == "-" else str(tmp_path / bad)
    r = prover("check", model, "--no-progress", "-o", out, "--also-write", path)
    assert_one_line_error(r, "--also-write")
    assert not out.exists() and not (tmp_path / "r.pdf").exists()


def test_also_write_turns_run_records_off():
    """A run record serves one report; a check writing several always runs."""
    from compiler.cli import run_record
    from compiler.cli.prover import build_parser

    args = ["check", "m.onnx", "--proofs", "p", "--recheck-budget", "0"]
    parse = build_parser().parse_args
    assert run_record.applies(parse(args))
    assert not run_record.applies(parse([*args, "--also-write", "r.sarif"]))
