"""What `peach deploy` uploads (SPEC §6), without a cluster: the ignore rules, `--dry-run`'s
listing, and Ray's package limit checked before anything is read or sent."""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from cli_support import run_peach

from peach_cli.checks.build import build_plan
from peach_cli.deploy.config import build_bundle
from peach_cli.deploy.uploads import MAX_UPLOAD_BYTES, check_size, select_files
from peach_cli.errors import DeployError
from peach_cli.wording import human_size

TESTS = Path(__file__).resolve().parent
BASIC = TESTS / "projects" / "deploy_basic"
REPO = TESTS.parent


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def selected(root: Path, excluded: tuple[str, ...] = ()) -> list[str]:
    return [f.path for f in select_files(root, excluded).files]


def test_dot_files_virtualenvs_caches_and_notebooks_are_left_out(tmp_path):
    write(
        tmp_path,
        {
            "app.py": "",
            ".env": "SECRET=1",
            ".aws/credentials": "[default]",
            ".git/config": "",
            "pkg/.secret": "",
            "pkg/mod.py": "",
            "env/pyvenv.cfg": "home = /usr",
            "env/lib/site.py": "",
            "conda/conda-meta/history": "",
            "conda/lib/x.py": "",
            "node_modules/a/index.js": "",
            "__pycache__/app.cpython-311.pyc": b"",
            "pkg/__pycache__/mod.cpython-311.pyc": b"",
            "tool-cache/CACHEDIR.TAG": "Signature: 8a477f597d28d172789f06886806bc55",
            "tool-cache/blob": "",
            "stale.pyc": b"",
            "notebooks/A.ipynb": "{}",
            "peach.yaml": "",
        },
    )
    assert selected(tmp_path, ("peach.yaml",)) == ["app.py", "pkg/mod.py"]


def test_gitignore_and_rayignore_apply_with_gitignore_semantics(tmp_path):
    write(
        tmp_path,
        {
            ".gitignore": "# data stays local\ndata/\n*.log\n!keep.log\n/top.txt\n",
            ".rayignore": "weights/*.bin\n",
            "data/customers.csv": "",
            "nested/data/more.csv": "",  # `data/` matches at any depth
            "debug.log": "",
            "keep.log": "",
            "top.txt": "",
            "nested/top.txt": "",  # `/top.txt` is anchored to the folder of the file
            "weights/model.bin": "",
            "weights/README": "",
            "sub/.gitignore": "*.tmp\n!keep.log\n",
            "sub/a.tmp": "",
            "sub/b.log": "",
            "sub/keep.log": "",
            "a.tmp": "",  # sub/.gitignore applies below sub/ only
        },
    )
    assert selected(tmp_path) == [
        "a.tmp",
        "keep.log",
        "nested/top.txt",
        "sub/keep.log",
        "weights/README",
    ]


def test_a_deeper_gitignore_can_re_include_what_a_parent_ignores(tmp_path):
    write(tmp_path, {".gitignore": "*.csv\n", "lookup/.gitignore": "!codes.csv\n"})
    write(tmp_path, {"big.csv": "", "lookup/codes.csv": "", "lookup/other.csv": ""})
    assert selected(tmp_path) == ["lookup/codes.csv"]


def test_the_project_package_holds_only_the_selected_files(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    write(project, {".env": "DB_PASSWORD=hunter2", ".gitignore": "data/\n", "data/x.csv": ""})
    write(project, {"helpers.py": "X = 1\n"})
    plan, diagnostics = build_plan(project)
    assert plan is not None, diagnostics
    bundle = build_bundle(plan)
    (project,) = [p for p in bundle.packages if p.kind == "project"]
    with zipfile.ZipFile(io.BytesIO(project.data)) as archive:
        assert archive.namelist() == ["helpers.py"]
    components = [p for p in bundle.packages if p.kind == "component"]
    assert sorted(p.about for p in components) == [
        "the spec of count.main",
        "the spec of hello.main",
    ]
    for package in components:  # their specs only
        with zipfile.ZipFile(io.BytesIO(package.data)) as archive:
            assert all(n.startswith("_peach_spec/") for n in archive.namelist())


def test_a_project_over_rays_limit_fails_naming_the_largest_files(tmp_path):
    write(tmp_path, {"app.py": "", "small.bin": b"1" * 1024})
    for name, size in (("data/huge.parquet", 400), ("model.pt", 150)):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as sparse:  # sparse: no disk used, and never read
            sparse.truncate(size * 1024 * 1024)
    selection = select_files(tmp_path)
    assert selection.total_bytes > MAX_UPLOAD_BYTES
    with pytest.raises(DeployError) as caught:
        check_size(selection)
    message = caught.value.message
    assert "550.0 MiB, over Ray's limit of 500.0 MiB" in message
    assert message.index("data/huge.parquet (400.0 MiB)") < message.index("model.pt (150.0 MiB)")
    assert ".gitignore or .rayignore" in (caught.value.hint or "")


@pytest.mark.slow
def test_dry_run_lists_the_files_and_their_size_and_keeps_stdout_the_config(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    write(project, {".env": "x", "helpers.py": "X = 1\n", "data/table.csv": "a,b\n1,2\n"})
    result = run_peach("deploy", str(project), "--dry-run", "--route-prefix", "/team")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["applications"][0]["route_prefix"] == "/team"
    assert "2 files, 14 B in the project package, uploaded once and shared" in result.stderr
    assert "  data/table.csv  8 B" in result.stderr and "  helpers.py  6 B" in result.stderr
    # every package a deploy sends, and their total: one project package, one spec each
    listed = re.findall(r"^  - (\S+)  ([\d.]+ K?i?B), (.*)$", result.stderr, re.MULTILINE)
    kinds = [name.split("_")[1] if name.startswith("peach_") else "project" for name, *_ in listed]
    assert sorted(kinds) == ["component", "component", "gateway", "project", "runtime"]
    assert "uploaded with each" not in result.stderr
    (total,) = re.findall(r"^([\d.]+ K?i?B) in 5 packages sent by a deploy", result.stderr, re.M)
    assert total.endswith("KiB")
    assert ".env" not in result.stderr.replace("dot-files", "")


@pytest.mark.slow
def test_a_dry_run_with_no_other_file_says_so_without_a_dangling_colon(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    result = run_peach("deploy", str(project), "--dry-run")
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "project package" in line]
    assert line.startswith("no other file, 0 B in the project package")
    assert not line.endswith(":")
    assert "file(s)" not in result.stderr


@pytest.mark.slow
def test_a_too_large_project_fails_the_dry_run_too_with_exit_1(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    with (project / "dump.sql").open("wb") as sparse:
        sparse.truncate(MAX_UPLOAD_BYTES + 1)
    result = run_peach("deploy", str(project), "--dry-run")
    assert result.returncode == 1
    assert "over Ray's limit" in result.stderr and "dump.sql (500.0 MiB)" in result.stderr
    assert "Traceback" not in result.stderr


def test_format_size():
    assert [human_size(n) for n in (5, 2048, 3 * 1024 * 1024)] == ["5 B", "2.0 KiB", "3.0 MiB"]


@pytest.mark.slow
def test_link_loops_in_the_project_are_skipped_without_a_traceback(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(BASIC, project)
    write(project, {"helpers.py": "X = 1\n"})
    (project / "a").symlink_to("b")
    (project / "b").symlink_to("a")  # a loop of two links
    (project / "data").mkdir()
    (project / "data" / "again").symlink_to("..")  # a folder that contains itself
    assert selected(project, ("peach.yaml",)) == ["helpers.py"]
    result = run_peach("deploy", str(project), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "a  skipped: a link that does not resolve" in result.stderr
