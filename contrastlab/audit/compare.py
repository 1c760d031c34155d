"""``contrastlab compare A B [...]``: paired comparisons of audits on the same task(s), with what the data supports.

Each argument is one *model*: an audit folder (``results.json`` of ``contrastlab audit``), or a folder whose
sub-folders are audit folders, one per task (as ``contrastlab audit --task A --task B`` writes them). A model trained with several seeds is given as several *runs*:
``NAME=RUN[,RUN…]`` (each RUN an audit folder or a folder of per-task audits), or a folder whose sub-folders
are the runs (audits of the same task, or folders of per-task audits). The first model is the baseline;
every other is compared with it on every task they share — and they must share all of them — query by query:

* the per-query difference ``d_q = B_q − A_q`` of each metric, its mean and 95% percentile-bootstrap
  interval (:func:`contrastlab.eval.paired.bootstrap_difference`);
* the paired randomisation test's two-sided p-value (Smucker, Allan & Carterette 2007;
  :func:`contrastlab.eval.paired.randomization_test`), Holm-adjusted over every (model, task, metric) of
  the comparison (:func:`contrastlab.eval.paired.holm`);
* with several tasks, the mean over tasks of the per-task mean difference and its interval, queries
  resampled within each task (:func:`contrastlab.eval.paired.stratified_bootstrap`).

With several runs per model (every model at least two; one run each keeps the comparison above), the
difference is that of the means over runs and queries, its interval a two-level bootstrap (runs resampled
within each model, then queries; :func:`contrastlab.eval.seeds_queries.seed_query_bootstrap`), and its p-value
that of a t test with the seed as a random effect (method of moments with Satterthwaite's degrees of freedom;
:func:`contrastlab.eval.seeds_queries.seed_random_effect_test`), Holm-adjusted as above.

Two audits are paired only when they audited the same thing: the same task name and split, the same query
ids in the same order, the same corpus (ids and texts) and the same judgements (for audits on pairs, the same
pairs file and audited pairs). Anything else is refused with one line before anything is computed.

Each model is named by its audited model's description; where descriptions repeat (one model audited with
different settings), by the settings in which its audits differ, else by its folder. The output folder gets
``results.json`` (``comparisons``: one record per model × task × metric), a forest plot and the report.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contrastlab.eval.paired import bootstrap_difference, holm, randomization_test, stratified_bootstrap
from contrastlab.eval.seeds_queries import (
    seed_query_bootstrap,
    seed_random_effect_test,
    stratified_seed_query_bootstrap,
)
from contrastlab.io import read_json_verified

__all__ = ["CompareConfig", "AuditScores", "ModelRuns", "load_audits", "load_runs", "compare", "DEFAULT_METRICS"]

DEFAULT_METRICS = ("ndcg_at_10", "map_at_100", "recall_at_100", "mrr_at_10")
"""MTEB's names of the metrics compared by default on tasks (on pairs audits: ``recall@1`` and MRR)."""

_TREC = {"ndcg_at": "ndcg_cut", "map_at": "map_cut", "recall_at": "recall", "precision_at": "P", "mrr_at": "mrr_cut"}


@dataclass(frozen=True)
class CompareConfig:
    """How to compare."""

    metrics: tuple[str, ...] = DEFAULT_METRICS
    """metrics compared, by MTEB's names (ndcg_at_10, map_at_100, recall_at_100, precision_at_1, mrr_at_10, …); on audits of pairs: recall@1, mrr@K"""
    n_boot: int = 10_000
    """bootstrap resamples of each interval"""
    n_perm: int = 100_000
    """random sign flips of each randomisation test (exact enumeration up to 16 queries)"""
    alpha: float = 0.05
    """family-wise error rate of the Holm-adjusted decisions"""
    seed: int = 0
    """seeds the resamples and sign flips"""

    def __post_init__(self) -> None:
        if not self.metrics or not all(isinstance(m, str) and m for m in self.metrics):
            raise ValueError(f"metrics must be metric names, got {self.metrics!r}")
        for name in ("n_boot", "n_perm"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")


@dataclass(frozen=True)
class AuditScores:
    """One audit as a comparison reads it.

    Attributes:
        path: the audit folder.
        model: the audited model's description.
        key: what the audit was on (task name and split, or the pairs file): audits are matched by it.
        identity: every field two paired audits must share.
        queries: ``(Q,)`` the query ids (or pair indices) in order.
        per_query: metric name → ``(Q,)``.
        settings: the audit's ``config`` (empty when its results.json has none).
    """

    path: Path
    model: str
    key: str
    identity: dict[str, Any]
    queries: list[str]
    per_query: dict[str, np.ndarray]
    settings: dict[str, Any] = field(default_factory=dict)


def _trec_key(metric: str) -> str:
    """``ndcg_at_10`` → ``ndcg_cut_10`` (the task audit's per-query key); other names unchanged."""
    for mteb, trec in _TREC.items():
        if metric.startswith(mteb + "_"):
            return trec + metric[len(mteb) :]
    return metric


def _read_audit(folder: Path) -> AuditScores:
    """One audit folder's per-query scores and identity.

    Raises:
        ValueError: no results.json, not an audit, or an audit without per-query scores.
    """
    path = folder / "results.json"
    res = read_json_verified(path)  # a corrupted file fails here, named
    if res.get("name") != "audit" or not isinstance(res.get("per_query"), dict):
        raise ValueError(f"audits: {folder} is not an audit with per-query scores (results.json of contrastlab audit)")
    per = res["per_query"]
    if isinstance(res.get("task"), dict):
        task = res["task"]
        identity = {k: task.get(k) for k in ("name", "split", "queries", "corpus", "qrels")}
        queries = [str(q) for q in per["query_ids"]]
        key = f"{task['name']} ({task['split']})"
    else:
        pairs = res.get("pairs") or {}
        queries = [str(i) for i in per.get("pair_index", [])]
        identity = {"pairs": json.dumps(pairs, sort_keys=True), "queries": queries}
        key = str(pairs.get("path") or pairs.get("kind") or "pairs")
    scores = {
        name: np.asarray(v, dtype=np.float64)
        for name, v in per.items()
        if name not in ("query_ids", "pair_index") and isinstance(v, list)
    }
    return AuditScores(
        path=folder,
        model=str(res.get("model", folder.name)),
        key=key,
        identity=identity,
        queries=queries,
        per_query=scores,
        settings=dict(res["config"]) if isinstance(res.get("config"), dict) else {},
    )


def _suite_audits(folder: Path) -> list[Path] | None:
    """The per-task audit folders of an audit on several tasks (``contrastlab audit --task A --task B``), else None.

    Such a folder's own ``results.json`` is the table across its tasks (``name`` ``audit_tasks``); its
    ``tasks`` name the sub-folders, each a complete audit of one task.
    """
    path = folder / "results.json"
    if not path.is_file():
        return None
    res = read_json_verified(path)
    if res.get("name") != "audit_tasks":
        return None
    tasks = res.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) and isinstance(t.get("folder"), str) for t in tasks):
        raise ValueError(f"audits: {path} lists no per-task audit folders (tasks[].folder)")
    return [folder / t["folder"] for t in tasks]


def _is_one_audit(folder: Path) -> bool:
    """Whether ``folder`` is the audit of one task or of pairs (not the folder of an audit on several tasks)."""
    return (folder / "results.json").is_file() and _suite_audits(folder) is None


def load_audits(model: str | Path) -> list[AuditScores]:
    """A model's audits: the folder, an audit on several tasks' per-task audits, or the sub-folders with results.json.

    Sub-folders are taken sorted by name.

    Raises:
        ValueError: the folder is missing or holds no audit; two audits of one model on the same task.
    """
    folder = Path(model)
    if not folder.is_dir():
        raise ValueError(f"audits: {folder} is not a folder")
    suite = _suite_audits(folder)
    if suite is not None:
        audits = [_read_audit(p) for p in suite]
    elif (folder / "results.json").is_file():
        return [_read_audit(folder)]
    else:
        audits = [_read_audit(p) for p in sorted(folder.iterdir()) if (p / "results.json").is_file()]
    if not audits:
        raise ValueError(f"audits: {folder} holds no results.json, nor sub-folders with one")
    keys = [a.key for a in audits]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"audits: {folder} holds two audits on {dup}")
    return audits


@dataclass(frozen=True)
class ModelRuns:
    """One model as compare reads it: its runs (seeds), each a list of per-task audits.

    Attributes:
        name: the name given with ``NAME=RUN[,RUN…]`` (None: compare names the model).
        runs: one list of audits per run, every run on the same tasks.
    """

    name: str | None
    runs: list[list[AuditScores]]


def _run_folders(folder: Path) -> list[Path] | None:
    """The runs of a folder of runs, or None when ``folder`` is one run (an audit or a folder of per-task audits).

    A folder of runs holds sub-folders that are audits of one task (each a run of that task) or folders of
    per-task audits (each a run of those tasks).
    """
    if _suite_audits(folder) is not None:  # one run: an audit on several tasks
        return None
    subs = [p for p in sorted(folder.iterdir()) if p.is_dir()]
    audits = [p for p in subs if _is_one_audit(p)]
    nested = [
        p
        for p in subs
        if p not in audits
        and (_suite_audits(p) is not None or any((c / "results.json").is_file() for c in p.iterdir()))
    ]
    if audits and nested:
        raise ValueError(f"audits: {folder} holds both audits and folders of audits; give the runs one way")
    if nested:
        return nested
    keys = [_read_audit(p).key for p in audits]
    if len(keys) > 1 and len(set(keys)) == 1:
        return audits
    return None


def load_runs(model: str | Path) -> ModelRuns:
    """A model's runs: ``NAME=RUN[,RUN…]``, a folder of runs, or one run (:func:`load_audits`).

    Raises:
        ValueError: an empty name or run list, a run :func:`load_audits` refuses, runs on different tasks.
    """
    text = str(model)
    name: str | None = None
    if not Path(text).exists() and "=" in text:
        name, _, listed = text.partition("=")
        folders = [Path(f) for f in listed.split(",") if f]
        if not name or not folders:
            raise ValueError(f"models: {text!r} must read NAME=RUN[,RUN…] with a name and at least one run folder")
    else:
        folder = Path(text)
        if not folder.is_dir():
            raise ValueError(f"audits: {folder} is not a folder")
        folders = _run_folders(folder) or [folder]
    runs = [load_audits(f) for f in folders]
    keys = sorted(a.key for a in runs[0])
    for f, run in zip(folders[1:], runs[1:], strict=True):
        if sorted(a.key for a in run) != keys:
            raise ValueError(f"audits: {f} and {folders[0]} are runs of one model on different tasks")
        by_key = {a.key: a for a in run}
        for a in runs[0]:
            _check_pairable(a, by_key[a.key])
    return ModelRuns(name=name, runs=runs)


def _check_pairable(base: AuditScores, other: AuditScores) -> None:
    """Refuse, in one line, audits that did not audit the same queries of the same task and corpus."""
    for field_, what in (
        ("name", "tasks"),
        ("split", "splits"),
        ("pairs", "pairs files"),
        ("queries", "query sets"),
        ("corpus", "corpora"),
        ("qrels", "judgements"),
    ):
        if base.identity.get(field_) != other.identity.get(field_):
            raise ValueError(
                f"audits: {base.path} and {other.path} are on different {what} "
                f"({base.key} against {other.key}); a paired comparison needs the same queries of the same task"
            )


def _per_query(audit: AuditScores, metric: str) -> np.ndarray:
    key = _trec_key(metric)
    if key not in audit.per_query:
        known = ", ".join(sorted(audit.per_query))
        raise ValueError(f"metrics: {metric!r} is not among the per-query scores of {audit.path} ({known})")
    return audit.per_query[key]


_NOT_SETTINGS = frozenset({"task", "pairs", "progress"})
"""Config fields that do not name an audit: what it audited (audits are paired by content) and the display."""


def _shared_settings(audits: list[AuditScores]) -> dict[str, Any]:
    """The settings every audit of one model shares (a folder of per-task audits differs in its task)."""
    first = audits[0].settings
    return {
        k: v
        for k, v in first.items()
        if k not in _NOT_SETTINGS and all(k in a.settings and a.settings[k] == v for a in audits[1:])
    }


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _model_names(models: list[str | Path], loaded: list[list[AuditScores]]) -> tuple[list[str], str | None]:
    """How compare names each model: its model's description, or, where descriptions repeat, what differs.

    Models whose audited models' descriptions are all distinct keep them. Models that share one are told
    apart by the settings in which their audits differ (``max_seq_length=16``, ``query_prompt="query: "``),
    else by their folder's name, else by the folder as given and its position among the arguments. When
    every model shares one description, the names are these differences alone and the description is returned
    beside them, to be said once; otherwise a repeated description is followed by a comma and its difference.

    Args:
        models: the models as given (audit folders or folders of audit folders).
        loaded: each model's audits (:func:`load_audits`).

    Returns:
        ``(names, shared)``: one name per model, and the description every model shares (``None`` unless all
        share one).
    """
    plain = [audits[0].model for audits in loaded]
    if len(set(plain)) == len(plain):
        return plain, None
    settings = [_shared_settings(audits) for audits in loaded]
    names = list(plain)
    for description in dict.fromkeys(p for p in plain if plain.count(p) > 1):
        group = [i for i, p in enumerate(plain) if p == description]
        keys = dict.fromkeys(k for i in group for k in settings[i])
        differ = [k for k in keys if len({_show(settings[i].get(k)) for i in group}) > 1]
        candidates = (
            [", ".join(f"{k}={_show(settings[i].get(k))}" for k in differ) for i in group],
            [Path(models[i]).name for i in group],
            [str(models[i]) for i in group],
            [f"{models[i]} #{i + 1}" for i in group],
        )
        labels = next(c for c in candidates if all(c) and len(set(c)) == len(c))
        for i, label in zip(group, labels, strict=True):
            names[i] = label if len(set(plain)) == 1 else f"{description}, {label}"
    return names, plain[0] if len(set(plain)) == 1 else None


def compare(models: list[str | Path], out_dir: str | Path, config: CompareConfig | None = None) -> dict[str, Any]:
    """Compare every model with the first, per task and metric; write results.json, a forest plot and the report.

    Args:
        models: at least two models (audit folders, or folders of per-task audit folders).
        out_dir: the output folder.
        config: metrics, resamples, seed.

    Returns:
        The results dictionary (``comparisons``, ``across_tasks``), with ``out_dir``.

    Raises:
        ValueError: fewer than two models, a model without audits, audits on different tasks, splits, query
            sets, corpora or judgements, a metric an audit did not score — before anything is computed.
    """
    cfg = config or CompareConfig()
    if len(models) < 2:
        raise ValueError("models: compare needs at least two audits (or folders of audits)")
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc)
    given = [load_runs(m) for m in models]
    loaded = [g.runs[0] for g in given]
    base = loaded[0]
    base_keys = [a.key for a in base]
    for other, name in zip(loaded[1:], models[1:], strict=True):
        keys = [a.key for a in other]
        if len(base) == len(other) == 1:  # one audit each: say exactly what differs
            _check_pairable(base[0], other[0])
        if sorted(keys) != sorted(base_keys):
            raise ValueError(
                f"audits: {name} and {models[0]} are on different tasks ({', '.join(sorted(keys))} against "
                f"{', '.join(sorted(base_keys))}); compare audits of the same tasks"
            )
        by_key = {a.key: a for a in other}
        for a in base:
            _check_pairable(a, by_key[a.key])
    counts = [len(g.runs) for g in given]
    seeded = counts[0] > 1
    if any((c > 1) != seeded for c in counts):
        listed = ", ".join(f"{m}: {c}" for m, c in zip(models, counts, strict=True))
        raise ValueError(f"models: every model needs one run, or every model at least two (runs per model: {listed})")
    for g in given:
        for run in g.runs:
            for a in run:
                for metric in cfg.metrics:
                    _per_query(a, metric)

    names, shared = _model_names(models, loaded)
    names = [g.name or n for g, n in zip(given, names, strict=True)]
    rng = np.random.default_rng(cfg.seed)

    def scores(g: ModelRuns, key: str, metric: str) -> np.ndarray:
        """``(runs, Q)``: a model's per-query scores on one task, one row per run."""
        return np.stack([_per_query(next(a for a in run if a.key == key), metric) for run in g.runs])

    records: list[dict[str, Any]] = []
    for j in range(1, len(given)):
        for a in base:
            for metric in cfg.metrics:
                xs, ys = scores(given[0], a.key, metric), scores(given[j], a.key, metric)
                x, y = xs.mean(axis=0), ys.mean(axis=0)  # per query, averaged over runs
                record: dict[str, Any] = {
                    "model": j,
                    "baseline": names[0],
                    "other": names[j],
                    "task": a.key,
                    "metric": metric,
                    "queries": int(x.size),
                    "runs_baseline": int(xs.shape[0]),
                    "runs_other": int(ys.shape[0]),
                    "mean_baseline": float(xs.mean()),
                    "mean_other": float(ys.mean()),
                }
                if seeded:
                    mean, low, high = seed_query_bootstrap(xs, ys, n_boot=cfg.n_boot, rng=rng)
                    test = seed_random_effect_test(xs, ys)
                    record.update(p=test.p, df=test.df, seed_share=test.seed_share, test="seed random effect")
                else:
                    mean, low, high = bootstrap_difference(x, y, n_boot=cfg.n_boot, rng=rng)
                    record.update(p=randomization_test(x, y, n_perm=cfg.n_perm, rng=rng), test="randomisation")
                record.update(
                    difference=mean,
                    low=low,
                    high=high,
                    wins=int((y > x).sum()),
                    losses=int((y < x).sum()),
                    ties=int((y == x).sum()),
                )
                records.append(record)
    for r, p_adj in zip(records, holm([r["p"] for r in records]), strict=True):
        r["p_holm"] = float(p_adj)
        r["significant"] = bool(p_adj <= cfg.alpha)
    across: list[dict[str, Any]] = []
    if len(base) > 1:
        for j in range(1, len(given)):
            for metric in cfg.metrics:
                pairs = [(scores(given[0], a.key, metric), scores(given[j], a.key, metric)) for a in base]
                if seeded:
                    mean, low, high = stratified_seed_query_bootstrap(pairs, n_boot=cfg.n_boot, rng=rng)
                else:
                    mean, low, high = stratified_bootstrap([(x[0], y[0]) for x, y in pairs], n_boot=cfg.n_boot, rng=rng)
                across.append(
                    {"model": j, "metric": metric, "tasks": len(pairs), "difference": mean, "low": low, "high": high}
                )
    return _write(models, given, (names, shared), records, across, cfg, Path(out_dir), started, t0)


def _verdict(r: dict[str, Any]) -> str:
    if r["significant"]:
        return "better" if r["difference"] > 0 else "worse"
    return "not separable"


def _write(
    models: list[str | Path],
    given: list[ModelRuns],
    naming: tuple[list[str], str | None],
    records: list[dict[str, Any]],
    across: list[dict[str, Any]],
    cfg: CompareConfig,
    out: Path,
    started: _dt.datetime,
    t0: float,
) -> dict[str, Any]:
    import contrastlab
    from contrastlab.audit.output import write_run_folder
    from contrastlab.host import host_info

    t_report = time.perf_counter()
    names, shared = naming
    decided = [r for r in records if r["significant"]]
    sentences = []
    for r in records[: min(len(records), 4)]:
        sentences.append(
            f"{r['metric']} on {r['task']}: {r['other']} − {r['baseline']} = {r['difference']:+.4f} "
            f"[{r['low']:+.4f}, {r['high']:+.4f}], p = {r['p']:.3g} (Holm {r['p_holm']:.3g}): {_verdict(r)}"
        )
    runs = [len(g.runs) for g in given]
    if runs[0] > 1:
        how = f"over {'/'.join(map(str, runs))} runs and the queries"
        test = "t test with the seed as a random effect; intervals resample runs, then queries"
    else:
        how, test = "query by query", "paired randomisation test"
    who = (
        f"{len(names)} audits of {shared}, told apart by what differs: {len(names) - 1} compared with {names[0]}"
        if shared is not None
        else f"{len(names) - 1} model(s) compared with {names[0]}"
    )
    summary = (
        f"{who} on {len(given[0].runs[0])} task(s) × {len(cfg.metrics)} "
        f"metric(s), {how}: {len(decided)} of {len(records)} differences are separable at a family-wise "
        f"α = {cfg.alpha:g} ({test}, Holm-adjusted). " + "; ".join(sentences) + "."
    )
    table = {
        "title": (
            "Paired differences (other − baseline) over runs and queries: mean, 95% two-level bootstrap interval "
            "(runs, then queries), random-effect t test p (Holm-adjusted)"
            if runs[0] > 1
            else "Paired differences (other − baseline): mean, 95% bootstrap interval, randomisation p (Holm-adjusted)"
        ),
        "columns": [
            "model",
            "task",
            "metric",
            "baseline",
            "other",
            "Δ",
            "low",
            "high",
            "p",
            "p (Holm)",
            "W/L/T",
            "verdict",
        ],
        "rows": [
            [
                r["other"],
                r["task"],
                r["metric"],
                r["mean_baseline"],
                r["mean_other"],
                r["difference"],
                r["low"],
                r["high"],
                r["p"],
                r["p_holm"],
                f"{r['wins']}/{r['losses']}/{r['ties']}",
                _verdict(r),
            ]
            for r in records
        ],
    }
    tables = [table]
    if across:
        tables.append(
            {
                "title": "Mean difference over tasks ("
                + ("runs resampled, then " if runs[0] > 1 else "")
                + "queries resampled within each task)",
                "columns": ["model", "metric", "tasks", "Δ", "low", "high"],
                "rows": [
                    [names[a["model"]], a["metric"], a["tasks"], a["difference"], a["low"], a["high"]] for a in across
                ],
            }
        )
    results: dict[str, Any] = {
        "name": "compare",
        "summary": summary,
        "metrics": {f"{r['metric']}:{r['task']}:{r['model']}": r["difference"] for r in records},
        "tables": tables,
        "figures": [],
        "models": [str(m) for m in models],
        "model_names": names,
        "comparisons": records,
        "across_tasks": across,
        "audits": [[str(a.path) for run in g.runs for a in run] for g in given],
        "runs": runs,
        "config": asdict(cfg),
        "timing": {"stages": {}},
        "version": contrastlab.__version__,
        "timestamp": started.isoformat(timespec="seconds"),
        "host": host_info(),
        "argv": list(sys.argv),
    }

    def draw(stage: Path) -> list[dict[str, str]]:
        from contrastlab.audit.figures import plot_forest

        title = f"{shared}: paired differences against {names[0]}" if shared is not None else ""
        plot_forest(records, across, names, stage / "forest.png", title=title)
        return [
            {
                "file": "forest.png",
                "caption": "Paired differences with 95% bootstrap intervals; filled: separable after Holm's "
                "adjustment. The dashed line is no difference.",
            }
        ]

    return write_run_folder(results, out, draw, t0=t0, t_report=t_report)
