"""One module per output format: render(report_dict, stream)."""
