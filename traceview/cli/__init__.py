"""The `traceview` command line: analyze, rules, layers and the CI commands."""
