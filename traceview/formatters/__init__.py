"""One module per output format: render(report_dict, stream)."""

# detail sections of the text report (`--show`), in print order; --detail prints all
TEXT_SECTIONS = ("steps", "devices", "kernels", "ops", "layers", "repeats", "findings", "ranks")
