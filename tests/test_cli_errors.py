"""Every user mistake on the command line ends the same way: a non-zero exit, one line
``gpusim: error: ...`` on stderr (or argparse's usage and its one error line), nothing on
stdout, no traceback anywhere, and no file written or half-written.

``gpusim.cli.main`` runs in-process on generated mistakes: bad sizes, unknown models,
GPUs, modes, dtypes and algorithms, broken spec files and output paths that cannot be
written. File-descriptor capture (``capfd``) also sees what libraries log straight to the
process's stderr.
"""

import math
import os
import re
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.cli import main
from gpusim.examples import EXAMPLES
from gpusim.hardware import OPTIONAL_MODEL, SECTIONS, builtin_dir, known_names
from gpusim.models import DTYPES
from gpusim.search import ALGOS
from gpusim.simulate import MODES

try:
    from gpusim.zoo import ZOO          # the zoo's names (its libraries are optional)
except ImportError:
    ZOO = {}

SMALL = ["add_relu_mul", "--size", "n=4096"]
FAST = settings(max_examples=30, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ONE_LINE = re.compile(r"^gpusim: error: \S")
ARGPARSE_LINE = re.compile(r"^gpusim(?: [\w-]+)?: error: ")
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
    if lines[0].startswith("usage:"):    # argparse: usage lines, then one error line
        assert rc == 2, ctx
        assert [bool(ARGPARSE_LINE.match(x)) for x in lines].count(True) == 1, ctx
        assert ARGPARSE_LINE.match(lines[-1]), ctx
    else:
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
    import gpusim.cli as cli

    def boom(*a, **k):
        raise AssertionError("captured before checking the output path")
    import gpusim.models as models
    monkeypatch.setattr(models, "model_graph", boom)
    err = assert_user_error(capfd, ["report", *SMALL, "--out", "/proc/x.html"])
    assert err.startswith("gpusim: error: cannot write /proc/x.html: ")


# ---------------------------------------------------------------- modes, dtypes, algorithms
@FAST
@given(opt_values=st.sampled_from([("--mode", MODES), ("--dtype", tuple(DTYPES)), ("--algo", ALGOS)])
       .flatmap(lambda ov: st.tuples(st.just(ov[0]),
                                     st.text(TEXT, max_size=12).filter(lambda v: v not in ov[1]))),
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
