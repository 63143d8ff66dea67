"""The detail sections of the text report (`--show`), in print order; `--detail` prints them all. A module of
its own so the CLI can list them without importing the renderer."""

TEXT_SECTIONS = ("steps", "devices", "kernels", "ops", "layers", "repeats", "findings", "ranks")
