"""The recipe command: its file checked key by key, the task's one split read, mining inside, OUT/model left."""

import json
from pathlib import Path

import pytest

from contrastlab.config import ConfigError, from_dict
from contrastlab.experiments import run_experiment
from contrastlab.experiments.recipe import Config, read_recipe, run, task_pairs
from contrastlab.tasks import read_beir_task
from contrastlab.train.job.config import JobConfig
from tests.models.text_models import write_tiny_bert

REPO = Path(__file__).resolve().parents[2]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def write_train_task(root: Path, n_docs: int = 100, n_queries: int = 60) -> Path:
    """A BEIR folder whose train qrels judge one or two documents per query, and a test split that is garbage."""
    root.mkdir(parents=True)
    docs = [f"{WORDS[j % len(WORDS)]} {WORDS[(7 * j) % len(WORDS)]} text number {j}" for j in range(n_docs)]
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{j}", "text": t}) + "\n" for j, t in enumerate(docs))
    )
    queries = [{"_id": f"q{i}", "text": f"which text says {WORDS[i % len(WORDS)]} {i}"} for i in range(n_queries)]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    lines = ["query-id\tcorpus-id\tscore"]
    for i in range(n_queries):
        lines += [f"q{i}\td{i}\t1"] + ([f"q{i}\td{i + 1}\t2", f"q{i}\td{i + 2}\t0"] if i % 3 == 0 else [])
    (root / "qrels").mkdir()
    (root / "qrels" / "train.tsv").write_text("\n".join(lines) + "\n")
    (root / "qrels" / "test.tsv").write_text("not\ta qrels file\n")  # read, it would fail: the recipe must not
    return root


def write_recipe(path: Path, model: Path, mine: str) -> Path:
    path.write_text(
        f"""job:
  encoder: {{name: sentence_transformers, path: "{model}", out_dim: 16, max_seq_length: 24}}
  loss: {{name: info_nce, temperature: 0.1}}
  train: {{log_every: 1, device: cpu, optim: {{name: adamw, lr: 0.0001}}}}
  eval: {{n: 2}}
batch_size: 4
epochs: 2
mine: {mine}
"""
    )
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("recipe")
    return write_tiny_bert(root / "st", "st"), write_train_task(root / "task")


def test_task_pairs_are_every_judgement_above_zero_query_by_query(world) -> None:
    _, task_dir = world
    anchors, positives = task_pairs(read_beir_task(task_dir, "train"))
    assert len(anchors) == 60 + 20  # one judgement each, a second relevant one for q0, q3, …, q57
    assert anchors[:3] == ["which text says alpha 0"] * 2 + ["which text says beta 1"]
    assert positives[1] == "beta theta text number 1"  # d1 for q0 (grade 2); d2 (grade 0) is not a pair


@pytest.mark.parametrize("mine", ["null", "{num_negatives: 1, max_probability: 0.9, temperature: 0.1}"])
def test_the_recipe_trains_on_the_split_and_leaves_a_sentence_transformers_folder(world, tmp_path, mine) -> None:
    model, task_dir = world
    recipe = write_recipe(tmp_path / "recipe.yaml", model, mine)
    res = run(Config(task=str(task_dir), recipe=str(recipe), seed=1), tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "model" / "config_sentence_transformers.json").is_file()
    record = json.loads((out / "recipe.json").read_text())
    assert record["pairs"] == 80 and record["steps"] == 2 * (80 // 4)
    assert res["metrics"]["steps"] == record["steps"]
    train = json.loads((out / "train" / "results.json").read_text())
    assert train["config"]["train"]["seed"] == 1
    if mine == "null":
        assert train["config"]["data"]["name"] == "sources" and not (out / "mined.jsonl").exists()
    else:
        assert train["config"]["data"]["name"] == "text"
        rows = [json.loads(line) for line in (out / "mined.jsonl").read_text().splitlines()]
        assert rows and all(len(r) == 3 for r in rows)  # anchor, positive, one negative


def test_the_recipe_runs_as_an_experiment(world, tmp_path) -> None:
    model, task_dir = world
    recipe = write_recipe(tmp_path / "recipe.yaml", model, "null")
    res = run_experiment("recipe", {}, tmp_path / "run", overrides={"task": str(task_dir), "recipe": str(recipe)})
    assert (tmp_path / "run" / "model").is_dir() and (tmp_path / "run" / "results.json").is_file()
    assert res["config"]["task"] == str(task_dir)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job: {}\nbatch_size: 4\nepochs: 1\n", "must have exactly the keys"),
        ("job: {}\nbatch_size: 4\nepochs: 1\nmine: null\nextra: 1\n", "must have exactly the keys"),
        ("job: {}\nbatch_size: 4\nepochs: 0\nmine: null\n", "epochs must be an int >= 1"),
        ("job: {}\nbatch_size: 2.5\nepochs: 1\nmine: null\n", "batch_size must be an int >= 1"),
        ("job: {data: {name: text}}\nbatch_size: 4\nepochs: 1\nmine: null\n", "without data and train.steps"),
        ("job: {train: {steps: 3}}\nbatch_size: 4\nepochs: 1\nmine: null\n", "without data and train.steps"),
        ("job: {}\nbatch_size: 4\nepochs: 1\nmine: 3\n", "mine is a table"),
    ],
)
def test_a_bad_recipe_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_recipe(str(path))


def test_a_missing_recipe_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="recipe: no recipe file at"):
        read_recipe(str(tmp_path / "none.yaml"))


def test_the_shipped_recipe_is_a_valid_job() -> None:
    recipe = read_recipe(str(REPO / "configs" / "recipe.yaml"))
    job = from_dict(JobConfig, {**recipe["job"], "data": {"name": "text", "batch_size": recipe["batch_size"]}})
    assert job.encoder.name == "minilm"
