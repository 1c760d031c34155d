"""contrastlab.report: ``report.md`` and a self-contained ``report.html`` from run folders."""

from contrastlab.report.report import RunData, audits_a_real_model, load_run, write_report

__all__ = ["write_report", "load_run", "RunData", "audits_a_real_model"]
