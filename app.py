"""traceview web app: `streamlit run app.py`.

Widgets, layout and calls to the public API only (the pages are in traceview/app/, one module per page): every
trace goes through `traceview.report.analyze` with the options that `traceview analyze` uses by default, and
the pages render the resulting document (docs/json-schema.md); the timeline comes from
`traceview.sections.timeline.timeline`, a layer's detail from `traceview.layer_detail.layer_detail`, the Diff page
from `traceview.ci.diff.diff`, the Trends page from `traceview.ci.history.check`. Any number shown is in those
outputs (µs shown as ms is µs / 1000). Every string taken from a trace is escaped before it reaches Markdown.
"""

from traceview.app.frame import main

main()
