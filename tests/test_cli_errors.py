"""Every user mistake on the command line ends the same way: exit 2, one line
``gpusim: error: ...`` on stderr (argparse's mistakes too: no usage block), nothing on
stdout, no traceback anywhere, and no file written or half-written; under ``--json``, one
JSON document ``{"error": ..., "exit": 2}`` on stdout instead.

``gpusim.cli.commands.main`` runs in-process on generated mistakes: bad sizes, unknown models,
GPUs, modes, dtypes and algorithms, broken spec files and output paths that cannot be
written. File-descriptor capture (``capfd``) also sees what libraries log straight to the
process's stderr.
"""

import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.cli.commands import main
from gpusim.models.examples import EXAMPLES
from gpusim.hw.spec import known_names
from gpusim.hw.schema import OPTIONAL_MODEL, SECTIONS, builtin_dir
from gpusim.models.resolve import DTYPES
from gpusim.fusion.search import ALGOS
from gpusim.lower.modes import MODES

try:
    from gpusim.models.zoo import ZOO          # the zoo's names (its libraries are optional)
except ImportError:
    ZOO = {}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["add_relu_mul", "--size", "n=4096"]
FAST = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ONE_LINE = re.compile(r"^gpusim: error: \S")
# no NUL (argv cannot hold one) and no lone surrogates (not text)
TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


def run(capfd, argv):
    """``(rc, stdout, stderr)`` of ``gpusim ARGV``; a traceback escaping ``main`` fails
    the test with the exception itself."""
    capfd.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:             # argparse's own errors
        rc = e.code
    out, err = capfd.readouterr()
    return rc, out, err


def assert_user_error(capfd, argv):
    rc, out, err = run(capfd, argv)
    ctx = f"gpusim {argv!r} -> rc {rc!r}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert "Traceback" not in out + err, ctx
    assert rc not in (0, None), ctx
    assert out == "", ctx                # failed before printing anything
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1 and ONE_LINE.match(lines[0]), ctx
    assert rc == 2, ctx
    return err


# ---------------------------------------------------------------- sizes
def _valid_size(v: str) -> bool:
    """What ``--size key=V`` accepts: a whole number from 1 to 2**62."""
    try:
        f = float(v.strip())
    except ValueError:
        return False
    return math.isfinite(f) and f == int(f) and 1 <= f <= 2 ** 62


BAD_SIZE = st.one_of(
    st.integers(max_value=0).map(str),
    st.integers(min_value=2 ** 62 + 1).map(str),
    st.floats().map(repr),
    st.text(TEXT, max_size=8),
    st.sampled_from(["", " ", "nan", "-inf", "1e400", "4096.5", "0x10", "4_096.5", "four"]),
).filter(lambda v: not _valid_size(v))


def _assert_model_command_fails(capfd, cmd, args):
    """``gpusim CMD ARGS`` (with the arguments whatif and report need) is one user-error
    line, and writes nothing."""
    argv = [cmd, *args]
    with tempfile.TemporaryDirectory() as d:
        if cmd == "whatif":
            argv += ["--fuse", "add,relu"]
        if cmd == "report":
            argv += ["--out", os.path.join(d, "r.html")]
        assert_user_error(capfd, argv)
        assert os.listdir(d) == []


@FAST
@given(cmd=st.sampled_from(["predict", "search", "whatif", "report"]),
       item=st.one_of(BAD_SIZE.map(lambda v: f"n={v}"),
                      BAD_SIZE.map(lambda v: f"={v}"),
                      st.sampled_from(["n", "4096", "=4096", "m=4096", "N=4096"])),
       as_one_token=st.booleans())
def test_bad_sizes(capfd, cmd, item, as_one_token):
    size = [f"--size={item}"] if as_one_token else ["--size", item]
    _assert_model_command_fails(capfd, cmd, ["add_relu_mul", *size])


# ---------------------------------------------------------------- models
NAME = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"),
                             whitelist_characters="_.:/-"), min_size=1, max_size=20)


def _not_a_model(name: str) -> bool:
    path = name.rpartition(":")[0]
    return (name not in EXAMPLES and name not in ZOO
            and not (":" in name and os.path.isfile(path)))


@FAST
@given(name=st.one_of(NAME, st.sampled_from(["tv:nosuch", "hf:nosuch", "timm:nosuch", ":",
                                             "nofile.py:make", "a:b:c", "/:x", "Add_Relu_Mul"]))
       .filter(_not_a_model),
       cmd=st.sampled_from(["predict", "search", "report"]))
def test_unknown_models(capfd, tmp_path_factory, cmd, name):
    argv = [cmd, name]
    if cmd == "report":
        argv += ["--out", str(tmp_path_factory.getbasetemp() / "never.html")]
    assert_user_error(capfd, argv)
    assert not (tmp_path_factory.getbasetemp() / "never.html").exists()


def test_model_file_mistakes(capfd, tmp_path):
    """A model file that does not import, lacks the name, or returns the wrong thing."""
    bad = tmp_path / "m.py"
    bad.write_text("import torch\n"
                   "def ok():\n    return torch.relu, (torch.empty(8, device='meta'),)\n"
                   "def wrong():\n    return 3\n"
                   "def raises():\n    raise KeyError('boom')\n"
                   "NOT_CALLABLE = 1\n")
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    for spec in (f"{bad}:missing", f"{bad}:wrong", f"{bad}:raises", f"{bad}:NOT_CALLABLE",
                 f"{broken}:f", f"{tmp_path}:f"):
        assert_user_error(capfd, ["predict", spec])
    assert_user_error(capfd, ["predict", f"{bad}:ok", "--size", "n=4"])   # sizes: built-ins only
    rc, out, _ = run(capfd, ["predict", f"{bad}:ok"])
    assert rc == 0 and "relu" in out


# ---------------------------------------------------------------- GPUs and spec files
@FAST
@given(gpu=st.one_of(st.text(st.characters(whitelist_categories=("Ll", "Nd"),
                                           whitelist_characters="-._"), min_size=1, max_size=16),
                     st.sampled_from(["nofile.toml", "no/such/spec.toml", "a10", "H100 ", ""]))
       .filter(lambda g: g.lower() not in known_names()))
def test_unknown_gpus(capfd, gpu):
    assert_user_error(capfd, ["predict", *SMALL, "--gpu", gpu])


_REAL_SPEC = (builtin_dir() / "h100-sxm.toml").read_text()
_NUMERIC = {k for keys in SECTIONS.values() for k in keys} | set(OPTIONAL_MODEL) \
    | {"fp64", "fp32", "tf32_tc", "fp16_tc", "bf16_tc"}
_REQUIRED = {k for keys in SECTIONS.values() for k in keys} | {"name", "display_name", "fp64", "fp32",
                                                              "fp16_tc"}
_FIELD_LINES = [i for i, line in enumerate(_REAL_SPEC.splitlines())
                if re.match(r"^\w+ = ", line) and line.split(" = ")[0] in _NUMERIC | {"name", "display_name",
                                                                                     "source"}]


@st.composite
def broken_spec(draw):
    """A copy of a real spec with one field made wrong or one required field removed."""
    lines = _REAL_SPEC.splitlines()
    i = draw(st.sampled_from(_FIELD_LINES))
    key = lines[i].split(" = ")[0]
    if key in _REQUIRED and draw(st.booleans()):
        del lines[i]
    elif key in ("name", "display_name", "source"):
        lines[i] = f"{key} = " + draw(st.sampled_from(["0", '""', "[]", '"sideways"' if key == "source"
                                                       else "true"]))
    else:
        bad = ["0", "-1", '"fast"', "nan", "inf", "-inf", "true", "[1]", "{}", "1e400"]
        if key in ("sm_count", "registers_per_sm", "matmul_tile_m", "matmul_tile_n"):
            bad.append("1.5")
        if key.endswith("efficiency") or key == "l2_resident_fraction":
            bad.append("1.5")
        lines[i] = f"{key} = {draw(st.sampled_from(bad))}"
    return "\n".join(lines) + "\n"


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _assert_bad_spec(capfd, content):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "gpu.toml")
        with open(path, "wb" if isinstance(content, bytes) else "w") as f:
            f.write(content)
        err = assert_user_error(capfd, ["predict", *SMALL, "--gpu", path])
        assert path in err                   # the message names the file


@FAST
@given(content=st.one_of(st.binary(max_size=120).filter(_utf8), st.text(TEXT, max_size=120),
                         broken_spec()))
def test_bad_spec_files(capfd, content):
    _assert_bad_spec(capfd, content)


def test_spec_file_not_utf8(capfd):
    _assert_bad_spec(capfd, b"\x80name = 1\n")


# ---------------------------------------------------------------- output files
def _unwritable(root: str, ext: str) -> list[str]:
    afile = os.path.join(root, "a-file")
    with open(afile, "w") as f:
        f.write("x")
    return ["/proc/gpusim-x" + ext, "/no-such-folder/x" + ext, os.path.join(afile, "x" + ext),
            root, "/dev/null", "", os.path.join(root, "missing", "x" + ext)]


@FAST
@given(case=st.sampled_from([("predict", "--trace", ".json"), ("predict", "--dot", ".dot"),
                             ("predict", "--plot", ".png"), ("search", "--trace", ".json"),
                             ("search", "--plot", ".svg"), ("report", "--out", ".html"),
                             ("accuracy", "--plot", ".png"), ("predict", "--plot", ".jpg")]),
       which=st.integers(0, 6))
def test_unwritable_outputs(capfd, case, which):
    cmd, opt, ext = case
    with tempfile.TemporaryDirectory() as d:
        path = _unwritable(d, ext)[which]
        argv = [cmd] + ([] if cmd == "accuracy" else SMALL) + [opt, path]
        assert_user_error(capfd, argv)
        assert sorted(os.listdir(d)) == ["a-file"]      # nothing written, no temporary left
    assert not os.path.exists("/proc/gpusim-x" + ext)


def test_report_unwritable_fails_before_capture(capfd, monkeypatch):
    """The example from the issue: one line, exit 2, and the model is never captured."""
    from gpusim.cli import commands as cli

    def boom(*a, **k):
        raise AssertionError("captured before checking the output path")
    from gpusim.models import resolve as models
    monkeypatch.setattr(models, "model_graph", boom)
    err = assert_user_error(capfd, ["report", *SMALL, "--out", "/proc/x.html"])
    assert err.startswith("gpusim: error: cannot write /proc/x.html: ")


# ---------------------------------------------------------------- modes, dtypes, algorithms
@FAST
@given(opt_values=st.sampled_from([("--mode", MODES), ("--dtype", tuple(DTYPES)), ("--algo", ALGOS)])
       .flatmap(lambda ov: st.tuples(st.just(ov[0]),
                                     st.text(TEXT, max_size=12)
                                     .filter(lambda v: v.lower() not in ov[1]))),
       as_one_token=st.booleans(), cmd=st.sampled_from(["predict", "search", "whatif", "report"]))
def test_unknown_mode_dtype_algo(capfd, opt_values, as_one_token, cmd):
    opt, value = opt_values
    if opt == "--algo" and cmd not in ("search", "report"):
        cmd = "search"
    _assert_model_command_fails(capfd, cmd, [*SMALL] + ([f"{opt}={value}"] if as_one_token
                                                     else [opt, value]))


def test_other_mistakes(capfd, tmp_path):
    assert_user_error(capfd, ["whatif", *SMALL])                               # no --fuse
    assert_user_error(capfd, ["whatif", *SMALL, "--fuse", "add,nosuch"])
    assert_user_error(capfd, ["whatif", *SMALL, "--fuse", "add", "--fuse", "add"])
    assert_user_error(capfd, ["nosuchcommand"])
    assert_user_error(capfd, ["predict", *SMALL, "--nosuchflag"])
    assert_user_error(capfd, ["accuracy", "--results", str(tmp_path / "missing")])
    assert_user_error(capfd, ["accuracy", "--results", str(tmp_path)])         # no records
    assert_user_error(capfd, ["validate", "--out", "/proc/gpusim-results"])
    assert_user_error(capfd, ["calibrate", "--out", "/proc/gpusim.toml"])
    assert_user_error(capfd, ["calibrate", "--out", str(tmp_path / "f.toml"), "--forward-only"])
    assert_user_error(capfd, ["calibrate", "--out", str(tmp_path / "f.toml"), "--forward-only",
                              "--host-only"])


# ---------------------------------------------------------------- sizes too big for torch
def test_overflowing_size_is_one_line(capfd):
    assert_user_error(capfd, ["predict", "add_relu_mul", "--size", f"n={2 ** 62}"])


# ---------------------------------------------------------------- 99+ mistakes, every command
_MODEL_FILE = """import torch
def ok():
    return torch.relu, (torch.empty(8, device='meta'),)
def wrong():
    return 3
def raises():
    raise KeyError('boom')
def exits():
    raise SystemExit(3)
def untraceable():
    return (lambda x: x.reshape(3, 5)), (torch.empty(8, device='meta'),)
NOT_CALLABLE = 1
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A folder of broken inputs: model files and spec files of every wrong kind."""
    d = tmp_path_factory.mktemp("bad")
    (d / "m.py").write_text(_MODEL_FILE)
    (d / "broken.py").write_text("def f(:\n")
    (d / "import_raises.py").write_text("raise RuntimeError('no GPU driver')\n")
    (d / "import_exits.py").write_text("import sys\nsys.exit(4)\n")
    (d / "notes.txt").write_text("these are notes, not Python\n")
    (d / "blob.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (d / "a-file").write_text("x")
    (d / "empty").mkdir()
    (d / "dir.toml").mkdir()
    (d / "pkg.py").mkdir()
    lines = _REAL_SPEC.splitlines()
    (d / "bad_toml.toml").write_text("name = [\n")
    (d / "empty.toml").write_text("")
    (d / "no_sm.toml").write_text("\n".join(x for x in lines if not x.startswith("sm_count")))
    (d / "neg_bw.toml").write_text("\n".join(
        re.sub(r"^(\w*bandwidth\w*) = .*", r"\1 = -1", x) for x in lines))
    (d / "neg_cap.toml").write_text("\n".join(
        re.sub(r"^capacity_gib = .*", "capacity_gib = -80", x) for x in lines))
    return d


_BIG = 2 ** 62
BAD_ARGVS = [
    # sizes: negative, zero, not numbers, unknown keys, too large to describe
    "predict add_relu_mul --size n=-1", "predict add_relu_mul --size n=0",
    "predict add_relu_mul --size n=abc", "predict add_relu_mul --size n=",
    "predict add_relu_mul --size =4096", "predict add_relu_mul --size n",
    "predict add_relu_mul --size m=4096", "predict add_relu_mul --size N=4096",
    "predict add_relu_mul --size n=1.5", "predict add_relu_mul --size n=1e400",
    "predict add_relu_mul --size n=nan", "predict add_relu_mul --size n=-inf",
    f"predict add_relu_mul --size n={_BIG + 1}", f"predict add_relu_mul --size n={_BIG}",
    f"predict add_relu_mul --size n={_BIG - 1}", "predict add_relu_mul --size n=10**9",
    f"predict matmul_sigmoid --size m={2 ** 40} --size n={2 ** 40} --size k=1",
    "search add_relu_mul --size n=-5", "whatif add_relu_mul --size n=0 --fuse add,relu",
    "report add_relu_mul --size n=x --out {d}/r.html",
    "predict {d}/m.py:ok --size n=4", "predict add_relu_mul --size n=4096 --size n=8192",
    "predict transformer_block --size batch=1 --size seq=16 --size heads=5",
    # model names and files
    "predict nosuch", "predict ''", "predict tv:nosuch", "predict hf:nosuch",
    "predict timm:nosuch", "predict :", "predict a:b:c", "predict Add_Relu_Mul",
    "search nosuch", "whatif nosuch --fuse add,relu", "report nosuch --out {d}/r.html",
    "predict {d}/missing.py:make", "predict {d}/notes.txt:make", "predict {d}/blob.py:make",
    "predict {d}/broken.py:f", "predict {d}/import_raises.py:f", "predict {d}/import_exits.py:f",
    "predict {d}/m.py:missing", "predict {d}/m.py:", "predict {d}/m.py:NOT_CALLABLE",
    "predict {d}/m.py:wrong", "predict {d}/m.py:raises", "predict {d}/m.py:exits",
    "predict {d}/m.py:untraceable", "predict {d}:f", "predict {d}/empty:f",
    # GPUs and spec files
    "predict add_relu_mul --gpu nosuch", "predict add_relu_mul --gpu ''",
    "predict add_relu_mul --gpu h100x", "predict add_relu_mul --gpu {d}/missing.toml",
    "predict add_relu_mul --gpu {d}", "predict add_relu_mul --gpu {d}/bad_toml.toml",
    "predict add_relu_mul --gpu {d}/empty.toml", "predict add_relu_mul --gpu {d}/no_sm.toml",
    "predict add_relu_mul --gpu {d}/neg_bw.toml", "predict add_relu_mul --gpu {d}/neg_cap.toml",
    "predict add_relu_mul --gpu {d}/notes.txt", "search add_relu_mul --gpu nosuch",
    "predict add_relu_mul --gpu {d}/dir.toml", "predict {d}/pkg.py:f",
    "predict add_relu_mul --gpu h100 --gpu v100", "search add_relu_mul --gpu=h100 --gpu=h100",
    # dtypes, modes, algorithms
    "predict add_relu_mul --dtype int8", "predict add_relu_mul --dtype ''",
    "predict add_relu_mul --dtype 'fp 16'", "predict add_relu_mul --mode eagerly",
    "predict add_relu_mul --mode ''", "search add_relu_mul --mode graph",
    "search add_relu_mul --algo fast", "search add_relu_mul --algo ''",
    "report add_relu_mul --algo exact2 --out {d}/r.html",
    "predict add_relu_mul --dtype fp16 --dtype bf16", "predict add_relu_mul --algo greedy",
    # --memory-limit
    "search add_relu_mul --memory-limit lots", "search add_relu_mul --memory-limit -5",
    "search add_relu_mul --memory-limit 0", "search add_relu_mul --memory-limit inf",
    "search add_relu_mul --memory-limit nan", "search add_relu_mul --memory-limit 40XB",
    "search add_relu_mul --memory-limit ''", "search add_relu_mul --memory-limit GiB",
    "search add_relu_mul --memory-limit 1",
    # --fuse
    "whatif add_relu_mul", "whatif add_relu_mul --fuse ''", "whatif add_relu_mul --fuse add",
    "whatif add_relu_mul --fuse add,,relu", "whatif add_relu_mul --fuse ,",
    "whatif add_relu_mul --fuse add,nosuch", "whatif add_relu_mul --fuse add,mul",
    "whatif add_relu_mul --fuse add,relu --fuse relu,mul", "whatif add_relu_mul --fuse",
    "whatif add_relu_mul --fuse add,add", "whatif add_relu_mul --fuse add,relu,ADD",
    # missing arguments, unknown commands and options
    "report add_relu_mul", "calibrate", "validate", "predict --size", "predict --gpu",
    "accuracy --results", "nosuchcommand", "--nosuch", "predict --nosuch",
    "specs extra", "specs --nosuch", "examples extra", "examples --all",
    "predict add_relu_mul --out {d}/x.html", "search add_relu_mul --fuse add,relu",
    # outputs that cannot be written, or are the wrong kind of file
    "report add_relu_mul --out {d}/r.png", "report add_relu_mul --out {d}/r",
    "report add_relu_mul --out ''", "report add_relu_mul --out {d}",
    "report add_relu_mul --out /proc/x.html", "report add_relu_mul --out {d}/missing/r.html",
    "report add_relu_mul --out {d}/a-file/r.html",
    "predict add_relu_mul --trace /proc/x.json", "predict add_relu_mul --trace {d}/a-file/x.json",
    "predict add_relu_mul --trace {d}", "predict add_relu_mul --plot {d}/x.jpg",
    "predict add_relu_mul --plot {d}/x", "predict add_relu_mul --plot /proc/x.png",
    "search add_relu_mul --plot {d}/missing/x.svg", "predict add_relu_mul --dot /no/such/x.dot",
    "predict add_relu_mul --dot {d}", "search add_relu_mul --dot /dev/null",
    "accuracy --plot {d}/x.jpg", "accuracy --plot /proc/x.png",
    # the lab: no GPU here, no records there
    "calibrate --out {d}/x.toml", "calibrate --out /proc/x.toml",
    "calibrate --out {d}/x.toml --forward-only --host-only", "calibrate --out {d}/x.toml --base nosuch",
    "validate --out {d}/res", "validate --out /proc/res", "validate --out {d}/res --cases nosuch",
    "validate --out {d}/a-file", "accuracy --results {d}/missing", "accuracy --results {d}/empty",
    "accuracy --results {d}/a-file", "accuracy --results {d}/empty --gpu h100",
]


def _argv(line: str, d) -> list[str]:
    return shlex.split(line.replace("{d}", str(d)))


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _tree(d) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_at_least_99_mistakes_are_listed():
    assert len(set(BAD_ARGVS)) == len(BAD_ARGVS) >= 99


@pytest.mark.parametrize("line", BAD_ARGVS)
def test_mistake_is_one_line_exit_2(capfd, files, line):
    """Argument checks come before any capture, so each of these is quick; nothing is
    written into the folder of inputs."""
    if line.split()[0] in ("calibrate", "validate") and _cuda():
        pytest.skip("a CUDA GPU is here: the lab would measure it")
    before = _tree(files)
    assert_user_error(capfd, _argv(line, files))
    assert _tree(files) == before


@pytest.mark.parametrize("line", [x for x in BAD_ARGVS if x.split()[0] in
                                  ("predict", "search", "whatif", "report")][::4] + ["--nosuch"])
def test_mistake_under_json_is_one_json_document(capfd, files, line):
    rc, out, err = run(capfd, _argv(line, files) + ["--json"])
    assert rc == 2 and err == "" and "Traceback" not in out
    doc = json.loads(out)
    assert set(doc) == {"error", "exit"} and doc["exit"] == 2 and doc["error"]


@pytest.mark.parametrize("argv", [["predict", *SMALL, "--dtype", "FP16", "--mode", "COMPILED"],
                                  ["search", *SMALL, "--algo", "Greedy", "--mode", "Eager"],
                                  ["PREDICT", *SMALL, "--gpu", "H100", "--dtype", "BF16"]])
def test_choices_are_case_insensitive(capfd, argv):
    rc, out, err = run(capfd, argv + ["--json"])
    assert rc == 0 and json.loads(out), err


def test_too_big_for_the_gpu_says_so_and_what_to_do(capfd):
    rc, out, err = run(capfd, ["predict", "add_relu_mul", "--size", "n=2000000000", "--gpu", "v100"])
    assert rc == 0 and "does not fit on NVIDIA Tesla V100" in out, err
    assert "to fit" in out and "--size" in out and "device time" not in out


def test_help_never_imports_torch():
    """``gpusim --help`` and every ``gpusim CMD --help`` answer without importing torch."""
    code = ("import sys, gpusim.cli.commands as c\n"
            "c.build_parser(); assert 'torch' not in sys.modules\n"
            "for cmd in ([], ['predict'], ['search'], ['whatif'], ['report'], ['specs'],\n"
            "            ['examples'], ['calibrate'], ['validate'], ['accuracy']):\n"
            "    try:\n"
            "        c.main(cmd + ['--help'])\n"
            "    except SystemExit as e:\n"
            "        assert e.code == 0, cmd\n"
            "    assert 'torch' not in sys.modules, cmd\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_unknown_model_suggests_the_close_name(capfd):
    err = assert_user_error(capfd, ["predict", "Add_Relu_Mul"])
    assert "did you mean add_relu_mul?" in err


def test_plot_without_matplotlib_writes_nothing(capfd, tmp_path, monkeypatch):
    """No matplotlib: refused up front, so the --trace asked for beside it is not written."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib -> ImportError
    err = assert_user_error(capfd, ["predict", *SMALL, "--trace", str(tmp_path / "t.json"),
                                    "--plot", str(tmp_path / "p.png")])
    assert "matplotlib" in err and os.listdir(tmp_path) == []
