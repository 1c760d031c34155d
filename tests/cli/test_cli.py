import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import contrastlab.experiments as experiments
from contrastlab import cli
from contrastlab.cli._options import split_arguments
from contrastlab.cli.data import DATA_FILES
from contrastlab.cli.train import load_job

REPO = Path(__file__).resolve().parents[2]
JOB = """
data: {latent_dim: 3, batch_size: 32}
encoder: {hidden: [16], out_dim: 3}
train: {steps: 12, log_every: 4, progress: false}
eval: {n: 64}
"""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(JOB)
    return p


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, err
    return err


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["bogus"], ["invalid choice: 'bogus'"]),
        (["train"], ["contrastlab train", "config"]),
        (["train", "missing.yaml"], ["missing.yaml does not exist"]),
        (["run"], ["--list"]),
        (["run", "nope"], ["unknown experiment 'nope'"]),
        (["report", "/nonexistent-run"], ["neither results.json nor metrics.jsonl"]),
        (["eval", "/nonexistent-run"], ["not a training run folder"]),
        (["data", "nope"], ["unknown dataset 'nope'"]),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, needles, capsys) -> None:
    assert cli.main(argv) == 2
    _one_line_error(capsys, *needles)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (["--loss.temprature", "3"], "loss.temprature is not a field of LossConfig"),
        (["--loss.temperature", "hot"], "loss.temperature must be a float"),
        (["--train.steps", "1.5"], "train.steps must be an int"),
        (["--loss.name", "triplet"], "loss.name 'triplet' is not a registered loss; known losses: "),
        (["--data.name", "mnist"], "data.name 'mnist' is not a registered dataset; known datasets: "),
        (["--encoder.name", "vgg"], "encoder.name 'vgg' is not a registered encoder; known encoders: "),
        (["--views.augment", "rotate"], "views.augment 'rotate' is not registered; known pipelines: "),
        (["--encoder.name", "cnn"], "encoder.name 'cnn' needs image data; data.name 'sphere' gives vectors"),
        (["--loss.name", "supcon"], "loss.name 'supcon' needs labels; data.name 'sphere' gives none"),
        (["--loss.options", "{'beta': 1}"], "loss.options.beta is not an option of loss 'info_nce'"),
        (["--train.steps"], "--train.steps needs a value"),
    ],
)
def test_bad_overrides_name_the_field(job: Path, override, needle, capsys) -> None:
    assert cli.main(["train", str(job), *override]) == 2
    _one_line_error(capsys, needle)


def test_bad_config_file_names_the_field(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[encoder]\nwidths = [3]\n")
    assert cli.main(["train", str(bad)]) == 2
    _one_line_error(capsys, "encoder.widths is not a field of EncoderConfig")


def test_help_everywhere(capsys) -> None:
    for argv in (["--help"], ["train", "--help"], ["eval", "--help"], ["report", "--help"], ["data", "--help"],
                 ["mine", "--help"]):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 0
    assert "--loss.temperature" in capsys.readouterr().out  # train --help lists the config fields
    assert cli.main(["run", "--help"]) == 0


def test_train_eval_report_round_trip(job: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", str(job), "--out", str(out), "--loss.temperature", "0.3"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert json.loads((out / "config.json").read_text())["loss"]["temperature"] == 0.3
    assert results["config"]["loss"]["temperature"] == 0.3 and "eval_latent_r2" in results["metrics"]
    assert cli.main(["eval", str(out)]) == 0
    ev = json.loads((out / "eval.json").read_text())
    assert ev["step"] == 12 and ev["metrics"]["loss"] == pytest.approx(results["metrics"]["eval_loss"], rel=1e-6)
    assert cli.main(["report", str(out)]) == 0
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert cli.main(["train", str(job), "--resume"]) == 2  # --resume needs --out


def _flip_a_weight_byte(path: Path) -> None:
    """Flip one bit in the middle of the largest weight's stored bytes (torch stores tensors uncompressed)."""
    import torch

    from contrastlab.train import load_checkpoint

    raw = max(load_checkpoint(path)["model"].values(), key=torch.Tensor.numel).numpy().tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(raw)
    assert at > 0
    data[at + len(raw) // 2] ^= 0x04
    path.write_bytes(bytes(data))


def _flip_a_byte_in(path: Path, needle: bytes, offset: int = 0) -> None:
    data = path.read_bytes()
    at = data.index(needle) + offset
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])


def test_corrupted_checkpoint_falls_back_with_one_warning_line(job: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", str(job), "--out", str(out), "--train.checkpoint_every", "6"]) == 0  # 6 and 12
    _flip_a_weight_byte(out / "checkpoint.pt")
    capsys.readouterr()
    assert cli.main(["eval", str(out)]) == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("contrastlab: warning: checkpoint "), err
    assert "checkpoint.pt is corrupted" in err and "falling back" in err
    assert json.loads((out / "eval.json").read_text())["step"] == 6


def test_both_checkpoints_corrupted_exit_2_in_a_subprocess(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", str(job), "--out", str(out), "--train.checkpoint_every", "6"]) == 0
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        _flip_a_weight_byte(out / name)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for argv in (["eval", str(out)], ["train", str(job), "--out", str(out), "--resume"]):
        proc = subprocess.run(
            [sys.executable, "-m", "contrastlab", *argv], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "checkpoint.prev.pt is corrupted" in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("contrastlab: ")
        assert len([line for line in proc.stderr.splitlines() if not line.startswith("contrastlab: warning:")]) == 1
    assert not (out / "eval.json").exists()


def test_corrupted_config_and_results_exit_2_naming_the_file(job: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", str(job), "--out", str(out), "--loss.temperature", "0.3"]) == 0
    capsys.readouterr()
    assert cli.main(["train", str(out / "config.json"), "--out", str(tmp_path / "again")]) == 0  # reusable config
    capsys.readouterr()
    _flip_a_byte_in(out / "config.json", b"0.3")  # a flipped bit that still parses: 0.3 -> 1.3
    assert cli.main(["eval", str(out)]) == 2
    _one_line_error(capsys, "config.json is corrupted")
    assert cli.main(["train", str(out / "config.json"), "--out", str(tmp_path / "third")]) == 2
    _one_line_error(capsys, "config.json is corrupted")
    _flip_a_byte_in(out / "results.json", b'"train_loss": ', offset=len('"train_loss": '))  # a digit: still JSON
    assert cli.main(["report", str(out)]) == 2
    _one_line_error(capsys, "results.json is corrupted")


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (RuntimeError("disk on fire"), 1, "RuntimeError: disk on fire"),  # a failure while running
        (  # missing data: a usage error
            FileNotFoundError("root: cifar10 files not found under data. Expected:\n  data/x\n  data/y"),
            2,
            "Expected: data/x data/y",
        ),
    ],
)
def test_a_failure_in_the_job_exits_with_its_code_and_one_line(
    job: Path, monkeypatch, capsys, error: Exception, code: int, line: str
) -> None:
    import contrastlab.train.job.runner as job_module

    def fail(*a, **k):
        raise error

    monkeypatch.setattr(job_module, "run_job", fail)
    assert cli.main(["train", str(job), "--out", "x"]) == code
    _one_line_error(capsys, line)


def test_run_list_help_and_quick(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(experiments, "__path__", [*experiments.__path__, str(REPO / "tests/experiments/plugins")])
    assert cli.main(["run", "--list"]) == 0
    assert "tiny-fit" in capsys.readouterr().out
    assert cli.main(["run", "tiny-fit", "--help"]) == 0
    assert "--temperature" in capsys.readouterr().out
    assert cli.main(["run", "tiny-fit", "--quick", "--steps", "ten"]) == 2
    _one_line_error(capsys, "steps must be an int")
    out = tmp_path / "r"
    assert cli.main(["run", "tiny-fit", "--quick", "--out", str(out), "--temperature", "0.4"]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["temperature"] == 0.4


def test_search_delegates_or_says_it_is_missing(monkeypatch, capsys) -> None:
    seen = []
    fake = types.ModuleType("contrastlab.cli.search")
    fake.main = lambda argv: seen.append(argv) or 7  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "contrastlab.cli.search", fake)
    assert cli.main(["search", "build", "--k", "3"]) == 7 and seen == [["build", "--k", "3"]]
    monkeypatch.setitem(sys.modules, "contrastlab.cli.search", None)  # import fails
    assert cli.main(["search"]) == 2
    _one_line_error(capsys, "not installed")


def test_data_lists_registered_files(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setitem(DATA_FILES, "toy", {"files": ["toy/a.bin"], "source": "hand-made"})
    assert cli.main(["data", "toy", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "toy: missing" in out and str(tmp_path / "toy/a.bin") in out
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy/a.bin").write_bytes(b"")
    assert cli.main(["data", "toy", "--root", str(tmp_path)]) == 0
    assert "toy: present" in capsys.readouterr().out


def test_ctrl_c_in_training_exits_130_after_checkpoint(job: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    import contrastlab.train.job.runner as job_module

    sphere = job_module.DATA_BUILDERS["sphere"]

    def interrupted_sphere(config):
        source = sphere(config)
        inner = source.batch_at

        def batch_at(step: int):
            if step == 5:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while step 5 runs
            return inner(step)

        source.batch_at = batch_at
        return source

    monkeypatch.setitem(job_module.DATA_BUILDERS, "interrupted", interrupted_sphere)
    out = tmp_path / "run"
    assert cli.main(["train", str(job), "--out", str(out), "--data.name", "interrupted"]) == 130
    assert "checkpoint saved" in capsys.readouterr().err
    from contrastlab.train import latest_checkpoint

    assert latest_checkpoint(out)["step"] == 6  # the running step finished, then the checkpoint
    assert cli.main(["train", str(job), "--out", str(out), "--resume"]) == 0
    assert json.loads((out / "results.json").read_text())["resumed_from"] == 6


@pytest.mark.slow
def test_python_m_contrastlab_ctrl_c_exits_130(tmp_path: Path) -> None:
    job = tmp_path / "long.yaml"
    job.write_text(JOB.replace("steps: 12", "steps: 100000"))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "contrastlab", "train", str(job), "--out", str(out)],
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    deadline = time.time() + 60
    while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "checkpoint saved" in err and "Traceback" not in err
    assert (out / "checkpoint.pt").is_file()


LIST_FIELDS = {  # a command that takes overrides → (its arguments, a list field, the values, the parsed value)
    "train": (["JOB"], "--encoder.hidden", ["16", "8"], (16, 8)),
    "run": (["progressive-violation"], "--generators", ["monomial", "linear"], ("monomial", "linear")),
    "audit": (["emb.npy"], "--ks", ["1", "3"], (1, 3)),
    "mine": (["emb.npy", "--out", "x.tsv"], "--num_negatives", ["2", "4"], None),  # MineConfig has no list field
}


def _config_of(command: str, argv: list[str]) -> object:
    """The config the command line ``argv`` of ``command`` resolves to (as the command builds it, not run)."""
    from contrastlab.audit import AuditConfig
    from contrastlab.config import apply_overrides, parse_overrides
    from contrastlab.experiments import resolve_config

    parser, subs = cli.build_parser()
    kept, rest, _ = split_arguments(subs[command], argv)
    args = parser.parse_args([command, *kept])
    if command == "train":
        return load_job(args.config, rest)
    if command == "run":
        return resolve_config(args.name, overrides=parse_overrides(rest))
    return apply_overrides(AuditConfig(), parse_overrides(rest))


@pytest.mark.parametrize("command", sorted(LIST_FIELDS))
def test_list_overrides_take_the_comma_and_the_bracketed_form_on_every_command(command: str, job: Path, capsys) -> None:
    from contrastlab.config import _hints, _list_type
    from contrastlab.mine import MineConfig

    head, flag, values, want = LIST_FIELDS[command]
    head = [str(job) if a == "JOB" else a for a in head]
    if want is None:  # nothing to parse: the command has no list field (the check below notices one added)
        assert not any(_list_type(tp) for tp in _hints(MineConfig).values())
    else:
        for form in (",".join(values), f"[{', '.join(values)}]", str(list(want))):  # str(): Python's repr
            cfg = _config_of(command, [*head, flag, form])
            node = cfg
            for part in flag[2:].split("."):
                node = getattr(node, part)
            assert node == want, form
    # values separated by spaces: one line naming both accepted forms, nothing run
    assert cli.main([command, *head, flag, *values]) == 2
    err = _one_line_error(capsys, f"{flag} takes one value", f"{flag} {','.join(values)}")
    assert f"{flag} '[{', '.join(values)}]'" in err
    capsys.readouterr()
    assert cli.main([command, *head, "--quiet" if command != "run" else "--quick", "stray", "--out", "x"]) == 2
    _one_line_error(capsys, "unrecognized arguments: stray")


def test_help_shows_lists_in_the_form_the_command_line_takes(capsys) -> None:
    assert cli.main(["run", "progressive-violation", "--help"]) == 0
    out = capsys.readouterr().out
    assert "[default: linear,monomial]" in out and "a list is comma-separated (a,b,c) or bracketed" in out
    assert "['linear'" not in out


@pytest.mark.parametrize(
    ("argv", "flag", "values"),
    [
        (["audit", "--ks", "1", "5"], "--ks", ["1", "5"]),  # no MODEL: the 5 is not one
        (["audit", "--compress_widths", "8", "16", "--quick"], "--compress_widths", ["8", "16"]),
        (["mine", "--num_negatives", "2", "4", "--out", "x.tsv"], "--num_negatives", ["2", "4"]),
    ],
)
def test_a_list_with_spaces_before_no_model_names_the_list_forms(
    argv: list[str], flag: str, values: list[str], capsys, tmp_path: Path, monkeypatch
) -> None:
    """Without MODEL, the value after a number's value is not taken for MODEL: one line naming the list forms."""
    monkeypatch.chdir(tmp_path)  # no file named 5, 16 or 4 here
    assert cli.main(argv) == 2
    err = _one_line_error(capsys, f"{flag} takes one value", f"{flag} {','.join(values)}", f"{flag} '[")
    assert "model" not in err
    assert list(tmp_path.iterdir()) == []  # nothing run, nothing written


def test_a_model_after_an_override_value_is_still_the_model(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for argv in (["audit", "--ks", "1,5", "none.npy"], ["audit", "--max_queries", "5", "none.npy"]):
        assert cli.main(argv) == 2
        _one_line_error(capsys, "audit: model: none.npy does not exist")
    (tmp_path / "5").mkdir()  # a folder named 5 is a MODEL
    assert cli.main(["audit", "--max_queries", "5", "5", "--quick"]) == 2
    assert "takes one value" not in capsys.readouterr().err
