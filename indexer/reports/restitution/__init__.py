"""Restitution reports: per epoch, the hosts whose epoch outcome the disputable penalties changed, what the chain
took from them, the evidence and the parameters in force (api.restitution_impact, api.policy_whatif).

`collect` reads only the api views; `markdown` turns one epoch's case into Markdown and CSV, `render` into an HTML
fragment plus chart data and the closing summary (docs/restitution.md)."""
from indexer.reports.restitution.collect import EpochCase, collect
from indexer.reports.restitution.markdown import markdown, rows_csv, write_reports
from indexer.reports.restitution.render import html_block, html_section, restitution_summary

__all__ = ["EpochCase", "collect", "html_block", "html_section", "markdown", "restitution_summary", "rows_csv", "write_reports"]
