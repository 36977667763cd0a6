"""Reports, one room: the findings per epoch and host (findings.py: collected once, printed in the terminal), the
self-contained HTML page (html.py), and the restitution reports (restitution/: Markdown, CSV, the HTML section, the
governance proposal)."""
