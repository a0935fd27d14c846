"""Pictures of a prediction: what a performance engineer looks at first.

Every picture is drawn from the same data, a :class:`~gpusim.predict.pipeline.Prediction` or a
:class:`~gpusim.fusion.search.SearchResult` (an unfused and a fused prediction), and written
atomically after :func:`check_target` has said, before any slow work, that the file can
be written. None needs a network; only the raster plot (``--plot``) needs matplotlib,
the optional ``plot`` extra. One module per picture:

``trace``     ``--trace F.json``: the simulated first call as a Chrome/Perfetto trace
              (:func:`trace_output`, :func:`trace_document`).
``roofline``  ``--plot F.png|svg|pdf`` (:func:`plot_output`, matplotlib) and the
              report's hand-drawn :func:`roofline_svg`.
``timeline``  :func:`timeline_svg`: host and GPU lanes on one time axis.
``graph``     ``--dot F.dot``: the fused graph in Graphviz DOT (:func:`dot_output`,
              :func:`dot_document`) and the report's kernel-level :func:`graph_svg`.
``html``      ``gpusim report``: one self-contained page (:func:`report_html`).
(A sweep's page, ``gpusim sweep report``, is the sweep's own: :mod:`gpusim.sweep.page`.)

Numbers, bytes and times are written as :mod:`gpusim.util.fmt` writes them. The accuracy
plot (``gpusim accuracy --plot``) lives with the accuracy data, in
:mod:`validation.reports.plot`.
"""

from gpusim.report.viz.common import (BOUND_COLOURS, BOUNDS, check_target, html_target, kernel_tip, ops_text,
                     plot_format, runs_of, write_atomic)
from gpusim.report.viz.graph import dot_document, dot_output, graph_svg, kernel_graph, render_dot
from gpusim.report.viz.html import kernel_table, report_html, timeline_page
from gpusim.report.viz.roofline import (FusionMove, RoofPoint, fusion_moves, plot_output, roofline_figure,
    roofline_points, roofs, unit_name)
from gpusim.report.viz.roofline_svg import roofline_svg
from gpusim.report.viz.timeline import timeline_svg
from gpusim.report.viz.trace import (TID_GPU, TID_HOST, TID_IDLE, TID_MEASURED, record_kernels, trace_document,
                    trace_output)

__all__ = [
    "BOUND_COLOURS", "BOUNDS", "check_target", "html_target", "kernel_tip", "ops_text", "plot_format",
    "runs_of", "write_atomic",
    "dot_document", "dot_output", "graph_svg", "kernel_graph", "render_dot",
    "kernel_table", "report_html", "timeline_page",
    "FusionMove", "RoofPoint", "fusion_moves", "plot_output", "roofline_figure",
    "roofline_points", "roofline_svg", "roofs", "unit_name",
    "timeline_svg",
    "TID_GPU", "TID_HOST", "TID_IDLE", "TID_MEASURED", "record_kernels", "trace_document",
    "trace_output",
]
